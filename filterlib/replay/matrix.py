"""Job 2's compact output for one queue: the decision matrix, the decision details and the per-subscription
counts, and the way back to one row per decision.

Every decision the engine gives is fixed by its branch codes (`vocabulary.DECISION_CODES`), except two things:
the detail text of an evaluation error or of a client decode failure, and the pull that scanned the unit. So a
queue's decisions are stored as one row per unit that any subscription scanned, with one byte (a decision code) per
subscription position of the topic; the texts as a narrow side table; the pull as the FOUND / NO_MATCHED_MESSAGE
pull whose [request_offset, next_begin_offset) holds the unit (getMessage scans exactly that range, once).
`decode` gives back exactly `simulate.simulate_queue`'s decision rows; the tests hold it to that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import vocabulary as vocab
from filterlib.engine.decide import LAYERS, OUTCOMES, REASONS, Decisions, decide_units, take_units
from filterlib.kernel_cache import njit
from filterlib.replay import codes as C
from filterlib.replay.codes import CODES, encode
from filterlib.replay.paging import (
    FOUND,
    NO_MATCHED_MESSAGE,
    STATUS_NAMES,
    PullConfig,
    Span,
    passes,
    pull_queue,
    replay_pulls,
)
from filterlib.replay.plans import Plan
from filterlib.replay.rows import DECISIONS_SCHEMA, PULLS_SCHEMA, UNIT_FIELDS, pulls_table, units_from_table

MATRIX_SCHEMA = pa.schema([
    *UNIT_FIELDS,
    ("bloom_bitmap", pa.binary()),
    ("decisions", pa.binary()),
])
"""Per unit scanned by at least one subscription of the queue's topic: the unit, its bitmap where any
subscription tested it, and one decision code per subscription position (0: not scanned)."""
DETAILS_SCHEMA = pa.schema([("plan", pa.int32()), ("queue_offset", pa.int64()), ("detail", pa.string())])
"""Per decision whose detail the code does not give: an evaluation error's `JavaClass: message`, or why the
client's decode lost the message."""

def _detail_rows(d: Decisions) -> np.ndarray:
    """The units whose detail the code does not give (evaluation errors decided by the commit-log layer, client
    decode failures)."""
    rows = set(d.client_errors)
    rows.update(i for i in d.sql_errors if d.layer[i] == LAYERS.index(vocab.COMMIT_LOG))
    return np.array(sorted(rows), dtype=np.int64)


COUNT_FIELDS: tuple[str, ...] = ("units_scanned", *vocab.OUTCOME_COLUMNS.values(), "tag_collisions", "bloom_tested",
                                 "bloom_false_positives", "sql_evaluations", "bytes_delivered",
                                 "bytes_filtered_on_broker", "pulls", "empty_pulls", "found_pulls", "queues")
"""The per-subscription counts a queue's replay hands back (group_stats' count columns), summed over queues."""


def _count_weights() -> tuple[np.ndarray, np.ndarray]:
    """(units, bytes) weight matrices: COUNT_FIELDS × codes, so counts = units @ per-code units + bytes @ per-code
    bytes."""
    units = np.zeros((len(COUNT_FIELDS), len(CODES)), dtype=np.int64)
    sizes = np.zeros_like(units)
    field = {name: i for i, name in enumerate(COUNT_FIELDS)}
    for c in CODES[1:]:
        units[field["units_scanned"], c.code] = c.code != vocab.NEVER_PULLED_CODE
        units[field[vocab.OUTCOME_COLUMNS[c.outcome]], c.code] = 1
        units[field["tag_collisions"], c.code] = c.reason == "client_tag_mismatch"
        units[field["bloom_tested"], c.code] = c.bloom_tested
        units[field["bloom_false_positives"], c.code] = c.bloom_false_positive
        units[field["sql_evaluations"], c.code] = c.sql_value is not None
        sizes[field["bytes_delivered"], c.code] = c.outcome == vocab.DELIVERED
        sizes[field["bytes_filtered_on_broker"], c.code] = c.outcome != vocab.DELIVERED and c.layer in (
            vocab.CONSUME_QUEUE, vocab.COMMIT_LOG)
    return units, sizes


