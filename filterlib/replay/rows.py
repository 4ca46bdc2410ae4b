"""One consume queue's pull replayed for every subscription of its topic at once, as one row per decision and one
per pull: the row form the compact output (`matrix`) is held to, and the schemas both share.

`engine.decide` gives the verdicts, `paging` the pulls; `simulate_queue` takes one queue's units (UNITS_SCHEMA)
and gives DECISIONS_SCHEMA and PULLS_SCHEMA rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import message_filter as mf
from filterlib.engine import verdicts
from filterlib.engine.decide import LAYERS, OUTCOMES, REASONS, Decisions, Units, layout_of, message_verdicts
from filterlib.replay.paging import STATUS_NAMES, Calls, PullConfig, pull_queue

UNIT_FIELDS = [pa.field("queue_offset", pa.int64()), pa.field("commit_log_offset", pa.int64()),
               pa.field("size", pa.int32()), pa.field("tags_code", pa.int64())]
"""A consume-queue unit's own columns, first in every per-unit schema of job 2 (units, decisions, matrix)."""

UNITS_SCHEMA = pa.schema([
    *UNIT_FIELDS,
    ("tags_code_legal", pa.bool_()),
    ("has_ext", pa.bool_()),
    ("ext_store_time", pa.int64()),
    ("filter_bitmap", pa.binary()),
    ("properties", pa.string()),
    ("tags", pa.string()),
    ("body_error", pa.string()),
])
"""One queue's units as `simulate_queue` takes them: the consume-queue side as the broker's iterator resolves it
(tags_code_legal False: the broker's null tagsCode; has_ext False: no ext unit; filter_bitmap null: none), and the
message's properties, tags and body_error (why the client cannot decode it; null where the commit log holds no
such message or it decodes)."""
MESSAGE_SIDE = ("properties", "tags", "body_error")
"""The columns of UNITS_SCHEMA that come from the message (job 2 joins them to the consume-queue side)."""
VERDICT_UNITS_SCHEMA = pa.schema([*[f for f in UNITS_SCHEMA if f.name not in ("properties", "tags")],
                                  *verdicts.FIELDS])
"""UNITS_SCHEMA with the message's verdicts (`filterlib.engine.verdicts`) in place of its properties and tags: what
job 2's replay takes, the verdicts computed where the messages were read."""
VERDICT_SIDE = ("body_error", *(f.name for f in verdicts.FIELDS))
"""The columns of VERDICT_UNITS_SCHEMA that come from the message."""

DECISIONS_SCHEMA = pa.schema([
    ("plan", pa.int32()),
    *UNIT_FIELDS,
    ("outcome", pa.string()),
    ("layer", pa.string()),
    ("reason", pa.string()),
    ("cq_reason", pa.string()),
    ("detail", pa.string()),
    ("sql_value", pa.string()),
    ("bloom_false_positive", pa.bool_()),
    ("bloom_tested", pa.bool_()),
    ("filter_bitmap", pa.binary()),
    ("pull_index", pa.int32()),
])
"""Per (plan, scanned unit): the outcome, the layer and branch that decided, the consume-queue branch, the detail
(SQL value, or "JavaClass: message" of an evaluation error, where the commit-log layer decided), the SQL92 value
wherever the commit-log layer evaluated one (TRUE, FALSE, NULL or ERROR; null where it evaluated none), the bloom
flags, the bitmap the bloom layer read, and the index of the pull that filtered the unit."""

PULLS_SCHEMA = pa.schema([
    ("plan", pa.int32()),
    ("pull_index", pa.int32()),
    ("request_offset", pa.int64()),
    ("status", pa.string()),
    ("next_begin_offset", pa.int64()),
    ("message_count", pa.int32()),
    ("filter_message_count", pa.int32()),
])
"""Per (plan, pull): getMessage's request offset, status, next begin offset, messages returned, and messages the
commit-log layer dropped."""


def units_from_table(table: pa.Table, slots: Sequence | None = None, engine_cache: dict | None = None) -> Units:
    """`Units` for the engine from a UNITS_SCHEMA table (bitmaps unpacked to an (n, width) byte matrix), or from
    one whose message side is the messages' verdicts (`VERDICT_UNITS_SCHEMA`) under `slots`, the topic's filters
    in the order the verdicts were computed."""
    n = table.num_rows
    bm = table.column("filter_bitmap").combine_chunks() if n else pa.array([], pa.binary())
    lengths = pc.fill_null(pc.binary_length(bm), -1).to_numpy(zero_copy_only=False).astype(np.int64) if n else \
        np.zeros(0, np.int64)
    width = int(lengths.max()) if n and lengths.max() > 0 else 0
    bitmaps = np.zeros((n, width), dtype=np.uint8)
    if width:
        rows = np.flatnonzero(lengths > 0)
        bm = bm.cast(pa.large_binary())
        offsets = np.frombuffer(bm.buffers()[1], dtype=np.int64)[bm.offset: bm.offset + n + 1]
        data = np.frombuffer(bm.buffers()[2], dtype=np.uint8)
        cols = np.arange(width)
        idx = offsets[rows][:, None] + cols[None, :]
        valid = cols[None, :] < lengths[rows][:, None]
        bitmaps[rows] = np.where(valid, data[np.minimum(idx, len(data) - 1)], 0)

    def col(name: str, fill, dtype) -> np.ndarray:
        return np.asarray(pc.fill_null(table.column(name), fill).to_numpy(), dtype=dtype) if n else \
            np.zeros(0, dtype)

    errors = table.column("body_error").combine_chunks() if n and "body_error" in table.column_names else None
    head = (col("tags_code", 0, np.int64), col("tags_code_legal", False, bool), col("has_ext", False, bool),
            col("ext_store_time", 0, np.int64), bitmaps, lengths)
    if "verdicts" in table.column_names:
        return Units(*head, None, None, errors, _verdicts(table, slots or (), engine_cache))
    return Units(*head, table.column("properties").combine_chunks() if n else pa.array([], UNITS_SCHEMA.field(8).type),
                 table.column("tags").combine_chunks() if n else pa.array([], pa.string()), errors)


