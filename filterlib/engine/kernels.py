"""The kernel backend: the selector's AST evaluated over whole columns, for properties with many distinct values.

Leaf predicates that name one property (IS NULL, IN, `prop = 'text'`, `prop op number`, CONTAINS & co., a bare
property) are decided once per distinct value of that property — numbers parsed with Java's rules by
`numbers.parse_numbers` — and spread to the rows by code; AND / OR / NOT combine the per-row states with Java's
left-to-right, three-valued, short-circuit rules (an operand's error counts only where no earlier operand
decided). Any other node is evaluated per distinct tuple of the properties it names by the interpreter's own
closure (`table`), so every shape of the grammar is covered and the answers, errors included, are the
interpreter's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.engine.columns import Column
from filterlib.engine.numbers import Parsed, compare_states, parse_numbers
from filterlib.engine.results import ERROR, FALSE, NULL, TRUE
from filterlib.engine.table import distinct_tuples, evaluate_maps, tuple_maps
from filterlib.errors import FilterEvaluationError
from filterlib.kernel_cache import njit
from filterlib.sql92 import ast
from filterlib.sql92.evaluate import _NO_CONST, _Compiler, compile_tree
from filterlib.sql92.javanum import JavaNumberFormatError, number_format_error

_NOT = np.array([TRUE, FALSE, NULL, ERROR], dtype=np.int8)
_NUMERIC = ("I", "L", "D")
_FLIP = {"=": "=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}
_EMPTY_COLUMN_VALUES = pa.array([], pa.string())


@dataclass
class Vec:
    """A boolean node's answer per row: state (int8) and, where ERROR, an index into `errors`."""

    state: np.ndarray
    err_index: np.ndarray | None
    errors: list[FilterEvaluationError]


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)


