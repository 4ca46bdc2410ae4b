"""The bundled `make demo` dump (demo/dump) is what the real RocketMQ 5.3.3 store writes from demo/scenario.json.

The harness writes the scenario again (cached by refharness) and every file of the bundled dump must equal its
counterpart modulo the clock: store times (commit log STORETIMESTAMP, ext msgStoreTime, the delivery time a delayed
message's ext tagsCode holds), the bornTimestamp of records the broker itself creates (transaction op records),
bornTime/deadTime of consumerFilter.json, dataVersion timestamps, the checkpoint's times. The harness's pull replay
of the scenario must show every outcome the demo is meant to show, and the real pull over the bundled dump itself
must decide every unit as the fresh store's pull does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest
import refharness
import scenarios

from filterlib.store import fastjson
from filterlib.store.consumequeue_ext import iter_file_units
from filterlib.store.scan import ScanOptions
from filterlib.store.storedir import StoreDir
from filterlib.subscriptions import parse_entry

pytestmark = pytest.mark.reference

_spec = importlib.util.spec_from_file_location("demo_generate", Path(__file__).parent.parent / "demo" / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

DUMP = generate.DUMP
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BORN_HOST_V6 = 0x10
TIME_KEYS = {"timestamp", "bornTime", "deadTime"}
OUTCOMES = {"DELIVERED", "TAG_HASH_MISS", "TAG_CLIENT_MISMATCH", "BLOOM_MISS", "SQL_FALSE", "SQL_NULL", "SQL_ERROR"}


@pytest.fixture(scope="module")
def scenario() -> dict:
    return generate.load_scenario()


@pytest.fixture(scope="module")
def out(scenario) -> Path:
    return refharness.write_store(scenario)


@pytest.fixture(scope="module")
def fresh(out) -> Path:
    return out / "store"


@pytest.fixture(scope="module")
def pull(out) -> dict:
    return json.loads((out / "pull.json").read_text(encoding="utf-8"))


def _files(root: Path) -> dict[str, int]:
    """Relative path -> size; an all-zero pre-allocated commitlog file (the allocator's, if any) is not data."""
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))
            if p.is_file() and not (p.parent.name == "commitlog" and not p.read_bytes().strip(b"\0"))}


def _records(root: Path) -> list[dict]:
    rows = []
    for _f, batches, acc in StoreDir(str(root)).decode_commitlog(ScanOptions(check_crc=True)):
        assert acc.closes and not acc.damage, acc
        for b in batches:
            rows += b.to_pylist()
    return rows


def _strip_times(obj):
    if isinstance(obj, dict):
        return {k: _strip_times(v) for k, v in obj.items() if k not in TIME_KEYS}
    if isinstance(obj, list):
        return [_strip_times(v) for v in obj]
    return obj


def test_scenario_file_is_the_generators_output(scenario):
    assert scenario == scenarios.demo_scenario(), "demo/scenario.json is stale: python -m demo.generate " \
                                                  "--write-scenario"


def test_broker_conf_and_subscriptions_match_the_run(scenario, out):
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert generate.BROKER_CONF.read_text(encoding="utf-8") == \
        generate.broker_conf_text(report["broker"], report["store"])
    assert generate.SUBSCRIPTIONS.read_text(encoding="utf-8") == generate.subscriptions_text(scenario)
    entries = json.loads(generate.SUBSCRIPTIONS.read_text(encoding="utf-8"))
    subs = [parse_entry(i, e) for i, e in enumerate(entries)]
    assert [(s.group, s.topic, s.expression, s.path) for s in subs] == \
        [(s["group"], s["topic"], s["expression"], s.get("path", "registered")) for s in scenario["subscriptions"]]


def test_same_files(fresh):
    expected = {k: v for k, v in _files(fresh).items() if k not in generate.SKIP}
    assert _files(DUMP) == expected
    assert sum(expected.values()) < 2 << 20
    assert sum(1 for k in expected if k.startswith("commitlog/")) >= 3


def test_commitlog_records_equal_but_for_the_clock(fresh):
    ours, theirs = _records(DUMP), _records(fresh)
    assert len(ours) == len(theirs) > 900
    for a, b in zip(ours, theirs, strict=True):
        skip = {"store_timestamp"} | ({"born_timestamp"} if a["topic"] == OP_TOPIC else set())
        # The decoder's tags_code of a delayed record is its delivery time: store time + the level's delay.
        if a["topic"] == SCHEDULE_TOPIC:
            skip.add("tags_code")
            assert a["tags_code"] - a["store_timestamp"] == b["tags_code"] - b["store_timestamp"]
        assert {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}


