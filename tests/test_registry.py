"""filterlib.registry: the ConsumerFilterManager rules and config/consumerFilter.json.

Unit expectations follow rocketmq-facts.md §8.1-§8.4 and §10.2 (and ConsumerFilterManager in the 5.3.3 source);
the reference tests replay a real store run (harness store mode): registration results, bornTimes and bloom data
from its report, every ext bitmap the real CommitLogDispatcherCalcBitMap wrote, and the real consumerFilter.json.
SQL values in the reference tests come from the harness's eval mode (the real SqlFilter), so they do not depend on
filterlib.sql92.
"""

from __future__ import annotations

import json

import pytest
from refharness import VERSIONS, write_store
from scenarios import heartbeat_clean_scenario, varied_scenario
from support.harness_runs import store_run
from support.registry_replay import (
    oracle_compiler,
    replay_registrations,
    run_sql_table,
    state,
    state_json,
    summary,
    summary_json,
)

from filterlib.bloom import BloomFilter
from filterlib.brokerversion import config_dialect
from filterlib.errors import FilterError, FilterSyntaxError
from filterlib.registry import ConsumerFilterData, ConsumerFilterManager, bloom_key
from filterlib.store import fastjson, releasemarks
from filterlib.store.storedir import StoreDir


class FakeExpression:
    """A compiled expression whose value is `props.get(name) == value`."""

    def __init__(self, text: str):
        self.text = text

    def evaluate(self, props):
        name, _, value = self.text.partition("=")
        return props.get(name) == value


def fake_compiler(expression_type, expression):
    """Compiles `name=value` for type SQL92; anything containing BAD fails like a syntax error."""
    if expression_type != "SQL92":
        raise FilterError(f"no SPI for {expression_type}")
    if "BAD" in expression:
        raise FilterSyntaxError("Invalid MessageSelector. ", expression)
    return FakeExpression(expression)


def manager(**kwargs) -> ConsumerFilterManager:
    return ConsumerFilterManager(compiler=fake_compiler, clock=lambda: 10**12, **kwargs)


def test_bloom_sizes_and_key():
    m = manager()
    assert (m.bloom_filter.m, m.bloom_filter.k) == (112, 3)
    assert bloom_key("G", "T") == "G#T"
    m.register("T", "G", "a=1", "SQL92", 1, now=100)
    assert m.get("T", "G").bloom_filter_data == BloomFilter(20, 32).generate("G#T")


def test_tag_and_empty_registrations_are_refused():
    m = manager()
    assert not m.register("T", "G", "TagA", "TAG", 1)
    assert not m.register("T", "G", "TagA", "", 1)
    assert not m.register("T", "G", "TagA", None, 1)
    assert not m.register("T", "G", "", "SQL92", 1)
    assert m.get("T", "G") is None and m.get_topic("T") is None


def test_new_registration_fields():
    m = manager()
    assert m.register("T", "G", "a=1", "SQL92", 7, now=500)
    d = m.get("T", "G")
    assert (d.consumer_group, d.topic, d.expression, d.expression_type) == ("G", "T", "a=1", "SQL92")
    assert (d.born_time, d.dead_time, d.client_version, d.is_dead()) == (500, 0, 7, False)
    assert d.compiled is not None and d.compile_error is None


def test_version_rules():
    m = manager()
    m.register("T", "G", "a=1", "SQL92", 5, now=100)
    assert not m.register("T", "G", "a=2", "SQL92", 4, now=200)
    assert not m.register("T", "G", "a=2", "SQL92", 5, now=200)
    assert m.get("T", "G").expression == "a=1"
    m.unregister("G", now=300)
    assert m.get("T", "G").is_dead()
    assert m.register("T", "G", "a=9", "SQL92", 5, now=400)
    d = m.get("T", "G")
    assert (d.expression, d.dead_time, d.born_time) == ("a=1", 0, 100)
    assert m.register("T", "G", "a=1", "SQL92", 6, now=500)
    assert (m.get("T", "G").client_version, m.get("T", "G").born_time) == (6, 100)
    assert m.register("T", "G", "a=2", "SQL92", 7, now=600)
    d = m.get("T", "G")
    assert (d.expression, d.born_time, d.client_version) == ("a=2", 600, 7)


def test_newer_version_same_expression_revives_dead_record():
    m = manager()
    m.register("T", "G", "a=1", "SQL92", 1, now=100)
    m.unregister("G", now=200)
    assert m.register("T", "G", "a=1", "SQL92", 2, now=300)
    assert (m.get("T", "G").dead_time, m.get("T", "G").born_time) == (0, 100)


