"""Java's number parsing (Integer/Long/Double.valueOf) over a column's distinct strings at once.

Plain decimal text, by far the common case, is recognised by a regular expression and parsed by Arrow's cast
(correctly rounded, as Java's FloatingDecimal is); every other string goes through `filterlib.sql92.javanum`,
the interpreter's own parsers, so acceptance, values and error messages are Java's whatever the text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.kernel_cache import njit
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


COMPARISONS = ("=", ">", ">=", "<", "<=")


@njit(cache=True, inline="always")
def _java_compare(x, c):
    """Java's compareTo of x with c: Long's for integers; Double.compare for doubles (-0.0 below 0.0, NaN equal to
    itself and above everything, infinities included)."""
    if x < c:
        return -1
    if x > c:
        return 1
    x_nan, c_nan = x != x, c != c
    if x_nan or c_nan:
        return 0 if x_nan and c_nan else (1 if x_nan else -1)
    if x == 0:
        x_neg, c_neg = math.copysign(1.0, x) < 0, math.copysign(1.0, c) < 0
        if x_neg != c_neg:
            return -1 if x_neg else 1
    return 0


@njit(cache=True)
def _compare_states(values, ok, c, op, error_state, out):
    """out[i]: TRUE / FALSE of `values[i] op c` (op: COMPARISONS index) by Java's compareTo, error_state where the
    string did not parse."""
    for i in range(len(values)):
        if not ok[i]:
            out[i] = error_state
            continue
        r = _java_compare(values[i], c)
        if op == 0:
            t = r == 0
        elif op == 1:
            t = r > 0
        elif op == 2:
            t = r >= 0
        elif op == 3:
            t = r < 0
        else:
            t = r <= 0
        out[i] = 1 if t else 0


def compare_states(parsed: Parsed, op: str, const: int | float, error_state: int, out: np.ndarray) -> None:
    """Per distinct string into out[:len]: whether its number `op` const holds (1 / 0) under Java's compareTo of the
    parsed class (Double.compare for "D"), error_state where it did not parse."""
    c = float(const) if parsed.values.dtype == np.float64 else int(const)
    _compare_states(parsed.values, parsed.ok, c, COMPARISONS.index(op), error_state, out)
