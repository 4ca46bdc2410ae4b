"""One subscription's pull over one queue of a dump, from the store's own files: the units of the dump's
consume queue (ext units resolved as the broker's iterator does) joined to the decoded messages, every unit's
verdict set-at-a-time (`engine.decide`) and the pulls paged as getMessage does (`pull`). Job 2 runs this per
(subscription, queue); it is plain data in, plain data out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import message_filter as mf
from filterlib.engine.decide import Decisions, Units
from filterlib.replay.paging import Calls, PullConfig, pull_queue
from filterlib.store.compression import body_errors
from filterlib.store.consumequeue_ext import ExtColumns
from filterlib.store.dumpqueue import concat_ext, read_chunks, units_per_file
from filterlib.store.storedir import StoreDir


class MessageIndex:
    """Decoded messages (a table with commit_log_offset, properties, tags, and body_error or the body and sys_flag
    it is found from) looked up by commit log offset."""

    def __init__(self, table: pa.Table):
        offsets = np.asarray(table.column("commit_log_offset").to_numpy(), dtype=np.int64)
        order = np.argsort(offsets, kind="stable")
        self.offsets = offsets[order]
        if "body_error" not in table.column_names:
            flags = table.column("sys_flag").fill_null(0).to_numpy()
            table = table.append_column("body_error", body_errors(flags, table.column("body").combine_chunks()))
        self.table = table.select(["properties", "tags", "body_error"]).take(pa.array(order))

    def take(self, offsets: np.ndarray) -> tuple[pa.Array, pa.Array, pa.Array, np.ndarray]:
        """(properties, tags, body_error, found) for these commit log offsets; a missing message has none."""
        n = len(offsets)
        if not len(self.offsets):
            return (pa.nulls(n, self.table.schema.field("properties").type), pa.nulls(n, pa.string()),
                    pa.nulls(n, pa.string()), np.zeros(n, dtype=bool))
        pos = np.minimum(np.searchsorted(self.offsets, offsets), len(self.offsets) - 1)
        found = self.offsets[pos] == offsets
        rows = self.table.take(pa.array(pos))
        cols = [rows.column(name).combine_chunks() for name in ("properties", "tags", "body_error")]
        if not found.all():
            mask = pa.array(~found)
            cols = [pc.if_else(mask, pa.nulls(n, c.type), c) for c in cols]
        return cols[0], cols[1], cols[2], found


@dataclass
class Queue:
    """One consume queue of a dump: units from its min offset, their ext side, and the units per CQ file (0: a
    RocksDB queue, whose getMessage reads at most the batch size of units per call)."""

    topic: str
    queue_id: int
    min_offset: int
    commit_log_offset: np.ndarray
    size: np.ndarray
    ext: ExtColumns
    units_per_file: int


def load_queue(store: StoreDir, topic: str, queue_id: int) -> Queue:
    """The dump's own consume queue (and ext units) of (topic, queue_id) in memory, read by `dumpqueue.read_chunks`
    (pre-blank fillers dropped; a RocksDB queue paged by batch rather than by file: units_per_file 0)."""
    chunks = list(read_chunks(store, topic, queue_id))
    held = [c for c in chunks if len(c)]
    ends = [c.end_offset for c in chunks if c.end_offset is not None]
    min_offset = int(held[0].queue_offset[0]) if held else (ends[-1] if ends else 0)

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(c, name) for c in held]) if held else np.zeros(0, np.int64)

    return Queue(topic, queue_id, min_offset, cat("commit_log_offset"), cat("size"),
                 concat_ext([c.ext for c in held]), units_per_file(store, topic, queue_id))


def units_of(queue: Queue, messages: MessageIndex) -> Units:
    """The queue's units as the filter and the client see them: ext side plus the message's properties, tags and
    body decode error."""
    props, tags, errors, _ = messages.take(queue.commit_log_offset)
    e = queue.ext
    return Units(e.tags_code, e.tags_code_legal, e.has_ext, e.store_time, e.bitmaps, e.bitmap_length, props, tags,
                 errors)


def replay_queue(f: mf.ExpressionMessageFilter, queue: Queue, messages: MessageIndex, start: int = 0,
                 config: PullConfig | None = None) -> tuple[Decisions, Calls]:
    """Every unit's decision and the pulls from `start` (the harness and `--from earliest` start at 0)."""
    return pull_queue(f, units_of(queue, messages), queue.size, start, queue.min_offset, queue.units_per_file, config)
