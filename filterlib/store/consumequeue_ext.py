"""ConsumeQueueExt files: variable-size units (tagsCode, store time, filter bitmap) and ext address decoration."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from filterlib.kernel_cache import njit
from filterlib.store import fs as sfs
from filterlib.store.commitlog import file_name
from filterlib.store.consumequeue import queue_files

DEFAULT_EXT_FILE_SIZE = 48 * 1024 * 1024
END_BLANK_DATA_LENGTH = 4
MIN_EXT_UNIT_SIZE = 20
MAX_EXT_UNIT_SIZE = 32767
LONG_MIN = -(1 << 63)
MAX_ADDR = -(1 << 31) - 1
MAX_REAL_OFFSET = MAX_ADDR - LONG_MIN


def _wrap64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def is_ext_addr(address: int) -> bool:
    """ConsumeQueueExt.isExtAddr: a CQ tagsCode field ≤ Integer.MIN_VALUE - 1 points into the ext files."""
    return address <= MAX_ADDR


def decorate(offset: int) -> int:
    """Real ext offset → the address stored in a CQ unit's tagsCode field (offset + Long.MIN_VALUE)."""
    return offset if is_ext_addr(offset) else _wrap64(offset + LONG_MIN)


def undecorate(address: int) -> int:
    """CQ tagsCode ext address → real ext byte offset (address - Long.MIN_VALUE)."""
    return _wrap64(address - LONG_MIN) if is_ext_addr(address) else address


@dataclass(frozen=True)
class CqExtUnit:
    """One ext unit: the real tagsCode, the record's store time and the filter bitmap (None when absent)."""

    tags_code: int
    msg_store_time: int
    filter_bitmap: bytes | None = None

    @property
    def size(self) -> int:
        """Whole unit length in bytes (20 + bitmap length)."""
        return MIN_EXT_UNIT_SIZE + (len(self.filter_bitmap) if self.filter_bitmap else 0)

    def encode(self) -> bytes:
        """The unit's bytes (CqExtUnit.write)."""
        bm = self.filter_bitmap or b""
        return struct.pack(">hqqh", MIN_EXT_UNIT_SIZE + len(bm), self.tags_code, self.msg_store_time, len(bm)) + bm


def read_unit(data: bytes, pos: int) -> CqExtUnit | None:
    """The unit at pos (CqExtUnit.read): None when fewer than 2 bytes remain or size < 1."""
    if pos + 2 > len(data):
        return None
    (size,) = struct.unpack_from(">h", data, pos)
    if size < 1 or pos + MIN_EXT_UNIT_SIZE > len(data):
        return None
    tags_code, store_time, bm_size = struct.unpack_from(">qqh", data, pos + 2)
    if bm_size < 1:
        return CqExtUnit(tags_code, store_time, None)
    bm = bytes(data[pos + 20: pos + 20 + bm_size])
    if len(bm) != bm_size:
        return None
    return CqExtUnit(tags_code, store_time, bm)


def iter_file_units(data: bytes, file_start: int = 0) -> Iterable[tuple[int, CqExtUnit]]:
    """(real offset, unit) for each unit of one ext file; stops at size ≤ 0 (-1 end marker or zeros)."""
    pos = 0
    while pos + 2 <= len(data):
        unit = read_unit(data, pos)
        if unit is None:
            return
        (size,) = struct.unpack_from(">h", data, pos)
        yield file_start + pos, unit
        pos += size


def load_ext_files(queue_dir: str) -> dict[int, bytes]:
    """{file start offset: bytes} of one (topic, queueId) ext directory, for `lookup`."""
    out: dict[int, bytes] = {}
    for start, path in queue_files(queue_dir):
        out[start] = sfs.read_bytes(path)
    return out


def read_ext_queue(queue_dir: str) -> dict[int, CqExtUnit]:
    """All units of one (topic, queueId) ext directory keyed by decorated address (what CQ units store).

    A walk of every file; `lookup` instead resolves one address the way the broker does (the unit it points to,
    nothing else), which is what a reader following CQ units needs.
    """
    out: dict[int, CqExtUnit] = {}
    for start, path in queue_files(queue_dir):
        data = sfs.read_bytes(path)
        for off, unit in iter_file_units(data, start):
            out[decorate(off)] = unit
    return out


def lookup(files: dict[int, bytes], file_size: int, address: int) -> CqExtUnit | None:
    """ConsumeQueueExt.get: the unit an ext address points to, from {file start: bytes}; None if absent/invalid.

    file_size is mappedFileSizeConsumeQueueExt. As findMappedFileByOffset(realOffset, realOffset == 0) does, real
    offset 0 falls back to the first file when no file starts at 0 (its first unit is read).
    """
    if not is_ext_addr(address):
        return None
    real = undecorate(address)
    start = real - real % file_size
    data = files.get(start)
    if data is None and real == 0 and files:
        data = files[min(files)]
    return None if data is None else read_unit(data, real - start)


