"""The selector's syntax tree: small immutable nodes mirroring the Java expression objects RocketMQ builds.

The parser already applies RocketMQ's rewrites (BETWEEN → two comparisons, `<>` → NOT `=`, IS NULL → `= NULL`,
a bare property → boolean cast, AND/OR chains flattened: both are associative under Java's left-to-right
short-circuit), so evaluating this tree is evaluating what the broker evaluates. `pos` is the 0-based offset
of the node's operator or token in the source text (not part of equality).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal as TypingLiteral

# Java class of a literal: String, Integer, Long, Double, Boolean, or the null literal.
LiteralKind = TypingLiteral["string", "int", "long", "double", "bool", "null"]
CompareOp = TypingLiteral["=", ">", ">=", "<", "<="]
MatchOp = TypingLiteral["contains", "startswith", "endswith"]


@dataclass(frozen=True)
class Literal:
    """A constant (ConstantExpression / BooleanConstantExpression); `kind` is its Java class."""

    value: object
    kind: LiteralKind
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Property:
    """A message property reference (PropertyExpression): a String, or null when absent."""

    name: str
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Negate:
    """Unary minus: negates a number, gives null for anything else."""

    operand: Node
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Not:
    """Boolean NOT (null stays null)."""

    operand: Node
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class BoolCast:
    """A bare property used as a condition: null → null, any String → FALSE."""

    operand: Property
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class And:
    """Three-valued AND over two or more operands, evaluated left to right, stopping at the first FALSE."""

    operands: tuple[Node, ...]
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Or:
    """Three-valued OR over two or more operands, evaluated left to right, stopping at the first TRUE."""

    operands: tuple[Node, ...]
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Compare:
    """A ComparisonExpression: equality (`=`) or ordering, with Java's conversions between operand classes."""

    op: CompareOp
    left: Node
    right: Node
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class In:
    """`prop [NOT] IN ('a', ...)`: null for a missing property, even when negated."""

    operand: Property
    values: tuple[str, ...]
    negated: bool = False
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Match:
    """`x [NOT] CONTAINS|STARTSWITH|ENDSWITH 'text'` (5.1.3+): FALSE for null, non-strings and empty text."""

    op: MatchOp
    operand: Node
    search: str
    negated: bool = False
    pos: int = field(default=0, compare=False)


Node = Literal | Property | Negate | Not | BoolCast | And | Or | Compare | In | Match

BOOLEAN_NODES = (Not, BoolCast, And, Or, Compare, In, Match)


def is_boolean_expression(node: Node) -> bool:
    """True for what Java types as a BooleanExpression (conditions and the TRUE/FALSE/NULL literals)."""
    if isinstance(node, Literal):
        return node.kind in ("bool", "null")
    return isinstance(node, BOOLEAN_NODES)


def walk(node: Node):
    """Yield every node of the tree, depth first (iteratively, so deep trees are fine)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (And, Or)):
            stack.extend(reversed(n.operands))
        elif isinstance(n, Compare):
            stack.append(n.right)
            stack.append(n.left)
        elif isinstance(n, (Negate, Not, BoolCast, In, Match)):
            stack.append(n.operand)


def depth(node: Node) -> int:
    """Height of the tree (a lone leaf is 1), computed without recursion."""
    best = 0
    stack = [(node, 1)]
    while stack:
        n, d = stack.pop()
        best = max(best, d)
        if isinstance(n, (And, Or)):
            stack.extend((c, d + 1) for c in n.operands)
        elif isinstance(n, Compare):
            stack.append((n.left, d + 1))
            stack.append((n.right, d + 1))
        elif isinstance(n, (Negate, Not, BoolCast, In, Match)):
            stack.append((n.operand, d + 1))
    return best
