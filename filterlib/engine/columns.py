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
import pyarrow.compute as pc

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


def extract_properties(props: pa.Array | pa.ChunkedArray, names: Iterable[str]) -> dict[str, Column]:
    """Columns of the named properties from a map<string,string> array (a null map is a message without any)."""
    arr = _map_array(props)
    n = len(arr)
    names = sorted(set(names))
    out: dict[str, Column] = {}
    if not names:
        return out
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    keys = arr.keys.slice(lo, hi - lo) if len(arr.keys) != hi - lo else arr.keys
    items = arr.items.slice(lo, hi - lo) if len(arr.items) != hi - lo else arr.items
    for name in names:
        hits = np.flatnonzero(np.asarray(pc.equal(keys, name).fill_null(False), dtype=bool))
        codes = np.full(n, MISSING, dtype=np.int32)
        if len(hits) == 0:
            out[name] = Column(codes, pa.array([], pa.string()))
            continue
        rows = np.searchsorted(offsets, hits + lo, side="right") - 1
        last = np.ones(len(rows), dtype=bool)
        last[:-1] = rows[1:] != rows[:-1]
        hits, rows = hits[last], rows[last]
        enc = items.take(pa.array(hits)).dictionary_encode()
        idx = enc.indices
        vals = np.asarray(idx.fill_null(MISSING), dtype=np.int32)
        codes[rows] = vals
        out[name] = Column(codes, enc.dictionary)
    return out


def column_from_strings(values: pa.Array | pa.ChunkedArray) -> Column:
    """A Column from a plain string column (e.g. the decoded `tags`), nulls as MISSING."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    enc = values.dictionary_encode()
    return Column(np.asarray(enc.indices.fill_null(MISSING), dtype=np.int32), enc.dictionary)