def test_commitlog_bytes_equal_but_for_the_clock(fresh):
    """Byte for byte once the clock's fields are zeroed (blank fillers and file tails included)."""
    recs = _records(DUMP)
    for name in sorted(p.name for p in (DUMP / "commitlog").iterdir()):
        base = int(name)
        data = [bytearray((root / "commitlog" / name).read_bytes()) for root in (DUMP, fresh)]
        for r in recs:
            if not base <= r["position"] < base + len(data[0]):
                continue
            p = r["position"] - base
            store_at = p + 48 + (20 if r["sys_flag"] & BORN_HOST_V6 else 8)
            for d in data:
                d[store_at:store_at + 8] = bytes(8)
                if r["topic"] == OP_TOPIC:
                    d[p + 40:p + 48] = bytes(8)
        assert data[0] == data[1], name


def test_consume_queues_equal(fresh):
    for rel in _files(fresh):
        if rel.startswith("consumequeue/"):
            assert (DUMP / rel).read_bytes() == (fresh / rel).read_bytes(), rel


def test_ext_units_equal_but_for_the_clock(fresh):
    seen = Counter()
    for rel in _files(fresh):
        if not rel.startswith("consumequeue_ext/"):
            continue
        topic = rel.split("/")[1]
        start = int(rel.rsplit("/", 1)[1])
        ours, theirs = ((root / rel).read_bytes() for root in (DUMP, fresh))
        a = list(iter_file_units(ours, start))
        b = list(iter_file_units(theirs, start))
        assert [off for off, _ in a] == [off for off, _ in b], rel
        for (off, ua), (_, ub) in zip(a, b, strict=True):
            assert ua.filter_bitmap == ub.filter_bitmap, (rel, off)
            if topic == SCHEDULE_TOPIC:     # delivery time = store time + delay
                assert ua.tags_code - ua.msg_store_time == ub.tags_code - ub.msg_store_time
            else:
                assert ua.tags_code == ub.tags_code, (rel, off)
            seen[topic] += 1
        masked = []
        for data in (ours, theirs):
            d = bytearray(data)
            for off, _ in iter_file_units(data, start):
                p = off - start
                d[p + 10:p + 18] = bytes(8)
                if topic == SCHEDULE_TOPIC:
                    d[p + 2:p + 10] = bytes(8)
            masked.append(d)
        assert masked[0] == masked[1], rel
    assert seen["TradeOrder"] > 500 and seen["PaymentEvents"] > 200


def test_bitmaps_are_set(fresh):
    """The bundled ext units carry CalcBitMap bitmaps: the bloom layer has something to say."""
    units = [u for q in range(4) for u in StoreDir(str(DUMP)).read_ext("TradeOrder", q).values()]
    with_bits = [u for u in units if u.filter_bitmap and any(u.filter_bitmap)]
    assert len(with_bits) > 200
    assert {len(u.filter_bitmap) for u in units if u.filter_bitmap} == {11}     # m = 88 bits


def test_configs_equal_but_for_the_clock(fresh):
    for rel in _files(fresh):
        if rel.startswith("config/"):
            a, b = (fastjson.loads((root / rel).read_text(encoding="utf-8")) for root in (DUMP, fresh))
            assert _strip_times(a) == _strip_times(b), rel
    filters = fastjson.loads((DUMP / "config" / "consumerFilter.json").read_text(encoding="utf-8"))
    groups = {g for t in filters["filterDataByTopic"].values() for g in t["groupFilterData"]}
    assert groups == {*scenarios.DEMO_SQL_GROUPS, "fraud-screening"}
    offsets = fastjson.loads((DUMP / "config" / "consumerOffset.json").read_text(encoding="utf-8"))
    assert set(offsets["offsetTable"]) == {"TradeOrder@order-tag-consumer", "PaymentEvents@refund-tracker"}