def test_compile_failures_are_recorded_and_do_not_stop_others():
    m = manager()
    assert not m.register("T", "G1", "BAD", "SQL92", 1, now=100)
    assert m.register("T", "G2", "a=1", "SQL92", 1, now=100)
    assert not m.register("T", "G3", "a=1", "sql92", 1, now=100)
    assert m.get("T", "G1") is None and m.get("T", "G3") is None
    assert isinstance(m.compile_failures[("T", "G1")].compile_error, FilterSyntaxError)
    assert isinstance(m.compile_failures[("T", "G3")].compile_error, FilterError)
    assert m.register("T", "G1", "a=2", "SQL92", 2, now=200)
    assert ("T", "G1") not in m.compile_failures


def test_changed_expression_that_fails_removes_old_record():
    m = manager()
    m.register("T", "G", "a=1", "SQL92", 1, now=100)
    assert not m.register("T", "G", "BAD", "SQL92", 2, now=200)
    assert m.get("T", "G") is None
    assert m.compile_failures[("T", "G")].expression == "BAD"


def test_group_heartbeat_kills_missing_topics_and_unregister():
    m = manager()
    m.register("T1", "G", "a=1", "SQL92", 1, now=100)
    m.register("T2", "G", "a=1", "SQL92", 1, now=100)
    m.register_group("G", [("T1", "a=1", "SQL92", 1)], now=250)
    assert not m.get("T1", "G").is_dead()
    assert m.get("T2", "G").dead_time == 250
    m.unregister("G", now=300)
    assert m.get("T1", "G").dead_time == 300 and m.get("T2", "G").dead_time == 250


def test_dead_and_live_rules():
    assert ConsumerFilterData("G", "T", "e", "SQL92", born_time=0, dead_time=0).is_dead()
    d = ConsumerFilterData("G", "T", "e", "SQL92", born_time=100, dead_time=0)
    assert not d.is_dead() and d.how_long_after_death(1000) == -1
    assert not d.is_msg_in_live(100) and d.is_msg_in_live(101)
    d.dead_time = 100
    assert d.is_dead() and d.how_long_after_death(1000) == 900


def test_clean_removes_long_dead_and_empty_topics():
    m = manager(clean_time_span=1000)
    m.register("T1", "G1", "a=1", "SQL92", 1, now=100)
    m.register("T1", "G2", "a=1", "SQL92", 1, now=100)
    m.register("T2", "G1", "a=1", "SQL92", 1, now=100)
    m.unregister("G1", now=200)
    m.clean(now=1199)
    assert m.get("T1", "G1") is not None
    m.clean(now=1200)
    assert m.get("T1", "G1") is None and m.get("T1", "G2") is not None
    assert "T2" not in m.filter_data_by_topic


def test_calc_bitmap_uses_dead_records_and_skips_uncompiled():
    m = manager()
    assert m.calc_bitmap("T", {"a": "1"}) is None
    m.register("T", "G1", "a=1", "SQL92", 1, now=100)
    m.register("T", "G2", "b=2", "SQL92", 1, now=100)
    m.unregister("G1", now=200)
    bf = m.bloom_filter
    assert m.calc_bitmap("T", {"a": "1"}) == bf.bitmap_of([m.get("T", "G1").bloom_filter_data])
    assert m.calc_bitmap("T", {}) == bytes(14)
    m.get("T", "G2").compiled = None
    assert m.calc_bitmap("T", {"b": "2"}) == bytes(14)


def test_decode_marks_live_dead_and_keeps_compile_errors():
    src = manager()
    src.register("T", "G1", "a=1", "SQL92", 1, now=10_000)
    src.register("T", "G2", "a=2", "SQL92", 1, now=50_000)
    src.register("T", "G3", "a=3", "SQL92", 1, now=1_000)
    src.unregister("G3", now=2_000)
    src.get("T", "G2").expression = "BAD"
    text = src.encode(now=60_000)
    dst = manager()
    assert dst.decode(text, now=70_000)
    assert dst.get("T", "G1").dead_time == 40_000
    assert dst.get("T", "G2").dead_time == 50_000
    assert dst.get("T", "G3").dead_time == 2_000
    assert dst.get("T", "G2").compiled is None and isinstance(dst.get("T", "G2").compile_error, FilterSyntaxError)


