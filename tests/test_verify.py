"""filterlib.rebuild.verify on queues built with the store encoders: the dump read as the pull does, planted diffs."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from filterlib.rebuild import verify
from filterlib.registry import ConsumerFilterManager, bloom_key
from filterlib.store.consumequeue import CQ_STORE_UNIT_SIZE, encode_queue_files
from filterlib.store.consumequeue_ext import CqExtUnit, decorate, encode_ext_files, is_ext_addr
from filterlib.store.storedir import StoreDir

T, QID = "T", 0
BYTES = 14  # bitmaps of BloomFilter.createByFn(20, 32): 112 bits


def bitmap(*bits):
    out = bytearray(BYTES)
    for p in bits:
        out[p >> 3] |= 1 << (p & 7)
    return bytes(out)


def write_store(root, cq_units, ext_units=None, units_per_file=3, ext_file_size=128, first_queue_offset=0):
    """A store root with one commitlog file and one queue (T, 0): cq_units are (commit log offset, size, tagsCode
    field) where a tagsCode field given as ("ext", i) is the address ConsumeQueueExt.put returned for ext_units[i]."""
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / ("0" * 20)).write_bytes(b"\0" * 1024)
    addrs = []
    if ext_units is not None:
        files, addrs = encode_ext_files(ext_units, ext_file_size)
        d = root / "consumequeue_ext" / T / str(QID)
        d.mkdir(parents=True)
        for name, data in files.items():
            (d / name).write_bytes(data)
    units = [(o, s, addrs[t[1]] if isinstance(t, tuple) else t) for o, s, t in cq_units]
    d = root / "consumequeue" / T / str(QID)
    d.mkdir(parents=True)
    for name, data in encode_queue_files(units, units_per_file * CQ_STORE_UNIT_SIZE, first_queue_offset).items():
        (d / name).write_bytes(data)
    return root


def dump_rows(root):
    batches = list(verify.read_dump_queue(StoreDir(str(root)), T, QID))
    for b in batches:
        assert b.schema == verify.DUMP_UNITS_SCHEMA
    return batches, [r for b in batches for r in b.to_pylist()]


def numbers(text):
    """The whole numbers a sentence names."""
    return set(re.findall(r"-?\d+", text))


def unit(qo, clo, size, tags_code, store_time=None, bm=None):
    """A rebuilt unit (the rebuild's consume_queue columns verify compares)."""
    return {"queue_offset": qo, "commit_log_offset": clo, "size": size, "tags_code": tags_code,
            "msg_store_time": store_time, "filter_bitmap": bm}


def joined(rebuild, dump):
    """The full outer join job 1 makes on (topic, queue_id, queue_offset): r_* the rebuild's unit, d_* the dump's."""
    r_by, d_by = {u["queue_offset"]: u for u in rebuild}, {u["queue_offset"]: u for u in dump}
    rows = []
    for qo in sorted(set(r_by) | set(d_by)):
        r, d = r_by.get(qo), d_by.get(qo)
        row = {"topic": T, "queue_id": QID, "queue_offset": qo, "r_present": r is not None, "d_present": d is not None}
        for k in verify.FIELDS:
            row[f"r_{k}"] = None if r is None else r[k]
            row[f"d_{k}"] = None if d is None else d[k]
        row["d_cq_tags_field"] = None if d is None else d["cq_tags_field"]
        rows.append(row)
    return pa.RecordBatch.from_pylist(rows)


def diff(rebuild, dump, registry=None, groups=()):
    out = verify.diff_batch(joined(rebuild, dump), registry or ConsumerFilterManager(20, 32), groups)
    assert out.schema == verify.DIFF_SCHEMA
    return {r["queue_offset"]: r for r in out.to_pylist()}


# --- read_dump_queue ------------------------------------------------------------------------------------------------


def test_ext_queue_is_read_with_every_address_resolved_one_batch_per_file(tmp_path):
    ext = [CqExtUnit(100 + i, 5000 + i, bitmap(i, 50) if i % 2 else None) for i in range(7)]
    write_store(tmp_path, [(1000 * i, 90 + i, ("ext", i)) for i in range(7)], ext)
    batches, rows = dump_rows(tmp_path)
    assert [b.num_rows for b in batches] == [3, 3, 1]  # a batch per consumequeue file of 3 units
    assert [r["queue_offset"] for r in rows] == list(range(7))
    for i, r in enumerate(rows):
        assert (r["topic"], r["queue_id"], r["commit_log_offset"], r["size"]) == (T, QID, 1000 * i, 90 + i)
        assert is_ext_addr(r["cq_tags_field"])
        assert (r["tags_code"], r["msg_store_time"], r["filter_bitmap"]) == (100 + i, 5000 + i, ext[i].filter_bitmap)


def test_plain_queue_has_its_tags_code_and_no_ext_side(tmp_path):
    write_store(tmp_path, [(0, 100, -5), (100, 120, 2598919)])
    _, rows = dump_rows(tmp_path)
    assert [(r["tags_code"], r["cq_tags_field"], r["msg_store_time"], r["filter_bitmap"]) for r in rows] == \
        [(-5, -5, None, None), (2598919, 2598919, None, None)]


def test_leading_pre_blank_units_are_dropped(tmp_path):
    """ConsumeQueue.fillPreBlank fills the slots before a queue's first offset; they are no units of the queue."""
    write_store(tmp_path, [(500, 100, 1), (600, 100, 2), (700, 100, 3)], first_queue_offset=4)
    _, rows = dump_rows(tmp_path)
    assert [(r["queue_offset"], r["commit_log_offset"]) for r in rows] == [(4, 500), (5, 600), (6, 700)]


def test_a_unit_failing_the_recovery_check_ends_its_file(tmp_path):
    """Units run to the first with `offset >= 0 && size > 0` false; the next file is read from its start."""
    write_store(tmp_path, [(0, 100, 1), (0, 0, 0), (200, 100, 3), (300, 100, 4), (-1, 100, 5), (500, 100, 6)])
    _, rows = dump_rows(tmp_path)
    assert [r["queue_offset"] for r in rows] == [0, 3]


def test_a_truncated_consumequeue_file_keeps_its_whole_units(tmp_path):
    write_store(tmp_path, [(100 * i, 100, i) for i in range(5)])
    last = tmp_path / "consumequeue" / T / str(QID) / f"{3 * CQ_STORE_UNIT_SIZE:020d}"
    last.write_bytes(last.read_bytes()[:CQ_STORE_UNIT_SIZE + 7])  # one whole unit, then 7 bytes of the next
    _, rows = dump_rows(tmp_path)
    assert [r["queue_offset"] for r in rows] == [0, 1, 2, 3]


def test_an_address_that_resolves_to_no_unit_is_a_null_tags_code(tmp_path):
    ext = [CqExtUnit(7, 5000, bitmap(1))]
    nowhere = decorate(100)  # inside the first ext file, in its zero padding
    write_store(tmp_path, [(0, 100, ("ext", 0)), (100, 100, nowhere)], ext)
    _, rows = dump_rows(tmp_path)
    assert rows[0]["tags_code"] == 7
    assert rows[1]["cq_tags_field"] == nowhere
    assert (rows[1]["tags_code"], rows[1]["msg_store_time"], rows[1]["filter_bitmap"]) == (None, None, None)


def test_a_truncated_ext_file_loses_the_units_past_its_end(tmp_path):
    ext = [CqExtUnit(10 + i, 5000 + i, bitmap(i)) for i in range(8)]  # 34 bytes each: 3 per 128-byte file
    write_store(tmp_path, [(100 * i, 100, ("ext", i)) for i in range(8)], ext, units_per_file=10)
    second = tmp_path / "consumequeue_ext" / T / str(QID) / f"{128:020d}"
    second.write_bytes(second.read_bytes()[:34 + 10])  # the file's first unit, then 10 bytes of its second
    _, rows = dump_rows(tmp_path)
    assert [r["tags_code"] for r in rows] == [10, 11, 12, 13, None, None, 16, 17]


# --- diff_batch -----------------------------------------------------------------------------------------------------


def _registry():
    reg = ConsumerFilterManager(20, 32)
    assert reg.register(T, "G1", "a > 1", "SQL92", 1, now=1000)
    return reg


def _bits(reg, group):
    """The bit positions the broker hashes for (group, T): BloomFilter.generate(group + "#" + topic)."""
    return set(reg.bloom_filter.generate(bloom_key(group, T)).bit_pos)


def test_agreeing_queues_give_no_rows(tmp_path):
    ext = [CqExtUnit(5, 2000, bitmap(1, 2)), CqExtUnit(6, 2001, None)]
    write_store(tmp_path, [(0, 100, ("ext", 0)), (100, 110, ("ext", 1))], ext)
    _, rows = dump_rows(tmp_path)
    rebuild = [unit(0, 0, 100, 5, 2000, bitmap(1, 2)), unit(1, 100, 110, 6, 2001, None)]
    assert diff(rebuild, rows) == {}


def test_exactly_the_planted_differences_are_found(tmp_path):
    reg = _registry()
    g1, g2 = _bits(reg, "G1"), _bits(reg, "G2")
    assert not g2 <= g1
    stray = min(set(range(BYTES * 8)) - g1 - g2)
    mine = bitmap(*g1)
    rebuild = [unit(0, 0, 100, 5, 2000, mine), unit(1, 100, 100, 6, 2001, mine), unit(2, 200, 230, 7, 2002, mine),
               unit(3, 430, 100, 8, 2003, mine), unit(4, 530, 100, 9, 2004, mine), unit(5, 630, 100, 10, 2005, mine)]
    ext = [CqExtUnit(5, 2000, mine),
           CqExtUnit(4242, 2001, mine),                    # a changed tagsCode
           CqExtUnit(7, 2002, mine),                       # the CQ unit's size below differs
           CqExtUnit(8, 2003, bitmap(*(g1 | g2))),         # bits of G2, a known group the final registry lacks
           CqExtUnit(9, 2004, bitmap(*g1, stray))]         # a bit no record accounts for
    write_store(tmp_path, [(0, 100, ("ext", 0)), (100, 100, ("ext", 1)), (200, 231, ("ext", 2)),
                           (430, 100, ("ext", 3)), (530, 100, ("ext", 4))], ext)  # no unit at offset 5
    _, rows = dump_rows(tmp_path)
    out = diff(rebuild, rows, reg, ["G1", "G2"])
    assert sorted(out) == [1, 2, 3, 4, 5]

    tag = out[1]
    assert (tag["kind"], tag["fields"], tag["explained"]) == (verify.DIFFERS, ["tags_code"], False)
    assert (tag["dump_tags_code"], tag["rebuild_tags_code"]) == (4242, 6)
    assert {"4242", "6"} <= numbers(tag["reason"])
    assert is_ext_addr(tag["dump_cq_tags_field"])

    size = out[2]
    assert (size["fields"], size["dump_size"], size["rebuild_size"]) == (["size"], 231, 230)
    assert {"231", "230"} <= numbers(size["reason"]) and not size["explained"]

    removed = out[3]
    assert (removed["kind"], removed["fields"], removed["explained"]) == (verify.DIFFERS, ["filter_bitmap"], True)
    assert "(G2, T)" in removed["reason"] and "NOT explained" not in removed["reason"]
    assert removed["dump_filter_bitmap"] == bitmap(*(g1 | g2)) and removed["rebuild_filter_bitmap"] == mine

    odd = out[4]
    assert (odd["fields"], odd["explained"]) == (["filter_bitmap"], False)
    assert "NOT explained" in odd["reason"] and str(stray) in numbers(odd["reason"])

    missing = out[5]
    assert (missing["kind"], missing["fields"], missing["explained"]) == (verify.MISSING, [], False)
    assert missing["rebuild_commit_log_offset"] == 630 and missing["dump_commit_log_offset"] is None
    assert missing["dump_cq_tags_field"] is None and "630" in numbers(missing["reason"])


def test_a_unit_only_the_dump_has_is_extra(tmp_path):
    write_store(tmp_path, [(0, 100, 1), (100, 100, 2)])
    _, rows = dump_rows(tmp_path)
    out = diff([unit(0, 0, 100, 1)], rows)
    assert list(out) == [1]
    extra = out[1]
    assert (extra["kind"], extra["fields"], extra["explained"]) == (verify.EXTRA, [], False)
    assert extra["dump_commit_log_offset"] == 100 and extra["rebuild_commit_log_offset"] is None
    assert "100" in numbers(extra["reason"])


def test_commit_log_offset_difference_names_both_offsets(tmp_path):
    write_store(tmp_path, [(100, 100, 1)])
    _, rows = dump_rows(tmp_path)
    d = diff([unit(0, 200, 100, 1)], rows)[0]
    assert d["fields"] == ["commit_log_offset"] and {"100", "200"} <= numbers(d["reason"])


def test_an_explained_bitmap_with_another_difference_is_not_explained(tmp_path):
    reg = _registry()
    g1, g2 = _bits(reg, "G1"), _bits(reg, "G2")
    write_store(tmp_path, [(0, 100, ("ext", 0))], [CqExtUnit(5, 2999, bitmap(*(g1 | g2)))])
    _, rows = dump_rows(tmp_path)
    d = diff([unit(0, 0, 100, 5, 3000, bitmap(*g1))], rows, reg, ["G1", "G2"])[0]
    assert d["fields"] == ["msg_store_time", "filter_bitmap"]
    assert "explained by the rule" in d["reason"] and "(G2, T)" in d["reason"]
    assert d["explained"] is False  # the bitmap is not the only difference


def test_a_registration_born_after_the_message_explains_the_brokers_extra_bits(tmp_path):
    """The broker held an earlier version of a record the final registry shows born at or after the message."""
    reg = _registry()
    assert reg.register(T, "G3", "b = 1", "SQL92", 2, now=5000)
    g1, g3 = _bits(reg, "G1"), _bits(reg, "G3")
    assert not g3 <= g1
    write_store(tmp_path, [(0, 100, ("ext", 0))], [CqExtUnit(5, 4000, bitmap(*(g1 | g3)))])
    _, rows = dump_rows(tmp_path)
    d = diff([unit(0, 0, 100, 5, 4000, bitmap(*g1))], rows, reg, ["G1", "G3"])[0]
    assert d["explained"] and d["fields"] == ["filter_bitmap"]
    assert "(G3, T)" in d["reason"] and "5000" in numbers(d["reason"])


def test_rebuilt_bits_the_broker_did_not_set_are_never_explained(tmp_path):
    reg = _registry()
    g1 = _bits(reg, "G1")
    write_store(tmp_path, [(0, 100, ("ext", 0))], [CqExtUnit(5, 3000, bitmap())])
    _, rows = dump_rows(tmp_path)
    d = diff([unit(0, 0, 100, 5, 3000, bitmap(*g1))], rows, reg, ["G1", "G2"])[0]
    assert not d["explained"] and "not set by the broker" in d["reason"]


def test_a_bitmap_where_the_broker_wrote_none_is_not_explained(tmp_path):
    reg = _registry()
    write_store(tmp_path, [(0, 100, ("ext", 0))], [CqExtUnit(5, 3000, None)])
    _, rows = dump_rows(tmp_path)
    d = diff([unit(0, 0, 100, 5, 3000, bitmap(*_bits(reg, "G1")))], rows, reg, ["G1"])[0]
    assert d["fields"] == ["filter_bitmap"] and not d["explained"]
    assert "the broker wrote none" in d["reason"]


@pytest.mark.parametrize("dump_field", ["plain", "nowhere"])
def test_a_dump_unit_without_an_ext_unit(tmp_path, dump_field):
    """The dump's unit has no ext unit: its field is a plain tagsCode, or an address resolving to nothing (then its
    tagsCode is the broker's null too)."""
    reg = _registry()
    field = 5 if dump_field == "plain" else decorate(60)
    write_store(tmp_path, [(0, 100, ("ext", 0)), (100, 100, field)], [CqExtUnit(4, 2000, None)])
    _, rows = dump_rows(tmp_path)
    rebuild = [unit(0, 0, 100, 4, 2000, None), unit(1, 100, 100, 5, 2001, bitmap(*_bits(reg, "G1")))]
    d = diff(rebuild, rows, reg, ["G1"])
    assert list(d) == [1]
    d = d[1]
    if dump_field == "plain":
        assert d["fields"] == ["msg_store_time", "filter_bitmap"]
        assert "not an ext address" in d["reason"]
    else:
        assert d["fields"] == ["tags_code", "msg_store_time", "filter_bitmap"]
        assert d["dump_tags_code"] is None and d["dump_cq_tags_field"] == field
        assert "ext address (offset 60)" in d["reason"] and "resolves to no ext unit" in d["reason"]
        assert "its ext address resolves to no unit" in d["reason"]
    assert "only one side has an ext unit" in d["reason"] and not d["explained"]


def test_a_rebuild_without_ext_units_says_ext_was_off(tmp_path):
    write_store(tmp_path, [(0, 100, ("ext", 0))], [CqExtUnit(4, 2000, None)])
    _, rows = dump_rows(tmp_path)
    d = diff([unit(0, 0, 100, 4)], rows)[0]
    assert d["fields"] == ["msg_store_time"] and "enableConsumeQueueExt off" in d["reason"]