def test_checkpoint_offsets_equal(fresh):
    a, b = StoreDir(str(DUMP)).checkpoint(), StoreDir(str(fresh)).checkpoint()
    assert a is not None and b is not None
    assert {k: v for k, v in a.items() if "Timestamp" not in k} == {k: v for k, v in b.items() if "Timestamp" not in k}


def _outcomes(pull: dict) -> dict[tuple[str, str], Counter]:
    out = {}
    for s in pull["subscriptions"]:
        assert s["answer"] == "OK", s["group"]
        c = Counter(u["outcome"] for q in s["queues"] for u in q["units"])
        c["bloom_false_positive"] = sum(u["bloomFalsePositive"] for q in s["queues"] for u in q["units"])
        out[(s["group"], s["topic"])] = c
    return out


def test_pull_shows_every_outcome(pull, out):
    per_group = _outcomes(pull)
    total = sum(per_group.values(), Counter())
    assert OUTCOMES <= {k for k, v in total.items() if v}, total
    assert set(total) - {"bloom_false_positive"} <= OUTCOMES, total
    assert total["bloom_false_positive"] > 0
    tag = per_group[("order-tag-consumer", "TradeOrder")]
    assert tag["DELIVERED"] and tag["TAG_HASH_MISS"] and tag["TAG_CLIENT_MISMATCH"]
    assert per_group[("order-tag-consumer", "%RETRY%order-tag-consumer")]["DELIVERED"]
    posted = per_group[("order-audit", "TradeOrder")]
    assert all(posted[k] for k in ("DELIVERED", "SQL_FALSE", "SQL_NULL", "SQL_ERROR")) and not posted["BLOOM_MISS"]
    eu = per_group[("big-orders-eu", "TradeOrder")]
    assert all(eu[k] for k in ("DELIVERED", "BLOOM_MISS", "SQL_FALSE", "SQL_NULL", "SQL_ERROR",
                               "bloom_false_positive"))
    assert per_group[("vip-orders", "TradeOrder")]["bloom_false_positive"]
    # TAG_CLIENT_MISMATCH both ways: a hash collision (BB under Aa) and a message without tag (hash 0).
    listing = json.loads((out / "listing.json").read_text(encoding="utf-8"))
    tags = {r["commitLogOffset"]: r["tags"] for r in listing["records"]}
    mismatched = Counter(tags[u["commitLogOffset"]] for s in pull["subscriptions"] for q in s["queues"]
                         for u in q["units"] if u["outcome"] == "TAG_CLIENT_MISMATCH")
    assert set(mismatched) == {"BB", None}


def test_pull_over_the_bundled_dump_decides_as_the_fresh_store(scenario, pull):
    """The real pull over demo/dump itself (its own store times and filter bornTimes) gives the same decisions."""
    digest = hashlib.sha256()
    for rel in _files(DUMP):
        digest.update(rel.encode() + b"\0" + (DUMP / rel).read_bytes())
    request = {"storeDir": str(DUMP), "broker": scenario["broker"], "store": scenario["store"],
               "subscriptions": scenario["subscriptions"], "dumpDigest": digest.hexdigest()}
    bundled = refharness.pull(request)

    def decisions(p: dict) -> list:
        return [(s["group"], s["topic"], s["answer"], q["queueId"],
                 [(u["queueOffset"], u["commitLogOffset"], u["outcome"], u["cqBranch"], u["bloomFalsePositive"],
                   u["sqlValue"]) for u in q["units"]],
                 [(c["requestOffset"], c["status"], c["nextBeginOffset"], c["messageCount"]) for c in q["calls"]])
                for s in p["subscriptions"] for q in s["queues"]]

    assert decisions(bundled) == decisions(pull)


def test_dump_header_fields(fresh):
    """Spot checks of what demo/README.md promises: compressed bodies, transactions, delayed and retry records."""
    recs = _records(DUMP)
    flags = Counter(r["sys_flag"] for r in recs)
    assert {f & 0x701 for f in flags} >= {0x101, 0x201, 0x301}   # bodies compressed with LZ4, zstd and zlib
    assert any(f & 0xC == 0x8 for f in flags)                   # committed transaction records
    topics = Counter(r["topic"] for r in recs)
    assert topics[OP_TOPIC] == 5 and topics["RMQ_SYS_TRANS_HALF_TOPIC"] == 8 and topics[SCHEDULE_TOPIC] >= 2
    assert topics["%RETRY%order-tag-consumer"] >= 1