def test_decode_with_other_bloom_parameters_drops_everything():
    src = manager()
    src.register("T", "G1", "a=1", "SQL92", 1, now=100)
    other = manager(max_error_rate=20, expect_consumer_num=64)
    other.register("X", "G", "a=1", "SQL92", 1, now=100)
    assert not other.decode(src.encode(now=200), now=300)
    assert other.get("T", "G1") is None and other.get("X", "G") is not None


def test_decode_without_bloom_data_drops_everything():
    text = '{"filterDataByTopic":{"T":{"groupFilterData":{"G":{"bornTime":1,"expression":"a=1",' \
           '"expressionType":"SQL92","topic":"T","consumerGroup":"G"}},"topic":"T"}}}'
    m = manager()
    assert not m.decode(text, now=10)
    assert m.records() == []


def test_load_falls_back_to_bak(tmp_path):
    src = manager()
    src.register("T", "G", "a=1", "SQL92", 1, now=100)
    path = tmp_path / "config" / "consumerFilter.json"
    src.persist(path, now=200)
    src.persist(path, now=200)
    assert path.with_name("consumerFilter.json.bak").exists()
    path.write_text("{not json")
    m = manager()
    assert m.load(path, now=300)
    assert m.get("T", "G").born_time == 100
    path.write_text("")
    assert manager().load(path, now=300)


def test_fastjson_dialect():
    # consumerOffset.json exactly as the real 5.3.3 broker wrote it (harness store 0f28ee57...):
    # an Integer-key map gets no line break before its keys, only before its closing brace.
    broker = ('{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":1795294586121\n\t},'
              '\n\t"groupTopicMap":{\n\t\t"G1":["TopicA"]\n\t},'
              '\n\t"offsetTable":{\n\t\t"TopicA@G1":{0:1\n\t\t}\n\t}\n}')
    assert fastjson.loads(broker) == {
        "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 1795294586121},
        "groupTopicMap": {"G1": ["TopicA"]}, "offsetTable": {"TopicA@G1": {0: 1}}}
    assert fastjson.dumps(fastjson.loads(broker)) == broker
    assert fastjson.loads('{\n\t"offsetTable":{\n\t\t"T@G":{0:12,1:40,-1:3}\n\t}\n}') == \
        {"offsetTable": {"T@G": {0: 12, 1: 40, -1: 3}}}
    assert fastjson.loads('{"a":"x 1: y","b":[1,2]}') == {"a": "x 1: y", "b": [1, 2]}
    # Expected text printed by fastjson-1.2.83.jar's JSON.toJSONString(map, true) for the same Java
    # values (LinkedHashMap; "b" a LinkedHashSet, "t" an int[]): the null entry still counts for the
    # closing line break, and a String key after an Integer key starts a new line again.
    assert fastjson.dumps({"a": {0: 1, 1: None}, "b": [1, 2], "c": "q\"\\\t\x01\x7f\u2028é",
                           "d": {"s": 1, 3: 4, "t": [5]}}) == \
        ('{\n\t"a":{0:1\n\t},\n\t"b":[1,2],\n\t"c":"q\\"\\\\\\t\\u0001\\u007F\\u2028é",'
         '\n\t"d":{\n\t\t"s":1,3:4,\n\t\t"t":[5]\n\t}\n}')
    assert fastjson.dumps({"k": {0: None}}) == '{\n\t"k":{\n\t}\n}'
    assert fastjson.dumps({"k": {}}) == '{\n\t"k":{}\n}'


@pytest.fixture(scope="module", params=list(VERSIONS))
def run(request) -> dict:
    return store_run(version=request.param)


@pytest.mark.reference
def test_registration_rules_and_bitmaps_match_the_real_broker(run):
    table = run_sql_table(run)
    checks: list = []
    m, bitmaps = replay_registrations(run, table, checks)
    assert [c for c in checks if c[2] != c[3]] == []
    assert [b for b in bitmaps if b[1] != b[2]] == []
    assert sum(b[2] is not None for b in bitmaps) >= 80
    final = {(f["topic"], f["group"]): summary_json(f) for f in run["report"]["filters"]}
    assert {(d.topic, d.consumer_group): summary(d) for d in m.records()} == final


