"""filterlib.rebuild.dumpregistry.load_registry against 5.3.3's consumerFilter.json format and ConfigManager.load."""

from __future__ import annotations

import json

import pytest

from filterlib.rebuild import dumpregistry as dr
from filterlib.store.storedir import StoreDir
from filterlib.subscriptions import POSTED, Subscription

M, K = 112, 3  # BloomFilter.createByFn(20, 32): k = ceil(log0.5(0.2)) = 3, m = 8 * ceil(ceil(32 * 2.32 * 1.44) / 8)


def record(group, topic, expression, born, dead=0, version=1, bits=(5, 40, 99), bloom=True, type_="SQL92"):
    """A ConsumerFilterData bean as fastjson writes it (fields in name order, the derived `dead` included)."""
    out = {"bornTime": born, "clientVersion": version, "consumerGroup": group, "dead": dead >= born,
           "deadTime": dead, "expression": expression, "expressionType": type_, "topic": topic}
    if bloom:
        out = {"bloomFilterData": {"bitNum": M, "bitPos": list(bits)}, **out}
    return out


def filter_file(*records):
    """consumerFilter.json's text: filterDataByTopic → FilterDataMapByTopic {groupFilterData, topic}, tab-indented
    as RemotingSerializable.toJson(this, true) writes it."""
    by_topic = {}
    for r in records:
        by_topic.setdefault(r["topic"], {"groupFilterData": {}, "topic": r["topic"]})["groupFilterData"][
            r["consumerGroup"]] = r
    return json.dumps({"filterDataByTopic": by_topic}, indent="\t", separators=(",", ":"))


def store(tmp_path, text=None, bak=None):
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / ("0" * 20)).write_bytes(b"\0" * 4096)
    config = tmp_path / "config"
    config.mkdir()
    path = config / "consumerFilter.json"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    if bak is not None:
        (config / "consumerFilter.json.bak").write_text(bak, encoding="utf-8")
    return StoreDir(str(tmp_path)), str(path)


SUBS = [Subscription("G", "T", "SQL92", "a > 1", sub_version=3),
        Subscription("H", "T", "TAG", "TagA"),
        Subscription("P", "T", "SQL92", "b = 1", POSTED),
        Subscription("Bad", "T", "SQL92", "a >")]


def test_without_a_registry_file_the_files_registered_sql92_subscriptions_count_with_born_time_0(tmp_path):
    sd, _ = store(tmp_path)
    out = dr.load_registry(sd, 20, 32, SUBS)
    assert out.dump_registry is None and out.issues == []
    assert out.added == [SUBS[0]] and out.left_out == []  # TAG and posted subscriptions are never registered
    data = out.registry.get("T", "G")
    assert (data.born_time, data.expression, data.client_version) == (0, "a > 1", 3)
    assert out.registry.get("T", "Bad") is None  # the broker keeps a selector that does not compile out
    rows = {r["consumer_group"]: r for r in out.rows}
    assert set(rows) == {"G", "Bad"}
    g = rows["G"]
    assert (g["source"], g["registered"], g["compiled"], g["born_time"], g["compile_error"]) == \
        (dr.SUBSCRIPTIONS, True, True, 0, None)
    assert g["bloom_bit_num"] == M and len(g["bloom_bit_pos"]) == K
    bad = rows["Bad"]
    assert (bad["source"], bad["registered"], bad["compiled"]) == (dr.SUBSCRIPTIONS, False, False)
    assert bad["compile_error"] and "\n" not in bad["compile_error"]
    assert out.failed == [bad]
    assert "no readable consumerFilter.json" in out.rule_line() and "(G, T)" in out.rule_line()


def test_no_file_and_no_subscriptions(tmp_path):
    sd, _ = store(tmp_path)
    (tmp_path / "config").rmdir()  # no config directory at all
    out = dr.load_registry(sd, 20, 32)
    assert (out.dump_registry, out.rows, out.added, out.left_out, out.issues) == (None, [], [], [], [])
    assert out.registry.records() == []
    assert out.rule_line().endswith("(none)")


def test_the_dumps_registry_is_loaded_and_rows_keep_the_files_dead_time(tmp_path):
    text = filter_file(record("G", "T", "a > 1", born=1000, version=4, bits=(1, 2, 3)),
                       record("Old", "T", "b < 2", born=4000, dead=5000, bits=(7, 8, 9)),
                       record("G", "U", "c IS NULL", born=2000))
    sd, path = store(tmp_path, text)
    out = dr.load_registry(sd, 20, 32, SUBS)
    assert out.dump_registry == path and out.issues == []
    rows = {(r["consumer_group"], r["topic"]): r for r in out.rows}
    assert set(rows) == {("G", "T"), ("Old", "T"), ("G", "U")}
    assert all(r["source"] == dr.DUMP and r["registered"] and r["compiled"] for r in out.rows)
    g = rows[("G", "T")]
    assert (g["expression"], g["expression_type"], g["client_version"], g["born_time"]) == ("a > 1", "SQL92", 4, 1000)
    assert (g["bloom_bit_pos"], g["bloom_bit_num"]) == ([1, 2, 3], M)
    # the broker's load marks a live record dead (now - 30 s); the row keeps the file's deadTime and liveness
    assert out.registry.get("T", "G").is_dead()
    assert (g["dead_time"], g["dead"]) == (0, False)
    assert (rows[("Old", "T")]["dead_time"], rows[("Old", "T")]["dead"]) == (5000, True)
    # with a registry in the dump, the file's subscriptions it does not hold are left out, not registered
    assert out.added == []
    assert out.left_out == [SUBS[3]]  # (G, T) is held; TAG and posted ones never count
    assert out.registry.get("T", "Bad") is None
    assert path in out.rule_line() and "(Bad, T)" in out.rule_line()


