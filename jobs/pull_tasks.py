"""Job 2's Spark tasks: read a dump's own consume queues, and replay every subscription's pull over one queue per
group of rows. No filter rule lives here: the tasks hand Arrow tables to `filterlib.simulate` and back to Spark.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import matrix, tables
from filterlib.dispatch import registry_from_spec
from filterlib.matrix import MATRIX_SCHEMA
from filterlib.pull import PullConfig
from filterlib.replay import load_queue
from filterlib.simulate import MESSAGE_SIDE, PULLS_SCHEMA, UNITS_SCHEMA, Plan, build_filter
from filterlib.store import fs as sfs
from filterlib.store.storedir import StoreDir
from jobs.schemas import spark_ddl

QUEUE_TASK_DDL = "topic string, queue_id int"
QUEUE_META = [pa.field("topic", pa.string()), pa.field("queue_id", pa.int32()), pa.field("min_offset", pa.int64()),
              pa.field("units_per_file", pa.int64())]
CQ_SIDE = pa.schema(QUEUE_META + [f for f in UNITS_SCHEMA if f.name not in MESSAGE_SIDE])
"""A dump queue's units as read from its files, each row carrying its queue's min offset and units per file; a
queue also gets one row with queue_offset null, so that an empty queue still gets its pulls."""

MATRIX, DETAIL, PULL, COUNT, FILE = "matrix", "detail", "pull", "count", "file"
OUT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()), ("subscription_index", pa.int32()),
    *[f for f in MATRIX_SCHEMA], ("what_if_decisions", pa.binary()), ("scanned", pa.bool_()),
    ("detail", pa.string()),
    *[f for f in PULLS_SCHEMA if f.name != "plan"],
    ("counts", pa.list_(pa.int64())),
    ("file", pa.string()),
])
"""What a queue's one replay emits, every kind in one schema (the other kinds' columns null): MATRIX rows (the
unit, `decisions` with the run's subscriptions' bytes, `what_if_decisions` with the what-if candidates' bytes,
`scanned` when a subscription, not only a candidate, scanned it), DETAIL rows, PULL rows, and one COUNT row per
subscription (`filterlib.matrix.COUNT_FIELDS`). A task that writes its tables' Parquet files itself
(`PullContext.targets`) emits FILE rows (`file`: the `delta_files.write_part` descriptor as JSON) in place of the
MATRIX, DETAIL and PULL rows, and MATRIX rows only for a topic with what-if candidates (what the comparison reads)."""
WRITTEN = {"pull_decisions": (tables.DECISION_MATRIX, ("dump_id", "topic", "queue_id", "queue_offset",
                                                         "commit_log_offset")),
           "decision_details": (tables.DECISION_DETAILS, ()), "pulls": (tables.PULLS, ())}
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


def read_dump_queues(store_root: str, store_type: str | None = None):
    """The mapInArrow function: (topic, queue_id) rows in, the dump's units of those queues out (CQ_SIDE); the
    broker's storeType picks the kind of queues where the dump holds both."""
    remote = sfs.snapshot()  # a remote store's file system, registered in the task before it reads

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sfs.install(remote)
        store = StoreDir(store_root, store_type=store_type)
        for batch in batches:
            for t in batch.to_pylist():
                q = load_queue(store, t["topic"], t["queue_id"])
                n = len(q.size)
                e = q.ext
                cols = {"topic": pa.array([q.topic] * (n + 1), pa.string()),
                        "queue_id": pa.array(np.full(n + 1, q.queue_id, dtype=np.int32)),
                        "min_offset": pa.array(np.full(n + 1, q.min_offset, dtype=np.int64)),
                        "units_per_file": pa.array(np.full(n + 1, q.units_per_file, dtype=np.int64)),
                        "queue_offset": pa.array(list(range(q.min_offset, q.min_offset + n)) + [None], pa.int64()),
                        "commit_log_offset": q.commit_log_offset, "size": q.size.astype(np.int32),
                        "tags_code": e.tags_code, "tags_code_legal": e.tags_code_legal.astype(bool),
                        "has_ext": e.has_ext.astype(bool), "ext_store_time": e.store_time}
                arrays = []
                for f in CQ_SIDE:
                    if f.name == "filter_bitmap":
                        a = _bitmap_array(e.bitmaps, np.asarray(e.bitmap_length, dtype=np.int64))
                    else:
                        a = cols[f.name]
                    if len(a) == n:
                        a = pa.concat_arrays([pa.array(a, f.type), pa.nulls(1, f.type)])
                    arrays.append(pa.array(a, f.type))
                yield pa.RecordBatch.from_arrays(arrays, schema=CQ_SIDE)

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
    dump_id: str = ""