_COUNT_UNITS, _COUNT_BYTES = _count_weights()
_CQ_PASS, _CL_PASS = passes(C.LAYER, C.OUTCOME)
_SQL_ERROR = vocab.SQL_VALUES.index("ERROR")
_DETAIL = (C.SQL_STATE == _SQL_ERROR) & (C.LAYER == LAYERS.index(vocab.COMMIT_LOG))
"""Per code: its unit's detail is not given by the code (an evaluation error the commit-log layer decided on)."""
_PULL_FIELDS = [COUNT_FIELDS.index(n) for n in ("pulls", "empty_pulls", "found_pulls", "queues")]


def counts(codes: np.ndarray, sizes: np.ndarray, message_count: np.ndarray, status: np.ndarray,
           first_call: bool = True) -> np.ndarray:
    """One subscription's COUNT_FIELDS over one queue (or a run of its files: `first_call` when the run holds the
    pull's first call, which counts the queue once), from its column of codes and its pulls."""
    n = len(CODES)
    per_code = np.bincount(codes, minlength=n)[:n]
    per_bytes = np.bincount(codes, weights=sizes, minlength=n)[:n].astype(np.int64)
    return _counts(per_code, per_bytes, message_count, status, first_call)


def _counts(per_code: np.ndarray, per_bytes: np.ndarray, message_count: np.ndarray, status: np.ndarray,
            first_call: bool) -> np.ndarray:
    """`counts` from the units and bytes of each code."""
    out = _COUNT_UNITS @ per_code + _COUNT_BYTES @ per_bytes
    out[_PULL_FIELDS] = [len(status), int((message_count == 0).sum()), int((status == FOUND).sum()),
                         int(len(status) > 0 and first_call)]
    return out


@dataclass
class QueueOutput:
    """One queue's replay, compact: the matrix (MATRIX_SCHEMA), the details (DETAILS_SCHEMA), the pulls
    (PULLS_SCHEMA) and each plan's COUNT_FIELDS."""

    matrix: pa.Table
    details: pa.Table
    pulls: pa.Table
    counts: dict[int, np.ndarray]


def _bitmaps(units: pa.Table, rows: np.ndarray, tested: np.ndarray) -> pa.Array:
    bitmaps = units.column("filter_bitmap").take(pa.array(rows)).combine_chunks() if len(rows) else \
        pa.array([], pa.binary())
    if not tested.all():
        bitmaps = pc.if_else(pa.array(tested), bitmaps, pa.nulls(len(rows), pa.binary()))
    return bitmaps


def matrix_column(codes: np.ndarray) -> pa.Array:
    """(k, width) uint8 codes as a binary column of width bytes per row."""
    k, width = codes.shape
    if width == 0:
        return pa.array([b""] * k, pa.binary())
    fixed = pa.Array.from_buffers(pa.binary(width), k, [None, pa.py_buffer(np.ascontiguousarray(codes).tobytes())])
    return fixed.cast(pa.binary())


@njit(cache=True)
def _passes_of(col, cq_table, cl_table, detail_table, cq_pass, cl_pass):
    """Per unit, whether the consume-queue and the commit-log layer pass it, from its code (`passes` per code);
    returns how many units' details their codes do not give."""
    details = 0
    for i in range(len(col)):
        c = col[i]
        cq_pass[i] = cq_table[c]
        cl_pass[i] = cl_table[c]
        details += detail_table[c]
    return details


@njit(cache=True)
def _place(col, unit_call, sizes, placed, per_code, per_bytes):
    """Each scanned unit's code placed (the plan's codes), counted (units and bytes) by code."""
    for i in range(len(col)):
        if unit_call[i] >= 0:
            c = col[i]
            placed[i] = c
            per_code[c] += 1
            per_bytes[c] += sizes[i]


