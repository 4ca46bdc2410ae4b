"""Fuse an AND/OR chain of simple property predicates into one generated Python function (the evaluator's
fast path: one call per chain instead of one per node, each property looked up once).

Simple predicates are IS [NOT] NULL, [NOT] IN, a bare property, `prop = 'text'` / `'text' = prop`, `prop op
numeric literal` and a BETWEEN on one property; anything else is called as its own compiled closure. The
generated code only names locals and bound constants (never text from the selector), and keeps Java's
left-to-right, short-circuit, three-valued semantics exactly (facts §6.2–§6.6).
"""

from __future__ import annotations

from collections.abc import Callable

from filterlib.sql92 import ast
from filterlib.sql92.javanum import (
    JavaNumberFormatError,
    double_value_of,
    integer_value_of,
    long_value_of,
    number_format_error,
)

_LITERAL_CLASS = {"int": "I", "long": "L", "double": "D"}
_PARSERS = {"I": integer_value_of, "L": long_value_of, "D": double_value_of}


def _raising(conv):
    """A converter that raises the RuntimeException(NumberFormatException) __compare throws."""

    def convert(v: str):
        try:
            return conv(v)
        except JavaNumberFormatError as e:
            raise number_format_error(e) from None
    return convert


_RAISING = {k: _raising(v) for k, v in _PARSERS.items()}


def _numeric_const(node: ast.Node):
    """(class, value) of a numeric literal or a negated one, else None."""
    sign = 1
    while isinstance(node, ast.Negate):
        sign, node = -sign, node.operand
    if isinstance(node, ast.Literal) and node.kind in _LITERAL_CLASS:
        return _LITERAL_CLASS[node.kind], sign * node.value
    return None


def _is_null_test(node: ast.Node) -> str | None:
    """The property name of `prop IS NULL`, else None."""
    if (isinstance(node, ast.Compare) and node.op == "=" and isinstance(node.left, ast.Property)
            and isinstance(node.right, ast.Literal) and node.right.kind == "null"):
        return node.left.name
    return None


class _Emitter:
    """Builds the source of one fused function; constants go into `env` under generated names."""

    def __init__(self, conjunction: bool):
        self.conj = conjunction
        self.lines: list[str] = []
        self.env: dict = {}
        self.props: dict[str, str] = {}
        self.n = 0

    def const(self, value) -> str:
        name = f"k{self.n}"
        self.n += 1
        self.env[name] = value
        return name

    def prop(self, name: str) -> str:
        """Local holding the property's value, looked up at its first use (top level, so it dominates the rest)."""
        if name not in self.props:
            var = f"v{len(self.props)}"
            self.props[name] = var
            self.lines.append(f"    {var} = g({self.const(name)})")
        return self.props[name]

    def decided(self) -> str:
        """Statement for an operand that decides the chain (FALSE for AND, TRUE for OR)."""
        return "return False" if self.conj else "return True"

    def glue_bool(self, cond: str) -> None:
        """Operand known to be a non-null boolean `cond`."""
        self.lines.append(f"    if not ({cond}):" if self.conj else f"    if {cond}:")
        self.lines.append(f"        {self.decided()}")

    def glue_nullable(self, var: str, none_value, cond_lines: list[str], cond: str) -> None:
        """Operand that is `none_value` when `var` is null, else boolean `cond` (after `cond_lines`)."""
        decisive = not self.conj
        self.lines.append(f"    if {var} is None:")
        if none_value is None:
            self.lines.append("        u = True")
        elif none_value is decisive:
            self.lines.append(f"        {self.decided()}")
        else:
            self.lines.append("        pass")
        self.lines.append("    else:")
        self.lines.extend("    " + line for line in cond_lines)
        self.lines.append(f"        if not ({cond}):" if self.conj else f"        if {cond}:")
        self.lines.append(f"            {self.decided()}")

    def glue_call(self, fn: Callable) -> None:
        """Operand compiled as its own closure."""
        f = self.const(fn)
        decisive = "False" if self.conj else "True"
        self.lines.append(f"    r = {f}(p)")
        self.lines.append(f"    if r is {decisive}:")
        self.lines.append(f"        {self.decided()}")
        self.lines.append("    if r is None:")
        self.lines.append("        u = True")

    def numeric(self, var: str, cls: str, op: str, value, none_value) -> None:
        """`prop op literal` (or literal op prop when none_value is False) with the literal's class parser."""
        cache = self.const(_PARSERS[cls].cache)
        conv = self.const(_RAISING[cls])
        k = self.const(value)
        pre = [f"    x = {cache}.get({var})", "    if x is None:", f"        x = {conv}({var})"]
        if cls == "D" and op in (">", ">="):
            cond = f"x {op} {k} or x != x"  # Double.compare puts NaN above everything
        else:
            cond = f"x {'==' if op == '=' else op} {k}"
        self.glue_nullable(var, none_value, pre, cond)

    def between(self, var: str, cls: str, lo, hi) -> None:
        """`prop >= lo AND prop <= hi` with one class (NaN fails <= hi, so the chained test is exact)."""
        cache = self.const(_PARSERS[cls].cache)
        conv = self.const(_RAISING[cls])
        klo, khi = self.const(lo), self.const(hi)
        pre = [f"    x = {cache}.get({var})", "    if x is None:", f"        x = {conv}({var})"]
        self.glue_nullable(var, None, pre, f"{klo} <= x <= {khi}")


