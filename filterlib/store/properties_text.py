"""The `messages` table's properties column: a record's parsed properties written back as one string, and read back.

The broker parses a record's PROPERTIES into a map (`filterlib.store.properties`: empty keys and values dropped, a
later duplicate key winning). The table stores that map as text, the pairs in the record's order as
`key` 0x01 `value`, joined by 0x02, with no trailing separator: one string column, which Parquet writes and reads
several times cheaper than a map of two string columns (issue 28). The text is canonical (no empty key or value, no
repeated key, no separator in a key), so it converts back to exactly the map: `map_column` here, Spark SQL's
`str_to_map(properties, '\\u0002', '\\u0001')` (`SQL_MAP`) in a query. A value may hold 0x01 (the broker splits a
pair at its first one); neither a key nor a value holds 0x02.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from filterlib.kernel_cache import njit
from filterlib.store.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

MAP_TYPE = pa.map_(pa.string(), pa.string())
"""The properties as a map: what the decode produces and what readers hand users."""
SQL_MAP = "if(properties = '', map(), str_to_map(properties, '\\u0002', '\\u0001'))"
"""The Spark SQL expression of a messages row's properties as map<string,string> (`properties['region']` is then
`str_to_map(properties, '\\u0002', '\\u0001')['region']`)."""
SQL_TEXT = ("array_join(transform(filter(map_entries(properties), e -> e.value IS NOT NULL), "
            "e -> concat(e.key, '\\u0001', e.value)), '\\u0002')")
"""The Spark SQL expression of a map-typed properties column (a table written before the text form) as the text:
`to_text` of the map, in its order; a null map stays null (`jobs.upgrade` converts an older messages table)."""


def to_text(props: Mapping[str, str | None] | None) -> str | None:
    """One message's properties as the table's text (null values skipped; None stays None)."""
    if props is None:
        return None
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None)


def from_text(text: str | None) -> dict[str, str] | None:
    """One message's properties from the table's text (its map, in order)."""
    if text is None:
        return None
    out: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR) if text else ():
        key, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            out[key] = value
    return out


def as_dict(value: str | Mapping[str, str] | list | None) -> dict[str, str] | None:
    """One message's properties as a dict, from a row of either form: the text, or the map older tables hold (a
    dict, or the (key, value) pairs pyarrow and Spark give a map)."""
    if value is None or isinstance(value, str):
        return from_text(value)
    return dict(value)


def string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a string array as numpy views, whatever its slice offset: element i is
    data[offsets[i]:offsets[i + 1]]."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data


def map_buffers(props: pa.MapArray) -> tuple[np.ndarray, ...]:
    """A map column's buffers as numpy: (entry offsets per row, key offsets, key bytes, value offsets, value bytes,
    value validity); row r's entries are [map_off[r], map_off[r + 1]), entry e's key key_data[key_off[e]:key_off[e +
    1]]."""
    map_off = np.asarray(props.offsets, dtype=np.int64)
    keys, items = props.keys, props.items
    if len(keys) == map_off[-1] - map_off[0]:
        map_off = map_off - map_off[0]
    key_off, key_data = string_buffers(keys)
    val_off, val_data = string_buffers(items)
    valid = np.ones(len(items), dtype=bool) if items.null_count == 0 else np.asarray(items.is_valid(), dtype=bool)
    return map_off, key_off, key_data, val_off, val_data, valid


@njit(cache=True)
def _to_text(map_off, key_off, key_data, val_off, val_data, val_valid, out_off, out_data):
    """Row r's entries [map_off[r], map_off[r + 1]) written as key 0x01 value pairs joined by 0x02 (null values
    skipped) into out_data; out_off the rows' offsets."""
    q = 0
    n = len(map_off) - 1
    for r in range(n):
        out_off[r] = q
        first = True
        for e in range(map_off[r], map_off[r + 1]):
            if not val_valid[e]:
                continue
            if not first:
                out_data[q] = 2
                q += 1
            first = False
            for t in range(key_off[e], key_off[e + 1]):
                out_data[q] = key_data[t]
                q += 1
            out_data[q] = 1
            q += 1
            for t in range(val_off[e], val_off[e + 1]):
                out_data[q] = val_data[t]
                q += 1
    out_off[n] = q


