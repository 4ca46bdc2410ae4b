"""Job 2's packed replay: each side of a queue piece (its units, its messages' verdicts) comes to the piece's task as
a few rows of Arrow IPC bytes, one per piece and file read, not as a row per unit joined and grouped by Spark.

The messages side places each message in the piece its own queue offset falls in (`Geometry`); a piece's task joins
its units to those messages by commit log offset. A unit that finds none there (its queue points at a message
of another queue, or at none) is named back (`pull_tasks.UNRESOLVED`): the job replays the joined way where such a
message exists, so no decision rests on where a message was looked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.pull_tasks import (
    CQ_SIDE,
    MESSAGE_COLUMNS,
    OUT_SCHEMA,
    UNRESOLVED,
    VERDICT_SIDE_SCHEMA,
    PullContext,
    _part,
    _verdict_batches,
    dump_queue_batches,
    file_rows,
    replay_piece,
)
from jobs.schemas import spark_ddl

KEYS = ("topic", "queue_id", "piece")
"""What a piece is grouped by."""
UNITS, MESSAGES = 0, 1
"""The `side` of a packed row: CQ_SIDE rows, or VERDICT_SIDE_SCHEMA rows."""
PACKED_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("piece", pa.int64()),
                           ("side", pa.int32()), ("rows", pa.binary())])
"""One side's rows of one piece from one task as an Arrow IPC stream (`rows`), the piece's key columns dropped."""
GEOMETRY_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("piece_base", pa.int64()),
                             ("piece_units", pa.int64()), ("min_offset", pa.int64()), ("end_offset", pa.int64()),
                             ("units_per_file", pa.int64()), ("replay_from", pa.int64())])
"""Per pulled queue: where its pieces are counted from and how many units each holds (0: the queue is one piece),
and where known, its first and end offsets, units per file, and where a continued history replays from."""


@dataclasses.dataclass(frozen=True)
class Geometry:
    """The pulled queues' pieces (GEOMETRY_SCHEMA rows), for both sides to place their rows alike."""

    table: pa.Table

    def place(self, t: pa.Table) -> pa.Table:
        """t's rows of a pulled queue within its known offsets (`queue_offset`), with their `piece` and the queue's
        geometry columns; the rows of other queues dropped."""
        if not t.num_rows:
            return t.append_column("piece", pa.array([], pa.int64()))
        keys = pa.table({"topic": t.column("topic").cast(pa.string()),
                         "queue_id": t.column("queue_id").cast(pa.int32()),
                         "_row": pa.array(np.arange(t.num_rows, dtype=np.int64))})
        found = keys.join(self.table, keys=["topic", "queue_id"], join_type="inner")
        rows = found.column("_row")
        t = t.take(rows)
        for name in self.table.column_names[2:]:
            t = t.append_column(name, found.column(name))
        qo = t.column("queue_offset").to_numpy()
        base = t.column("piece_base").to_numpy()
        units = t.column("piece_units").to_numpy()
        piece = np.where(units > 0, (qo - base) // np.maximum(units, 1), 0)
        keep = piece >= 0
        for name, below in (("min_offset", True), ("replay_from", True), ("end_offset", False)):
            bound = t.column(name)
            if bound.null_count < len(bound):
                b = pc.fill_null(bound, -1 if below else 1 << 62).to_numpy()
                keep &= qo >= b if below else qo < b
        t = t.append_column("piece", pa.array(piece, pa.int64()))
        return t if keep.all() else t.filter(pa.array(keep))


def geometry(rows: list[tuple]) -> Geometry:
    """A Geometry from GEOMETRY_SCHEMA tuples."""
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in GEOMETRY_SCHEMA]
    return Geometry(pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols, GEOMETRY_SCHEMA, strict=True)],
                                         schema=GEOMETRY_SCHEMA))


def packed_ddl() -> str:
    return spark_ddl(PACKED_SCHEMA)