def _between_pair(a: ast.Node, b: ast.Node):
    """(property, class, lo, hi) when a, b are `p >= lo`, `p <= hi` with numeric literals of one class."""
    if not (isinstance(a, ast.Compare) and isinstance(b, ast.Compare) and a.op == ">=" and b.op == "<="):
        return None
    if not (isinstance(a.left, ast.Property) and a.left == b.left):
        return None
    lo, hi = _numeric_const(a.right), _numeric_const(b.right)
    if lo is None or hi is None or lo[0] != hi[0]:
        return None
    return a.left.name, lo[0], lo[1], hi[1]


def _emit_operand(em: _Emitter, node: ast.Node, compile_child: Callable[[ast.Node], Callable]) -> None:
    """Emit one chain operand, inlined when it is a simple predicate."""
    name = _is_null_test(node)
    if name is not None:
        em.glue_bool(f"{em.prop(name)} is None")
        return
    if isinstance(node, ast.Not) and _is_null_test(node.operand) is not None:
        em.glue_bool(f"{em.prop(_is_null_test(node.operand))} is not None")
        return
    if isinstance(node, ast.In):
        var = em.prop(node.operand.name)
        values = em.const(frozenset(node.values))
        em.glue_nullable(var, None, [], f"{var} {'not in' if node.negated else 'in'} {values}")
        return
    if isinstance(node, ast.BoolCast):
        var = em.prop(node.operand.name)
        em.glue_nullable(var, None, [], "False")
        return
    if isinstance(node, ast.Compare):
        left, right = node.left, node.right
        if isinstance(left, ast.Property) and isinstance(right, ast.Literal) and right.kind == "string" \
                and node.op == "=":
            var = em.prop(left.name)
            em.glue_nullable(var, None, [], f"{var} == {em.const(right.value)}")
            return
        if isinstance(right, ast.Property) and isinstance(left, ast.Literal) and left.kind == "string" \
                and node.op == "=":
            var = em.prop(right.name)
            em.glue_nullable(var, False, [], f"{var} == {em.const(left.value)}")
            return
        if isinstance(left, ast.Property) and _numeric_const(right) is not None:
            cls, value = _numeric_const(right)
            em.numeric(em.prop(left.name), cls, node.op, value, None)
            return
        if isinstance(right, ast.Property) and node.op == "=" and _numeric_const(left) is not None:
            cls, value = _numeric_const(left)
            em.numeric(em.prop(right.name), cls, "=", value, False)
            return
    em.glue_call(compile_child(node))


def fuse_chain(node: ast.And | ast.Or, compile_child: Callable[[ast.Node], Callable]) -> Callable:
    """One generated function evaluating an AND/OR chain with Java's three-valued short-circuit semantics."""
    em = _Emitter(isinstance(node, ast.And))
    ops = node.operands
    i = 0
    while i < len(ops):
        pair = _between_pair(ops[i], ops[i + 1]) if em.conj and i + 1 < len(ops) else None
        if pair is not None:
            name, cls, lo, hi = pair
            em.between(em.prop(name), cls, lo, hi)
            i += 2
            continue
        _emit_operand(em, ops[i], compile_child)
        i += 1
    end = "True" if em.conj else "False"
    body = ["def fused(p):", "    g = p.get", "    u = False", *em.lines, f"    return None if u else {end}"]
    namespace = dict(em.env)
    exec(compile("\n".join(body), "<sql92-fused>", "exec"), namespace)  # noqa: S102 (only generated names)
    return namespace["fused"]
