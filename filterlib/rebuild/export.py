"""A rebuilt queue's units as the broker's files: consumequeue/<topic>/<qid>/ and consumequeue_ext/<topic>/<qid>/.

The units of one queue, in queue-offset order, are written as ConsumeQueue and ConsumeQueueExt write them: the ext
units first (their decorated addresses become the CQ units' tagsCode field), pre-blank units before a queue's first
offset, every file zero-padded to its mapped size. `encode_queue` does it in memory for one queue; `QueueWriter`
streams a queue of any length to disk with the same bytes (job 1's `--export-cq`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.kernel_cache import njit
from filterlib.store.commitlog import file_name
from filterlib.store.consumequeue import CQ_STORE_UNIT_SIZE, PRE_BLANK_SIZE, UNIT_DTYPE, encode_queue_files
from filterlib.store.consumequeue import cq_file_size as cq_size_of
from filterlib.store.consumequeue_ext import MIN_EXT_UNIT_SIZE, CqExtUnit, encode_ext_files, is_ext_addr


@dataclass(frozen=True)
class QueueFiles:
    """One queue's files: {20-digit name: bytes} for consumequeue and for consumequeue_ext ({} without ext)."""

    cq: dict[str, bytes]
    ext: dict[str, bytes]


def encode_queue(offsets: Sequence[int], commit_log_offsets: Sequence[int], sizes: Sequence[int],
                 tags_codes: Sequence[int], store_times: Sequence[int | None], bitmaps: Sequence[bytes | None],
                 cq_file_size: int, ext_file_size: int, ext: bool) -> QueueFiles:
    """The files of one queue from its units' columns (queue offsets consecutive and ascending).

    A unit with a store time gets an ext unit when `ext` is on (its address replaces the tagsCode field, unless
    the put failed, as for a unit over 32767 bytes); one without keeps its plain tagsCode. A queue without any ext
    unit has no ext file.
    """
    n = len(offsets)
    if n == 0:
        return QueueFiles({}, {})
    first = int(offsets[0])
    if any(int(o) != first + i for i, o in enumerate(offsets)):
        raise ValueError("queue offsets are not consecutive")
    fields = [int(t) for t in tags_codes]
    ext_files: dict[str, bytes] = {}
    if ext:
        idx = [i for i in range(n) if store_times[i] is not None]
        units = [CqExtUnit(fields[i], int(store_times[i]), bitmaps[i]) for i in idx]
        ext_files, addrs = encode_ext_files(units, ext_file_size) if units else ({}, [])
        for i, a in zip(idx, addrs, strict=True):
            if is_ext_addr(a):
                fields[i] = a
    cq = encode_queue_files(zip((int(o) for o in commit_log_offsets), (int(s) for s in sizes), fields, strict=True),
                            cq_file_size, first_queue_offset=first)
    return QueueFiles(cq, ext_files)


def write_queue(root: str, topic: str, queue_id: int, files: QueueFiles) -> int:
    """Write one queue's files under a store root (consumequeue/ and consumequeue_ext/); returns bytes written."""
    total = 0
    for sub, named in (("consumequeue", files.cq), ("consumequeue_ext", files.ext)):
        if not named:
            continue
        d = os.path.join(root, sub, topic, str(queue_id))
        os.makedirs(d, exist_ok=True)
        for name, data in named.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            total += len(data)
    return total


class QueueGap(ValueError):
    """A queue's offsets are not consecutive (a record missing or repeated): its files cannot be written."""

    def __init__(self, expected: int, found: int):
        super().__init__(f"queue offset {found} where {expected} was expected")
        self.expected = expected
        self.found = found


@njit(cache=True)
def _put_ext(i, n, unit_size, tags, store, bm_data, bm_start, buf, wpos, file_start, fields):
    """ConsumeQueueExt.put for units i.. into one file's buffer: (next unit, write position, file full)."""
    file_size = len(buf)
    long_min = np.int64(-9223372036854775807 - 1)
    while i < n:
        s = unit_size[i]
        if s < 0 or s > 32767:  # no ext unit, or the put fails (the CQ field keeps the tagsCode)
            i += 1
            continue
        if s > file_size - wpos - 4:
            buf[wpos] = 0xFF  # the short -1 end marker
            buf[wpos + 1] = 0xFF
            return i, wpos, True
        bl = s - 20
        vals = (np.int64(s), tags[i], store[i], np.int64(bl))
        widths = (2, 8, 8, 2)
        p = wpos
        for k in range(4):
            v = vals[k]
            w = widths[k]
            for b in range(w):
                buf[p + b] = (v >> np.int64(8 * (w - 1 - b))) & 0xFF
            p += w
        b0 = bm_start[i]
        for b in range(bl):
            buf[p + b] = bm_data[b0 + b]
        fields[i] = file_start + wpos + long_min
        wpos += s
        i += 1
    return i, wpos, False