_filters: dict[str, dict] = {}


def _topic_filters(ctx: PullContext) -> dict[str, list[tuple[Plan, object]]]:
    """Per topic, the OK plans and their filters (built once per worker process and context)."""
    key = ctx.key
    if key not in _filters:
        registry = registry_from_spec(ctx.registry)
        by_topic: dict[str, list] = {}
        plans = sorted((Plan(**obj) for obj in ctx.plans), key=lambda p: (p.group, p.index))
        for plan in plans:  # in pull_decisions' key order (group, subscription), so the job writes without a sort
            if plan.ok:
                f = build_filter(plan, registry, ctx.enable_property_filter, ctx.filter_support_retry, ctx.now)
                by_topic.setdefault(plan.topic, []).append((plan, f))
        _filters.clear()
        _filters[key] = by_topic
    return _filters[key]


def replay_queues(ctx: PullContext):
    """The applyInArrow function over (topic, queue_id) groups: a queue's units (with min_offset, units_per_file,
    properties, tags) in; the queue replayed once for every OK plan of its topic, out as OUT_SCHEMA rows."""

    def run(table: pa.Table) -> pa.Table:
        topic = table.column("topic")[0].as_py()
        queue_id = table.column("queue_id")[0].as_py()
        min_offset = int(table.column("min_offset")[0].as_py())
        per_file = int(table.column("units_per_file")[0].as_py())
        units = table.filter(pc.is_valid(table.column("queue_offset")))
        units = units.sort_by("queue_offset").select(UNITS_SCHEMA.names).cast(UNITS_SCHEMA)
        entries = _topic_filters(ctx).get(topic, [])
        filters = [(p.index, int(ctx.positions[str(p.index)]), f, int(ctx.starts.get(f"{p.index}:{queue_id}", 0)),
                    p.batch_size) for p, f in entries]
        real, cand = ctx.widths.get(topic, (0, 0))
        out = matrix.replay_queue(filters, real + cand, units, min_offset, per_file,
                                  PullConfig(rocksdb_to_queue_end=ctx.rocksdb_to_queue_end))
        if ctx.targets:
            return written(ctx, out, topic, queue_id, real, cand)
        return compact(out, topic, queue_id, real, cand)

    return run