def _ipc(t: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue()


def _binary(buffers: list[pa.Buffer]) -> pa.Array:
    """A binary array of the buffers' bytes, copied once."""
    offsets = np.zeros(len(buffers) + 1, np.int32)
    np.cumsum([b.size for b in buffers], out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(buffers), [None, pa.py_buffer(offsets),
                                                             pa.py_buffer(b"".join(buffers))])


def pack(t: pa.Table, side: int) -> pa.RecordBatch:
    """t's rows (with KEYS columns) as PACKED_SCHEMA rows: one per piece, its rows without the key columns."""
    if not t.num_rows:
        return pa.RecordBatch.from_pylist([], schema=PACKED_SCHEMA)
    t = t.sort_by([(k, "ascending") for k in KEYS])
    topic = pc.dictionary_encode(t.column("topic")).combine_chunks().indices.to_numpy(zero_copy_only=False)
    q = t.column("queue_id").to_numpy()
    piece = t.column("piece").to_numpy()
    change = np.flatnonzero((np.diff(topic) != 0) | (np.diff(q) != 0) | (np.diff(piece) != 0)) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [t.num_rows]])
    body = t.drop_columns(list(KEYS))
    rows = [_ipc(body.slice(a, b - a)) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    at = pa.array(starts)
    return pa.RecordBatch.from_arrays([t.column("topic").take(at).combine_chunks(), pa.array(q[starts], pa.int32()),
                                       pa.array(piece[starts], pa.int64()),
                                       pa.array(np.full(len(rows), side, np.int32)), _binary(rows)],
                                      schema=PACKED_SCHEMA)


def unpack(packed: pa.Table, side: int, schema: pa.Schema) -> pa.Table:
    """The `side` rows of a piece's packed rows, one table (`schema`: the rows' schema, for a side without rows)."""
    mine = packed.filter(pc.equal(packed.column("side"), side)).column("rows")
    parts = [pa.ipc.open_stream(v.as_buffer()).read_all() for chunk in mine.chunks for v in chunk]
    return pa.concat_tables(parts) if parts else schema.empty_table()


UNIT_ROWS = pa.schema([f for f in CQ_SIDE if f.name not in KEYS])
SIDE_ROWS = VERDICT_SIDE_SCHEMA


def packed_dump_queues(store_root: str, store_type: str | None = None):
    """The mapInArrow function: (topic, queue_id, piece_units) rows in, the dump's units of those queues out
    packed per piece (`pull_tasks.dump_queue_batches`, a consumequeue file at a time)."""
    from filterlib.store import fs as sfs
    from filterlib.store.storedir import StoreDir

    remote = sfs.snapshot()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sfs.install(remote)
        store = StoreDir(store_root, store_type=store_type)
        for batch in batches:
            for t in batch.to_pylist():
                for b in dump_queue_batches(store, t["topic"], t["queue_id"], int(t["piece_units"])):
                    yield pack(pa.Table.from_batches([b]), UNITS)

    return run


CQ_COLUMNS = ("topic", "queue_id", "queue_offset", "commit_log_offset", "size", "tags_code", "msg_store_time",
              "filter_bitmap")
"""The consume_queue table's columns a replay reads."""


def packed_rebuilt_queues(source: Any, where: Geometry):
    """The mapInArrow function: `path` rows of the consume_queue table's files (`source`) in, the pulled queues'
    units out packed per piece, as CQ_SIDE rows (job 1's rebuild: every tagsCode legal, ext where it stored one)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in file_rows(source, None, batches, CQ_COLUMNS):
            t = where.place(pa.Table.from_batches([b]))
            if not t.num_rows:
                continue
            n = t.num_rows
            store_time = t.column("msg_store_time")
            cols = {"end_offset": pa.nulls(n, pa.int64()), "tags_code_legal": pa.array(np.ones(n, bool)),
                    "has_ext": pc.is_valid(store_time), "ext_store_time": store_time}
            yield pack(pa.Table.from_arrays([cols[f.name] if f.name in cols else t.column(f.name).cast(f.type)
                                             for f in CQ_SIDE], schema=CQ_SIDE), UNITS)

    return run


def end_rows(rows: list[tuple[str, int, int, int, int, int]]) -> list[tuple]:
    """Each queue's end row (`pull_tasks.CQ_SIDE`) packed, from (topic, queue_id, piece, min_offset,
    units_per_file, end_offset) tuples: PACKED_SCHEMA tuples for the driver to hand Spark."""
    if not rows:
        return []
    cols = list(zip(*rows, strict=True))
    n = len(rows)
    head = dict(zip(("topic", "queue_id", "piece", "min_offset", "units_per_file", "end_offset"), cols, strict=True))
    t = pa.Table.from_arrays([pa.array(head[f.name], f.type) if f.name in head else pa.nulls(n, f.type)
                              for f in CQ_SIDE], schema=CQ_SIDE)
    b = pack(t, UNITS)
    return list(zip(*(b.column(i).to_pylist() for i in range(b.num_columns)), strict=True))


def packed_message_files(ctx: PullContext, source: Any, low: int | None, where: Geometry):
    """The mapInArrow function: `path` rows of the messages table's files in, the verdicts of each message of a
    pulled queue out (`pull_tasks.message_side`), packed per piece of its own queue."""
    columns = (*MESSAGE_COLUMNS, "queue_id", "queue_offset")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cache: dict = {}
        for b in file_rows(source, low, batches, columns):
            t = where.place(pa.Table.from_batches([b]))
            for placed in t.select(list(dict.fromkeys([*MESSAGE_COLUMNS, *KEYS]))).to_batches():
                for v in _verdict_batches(ctx, placed, cache, keep=KEYS):
                    yield pack(pa.Table.from_batches([v]), MESSAGES)

    return run


def replay_packed(ctx: PullContext, decisions: Any = None):
    """The applyInArrow function over a piece's packed rows: its units joined to its messages' verdicts by commit
    log offset, replayed (`pull_tasks.replay_piece`); the offsets of units that found no message come back as an
    UNRESOLVED row. A piece with no unit (messages past its queue's end) gives nothing."""

    def run(packed: pa.Table) -> pa.Table:
        units = unpack(packed, UNITS, UNIT_ROWS)
        if not units.num_rows:
            return OUT_SCHEMA.empty_table()
        topic = packed.column("topic")[0].as_py()
        queue_id = packed.column("queue_id")[0].as_py()
        joined, missing = join_side(units, unpack(packed, MESSAGES, SIDE_ROWS))
        extra = [_part(UNRESOLVED, 1, topic, queue_id, {"counts": pa.array([missing.tolist()], pa.list_(pa.int64()))})
                 ] if len(missing) else []
        return replay_piece(ctx, joined, topic, queue_id, int(packed.column("piece")[0].as_py()), decisions, extra)

    return run


def join_side(units: pa.Table, side: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """units with their messages' side columns (null where none has the unit's commit log offset), and the offsets
    of the units (end rows aside) that found none."""
    clo = units.column("commit_log_offset")
    unit = pc.is_valid(clo).to_numpy(zero_copy_only=False)
    at = pc.fill_null(clo, -1).to_numpy()
    offsets = side.column("commit_log_offset").to_numpy()
    order = np.argsort(offsets, kind="stable")
    ranked = offsets[order]
    pos = np.minimum(np.searchsorted(ranked, at), max(len(ranked) - 1, 0))
    found = unit & (ranked[pos] == at) if len(ranked) else np.zeros(len(at), bool)
    take = pa.array(np.where(found, order[pos] if len(ranked) else 0, 0), mask=~found)
    picked = side.take(take)
    cols = [units.column(n) for n in units.column_names] + \
        [picked.column(n) for n in side.column_names if n != "commit_log_offset"]
    names = units.column_names + [n for n in side.column_names if n != "commit_log_offset"]
    return pa.Table.from_arrays(cols, names=names), at[unit & ~found]
