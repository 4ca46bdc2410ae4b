"""Java's number parsing (Integer/Long/Double.valueOf) over a column's distinct strings at once.

Plain decimal text, by far the common case, is recognised by a regular expression and parsed by Arrow's cast
(correctly rounded, as Java's FloatingDecimal is); every other string goes through `filterlib.sql92.javanum`,
the interpreter's own parsers, so acceptance, values and error messages are Java's whatever the text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.sql92.javanum import (
    INT_MAX,
    INT_MIN,
    JavaNumberFormatError,
    double_value_of,
    integer_value_of,
    long_value_of,
)

_INTEGRAL_RE = r"^[+-]?[0-9]{1,18}$"
_DECIMAL_RE = r"^-?[0-9]{1,15}(\.[0-9]{1,15})?$"
_PARSERS = {"I": integer_value_of, "L": long_value_of, "D": double_value_of}


@dataclass
class Parsed:
    """Per distinct string: the number (int64 for I/L, float64 for D), whether it parsed, the error text if not."""

    values: np.ndarray
    ok: np.ndarray
    errors: dict[int, str]


def _fast_mask(values: pa.Array, pattern: str) -> np.ndarray:
    return np.asarray(pc.match_substring_regex(values, pattern).fill_null(False), dtype=bool)


def parse_numbers(values: pa.Array, kind: str, pylist: list[str] | None = None) -> Parsed:
    """Parse every string of `values` with the Java parser of literal class `kind` ("I", "L" or "D")."""
    n = len(values)
    integral = kind in ("I", "L")
    out = np.zeros(n, dtype=np.int64 if integral else np.float64)
    ok = np.zeros(n, dtype=bool)
    errors: dict[int, str] = {}
    if n == 0:
        return Parsed(out, ok, errors)
    fast = _fast_mask(values, _INTEGRAL_RE if integral else _DECIMAL_RE)
    idx = np.flatnonzero(fast)
    if len(idx):
        texts = values.take(pa.array(idx))
        if integral:
            texts = pc.replace_substring_regex(texts, r"^\+", "")
        nums = np.asarray(pc.cast(texts, pa.int64() if integral else pa.float64()))
        if kind == "I":
            inside = (nums >= INT_MIN) & (nums <= INT_MAX)
            fast[idx[~inside]] = False
            idx, nums = idx[inside], nums[inside]
        out[idx] = nums
        ok[idx] = True
    slow = np.flatnonzero(~fast)
    if len(slow):
        strings = pylist if pylist is not None else values.to_pylist()
        parse = _PARSERS[kind]
        for i in slow.tolist():
            try:
                out[i] = parse(strings[i])
                ok[i] = True
            except JavaNumberFormatError as e:
                errors[i] = str(e)
    return Parsed(out, ok, errors)


def double_compare(x: np.ndarray, c: float) -> np.ndarray:
    """Java's Double.compare(x, c) per element (-1, 0, 1): -0.0 below 0.0, NaN equal to itself and above all."""
    x = np.asarray(x, dtype=np.float64)
    res = np.where(x < c, -1, np.where(x > c, 1, 0)).astype(np.int8)
    xn = np.isnan(x)
    if c != c:
        return np.where(xn, 0, -1).astype(np.int8)
    res[xn] = 1
    if c == 0.0:
        zero = x == 0.0
        sx = np.signbit(x)
        sc = np.signbit(c)
        res[zero & sx & ~sc] = -1
        res[zero & ~sx & sc] = 1
    return res


def int_compare(x: np.ndarray, c: int) -> np.ndarray:
    """Integer/Long compareTo against a constant, per element."""
    return np.where(x < c, -1, np.where(x > c, 1, 0)).astype(np.int8)
