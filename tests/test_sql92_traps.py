"""Targeted checks of the SQL92 traps, with expected values taken from /work/shared/rocketmq-facts.md (§ cited)."""

from __future__ import annotations

import math

import pytest

from filterlib import sql92
from filterlib.errors import FilterError, FilterEvaluationError, FilterSyntaxError
from filterlib.sql92 import ast
from filterlib.sql92.javanum import JavaNumberFormatError, double_compare, double_value_of, integer_value_of

THROWS = object()

# §6.8 "Representative cases [run, HEAD]": (expression, properties, result) — result THROWS = exception.
REPRESENTATIVE = [
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {}, None),
    ("'x' = a", {}, False),
    ("a <> 'x'", {}, None),
    ("'x' <> a", {}, True),
    ("a = b", {}, True),
    ("a IS NULL", {}, True),
    ("a IS NOT NULL", {}, False),
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "5.5"}, THROWS),
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 5", {"a": "3000000000"}, THROWS),
    ("a > 3000000000", {"a": "5"}, False),
    ("a = 5", {"a": "05"}, True),
    ("a = 5", {"a": "+5"}, True),
    ("a = 5", {"a": " 5"}, THROWS),
    ("a = 5.0", {"a": " 5"}, True),
    ("a = 5.0", {"a": "5f"}, True),
    ("a = 5.0", {"a": "0x1.4p2"}, True),
    ("a = 5", {"a": "abc"}, THROWS),
    ("a <> 1", {"a": "x"}, THROWS),
    ("a = '5'", {"a": "5"}, True),
    ("a > b", {"a": "10", "b": "9"}, True),
    ("a > b", {"a": "abc", "b": "9"}, THROWS),
    ("a = b", {"a": "1", "b": "1.0"}, False),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = FALSE", {"a": "abc"}, True),
    ("TRUE = a", {"a": "true"}, THROWS),
    ("a", {"a": "true"}, False),
    ("NOT a", {"a": "anything"}, True),
    ("NOT a = 1", {"a": "2"}, False),
    ("1 = TRUE", {}, False),
    ("a = 1 AND b = 2", {"a": "1"}, None),
    ("a = 1 OR b = 2", {"a": "2"}, None),
    ("a BETWEEN 1 AND 10", {"a": "10"}, True),
    ("a BETWEEN 1 AND 2", {"a": "1.5"}, THROWS),
    ("a BETWEEN 1.0 AND 2.0", {"a": "1.5"}, True),
    ("a NOT BETWEEN 1 AND 10", {}, None),
    ("a IN ('x','y')", {}, None),
    ("a NOT IN ('x','y')", {}, None),
    ("a NOT IN ('x','y')", {"a": "z"}, True),
    ("a CONTAINS 'b'", {}, False),
    ("a NOT CONTAINS 'b'", {}, False),
    ("a NOT CONTAINS ''", {"a": "abc"}, False),
    ("a > 1.0", {"a": "NaN"}, True),
    ("a > 0.5", {"a": "-0.0"}, False),
    ("a > b", {"a": "0.0", "b": "-0.0"}, True),
    ("-a > 5", {"a": "-6"}, None),
    ("TAGS = 'tagA'", {"TAGS": "tagA"}, True),
]

# §6.8 parse errors, §5.3 checks, §5.1 lexical rules, §13 trap 7.
REJECTED = ["a = NULL", "a > '5'", "TRUE = 1", "a BETWEEN 10 AND 1", "a IN (1,2)", "a = 0.0", "a = .0", "a = 0e5",
            "a = 1e400", "NOT a > 1", "(a>1) > 0", "5 IN ('5')", "a BETWEEN 2 AND 1.5", "a IN ()", "a != 1",
            "a == 1", 'a = "x"', "a = 'x' ; b = 1", "a = 'x' #", "a = 9223372036854775808", "a = 1 /* open",
            "a\u00a0= 1", "é = 1", "contains = 1", "5", "'x'", "-a", "a = 'x", "NULL = a"]


@pytest.mark.parametrize("text,props,expected", REPRESENTATIVE)
def test_representative_cases(text, props, expected):
    e = sql92.compile(text)
    if expected is THROWS:
        with pytest.raises(FilterEvaluationError):
            e.evaluate(props)
        assert e.matches(props) is False
    else:
        assert e.evaluate(props) is expected
        assert e.matches(props) is (expected is True)


@pytest.mark.parametrize("text", REJECTED)
def test_rejected_selectors(text):
    with pytest.raises(FilterSyntaxError) as info:
        sql92.compile(text)
    assert isinstance(info.value, FilterError) and isinstance(info.value, ValueError)


