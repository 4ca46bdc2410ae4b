"""The properties a set of filters names, pulled once per batch out of the map column into dictionary codes.

A filter's answer depends only on the values of the properties it names, so each of those becomes one column:
`codes` (int32 per row, -1 where the message has no such property) over `values` (the distinct strings).
Java's HashMap keeps the last value of a repeated key, and so does this.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from numba import njit

from filterlib.store.properties_text import pairs_of, span_strings

MISSING = -1


@dataclass
class Column:
    """One property over a batch: per-row codes into `values`; MISSING (-1) where the property is absent."""

    codes: np.ndarray
    values: pa.Array
    _pylist: list | None = field(default=None, repr=False)

    @property
    def cardinality(self) -> int:
        """Distinct present values."""
        return len(self.values)

    def pylist(self) -> list[str]:
        """The distinct values as Python strings (built once)."""
        if self._pylist is None:
            self._pylist = self.values.to_pylist()
        return self._pylist


_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_FMIX = np.uint64(0xFF51AFD7ED558CCD)


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


@njit(cache=True)
def _extract(map_offsets, key_start, key_end, key_data, val_start, val_end, val_data, val_valid, name_offsets,
             name_data):
    """One pass over the entries (entry e's key is key_data[key_start[e]:key_end[e]], its value likewise): for each
    wanted name, per row the code of its (last) value in a dictionary built in first-seen order, and each dictionary
    entry's representative entry. One hash table serves every name (the name is mixed into the hash); it starts
    small and doubles, so it stays in cache while values are few."""
    n = len(map_offsets) - 1
    names = len(name_offsets) - 1
    codes = np.full((names, n), -1, dtype=np.int32)
    bound = n * names + 1
    g_hash = np.empty(bound, dtype=np.uint64)
    g_rep = np.empty(bound, dtype=np.int64)
    g_name = np.empty(bound, dtype=np.int32)
    g_code = np.empty(bound, dtype=np.int32)
    reps = np.empty((names, n + 1), dtype=np.int64)
    counts = np.zeros(names, dtype=np.int64)
    total = 0
    cap = 1024
    table = np.full(cap, -1, dtype=np.int32)
    for row in range(n):
        for e in range(map_offsets[row], map_offsets[row + 1]):
            a = key_start[e]
            ln = key_end[e] - a
            j = -1
            for c in range(names):
                b = name_offsets[c]
                if name_offsets[c + 1] - b != ln:
                    continue
                same = True
                for t in range(ln):
                    if key_data[a + t] != name_data[b + t]:
                        same = False
                        break
                if same:
                    j = c
                    break
            if j < 0:
                continue
            if not val_valid[e]:
                codes[j, row] = -1
                continue
            va = val_start[e]
            vl = val_end[e] - va
            h = _FNV_OFFSET ^ np.uint64(j)
            for t in range(vl):
                h = (h ^ np.uint64(val_data[va + t])) * _FNV_PRIME
            h ^= h >> np.uint64(33)
            h *= _FMIX
            h ^= h >> np.uint64(33)
            slot = np.int64(h & np.uint64(cap - 1))
            while True:
                g = table[slot]
                if g < 0:
                    code = counts[j]
                    counts[j] = code + 1
                    reps[j, code] = e
                    g_hash[total] = h
                    g_rep[total] = e
                    g_name[total] = j
                    g_code[total] = code
                    table[slot] = total
                    total += 1
                    if 2 * total > cap:
                        cap *= 2
                        table = _rehash(g_hash, total, cap)
                    break
                r = g_rep[g]
                if g_hash[g] == h and g_name[g] == j and val_end[r] - val_start[r] == vl and \
                        _same_bytes(val_data, val_start[r], va, vl):
                    code = g_code[g]
                    break
                slot = (slot + 1) & (cap - 1)
            codes[j, row] = code
    return codes, reps, counts


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a string array as numpy views; offsets index the data, one per element plus one."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data


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
        offsets = np.asarray(props.offsets, dtype=np.int64)
        keys, items = props.keys, props.items
        if len(keys) == offsets[-1] - offsets[0]:
            offsets = offsets - offsets[0]
        key_offsets, key_data = _string_buffers(keys)
        val_offsets, val_data = _string_buffers(items)
        valid = np.ones(len(items), dtype=bool) if items.null_count == 0 else np.asarray(items.is_valid(), dtype=bool)
        codes, reps, counts = _extract(offsets, key_offsets[:-1], key_offsets[1:], key_data, val_offsets[:-1],
                                       val_offsets[1:], val_data, valid, name_offsets, name_data)
        return {name: Column(codes[j], items.take(pa.array(reps[j, :counts[j]])))
                for j, name in enumerate(names)}
    if not pa.types.is_string(props.type):
        raise TypeError(f"properties must be text or map<string, string>, got {props.type}")
    rows, keys, values, data = pairs_of(props)
    codes, reps, counts = _extract(rows, keys[:, 0], keys[:, 1], data, values[:, 0], values[:, 1], data,
                                   np.ones(len(keys), dtype=bool), name_offsets, name_data)
    return {name: Column(codes[j], span_strings(values[reps[j, :counts[j]]], data)) for j, name in enumerate(names)}


def column_from_strings(values: pa.Array | pa.ChunkedArray) -> Column:
    """A Column from a plain string column (e.g. the decoded `tags`), nulls as MISSING."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    enc = values.dictionary_encode()
    return Column(np.asarray(enc.indices.fill_null(MISSING), dtype=np.int32), enc.dictionary)
