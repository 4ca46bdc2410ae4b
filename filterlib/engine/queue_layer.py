"""The consume-queue layer over whole columns: tag hash codes, the broker's tag check, the client's exact re-check,
the ext bitmap CommitLogDispatcherCalcBitMap writes, and the bloom test of a subscription against bitmaps.

Each function is the vectorised twin of a row function in `filterlib.tags` / `filterlib.bloom` /
`filterlib.registry`, with the same rules (and the same corner cases) per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.bloom import BloomFilter, BloomFilterData, hit_matrix
from filterlib.engine.columns import MISSING, Column, column_from_strings
from filterlib.kernel_cache import njit
from filterlib.tags import SUB_ALL, Subscription, tags_code


def tags_codes(tags: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, present): Java String.hashCode of each row's tag, computed once per distinct tag."""
    col = column_from_strings(tags)
    per_value = np.fromiter((tags_code(t) for t in col.pylist()), dtype=np.int64, count=col.cardinality)
    ext = np.append(per_value, np.int64(0))
    return ext[col.codes], col.codes != MISSING


@njit(cache=True)
def _tag_hits(codes, legal, wanted, out):
    """out[i]: unit i's tagsCode, as the int the broker compares, is one of `wanted`, or it is null (not legal)."""
    for i in range(len(codes)):
        hit = not legal[i]
        if not hit:
            c = np.int64(np.int32(codes[i]))
            for w in wanted:
                if c == w:
                    hit = True
                    break
        out[i] = hit


def tag_hash_check(codes: np.ndarray, sub: Subscription, legal: np.ndarray | None = None) -> np.ndarray:
    """`isMatchedByConsumeQueue` for a tag subscription per unit; `legal` False is a null tagsCode (passes)."""
    n = len(codes)
    if sub.sub_string == SUB_ALL:
        return np.ones(n, dtype=bool)
    hit = np.empty(n, dtype=bool)
    _tag_hits(np.asarray(codes, dtype=np.int64), np.ones(n, bool) if legal is None else np.asarray(legal, dtype=bool),
              np.fromiter(sub.codes, dtype=np.int64, count=len(sub.codes)), hit)
    return hit


def client_check(tags: pa.Array | pa.ChunkedArray, sub: Subscription, col: Column | None = None) -> np.ndarray:
    """The client's re-check per message: keep all for an empty tag set, else the exact TAGS string (`col`: the
    tags as a Column already, when several subscriptions check the same messages)."""
    n = len(tags)
    if not sub.tags or sub.class_filter_mode:
        return np.ones(n, dtype=bool)
    if col is None:
        col = column_from_strings(tags)
    wanted = [t for t in sub.tags if not any("\ud800" <= ch <= "\udfff" for ch in t)]
    if not wanted or col.cardinality == 0:
        return np.zeros(n, dtype=bool)
    per_value = np.asarray(pc.is_in(col.values, value_set=pa.array(wanted, pa.string())).fill_null(False),
                           dtype=bool)
    return np.append(per_value, False)[col.codes]


@njit(cache=True)
def _assemble(matches, positions, out_t):
    """OR each matching filter's bit positions into its rows' bitmaps, held byte-major (out_t[byte, row]; BitsArray
    order: byte p/8, bit p%8): one branch-free pass over the rows per filter and position."""
    g_count, n = matches.shape
    for g in range(g_count):
        m = matches[g]
        for j in range(positions.shape[1]):
            p = positions[g, j]
            row = out_t[p >> 3]
            bit = np.uint8(p & 7)
            for i in range(n):
                row[i] |= np.uint8(m[i]) << bit


def _hashable(bloom: BloomFilter, data: BloomFilterData) -> bool:
    """Whether `hashTo(data, bits)` completes: data valid for the filter and every position inside the bits."""
    if not bloom.is_valid(data):
        return False
    limit = bloom.byte_length * 8
    return all(0 <= p < limit for p in data.bit_pos)


def ext_bitmaps(matches: Sequence[np.ndarray], datas: Sequence[BloomFilterData | None], bloom: BloomFilter,
                n: int) -> tuple[np.ndarray, np.ndarray]:
    """CalcBitMap over a batch of one topic: (bitmaps (n, ceil(m/8)) uint8, written (n,) bool).

    matches[g] is filter g's TRUE mask (masks, or one (filters, n) bool array), datas[g] its bloom data (None: the
    broker skips the filter, as it does a filter that did not compile — pass None for those). A row where a matching
    filter's data cannot be hashed (another filter's size, a position outside the bits) loses its whole bitmap, as
    the broker's catch does.
    """
    if len(matches) != len(datas):
        raise ValueError(f"{len(matches)} filters' matches, {len(datas)} filters' bloom data")
    out_t = np.zeros((bloom.byte_length, n), dtype=np.uint8)
    written = np.ones(n, dtype=bool)
    good, good_pos = [], []
    for g, data in enumerate(datas):
        if data is None:
            continue
        if _hashable(bloom, data):
            good.append(g)
            good_pos.append(data.bit_pos)
        else:
            written &= ~np.asarray(matches[g], dtype=bool)
    if good:
        if isinstance(matches, np.ndarray) and matches.ndim == 2:
            chosen = matches[good] if len(good) < len(matches) else matches
        else:
            chosen = np.stack([np.asarray(matches[g], dtype=bool) for g in good])
        _assemble(np.ascontiguousarray(chosen, dtype=bool), np.asarray(good_pos, dtype=np.int64), out_t)
    out = np.ascontiguousarray(out_t.T)
    out[~written] = 0
    return out, written


def to_fixed_binary(bitmaps: np.ndarray, written: np.ndarray | None = None) -> pa.FixedSizeBinaryArray:
    """(n, b) uint8 bitmaps as a fixed_size_binary(b) column (null where not written)."""
    n, width = bitmaps.shape
    validity = None
    if written is not None and not np.all(written):
        validity = pa.py_buffer(np.packbits(np.asarray(written, dtype=bool), bitorder="little").tobytes())
    data = pa.py_buffer(np.ascontiguousarray(bitmaps, dtype=np.uint8).tobytes())
    return pa.Array.from_buffers(pa.binary(width), n, [validity, data])


def bitmap_matrix(column: pa.Array | pa.ChunkedArray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(bitmaps (n, width) uint8, usable (n,) bool) from a binary column: null or other-length rows unusable."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    if pa.types.is_fixed_size_binary(column.type) and column.type.byte_width == width:
        usable = np.asarray(column.is_valid(), dtype=bool)
        raw = column.buffers()[1]
        mat = np.frombuffer(raw, dtype=np.uint8)[column.offset * width:(column.offset + n) * width]
        return mat.reshape(n, width), usable
    lengths = np.asarray(pc.binary_length(column).fill_null(-1), dtype=np.int64)
    usable = lengths == width
    mat = np.zeros((n, width), dtype=np.uint8)
    idx = np.flatnonzero(usable)
    if len(idx):
        mat[idx] = np.frombuffer(b"".join(column.take(pa.array(idx)).to_pylist()), dtype=np.uint8).reshape(-1, width)
    return mat, usable


def bloom_hits(bitmaps: np.ndarray, data: BloomFilterData, bloom: BloomFilter) -> np.ndarray:
    """`BloomFilter.isHit(data, bits)` per row of an (n, ceil(m/8)) bitmap matrix (data must be valid)."""
    if not bloom.is_valid(data):
        raise ValueError(f"Bloom filter data may not belong to this filter! {data}, {bloom!r}")
    return hit_matrix(bitmaps, np.asarray([data.bit_pos], dtype=np.int64))[:, 0]