@pytest.mark.reference
def test_real_consumer_filter_json_loads_and_round_trips(run):
    text = (run["out"] / "store" / "config" / "consumerFilter.json").read_text(encoding="utf-8")
    assert fastjson.dumps(fastjson.loads(text)) == text
    bloom = run["report"]["bloom"]
    table = run_sql_table(run)
    now = max(f["bornTime"] for f in run["report"]["filters"]) + 10**6
    loaded = ConsumerFilterManager(bloom["f"], bloom["n"], compiler=oracle_compiler(table))
    assert loaded.decode(text, now=now)
    expected = {}
    for f in run["report"]["filters"]:
        dead_time = f["deadTime"] if f["deadTime"] != 0 else max(now - 30_000, f["bornTime"])
        expected[(f["topic"], f["group"])] = summary_json({**f, "deadTime": dead_time, "dead": True})
    assert {(d.topic, d.consumer_group): summary(d) for d in loaded.records()} == expected
    replayed, _ = replay_registrations(run, table)
    assert fastjson.loads(replayed.encode(now=min(f["bornTime"] for f in run["report"]["filters"]))) == \
        fastjson.loads(text)
    other = ConsumerFilterManager(bloom["f"], bloom["n"] * 2, compiler=oracle_compiler(table))
    assert not other.decode(text, now=now) and other.records() == []


@pytest.mark.reference
@pytest.mark.parametrize("version", list(VERSIONS))
def test_every_config_file_round_trips_in_its_releases_dialect(version):
    """Every config/*.json (and .bak) the real broker of each release wrote for a varied scenario reads back and is
    written again byte for byte in that release's dialect (5.3.3: fastjson 1.x, 5.5.1: fastjson2), and the other
    dialect would not reproduce the files."""
    out = write_store(varied_scenario(4), version)
    files = sorted((out / "store" / "config").glob("*.json*"))
    assert {p.name for p in files} >= {"topics.json", "consumerOffset.json", "subscriptionGroup.json",
                                       "consumerFilter.json"}
    dialect = config_dialect(version)
    other = fastjson.FASTJSON if dialect == fastjson.FASTJSON2 else fastjson.FASTJSON2
    differs = 0
    for p in files:
        text = p.read_text(encoding="utf-8")
        value = fastjson.loads(text)
        assert fastjson.dumps(value, True, dialect) == text, p.name
        differs += fastjson.dumps(value, True, other) != text
    assert differs >= 3
    offsets = fastjson.loads((out / "store" / "config" / "consumerOffset.json").read_text(encoding="utf-8"))
    assert offsets["offsetTable"]["TopicA@G1"] == {0: 1}
    # the layout tells the release apart (one of brokerversion.detect's marks)
    for p in files:
        assert fastjson.written_dialect(p.read_text(encoding="utf-8")) in (dialect, None), p.name
    # 5.x's topic table holds empty objects (`attributes`), whose layout tells the dialects apart; 4.9.7's has none
    topics_dialect = fastjson.written_dialect((out / "store" / "config" / "topics.json").read_text(encoding="utf-8"))
    assert topics_dialect == (None if version == "4.9.7" else dialect)
    mark = releasemarks._fastjson2(StoreDir(str(out / "store")))
    assert (mark is not None and mark.since == "5.4.0") == (version == "5.5.1")


@pytest.mark.reference
@pytest.mark.parametrize("version", list(VERSIONS))
def test_heartbeat_and_clean_match_the_real_broker(version):
    """register(group, subList) and clean() as the real ConsumerFilterManager of each release applies them
    (heartbeat/clean events of the harness's store mode): the state after each call, and every bitmap written in
    between."""
    scenario = heartbeat_clean_scenario(3)
    out = write_store(scenario, version)
    run = {"out": out, "scenario": scenario, "report": json.loads((out / "report.json").read_text()),
           "listing": json.loads((out / "listing.json").read_text())}
    checks: list = []
    m, bitmaps = replay_registrations(run, run_sql_table(run), checks)
    assert [c for c in checks if c[2] != c[3]] == []
    assert [c[1] for c in checks].count("heartbeat") == 5 and [c[1] for c in checks].count("clean") == 4
    assert [b for b in bitmaps if b[1] != b[2]] == []
    assert sum(b[2] is not None for b in bitmaps) > 20
    assert state(m) == state_json(run["report"]["filters"]) == []
    # The spans' fixed outcomes: 10^12 keeps every record, 0 drops every dead one, -1 drops everything.
    cleans = [r for r in run["report"]["registrations"] if r["kind"] == "clean"]
    assert len(cleans[0]["filters"]) == 5 and all(not f["dead"] for f in cleans[2]["filters"])
    assert cleans[3]["topics"] == [] and cleans[3]["filters"] == []