def test_trailing_input_is_ignored():
    """§5.2 and trap 3: the parser stops after the first complete expression."""
    same = {
        "a = 'x' b = 'y'": "a = 'x'",
        "a > 0L AND b = 1": "a > 0",
        "a = 1.5f AND b = 1": "a = 1.5",
        "a LIKE 'x%'": "a",
        "a + 1 > 2": "a",
        "a > 0x10": "a > 0",
        "a > 007": "a > 0",
        "a = 'x' )": "a = 'x'",
    }
    for text, equivalent in same.items():
        e = sql92.compile(text)
        assert e.ast == sql92.compile(equivalent).ast, text
        assert e.ignored_text and text.endswith(e.ignored_text)
        assert text[e.ignored_position:] == e.ignored_text


def test_not_binds_tighter_than_comparison():
    """§5.2 / trap 4: NOT a = 1 is (NOT a) = 1."""
    tree = sql92.compile("NOT a = 1").ast
    assert isinstance(tree, ast.Compare) and tree.op == "=" and isinstance(tree.left, ast.Not)


def test_literal_class_decides_conversion():
    """Trap 5: Integer.valueOf for int literals, Long.valueOf for long ones, Double.valueOf for floats."""
    assert sql92.compile("a > 2147483648").evaluate({"a": "3000000000"}) is True
    with pytest.raises(FilterEvaluationError):
        sql92.compile("a > 5").evaluate({"a": "1L"})
    assert sql92.compile("a < 1.0").evaluate({"a": "-Infinity"}) is True
    assert sql92.compile("a = 5.0").evaluate({"a": "5d"}) is True


def test_exceptions_and_short_circuit():
    """§6.2: exceptions propagate unless an earlier AND/OR short-circuits."""
    props = {"a": "x", "b": "y"}
    assert sql92.compile("b='y' OR a=1").evaluate(props) is True
    with pytest.raises(FilterEvaluationError) as info:
        sql92.compile("a=1 OR b='y'").evaluate(props)
    assert info.value.java_class == "RuntimeException"
    assert sql92.compile("a=1 OR b='y'").matches(props) is False


def test_class_cast_exception_for_boolean_left_string_right():
    """§6.5: left Boolean, right String → ClassCastException."""
    with pytest.raises(FilterEvaluationError) as info:
        sql92.compile("(a='x') = b").evaluate({"a": "x", "b": "true"})
    assert info.value.java_class == "ClassCastException"


def test_contains_family_is_case_and_version_dependent():
    """§5.1: CONTAINS/STARTSWITH/ENDSWITH are keywords since 5.1.3; before that they are plain names."""
    e = sql92.compile("a startswith 'x'")
    assert e.evaluate({"a": "xyz"}) is True and e.evaluate({"a": "yx"}) is False
    old = sql92.compile("a CONTAINS 'x'", version="4.9.8")
    assert old.ignored_text == "CONTAINS 'x'" and isinstance(old.ast, ast.BoolCast)
    with pytest.raises(FilterSyntaxError) as info:
        sql92.compile("a NOT CONTAINS 'x'", version="5.1.0")
    assert info.value.since == "5.1.3"
    assert sql92.compile("contains = 'x'", version="4.9.8").evaluate({"contains": "x"}) is True


def test_syntax_error_carries_position_and_text():
    with pytest.raises(FilterSyntaxError) as info:
        sql92.compile("a NOT LIKE 'x'")
    err = info.value
    assert err.position == 6 and err.text == "LIKE" and err.expression == "a NOT LIKE 'x'"
    assert "column 7" in str(err)


def test_referenced_properties_and_cache():
    e = sql92.compile("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)")
    assert e.referenced_properties == frozenset({"TAGS", "a"})
    assert sql92.compile(e.text) is e
    with pytest.raises(FilterSyntaxError) as first:
        sql92.compile("a = NULL")
    with pytest.raises(FilterSyntaxError) as second:
        sql92.compile("a = NULL")
    assert first.value is second.value


def test_java_number_parsers():
    """§6.5 conversion rules for property strings."""
    assert integer_value_of("+5") == 5 and integer_value_of("१२") == 12
    for bad in (" 5", "5.0", "1_0", "1L", "", "+", "2147483648"):
        with pytest.raises(JavaNumberFormatError):
            integer_value_of(bad)
    assert double_value_of(" 5 ") == 5.0 and double_value_of("5f") == 5.0 and double_value_of("0x1.4p2") == 5.0
    assert math.isnan(double_value_of("NaN")) and double_value_of("-Infinity") == -math.inf
    for bad in ("1_0", "१", "nan", "inf", "0x10", "1e", "."):
        with pytest.raises(JavaNumberFormatError):
            double_value_of(bad)
    assert double_compare(math.nan, math.inf) == 1 and double_compare(-0.0, 0.0) == -1
    assert double_compare(math.nan, math.nan) == 0
