"""fastjson 1.x JSON dialect of the broker's config files: maps with non-String keys are written unquoted ({0:12})."""

from __future__ import annotations

import json
import re
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


def dumps(value: Any, pretty: bool = True) -> str:
    """Serialize in the same dialect (int keys unquoted; tab-indented when pretty, like ConfigManager.persist)."""
    return _dump(value, 0, pretty)


def _dump(v: Any, depth: int, pretty: bool) -> str:
    nl = "\n" if pretty else ""
    ind = "\t" * (depth + 1) if pretty else ""
    end = "\t" * depth if pretty else ""
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = [(str(k) if isinstance(k, int) and not isinstance(k, bool) else json.dumps(str(k), ensure_ascii=False))
                 + ":" + _dump(x, depth + 1, pretty) for k, x in v.items()]
        return "{" + nl + ("," + nl).join(ind + it for it in items) + nl + end + "}"
    if isinstance(v, (list, tuple, set, frozenset)):
        if not v:
            return "[]"
        return "[" + nl + ("," + nl).join(ind + _dump(x, depth + 1, pretty) for x in v) + nl + end + "]"
    return json.dumps(v, ensure_ascii=False)
