"""A dump's own consume queue as the broker's pull reads it: the one reader job 2's replay and job 1's `--verify`
share, for file queues (consumequeue/ + consumequeue_ext/) and RocksDB queues alike.

A file queue is read one consumequeue file at a time (bounded memory whatever the queue's length): the units each
file holds up to the first that fails the recovery check, leading pre-blank fillers dropped, every ext address
resolved to its ext unit as the broker's iterator does (`consumequeue_ext.resolve_columns`), loading only the ext
files the file's addresses point into. A RocksDB queue has no ext units and comes in batches of `ROCKSDB_BATCH`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from filterlib.store import fs as sfs
from filterlib.store.consumequeue import CQ_STORE_UNIT_SIZE, PRE_BLANK_SIZE, decode_units, queue_files, valid_count
from filterlib.store.consumequeue_ext import ExtColumns, resolve_columns
from filterlib.store.queues import ROCKSDB
from filterlib.store.storedir import StoreDir

ROCKSDB_BATCH = 65536


@dataclass
class QueueChunk:
    """Consecutive units of one queue: their queue offsets, commit log offsets, sizes, the CQ unit's own tagsCode
    field, its ext side, and the queue offset just past the file's last valid unit (None: the file holds none)."""

    queue_offset: np.ndarray
    commit_log_offset: np.ndarray
    size: np.ndarray
    tags_field: np.ndarray
    ext: ExtColumns
    end_offset: int | None

    def __len__(self) -> int:
        return len(self.queue_offset)


class _ExtFiles:
    """A queue's ext files, loaded on demand and dropped once the (ascending) addresses have moved past them."""

    def __init__(self, ext_dir: str):
        listed = queue_files(ext_dir) if sfs.isdir(ext_dir) else []
        self.paths = dict(listed)
        self.first = listed[0][0] if listed else None
        self.size = sfs.getsize(listed[0][1]) if listed else 1
        self.loaded: dict[int, bytes] = {}

    def for_fields(self, fields: np.ndarray) -> dict[int, bytes]:
        """{start: bytes} of the files the ext addresses among `fields` point into (what `lookup` would read)."""
        addrs = fields[fields <= -(1 << 31) - 1]
        if not len(addrs) or self.first is None:
            return {}
        real = addrs - np.int64(-(1 << 63))
        starts = set(np.unique(real - real % self.size).tolist())
        if 0 in real and 0 not in self.paths:
            starts.add(self.first)  # findMappedFileByOffset(0, true) falls back to the first file
        need = {s for s in starts if s in self.paths}
        for s in [s for s in self.loaded if s not in need]:
            del self.loaded[s]
        for s in need - set(self.loaded):
            self.loaded[s] = sfs.read_bytes(self.paths[s])
        return dict(self.loaded)


def units_per_file(store: StoreDir, topic: str, queue_id: int) -> int:
    """Units per consumequeue file (from the first file's size; 1 for a queue without files), 0 for a RocksDB queue,
    whose getMessage reads by batch rather than by file."""
    if store.queue_kind == ROCKSDB:
        return 0
    files = queue_files(store.queue_dir(topic, queue_id))
    return max(1, sfs.getsize(files[0][1]) // CQ_STORE_UNIT_SIZE) if files else 1


def read_chunks(store: StoreDir, topic: str, queue_id: int) -> Iterator[QueueChunk]:
    """The queue's units in queue order, a chunk per consumequeue file (per `ROCKSDB_BATCH` units of a RocksDB
    queue); a file holding only leading pre-blank fillers gives an empty chunk with its `end_offset`."""
    if store.queue_kind == ROCKSDB:
        cols = store.queue_columns(topic, queue_id)
        n = len(cols.queue_offset)
        for lo in range(0, n, ROCKSDB_BATCH):
            hi = min(n, lo + ROCKSDB_BATCH)
            tags = cols.tags_code[lo:hi]
            yield QueueChunk(cols.queue_offset[lo:hi], cols.commit_log_offset[lo:hi], cols.size[lo:hi], tags,
                             resolve_columns(tags, {}, 1), int(cols.queue_offset[hi - 1]) + 1)
        return
    ext = _ExtFiles(store.queue_dir(topic, queue_id, ext=True))
    leading = True
    for start, path in queue_files(store.queue_dir(topic, queue_id)):
        units = decode_units(sfs.read_bytes(path))
        units = units[:valid_count(units)]
        qo = np.arange(len(units), dtype=np.int64) + start // CQ_STORE_UNIT_SIZE
        offsets = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        fields = units["tags_code"].astype(np.int64)
        end = int(qo[-1]) + 1 if len(qo) else None
        if leading:
            real = np.flatnonzero(~((offsets == 0) & (sizes == PRE_BLANK_SIZE) & (fields == 0)))
            first = int(real[0]) if len(real) else len(units)
            qo, offsets, sizes, fields = qo[first:], offsets[first:], sizes[first:], fields[first:]
            leading = len(real) == 0
        yield QueueChunk(qo, offsets, sizes, fields, resolve_columns(fields, ext.for_fields(fields), ext.size), end)


def concat_ext(parts: Sequence[ExtColumns]) -> ExtColumns:
    """Several chunks' ext sides as one (bitmap matrices padded to the widest)."""
    width = max((p.bitmaps.shape[1] for p in parts), default=0)
    bitmaps = [np.pad(p.bitmaps, ((0, 0), (0, width - p.bitmaps.shape[1]))) for p in parts]

    def cat(name: str, dtype) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts]) if parts else np.zeros(0, dtype)

    return ExtColumns(cat("tags_code", np.int64), cat("tags_code_legal", bool), cat("has_ext", bool),
                      cat("store_time", np.int64),
                      np.concatenate(bitmaps) if parts else np.zeros((0, 0), np.uint8), cat("bitmap_length", np.int64))