def replay_queue(filters: Sequence[tuple], width: int,
                 units: pa.Table, min_offset: int, units_per_file: int, config: PullConfig | None = None,
                 engine_cache: dict | None = None, span: Span | None = None, slots: Sequence | None = None
                 ) -> QueueOutput:
    """Every (plan, position, filter, start offset, batch size[, own filter]) over one queue
    (`simulate.UNITS_SCHEMA` units from `min_offset` on, in order), as the compact output: `width` bytes per matrix
    row, byte `position` the plan's. A filter None is a member that owns the queue but never pulls it: every unit
    NEVER_PULLED, no pull. The own filter is a member's own (`engine.decide.decide_units`).
    With `span` the units are a run of whole consumequeue files of a longer queue (`filterlib.replay.paging.Span`): the
    pulls' `pull_index` then counts from the run's first call, and the caller numbers them over the queue.
    Units carrying their messages' verdicts (`rows.VERDICT_UNITS_SCHEMA`) name `slots`, the topic's filters in the
    order the verdicts hold them."""
    base = config or PullConfig()
    cache = {} if engine_cache is None else engine_cache
    tables = cache.setdefault("code tables", {})
    u = units_from_table(units, slots, cache)
    n = len(u)
    sizes = np.asarray(pc.fill_null(units.column("size"), 0).to_numpy(), dtype=np.int64) if n else \
        np.zeros(0, np.int64)
    by_plan = np.zeros((width, n), dtype=np.uint8)  # a plan's codes together while they are written
    details, pulls, out_counts = [], [], {}
    for plan, position, f, start, batch_size, *rest in filters:
        if f is None:  # from its start on (a broker's history continued: units past where the last run stood)
            lo = min(max(0, start - min_offset), n)
            by_plan[position, lo:] = vocab.NEVER_PULLED_CODE
            out_counts[plan] = counts(by_plan[position, lo:], sizes[lo:], np.zeros(0, np.int64), np.zeros(0, np.int8),
                                      False)
            continue
        cfg = dataclasses.replace(base, batch_size=batch_size)
        own = rest[0] if rest else None
        col = C.by_table(f, u, u.verdicts.slot(f), tables) if own is None and u.verdicts is not None else None
        if col is not None:
            cq_pass, cl_pass = np.empty(n, bool), np.empty(n, bool)
            with_detail = _passes_of(col, _CQ_PASS, _CL_PASS, _DETAIL, cq_pass, cl_pass)
            calls = replay_pulls(start, min_offset, sizes, cq_pass, cl_pass, units_per_file, cfg, span=span)
            rows = np.flatnonzero(_DETAIL[col] & (calls.unit_call >= 0)) if with_detail else np.zeros(0, np.int64)
            texts = decide_units(f, take_units(u, rows), cache).details(np.arange(len(rows))) if len(rows) else None
        else:
            d, calls = pull_queue(f, u, sizes, start, min_offset, units_per_file, cfg, cache, span, own)
            col = encode(d)
            rows = _detail_rows(d)
            rows = rows[calls.unit_call[rows] >= 0] if len(rows) else rows
            texts = d.details(rows) if len(rows) else None
        per_code, per_bytes = np.zeros(len(CODES), np.int64), np.zeros(len(CODES), np.int64)
        _place(col, calls.unit_call, sizes, by_plan[position], per_code, per_bytes)
        if len(rows):
            details.append(pa.Table.from_arrays([
                pa.array(np.full(len(rows), plan, dtype=np.int32)),
                pa.array(min_offset + rows, pa.int64()), texts], schema=DETAILS_SCHEMA))
        pulls.append(pulls_table(plan, calls))
        out_counts[plan] = _counts(per_code, per_bytes, calls.message_count, calls.status,
                                   len(calls.status) > 0 and int(calls.request_offset[0]) == start)
    codes = np.ascontiguousarray(by_plan.T)
    rows = np.flatnonzero(codes.any(axis=1)) if width else np.zeros(0, np.int64)
    take = pa.array(rows)
    legal = pc.fill_null(units.column("tags_code_legal").take(take), False)
    matrix = pa.Table.from_arrays([
        units.column("queue_offset").take(take).combine_chunks(),
        units.column("commit_log_offset").take(take).combine_chunks(),
        units.column("size").take(take).combine_chunks(),
        pc.if_else(legal, units.column("tags_code").take(take), pa.nulls(len(rows), pa.int64())),
        _bitmaps(units, rows, C.TESTED[codes[rows]].any(axis=1) if len(rows) else np.zeros(0, bool)),
        matrix_column(codes[rows])], schema=MATRIX_SCHEMA)
    return QueueOutput(matrix, pa.concat_tables(details) if details else DETAILS_SCHEMA.empty_table(),
                       pa.concat_tables(pulls) if pulls else PULLS_SCHEMA.empty_table(), out_counts)


