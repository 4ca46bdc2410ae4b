"""The properties a set of filters names, pulled once per batch out of the map column into dictionary codes.

A filter's answer depends only on the values of the properties it names, so each of those becomes one column:
`codes` (int32 per row, -1 where the message has no such property) over `values` (the distinct strings; a property
whose values are nearly all distinct, an order id, may repeat one: `_intern`).
Java's HashMap keeps the last value of a repeated key, and so does this.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.kernel_cache import njit
from filterlib.store.properties_text import map_buffers, span_strings, string_buffers

MISSING = -1


@dataclass
class Column:
    """One property over a batch: per-row codes into `values`; MISSING (-1) where the property is absent."""

    codes: np.ndarray
    values: pa.Array
    _pylist: list | None = field(default=None, repr=False)
    _found: dict = field(default_factory=dict, repr=False)

    @property
    def cardinality(self) -> int:
        """Present values held (distinct, but for a nearly unique property: `_intern`)."""
        return len(self.values)

    def pylist(self) -> list[str]:
        """The values as Python strings (built once)."""
        if self._pylist is None:
            self._pylist = self.values.to_pylist()
        return self._pylist

    def codes_of(self, texts: Iterable[str]) -> dict[str, np.ndarray]:
        """The codes holding each text (none, one, or several: see `cardinality`), found for every text not looked up
        before in one hashing pass over the values; the texts must be valid UTF-16 (no lone surrogate)."""
        new = [t for t in dict.fromkeys(texts) if t not in self._found]
        if new:
            at = pc.index_in(self.values, value_set=pa.array(new, pa.string()))
            codes = np.flatnonzero(np.asarray(at.is_valid(), dtype=bool))
            which = np.asarray(at.take(pa.array(codes)), dtype=np.int64) if len(codes) else codes
            order = np.argsort(which, kind="stable")
            bounds = np.searchsorted(which[order], np.arange(len(new) + 1))
            for j, text in enumerate(new):
                self._found[text] = codes[order[bounds[j]:bounds[j + 1]]]
        return {t: self._found[t] for t in texts}


_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_FMIX = np.uint64(0xFF51AFD7ED558CCD)
_UNIQUE_AFTER = 4096
"""Occurrences of a name after which _intern stops looking up a name whose values are nearly all distinct."""


@njit(cache=True)
def _same_bytes(data, a, b, ln):
    for t in range(ln):
        if data[a + t] != data[b + t]:
            return False
    return True


@njit(cache=True)
def _rehash(hashes, count, cap):
    """A table of `cap` slots holding dictionary ids 0..count-1 at their hashes (linear probing)."""
    table = np.full(cap, -1, dtype=np.int32)
    mask = np.uint64(cap - 1)
    for d in range(count):
        slot = np.int64(hashes[d] & mask)
        while table[slot] >= 0:
            slot = (slot + 1) & (cap - 1)
        table[slot] = d
    return table


@njit(cache=True, inline="always")
def _intern(j, va, vl, data, table, cap, total, g_hash, g_span, g_name, g_code, counts, seen, reps):
    """The code of value data[va:va+vl] of name j in that name's dictionary, added (first-seen order, its span kept
    in reps) when new. Returns (code, table, cap, total): the table is rebuilt twice as large past half full.

    A name whose values have nearly all been new (an order id, a trace id: more than 15 in 16 of its first
    _UNIQUE_AFTER) stops being looked up: each value gets a code of its own, so the dictionary may then repeat a
    value, which costs its evaluation twice and changes no answer."""
    seen[j] += 1
    if seen[j] > _UNIQUE_AFTER and counts[j] * 16 > seen[j] * 15:
        code = counts[j]
        counts[j] = code + 1
        reps[j, code, 0] = va
        reps[j, code, 1] = va + vl
        return code, table, cap, total
    h = _FNV_OFFSET ^ np.uint64(j)
    for t in range(vl):
        h = (h ^ np.uint64(data[va + t])) * _FNV_PRIME
    h ^= h >> np.uint64(33)
    h *= _FMIX
    h ^= h >> np.uint64(33)
    slot = np.int64(h & np.uint64(cap - 1))
    while True:
        g = table[slot]
        if g < 0:
            code = counts[j]
            counts[j] = code + 1
            reps[j, code, 0] = va
            reps[j, code, 1] = va + vl
            g_hash[total] = h
            g_span[total, 0] = va
            g_span[total, 1] = vl
            g_name[total] = j
            g_code[total] = code
            table[slot] = total
            total += 1
            if 2 * total > cap:
                cap *= 2
                table = _rehash(g_hash, total, cap)
            return code, table, cap, total
        if g_hash[g] == h and g_name[g] == j and g_span[g, 1] == vl and _same_bytes(data, g_span[g, 0], va, vl):
            return g_code[g], table, cap, total
        slot = (slot + 1) & (cap - 1)


@njit(cache=True, inline="always")
def _interner(n, names):
    """_intern's state for n rows and that many names: per-row codes (-1: absent), the entries' hashes, spans,
    names and codes, each dictionary's value spans, counts and occurrences, and an empty 1024-slot table."""
    bound = n * names + 1
    return (np.full((names, n), -1, dtype=np.int32), np.empty(bound, dtype=np.uint64),
            np.empty((bound, 2), dtype=np.int64), np.empty(bound, dtype=np.int32), np.empty(bound, dtype=np.int32),
            np.empty((names, n + 1, 2), dtype=np.int64), np.zeros(names, dtype=np.int64),
            np.zeros(names, dtype=np.int64), np.full(1024, -1, dtype=np.int32))


