"""Each message's answers to every filter of its topic, computed where the message is read, so that job 2's replay
pages over a few bytes per unit and never carries the message's properties to its queue.

What a unit's decision needs from its message is, per filter, the commit-log layer's branch and SQL92 state and
the client's tag re-check: `filterlib.engine.decide.message_verdicts` computes them set-at-a-time over a batch of
messages; `Verdicts` holds them as (messages, filters) arrays, and `to_arrow` / `from_arrow` carry them as one
binary column (as few bits a filter as its kind needs: two for an SQL92 state, one for a tag re-check, none for
what every message answers alike, six for a retry filter's branch) beside the evaluation errors' texts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import vocabulary as vocab
from filterlib.kernel_cache import njit

RAISES = -2
"""The commit-log branch of a retry filter over a message without RETRY_TOPIC: the broker throws (the replay raises
`BrokerFilterError` where such a unit reaches that layer)."""
_RAISES_BYTE = 0x3F
_STATE_OF = np.full(256, -1, dtype=np.int8)  # by branch code as a byte (RAISES too)
for _state, _name in enumerate(("sql_false", "sql_true", "sql_null", "sql_error")):  # results.FALSE .. ERROR
    _STATE_OF[vocab.REASONS.index(_name)] = _state
if len(vocab.REASONS) >= _RAISES_BYTE:
    raise ValueError("a retry filter's verdict holds its branch in 6 bits")
FIELDS = (pa.field("verdicts", pa.binary()), pa.field("verdict_errors", pa.string()),
          pa.field("tags_missing", pa.bool_()))
"""The columns that carry a message's verdicts (`to_arrow`)."""


def sql_states(reason: np.ndarray) -> np.ndarray:
    """The SQL92 state (results.FALSE .. ERROR) a commit-log branch stands for, -1 for a branch that ran none."""
    return _STATE_OF[np.asarray(reason, dtype=np.int8).view(np.uint8)]


@dataclass
class Verdicts:
    """Per filter slot (S) and message (n), as (S, n) arrays so that a slot's verdicts lie together: the commit-log
    layer's branch (`decide.REASONS` index, or RAISES) and SQL92 state (-1 where no SQL ran), whether the client's
    tag re-check keeps it under the slot filter's subscription; per message whether it has no TAGS; the texts of
    evaluation errors by (row, slot). `slots` maps a filter object (its id) to its slot."""

    reason: np.ndarray
    sql_state: np.ndarray
    keep: np.ndarray
    tags_missing: np.ndarray
    errors: dict[tuple[int, int], str] = field(default_factory=dict)
    slots: dict[int, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tags_missing)

    def slot(self, f: object) -> int:
        """The slot of filter `f`; KeyError in words for a filter the verdicts were not computed for."""
        try:
            return self.slots[id(f)]
        except KeyError:
            raise KeyError(f"no verdicts were computed for the filter {f!r}") from None

    def take(self, rows: np.ndarray) -> Verdicts:
        """The given rows, their error texts renumbered."""
        at = {int(r): i for i, r in enumerate(rows.tolist())} if self.errors else {}
        errors = {(at[r], s): t for (r, s), t in self.errors.items() if r in at}
        return Verdicts(self.reason[:, rows], self.sql_state[:, rows], self.keep[:, rows], self.tags_missing[rows],
                        errors,
                        self.slots)

    def commit_log(self, f: object, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """(branch, SQL92 state, error texts by position in rows) of filter f's commit-log layer over rows."""
        s = self.slot(f)
        errors = {}
        if self.errors:
            at = {int(r): i for i, r in enumerate(rows.tolist())}
            errors = {at[r]: t for (r, k), t in self.errors.items() if k == s and r in at}
        return self.reason[s, rows], self.sql_state[s, rows], errors

    def client(self, f: object, rows: np.ndarray) -> np.ndarray:
        """Does the client's re-check keep each row's message under filter f's subscription?"""
        return self.keep[self.slot(f), rows]


@dataclass(frozen=True)
class Layout:
    """How a topic's verdicts are packed, fixed by its filters alone (`filterlib.engine.decide.layout_of`): per
    slot the bits its commit-log branch takes (0: the same for every message, `constant`; 2: an SQL92 state; 6: any
    branch, a retry filter's) and whether the client's keep takes a bit (False: the subscription keeps every
    message)."""

    branch_bits: tuple[int, ...]
    keep_bit: tuple[bool, ...]
    constant: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.branch_bits)

    def _slots(self, bits: int) -> list[int]:
        return [s for s, b in enumerate(self.branch_bits) if b == bits]

    @property
    def bits(self) -> int:
        """Bits a message's verdicts take."""
        return sum(self.branch_bits) + sum(self.keep_bit)

    @property
    def width(self) -> int:
        """Bytes a message's verdicts take."""
        return -(-self.bits // 8)


_SQL_REASONS = np.array([vocab.REASONS.index(n) for n in ("sql_false", "sql_true", "sql_null", "sql_error")],
                        dtype=np.int8)


def to_arrow(v: Verdicts, layout: Layout) -> list[pa.Array]:
    """The FIELDS columns: the verdicts packed as `layout` says (each SQL92 state in two bits, a retry filter's
    branch in six, a keep in one, a constant branch in none), the errors as JSON {"slot": text} per message (null
    without any), tags_missing."""
    slots, n = v.reason.shape
    if slots != len(layout):
        raise ValueError(f"verdicts of {slots} filters, a layout of {len(layout)}")
    const, sql, full = layout._slots(0), layout._slots(2), layout._slots(6)
    if const and (v.reason[const] != np.array([layout.constant[s] for s in const], np.int8)[:, None]).any():
        raise ValueError("a verdict differs from its filter's constant branch")
    width = layout.width
    keeps = [s for s, k in enumerate(layout.keep_bit) if k]
    if width:
        state = v.sql_state[sql] if sql else np.zeros((0, n), np.int8)
        if (state < 0).any():
            raise ValueError("an SQL92 filter's verdict without its state")
        code = np.where(v.reason[full] == RAISES, _RAISES_BYTE, v.reason[full]).astype(np.uint8) if full else \
            np.zeros((0, n), np.uint8)
        packed = np.zeros((n, width), dtype=np.uint8)
        _pack(state, code, v.keep[keeps].view(np.uint8) if keeps else np.zeros((0, n), np.uint8), packed)
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
        column = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(packed)])
    else:
        column = pa.array([b""] * n, pa.binary())
    if not v.errors:
        return [column, pa.nulls(n, pa.string()), pa.array(v.tags_missing, pa.bool_())]
    texts: list[str | None] = [None] * n
    by_row: dict[int, dict[str, str]] = {}
    for (r, k), t in v.errors.items():
        by_row.setdefault(r, {})[str(k)] = t
    for r, d in by_row.items():
        texts[r] = json.dumps(d, ensure_ascii=False)
    return [column, pa.array(texts, pa.string()), pa.array(v.tags_missing, pa.bool_())]


