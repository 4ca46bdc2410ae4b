"""Message properties string: parsing with each RocketMQ version's rules, and encoding in Java HashMap order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from filterlib.javalang import java_split, java_string_hash, java_utf8_decode

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def parse_properties(data: bytes | str) -> dict[str, str]:
    """string2messageProperties, 4.9.1+ rules: empty keys/values dropped, a later duplicate key wins."""
    s = java_utf8_decode(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    out: dict[str, str] = {}
    n = len(s)
    i = 0
    while i < n:
        end = s.find(PROPERTY_SEPARATOR, i)
        if end < 0:
            end = n
        if end - i >= 3:
            sep = s.find(NAME_VALUE_SEPARATOR, i)
            if i < sep < end - 1:
                out[s[i:sep]] = s[sep + 1:end]
        i = end + 1
    return out


def parse_properties_legacy(data: bytes | str) -> dict[str, str]:
    """string2messageProperties, ≤4.9.0 rules: Java split on 0x02 then 0x01, items of exactly two parts kept."""
    s = java_utf8_decode(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    out: dict[str, str] = {}
    for item in java_split(s, PROPERTY_SEPARATOR):
        parts = java_split(item, NAME_VALUE_SEPARATOR)
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def java_hashmap_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """Iteration order of a java.util.HashMap after inserting `keys` (no removals, no treeified bins)."""
    ordered = list(dict.fromkeys(keys))
    cap = 1
    while cap < initial_capacity:
        cap <<= 1
    while len(ordered) > cap * 3 // 4:
        cap <<= 1

    def bucket(k: str) -> int:
        h = java_string_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    return [k for _, _, k in sorted((bucket(k), i, k) for i, k in enumerate(ordered))]


def encode_properties(props: Mapping[str, str | None], trailing_separator: bool = True,
                      hashmap_capacity: int | None = None) -> bytes:
    """messageProperties2String as UTF-8 bytes; null values skipped.

    trailing_separator=False gives the 4.9.1–5.1.4 form; hashmap_capacity reorders the entries the way a Java
    HashMap of that initial capacity iterates (128 for maps the 5.x broker parses, 16 for client-built maps).
    """
    keys = list(props) if hashmap_capacity is None else java_hashmap_order(props, hashmap_capacity)
    text = "".join(f"{k}{NAME_VALUE_SEPARATOR}{props[k]}{PROPERTY_SEPARATOR}" for k in keys if props[k] is not None)
    if not trailing_separator and text:
        text = text[:-1]
    return text.encode("utf-8")
