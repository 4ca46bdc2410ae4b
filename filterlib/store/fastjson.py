"""The JSON dialects of the broker's config files: fastjson 1.x (to 5.3.x) and fastjson2 (5.4.0 on: RocketMQ's
RemotingSerializable switched libraries), both with unquoted integer map keys ({0:12}) and tabs when pretty. They read
alike; they differ in how pretty text breaks lines (`dumps`' `dialect`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_WS = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()


class FastjsonError(ValueError):
    """Text that is not valid in fastjson's output dialect."""


def loads(text: str) -> Any:
    """Parse fastjson output: standard JSON plus unquoted integer object keys (returned as Python ints)."""
    value, pos = _value(text, _WS.match(text, 0).end())
    pos = _WS.match(text, pos).end()
    if pos != len(text):
        raise FastjsonError(f"trailing data at {pos}")
    return value


def _value(s: str, i: int) -> tuple[Any, int]:
    if i >= len(s):
        raise FastjsonError("unexpected end of input")
    c = s[i]
    if c == "{":
        return _object(s, i + 1)
    if c == "[":
        return _array(s, i + 1)
    if c == '"':
        return json.decoder.scanstring(s, i + 1)
    try:
        return _decoder.raw_decode(s, i)
    except json.JSONDecodeError as e:
        raise FastjsonError(str(e)) from None


def _object(s: str, i: int) -> tuple[dict, int]:
    out: dict = {}
    i = _WS.match(s, i).end()
    if i < len(s) and s[i] == "}":
        return out, i + 1
    while True:
        i = _WS.match(s, i).end()
        if i < len(s) and s[i] == '"':
            key, i = json.decoder.scanstring(s, i + 1)
        else:
            m = _NUMBER.match(s, i)
            if not m or m.group(1) or m.group(2):
                raise FastjsonError(f"bad object key at {i}")
            key = int(m.group(0))
            i = m.end()
        i = _WS.match(s, i).end()
        if i >= len(s) or s[i] != ":":
            raise FastjsonError(f"expected ':' at {i}")
        val, i = _value(s, _WS.match(s, i + 1).end())
        out[key] = val
        i = _WS.match(s, i).end()
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        if i < len(s) and s[i] == "}":
            return out, i + 1
        raise FastjsonError(f"expected ',' or '}}' at {i}")


def _array(s: str, i: int) -> tuple[list, int]:
    out: list = []
    i = _WS.match(s, i).end()
    if i < len(s) and s[i] == "]":
        return out, i + 1
    while True:
        val, i = _value(s, _WS.match(s, i).end())
        out.append(val)
        i = _WS.match(s, i).end()
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        if i < len(s) and s[i] == "]":
            return out, i + 1
        raise FastjsonError(f"expected ',' or ']' at {i}")


_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\x7f-\x9f\u2028\u2029]')


FASTJSON = "fastjson"
FASTJSON2 = "fastjson2"


def dumps(value: Any, pretty: bool = True, dialect: str = FASTJSON) -> str:
    """`JSON.toJSONString(obj, pretty)` for the plain maps, lists and scalars of the config files, in the dialect of
    fastjson 1.x or of fastjson2 (`JSONWriter.Feature.PrettyFormat`)."""
    if dialect == FASTJSON2:
        return _dump2(value, 0, pretty)
    if dialect != FASTJSON:
        raise ValueError(f"unknown JSON dialect {dialect!r}")
    return _dump(value, 0, pretty)


def written_dialect(text: str) -> str | None:
    """Which dialect wrote a pretty config file: the one whose output reproduces it byte for byte (None: neither,
    or both alike, as for a file without empty objects, lists or integer keys)."""
    try:
        value = loads(text)
    except ValueError:
        return None
    hits = [d for d in (FASTJSON, FASTJSON2) if dumps(value, True, d) == text]
    return hits[0] if len(hits) == 1 else None


def _dump2(value: Any, indent: int, pretty: bool) -> str:
    r"""fastjson2 with PrettyFormat, observed in 5.5.1's config files: every object entry (integer keys too) on a
    line of its own one tab deeper, then the closing brace on the object's own level, an empty object included
    (`{\n\t\t\n\t}` at depth 1); arrays of numbers (int[]) inline, other arrays one element a line; null map
    values omitted."""
    if isinstance(value, Mapping):
        items = [(k, v) for k, v in value.items() if v is not None]
        if not pretty:
            return "{" + ",".join(f"{_dump_key(k)}:{_dump2(v, indent + 1, pretty)}" for k, v in items) + "}"
        inner = "\n" + "\t" * (indent + 1)
        body = ",".join(f"{inner}{_dump_key(k)}:{_dump2(v, indent + 1, pretty)}" for k, v in items) or inner
        return "{" + body + "\n" + "\t" * indent + "}"
    if isinstance(value, (list, tuple)):
        if not pretty or not value or all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return "[" + ",".join(_dump2(v, indent + 1, pretty) for v in value) + "]"
        inner = "\n" + "\t" * (indent + 1)
        return "[" + ",".join(inner + _dump2(v, indent + 1, pretty) for v in value) + "\n" + "\t" * indent + "]"
    return _dump(value, indent, pretty)


def _escape_char(match: re.Match) -> str:
    """fastjson's escape of one character: short forms for \\b \\t \\n \\f \\r \\" \\\\, else \\uXXXX."""
    c = match.group(0)
    return _ESCAPES.get(c) or f"\\u{ord(c):04X}"


def _dump_string(value: str) -> str:
    """A JSON string as fastjson writes it (non-ASCII raw; C0/C1 controls, DEL, U+2028/9 escaped)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, value) + '"'


def _dump_key(key: Any) -> str:
    """Map keys: strings quoted, integers bare (fastjson MapSerializer without WriteNonStringKeyAsString)."""
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise TypeError(f"unsupported key {key!r}")
    return _dump_string(key) if isinstance(key, str) else str(key)


def _dump(value: Any, indent: int, pretty: bool) -> str:
    """One value as fastjson writes it: null map values omitted, arrays inline, tabs when pretty.

    Arrays stay inline even when pretty: the config files' arrays are Java Sets (CollectionCodec) and
    int[] (IntArraySerializer), which fastjson never breaks into lines (only its ListSerializer does).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "null"
    if isinstance(value, str):
        return _dump_string(value)
    if isinstance(value, Mapping):
        return _dump_map(value, indent, pretty)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dump(v, indent, pretty) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as fastjson")


def _dump_map(value: Mapping, indent: int, pretty: bool) -> str:
    r"""fastjson 1.2.83 MapSerializer.write, observed against the jar.

    Pretty mode starts a new line (indented one level deeper) only before a *String* key; an integer
    key follows the `{` or `,` directly.  After the entries, a non-empty map (counting entries whose
    null values were skipped) gets a new line indented at the map's own level before `}`.  So
    {0: 1, 1: 2} nested at depth 2 is `{0:1,1:2\n\t\t}`, {"a": 1, 0: 2} is `{\n\t\t\t"a":1,0:2\n\t\t}`,
    {0: None} is `{\n\t\t}` and only a map with no entries at all is `{}`.
    """
    if not value:
        return "{}"
    parts = ["{"]
    first = True
    for k, v in value.items():
        if v is None:
            continue
        if not first:
            parts.append(",")
        if pretty and isinstance(k, str):
            parts.append("\n" + "\t" * (indent + 1))
        parts.append(f"{_dump_key(k)}:{_dump(v, indent + 1, pretty)}")
        first = False
    if pretty:
        parts.append("\n" + "\t" * indent)
    parts.append("}")
    return "".join(parts)
