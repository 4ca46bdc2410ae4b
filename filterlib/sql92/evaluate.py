"""Compile a selector AST into Python closures that evaluate it exactly as RocketMQ's Java objects do.

Every operand's Java class is static in this language (a property is a String or null, a literal's class is
fixed, a negation keeps its operand's number class, a condition is a Boolean or null), so each comparison is
specialised at compile time for its pair of classes, the frequent shapes (property vs literal, IS [NOT] NULL, IN)
get dedicated closures, and AND/OR chains are fused into one generated function (`fused`). Evaluation is then
a few calls per message, with memoised number parsing (`javanum`).
Semantics: facts §6 and ComparisonExpression.__compare.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

from filterlib.errors import FilterEvaluationError
from filterlib.sql92 import ast
from filterlib.sql92.fused import fuse_chain
from filterlib.sql92.javanum import (
    JavaNumberFormatError,
    boolean_value_of,
    double_compare,
    double_value_of,
    integer_value_of,
    long_value_of,
    number_format_error,
)

Evaluator = Callable[[Mapping[str, str]], object]

# Static Java classes: S = String or null (a property), C = String literal, I = Integer, L = Long, D = Double,
# B = Boolean or null (a condition or TRUE/FALSE), N = always null.
_STRINGS = ("S", "C")
_INTEGRAL = ("I", "L")
_NUMBERS = ("I", "L", "D")
LITERAL_CLASS = {"string": "C", "int": "I", "long": "L", "double": "D", "bool": "B", "null": "N"}

_NO_CONST = object()


def _cce(left: str, right: str) -> FilterEvaluationError:
    """The ClassCastException __compare throws for a Boolean left operand and a String right one."""
    return FilterEvaluationError(
        f"class java.lang.{left} cannot be cast to class java.lang.{right} (java.lang.{left} and "
        f"java.lang.{right} are in module java.base of loader 'bootstrap')", "ClassCastException")


def _string_order_error(lv: str, rv: str) -> FilterEvaluationError:
    """What ComparisonExpression.evaluate throws when two strings do not both parse as doubles."""
    return FilterEvaluationError(f"It's illegal to compare string by '>=', '>', '<', '<='. lv={lv}, rv={rv}",
                                 "RuntimeException", "NumberFormatException")


def _parser_for(kind: str):
    """The Java parser a String is converted with when the other operand has this class."""
    return {"I": integer_value_of, "L": long_value_of, "D": double_value_of, "B": boolean_value_of}[kind]


def _cmp_int(x: int, y: int) -> int:
    """Integer/Long compareTo."""
    return (x > y) - (x < y)


def _bool_cmp(x: bool, y: bool) -> int:
    """Boolean.compareTo (false < true)."""
    return (x > y) - (x < y)


def make_java_compare(lk: str, rk: str) -> Callable[[object, object], int] | None:
    """__compare(lv, rv) for non-null values of static classes lk, rk; None where Java answers -1 without looking."""
    if lk in _STRINGS and rk in _STRINGS:
        return lambda lv, rv: 0 if lv == rv else (1 if lv > rv else -1)
    if lk == "B" and rk in _STRINGS:
        def boolean_vs_string(lv, rv):
            raise _cce("Boolean", "String")
        return boolean_vs_string
    if lk in _STRINGS and rk in ("I", "L", "D", "B"):
        conv = _parser_for(rk)
        base = make_java_compare(rk, rk)

        def string_vs_other(lv, rv):
            try:
                x = conv(lv)
            except JavaNumberFormatError as e:
                raise number_format_error(e) from None
            return base(x, rv)
        return string_vs_other
    if lk in _NUMBERS and rk in _STRINGS:
        conv = _parser_for(lk)
        base = make_java_compare(lk, lk)

        def other_vs_string(lv, rv):
            try:
                y = conv(rv)
            except JavaNumberFormatError as e:
                raise number_format_error(e) from None
            return base(lv, y)
        return other_vs_string
    if lk in _INTEGRAL and rk in _INTEGRAL:
        return _cmp_int
    if lk == "D" and rk == "D":
        return double_compare
    if lk == "D" and rk in _INTEGRAL:
        return lambda lv, rv: double_compare(lv, float(rv))
    if lk in _INTEGRAL and rk == "D":
        return lambda lv, rv: double_compare(float(lv), rv)
    if lk == "B" and rk == "B":
        return _bool_cmp
    return None  # Boolean vs number either way: "incomparable", -1


_ORDER_TEST = {
    "=": lambda c: c == 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


class _Compiler:
    """Turns AST nodes into (closure, static class, constant-or-_NO_CONST)."""

    def value(self, node: ast.Node) -> tuple[Evaluator, str, object]:
        """Compile any node."""
        method = getattr(self, "_" + type(node).__name__.lower())
        return method(node)

    def condition(self, node: ast.Node) -> Evaluator:
        """Compile a node that yields True, False or None."""
        return self.value(node)[0]

    # -- leaves ------------------------------------------------------------------------------------------------

    def _literal(self, node: ast.Literal):
        v = node.value
        return (lambda p: v), LITERAL_CLASS[node.kind], v

    def _property(self, node: ast.Property):
        name = node.name
        return (lambda p: p.get(name)), "S", _NO_CONST

    def _negate(self, node: ast.Negate):
        fn, kind, const = self.value(node.operand)
        if kind in _NUMBERS:
            if const is not _NO_CONST:
                c = -const
                return (lambda p: c), kind, c
            return (lambda p: -fn(p)), kind, _NO_CONST
        if isinstance(node.operand, (ast.Literal, ast.Property)):
            return (lambda p: None), "N", None

        def negate_non_number(p):
            fn(p)
            return None
        return negate_non_number, "N", _NO_CONST

    # -- conditions ----------------------------------------------------------------------------------------------

    def _boolcast(self, node: ast.BoolCast):
        name = node.operand.name

        def bool_cast(p):
            return None if p.get(name) is None else False
        return bool_cast, "B", _NO_CONST

    def _not(self, node: ast.Not):
        inner = node.operand
        if (isinstance(inner, ast.Compare) and inner.op == "=" and isinstance(inner.left, ast.Property)
                and isinstance(inner.right, ast.Literal) and inner.right.kind == "null"):
            name = inner.left.name
            return (lambda p: p.get(name) is not None), "B", _NO_CONST
        fn = self.condition(inner)

        def not_(p):
            v = fn(p)
            return None if v is None else not v
        return not_, "B", _NO_CONST

    def _and(self, node: ast.And):
        return fuse_chain(node, self.condition), "B", _NO_CONST

    def _or(self, node: ast.Or):
        return fuse_chain(node, self.condition), "B", _NO_CONST

    def _in(self, node: ast.In):
        name = node.operand.name
        values = frozenset(node.values)
        if node.negated:
            def not_in(p):
                v = p.get(name)
                return None if v is None else v not in values
            return not_in, "B", _NO_CONST

        def in_(p):
            v = p.get(name)
            return None if v is None else v in values
        return in_, "B", _NO_CONST

    def _match(self, node: ast.Match):
        search = node.search
        negated = node.negated
        if not search:
            return (lambda p: False), "B", False
        fn, kind, _ = self.value(node.operand)
        if kind not in _STRINGS:
            def match_non_string(p):
                fn(p)
                return False
            return match_non_string, "B", _NO_CONST
        test = _match_test(node.op, search)

        def match(p):
            v = fn(p)
            if v is None:
                return False
            return test(v) is not negated
        return match, "B", _NO_CONST

    def _compare(self, node: ast.Compare):
        lf, lk, lc = self.value(node.left)
        rf, rk, rc = self.value(node.right)
        if node.op == "=":
            special = _equality_special(node, lk, lc, rk, rc)
            if special is not None:
                return special, "B", _NO_CONST
            return _equality(lf, lk, rf, rk), "B", _NO_CONST
        special = _ordering_special(node, lk, rk, rc)
        if special is not None:
            return special, "B", _NO_CONST
        return _ordering(node.op, lf, lk, rf, rk), "B", _NO_CONST


def _match_test(op: str, search: str) -> Callable[[str], bool]:
    """contains/startsWith/endsWith on UTF-16 code units (differs from code points only for lone surrogates)."""
    if any("\ud800" <= ch <= "\udfff" for ch in search):
        needle = search.encode("utf-16-le", "surrogatepass")

        def u16(v: str) -> bytes:
            return v.encode("utf-16-le", "surrogatepass")
        if op == "startswith":
            return lambda v: u16(v).startswith(needle)
        if op == "endswith":
            return lambda v: u16(v).endswith(needle)

        def contains(v: str) -> bool:
            hay = u16(v)
            i = hay.find(needle)
            while i > 0 and i % 2:
                i = hay.find(needle, i + 1)
            return i != -1
        return contains
    if op == "startswith":
        return lambda v: v.startswith(search)
    if op == "endswith":
        return lambda v: v.endswith(search)
    return lambda v: search in v


def _equality(lf: Evaluator, lk: str, rf: Evaluator, rk: str) -> Evaluator:
    """doCreateEqual's evaluate, for any pair of static classes."""
    if lk == "N" or rk == "N":
        def eq_with_null(p):
            lv = lf(p)
            rv = rf(p)
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return eq_with_null
    cmp = make_java_compare(lk, rk)

    def eq(p):
        lv = lf(p)
        rv = rf(p)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        if cmp is None:
            return False
        return cmp(lv, rv) == 0
    return eq


