"""The set-at-a-time SQL92 engine: every compiled selector over a whole Arrow batch at once.

`Engine(filters).evaluate(batch)` extracts the properties the filters name once, then decides per filter, from
the batch's measured cardinality, between the decision table (few distinct tuples of the named properties: the
interpreter runs once per tuple) and the kernels (many: vectorised leaves over distinct values). Both give, for
every (row, filter), the interpreter's exact answer — TRUE, FALSE, NULL or its FilterEvaluationError — and the
caller never needs to know which path ran.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from filterlib.engine.columns import Column, extract_properties
from filterlib.engine.kernels import BatchContext, Vec, by_tuples, evaluate_node
from filterlib.engine.results import KERNEL, TABLE, FilterResult
from filterlib.sql92.expression import Sql92Expression

AUTO = "auto"
PATHS = (AUTO, TABLE, KERNEL)
PROPERTIES = "properties"


def table_threshold(n: int) -> int:
    """Most distinct tuples for which the decision table beats the kernels (one interpreter call per tuple)."""
    return 64 + n // 16


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

    def context(self, batch, columns: dict[str, Column] | None = None) -> BatchContext:
        """The batch's shared state: the named properties as columns (extracted unless given)."""
        props = properties_of(batch)
        if columns is None:
            columns = extract_properties(props, self.names)
        return BatchContext(dict(columns), len(props), self._closures)

    def evaluate(self, batch, path: str = AUTO, columns: dict[str, Column] | None = None) -> list[FilterResult]:
        """One FilterResult per filter, in order; `path` forces the table or the kernels (tests, benchmarks)."""
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, not {path!r}")
        ctx = self.context(batch, columns)
        return [self._one(ctx, f, names, path) for f, names in zip(self.filters, self._names_of, strict=True)]

    def _one(self, ctx: BatchContext, f: Sql92Expression, names: tuple[str, ...], path: str) -> FilterResult:
        chosen = path
        if path == AUTO:
            limit = table_threshold(ctx.n)
            chosen = TABLE if ctx.distinct_count(names, limit) <= limit else KERNEL
        if chosen == TABLE:
            v = by_tuples(ctx, f._fn, names)
        else:
            v = evaluate_node(ctx, f.ast)
        return _result(v, chosen)


def _result(v: Vec, path: str) -> FilterResult:
    return FilterResult(np.ascontiguousarray(v.state), v.err_index, v.errors, path)


def evaluate_batch(batch, filters: Sequence[Sql92Expression], path: str = AUTO) -> list[FilterResult]:
    """Evaluate selectors over one batch (convenience for notebooks; jobs keep one Engine per task)."""
    return Engine(filters).evaluate(batch, path)
