"""Every selector of an Engine in one compiled pass over the rows: the AND / OR / NOT above the leaves run as a
small stack program per selector, the leaves read from their per-value tables by each row's code.

The kernel backend (`kernels.evaluate_node`) spreads every leaf to a vector of rows and combines the vectors one
numpy pass per operator, a few passes over the batch per selector; with hundreds of selectors that is most of the
time. Here a selector costs a table read per leaf and row, in numba loops without allocations. The leaves are the
kernel backend's own (`kernels.leaf`) and the operators its lookup tables (`kernels._AND`, `_OR`, `_NOT`), which
keep an AND's FALSE or error (an OR's TRUE or error) whatever its later operands answer, as Java's short-circuit
does: every state equals the interpreter's. The errors' texts are not carried (`Engine.evaluate` asks the kernel
backend for them where a state is ERROR).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from filterlib.engine.kernels import _AND, _NOT, _OR, BatchContext, Entries, Vec, equality, leaf
from filterlib.kernel_cache import njit
from filterlib.sql92 import ast

LEAF, LEAF_AND, LEAF_OR, AND, OR, NOT = range(6)
"""The program's operations: push a leaf's states; combine the top with a leaf's states by AND (OR); combine the top
two by AND (OR); negate the top."""


@dataclass(frozen=True)
class Program:
    """Selectors compiled to operations (`ops`, `args`; selector s runs ops[starts[s]:starts[s + 1]]) over the
    distinct leaves they name (`leaves`, the nodes `kernels.leaf` evaluates once per batch)."""

    ops: np.ndarray
    args: np.ndarray
    starts: np.ndarray
    leaves: tuple[ast.Node, ...]
    depth: int
    texts: dict[str, list[str]]
    """Per property, the texts its equality and IN leaves look for (found in one pass a batch: `Column.codes_of`)."""

    @classmethod
    def of(cls, trees: Sequence[ast.Node]) -> Program:
        """The program of these selectors' trees."""
        ops: list[int] = []
        args: list[int] = []
        index: dict[ast.Node, int] = {}
        starts = [0]
        depth = 1

        def emit(node: ast.Node, height: int) -> None:
            nonlocal depth
            depth = max(depth, height + 1)
            if isinstance(node, (ast.And, ast.Or)):
                conjunction = isinstance(node, ast.And)
                first, *rest = _operands(node)
                emit(first, height)
                for operand in rest:
                    if _is_leaf(operand):
                        ops.append(LEAF_AND if conjunction else LEAF_OR)
                        args.append(index.setdefault(operand, len(index)))
                    else:
                        emit(operand, height + 1)
                        ops.append(AND if conjunction else OR)
                        args.append(0)
            elif not _is_leaf(node):  # a NOT above an AND / OR
                emit(node.operand, height)
                ops.append(NOT)
                args.append(0)
            else:
                ops.append(LEAF)
                args.append(index.setdefault(node, len(index)))

        for tree in trees:
            emit(tree, 0)
            starts.append(len(ops))
        texts: dict[str, list[str]] = {}
        for node in index:
            while isinstance(node, ast.Not):
                node = node.operand
            eq = equality(node)
            if eq is not None:
                texts.setdefault(eq[0], []).extend(eq[1])
        return cls(np.asarray(ops, dtype=np.int8), np.asarray(args, dtype=np.int32),
                   np.asarray(starts, dtype=np.int64), tuple(index), depth, texts)

    def states(self, ctx: BatchContext) -> np.ndarray:
        """(selectors, rows) int8: each selector's state per row of the batch (FALSE, TRUE, NULL or ERROR)."""
        for name, wanted in self.texts.items():
            ctx.column(name).codes_of(wanted)
        names: dict[str, int] = {}
        refs = np.zeros(len(self.leaves), dtype=np.int32)
        offsets = np.zeros(len(self.leaves), dtype=np.int64)
        missing = np.zeros(len(self.leaves), dtype=np.int32)
        tables: list[np.ndarray] = []
        rows = None
        at = 0
        for i, node in enumerate(self.leaves):
            v = _leaf(ctx, node)
            if isinstance(v, Entries):
                refs[i] = names.setdefault(v.name, len(names))
            else:  # a state per row: a table over the row numbers
                refs[i] = names.setdefault(rows := rows or _ROWS, len(names))
            offsets[i] = at
            missing[i] = len(v.state) - 1
            tables.append(v.state)
            at += len(v.state)
        codes = np.empty((len(names), ctx.n), dtype=np.int32)
        for name, r in names.items():
            codes[r] = np.arange(ctx.n, dtype=np.int32) if name is _ROWS else ctx.column(name).codes
        out = np.empty((len(self.starts) - 1, ctx.n), dtype=np.int8)
        _run(self.ops, self.args, self.starts, codes, refs, offsets, missing,
             np.concatenate(tables) if tables else np.zeros(0, np.int8), _AND, _OR, _NOT,
             np.empty((self.depth, ctx.n), dtype=np.int8), out)
        return out


