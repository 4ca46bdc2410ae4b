"""Java's number-parsing and ordering rules the selector relies on (Integer/Long/Double.valueOf, Double.compare).

Property values are always strings, and RocketMQ converts them with whatever parser the other operand's Java
class picks, so the exact acceptance rules of those parsers decide whether a message matches. Parsed values are
memoised per string (property values repeat a lot), which is what keeps the evaluator fast.
"""

from __future__ import annotations

import math
import re
import unicodedata

from filterlib.errors import FilterEvaluationError
from filterlib.javalang import java_trim

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

_ASCII_INT = re.compile(r"[+-]?[0-9]+")
# Double.valueOf's decimal grammar (JDK 17 FloatingDecimal.readJavaFormatString), after trim().
_DEC_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?")
# Double.valueOf's hexadecimal grammar (FloatingDecimal.parseHexString), after trim().
_HEX_FLOAT = re.compile(r"([+-])?0[xX]((?:[0-9a-fA-F]+\.?)|(?:[0-9a-fA-F]*\.[0-9a-fA-F]+))[pP]([+-])?([0-9]+)[fFdD]?")

_CACHE_LIMIT = 65536


class JavaNumberFormatError(Exception):
    """Java's NumberFormatException; `str()` is its getMessage()."""


def _for_input(s: str) -> JavaNumberFormatError:
    """The message Java gives for an unparsable number."""
    return JavaNumberFormatError(f'For input string: "{s}"')


def _parse_integral(s: str, lo: int, hi: int) -> int:
    """Integer.parseInt / Long.parseLong in radix 10: optional sign, then Unicode decimal digits (BMP only)."""
    if _ASCII_INT.fullmatch(s):
        value = int(s)
    else:
        if not s:
            raise _for_input("")
        i, sign = 0, 1
        if s[0] in "+-":
            sign = -1 if s[0] == "-" else 1
            i = 1
            if len(s) == 1:
                raise _for_input(s)
        value = 0
        for ch in s[i:]:
            d = unicodedata.decimal(ch, -1) if ord(ch) < 0x10000 else -1
            if d < 0:
                raise _for_input(s)
            value = value * 10 + d
        value *= sign
    if value < lo or value > hi:
        raise _for_input(s)
    return value


def _parse_double(s: str) -> float:
    """Double.valueOf(String) per JDK 17's FloatingDecimal: trim, sign, NaN/Infinity, decimal or hex, f/d suffix."""
    t = java_trim(s)
    if not t:
        raise JavaNumberFormatError("empty String")
    negative = t[0] == "-"
    body = t[1:] if t[0] in "+-" else t
    if body == "NaN":
        return math.nan
    if body == "Infinity":
        return -math.inf if negative else math.inf
    if body[:1] == "0" and body[1:2] in ("x", "X"):
        m = _HEX_FLOAT.fullmatch(t)
        if m is None:
            raise _for_input(t)
        if int(m.group(4)) > INT_MAX:  # Java: exponent overflow gives signed infinity or zero, whatever the digits
            r = 0.0 if m.group(3) == "-" else math.inf
            return -r if negative else r
        text = t[:-1] if t[-1] in "fFdD" else t
        try:
            return float.fromhex(text)
        except OverflowError:
            return -math.inf if negative else math.inf
    if not _DEC_FLOAT.fullmatch(t):
        raise _for_input(t)
    return float(t[:-1] if t[-1] in "fFdD" else t)


def _parse_int(s: str) -> int:
    """Integer.valueOf(String)."""
    return _parse_integral(s, INT_MIN, INT_MAX)


def _parse_long(s: str) -> int:
    """Long.valueOf(String)."""
    return _parse_integral(s, LONG_MIN, LONG_MAX)


def _cached(parse):
    """Memoise a parser: `convert.cache` maps strings to parsed values (successes only, so a hot path may read
    it directly); failures are remembered separately and raised again."""
    cache: dict = {}
    errors: dict = {}

    def convert(s: str):
        r = cache.get(s)
        if r is not None:
            return r
        msg = errors.get(s)
        if msg is None:
            try:
                r = parse(s)
            except JavaNumberFormatError as e:
                msg = str(e)
                if len(errors) >= _CACHE_LIMIT:
                    errors.clear()
                errors[s] = msg
            else:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[s] = r
                return r
        raise JavaNumberFormatError(msg)

    convert.cache = cache
    return convert


integer_value_of = _cached(_parse_int)
long_value_of = _cached(_parse_long)
double_value_of = _cached(_parse_double)


def boolean_value_of(s: str) -> bool:
    """Boolean.valueOf(String): true iff the text equals "true" ignoring (ASCII) case."""
    return len(s) == 4 and s.isascii() and s.lower() == "true"


def double_compare(x: float, y: float) -> int:
    """Double.compare: numeric order, but -0.0 < 0.0 and NaN equals itself and is above +Infinity."""
    if x < y:
        return -1
    if x > y:
        return 1
    if x == y:
        if x != 0.0:
            return 0
        sx, sy = math.copysign(1.0, x), math.copysign(1.0, y)
        return 0 if sx == sy else (-1 if sx < sy else 1)
    xn, yn = x != x, y != y
    if xn and yn:
        return 0
    return 1 if xn else -1


def number_format_error(e: JavaNumberFormatError) -> FilterEvaluationError:
    """The RuntimeException(NumberFormatException) that ComparisonExpression.__compare throws for a bad number."""
    return FilterEvaluationError(f"java.lang.NumberFormatException: {e}", "RuntimeException", "NumberFormatException")