def subscription_positions(plans: Sequence[Plan], current: int) -> tuple[dict[int, int], dict[str, tuple[int, int]]]:
    """Each plan's byte in its topic's matrix row (the run's subscriptions to the topic in index order, then its
    what-if candidates: plans from `current` on), and per topic (subscriptions, candidates)."""
    positions: dict[int, int] = {}
    widths: dict[str, list[int]] = {}
    for p in sorted(plans, key=lambda p: p.index):
        w = widths.setdefault(p.topic, [0, 0])
        if p.index < current:
            positions[p.index] = w[0]
            w[0] += 1
    for p in sorted(plans, key=lambda p: p.index):
        if p.index >= current:
            w = widths[p.topic]
            positions[p.index] = w[0] + w[1]
            w[1] += 1
    return positions, {t: (w[0], w[1]) for t, w in widths.items()}


def codes_of(matrix: pa.Table, width: int) -> np.ndarray:
    """The matrix's decision bytes as a (rows, width) uint8 array."""
    col = matrix.column("decisions").combine_chunks().cast(pa.binary())
    if len(col) == 0 or width == 0:
        return np.zeros((len(col), width), dtype=np.uint8)
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset: col.offset + len(col) + 1]
    if not (np.diff(offsets) == width).all():
        raise ValueError(f"matrix rows are not {width} bytes each")
    data = np.frombuffer(col.buffers()[2], dtype=np.uint8)[offsets[0]: offsets[-1]]
    return data.reshape(len(col), width)


_SCANNING = (STATUS_NAMES[FOUND], STATUS_NAMES[NO_MATCHED_MESSAGE])


def pull_index_of(queue_offsets: np.ndarray, pulls: pa.Table) -> np.ndarray:
    """For units one plan scanned, the pull that scanned each: the FOUND / NO_MATCHED_MESSAGE pull whose
    [request_offset, next_begin_offset) holds it; ValueError for a unit no such pull holds."""
    scanning = pulls.filter(pc.is_in(pulls.column("status"), pa.array(_SCANNING)))
    req = np.asarray(scanning.column("request_offset").to_numpy(), dtype=np.int64)
    nxt = np.asarray(scanning.column("next_begin_offset").to_numpy(), dtype=np.int64)
    idx = np.asarray(scanning.column("pull_index").to_numpy(), dtype=np.int32)
    order = np.argsort(req, kind="stable")
    req, nxt, idx = req[order], nxt[order], idx[order]
    at = np.searchsorted(req, queue_offsets, side="right") - 1
    ok = (at >= 0) & (nxt[np.maximum(at, 0)] > queue_offsets) if len(req) else np.zeros(len(queue_offsets), bool)
    if not ok.all():
        raise ValueError(f"queue offset {int(queue_offsets[~ok][0])} lies in no scanning pull's range")
    return idx[at]