def _ordering(op: str, lf: Evaluator, lk: str, rf: Evaluator, rk: str) -> Evaluator:
    """ComparisonExpression.evaluate for >, >=, <, <=, for any pair of static classes."""
    test = _ORDER_TEST[op]
    if lk in _STRINGS and rk in _STRINGS:
        def order_strings(p):
            lv = lf(p)
            if lv is None:
                return None
            rv = rf(p)
            if rv is None:
                return None
            try:
                x = double_value_of(lv)
                y = double_value_of(rv)
            except JavaNumberFormatError:
                raise _string_order_error(lv, rv) from None
            return test(double_compare(x, y))
        return order_strings
    if lk == "N" or rk == "N":
        def order_with_null(p):
            if lf(p) is None:
                return None
            rf(p)
            return None
        return order_with_null
    cmp = make_java_compare(lk, rk)

    def order(p):
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        return test(-1 if cmp is None else cmp(lv, rv))
    return order


def _converter(kind: str):
    """(memo dict, parse function) for converting a property String against a literal of this class."""
    conv = _parser_for(kind)
    return getattr(conv, "cache", None), conv


def _equality_special(node: ast.Compare, lk: str, lc, rk: str, rc) -> Evaluator | None:
    """Fast closures for `prop = literal`, `literal = prop`, `prop IS NULL` and `prop = prop`."""
    left, right = node.left, node.right
    if isinstance(left, ast.Property) and rk == "N" and rc is None:
        name = left.name
        return lambda p: p.get(name) is None
    if isinstance(left, ast.Property) and isinstance(right, ast.Property):
        a, b = left.name, right.name

        def prop_eq_prop(p):
            lv = p.get(a)
            rv = p.get(b)
            if lv is None:
                return True if rv is None else None
            if rv is None:
                return False
            return lv == rv
        return prop_eq_prop
    if isinstance(left, ast.Property) and rc is not _NO_CONST and rk in ("C", "I", "L", "D"):
        return _prop_vs_const(left.name, "=", rk, rc, missing=None)
    if isinstance(right, ast.Property) and lc is not _NO_CONST and lk in ("C", "I", "L", "D"):
        # Java compares the literal on the left to the converted property: the same equality; a missing property
        # gives FALSE here (not null): facts §6.3 step 2.
        return _prop_vs_const(right.name, "=", lk, lc, missing=False)
    return None