class BatchContext:
    """One batch's property columns and everything derived from them that several filters share."""

    def __init__(self, columns: dict[str, Column], n: int, closures: dict | None = None):
        self.columns = columns
        self.n = n
        self.closures = {} if closures is None else closures
        self._tuples: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._maps: dict[tuple[str, ...], list[dict[str, str]]] = {}
        self._parsed: dict[tuple[str, str], tuple[Parsed, np.ndarray, list]] = {}
        self._memo: dict[ast.Node, Entries | Vec] = {}
        self._rows: dict[ast.Node, Vec] = {}

    def column(self, name: str) -> Column:
        col = self.columns.get(name)
        if col is None:
            col = self.columns[name] = Column(np.full(self.n, -1, dtype=np.int32), _EMPTY_COLUMN_VALUES)
        return col

    def tuples(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(inverse, tuples) of the distinct value tuples of these properties (cached per batch)."""
        hit = self._tuples.get(names)
        if hit is None:
            hit = self._tuples[names] = distinct_tuples([self.column(x) for x in names], self.n)
        return hit

    def maps(self, names: tuple[str, ...]) -> list[dict[str, str]]:
        hit = self._maps.get(names)
        if hit is None:
            hit = self._maps[names] = tuple_maps(names, [self.column(x) for x in names], self.tuples(names)[1])
        return hit

    def parsed(self, name: str, kind: str) -> tuple[Parsed, np.ndarray, list]:
        """A column's distinct values parsed as `kind`, with per-entry error indices and the errors."""
        key = (name, kind)
        hit = self._parsed.get(key)
        if hit is None:
            col = self.column(name)
            p = parse_numbers(col.values, kind, col._pylist)
            err_index = np.zeros(len(p.ok), dtype=np.int32)
            errors = []
            for i, msg in p.errors.items():
                err_index[i] = len(errors)
                errors.append(number_format_error(JavaNumberFormatError(msg)))
            hit = self._parsed[key] = (p, err_index, errors)
        return hit

    def closure(self, node: ast.Node) -> Callable:
        fn = self.closures.get(node)
        if fn is None:
            fn = self.closures[node] = compile_tree(node)
        return fn


def by_tuples(ctx: BatchContext, fn: Callable, names: tuple[str, ...]) -> Vec:
    """Evaluate an interpreter closure once per distinct tuple of `names` and spread it to the rows."""
    inverse, _ = ctx.tuples(names)
    state, err, errors = evaluate_maps(fn, ctx.maps(names))
    return Vec(state[inverse], None if err is None else err[inverse], errors)


@dataclass
class Entries:
    """A leaf decided once per distinct value of one property: its state per dictionary entry, then the state of a
    row without the property (cardinality + 1 states); where ERROR, `err` indexes `errors`."""

    name: str
    state: np.ndarray
    err: np.ndarray | None
    errors: list[FilterEvaluationError]


def _entries(name: str, col: Column, entry_state: np.ndarray, missing_state: int, entry_err: np.ndarray | None = None,
             errors: list | None = None) -> Entries:
    """Per-entry states plus the state of a missing property, as one table indexed by code (-1: the last)."""
    d = len(entry_state)
    if d != col.cardinality:
        raise ValueError(f"{d} entry states for a column of {col.cardinality} values")
    ext = np.empty(d + 1, dtype=np.int8)
    ext[:d] = entry_state
    ext[d] = missing_state
    return _with_errors(name, ext, entry_err, errors)


def _with_errors(name: str, table: np.ndarray, entry_err: np.ndarray | None, errors: list | None) -> Entries:
    """Entries of a whole table (missing state last), with the per-entry error indices when there are errors."""
    if not errors:
        return Entries(name, table, None, [])
    err = np.zeros(len(table), dtype=np.int32)
    err[:-1] = entry_err
    return Entries(name, table, err, errors)


def spread(ctx: BatchContext, e: Entries) -> Vec:
    """A leaf's per-entry states to per-row states by its column's codes."""
    codes = ctx.column(e.name).codes
    return Vec(e.state[codes], None if e.err is None else e.err[codes], e.errors)


def _bools(mask: np.ndarray, negate: bool = False) -> np.ndarray:
    return (np.asarray(mask, dtype=bool) ^ negate).astype(np.int8)


def _arrow_bools(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.fill_null(False), dtype=bool)


def _const(node: ast.Node) -> tuple[str, object] | None:
    """(Java class, value) of a numeric constant node (a literal or a negated one), else None."""
    if not isinstance(node, (ast.Literal, ast.Negate)):
        return None
    _, kind, const = _Compiler().value(node)
    if const is _NO_CONST or kind not in _NUMERIC:
        return None
    return kind, const


def _is_null_test(node: ast.Node) -> str | None:
    if (isinstance(node, ast.Compare) and node.op == "=" and isinstance(node.left, ast.Property)
            and isinstance(node.right, ast.Literal) and node.right.kind == "null"):
        return node.left.name
    return None


def _numeric(ctx: BatchContext, name: str, op: str, kind: str, const, missing_state: int) -> Entries:
    """`prop op const` with the property parsed by the constant's Java class."""
    p, err_index, errors = ctx.parsed(name, kind)
    d = len(p.ok)
    table = np.empty(d + 1, dtype=np.int8)
    compare_states(p, op, const, ERROR, table)
    table[d] = missing_state
    return _with_errors(name, table, err_index, errors)


def equality(node: ast.Node) -> tuple[str, list[str], bool, int] | None:
    """(property, wanted texts, negated, state where the property is absent) of an IN leaf or of a property's
    equality with a text, else None. A text holding a lone surrogate is never wanted: a stored value holds none."""
    if isinstance(node, ast.In):
        return node.operand.name, [v for v in node.values if not _has_surrogate(v)], node.negated, NULL
    if isinstance(node, ast.Compare) and node.op == "=":
        for prop, text, missing_state in ((node.left, node.right, NULL), (node.right, node.left, FALSE)):
            if isinstance(prop, ast.Property) and isinstance(text, ast.Literal) and text.kind == "string" \
                    and not _has_surrogate(text.value):
                return prop.name, [text.value], False, missing_state
    return None


def _equals(name: str, col: Column, wanted: list[str], negated: bool, missing_state: int) -> Entries:
    """`prop [NOT] IN (wanted)` (or `= 'text'`, a list of one) per value: TRUE where a value is wanted (FALSE when
    negated), else the opposite; `missing_state` where the property is absent."""
    d = col.cardinality
    table = np.full(d + 1, TRUE if negated else FALSE, dtype=np.int8)
    for codes in col.codes_of(wanted).values():
        table[codes] = FALSE if negated else TRUE
    table[d] = missing_state
    return Entries(name, table, None, [])


def _leaf(ctx: BatchContext, node: ast.Node) -> Entries | Vec | None:
    """A vectorised leaf predicate: its states per distinct value of its property (Entries) or per row (a constant
    Vec), or None when the node has no kernel of its own."""
    name = _is_null_test(node)
    if name is not None:
        col = ctx.column(name)
        return _entries(name, col, np.zeros(col.cardinality, dtype=np.int8), TRUE)
    if isinstance(node, ast.BoolCast):
        name = node.operand.name
        col = ctx.column(name)
        return _entries(name, col, np.zeros(col.cardinality, dtype=np.int8), NULL)
    eq = equality(node)
    if eq is not None:
        name, wanted, negated, missing_state = eq
        return _equals(name, ctx.column(name), wanted, negated, missing_state)
    if isinstance(node, ast.Match):
        if not node.search:
            return Vec(np.zeros(ctx.n, dtype=np.int8), None, [])
        if not isinstance(node.operand, ast.Property) or _has_surrogate(node.search):
            return None
        name = node.operand.name
        col = ctx.column(name)
        fn = {"contains": pc.match_substring, "startswith": pc.starts_with, "endswith": pc.ends_with}[node.op]
        return _entries(name, col, _bools(_arrow_bools(fn(col.values, node.search)), node.negated), FALSE)
    if isinstance(node, ast.Compare):
        left, right = node.left, node.right
        if isinstance(left, ast.Property):
            c = _const(right)
            if c is not None:
                return _numeric(ctx, left.name, node.op, c[0], c[1], NULL)
        if isinstance(right, ast.Property):
            c = _const(left)
            if c is not None:
                return _numeric(ctx, right.name, _FLIP[node.op], c[0], c[1], FALSE if node.op == "=" else NULL)
    return None


def leaf(ctx: BatchContext, node: ast.Node) -> Entries | Vec:
    """A node that is no AND / OR / NOT, once per batch (filters share their predicates): per distinct value of its
    property where it names one property and has a kernel, else per row (a node without a kernel: by the
    interpreter's closure once per distinct tuple of the properties it names)."""
    hit = ctx._memo.get(node)
    if hit is not None:
        return hit
    v = _leaf(ctx, node)
    if v is None:
        names = tuple(sorted({x.name for x in ast.walk(node) if isinstance(x, ast.Property)}))
        v = by_tuples(ctx, ctx.closure(node), names)
    ctx._memo[node] = v
    return v


def _chain_table(conjunction: bool) -> np.ndarray:
    """LUT[(acc << 2) | operand] for AND (or OR): an accumulated FALSE (TRUE) or ERROR is final; otherwise the
    operand's FALSE (TRUE) or ERROR decides, its NULL makes the result NULL, and its TRUE (FALSE) keeps it."""
    decisive, neutral = (FALSE, TRUE) if conjunction else (TRUE, FALSE)
    lut = np.empty(16, dtype=np.int8)
    for acc in (FALSE, TRUE, NULL, ERROR):
        for v in (FALSE, TRUE, NULL, ERROR):
            if acc in (decisive, ERROR):
                r = acc
            elif v in (decisive, ERROR, NULL):
                r = v
            else:
                r = acc if v == neutral else v
            lut[(acc << 2) | v] = r
    return lut


_AND, _OR = _chain_table(True), _chain_table(False)
_OPEN_AND = np.array([False, True, True, False])
_OPEN_OR = np.array([True, False, True, False])


@njit(cache=True)
def _combine(acc, state, lut, still_open):
    """acc = lut[(acc << 2) | state] in place; whether any row is still undecided."""
    open_rows = False
    for i in range(len(acc)):
        r = lut[(acc[i] << 2) | state[i]]
        acc[i] = r
        if still_open[r]:
            open_rows = True
    return open_rows


def _chain(ctx: BatchContext, operands: Sequence[ast.Node], conjunction: bool) -> Vec:
    """AND / OR over operands left to right: the first deciding operand (FALSE / TRUE) or error wins per row,
    else NULL if any operand was NULL; later operands are not evaluated once every row is decided."""
    lut = _AND if conjunction else _OR
    still_open = _OPEN_AND if conjunction else _OPEN_OR
    first = evaluate_node(ctx, operands[0])
    acc = first.state.copy()
    err_index = None if first.err_index is None else first.err_index.copy()
    errors = list(first.errors)
    open_rows = bool(still_open[acc].any())
    for operand in operands[1:]:
        if not open_rows:
            break
        v = evaluate_node(ctx, operand)
        fresh = None
        if v.errors:
            fresh = (v.state == ERROR) & still_open[acc]
        open_rows = _combine(acc, v.state, lut, still_open)
        if fresh is not None and fresh.any():
            if err_index is None:
                err_index = np.zeros(ctx.n, dtype=np.int32)
            err_index[fresh] = v.err_index[fresh] + len(errors)
            errors.extend(v.errors)
    return Vec(acc, err_index, errors)


def evaluate_node(ctx: BatchContext, node: ast.Node) -> Vec:
    """Any boolean node over the batch. Leaves are memoised per batch (filters share their predicates); the
    AND / OR / NOT above them are not, so a batch holds one vector per distinct predicate, not per node."""
    if isinstance(node, ast.And):
        return _chain(ctx, node.operands, True)
    if isinstance(node, ast.Or):
        return _chain(ctx, node.operands, False)
    if isinstance(node, ast.Not):
        inner = evaluate_node(ctx, node.operand)
        return Vec(_NOT[inner.state], inner.err_index, inner.errors)
    hit = ctx._rows.get(node)
    if hit is None:
        v = leaf(ctx, node)
        hit = ctx._rows[node] = spread(ctx, v) if isinstance(v, Entries) else v
    return hit
