"""Hypothesis fuzzing: compile never fails other than with FilterSyntaxError, evaluate never other than with
FilterEvaluationError, whatever the text or the property map. (No wall-clock asserts: a hang would show as a
stuck run, and timing limits only make a loaded CI machine flaky; Hypothesis runs with deadline=None.)"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from filterlib import sql92
from filterlib.errors import FilterEvaluationError, FilterSyntaxError

LEXEMES = ["a", "b", "TAGS", "NOT", "AND", "OR", "IS", "NULL", "TRUE", "FALSE", "BETWEEN", "IN", "CONTAINS",
           "STARTSWITH", "ENDSWITH", "(", ")", ",", "=", "<>", ">", ">=", "<", "<=", "+", "-", "'x'", "''", "'5'",
           "0", "5", "5L", "2147483648", "9223372036854775808", "1.5", ".5", "0.0", "1e400", "1e-320", "--c\n",
           "/*c*/", "#", "'", "!", "\u00a0", "é", "0x10"]

props_strategy = st.dictionaries(
    st.sampled_from(["a", "b", "TAGS", "c"]),
    st.one_of(st.sampled_from(["5", " 5", "5.5", "1e3", "NaN", "0x10", "9223372036854775808", "-0", "", "true",
                               "TRUE", "x", "0x1p3", "1d", "Infinity"]), st.text(max_size=8)),
)
token_soup = st.lists(st.sampled_from(LEXEMES), max_size=14).map(" ".join)


def _compile(text: str):
    """Compile, returning None for a syntax error (any other exception fails the test)."""
    try:
        return sql92.compile(text)
    except FilterSyntaxError as e:
        assert isinstance(e.position, (int, type(None)))
        return None


def _evaluate(expr, props):
    """Evaluate, checking the result is a condition value and that matches agrees with it."""
    try:
        v = expr.evaluate(props)
    except FilterEvaluationError as e:
        assert e.java_class in ("RuntimeException", "ClassCastException")
        assert expr.matches(props) is False
        return
    assert v in (True, False, None) and (v is None or isinstance(v, bool))
    assert expr.matches(props) is (v is True)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=40))
def test_any_text_compiles_or_raises_syntax_error(text):
    _compile(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(token_soup, st.lists(props_strategy, max_size=3))
def test_token_soup_compiles_and_evaluates_cleanly(text, maps):
    expr = _compile(text)
    if expr is not None:
        for props in maps:
            _evaluate(expr, props)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=1, max_value=3000), st.sampled_from(["(", "NOT ", "- ", "+"]))
def test_deep_nesting_never_crashes(n, opener):
    text = opener * n + "a" + (")" * n if opener == "(" else "") + " = 1"
    expr = _compile(text)
    if expr is not None:
        _evaluate(expr, {"a": "1"})


@pytest.mark.parametrize("opener", ["(", "NOT ", "- ", "+"])
@pytest.mark.parametrize("n", [1, 2, 3, 10, 50])
def test_small_nesting_compiles_and_evaluates(n, opener):
    """Shallow nesting is ordinary SQL92 and must compile and reach evaluate (deep nesting may be refused)."""
    text = opener * n + "a" + (")" * n if opener == "(" else "") + " = 1"
    expr = sql92.compile(text)
    _evaluate(expr, {"a": "1"})
    _evaluate(expr, {})
