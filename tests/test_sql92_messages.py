"""Compile errors tell a user what is wrong, where, and since which version it would work (users.md item 6).

Which constructs RocketMQ rejects comes from the facts (§5.1 lexical rules, §5.4 removed ActiveMQ features); the
reference conformance suite checks acceptance itself against the real jars.
"""

from __future__ import annotations

import pytest

from filterlib import sql92
from filterlib.errors import FilterSyntaxError


def _error(text: str, **kw) -> FilterSyntaxError:
    with pytest.raises(FilterSyntaxError) as info:
        sql92.compile(text, **kw)
    return info.value


def test_like_is_named_as_never_supported_with_its_position():
    e = _error("(region LIKE 'eu%')")
    assert (e.position, e.text) == (8, "LIKE")
    assert "no RocketMQ version supports LIKE" in str(e) and "column 9" in str(e)


def test_slash_in_a_property_name_is_a_lexical_error_that_says_why():
    e = _error("order/id = 1")
    assert (e.position, e.text) == (5, "/")
    assert "property names may hold only" in str(e)


def test_contains_before_5_1_3_says_since_when():
    e = _error("(a CONTAINS 'x')", version="5.1.0")
    assert e.since == "5.1.3" and e.text == "CONTAINS"
    assert sql92.compile("(a CONTAINS 'x')").matches({"a": "xyz"})


def test_trailing_text_rocketmq_ignores_is_reported_not_hidden():
    e = sql92.compile("a > 0L AND b = 1")
    assert e.ignored_text == "L AND b = 1"
    assert e.matches({"a": "1"}) and not e.matches({"a": "0"})
