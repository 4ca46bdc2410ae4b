"""The set-at-a-time SQL92 engine: every compiled selector over a whole Arrow batch at once.

`Engine(filters).evaluate(batch)` extracts the properties the filters name once, decides every leaf predicate
once per distinct value of its property (the kernels' leaves), then runs every filter's AND / OR / NOT over the
rows in one compiled pass (`program`); where a filter's state is an error, the kernels give that filter's errors.
Two other paths stay for tests and benchmarks: the decision table (the interpreter once per distinct tuple of the
named properties) and the kernels alone (the operators as numpy passes). All give, for every (row, filter), the
interpreter's exact answer — TRUE, FALSE, NULL or its FilterEvaluationError — and the caller never needs to know
which path ran.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from filterlib.engine.columns import Column, extract_properties
from filterlib.engine.kernels import BatchContext, Vec, by_tuples, evaluate_node
from filterlib.engine.program import Program
from filterlib.engine.results import ERROR, KERNEL, PROGRAM, TABLE, FilterResult
from filterlib.sql92.expression import Sql92Expression

AUTO = "auto"
PATHS = (AUTO, PROGRAM, TABLE, KERNEL)
PROPERTIES = "properties"


def properties_of(batch: pa.RecordBatch | pa.Table | pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The map<string,string> properties column of a decoded batch (or the column itself)."""
    if isinstance(batch, (pa.RecordBatch, pa.Table)):
        return batch.column(PROPERTIES)
    return batch


class Engine:
    """A fixed list of compiled selectors, evaluated together over batch after batch."""

    def __init__(self, filters: Sequence[Sql92Expression]):
        self.filters = list(filters)
        self.names = sorted({n for f in self.filters for n in f.referenced_properties})
        self._names_of = [tuple(sorted(f.referenced_properties)) for f in self.filters]
        self._closures: dict = {}
        self._program = Program.of([f.ast for f in self.filters])

    def context(self, batch, columns: dict[str, Column] | None = None) -> BatchContext:
        """The batch's shared state: the named properties as columns (extracted unless given)."""
        props = properties_of(batch)
        if columns is None:
            columns = extract_properties(props, self.names)
        return BatchContext(dict(columns), len(props), self._closures)

    def states(self, batch, columns: dict[str, Column] | None = None) -> np.ndarray:
        """(filters, rows) int8: every filter's state per row (FALSE, TRUE, NULL or ERROR), without the errors' texts
        (what a bitmap or a verdict needs)."""
        return self._program.states(self.context(batch, columns))

    def evaluate(self, batch, path: str = AUTO, columns: dict[str, Column] | None = None) -> list[FilterResult]:
        """One FilterResult per filter, in order; `path` forces one backend (tests, benchmarks)."""
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, not {path!r}")
        ctx = self.context(batch, columns)
        if path in (AUTO, PROGRAM):
            states = self._program.states(ctx)
            return [_result(evaluate_node(ctx, f.ast), PROGRAM) if (row == ERROR).any()
                    else FilterResult(row, None, [], PROGRAM) for f, row in zip(self.filters, states, strict=True)]
        if path == TABLE:
            return [_result(by_tuples(ctx, f._fn, names), TABLE) for f, names in
                    zip(self.filters, self._names_of, strict=True)]
        return [_result(evaluate_node(ctx, f.ast), KERNEL) for f in self.filters]


def _result(v: Vec, path: str) -> FilterResult:
    return FilterResult(np.ascontiguousarray(v.state), v.err_index, v.errors, path)


def evaluate_batch(batch, filters: Sequence[Sql92Expression], path: str = AUTO) -> list[FilterResult]:
    """Evaluate selectors over one batch (convenience for notebooks; jobs keep one Engine per task)."""
    return Engine(filters).evaluate(batch, path)