_ROWS = object()
"""The codes of a leaf held per row (no per-value table): the row numbers."""


def _is_leaf(node: ast.Node) -> bool:
    """A node the program reads as one leaf: no AND / OR, a NOT only above a leaf (its table negated)."""
    if isinstance(node, ast.Not):
        return _is_leaf(node.operand)
    return not isinstance(node, (ast.And, ast.Or))


def _operands(node: ast.And | ast.Or) -> list[ast.Node]:
    """An AND's (OR's) operands with those of the ANDs (ORs) among them in their place: its value is the first
    FALSE (TRUE) or error in that order, else NULL if any is NULL, which no grouping changes."""
    out: list[ast.Node] = []
    for operand in node.operands:
        out.extend(_operands(operand) if type(operand) is type(node) else [operand])
    return out


def _leaf(ctx: BatchContext, node: ast.Node) -> Entries | Vec:
    """A leaf's states over the batch (`kernels.leaf`), a NOT above one by its negated table."""
    if isinstance(node, ast.Not):
        v = _leaf(ctx, node.operand)
        if isinstance(v, Entries):
            return Entries(v.name, _NOT[v.state], v.err, v.errors)
        return Vec(_NOT[v.state], v.err_index, v.errors)
    return leaf(ctx, node)


@njit(cache=True)
def _leaf_into(dst, lut, a, codes, refs, offsets, missing, tables):
    """dst = leaf a's states (lut None), or lut[(dst << 2) | leaf a's states]: its table's entry at each row's code
    of its property (-1: the missing state, last)."""
    row = codes[refs[a]]
    m = missing[a]
    table = tables[offsets[a]:offsets[a] + m + 1]
    if lut is None:
        for i in range(len(dst)):
            c = row[i]
            dst[i] = table[c if c >= 0 else m]
    else:
        for i in range(len(dst)):
            c = row[i]
            dst[i] = lut[(dst[i] << 2) | table[c if c >= 0 else m]]


@njit(cache=True)
def _combine_rows(dst, src, lut):
    for i in range(len(dst)):
        dst[i] = lut[(dst[i] << 2) | src[i]]


@njit(cache=True)
def _negate(dst, lut):
    for i in range(len(dst)):
        dst[i] = lut[dst[i]]


@njit(cache=True)
def _run(ops, args, starts, codes, refs, offsets, missing, tables, and_lut, or_lut, not_lut, stack, out):
    """out[s]: selector s's states, its operations run in turn over every row (a leaf read from its table, which
    stays in cache over the pass), the stack holding a row of states per level. Every operand is read (no row skips
    one): the lookup tables keep an AND's FALSE or error (an OR's TRUE or error) whatever follows, which is Java's
    short-circuit without its branches."""
    for s in range(len(starts) - 1):
        first, last = starts[s], starts[s + 1]
        top = -1
        for p in range(first, last):
            op = ops[p]
            a = args[p]
            if op == LEAF:
                top += 1
                _leaf_into(stack[top], None, a, codes, refs, offsets, missing, tables)
            elif op == LEAF_AND:
                _leaf_into(stack[top], and_lut, a, codes, refs, offsets, missing, tables)
            elif op == LEAF_OR:
                _leaf_into(stack[top], or_lut, a, codes, refs, offsets, missing, tables)
            elif op == AND:
                top -= 1
                _combine_rows(stack[top], stack[top + 1], and_lut)
            elif op == OR:
                top -= 1
                _combine_rows(stack[top], stack[top + 1], or_lut)
            else:
                _negate(stack[top], not_lut)
        out[s] = stack[0]