def text_column(props: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A map<string,string> column as the table's text column (a null map stays null); a string column as is."""
    if isinstance(props, pa.ChunkedArray):
        props = props.combine_chunks() if props.num_chunks != 1 else props.chunk(0)
    if pa.types.is_string(props.type):
        return props
    n = len(props)
    map_off, key_off, key_data, val_off, val_data, valid = map_buffers(props)
    size = int(key_off[-1] - key_off[0] + val_off[-1] - val_off[0] + 2 * (len(key_off) - 1))
    out_off = np.empty(n + 1, dtype=np.int32)
    out = pa.allocate_buffer(size)
    out_data = np.frombuffer(out, dtype=np.uint8)
    _to_text(map_off, key_off, key_data, val_off, val_data, valid, out_off, out_data)
    mask = props.is_valid().buffers()[1] if props.null_count else None  # a bitmap from bit 0, slice or not
    return pa.Array.from_buffers(pa.string(), n, [mask, pa.py_buffer(out_off), out.slice(0, int(out_off[n]))],
                                 null_count=props.null_count)


_U1 = np.uint64(1)


@njit(cache=True)
def _split_pairs(off, data, rows, keys, values):
    """Each row's pairs as key and value spans into data (a pair without 0x01, or with an empty key or value, left
    out, as the broker's parse leaves it); rows the rows' first pairs. Returns the pairs written."""
    e = 0
    n = len(off) - 1
    for r in range(n):
        rows[r] = e
        i = np.uint64(off[r])
        end = np.uint64(off[r + 1])
        while i < end:
            s = i
            while s < end:
                c = data[s]
                if c == 1 or c == 2:
                    break
                s += _U1
            if s == end or data[s] == 2:
                i = s + _U1
                continue
            j = s + _U1
            while j < end and data[j] != 2:
                j += _U1
            if s > i and j > s + _U1:
                keys[e, 0] = i
                keys[e, 1] = s
                values[e, 0] = s + _U1
                values[e, 1] = j
                e += 1
            i = j + _U1
    rows[n] = e
    return e


@njit(cache=True)
def _gather(spans, data, out_off, out_data):
    """The spans' bytes back to back: a string column's offsets and data."""
    q = 0
    for k in range(len(spans)):
        out_off[k] = q
        for t in range(spans[k, 0], spans[k, 1]):
            out_data[q] = data[t]
            q += 1
    out_off[len(spans)] = q


def span_strings(spans: np.ndarray, data: np.ndarray) -> pa.Array:
    """The (start, end) spans of data as a string array."""
    out_off = np.empty(len(spans) + 1, dtype=np.int32)
    size = int((spans[:, 1] - spans[:, 0]).sum()) if len(spans) else 0
    out_data = np.empty(size, dtype=np.uint8)
    _gather(spans, data, out_off, out_data)
    return pa.Array.from_buffers(pa.string(), len(spans), [None, pa.py_buffer(out_off), pa.py_buffer(out_data)])


def pairs_of(props: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A text column's pairs: (rows, keys, values, data): row r's pairs are [rows[r], rows[r + 1]), pair e's key
    data[keys[e, 0]:keys[e, 1]] and its value likewise; a null text has none."""
    if pa.types.is_large_string(props.type):
        props = props.cast(pa.string())
    off, data = string_buffers(props)
    total = int(off[-1] - off[0]) // 3 + len(props) + 1  # a pair takes 3 bytes at least (np.empty: only the pages
    # written are faulted in)
    rows = np.empty(len(props) + 1, dtype=np.int32)
    keys = np.empty((total, 2), dtype=np.int64)
    values = np.empty((total, 2), dtype=np.int64)
    e = _split_pairs(off, data, rows, keys, values)
    return rows, keys[:e], values[:e], data


def map_column(props: pa.Array | pa.ChunkedArray) -> pa.MapArray:
    """The table's text column as map<string,string> (a null text stays null); a map column as is. Old tables
    hold the map itself: every reader goes through here and reads either."""
    if isinstance(props, pa.ChunkedArray):
        props = props.combine_chunks() if props.num_chunks != 1 else props.chunk(0)
    if pa.types.is_map(props.type):
        return props
    map_off, keys, values, data = pairs_of(props)
    invalid = None
    if props.null_count:  # a null offset is a null map
        invalid = np.zeros(len(map_off), dtype=bool)
        invalid[:-1] = ~np.asarray(props.is_valid(), dtype=bool)
    offsets = pa.array(map_off, type=pa.int32(), mask=invalid)
    return pa.MapArray.from_arrays(offsets, span_strings(keys, data), span_strings(values, data))
