"""Job 2's Spark tasks: read a dump's own consume queues, and replay every subscription's pull over one queue per
group of rows. No filter rule lives here: the tasks hand Arrow tables to `filterlib.replay` and back to Spark.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import tables
from filterlib.engine import verdicts
from filterlib.engine.decide import layout_of, message_verdicts
from filterlib.rebuild.dispatch import registry_from_spec
from filterlib.replay import matrix, whatif
from filterlib.replay.matrix import MATRIX_SCHEMA
from filterlib.replay.paging import PullConfig, Span
from filterlib.replay.plans import NOT_SUBSCRIBED, Plan, build_filter, own_filter
from filterlib.replay.rows import MESSAGE_SIDE, PULLS_SCHEMA, UNITS_SCHEMA, VERDICT_SIDE, VERDICT_UNITS_SCHEMA
from filterlib.store import fs as sfs
from filterlib.store.dumpqueue import read_chunks, units_per_file
from filterlib.store.properties_text import text_column
from filterlib.store.storedir import StoreDir
from jobs.delta_files import constant
from jobs.delta_io import PARTITION
from jobs.schemas import spark_ddl

QUEUE_TASK_DDL = "topic string, queue_id int, piece_units long"
QUEUE_META = [pa.field("topic", pa.string()), pa.field("queue_id", pa.int32()), pa.field("piece", pa.int64()),
              pa.field("min_offset", pa.int64()), pa.field("units_per_file", pa.int64()),
              pa.field("end_offset", pa.int64())]
CQ_SIDE = pa.schema(QUEUE_META + [f for f in UNITS_SCHEMA if f.name not in MESSAGE_SIDE])
"""A queue's units as its replay takes them, each row carrying its queue's min offset, units per file and the
piece (`piece`) of the queue it is replayed in. Each queue also has one end row (queue_offset null, `end_offset`
the offset past its last unit) in the piece that holds its end, so that an empty queue still gets its pulls and
the piece that makes the queue's last call knows it."""


def piece_size(units_per_file: int, wanted: int) -> int:
    """Units per piece a queue is replayed in: whole consumequeue files, at least `wanted` units (0: the whole
    queue in one piece, as a RocksDB queue always is, its calls not bound to files)."""
    if units_per_file <= 0 or wanted <= 0:
        return 0
    return -(-wanted // units_per_file) * units_per_file


MATRIX, DETAIL, PULL, COUNT, FILE, PIECE, UNRESOLVED = ("matrix", "detail", "pull", "count", "file", "piece",
                                                        "unresolved")
OUT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("piece", pa.int64()),
    ("subscription_index", pa.int32()),
    *[f for f in MATRIX_SCHEMA], ("what_if_decisions", pa.binary()), ("scanned", pa.bool_()),
    ("detail", pa.string()),
    *[f for f in PULLS_SCHEMA if f.name != "plan"],
    ("counts", pa.list_(pa.int64())),
    ("file", pa.string()),
])
"""What a queue's one replay emits, every kind in one schema (the other kinds' columns null; `piece` on PULL and
COUNT rows, whose pulls are numbered from the piece's first): MATRIX rows (the
unit, `decisions` with the run's subscriptions' bytes, `what_if_decisions` with the what-if candidates' bytes,
`scanned` when a subscription, not only a candidate, scanned it), DETAIL rows, PULL rows, and one COUNT row per
subscription (`filterlib.replay.matrix.COUNT_FIELDS`), and one PIECE row per task (`counts`: [units, Spark partition,
the queue's end offset where the piece holds it, else -1, units whose verdicts were another topic's]); from a
packed replay (`jobs.piece_tasks`), an UNRESOLVED row where some units found no message among their own queue's
(`counts`: those units' commit log offsets).
A task that writes its tables' Parquet files itself (`PullContext.targets`) emits FILE rows (`file`: the
`delta_files.write_part` descriptor as JSON) in place of the MATRIX and DETAIL rows, and MATRIX rows only for a
topic with what-if candidates (what the comparison reads). PULL rows always come back: a piece of a queue numbers
its calls from its own first, and the job numbers them over the queue (few rows: a call scans up to 800 units)."""
WRITTEN = {"pull_decisions": (tables.DECISION_MATRIX, ("dump_id", "topic", "queue_id", "queue_offset",
                                                         "commit_log_offset")),
           "decision_details": (tables.DECISION_DETAILS, ())}
