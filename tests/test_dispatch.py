"""filterlib.rebuild.dispatch against real 5.3.3 stores: the units job 1 builds from the commit log equal the broker's
consumequeue files, re-encoded byte for byte (ext addresses and consumequeue_ext files included), and the rebuilt
ext bitmaps equal the broker's where the filter rule's assumption holds; where registrations changed mid-stream,
every difference is explained by the rule, and the explanation agrees with the registry the broker really had
when it dispatched the message (replayed from the harness report)."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest
import refharness
import scenarios
from support.harness_runs import store_run
from support.registry_replay import hidden_at_dispatch, load_registry

from filterlib.rebuild.dispatch import (
    CQ_SCHEMA,
    Dispatcher,
    append_positions,
    bit_set,
    dispatch,
    enters_queue,
    explain_bitmap,
    place_queue,
    registry_groups,
)
from filterlib.registry import ConsumerFilterManager
from filterlib.store import consumequeue as cq
from filterlib.store import consumequeue_ext as ext
from filterlib.store.scan import ScanOptions
from filterlib.store.storedir import StoreDir

pytestmark = pytest.mark.reference


def _scenarios() -> dict[str, dict]:
    return {"tag_ext": scenarios.tag_and_sql_scenario(1), "varied1": scenarios.varied_scenario(1),
            "varied2": scenarios.varied_scenario(2), "varied3": scenarios.varied_scenario(3)}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    out = {"registry": store_run()}
    for name, sc in _scenarios().items():
        d = refharness.write_store(sc)
        out[name] = {"out": d, "scenario": sc, "report": json.loads((d / "report.json").read_text()),
                     "listing": json.loads((d / "listing.json").read_text())}
    return out


def rebuild(run: dict) -> tuple[StoreDir, ConsumerFilterManager, pa.Table]:
    """Decode the run's commit log through small splits and dispatch every batch."""
    store = str(run["out"] / "store")
    broker = run["report"]["broker"]
    sd = StoreDir(store)
    reg = load_registry(store, broker)
    batches = [b for _, bs, _ in sd.decode_commitlog(ScanOptions(check_crc=True), split_bytes=1500) for b in bs]
    d = Dispatcher(reg, broker["enableConsumeQueueExt"], broker["enableCalcFilterBitMap"])
    return sd, reg, dispatch(batches, d)


def by_queue(table: pa.Table) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for r in table.to_pylist():
        out.setdefault((r["topic"], r["queue_id"]), []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r["queue_offset"])
    return out


def broker_ext_units(sd: StoreDir, topic: str, qid: int) -> list[ext.CqExtUnit]:
    """The ext unit each CQ unit of the broker's queue points to, in queue order."""
    resolved = sd.read_ext(topic, qid)
    return [resolved[u.tags_code] for u in sd.read_queue(topic, qid)]


def known_groups(sd: StoreDir, reg: ConsumerFilterManager) -> set[str]:
    """Groups the dump knows of: subscriptionGroup.json and the registry."""
    return set(sd.config("subscriptionGroup")["subscriptionGroupTable"]) | registry_groups(reg)


def test_enters_queue_is_the_transaction_type_rule() -> None:
    flags = np.array([0, 0x4, 0x8, 0xC, 0x1 | 0x8, 0x2 | 0x4, 0x10, 0x700 | 0xC], dtype=np.int32)
    assert enters_queue(flags).tolist() == [True, False, True, False, True, False, True, False]


def test_append_positions_follow_put_message_position_info() -> None:
    """ConsumeQueue.putMessagePositionInfo: the first unit at the offset it asks for, later ones appended (a gap
    in the asked offsets only logged), a nonzero offset below the append position skipped, an offset 0 appended."""
    assert append_positions(np.array([5, 6, 7])).tolist() == [5, 6, 7]
    assert append_positions(np.array([5, 6, 8, 9])).tolist() == [5, 6, 7, 8]
    assert append_positions(np.array([3, 2, 4])).tolist() == [3, -1, 4]
    assert append_positions(np.array([3, 0, 7])).tolist() == [3, 4, 5]


