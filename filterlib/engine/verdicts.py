"""Each message's answers to every filter of its topic, computed where the message is read, so that job 2's replay
pages over a few bytes per unit and never carries the message's properties to its queue.

What a unit's decision needs from its message is, per filter, the commit-log layer's branch and SQL92 state and
the client's tag re-check: `filterlib.engine.decide.message_verdicts` computes them set-at-a-time over a batch of
messages; `Verdicts` holds them as (messages, filters) arrays, and `to_arrow` / `from_arrow` carry them as one
binary column (a byte a filter: the branch, which fixes the SQL92 state, and the client's bit) beside the
evaluation errors' texts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import vocabulary as vocab

RAISES = -2
"""The commit-log branch of a retry filter over a message without RETRY_TOPIC: the broker throws (the replay raises
`BrokerFilterError` where such a unit reaches that layer)."""
_RAISES_BYTE, _KEEP_BIT = 0x3F, 0x80
_STATE_OF = np.full(64, -1, dtype=np.int8)
for _state, _name in enumerate(("sql_false", "sql_true", "sql_null", "sql_error")):  # results.FALSE .. ERROR
    _STATE_OF[vocab.REASONS.index(_name)] = _state
if len(vocab.REASONS) >= _RAISES_BYTE:
    raise ValueError("a verdict byte holds a branch in 6 bits")
FIELDS = (pa.field("verdicts", pa.binary()), pa.field("verdict_errors", pa.string()),
          pa.field("tags_missing", pa.bool_()))
"""The columns that carry a message's verdicts (`to_arrow`)."""


@dataclass
class Verdicts:
    """Per message (n rows) and filter slot (S): the commit-log layer's branch (`decide.REASONS` index, or RAISES)
    and SQL92 state (-1 where no SQL ran), whether the client's tag re-check keeps it under the slot filter's
    subscription; per message whether it has no TAGS; the texts of evaluation errors by (row, slot). `slots` maps
    a filter object (its id) to its slot."""

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
        return Verdicts(self.reason[rows], self.sql_state[rows], self.keep[rows], self.tags_missing[rows], errors,
                        self.slots)

    def commit_log(self, f: object, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """(branch, SQL92 state, error texts by position in rows) of filter f's commit-log layer over rows."""
        s = self.slot(f)
        errors = {}
        if self.errors:
            at = {int(r): i for i, r in enumerate(rows.tolist())}
            errors = {at[r]: t for (r, k), t in self.errors.items() if k == s and r in at}
        return self.reason[rows, s], self.sql_state[rows, s], errors

    def client(self, f: object, rows: np.ndarray) -> np.ndarray:
        """Does the client's re-check keep each row's message under filter f's subscription?"""
        return self.keep[rows, self.slot(f)]


def to_arrow(v: Verdicts) -> list[pa.Array]:
    """The FIELDS columns: the verdicts as a byte a slot (the branch in the low six bits, the client's keep in the
    top one), the errors as JSON {"slot": text} per message (null without any), tags_missing."""
    n, width = v.reason.shape
    if ((v.reason >= 0) & (_STATE_OF[np.maximum(v.reason, 0)] != np.where(v.sql_state < 0, -1, v.sql_state))).any():
        raise ValueError("a verdict's SQL92 state is not its branch's")
    packed = np.where(v.reason == RAISES, _RAISES_BYTE, v.reason).astype(np.uint8) | \
        (v.keep.astype(np.uint8) * np.uint8(_KEEP_BIT))
    if width:
        fixed = pa.Array.from_buffers(pa.binary(width), n, [None, pa.py_buffer(packed.tobytes())])
        column = fixed.cast(pa.binary())
    else:
        column = pa.array([b""] * n, pa.binary())
    texts: list[str | None] = [None] * n
    by_row: dict[int, dict[str, str]] = {}
    for (r, k), t in v.errors.items():
        by_row.setdefault(r, {})[str(k)] = t
    for r, d in by_row.items():
        texts[r] = json.dumps(d, ensure_ascii=False)
    return [column, pa.array(texts, pa.string()), pa.array(v.tags_missing, pa.bool_())]


def from_arrow(verdicts: pa.Array, errors: pa.Array, tags_missing: pa.Array, slots: int,
               missing: Verdicts | None) -> Verdicts:
    """The Verdicts of `to_arrow`'s columns, `slots` filters wide; a null row (no message at the unit's offset)
    takes `missing`'s one row (the verdicts of a message that is not there)."""
    n = len(verdicts)
    width = slots
    valid = np.asarray(verdicts.is_valid(), dtype=bool) if n else np.zeros(0, bool)
    packed = np.zeros((n, width), dtype=np.uint8)
    if valid.any():
        present = verdicts.filter(pa.array(valid)).cast(pa.binary())
        lengths = pc.binary_length(present).to_numpy(zero_copy_only=False)
        if not (lengths == width).all():
            raise ValueError(f"message verdicts are {sorted(set(lengths.tolist()))} bytes, not {width}")
        offsets = np.frombuffer(present.buffers()[1], dtype=np.int32)[present.offset: present.offset + len(present)
                                                                       + 1]
        data = np.frombuffer(present.buffers()[2], dtype=np.uint8)[offsets[0]: offsets[-1]]
        packed[valid] = data.reshape(len(present), width)
    branch = packed & np.uint8(_RAISES_BYTE)
    reason = np.where(branch == _RAISES_BYTE, RAISES, branch).astype(np.int8)
    state = _STATE_OF[branch & np.uint8(0x3F)]
    keep = (packed & np.uint8(_KEEP_BIT)) != 0
    gone = np.flatnonzero(~valid)
    tags_gone = np.asarray(pc.fill_null(tags_missing, True).to_numpy(zero_copy_only=False), dtype=bool) if n else \
        np.zeros(0, bool)
    out_errors: dict[tuple[int, int], str] = {}
    if len(gone):
        if missing is None:
            raise ValueError("units without a message need the verdicts of a missing message")
        reason[gone], state[gone], keep[gone] = missing.reason[0], missing.sql_state[0], missing.keep[0]
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