def decode(matrix: pa.Table, details: pa.Table, pulls: pa.Table, positions: Mapping[int, int], width: int
           ) -> pa.Table:
    """One queue's decisions in `simulate.DECISIONS_SCHEMA` (plans in `positions` order, units in queue order):
    exactly what `simulate.simulate_queue` gives for the same replay."""
    codes = codes_of(matrix, width)
    qo = np.asarray(matrix.column("queue_offset").to_numpy(), dtype=np.int64)
    texts = {(p, o): t for p, o, t in zip(details.column("plan").to_pylist(), details.column("queue_offset")
                                          .to_pylist(), details.column("detail").to_pylist(), strict=True)}
    out = []
    for plan, position in positions.items():
        col = codes[:, position]
        rows = np.flatnonzero(col)
        c = col[rows]
        take = pa.array(rows)
        sql = C.SQL_STATE[c]
        layer = C.LAYER[c]
        shown = (sql >= 0) & (sql != _SQL_ERROR) & (layer == LAYERS.index(vocab.COMMIT_LOG))
        plan_texts = [texts.get((plan, int(o))) for o in qo[rows].tolist()]
        detail = [t if t is not None else (vocab.SQL_VALUES[s] if ok else None)
                  for t, s, ok in zip(plan_texts, sql.tolist(), shown.tolist(), strict=True)]
        tested = C.TESTED[c]
        bitmaps = matrix.column("bloom_bitmap").take(take).combine_chunks() if len(rows) else pa.array([], pa.binary())
        if len(rows) and not tested.all():
            bitmaps = pc.if_else(pa.array(tested), bitmaps, pa.nulls(len(rows), pa.binary()))
        plan_pulls = pulls.filter(pc.equal(pulls.column("plan"), plan))
        cols = {
            "plan": pa.array(np.full(len(rows), plan, dtype=np.int32)),
            "queue_offset": pa.array(qo[rows]),
            "commit_log_offset": matrix.column("commit_log_offset").take(take),
            "size": matrix.column("size").take(take), "tags_code": matrix.column("tags_code").take(take),
            "outcome": _names(C.OUTCOME[c], OUTCOMES), "layer": _names(layer, LAYERS),
            "reason": _names(C.REASON[c], REASONS), "cq_reason": _names(C.CQ_REASON[c], REASONS),
            "detail": pa.array(detail, pa.string()),
            "sql_value": pa.array([vocab.SQL_VALUES[s] if s >= 0 else None for s in sql.tolist()], pa.string()),
            "bloom_false_positive": pa.array(C.FP[c]), "bloom_tested": pa.array(tested), "filter_bitmap": bitmaps,
            "pull_index": _pull_index(qo[rows], c, plan_pulls),
        }
        out.append(pa.Table.from_arrays([cols[f.name] for f in DECISIONS_SCHEMA], schema=DECISIONS_SCHEMA))
    return pa.concat_tables(out) if out else DECISIONS_SCHEMA.empty_table()


def _pull_index(queue_offsets: np.ndarray, c: np.ndarray, pulls: pa.Table) -> pa.Array:
    """Each decided unit's pull (null for a unit on a queue nobody pulls)."""
    pulled = c != vocab.NEVER_PULLED_CODE
    if pulled.all():
        return pa.array(pull_index_of(queue_offsets, pulls), pa.int32())
    out = np.zeros(len(c), np.int32)
    out[pulled] = pull_index_of(queue_offsets[pulled], pulls)
    return pa.array(out, pa.int32(), mask=~pulled)


def _names(codes: np.ndarray, names: Sequence[str]) -> pa.Array:
    return pa.array([names[i] if i >= 0 else None for i in codes.tolist()], pa.string())


def codes_table() -> pa.Table:
    """The decision code table as rows (code, outcome, layer, reason, cq_reason, sql_value, bloom_tested,
    bloom_false_positive), for the warehouse's `decision_codes` table."""
    fields = [f.name for f in dataclasses.fields(vocab.DecisionCode)]
    return pa.Table.from_pylist([dataclasses.asdict(c) for c in CODES], schema=CODES_SCHEMA).select(fields)


CODES_SCHEMA = pa.schema([("code", pa.int32()), ("outcome", pa.string()), ("layer", pa.string()),
                          ("reason", pa.string()), ("cq_reason", pa.string()), ("sql_value", pa.string()),
                          ("bloom_tested", pa.bool_()), ("bloom_false_positive", pa.bool_())])
"""`vocabulary.DECISION_CODES` as an Arrow table's schema."""