class QueueWriter:
    """One queue's files written as units stream in (offsets consecutive, ascending): byte for byte what
    `encode_queue` returns, holding one ext file's buffer and no more (consume-queue units go straight to disk).

    `add` takes Arrow or numpy columns of a run of units; `close` pads the last files to their mapped size.
    """

    def __init__(self, root: str, topic: str, queue_id: int, cq_file_size: int, ext_file_size: int, ext: bool):
        self.cq_dir = os.path.join(root, "consumequeue", topic, str(queue_id))
        self.ext_dir = os.path.join(root, "consumequeue_ext", topic, str(queue_id))
        self.cq_size = cq_size_of(cq_file_size)
        self.ext_size = ext_file_size
        self.ext = ext
        self.next_offset: int | None = None
        self.first_offset: int | None = None
        self.units = 0
        self.cq_files: list[str] = []
        self.ext_files: list[str] = []
        self.bytes = 0
        self._cq = None
        self._cq_used = 0
        self._cq_start = 0
        self._ebuf: np.ndarray | None = None
        self._efile = 0
        self._ewpos = 0

    def _open_cq(self, start: int) -> None:
        os.makedirs(self.cq_dir, exist_ok=True)
        name = file_name(start)
        self._cq = open(os.path.join(self.cq_dir, name), "wb")  # noqa: SIM115 (closed in _close_cq)
        self.cq_files.append(name)
        self._cq_start, self._cq_used = start, 0

    def _close_cq(self) -> None:
        if self._cq is not None:
            self._cq.write(bytes(self.cq_size - self._cq_used))
            self._cq.close()
            self.bytes += self.cq_size
            self._cq = None

    def _write_cq(self, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            if self._cq_used == self.cq_size:
                nxt = self._cq_start + self.cq_size
                self._close_cq()
                self._open_cq(nxt)
            k = min(len(data) - pos, self.cq_size - self._cq_used)
            self._cq.write(data[pos: pos + k])
            self._cq_used += k
            pos += k

    def _flush_ext(self) -> None:
        os.makedirs(self.ext_dir, exist_ok=True)
        name = file_name(self._efile * self.ext_size)
        with open(os.path.join(self.ext_dir, name), "wb") as f:
            f.write(self._ebuf.tobytes())
        self.ext_files.append(name)
        self.bytes += self.ext_size

    def add(self, queue_offsets, commit_log_offsets, sizes, tags_codes, store_times, bitmaps) -> None:
        """Append units: queue offsets continuing the queue's; store_times and bitmaps Arrow (nulls: none)."""
        qo = _np(queue_offsets, np.int64)
        n = len(qo)
        if n == 0:
            return
        if self.next_offset is None:
            self.first_offset = self.next_offset = int(qo[0])
            start_byte = self.first_offset * CQ_STORE_UNIT_SIZE
            self._open_cq(start_byte - start_byte % self.cq_size)
            pre = (start_byte - self._cq_start) // CQ_STORE_UNIT_SIZE
            self._write_cq(np.array([(0, PRE_BLANK_SIZE, 0)] * pre, dtype=UNIT_DTYPE).tobytes())
            if self.ext:
                self._ebuf = np.zeros(self.ext_size, dtype=np.uint8)
        bad = np.flatnonzero(qo != np.arange(self.next_offset, self.next_offset + n, dtype=np.int64))
        if len(bad):
            raise QueueGap(self.next_offset + int(bad[0]), int(qo[bad[0]]))
        fields = _np(tags_codes, np.int64).copy()
        if self.ext:
            self._put(fields, store_times, bitmaps)
        units = np.empty(n, dtype=UNIT_DTYPE)
        units["offset"] = _np(commit_log_offsets, np.int64)
        units["size"] = _np(sizes, np.int32)
        units["tags_code"] = fields
        self._write_cq(units.tobytes())
        self.next_offset += n
        self.units += n

    def _put(self, fields: np.ndarray, store_times, bitmaps) -> None:
        n = len(fields)
        st = pa.array(store_times, type=pa.int64()) if not isinstance(store_times, pa.Array) else store_times
        bm = pa.array(bitmaps, type=pa.binary()) if not isinstance(bitmaps, pa.Array) else bitmaps
        bm = bm.cast(pa.large_binary())
        has = ~st.is_null().to_numpy(zero_copy_only=False)
        lengths = pc.fill_null(pc.binary_length(bm), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        unit_size = np.where(has, MIN_EXT_UNIT_SIZE + lengths, -1).astype(np.int64)
        offsets = np.frombuffer(bm.buffers()[1], dtype=np.int64)[bm.offset: bm.offset + n + 1] if n else \
            np.zeros(1, np.int64)
        data_buf = bm.buffers()[2]
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        store = pc.fill_null(st, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        tags = fields.copy()
        starts = np.ascontiguousarray(offsets[:-1])
        i = 0
        while True:
            i, self._ewpos, full = _put_ext(i, n, unit_size, tags, store, data, starts, self._ebuf, self._ewpos,
                                            self._efile * self.ext_size, fields)
            if not full:
                return
            if self._ewpos == 0:
                raise ValueError(f"an ext unit of {unit_size[i]} bytes does not fit an ext file of "
                                 f"{self.ext_size} bytes")
            self._flush_ext()
            self._efile += 1
            self._ebuf[:] = 0
            self._ewpos = 0

    def close(self) -> None:
        """Pad and close the last consume-queue file, write the last ext file (none when no unit of the queue had
        an ext unit: the broker creates an ext file on its first put, as for multi-dispatch queues)."""
        self._close_cq()
        if self._ebuf is not None and self._ewpos > 0:
            self._flush_ext()
        self._ebuf = None

    def abort(self) -> None:
        """Remove what was written (a queue that cannot be exported leaves no files)."""
        if self._cq is not None:
            self._cq.close()
            self._cq = None
        self._ebuf = None
        for d, names in ((self.cq_dir, self.cq_files), (self.ext_dir, self.ext_files)):
            for name in names:
                p = os.path.join(d, name)
                if os.path.exists(p):
                    os.remove(p)
        self.cq_files, self.ext_files, self.bytes = [], [], 0


def _np(col, dtype) -> np.ndarray:
    if isinstance(col, (pa.Array, pa.ChunkedArray)):
        col = col.to_numpy(zero_copy_only=False)
    return np.asarray(col, dtype=dtype)