"""The tables a replay task writes itself: (table, the columns Delta keeps file statistics for)."""


def cq_side_ddl() -> str:
    return spark_ddl(CQ_SIDE)


def out_ddl() -> str:
    return spark_ddl(OUT_SCHEMA)


def _bitmap_array(bitmaps: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Per unit its bitmap's bytes (null where the unit has none), from the (n, width) matrix and lengths."""
    n = len(lengths)
    if n == 0:
        return pa.array([], pa.binary())
    present = lengths >= 0
    widths = np.unique(lengths[present])
    if len(widths) == 1 and widths[0] > 0:
        w = int(widths[0])
        data = np.ascontiguousarray(bitmaps[:, :w], dtype=np.uint8)
        fixed = pa.Array.from_buffers(pa.binary(w), n, [
            pa.py_buffer(np.packbits(present, bitorder="little").tobytes()), pa.py_buffer(data.tobytes())])
        return fixed.cast(pa.binary())
    return pa.array([bitmaps[i, :k].tobytes() if k >= 0 else None for i, k in enumerate(lengths.tolist())],
                    pa.binary())


def _cq_batch(topic: str, queue_id: int, cu: int, min_offset: int, per_file: int, qo: np.ndarray,
              clo: np.ndarray, size: np.ndarray, ext, end: int | None) -> pa.RecordBatch:
    """CQ_SIDE rows: units at queue offsets `qo`, or the queue's end row (`end`, no units)."""
    n = len(qo) if end is None else 1
    piece = (qo // cu if cu else np.zeros(len(qo), np.int64)) if end is None else \
        np.array([end // cu if cu else 0], np.int64)
    head = {"topic": pa.array([topic] * n, pa.string()), "queue_id": pa.array(np.full(n, queue_id, np.int32)),
            "piece": pa.array(piece, pa.int64()), "min_offset": pa.array(np.full(n, min_offset, np.int64)),
            "units_per_file": pa.array(np.full(n, per_file, np.int64)),
            "end_offset": pa.array([end], pa.int64()) if end is not None else pa.nulls(n, pa.int64())}
    if end is not None:
        cols = {f.name: pa.nulls(1, f.type) for f in CQ_SIDE if f.name not in head}
    else:
        cols = {"queue_offset": pa.array(qo, pa.int64()), "commit_log_offset": pa.array(clo, pa.int64()),
                "size": pa.array(size.astype(np.int32)), "tags_code": pa.array(ext.tags_code, pa.int64()),
                "tags_code_legal": pa.array(ext.tags_code_legal.astype(bool)),
                "has_ext": pa.array(ext.has_ext.astype(bool)), "ext_store_time": pa.array(ext.store_time, pa.int64()),
                "filter_bitmap": _bitmap_array(ext.bitmaps, np.asarray(ext.bitmap_length, dtype=np.int64))}
    return pa.RecordBatch.from_arrays([pa.array(head.get(f.name, cols.get(f.name)), f.type) for f in CQ_SIDE],
                                      schema=CQ_SIDE)


def dump_queue_batches(store: StoreDir, topic: str, queue_id: int, wanted: int) -> Iterator[pa.RecordBatch]:
    """One dump queue as CQ_SIDE batches, a consumequeue file (a RocksDB batch) at a time, so a task holds one file
    whatever the queue's length: the units numbered on from the first held one as `replay.load_queue` numbers
    them, then the end row."""
    per_file = units_per_file(store, topic, queue_id)
    cu = piece_size(per_file, wanted)
    min_offset = nxt = None
    last_end = 0
    for c in read_chunks(store, topic, queue_id):
        if c.end_offset is not None:
            last_end = c.end_offset
        if not len(c):
            continue
        if min_offset is None:
            min_offset = nxt = int(c.queue_offset[0])
        qo = np.arange(nxt, nxt + len(c), dtype=np.int64)
        nxt += len(c)
        yield _cq_batch(topic, queue_id, cu, min_offset, per_file, qo, c.commit_log_offset, c.size, c.ext, None)
    if min_offset is None:
        min_offset = nxt = last_end
    yield _cq_batch(topic, queue_id, cu, min_offset, per_file, np.zeros(0, np.int64), None, None, None, nxt)


def read_dump_queues(store_root: str, store_type: str | None = None):
    """The mapInArrow function: (topic, queue_id, piece_units) rows in, the dump's units of those queues out
    (CQ_SIDE, `dump_queue_batches`); the broker's storeType picks the kind of queues where the dump holds both."""
    remote = sfs.snapshot()  # a remote store's file system, registered in the task before it reads

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sfs.install(remote)
        store = StoreDir(store_root, store_type=store_type)
        for batch in batches:
            for t in batch.to_pylist():
                yield from dump_queue_batches(store, t["topic"], t["queue_id"], int(t["piece_units"]))

    return run


@dataclasses.dataclass(frozen=True)
class PullContext:
    """What every replay task needs, as plain picklable data."""

    key: str
    registry: dict
    plans: tuple[dict, ...]
    starts: dict
    enable_property_filter: bool
    filter_support_retry: bool
    now: int
    positions: dict = dataclasses.field(default_factory=dict)
    """{subscription index: its byte in its topic's matrix row}; a what-if candidate's counts from the topic's
    number of subscriptions on."""
    widths: dict = dataclasses.field(default_factory=dict)
    """{topic: (subscriptions, what-if candidates)} to the topic."""
    rocksdb_to_queue_end: bool = False
    """How the broker release pages RocksDB queues (`PullConfig.rocksdb_to_queue_end`)."""
    current: int = 0
    """Plans below this index are the run's subscriptions; from it on, what-if candidates (never written)."""
    targets: dict = dataclasses.field(default_factory=dict)
    """{table: delta_files.FileTarget} of WRITTEN when the tasks write their Parquet files themselves, else empty."""
    continued: frozenset[str] = frozenset()
    """"<index>:<queue id>" of the pulls that continue a previous run's over a broker's history: the queue was
    counted in group_stats' `queues` by that run."""


_filters: dict[str, dict] = {}


def _topic_filters(ctx: PullContext) -> dict[str, list[tuple[Plan, object, object]]]:
    """Per topic, the OK plans with their filters and, for a member filtered with another's subscription, its own
    filter; and the plans of members that never pull (filter None). Built once per worker process and context."""
    key = ctx.key
    if key not in _filters:
        registry = registry_from_spec(ctx.registry)
        by_topic: dict[str, list] = {}
        plans = sorted((Plan(**obj) for obj in ctx.plans), key=lambda p: (p.group, p.index))
        for plan in plans:  # in pull_decisions' key order (group, subscription), so the job writes without a sort
            if plan.ok:
                f = build_filter(plan, registry, ctx.enable_property_filter, ctx.filter_support_retry, ctx.now)
                own = own_filter(plan, registry, ctx.filter_support_retry, ctx.now)
                by_topic.setdefault(plan.topic, []).append((plan, f, own))
            elif plan.answer == NOT_SUBSCRIBED:
                by_topic.setdefault(plan.topic, []).append((plan, None, None))
        _filters.clear()
        _filters[key] = by_topic
        _caches.clear()
    return _filters[key]


_caches: dict[str, dict] = {}


def _engine_cache(ctx: PullContext) -> dict:
    """What the engine keeps between a worker's pieces of the same run (the filters' code tables, layouts), tied
    to the filters `_topic_filters` built."""
    _topic_filters(ctx)
    return _caches.setdefault(ctx.key, {})


def _slots(entries: list) -> list:
    """A topic's filters in the order its messages' verdicts hold them: each entry's filter, then its own."""
    return [x for _, f, own in entries for x in (f, own) if x is not None]


def verdict_topics(ctx: PullContext) -> list[str]:
    """The topics whose messages get verdicts (a topic with a filter), in the order VERDICT_SIDE numbers them."""
    return sorted(t for t, entries in _topic_filters(ctx).items() if _slots(entries))


VERDICT_SIDE_SCHEMA = pa.schema([("commit_log_offset", pa.int64()), ("verdict_topic", pa.int32()),
                                 *[f for f in VERDICT_UNITS_SCHEMA if f.name in VERDICT_SIDE]])
"""A message as job 2's replay takes it: its topic (the index in `verdict_topics`), why its body does not decode,
and its verdicts under every filter of its topic (`filterlib.engine.verdicts`)."""


def verdict_side_ddl() -> str:
    return spark_ddl(VERDICT_SIDE_SCHEMA)


MESSAGE_COLUMNS = ("commit_log_offset", "topic", *MESSAGE_SIDE)
"""The messages' columns the verdicts are computed from."""


def message_side(ctx: PullContext):
    """The mapInArrow function over messages (MESSAGE_COLUMNS): each message of a verdict topic with its verdicts
    under its topic's filters (VERDICT_SIDE_SCHEMA), computed where the message is read, so that no properties
    travel to the queues' pieces; any other message with its offset and topic -1 only (a unit pointing at it is
    another topic's)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cache: dict = {}
        for batch in batches:
            yield from _verdict_batches(ctx, batch, cache)

    return run


def message_files_side(ctx: PullContext, source: Any, low: int | None):
    """`message_side` over the messages table's Parquet files read here with pyarrow (a task per file, small files
    several a task; `source` a `jobs.delta_files.FileSource`): Spark never converts the properties maps. Rows below
    commit log offset `low` (a continued history's) are skipped, whole row groups by their statistics."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cache: dict = {}
        for b in file_rows(source, low, batches, MESSAGE_COLUMNS):
            yield from _verdict_batches(ctx, b, cache)

    return run


def file_rows(source: Any, low: int | None, batches: Iterator[pa.RecordBatch],
                      columns: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    """The `columns` of the rows in the Parquet files the `path` rows of `batches` name (of `source`), from commit
    log offset `low` on (None: all), at most 128 Ki rows a batch; a messages file written before job 1 had
    `body_error` gives it null."""
    import pyarrow.parquet as pq

    fs = source.filesystem()
    for batch in batches:
        for path in batch.column("path").to_pylist():
            with fs.open_input_file(path) as f:
                pf = pq.ParquetFile(f)
                names = pf.schema_arrow.names
                groups = [g for g in range(pf.num_row_groups) if low is None or _max_offset(pf, g) >= low]
                for g in groups:
                    t = pf.read_row_group(g, columns=[c for c in columns if c in names])
                    if "body_error" in columns and "body_error" not in t.column_names:
                        t = t.append_column("body_error", pa.nulls(t.num_rows, pa.string()))
                    if low is not None:
                        t = t.filter(pc.greater_equal(t.column("commit_log_offset"), low))
                    yield from t.select(list(columns)).to_batches(max_chunksize=1 << 17)


def _max_offset(pf: Any, group: int) -> int:
    """The largest commit_log_offset of a row group (its statistics), or a number past every offset without."""
    meta = pf.metadata.row_group(group)
    for i in range(meta.num_columns):
        col = meta.column(i)
        if col.path_in_schema == "commit_log_offset" and col.statistics is not None and col.statistics.has_min_max:
            return int(col.statistics.max)
    return 1 << 62


def _verdict_batches(ctx: PullContext, batch: pa.RecordBatch, cache: dict, keep: tuple[str, ...] = ()
                     ) -> Iterator[pa.RecordBatch]:
    """One batch of messages as VERDICT_SIDE_SCHEMA batches (`message_side`), followed by the batch's `keep`
    columns."""
    by_topic = _topic_filters(ctx)
    number = {t: i for i, t in enumerate(verdict_topics(ctx))}
    topic = batch.column("topic")
    names = pc.unique(topic).to_pylist()
    others = [n for n in names if n not in number]
    schema = pa.schema([*VERDICT_SIDE_SCHEMA, *(batch.schema.field(k) for k in keep)])  # keep: not its names
    if others:
        part = batch.filter(pc.invert(pc.fill_null(pc.is_in(topic, pa.array(list(number), pa.string())),
                                                   False))) if len(others) < len(names) else batch
        n = part.num_rows
        yield pa.RecordBatch.from_arrays(
            [part.column("commit_log_offset"), pa.array(np.full(n, -1, np.int32)),
             part.column("body_error").cast(pa.string()), pa.nulls(n, pa.binary()), pa.nulls(n, pa.string()),
             pa.nulls(n, pa.bool_()), *(part.column(k) for k in keep)], schema=schema)
    for name in names:
        if name not in number:
            continue
        part = batch.filter(pc.equal(topic, name)) if len(names) > 1 else batch
        slots = _slots(by_topic[name])
        layout = cache.get(("layout", name))
        if layout is None:
            layout = cache[("layout", name)] = layout_of(slots)
        v = message_verdicts(slots, part.column("properties"), part.column("tags"), cache)
        yield pa.RecordBatch.from_arrays(
            [part.column("commit_log_offset"), pa.array(np.full(part.num_rows, number[name], np.int32)),
             part.column("body_error").cast(pa.string()), *verdicts.to_arrow(v, layout),
             *(part.column(k) for k in keep)], schema=schema)


def _message_side(ctx: PullContext, table: pa.Table, topic: str, entries: list) -> tuple[pa.Table, list | None, int]:
    """A piece's units as the replay takes them, the filters their verdicts are bound to (None: the units carry
    properties), and how many units point at a message of another topic (their verdicts are not this topic's: the
    job replays again with the properties joined)."""
    if "verdicts" not in table.column_names:  # an older warehouse's messages hold the properties as a map
        props = table.schema.get_field_index("properties")
        table = table.set_column(props, "properties", text_column(table.column(props)))
        return table.select(UNITS_SCHEMA.names).cast(UNITS_SCHEMA), None, 0
    topics = verdict_topics(ctx)
    mine = topics.index(topic) if topic in topics else -1
    number = table.column("verdict_topic")
    foreign = pc.fill_null(pc.not_equal(number, mine), False)
    count = int(pc.sum(foreign).as_py() or 0)
    if count:
        table = table.set_column(table.schema.get_field_index("verdicts"), "verdicts",
                                 pc.if_else(foreign, pa.nulls(table.num_rows, pa.binary()), table.column("verdicts")))
    return table.select(VERDICT_UNITS_SCHEMA.names).cast(VERDICT_UNITS_SCHEMA), _slots(entries), count


SCANNED = matrix.COUNT_FIELDS.index("units_scanned")
"""Where a plan's counts hold its decisions (units scanned)."""
QUEUES = matrix.COUNT_FIELDS.index("queues")
"""Where a plan's counts hold the queues it pulled."""


def replay_queues(ctx: PullContext, decisions: Any = None):
    """The applyInArrow function over (topic, queue_id) groups: a queue's units (with min_offset, units_per_file,
    and their messages' verdicts from `message_side`, or their properties and tags) in; the queue replayed once
    for every OK plan of its topic, out as OUT_SCHEMA rows.
    `decisions`, a Spark accumulator, is added each piece's decisions (the job's progress lines)."""

    def run(table: pa.Table) -> pa.Table:
        return replay_piece(ctx, table, table.column("topic")[0].as_py(), table.column("queue_id")[0].as_py(),
                            int(table.column("piece")[0].as_py()), decisions)

    return run


def replay_piece(ctx: PullContext, table: pa.Table, topic: str, queue_id: int, piece: int, decisions: Any = None,
                 extra: list[pa.Table] = ()) -> pa.Table:
    """One piece of a queue replayed: its units (CQ_SIDE rows and their messages' side, `replay_queues`) in, every
    OK plan of the topic paged over them, out as OUT_SCHEMA rows (`extra`: more rows to hand back with them)."""
    min_offset = int(table.column("min_offset")[0].as_py())
    per_file = int(table.column("units_per_file")[0].as_py())
    ends = pc.drop_null(table.column("end_offset"))
    entries = _topic_filters(ctx).get(topic, [])
    units, slots, foreign = _message_side(ctx, table.filter(pc.is_valid(table.column("queue_offset")))
                                          .sort_by("queue_offset"), topic, entries)
    begin = int(units.column("queue_offset")[0].as_py()) if units.num_rows else int(ends[0].as_py())
    span = None
    if per_file > 0 and (begin != min_offset or not len(ends)):  # a piece of a longer file queue
        span = Span(min_offset, holds_end=len(ends) > 0)
    filters = [(p.index, int(ctx.positions[str(p.index)]), f, int(ctx.starts.get(f"{p.index}:{queue_id}", 0)),
                p.batch_size, own) for p, f, own in entries if p.pulls(queue_id)]
    real, cand = ctx.widths.get(topic, (0, 0))
    out = matrix.replay_queue(filters, real + cand, units, begin if span else min_offset, per_file,
                              PullConfig(rocksdb_to_queue_end=ctx.rocksdb_to_queue_end), _engine_cache(ctx),
                              span=span, slots=slots)
    for index in out.counts:
        if f"{index}:{queue_id}" in ctx.continued:
            out.counts[index][QUEUES] = 0
    if decisions is not None:
        decisions.add(sum(int(c[SCANNED]) for c in out.counts.values()))
    end = int(ends[0].as_py()) if len(ends) else -1
    row = _part(PIECE, 1, topic, queue_id, {"counts": pa.array([[units.num_rows, _partition(), end, foreign]],
                                                                pa.list_(pa.int64()))})
    if ctx.targets:
        return pa.concat_tables([written(ctx, out, topic, queue_id, piece, real, cand), row, *extra])
    return pa.concat_tables([compact(out, topic, queue_id, piece, real, cand), row, *extra])


def _partition() -> int:
    """The Spark partition this task replays (-1 outside a task): the summary shows how the pieces spread."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.partitionId() if tc is not None else -1


def _with_head(t: pa.Table, topic: str, queue_id: int, schema: pa.Schema) -> pa.Table:
    """t's columns under the table's schema but its partition column (write_part's directory holds dump_id) and
    `copy` (write_part's target holds it), topic and queue_id filled in."""
    n = t.num_rows
    fill = {"topic": constant(topic, n), "queue_id": pa.array(np.full(n, queue_id, dtype=np.int32))}
    fields = [f for f in schema if f.name not in (PARTITION, tables.COPY.name)]
    cols = [t.column(f.name).cast(f.type) if f.name in t.column_names else fill[f.name] for f in fields]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def written(ctx: PullContext, out: matrix.QueueOutput, topic: str, queue_id: int, piece: int, real: int,
            cand: int) -> pa.Table:
    """One queue's compact output written as Parquet files by this task (`delta_files.write_part`: the run's
    subscriptions' matrix rows and details), handed back as FILE rows beside the PULL and COUNT rows (and the MATRIX
    rows of a topic with what-if candidates)."""
    from jobs.delta_files import write_part

    m, d = out.matrix, out.details
    codes = matrix.codes_of(m, real + cand)
    scanned = codes[:, :real].any(axis=1) if real else np.zeros(m.num_rows, bool)
    mine = m.take(pa.array(np.flatnonzero(scanned))).set_column(
        m.schema.get_field_index("decisions"), "decisions", matrix.matrix_column(codes[scanned][:, :real]))
    d = d.filter(pc.less(d.column("plan"), ctx.current)).rename_columns(
        ["subscription_index" if n == "plan" else n for n in d.column_names])
    files = []
    for name, t in (("pull_decisions", mine), ("decision_details", d)):
        table, stats = WRITTEN[name]
        schema = table.arrow()
        desc = write_part(ctx.targets[name], _with_head(t, topic, queue_id, schema), schema, stats)
        if desc is not None:
            files.append(json.dumps(desc))
    parts = [_part(FILE, len(files), topic, queue_id, {"file": pa.array(files, pa.string())}),
             _pulls_part(out.pulls, topic, queue_id, piece), _counts_part(out, topic, queue_id, piece)]
    if cand:
        cols = {name: m.column(name) for name in m.column_names}
        cols["decisions"] = matrix.matrix_column(codes[:, :real])
        cols["what_if_decisions"] = matrix.matrix_column(codes[:, real:])
        cols["scanned"] = pa.array(scanned)
        parts.append(_part(MATRIX, m.num_rows, topic, queue_id, cols))
    return pa.concat_tables(parts)


def _pulls_part(p: pa.Table, topic: str, queue_id: int, piece: int) -> pa.Table:
    return _part(PULL, p.num_rows, topic, queue_id, {("subscription_index" if n == "plan" else n): p.column(n)
                                                     for n in p.column_names} | {"piece": _piece(piece, p.num_rows)})


def _piece(piece: int, n: int) -> pa.Array:
    return pa.array(np.full(n, piece, dtype=np.int64))


def _counts_part(out: matrix.QueueOutput, topic: str, queue_id: int, piece: int) -> pa.Table:
    """A COUNT row per plan: its counts over the piece, and the furthest `next_begin_offset` its pulls left (null
    without a pull): the driver takes each (subscription, queue)'s position from these (pull_positions)."""
    plans = sorted(out.counts)
    furthest: dict[int, int] = {}
    if out.pulls.num_rows:
        last = out.pulls.group_by("plan").aggregate([("next_begin_offset", "max")])
        furthest = dict(zip(last.column("plan").to_pylist(), last.column("next_begin_offset_max").to_pylist(),
                            strict=True))
    return _part(COUNT, len(plans), topic, queue_id, {
        "subscription_index": pa.array(plans, pa.int32()),
        "counts": pa.array([out.counts[i].tolist() for i in plans], pa.list_(pa.int64())),
        "next_begin_offset": pa.array([furthest.get(i) for i in plans], pa.int64()),
        "piece": _piece(piece, len(plans))})


def _part(kind: str, n: int, topic: str, queue_id: int, cols: dict[str, pa.Array]) -> pa.Table:
    head = {"kind": constant(kind, n), "topic": constant(topic, n),
            "queue_id": pa.array(np.full(n, queue_id, dtype=np.int32))}
    arrays = [head[f.name] if f.name in head else cols[f.name] if f.name in cols else pa.nulls(n, f.type)
              for f in OUT_SCHEMA]
    return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, OUT_SCHEMA, strict=True)], schema=OUT_SCHEMA)


def compact(out: matrix.QueueOutput, topic: str, queue_id: int, piece: int, real: int, cand: int) -> pa.Table:
    """One queue's compact output as OUT_SCHEMA rows: the matrix split into the subscriptions' and the what-if
    candidates' bytes, then the details, the pulls and a count row per plan."""
    m = out.matrix
    codes = matrix.codes_of(m, real + cand)
    cols = {name: m.column(name) for name in m.column_names}
    cols["decisions"] = matrix.matrix_column(codes[:, :real])
    if cand:
        cols["what_if_decisions"] = matrix.matrix_column(codes[:, real:])
    cols["scanned"] = pa.array(codes[:, :real].any(axis=1) if real else np.zeros(m.num_rows, bool))
    d = out.details
    return pa.concat_tables([
        _part(MATRIX, m.num_rows, topic, queue_id, cols),
        _part(DETAIL, d.num_rows, topic, queue_id, {"subscription_index": d.column("plan"),
                                                    "queue_offset": d.column("queue_offset"),
                                                    "detail": d.column("detail")}),
        _pulls_part(out.pulls, topic, queue_id, piece), _counts_part(out, topic, queue_id, piece)])


def what_if_changes(compared: list):
    """The mapInArrow function over matrix rows (topic, queue_id, queue_offset, commit_log_offset, decisions:
    every subscription's byte, then every candidate's): the units each candidate gains or loses
    (`filterlib.replay.whatif.changes`, CHANGES_SCHEMA)."""

    def run(batches):
        for batch in batches:
            out = whatif.changes(batch, compared)
            if out.num_rows:
                yield from out.to_batches()

    return run