@njit(cache=True)
def _pack(state, code, keep, out):
    """`to_arrow`'s bits into out (n, width), little-endian within a byte: every SQL92 slot's low state bit, then
    every one's high bit, then a retry slot's six branch bits (bit j of every slot, j = 0..5), then the keeps."""
    b = 0
    for plane in range(2):
        b = _planes(state, plane, out, b)
    for j in range(6):
        b = _planes(code, j, out, b)
    _planes(keep, 0, out, b)


@njit(cache=True)
def _planes(values, bit, out, b):
    """Bit `bit` of each slot's values (a row of `values` each), as out's bits b, b + 1, ...; the next bit."""
    for s in range(values.shape[0]):
        for i in range(values.shape[1]):
            if (values[s, i] >> bit) & 1:
                out[i, b >> 3] |= np.uint8(1 << (b & 7))
        b += 1
    return b


def from_arrow(verdicts: pa.Array, errors: pa.Array, tags_missing: pa.Array, layout: Layout,
               missing: Verdicts | None) -> Verdicts:
    """The Verdicts of `to_arrow`'s columns under `layout`; a null row (no message at the unit's offset) takes
    `missing`'s one row (the verdicts of a message that is not there)."""
    n, slots, width = len(verdicts), len(layout), layout.width
    valid = np.asarray(verdicts.is_valid(), dtype=bool) if n else np.zeros(0, bool)
    packed = np.zeros((n, width), dtype=np.uint8)
    if valid.any() and width:
        present = verdicts.filter(pa.array(valid)).cast(pa.binary())
        lengths = pc.binary_length(present).to_numpy(zero_copy_only=False)
        if not (lengths == width).all():
            raise ValueError(f"message verdicts are {sorted(set(lengths.tolist()))} bytes, not {width}")
        offsets = np.frombuffer(present.buffers()[1], dtype=np.int32)[present.offset: present.offset + len(present)
                                                                       + 1]
        data = np.frombuffer(present.buffers()[2], dtype=np.uint8)[offsets[0]: offsets[-1]]
        packed[valid] = data.reshape(len(present), width)
    bits = np.unpackbits(np.ascontiguousarray(packed.T), axis=0, count=layout.bits, bitorder="little") if width \
        else np.zeros((0, n), np.uint8)
    reason = np.empty((slots, n), dtype=np.int8)
    const, sql, full = layout._slots(0), layout._slots(2), layout._slots(6)
    for s in const:
        reason[s] = layout.constant[s]
    at = 0
    if sql:
        k = len(sql)
        reason[sql] = _SQL_REASONS[bits[at: at + k] | (bits[at + k: at + 2 * k] << 1)]
        at += 2 * k
    if full:
        k = len(full)
        code = sum(bits[at + j * k: at + (j + 1) * k].astype(np.int16) << j for j in range(6))
        reason[full] = np.where(code == _RAISES_BYTE, RAISES, code)
        at += 6 * k
    keep = np.ones((slots, n), dtype=bool)
    keeps = [s for s, k in enumerate(layout.keep_bit) if k]
    if keeps:
        keep[keeps] = bits[at: at + len(keeps)] != 0
    state = sql_states(reason)
    gone = np.flatnonzero(~valid)
    tags_gone = np.asarray(pc.fill_null(tags_missing, True).to_numpy(zero_copy_only=False), dtype=bool) if n else \
        np.zeros(0, bool)
    out_errors: dict[tuple[int, int], str] = {}
    if len(gone):
        if missing is None:
            raise ValueError("units without a message need the verdicts of a missing message")
        reason[:, gone], state[:, gone] = missing.reason[:, :1], missing.sql_state[:, :1]
        keep[:, gone] = missing.keep[:, :1]
        tags_gone[gone] = missing.tags_missing[0]
        for (r, k), t in missing.errors.items():
            if r == 0:
                out_errors.update({(int(g), k): t for g in gone.tolist()})
    if errors.null_count < n:
        for r, text in enumerate(errors.to_pylist()):
            if text is not None:
                out_errors.update({(r, int(k)): t for k, t in json.loads(text).items()})
    return Verdicts(reason, state, keep, tags_gone, out_errors)


def assign(v: Verdicts, filters: Sequence[object]) -> Verdicts:
    """v with each filter of `filters` (in slot order) bound to its slot."""
    v.slots = {id(f): i for i, f in enumerate(filters)}
    return v