def _ordering_special(node: ast.Compare, lk: str, rk: str, rc) -> Evaluator | None:
    """Fast closure for `prop > numeric literal` and friends."""
    if isinstance(node.left, ast.Property) and rc is not _NO_CONST and rk in _NUMBERS:
        return _prop_vs_const(node.left.name, node.op, rk, rc, missing=None)
    return None


def _gt_or_nan(x: float, c: float) -> bool:
    return x > c or x != x


def _ge_or_nan(x: float, c: float) -> bool:
    return x >= c or x != x


# `x op const` for a property already converted to the constant's class. Integer/Long compareTo orders as Python
# does; so does Double.compare against the finite non-zero constants the parser lets through, but for NaN, which it
# sorts above everything. The operator module's functions are C calls (no Python frame).
_NUMBER_TESTS = {"=": operator.eq, ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_DOUBLE_TESTS = {**_NUMBER_TESTS, ">": _gt_or_nan, ">=": _ge_or_nan}


def _prop_vs_const(name: str, op: str, kind: str, const, missing) -> Evaluator:
    """`prop op const` with the property converted by the constant's class; `missing` is the result for null."""
    if kind == "C":
        def prop_eq_string(p):
            v = p.get(name)
            return missing if v is None else v == const
        return prop_eq_string
    cache, conv = _converter(kind)
    test = (_DOUBLE_TESTS if kind == "D" else _NUMBER_TESTS)[op]

    def prop_vs_number(p):
        v = p.get(name)
        if v is None:
            return missing
        x = cache.get(v)
        if x is None:
            try:
                x = conv(v)
            except JavaNumberFormatError as e:
                raise number_format_error(e) from None
        return test(x, const)
    return prop_vs_number


def compile_tree(tree: ast.Node) -> Evaluator:
    """The evaluation closure of a checked selector tree: props → True / False / None, or FilterEvaluationError."""
    return _Compiler().condition(tree)
