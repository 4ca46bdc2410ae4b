"""Store reader robustness on real dumps: files that shrink while read, scans side by side, stray entries."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from filterlib.errors import StoreFormatError
from filterlib.store import _kernels as K
from filterlib.store import commitlog as cl
from filterlib.store import consumequeue as cq
from filterlib.store.scan import RangeScan, ScanOptions
from filterlib.store.storedir import StoreDir


def _file(tmp_path, base: int, topic: str, n: int) -> str:
    """A commitlog file of n records of one topic (queue offsets 0..n-1), no BLANK, no zero tail."""
    out = bytearray()
    for i in range(n):
        out += cl.encode_record(topic=topic, body=b"x" * 50, queue_offset=i, commit_log_offset=base + len(out))
    path = os.path.join(tmp_path, cl.file_name(base))
    with open(path, "wb") as f:
        f.write(out)
    return path


def test_file_shrinking_during_a_scan_is_an_error_not_a_hang(tmp_path) -> None:
    path = _file(tmp_path, 0, "T", 40)
    size = os.path.getsize(path)
    # The size was taken before the file was cut (a copy still running, a cleaner truncating it).
    scan = RangeScan(path, 0, size + 4096, ScanOptions(chunk_bytes=1024), file_size=size + 4096)
    with pytest.raises(StoreFormatError, match="shrank"):
        scan.batches()


def test_scans_iterated_side_by_side_in_one_thread(tmp_path) -> None:
    opts = ScanOptions(chunk_bytes=1024, batch_rows=4)
    a = _file(tmp_path, 0, "TopicA", 60)
    b = _file(tmp_path, 1 << 20, "TopicB", 60)
    ia, ib = iter(RangeScan(a, 0, os.path.getsize(a), opts)), iter(RangeScan(b, 0, os.path.getsize(b), opts))
    rows: dict[str, list] = {"TopicA": [], "TopicB": []}
    for ba, bb in zip(ia, ib, strict=True):
        for batch in (ba, bb):
            for r in batch.select(["topic", "queue_offset"]).to_pylist():
                rows[r["topic"]].append(r["queue_offset"])
    assert rows == {"TopicA": list(range(60)), "TopicB": list(range(60))}


def test_stray_entries_in_store_directories_are_skipped(tmp_path) -> None:
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    _file(root / "commitlog", 0, "T", 3)
    (root / "commitlog" / ("\u0661" * 20)).write_bytes(b"")  # 20 Arabic-Indic digits: not a mapped file
    qdir = root / "consumequeue" / "T" / "0"
    qdir.mkdir(parents=True)
    (qdir / cq.file_name(0)).write_bytes(cq.encode_unit(0, 141, 7) + bytes(20))
    (qdir / cq.file_name(6000000)).mkdir()  # a directory with a file's name
    (qdir / ".DS_Store").write_bytes(b"x")
    for stray in ("--1", "-", "007", "\u0661", "x1"):
        (root / "consumequeue" / "T" / stray).mkdir()
    sd = StoreDir(str(root) + "/")
    assert [f.base for f in sd.commitlog.files] == [0]
    assert sd.queue_ids() == [("T", 0)]
    assert sd.read_queue("T", 0) == [cq.CqUnit(0, 0, 141, 7)]


@pytest.mark.parametrize("total", [-(1 << 31), -(1 << 31) + 3])
def test_totalsize_minus_4_overflows_like_java(total: int) -> None:
    # facts §1.12: "remaining < TOTALSIZE - 4 -> fail", in Java int arithmetic: MIN_VALUE - 4 wraps positive.
    rec = bytearray(cl.encode_record(topic="T", body=b"abc"))
    rec[0:4] = struct.pack(">i", total)
    assert cl.decode_record(bytes(rec), 0)[:2] == (cl.SIZE_EXCEEDS_FILE, -1)
    buf = np.frombuffer(bytes(rec), dtype=np.uint8)
    assert K.check_record(buf, 0, True, len(rec), False, K.CRC_TABLE)[0] == cl.SIZE_EXCEEDS_FILE
