"""ConsumeQueue files: 20-byte units (commit log offset, size, tagsCode), decode and byte-identical encode."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from filterlib.store import fs as sfs
from filterlib.store.commitlog import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    file_name,
    is_mapped_file_name,
)

CQ_STORE_UNIT_SIZE = 20
DEFAULT_CQ_FILE_SIZE = 300000 * CQ_STORE_UNIT_SIZE
PRE_BLANK_SIZE = 0x7FFFFFFF
UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])


def cq_file_size(configured: int = DEFAULT_CQ_FILE_SIZE) -> int:
    """mappedFileSizeConsumeQueue as the store uses it: rounded up to a multiple of 20 (the config getter)."""
    return int(math.ceil(configured / (CQ_STORE_UNIT_SIZE * 1.0)) * CQ_STORE_UNIT_SIZE)


@dataclass(frozen=True)
class CqUnit:
    """One consume-queue unit at logical offset queue_offset."""

    queue_offset: int
    offset: int
    size: int
    tags_code: int

    @property
    def is_pre_blank(self) -> bool:
        """A filler unit written before a queue's first real unit (offset 0, size Integer.MAX_VALUE)."""
        return self.offset == 0 and self.size == PRE_BLANK_SIZE and self.tags_code == 0


def decode_units(data: bytes | np.ndarray) -> np.ndarray:
    """All whole 20-byte units of a buffer as a structured array (big-endian fields offset, size, tags_code)."""
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    n = len(buf) // CQ_STORE_UNIT_SIZE
    return buf[: n * CQ_STORE_UNIT_SIZE].view(UNIT_DTYPE)


def valid_count(units: np.ndarray) -> int:
    """Units before the first that fails the recovery check `offset >= 0 && size > 0` (a zeroed unit ends data)."""
    bad = np.flatnonzero((units["offset"] < 0) | (units["size"] <= 0))
    return int(bad[0]) if len(bad) else len(units)


def queue_files(queue_dir: str) -> list[tuple[int, str]]:
    """(start byte offset, path) of a queue directory's mapped files, in order (stray entries skipped)."""
    out = []
    for name in sfs.listdir(queue_dir):
        path = os.path.join(queue_dir, name)
        if is_mapped_file_name(name) and sfs.isfile(path):
            out.append((int(name), path))
    return sorted(out)


def read_queue(queue_dir: str) -> list[CqUnit]:
    """Every valid unit of one (topic, queueId) directory with its logical queue offset, like the broker reads it.

    Within each file the units run until the first failing the recovery check; pre-blank fillers are included
    (test `is_pre_blank`) because they occupy logical offsets.
    """
    out: list[CqUnit] = []
    for start, path in queue_files(queue_dir):
        units = decode_units(sfs.read_bytes(path))
        n = valid_count(units)
        base = start // CQ_STORE_UNIT_SIZE
        for i in range(n):
            u = units[i]
            out.append(CqUnit(base + i, int(u["offset"]), int(u["size"]), int(u["tags_code"])))
    return out


def encode_unit(offset: int, size: int, tags_code: int) -> bytes:
    """One 20-byte unit."""
    return np.array([(offset, size, tags_code)], dtype=UNIT_DTYPE).tobytes()


def encode_queue_files(units: Iterable[tuple[int, int, int]], file_size: int = DEFAULT_CQ_FILE_SIZE,
                       first_queue_offset: int = 0) -> dict[str, bytes]:
    """Files of one queue as the broker leaves them: {20-digit name: full mapped-file bytes}.

    units are (commit log offset, size, tagsCode) for consecutive logical offsets from first_queue_offset; when
    that is not 0, the slots before it in its file get pre-blank units (ConsumeQueue.fillPreBlank) and earlier
    files do not exist. The last file is zero-padded to file_size like a pre-allocated mapped file.
    """
    fs = cq_file_size(file_size)
    arr = np.array(list(units), dtype=UNIT_DTYPE)
    start_byte = first_queue_offset * CQ_STORE_UNIT_SIZE
    file_start = start_byte - start_byte % fs
    pre = (start_byte - file_start) // CQ_STORE_UNIT_SIZE
    blanks = np.array([(0, PRE_BLANK_SIZE, 0)] * pre, dtype=UNIT_DTYPE)
    data = blanks.tobytes() + arr.tobytes()
    out: dict[str, bytes] = {}
    pos = 0
    while pos < len(data) or not out:
        chunk = data[pos: pos + fs]
        out[file_name(file_start + pos)] = chunk + b"\0" * (fs - len(chunk))
        pos += fs
    return out


def build_units(rows: Sequence[dict]) -> dict[tuple[str, int], list[tuple[int, int, int, int]]]:
    """Group records into queues the way CommitLogDispatcherBuildConsumeQueue does.

    rows: dicts with topic, queue_id, queue_offset, commit_log_offset, store_size, sys_flag, tags_code.
    Only transaction types NOT (0) and COMMIT (8) get a unit. Returns {(topic, qid): [(queue_offset, offset,
    size, tagsCode), ...]} sorted by queue offset.
    """
    out: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    for r in rows:
        # MessageSysFlag.getTransactionValue: flag & TRANSACTION_ROLLBACK_TYPE (0xC, the 2-bit field)
        if r["sys_flag"] & TRANSACTION_ROLLBACK_TYPE not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            continue
        out.setdefault((r["topic"], r["queue_id"]), []).append(
            (r["queue_offset"], r["commit_log_offset"], r["store_size"], r["tags_code"]))
    for v in out.values():
        v.sort()
    return out


def read_queue_columns(queue_dir: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """A queue's valid units as columns (queue_offset, commit log offset, size, tagsCode field) and the number of
    units per mapped file (from the first file's size); pre-blank fillers included, as `read_queue` does."""
    parts = []
    per_file = 0
    for start, path in queue_files(queue_dir):
        data = sfs.read_bytes(path)
        per_file = per_file or len(data) // CQ_STORE_UNIT_SIZE
        units = decode_units(data)
        n = valid_count(units)
        parts.append((np.arange(n, dtype=np.int64) + start // CQ_STORE_UNIT_SIZE, units[:n]))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty, 1
    qo = np.concatenate([p[0] for p in parts])
    units = np.concatenate([p[1] for p in parts])
    return (qo, units["offset"].astype(np.int64), units["size"].astype(np.int64),
            units["tags_code"].astype(np.int64), max(per_file, 1))