@njit(cache=True, inline="always")
def _name_of(data, a, ln, name_offsets, name_data):
    """The index of the wanted name equal to data[a:a+ln], or -1."""
    for c in range(len(name_offsets) - 1):
        b = name_offsets[c]
        if name_offsets[c + 1] - b != ln:
            continue
        same = True
        for t in range(ln):
            if data[a + t] != name_data[b + t]:
                same = False
                break
        if same:
            return c
    return -1


@njit(cache=True)
def _extract(map_offsets, key_offsets, key_data, val_offsets, val_data, val_valid, name_offsets, name_data):
    """One pass over the map entries: for each wanted name, per row the code of its (last) value in a dictionary
    built in first-seen order, and each dictionary entry's value span. One hash table serves every name (the name
    is mixed into the hash); it starts small and doubles, so it stays in cache while values are few."""
    n = len(map_offsets) - 1
    names = len(name_offsets) - 1
    codes, g_hash, g_span, g_name, g_code, reps, counts, seen, table = _interner(n, names)
    total = 0
    cap = len(table)
    for row in range(n):
        for e in range(map_offsets[row], map_offsets[row + 1]):
            a = key_offsets[e]
            j = _name_of(key_data, a, key_offsets[e + 1] - a, name_offsets, name_data)
            if j < 0:
                continue
            if not val_valid[e]:
                codes[j, row] = -1
                continue
            va = val_offsets[e]
            code, table, cap, total = _intern(j, va, val_offsets[e + 1] - va, val_data, table, cap, total, g_hash,
                                              g_span, g_name, g_code, counts, seen, reps)
            codes[j, row] = code
    return codes, reps, counts


@njit(cache=True)
def _extract_text(off, data, row_valid, name_offsets, name_data):
    """_extract over the properties text (`filterlib.store.properties_text`: key 0x01 value pairs joined by 0x02)
    in one pass over its bytes: a pair's key is compared with the wanted names as soon as its 0x01 is found, and
    only a wanted key's value is hashed. A piece without 0x01 or with an empty key or value is no pair, as in the
    broker's parse."""
    n = len(off) - 1
    names = len(name_offsets) - 1
    codes, g_hash, g_span, g_name, g_code, reps, counts, seen, table = _interner(n, names)
    total = 0
    cap = len(table)
    for row in range(n):
        i = off[row]
        end = off[row + 1] if row_valid[row] else i
        while i < end:
            s = i
            while s < end and data[s] != 1 and data[s] != 2:
                s += 1
            if s == end or data[s] == 2:
                i = s + 1
                continue
            j = _name_of(data, i, s - i, name_offsets, name_data) if s > i else -1
            v = s + 1
            while v < end and data[v] != 2:
                v += 1
            if j >= 0 and v > s + 1:
                code, table, cap, total = _intern(j, s + 1, v - s - 1, data, table, cap, total, g_hash, g_span,
                                                  g_name, g_code, counts, seen, reps)
                codes[j, row] = code
            i = v + 1
    return codes, reps, counts


def extract_properties(props: pa.Array | pa.ChunkedArray, names: Iterable[str]) -> dict[str, Column]:
    """Columns of the named properties from a properties column: the text `messages` holds
    (`filterlib.store.properties_text`) or a map<string,string> (a null is a message without any)."""
    names = sorted(set(names))
    if not names:
        return {}
    if isinstance(props, pa.ChunkedArray):
        props = props.combine_chunks() if props.num_chunks != 1 else props.chunk(0)
    encoded = [name.encode("utf-8", "surrogatepass") for name in names]
    name_offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    name_offsets[1:] = np.cumsum([len(b) for b in encoded])
    name_data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    if pa.types.is_map(props.type):
        offsets, key_offsets, key_data, val_offsets, data, valid = map_buffers(props)
        codes, reps, counts = _extract(offsets, key_offsets, key_data, val_offsets, data, valid, name_offsets,
                                       name_data)
    elif pa.types.is_string(props.type) or pa.types.is_large_string(props.type):
        props = props.cast(pa.string())
        off, data = string_buffers(props)
        valid = np.ones(len(props), dtype=bool) if props.null_count == 0 else np.asarray(props.is_valid(), dtype=bool)
        codes, reps, counts = _extract_text(off, data, valid, name_offsets, name_data)
    else:
        raise TypeError(f"properties must be text or map<string, string>, got {props.type}")
    return {name: Column(codes[j], span_strings(reps[j, :counts[j]], data)) for j, name in enumerate(names)}


def column_from_strings(values: pa.Array | pa.ChunkedArray) -> Column:
    """A Column from a plain string column (e.g. the decoded `tags`), nulls as MISSING."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    enc = values.dictionary_encode()
    return Column(np.asarray(enc.indices.fill_null(MISSING), dtype=np.int32), enc.dictionary)
