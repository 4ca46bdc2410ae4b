"""What the set-at-a-time engine answers for one filter over a batch: a state per row, and the errors.

`state` holds FALSE (0), TRUE (1), NULL (2) or ERROR (3) per row; where it is ERROR, `error_index` points into
`errors`, the FilterEvaluationError the interpreter raises for that row (same Java class, cause and message).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from filterlib.errors import FilterEvaluationError

FALSE, TRUE, NULL, ERROR = 0, 1, 2, 3
STATE_VALUES = {FALSE: False, TRUE: True, NULL: None}

TABLE = "table"
KERNEL = "kernel"
PROGRAM = "program"


@dataclass
class FilterResult:
    """One filter over N rows: `state` (int8), `error_index` (int32, meaningful where state == ERROR)."""

    state: np.ndarray
    error_index: np.ndarray | None
    errors: list[FilterEvaluationError]
    path: str

    def __len__(self) -> int:
        return len(self.state)

    @property
    def matches(self) -> np.ndarray:
        """The broker's decision per row: True only where the selector evaluated to TRUE."""
        return self.state == TRUE

    def error_at(self, row: int) -> FilterEvaluationError | None:
        """The error the interpreter raises for this row, or None."""
        if self.state[row] != ERROR:
            return None
        return self.errors[int(self.error_index[row])]

    def value(self, row: int) -> bool | None:
        """What `Sql92Expression.evaluate` returns for the row; raises its FilterEvaluationError."""
        s = int(self.state[row])
        if s == ERROR:
            raise self.errors[int(self.error_index[row])]
        return STATE_VALUES[s]

    def outcomes(self) -> list:
        """Per row: True, False, None or the FilterEvaluationError (for tests and audits, not the hot path)."""
        out: list = []
        for i, s in enumerate(self.state.tolist()):
            out.append(self.errors[int(self.error_index[i])] if s == ERROR else STATE_VALUES[s])
        return out


def constant_result(n: int, value: int, path: str) -> FilterResult:
    """Every row answers the same non-error state."""
    return FilterResult(np.full(n, value, dtype=np.int8), None, [], path)
