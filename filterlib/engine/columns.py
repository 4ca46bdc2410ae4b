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


def _map_array(props: pa.Array | pa.ChunkedArray) -> pa.MapArray:
    """One contiguous MapArray from a column that may be chunked."""
    if isinstance(props, pa.ChunkedArray):
        props = props.combine_chunks() if props.num_chunks != 1 else props.chunk(0)
    if not pa.types.is_map(props.type):
        raise TypeError(f"properties must be map<string, string>, got {props.type}")
    return props


@njit(cache=True)
def _match_keys(key_offsets, key_data, lo, hi, name_offsets, name_data):
    """Per map entry in [lo, hi): the index of the wanted name it spells, else -1 (one pass for all names)."""
    out = np.full(hi - lo, -1, dtype=np.int16)
    names = len(name_offsets) - 1
    for e in range(lo, hi):
        a = key_offsets[e]
        ln = key_offsets[e + 1] - a
        for j in range(names):
            b = name_offsets[j]
            if name_offsets[j + 1] - b != ln:
                continue
            same = True
            for t in range(ln):
                if key_data[a + t] != name_data[b + t]:
                    same = False
                    break
            if same:
                out[e - lo] = j
                break
    return out


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a string array as numpy views; offsets index the data, one per element plus one."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data


def extract_properties(props: pa.Array | pa.ChunkedArray, names: Iterable[str]) -> dict[str, Column]:
    """Columns of the named properties from a map<string,string> array (a null map is a message without any)."""
    arr = _map_array(props)
    n = len(arr)
    names = sorted(set(names))
    if not names:
        return {}
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    keys, items = arr.keys, arr.items
    if len(keys) == hi - lo and lo:
        offsets = offsets - lo
        lo, hi = 0, hi - lo
    encoded = [name.encode("utf-8", "surrogatepass") for name in names]
    name_offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    name_offsets[1:] = np.cumsum([len(b) for b in encoded])
    key_offsets, key_data = _string_buffers(keys)
    which = _match_keys(key_offsets, key_data, lo, hi, name_offsets,
                        np.frombuffer(b"".join(encoded), dtype=np.uint8))
    parent = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    out: dict[str, Column] = {}
    for j, name in enumerate(names):
        hits = np.flatnonzero(which == j)
        codes = np.full(n, MISSING, dtype=np.int32)
        if len(hits) == 0:
            out[name] = Column(codes, pa.array([], pa.string()))
            continue
        rows = parent[hits]
        last = np.ones(len(rows), dtype=bool)
        last[:-1] = rows[1:] != rows[:-1]
        hits, rows = hits[last], rows[last]
        enc = items.take(pa.array(hits + lo)).dictionary_encode()
        codes[rows] = np.asarray(enc.indices.fill_null(MISSING), dtype=np.int32)
        out[name] = Column(codes, enc.dictionary)
    return out


def column_from_strings(values: pa.Array | pa.ChunkedArray) -> Column:
    """A Column from a plain string column (e.g. the decoded `tags`), nulls as MISSING."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    enc = values.dictionary_encode()
    return Column(np.asarray(enc.indices.fill_null(MISSING), dtype=np.int32), enc.dictionary)