def test_a_record_that_does_not_compile_stays_uncompiled(tmp_path):
    sd, _ = store(tmp_path, filter_file(record("G", "T", "a > 1", born=1), record("B", "T", "a >", born=1)))
    out = dr.load_registry(sd, 20, 32)
    bad = next(r for r in out.rows if r["consumer_group"] == "B")
    assert (bad["registered"], bad["compiled"], bad["source"]) == (True, False, dr.DUMP)
    assert bad["compile_error"]
    assert out.failed == [bad]
    assert out.registry.get("T", "B") is not None and out.registry.get("T", "B").compiled is None


def test_an_unreadable_file_falls_back_to_its_bak_with_an_issue_naming_it(tmp_path):
    good = filter_file(record("G", "T", "a > 1", born=10))
    sd, path = store(tmp_path, good[:len(good) // 2], bak=good)  # truncated by a full disk
    out = dr.load_registry(sd, 20, 32)
    assert out.dump_registry == path + ".bak"
    assert out.registry.get("T", "G").expression == "a > 1"
    assert len(out.issues) == 1 and path in out.issues[0] and "unreadable" in out.issues[0]


def test_a_null_group_map_is_unreadable_as_the_brokers_npe(tmp_path):
    """decode iterates getGroupFilterData().entrySet(): null throws, load() goes on to loadBak()."""
    text = json.dumps({"filterDataByTopic": {"T": {"groupFilterData": None, "topic": "T"}}})
    sd, path = store(tmp_path, text, bak=filter_file(record("G", "T", "a > 1", born=10)))
    out = dr.load_registry(sd, 20, 32)
    assert out.dump_registry == path + ".bak" and any(path in i and "unreadable" in i for i in out.issues)


@pytest.mark.parametrize("text", ["[1, 2]", "42", '{"filterDataByTopic": [1]}', '{"filterDataByTopic": {"T": 5}}',
                                  '{"filterDataByTopic": {"T": {"groupFilterData": {"G": 5}, "topic": "T"}}}'])
def test_json_that_is_not_the_brokers_bean_shape_is_unreadable_and_the_bak_serves(tmp_path, text):
    """fastjson throws where an object must stand and holds something else; ConfigManager.load goes on to
    loadBak()."""
    sd, path = store(tmp_path, text, bak=filter_file(record("G", "T", "a > 1", born=10)))
    out = dr.load_registry(sd, 20, 32)
    assert out.dump_registry == path + ".bak" and out.registry.get("T", "G").expression == "a > 1"
    assert len(out.issues) == 1 and path in out.issues[0] and "not a JSON object" in out.issues[0]


def test_a_missing_or_empty_file_uses_the_bak_without_an_issue(tmp_path):
    bak = filter_file(record("G", "T", "a > 1", born=10))
    sd, path = store(tmp_path, None, bak=bak)
    out = dr.load_registry(sd, 20, 32)
    assert out.dump_registry == path + ".bak" and out.issues == [] and len(out.rows) == 1
    (tmp_path / "config" / "consumerFilter.json").write_text("")
    out = dr.load_registry(StoreDir(str(tmp_path)), 20, 32)
    assert out.dump_registry == path + ".bak" and out.issues == []


def test_neither_file_readable_is_no_registry(tmp_path):
    sd, path = store(tmp_path, "{oops", bak='{"filterDataByTopic":{')
    out = dr.load_registry(sd, 20, 32, SUBS)
    assert out.dump_registry is None
    assert len(out.issues) == 2
    assert out.issues[0].startswith(path + ": unreadable") and out.issues[1].startswith(path + ".bak: unreadable")
    assert out.added == [SUBS[0]]  # the dump holds no readable registry: the file's subscriptions count


def test_bloom_data_of_other_settings_loads_no_filter(tmp_path):
    """decode: a record whose bloom data is not valid for the broker's filter (another f or n) means the whole
    persisted registry is ignored."""
    sd, path = store(tmp_path, filter_file(record("G", "T", "a > 1", born=10)))
    out = dr.load_registry(sd, 10, 32, SUBS)  # f = 10: k = 4, m = 160
    assert out.registry.records() == [] and out.rows == []
    assert out.dump_registry == path
    assert len(out.issues) == 1
    assert "maxErrorRateOfBloomFilter=10" in out.issues[0] and "expectConsumerNumUseFilter=32" in out.issues[0]
    assert path in out.issues[0]
    assert out.added == [] and out.left_out == [SUBS[0], SUBS[3]]


def test_records_without_bloom_data_discard_the_registry(tmp_path):
    """BloomFilter.isValid(null) is false: a file whose records carry no bloomFilterData loads nothing."""
    sd, path = store(tmp_path, filter_file(record("G", "T", "a > 1", born=10, bloom=False),
                                           record("H", "T", "a > 2", born=10, bloom=False)))
    out = dr.load_registry(sd, 20, 32)
    assert out.registry.records() == [] and out.rows == []
    assert len(out.issues) == 1 and path in out.issues[0]
    assert "2 records without bloom data" in out.issues[0]


def test_an_empty_registry_file_is_a_registry_holding_nothing(tmp_path):
    sd, path = store(tmp_path, '{"filterDataByTopic":{}}')
    out = dr.load_registry(sd, 20, 32, SUBS)
    assert out.dump_registry == path and out.rows == [] and out.issues == []
    assert out.added == [] and out.left_out == [SUBS[0], SUBS[3]]
    assert "(G, T)" in out.rule_line()