def _with_head(t: pa.Table, dump_id: str, topic: str, queue_id: int, schema: pa.Schema) -> pa.Table:
    """t's columns under the table's schema, dump_id / topic / queue_id filled in."""
    n = t.num_rows
    fill = {"dump_id": dump_id, "topic": topic, "queue_id": queue_id}
    cols = [t.column(f.name).cast(f.type) if f.name in t.column_names else
            pa.array([fill[f.name]] * n, f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def written(ctx: PullContext, out: matrix.QueueOutput, topic: str, queue_id: int, real: int, cand: int) -> pa.Table:
    """One queue's compact output written as Parquet files by this task (`delta_files.write_part`: the run's
    subscriptions' matrix rows, details and pulls), handed back as FILE rows beside the COUNT rows (and the MATRIX
    rows of a topic with what-if candidates)."""
    from jobs.delta_files import write_part

    m, d, p = out.matrix, out.details, out.pulls
    codes = matrix.codes_of(m, real + cand)
    scanned = codes[:, :real].any(axis=1) if real else np.zeros(m.num_rows, bool)
    mine = m.take(pa.array(np.flatnonzero(scanned))).set_column(
        m.schema.get_field_index("decisions"), "decisions", matrix.matrix_column(codes[scanned][:, :real]))
    groups = {int(obj["index"]): obj["group"] for obj in ctx.plans}
    d = d.filter(pc.less(d.column("plan"), ctx.current)).rename_columns(
        ["subscription_index" if n == "plan" else n for n in d.column_names])
    p = p.filter(pc.less(p.column("plan"), ctx.current)).rename_columns(
        ["subscription_index" if n == "plan" else n for n in p.column_names])
    p = p.append_column("consumer_group", pa.array([groups[i] for i in p.column("subscription_index").to_pylist()],
                                                   pa.string()))
    files = []
    for name, t in (("pull_decisions", mine), ("decision_details", d), ("pulls", p)):
        table, stats = WRITTEN[name]
        schema = table.arrow()
        desc = write_part(ctx.targets[name], _with_head(t, ctx.dump_id, topic, queue_id, schema), schema, stats)
        if desc is not None:
            files.append(json.dumps(desc))
    plans = sorted(out.counts)
    parts = [_part(FILE, len(files), topic, queue_id, {"file": pa.array(files, pa.string())}),
             _part(COUNT, len(plans), topic, queue_id, {
                 "subscription_index": pa.array(plans, pa.int32()),
                 "counts": pa.array([out.counts[i].tolist() for i in plans], pa.list_(pa.int64()))})]
    if cand:
        cols = {name: m.column(name) for name in m.column_names}
        cols["decisions"] = matrix.matrix_column(codes[:, :real])
        cols["what_if_decisions"] = matrix.matrix_column(codes[:, real:])
        cols["scanned"] = pa.array(scanned)
        parts.append(_part(MATRIX, m.num_rows, topic, queue_id, cols))
    return pa.concat_tables(parts)


def _part(kind: str, n: int, topic: str, queue_id: int, cols: dict[str, pa.Array]) -> pa.Table:
    head = {"kind": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([kind]))
            .cast(pa.string()),
            "topic": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([topic]))
            .cast(pa.string()),
            "queue_id": pa.array(np.full(n, queue_id, dtype=np.int32))}
    arrays = [head[f.name] if f.name in head else cols[f.name] if f.name in cols else pa.nulls(n, f.type)
              for f in OUT_SCHEMA]
    return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, OUT_SCHEMA, strict=True)], schema=OUT_SCHEMA)


def compact(out: matrix.QueueOutput, topic: str, queue_id: int, real: int, cand: int) -> pa.Table:
    """One queue's compact output as OUT_SCHEMA rows: the matrix split into the subscriptions' and the what-if
    candidates' bytes, then the details, the pulls and a count row per plan."""
    m = out.matrix
    codes = matrix.codes_of(m, real + cand)
    cols = {name: m.column(name) for name in m.column_names}
    cols["decisions"] = matrix.matrix_column(codes[:, :real])
    if cand:
        cols["what_if_decisions"] = matrix.matrix_column(codes[:, real:])
    cols["scanned"] = pa.array(codes[:, :real].any(axis=1) if real else np.zeros(m.num_rows, bool))
    d, p = out.details, out.pulls
    plans = sorted(out.counts)
    parts = [
        _part(MATRIX, m.num_rows, topic, queue_id, cols),
        _part(DETAIL, d.num_rows, topic, queue_id, {"subscription_index": d.column("plan"),
                                                    "queue_offset": d.column("queue_offset"),
                                                    "detail": d.column("detail")}),
        _part(PULL, p.num_rows, topic, queue_id, {("subscription_index" if n == "plan" else n): p.column(n)
                                                  for n in p.column_names}),
        _part(COUNT, len(plans), topic, queue_id, {
            "subscription_index": pa.array(plans, pa.int32()),
            "counts": pa.array([out.counts[i].tolist() for i in plans], pa.list_(pa.int64()))}),
    ]
    return pa.concat_tables(parts)
