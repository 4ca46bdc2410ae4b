"""Decision codes (`vocabulary.DECISION_CODES`): a unit's code from its decisions (`encode`), what each code says
(outcome, layer, branches, per code), and one subscription's codes over a piece of a queue by table (`by_table`).

Once the consume-queue layer has answered for a unit, the rest of its decision (the commit-log layer, the client's
re-check) depends on five small values only: whether that layer matched, its branch, and the unit's message's
verdicts under the filter (the commit-log branch, the client's keep, no TAGS). So where the units carry verdicts,
`by_table` runs the rules themselves (`decide.decide_after_consume_queue`) once per combination a subscription
meets and gives each unit the code of its combination in one pass, instead of a few dozen array passes per
subscription and unit.
"""

from __future__ import annotations

import numpy as np

from filterlib import message_filter as mf
from filterlib import vocabulary as vocab
from filterlib.engine.decide import (
    LAYERS,
    OUTCOMES,
    REASONS,
    Decisions,
    Units,
    consume_queue_layer,
    decide_after_consume_queue,
)
from filterlib.engine.verdicts import Verdicts, sql_states
from filterlib.kernel_cache import njit

CODES = vocab.DECISION_CODES
_NR, _NL, _NO = len(REASONS), len(LAYERS), len(OUTCOMES)
_R = {name: i for i, name in enumerate(REASONS)}
_SQL = {v: i for i, v in enumerate(vocab.SQL_VALUES)}


def _key(outcome, layer, reason, cq_reason, sql_state):
    return (((outcome.astype(np.int64) * _NL + layer) * _NR + reason) * _NR + cq_reason) * 5 + (sql_state + 1)


def _lookup() -> np.ndarray:
    lut = np.full(_NO * _NL * _NR * _NR * 5, -1, dtype=np.int16)
    for c in CODES[1:]:
        if c.cq_reason is None:  # NEVER_PULLED: given to a whole queue, never encoded from the engine's branches
            continue
        key = _key(np.array([OUTCOMES.index(c.outcome)]), LAYERS.index(c.layer), _R[c.reason], _R[c.cq_reason],
                   -1 if c.sql_value is None else _SQL[c.sql_value])
        lut[key[0]] = c.code
    return lut


_LUT = _lookup()
OUTCOME = np.array([-1] + [OUTCOMES.index(c.outcome) for c in CODES[1:]], dtype=np.int8)
LAYER = np.array([-1] + [LAYERS.index(c.layer) for c in CODES[1:]], dtype=np.int8)
REASON = np.array([-1] + [_R[c.reason] for c in CODES[1:]], dtype=np.int8)
CQ_REASON = np.array([-1] + [-1 if c.cq_reason is None else _R[c.cq_reason] for c in CODES[1:]], dtype=np.int8)
SQL_STATE = np.array([-1] + [-1 if c.sql_value is None else _SQL[c.sql_value] for c in CODES[1:]], dtype=np.int8)
TESTED = np.array([c.bloom_tested for c in CODES], dtype=bool)
FP = np.array([c.bloom_false_positive for c in CODES], dtype=bool)
"""Per code: its outcome, layer, branch, consume-queue branch, SQL92 state (indices; -1 for code 0 and where none),
whether the bloom bitmap was tested, whether the bloom hit was a false positive."""


def lookup(d: Decisions) -> np.ndarray:
    """Each unit's decision code (int16), -1 where the code table lacks its combination."""
    if d.cq_reason is None:
        raise ValueError("decisions without the consume-queue branch cannot be encoded")
    codes = _LUT[_key(d.outcome, d.layer, d.reason, d.cq_reason, d.sql_state)]
    return np.where(FP[np.maximum(codes, 0)] != d.bloom_false_positive, np.int16(-1), codes)


def encode(d: Decisions) -> np.ndarray:
    """Each unit's decision code (uint8); ValueError naming a combination the code table lacks."""
    codes = lookup(d)
    bad = np.flatnonzero(codes < 0)
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"no decision code for outcome {OUTCOMES[d.outcome[i]]}, layer {LAYERS[d.layer[i]]}, reason "
                         f"{REASONS[d.reason[i]]}, cq_reason {REASONS[d.cq_reason[i]]}, sql state "
                         f"{int(d.sql_state[i])}, bloom false positive {bool(d.bloom_false_positive[i])}")
    return codes.astype(np.uint8)


