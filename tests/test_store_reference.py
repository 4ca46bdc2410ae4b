"""filterlib.store against real 5.3.3 stores written by the reference harness (PROTOCOL.md, store): every record
equals the harness listing (MessageDecoder's reading), and re-encoded consume queue / ext files equal the
broker's byte for byte."""

from __future__ import annotations

import base64
import copy
import json
import os

import pytest

from filterlib.store import consumequeue as cq
from filterlib.store import consumequeue_ext as ext
from filterlib.store import fastjson
from filterlib.store.compression import decompress_body
from filterlib.store.scan import ScanOptions
from filterlib.store.storedir import StoreDir

pytestmark = pytest.mark.reference


def _scenarios() -> dict[str, dict]:
    from tests import scenarios
    tag = scenarios.tag_and_sql_scenario(1)
    tag_noext = copy.deepcopy(tag)
    tag_noext["broker"]["enableConsumeQueueExt"] = False
    tag_noext["subscriptions"] = []
    big = scenarios.varied_scenario(2)
    big["subscriptions"] = []
    store_tx = scenarios.varied_scenario(1)
    store_tx["subscriptions"] = []
    return {"tag_ext": tag, "tag_noext": tag_noext, "varied2": big, "varied1": store_tx}


@pytest.fixture(scope="module")
def stores() -> dict[str, str]:
    from tests import refharness
    return {name: str(refharness.write_store(sc)) for name, sc in _scenarios().items()}


def _decode(out: str) -> tuple[StoreDir, list[dict], list]:
    sd = StoreDir(os.path.join(out, "store"))
    rows, accs = [], []
    for _, batches, acc in sd.decode_commitlog(ScanOptions(check_crc=True), split_bytes=1500):
        rows += [r for b in batches for r in b.to_pylist()]
        accs.append(acc)
    return sd, rows, accs


@pytest.mark.parametrize("name", ["tag_ext", "tag_noext", "varied2", "varied1"])
def test_records_equal_listing(stores, name) -> None:
    out = stores[name]
    listing = json.load(open(os.path.join(out, "listing.json"), encoding="utf-8"))
    report = json.load(open(os.path.join(out, "report.json"), encoding="utf-8"))
    sd, rows, accs = _decode(out)
    recs = listing["records"]
    assert len(sd.commitlog.files) >= 3 and sd.commitlog.mapped_file_size == listing["fileSize"]
    assert len(rows) == len(recs) > 50
    for r, e in zip(rows, recs, strict=True):
        assert r["position"] == e["commitLogOffset"] and r["store_size"] == e["size"]
        assert (r["magic_code"], r["body_crc"], r["queue_id"], r["flag"], r["queue_offset"]) == \
            (e["magic"], e["bodyCRC"], e["queueId"], e["flag"], e["queueOffset"])
        assert (r["commit_log_offset"], r["sys_flag"], r["born_timestamp"], r["store_timestamp"]) == \
            (e["physicalOffset"], e["sysFlag"], e["bornTimestamp"], e["storeTimestamp"])
        assert (r["born_host"], r["store_host"], r["reconsume_times"], r["prepared_transaction_offset"]) == \
            (e["bornHost"], e["storeHost"], e["reconsumeTimes"], e["preparedTransactionOffset"])
        assert r["body"] == base64.b64decode(e["body"] or "")
        assert r["topic"] == e["topic"] and dict(r["properties"]) == e["properties"]
        assert (r["tags"], r["keys"], r["uniq_key"], r["offset_msg_id"]) == \
            (e["tags"], e["keys"], e["uniqKey"], e["offsetMsgId"])
        if e["bodyDecompressed"] is not None:
            assert decompress_body(r["body"], r["sys_flag"]) == base64.b64decode(e["bodyDecompressed"])
        if e["cq"] is not None and e["cq"]["tagsCode"] is not None:
            assert r["tags_code"] == int(e["cq"]["tagsCode"])
    assert any(r["sys_flag"] & 0x30 for r in rows)
    blanks = {(b["file"], b["filePos"]): b["size"] for b in listing["blanks"]}
    files = {f["name"]: f for f in report["commitlog"]["files"]}
    for f, acc in zip(sd.commitlog.files, accs, strict=True):
        name = os.path.basename(f.path)
        assert acc.closes and not acc.damage
        if acc.end_kind == "blank":
            assert blanks[(name, acc.valid_end)] == acc.blank_bytes
        info = files[name]
        assert info["records"] == acc.records
        assert info["dataEnd"] == acc.valid_end
        assert (info["blankAt"] is not None) == (acc.end_kind == "blank")
    assert sum(a.end_kind == "blank" for a in accs) >= 2