def _verdicts(table: pa.Table, slots: Sequence, engine_cache: dict | None) -> verdicts.Verdicts:
    """The units' messages' verdicts (`verdicts.FIELDS` columns), bound to the topic's filters in slot order; a
    unit without a message gets the verdicts of a message that is not there."""
    cols = [table.column(f.name).combine_chunks() if table.num_rows else pa.array([], f.type)
            for f in verdicts.FIELDS]
    missing = None
    if cols[0].null_count:
        missing = message_verdicts(slots, pa.nulls(1, UNITS_SCHEMA.field("properties").type), pa.nulls(1, pa.string()),
                                   engine_cache)
    layout = engine_cache.get(("layout", *map(id, slots))) if engine_cache is not None else None
    if layout is None:
        layout = layout_of(slots)
        if engine_cache is not None:
            engine_cache[("layout", *map(id, slots))] = layout
    return verdicts.assign(verdicts.from_arrow(*cols, layout, missing), slots)


def _names(codes: np.ndarray, names: Sequence[str]) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(list(names))).cast(pa.string())


_SQL_VALUES = pa.array(["FALSE", "TRUE", "NULL", "ERROR"])


def _sql_values(state: np.ndarray) -> pa.Array:
    codes = pa.array(state.astype(np.int32), mask=state < 0)
    return pa.DictionaryArray.from_arrays(codes, _SQL_VALUES).cast(pa.string())


def _decision_table(plan: int, units: pa.Table, d: Decisions, unit_call: np.ndarray) -> pa.Table:
    rows = np.flatnonzero(unit_call >= 0)
    k = len(rows)
    take = pa.array(rows)
    tested = d.bloom_tested()[rows]
    bitmaps = units.column("filter_bitmap").take(take)
    if not tested.all():
        bitmaps = pc.if_else(pa.array(tested), bitmaps, pa.nulls(k, pa.binary()))
    legal = pc.fill_null(units.column("tags_code_legal").take(take), False)
    cols = {
        "plan": pa.array(np.full(k, plan, dtype=np.int32)),
        "tags_code": pc.if_else(legal, units.column("tags_code").take(take), pa.nulls(k, pa.int64())),
        "outcome": _names(d.outcome[rows], OUTCOMES), "layer": _names(d.layer[rows], LAYERS),
        "reason": _names(d.reason[rows], REASONS), "cq_reason": _names(d.cq_reason[rows], REASONS),
        "detail": d.details(rows), "sql_value": _sql_values(d.sql_state[rows]),
        "bloom_false_positive": pa.array(d.bloom_false_positive[rows]), "bloom_tested": pa.array(tested),
        "filter_bitmap": bitmaps, "pull_index": pa.array(unit_call[rows].astype(np.int32)),
    }
    for name in ("queue_offset", "commit_log_offset", "size"):
        cols[name] = units.column(name).take(take)
    return pa.Table.from_arrays([cols[f.name] for f in DECISIONS_SCHEMA], schema=DECISIONS_SCHEMA)


def pulls_table(plan: int, calls: Calls) -> pa.Table:
    """One plan's pulls over one queue (PULLS_SCHEMA), numbered from 0 in call order."""
    k = len(calls.status)
    return pa.Table.from_arrays([
        pa.array(np.full(k, plan, dtype=np.int32)), pa.array(np.arange(k, dtype=np.int32)),
        pa.array(calls.request_offset), pa.array([STATUS_NAMES[s] for s in calls.status.tolist()], pa.string()),
        pa.array(calls.next_begin_offset), pa.array(calls.message_count.astype(np.int32)),
        pa.array(calls.filter_message_count.astype(np.int32))], schema=PULLS_SCHEMA)


def simulate_queue(filters: Sequence[tuple[int, mf.ExpressionMessageFilter, int, int]], units: pa.Table,
                   min_offset: int, units_per_file: int, config: PullConfig | None = None,
                   engine_cache: dict | None = None) -> tuple[pa.Table, pa.Table]:
    """Every (plan, filter, start offset, batch size) over one queue: (decisions of the scanned units, pulls).

    `units` (UNITS_SCHEMA) holds the queue's units from `min_offset` on, in queue order. The verdicts are computed
    once per filter set-at-a-time; the pulls are paged from each start as getMessage does, and only the units a
    pull scanned get a decision row.
    """
    base = config or PullConfig()
    u = units_from_table(units)
    sizes = np.asarray(pc.fill_null(units.column("size"), 0).to_numpy(), dtype=np.int64) if len(u) else \
        np.zeros(0, np.int64)
    cache = {} if engine_cache is None else engine_cache
    decisions, pulls = [], []
    for plan, f, start, batch_size in filters:
        cfg = dataclasses.replace(base, batch_size=batch_size)
        d, calls = pull_queue(f, u, sizes, start, min_offset, units_per_file, cfg, cache)
        decisions.append(_decision_table(plan, units, d, calls.unit_call))
        pulls.append(pulls_table(plan, calls))
    empty_d, empty_p = DECISIONS_SCHEMA.empty_table(), PULLS_SCHEMA.empty_table()
    return (pa.concat_tables(decisions) if decisions else empty_d, pa.concat_tables(pulls) if pulls else empty_p)