_COMBINATIONS = 2 * _NR * _NR * 2 * 2
_UNKNOWN = -2


def _combination(key: np.ndarray) -> tuple[np.ndarray, ...]:
    """(matched, consume-queue branch, verdict branch, keep, no TAGS) of each combination key (`_combination_key`'s)."""
    missing, keep, rest = key & 1, (key >> 1) & 1, key >> 2
    v_reason, rest = rest % _NR, rest // _NR
    return (rest // _NR).astype(bool), (rest % _NR).astype(np.int8), v_reason.astype(np.int8), keep.astype(bool), \
        missing.astype(bool)


@njit(cache=True)
def _combination_key(matched, cq_reason, v_reason, keep, missing):
    """The table index of one unit's combination (`_combination` reads it back)."""
    return (((np.int64(matched) * _NR + cq_reason) * _NR + v_reason) * 2 + keep) * 2 + missing


@njit(cache=True)
def _apply(table, matched, cq_reason, v_reason, keep, missing, out):
    """out[i] = the code of unit i's combination; the first unit whose combination the table has no code for
    (yet), or -1 when every unit got one."""
    for i in range(len(out)):
        c = table[_combination_key(matched[i], cq_reason[i], v_reason[i], keep[i], missing[i])]
        if c < 0:
            return i
        out[i] = c
    return -1


@njit(cache=True)
def _keys(matched, cq_reason, v_reason, keep, missing):
    """Every unit's combination index."""
    out = np.empty(len(matched), np.int64)
    for i in range(len(out)):
        out[i] = _combination_key(matched[i], cq_reason[i], v_reason[i], keep[i], missing[i])
    return out


def _fill(table: np.ndarray, f: mf.ExpressionMessageFilter, keys: np.ndarray) -> None:
    """The codes of these combinations under filter f, by the rules themselves over one unit of each."""
    matched, cq_reason, v_reason, keep, missing = _combination(keys)
    k = len(keys)
    v = Verdicts(v_reason[None, :].copy(), sql_states(v_reason)[None, :], keep[None, :].copy(), missing, {},
                 {id(f): 0})
    u = Units(np.zeros(k, np.int64), np.zeros(k, bool), np.zeros(k, bool), np.zeros(k, np.int64),
              np.zeros((k, 0), np.uint8), np.full(k, -1, np.int64), None, None, None, v)
    table[keys] = lookup(decide_after_consume_queue(f, u, matched, cq_reason.copy()))


def by_table(f: mf.ExpressionMessageFilter, u: Units, slot: int, tables: dict) -> np.ndarray | None:
    """Every unit's decision code (uint8) under filter f, whose verdicts are the units' slot `slot`; None where the
    table does not answer and the caller decides the general way (`decide_units`, `encode`): units without verdicts,
    a verdict the broker throws on, a body the client fails to decode, a combination without a code. `tables`
    keeps each filter's table between calls."""
    v = u.verdicts
    if v is None or (u.decode_errors is not None and u.decode_errors.null_count < len(u.decode_errors)):
        return None
    v_reason = v.reason[slot]
    if len(u) and v_reason.min() < 0:
        return None
    entry = tables.get(id(f))
    if entry is None or entry[0] is not f:
        entry = tables[id(f)] = (f, np.full(_COMBINATIONS, _UNKNOWN, dtype=np.int16))
    table = entry[1]
    matched, cq_reason = consume_queue_layer(f, u)
    keep, missing = v.keep[slot], v.tags_missing
    out = np.empty(len(u), dtype=np.uint8)
    at = _apply(table, matched, cq_reason, v_reason, keep, missing, out)
    if at >= 0:
        keys = np.flatnonzero(np.bincount(_keys(matched[at:], cq_reason[at:], v_reason[at:], keep[at:], missing[at:]),
                                          minlength=_COMBINATIONS))
        unknown = keys[table[keys] == _UNKNOWN]
        if len(unknown):
            _fill(table, f, unknown)
        if (table[keys] < 0).any():
            return None
        _apply(table, matched[at:], cq_reason[at:], v_reason[at:], keep[at:], missing[at:], out[at:])
    return out