@pytest.mark.parametrize("name", ["tag_ext", "tag_noext", "varied2", "varied1"])
def test_consume_queue_files_byte_identical(stores, name) -> None:
    out = stores[name]
    report = json.load(open(os.path.join(out, "report.json"), encoding="utf-8"))
    sd, rows, _ = _decode(out)
    st = report["store"]
    ext_on = report["broker"]["enableConsumeQueueExt"]
    queues = cq.build_units(rows)
    assert set(queues) == set(sd.queue_ids())
    compared = 0
    for (topic, qid), units in queues.items():
        assert [u[0] for u in units] == list(range(len(units)))
        codes = [u[3] for u in units]
        if ext_on:
            edir = sd.queue_dir(topic, qid, ext=True)
            broker_ext = {n: open(os.path.join(edir, n), "rb").read() for n in sorted(os.listdir(edir))}
            ext_units = [u for n, data in broker_ext.items() for _, u in ext.iter_file_units(data, int(n))]
            assert [(u.tags_code, u.msg_store_time) for u in ext_units] == \
                [(c, r["store_timestamp"]) for c, r in zip(codes, _rows_of(rows, topic, qid), strict=True)]
            mine, addrs = ext.encode_ext_files(ext_units, st["mappedFileSizeConsumeQueueExt"])
            assert mine == broker_ext
            compared += len(mine)
            codes = addrs
        files = cq.encode_queue_files([(u[1], u[2], c) for u, c in zip(units, codes, strict=True)],
                                      st["mappedFileSizeConsumeQueue"])
        qdir = sd.queue_dir(topic, qid)
        broker = {n: open(os.path.join(qdir, n), "rb").read() for n in sorted(os.listdir(qdir))}
        assert files == broker
        compared += len(files)
        if ext_on:
            resolved = sd.read_ext(topic, qid)
            for u, r in zip(sd.read_queue(topic, qid), _rows_of(rows, topic, qid), strict=True):
                assert resolved[u.tags_code].tags_code == r["tags_code"]
    assert compared > 10


def _rows_of(rows: list[dict], topic: str, qid: int) -> list[dict]:
    sel = [r for r in rows if r["topic"] == topic and r["queue_id"] == qid and r["sys_flag"] & 0xC in (0, 8)]
    return sorted(sel, key=lambda r: r["queue_offset"])


def test_configs_parse(stores) -> None:
    sd = StoreDir(os.path.join(stores["varied2"], "store"))
    topics = sd.config("topics")
    assert "TopicA" in topics["topicConfigTable"]
    offsets = sd.config("consumerOffset")["offsetTable"]
    assert offsets["TopicA@G1"] == {0: 1}
    assert sd.checkpoint() is not None


@pytest.mark.parametrize("name", ["tag_ext", "tag_noext", "varied2", "varied1"])
def test_fastjson_writer_reproduces_broker_config_files(stores, name) -> None:
    """dumps(loads(t)) == t for every config file (and its .bak) the real broker persisted: the writer must
    reproduce fastjson 1.2.83's pretty layout, Integer-key maps (`"T@G":{0:1\\n\\t\\t}`) included."""
    config = os.path.join(stores[name], "store", "config")
    names = sorted(n for n in os.listdir(config) if n.endswith((".json", ".json.bak")))
    assert {"topics.json", "subscriptionGroup.json", "consumerOffset.json", "consumerFilter.json"} <= set(names)
    int_keyed = 0
    for n in names:
        with open(os.path.join(config, n), encoding="utf-8") as f:
            text = f.read()
        value = fastjson.loads(text)
        assert fastjson.dumps(value) == text, n
        if n == "consumerOffset.json":
            int_keyed += sum(1 for q in value["offsetTable"].values() if q)
    if name.startswith("varied"):
        assert int_keyed > 0, "the scenario commits offsets, i.e. Integer-key maps nested in a map"