def test_a_records_own_unit_stays_when_it_also_dispatches_to_its_own_queue() -> None:
    """ConsumeQueue.putMessagePositionInfoWrapper writes a record's own unit before its multi-dispatch units, and the
    second unit of one record in a queue is dropped (the build-repeatedly check): the own unit, with its queue
    offset and ext unit, stays whatever order the units arrive in."""
    schema = CQ_SCHEMA.append(pa.field("multi", pa.bool_()))
    own = {"topic": "%LMQ%a", "queue_id": 0, "queue_offset": 4, "commit_log_offset": 100, "size": 50,
           "tags_code": 7, "msg_store_time": 123, "filter_bitmap": b"\x01", "multi": False}
    again = {**own, "queue_offset": 9, "msg_store_time": None, "filter_bitmap": None, "multi": True}
    later = {**own, "queue_offset": 5, "commit_log_offset": 150}
    for rows in ([own, again, later], [again, own, later], [later, again, own]):
        placed = place_queue(pa.Table.from_pylist(rows, schema=schema)).to_pylist()
        assert [(u["commit_log_offset"], u["queue_offset"], u["msg_store_time"], u["multi"]) for u in placed] == \
            [(100, 4, 123, False), (150, 5, 123, False)]


def test_multi_dispatch_units_reencode_to_the_brokers_lmq_queues() -> None:
    """lmq_scenario (enableMultiDispatch, enableLmq): dispatch gives every queue the broker wrote, light message
    queues included (plain tagsCodes, no ext), and each re-encodes to the broker's files byte for byte."""
    sc = scenarios.lmq_scenario(5)
    d = refharness.write_store(sc)
    run = {"out": d, "report": json.loads((d / "report.json").read_text())}
    store = str(d / "store")
    st = run["report"]["store"]
    sd = StoreDir(store)
    batches = [b for _, bs, _ in sd.decode_commitlog(ScanOptions(check_crc=True), split_bytes=1500) for b in bs]
    table = dispatch(batches, Dispatcher(load_registry(store, run["report"]["broker"]), True, True,
                                         st["enableMultiDispatch"], st["enableLmq"]))
    queues = by_queue(table)
    lmq = {k: v for k, v in queues.items() if k[0].startswith("%LMQ%")}
    assert set(queues) == set(sd.queue_ids()) and len(lmq) >= 3
    for (topic, qid), rows in lmq.items():
        assert all(r["msg_store_time"] is None for r in rows) and qid == 0
        units = [(r["commit_log_offset"], r["size"], r["tags_code"]) for r in rows]
        files = cq.encode_queue_files(units, st["mappedFileSizeConsumeQueue"],
                                      first_queue_offset=rows[0]["queue_offset"])
        qdir = sd.queue_dir(topic, qid)
        assert files == {n: open(os.path.join(qdir, n), "rb").read() for n in sorted(os.listdir(qdir))}


@pytest.mark.parametrize("name", ["tag_ext", "varied1", "varied2", "varied3", "registry"])
def test_units_reencode_to_the_broker_files(runs, name) -> None:
    """Every queue's units, encoded with the store encoders, equal the broker's consumequeue (and ext) files byte
    for byte. Where a rebuilt bitmap differs from the broker's the difference must be explained by the rule, and
    the broker's bitmap is put in its place before encoding (so every other byte is still compared); tag_ext and
    varied3 register their filters before the messages and need no such substitution."""
    run = runs[name]
    sd, reg, table = rebuild(run)
    assert table.schema == CQ_SCHEMA
    st = run["report"]["store"]
    ext_on = run["report"]["broker"]["enableConsumeQueueExt"]
    queues = by_queue(table)
    assert set(queues) == set(sd.queue_ids())
    groups = known_groups(sd, reg)
    substituted = compared = 0
    for (topic, qid), rows in queues.items():
        first = rows[0]["queue_offset"]
        assert [r["queue_offset"] for r in rows] == list(range(first, first + len(rows)))
        codes = [r["tags_code"] for r in rows]
        if ext_on:
            theirs = broker_ext_units(sd, topic, qid)
            units = []
            for r, b in zip(rows, theirs, strict=True):
                bitmap = r["filter_bitmap"]
                if bitmap != b.filter_bitmap:
                    why = explain_bitmap(topic, r["msg_store_time"], bitmap, b.filter_bitmap, reg, groups)
                    assert why.explained, (name, topic, qid, r["queue_offset"], why.reasons)
                    bitmap = b.filter_bitmap
                    substituted += 1
                units.append(ext.CqExtUnit(r["tags_code"], r["msg_store_time"], bitmap))
            edir = sd.queue_dir(topic, qid, ext=True)
            broker_ext = {n: open(os.path.join(edir, n), "rb").read() for n in sorted(os.listdir(edir))}
            mine, codes = ext.encode_ext_files(units, st["mappedFileSizeConsumeQueueExt"])
            assert mine == broker_ext
            compared += len(mine)
        else:
            assert all(r["msg_store_time"] is None and r["filter_bitmap"] is None for r in rows)
        cq_units = [(r["commit_log_offset"], r["size"], c) for r, c in zip(rows, codes, strict=True)]
        files = cq.encode_queue_files(cq_units, st["mappedFileSizeConsumeQueue"], first_queue_offset=first)
        qdir = sd.queue_dir(topic, qid)
        assert files == {n: open(os.path.join(qdir, n), "rb").read() for n in sorted(os.listdir(qdir))}
        compared += len(files)
    assert compared > 10
    if name in ("tag_ext", "varied3"):
        assert substituted == 0


