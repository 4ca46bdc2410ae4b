"""consumequeue_ext.lookup (ConsumeQueueExt.get): resolving each consume-queue unit's ext address one at a time,
against real 5.3.3 stores written by the reference harness (listing `cq.ext`: tagsCode, msgStoreTime, bitmapHex),
and the broker's edge cases on generated ext files."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import refharness
import scenarios

from filterlib.store import consumequeue_ext as ext
from filterlib.store.commitlog import file_name
from filterlib.store.storedir import StoreDir


def _scenarios() -> dict[str, dict]:
    """Ext-enabled stores test_store_reference.py also uses (same payloads, so the harness cache answers)."""
    varied1 = scenarios.varied_scenario(1)  # varied_scenario(2)'s seed turns the ext queue off
    varied1["subscriptions"] = []
    return {"tag_ext": scenarios.tag_and_sql_scenario(1), "varied1": varied1}


@pytest.fixture(scope="module")
def stores() -> dict[str, str]:
    return {name: str(refharness.write_store(sc)) for name, sc in _scenarios().items()}


@pytest.mark.reference
@pytest.mark.parametrize("name", ["tag_ext", "varied1"])
def test_lookup_of_every_cq_unit_equals_listing(stores, name) -> None:
    """Each CQ unit's tagsCode field looked up in its queue's ext files: the listing's ext unit (real tagsCode,
    store time, filter bitmap) for ext addresses, None for plain tag hashes; and the same unit the full walk
    (read_ext_queue) finds at that address."""
    out = stores[name]
    listing = json.load(open(os.path.join(out, "listing.json"), encoding="utf-8"))
    report = json.load(open(os.path.join(out, "report.json"), encoding="utf-8"))
    assert report["broker"]["enableConsumeQueueExt"]
    file_size = report["store"]["mappedFileSizeConsumeQueueExt"]
    expected = {(r["topic"], r["queueId"], r["queueOffset"]): r for r in listing["records"] if r["cq"] is not None}
    sd = StoreDir(os.path.join(out, "store"))
    looked_up = plain = multi_file = 0
    for topic, qid in sd.queue_ids():
        files = ext.load_ext_files(sd.queue_dir(topic, qid, ext=True))
        assert files and all(len(d) == file_size for d in files.values())
        multi_file += len(files) > 1
        walked = ext.read_ext_queue(sd.queue_dir(topic, qid, ext=True))
        for u in sd.read_queue(topic, qid):
            if u.is_pre_blank:
                continue
            cq_ = expected[(topic, qid, u.queue_offset)]["cq"]
            got = ext.lookup(files, file_size, u.tags_code)
            if cq_["ext"] is None:
                assert got is None and not ext.is_ext_addr(u.tags_code)
                plain += 1
                continue
            assert got is not None, (topic, qid, u.queue_offset)
            bitmap = None if got.filter_bitmap is None else got.filter_bitmap.hex()
            assert (got.tags_code, got.msg_store_time, bitmap) == \
                (int(cq_["ext"]["tagsCode"]), cq_["ext"]["msgStoreTime"], cq_["ext"]["bitmapHex"])
            assert got == walked[u.tags_code]
            looked_up += 1
    assert looked_up > 50
    assert multi_file, "some queue's ext units span several files (addresses past the first file)"


def _units(n: int) -> list[ext.CqExtUnit]:
    return [ext.CqExtUnit(1000 + i, 1700000000000 + i, bytes([i % 256]) * (i % 7) or None) for i in range(n)]


def test_lookup_resolves_every_address_across_files() -> None:
    """Units written by encode_ext_files (ConsumeQueueExt.put) over several small files, each looked up by the
    address put returned; the -1 end marker, zero padding and missing files give None."""
    size = 128
    units = _units(40)
    named, addrs = ext.encode_ext_files(units, size)
    files = {int(n): d for n, d in named.items()}
    assert len(files) > 3
    for u, a in zip(units, addrs, strict=True):
        assert ext.is_ext_addr(a)
        assert ext.lookup(files, size, a) == u
    last = ext.undecorate(addrs[-1]) + units[-1].size
    assert ext.lookup(files, size, ext.decorate(last)) is None  # zeros after the last unit
    first_file_end = max(ext.undecorate(a) + u.size for u, a in zip(units, addrs, strict=True)
                         if ext.undecorate(a) < size)
    assert files[0][first_file_end: first_file_end + 2] == b"\xff\xff"  # the short -1 end marker
    assert ext.lookup(files, size, ext.decorate(first_file_end)) is None
    assert ext.lookup(files, size, ext.decorate(len(files) * size)) is None  # no such file
    for plain in (0, 1, -1, 2 ** 31 - 1, -(2 ** 31)):  # tag hashes and Integer.MIN_VALUE are not ext addresses
        assert not ext.is_ext_addr(plain)
        assert ext.lookup(files, size, plain) is None


def test_lookup_real_offset_zero_falls_back_to_first_file() -> None:
    """findMappedFileByOffset(realOffset, realOffset == 0): with the file at 0 gone, address 0 reads position 0 of
    the first remaining file; any other address of a missing file is not found."""
    size = 128
    units = _units(40)
    named, addrs = ext.encode_ext_files(units, size)
    files = {int(n): d for n, d in named.items()}
    del files[0]
    first = min(files)
    assert named[file_name(first)] == files[first]
    at_first = next(u for u, a in zip(units, addrs, strict=True) if ext.undecorate(a) == first)
    assert ext.lookup(files, size, ext.decorate(0)) == at_first
    assert ext.lookup(files, size, addrs[1]) is None
    assert ext.lookup({}, size, ext.decorate(0)) is None


def _row_resolution(files: dict[int, bytes], file_size: int, fields: list[int]) -> list[tuple]:
    """What resolve_columns must give per unit, from the row `lookup` (the broker's null for what stays an address)."""
    out = []
    for f in fields:
        unit = ext.lookup(files, file_size, f) if ext.is_ext_addr(f) else None
        tags = f if unit is None else unit.tags_code
        out.append((tags if not ext.is_ext_addr(tags) else None, unit is not None,
                    0 if unit is None else unit.msg_store_time,
                    None if unit is None or unit.filter_bitmap is None else unit.filter_bitmap))
    return out


def _columns_resolution(files: dict[int, bytes], file_size: int, fields: list[int]) -> list[tuple]:
    c = ext.resolve_columns(np.array(fields, dtype=np.int64), files, file_size)
    return [(int(c.tags_code[i]) if c.tags_code_legal[i] else None, bool(c.has_ext[i]), int(c.store_time[i]),
             None if c.bitmap_length[i] < 0 else c.bitmaps[i, :c.bitmap_length[i]].tobytes())
            for i in range(len(fields))]


@pytest.mark.reference
@pytest.mark.parametrize("name", ["tag_ext", "varied1"])
def test_resolve_columns_equals_lookup(stores, name) -> None:
    """The vectorised resolution of a whole queue equals `lookup` unit by unit, on real ext files plus addresses
    that miss (no such file, past the data, real offset 0 with no file at 0) and plain tag hashes."""
    out = stores[name]
    report = json.load(open(os.path.join(out, "report.json"), encoding="utf-8"))
    file_size = report["store"]["mappedFileSizeConsumeQueueExt"]
    sd = StoreDir(os.path.join(out, "store"))
    compared = 0
    for topic, qid in sd.queue_ids():
        files = ext.load_ext_files(sd.queue_dir(topic, qid, ext=True))
        fields = [u.tags_code for u in sd.read_queue(topic, qid)]
        fields += [ext.decorate(file_size * 1000), ext.decorate(max(files) + file_size - 3), ext.decorate(0), 12345,
                   -7]
        want = _row_resolution(files, file_size, fields)
        assert _columns_resolution(files, file_size, fields) == want
        without_first = {k: v for k, v in files.items() if k != min(files)}
        if without_first:
            assert _columns_resolution(without_first, file_size, fields) == \
                _row_resolution(without_first, file_size, fields)
        compared += len(fields)
    assert compared > 100


def test_resolve_columns_on_cut_units() -> None:
    """A unit cut inside its header or its bitmap is no unit (read_unit's checks), as `lookup` says."""
    import struct

    whole = ext.CqExtUnit(77, 1700000000000, b"\x05\x06\x07").encode()
    head = struct.pack(">hqq", 28, 5, 6)
    data = whole + head + b"\x00" * 2
    files = {0: whole + whole[:-2], 4096: data + whole[:21], 8192: head[:10]}
    fields = [ext.decorate(0), ext.decorate(len(whole)), ext.decorate(4096 + len(whole)),
              ext.decorate(4096 + len(data)), ext.decorate(8192), 99]
    assert _columns_resolution(files, 4096, fields) == _row_resolution(files, 4096, fields)
    assert [r[1] for r in _row_resolution(files, 4096, fields)] == [True, False, True, False, False, False]
