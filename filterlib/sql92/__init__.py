"""RocketMQ's SQL92 message selector in pure Python: `compile(text)` then `evaluate(props)` / `matches(props)`.

Parsing and evaluation reproduce RocketMQ 5.3.3 (SelectorParser, ComparisonExpression & co.) bit for bit,
including its quirks: trailing input is ignored, NOT binds tighter than comparisons, the literal's class
decides how a property string is parsed, null rules are asymmetric. `version` selects the grammar of older
brokers, where CONTAINS/STARTSWITH/ENDSWITH (5.1.3+) are plain identifiers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from filterlib.errors import FilterEvaluationError, FilterSyntaxError
from filterlib.sql92.expression import Sql92Expression
from filterlib.sql92.parser import parse

__all__ = ["compile", "grammar_note", "Sql92Expression", "FilterSyntaxError", "FilterEvaluationError", "CACHE_SIZE"]

# RocketMQ caches 100 parse results (expression or exception) per exact text; a larger cache changes nothing
# observable because parsing is deterministic.
CACHE_SIZE = 4096
DEFAULT_VERSION = "5.3.3"

_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()


def _has_5_1_3_keywords(version: str) -> bool:
    """Whether a RocketMQ version's grammar has CONTAINS/STARTSWITH/ENDSWITH (added in 5.1.3)."""
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise ValueError(f"not a RocketMQ version: {version!r}")
    return tuple(parts) >= (5, 1, 3)


def compile(text: str, *, version: str = DEFAULT_VERSION) -> Sql92Expression:  # noqa: A001 (the public name)
    """Compile a selector as RocketMQ does; FilterSyntaxError (cached like Java's parse cache) where it refuses."""
    if not isinstance(text, str):
        raise TypeError(f"selector text must be a str, not {type(text).__name__}")
    modern = version == DEFAULT_VERSION or _has_5_1_3_keywords(version)
    key = (text, version)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None:
        try:
            result = parse(text, modern)
            hit = Sql92Expression(text, result.tree, result.ignored_text, result.ignored_position, version)
        except FilterSyntaxError as e:
            hit = e
        with _cache_lock:
            _cache[key] = hit
            if len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    if isinstance(hit, FilterSyntaxError):
        raise hit.with_traceback(None)
    return hit


def _reading(text: str, version: str) -> str:
    """How one release reads a selector, in words: the part it parses, or that it refuses it."""
    try:
        e = compile(text, version=version)
    except FilterSyntaxError as err:
        return f"refuses it ({err})"
    if e.ignored_position is None:
        return "parses all of it"
    return f"reads only `{text[:e.ignored_position].strip()}` and ignores `{e.ignored_text.strip()}`"


def grammar_note(text: str, version: str) -> str | None:
    """Words for a selector that a broker of `version` reads otherwise than a 5.x broker (from 5.1.3) does, None
    when both read it alike: before 5.1.3 CONTAINS, STARTSWITH and ENDSWITH are plain identifiers and the parser stops
    where they stand, so `name CONTAINS 'ab'` is `name` alone (a string as a boolean: never TRUE)."""
    if _has_5_1_3_keywords(version):
        return None
    old, new = _reading(text, version), _reading(text, DEFAULT_VERSION)
    if old == new:
        return None
    return (f"on a {version} broker SQL92 `{text}` means something else than on 5.x: {version} {old}, while 5.1.3 "
            f"and later {new} (CONTAINS, STARTSWITH and ENDSWITH come in 5.1.3)")