@pytest.mark.parametrize("name", ["tag_ext", "varied3"])
def test_bitmaps_equal_the_broker_when_filters_predate_the_messages(runs, name) -> None:
    """Every registration is older than every message it covers and none changed: every rebuilt bitmap (null
    included) equals the broker's ext bitmap, set bits and all."""
    run = runs[name]
    sd, _, table = rebuild(run)
    set_bits = nulls = 0
    for (topic, qid), rows in by_queue(table).items():
        for r, b in zip(rows, broker_ext_units(sd, topic, qid), strict=True):
            assert r["filter_bitmap"] == b.filter_bitmap, (topic, qid, r["queue_offset"])
            set_bits += bool(b.filter_bitmap and any(b.filter_bitmap))
            nulls += b.filter_bitmap is None
    assert set_bits > 5 and nulls > 5


@pytest.mark.parametrize("name", ["varied1", "registry"])
def test_every_bitmap_difference_is_explained_by_the_rule(runs, name) -> None:
    """Registrations change between messages: the differences from the broker's bitmaps are all explained, and
    every explanation is true to the registry the broker had at dispatch (replayed from the harness report): it
    cites a record the rule could not see, and the broker's extra bits are exactly those such records set."""
    run = runs[name]
    sd, reg, table = rebuild(run)
    truth = hidden_at_dispatch(run, reg)
    groups = known_groups(sd, reg)
    differences = equal = 0
    for (topic, qid), rows in by_queue(table).items():
        for r, b in zip(rows, broker_ext_units(sd, topic, qid), strict=True):
            if r["filter_bitmap"] == b.filter_bitmap:
                equal += 1
                continue
            differences += 1
            why = explain_bitmap(topic, r["msg_store_time"], r["filter_bitmap"], b.filter_bitmap, reg, groups)
            assert why.explained, (topic, qid, r["queue_offset"], why.reasons)
            hidden, bits = truth[r["commit_log_offset"]]
            assert hidden and set(why.records) & hidden, (why.records, hidden)
            ours = bit_set(r["filter_bitmap"]) if r["filter_bitmap"] is not None else set()
            assert bit_set(b.filter_bitmap) - ours <= bits
    assert differences > 10 and equal > differences


def test_explanations_reject_what_the_rule_cannot_cause(runs) -> None:
    """The explanation is not a blanket excuse: a rebuilt bit the broker lacks, a bitmap where the broker wrote
    none, or broker bits no omitted record can set are reported unexplained."""
    run = runs["tag_ext"]
    store = str(run["out"] / "store")
    reg = load_registry(store, run["report"]["broker"])
    (d,) = reg.get_topic(scenarios.TOPIC)
    width = reg.bloom_filter.byte_length
    after = d.born_time + 1
    own = bytearray(width)
    reg.bloom_filter.hash_to(d.bloom_filter_data, own)
    assert not explain_bitmap(scenarios.TOPIC, after, bytes(own), bytes(width), reg, []).explained
    assert not explain_bitmap(scenarios.TOPIC, after, bytes(width), None, reg, []).explained
    assert not explain_bitmap(scenarios.TOPIC, after, bytes(width), bytes(own), reg, []).explained
    assert explain_bitmap(scenarios.TOPIC, d.born_time, None, bytes(own), reg, []).records == \
        (("G_SQL", scenarios.TOPIC),)
    other = bytearray(width)
    reg.bloom_filter.hash_key_to(f"G_GONE#{scenarios.TOPIC}", other)
    assert explain_bitmap(scenarios.TOPIC, after, bytes(width), bytes(other), reg, ["G_GONE"]).explained
    assert not explain_bitmap(scenarios.TOPIC, after, bytes(width), bytes(other), reg, []).explained