def encode_ext_files(units: Iterable[CqExtUnit], file_size: int = DEFAULT_EXT_FILE_SIZE
                     ) -> tuple[dict[str, bytes], list[int]]:
    """Write units as ConsumeQueueExt.put does; returns ({20-digit name: full file bytes}, decorated addresses).

    A unit goes to the current file when size ≤ fileSize - writePos - 4, otherwise the file gets a short -1 end
    marker at writePos and the unit moves to the next file. Files are zero-padded to file_size; an address is 1
    (put failed) for a unit larger than 32767 bytes, as the broker returns.
    """
    files: list[bytearray] = [bytearray(file_size)]
    wpos = 0
    addrs: list[int] = []
    for u in units:
        size = u.size
        if size > MAX_EXT_UNIT_SIZE:
            addrs.append(1)
            continue
        if size > file_size - wpos - END_BLANK_DATA_LENGTH:
            struct.pack_into(">h", files[-1], wpos, -1)
            files.append(bytearray(file_size))
            wpos = 0
        data = u.encode()
        files[-1][wpos: wpos + size] = data
        addrs.append(decorate((len(files) - 1) * file_size + wpos))
        wpos += size
    return {file_name(i * file_size): bytes(b) for i, b in enumerate(files)}, addrs


@dataclass
class ExtColumns:
    """Consume-queue units' ext side as the broker's iterator resolves it, per unit: the tagsCode the filter
    gets (legal False: null), whether an ext unit was read, its store time, its bitmap (n, width) and length."""

    tags_code: np.ndarray
    tags_code_legal: np.ndarray
    has_ext: np.ndarray
    store_time: np.ndarray
    bitmaps: np.ndarray
    bitmap_length: np.ndarray


@njit(cache=True)
def _be(blob, p, n):
    v = np.int64(0)
    for k in range(n):
        v = (v << np.int64(8)) | np.int64(blob[p + k])
    return v


@njit(cache=True)
def _resolve(fields, starts, bases, lengths, blob, file_size, tags, has_ext, store_time, bm_pos, bm_len):
    """For each ext address: `lookup` + `read_unit` over the concatenated files (blob; file f is
    blob[bases[f]:bases[f] + lengths[f]] and starts at ext offset starts[f])."""
    long_min = np.int64(-9223372036854775807 - 1)
    max_addr = np.int64(-2147483649)
    for i in range(len(fields)):
        a = fields[i]
        if a > max_addr or len(starts) == 0:
            continue
        real = a - long_min
        start = real - real % file_size
        f = np.searchsorted(starts, start)
        if f >= len(starts) or starts[f] != start:
            if real != 0:
                continue
            f = 0
        pos = real - start
        n = lengths[f]
        b = bases[f]
        if pos + 2 > n:
            continue
        size = _be(blob, b + pos, 2)
        if size >= 32768:
            size -= 65536
        if size < 1 or pos + 20 > n:
            continue
        t = _be(blob, b + pos + 2, 8)
        st = _be(blob, b + pos + 10, 8)
        bl = _be(blob, b + pos + 18, 2)
        if bl >= 32768:
            bl -= 65536
        if bl >= 1:
            if pos + 20 + bl > n:
                continue
            bm_pos[i] = b + pos + 20
            bm_len[i] = bl
        tags[i] = t
        store_time[i] = st
        has_ext[i] = True


def resolve_columns(tags_field: np.ndarray, files: dict[int, bytes], file_size: int) -> ExtColumns:
    """Follow every ext address of a queue's tagsCode column as `lookup` does (plain codes pass through); an
    address that does not resolve, or resolves to another address, is the broker's null tagsCode."""
    fields = np.asarray(tags_field, dtype=np.int64)
    n = len(fields)
    tags = fields.copy()
    has_ext = np.zeros(n, dtype=bool)
    store_time = np.zeros(n, dtype=np.int64)
    bm_pos = np.zeros(n, dtype=np.int64)
    lengths = np.full(n, -1, dtype=np.int64)
    order = sorted(files)
    sizes = np.array([len(files[k]) for k in order], dtype=np.int64)
    bases = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) if order else np.zeros(0, np.int64)
    blob = np.frombuffer(b"".join(files[k] for k in order), dtype=np.uint8)
    _resolve(fields, np.array(order, dtype=np.int64), bases, sizes, blob, file_size, tags, has_ext, store_time,
             bm_pos, lengths)
    legal = tags > MAX_ADDR  # CqUnit.isTagsCodeValid: an address left unresolved is a null tagsCode
    width = int(lengths.max()) if n and lengths.max() > 0 else 0
    bitmaps = np.zeros((n, width), dtype=np.uint8)
    for k in np.unique(lengths[lengths > 0]).tolist():
        rows = np.flatnonzero(lengths == k)
        bitmaps[rows, :k] = blob[bm_pos[rows, None] + np.arange(k)]
    return ExtColumns(tags, legal, has_ext, store_time, bitmaps, lengths)
