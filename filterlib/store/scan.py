"""Vectorised CommitLog decoding to Arrow: self-synchronising byte-range splits, damage reports, byte accounting.

A split [start, end) of a commitlog file owns the records that *start* inside it. The split at 0 starts at the
file's first record; any other split finds its first record by searching for a message magic whose PHYSICALOFFSET
field equals the file's base offset plus the candidate position (and which validates). Each split reports where
its record chain left the range and what it found there, so `merge_reports` can rebuild the whole-file verdict —
the broker scanner's: valid data ends at the first BLANK, illegal magic, CRC mismatch or torn record — without
any split reading another's bytes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.errors import StoreFormatError
from filterlib.store import _kernels as K
from filterlib.store import fs as sfs
from filterlib.store.commitlog import REASONS, decode_record, is_mapped_file_name, parse_delay_levels
from filterlib.store.properties_text import to_text

if TYPE_CHECKING:
    from filterlib.brokerversion import RecoveryRules

SCHEMA = pa.schema([
    ("position", pa.int64()),
    ("store_size", pa.int32()),
    ("magic_code", pa.int32()),
    ("body_crc", pa.int32()),
    ("queue_id", pa.int32()),
    ("flag", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commit_log_offset", pa.int64()),
    ("sys_flag", pa.int32()),
    ("born_timestamp", pa.int64()),
    ("born_host", pa.string()),
    ("store_timestamp", pa.int64()),
    ("store_host", pa.string()),
    ("reconsume_times", pa.int32()),
    ("prepared_transaction_offset", pa.int64()),
    ("body", pa.binary()),
    ("body_size", pa.int32()),
    ("topic", pa.string()),
    ("properties", pa.string()),
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("uniq_key", pa.string()),
    ("tags_code", pa.int64()),
    ("offset_msg_id", pa.string()),
])

DEFAULT_CHUNK = 64 << 20
REMOTE_TAIL = 256 << 10  # a remote window reaches at most this far past its scan's range end (doubling when short)
DEFAULT_BATCH_ROWS = 65536
_local = threading.local()


COMPRESSED_ONLY = "compressed"
"""ScanOptions.want_body: copy only compressed bodies (the rows whose client decode can fail), null elsewhere."""
_BODY_MODES = {False: 0, True: 1, COMPRESSED_ONLY: 2}


@dataclass
class ScanOptions:
    """How to scan: CRC check (checkCRCOnRecover), the release's recovery rules (`brokerversion.recovery_rules`),
    body column, batch rows, read chunk, delay table.

    want_body: True fills `body` for every row; False leaves it null; COMPRESSED_ONLY fills it only where sysflag
    says compressed (what checking the client's decode needs). `body_size` is filled in every mode."""

    check_crc: bool = False
    negative_size_fails: bool = False
    offset_in_file: bool = False
    size_before_magic: bool = True
    v2_magic: bool = True
    want_body: bool | str = True
    batch_rows: int = DEFAULT_BATCH_ROWS
    batch_bytes: int = 32 << 20
    """A batch's record bytes at most (one batch: one engine pass, one Parquet row group). 32 MiB against 16: one
    256 MiB range of the 1 GiB bench dump, least of five alternating twice, K = 256 1.50-1.66 -> 1.38-1.41 s,
    K = 32 0.98 -> 0.91-0.92 s (each batch's fixed Python and writer costs, halved); 64 MiB no faster."""
    chunk_bytes: int = DEFAULT_CHUNK
    delay_levels: Sequence[int] | None = None

    @property
    def checks(self) -> int:
        """The kernels' per-record check bits (K.CHECK_CRC, K.NEGATIVE_SIZE_FAILS, K.OFFSET_IN_FILE,
        K.NO_SIZE_BEFORE_MAGIC, K.V1_MAGIC_ONLY)."""
        return ((K.CHECK_CRC if self.check_crc else 0) | (K.NEGATIVE_SIZE_FAILS if self.negative_size_fails else 0)
                | (K.OFFSET_IN_FILE if self.offset_in_file else 0)
                | (0 if self.size_before_magic else K.NO_SIZE_BEFORE_MAGIC)
                | (0 if self.v2_magic else K.V1_MAGIC_ONLY))

    @classmethod
    def of(cls, rules: RecoveryRules, **kwargs) -> ScanOptions:
        """The options whose per-record checks are a release's recovery rules (`brokerversion.recovery_rules`)."""
        return cls(negative_size_fails=rules.negative_size_fails, offset_in_file=rules.offset_in_file,
                   size_before_magic=rules.size_before_magic, v2_magic=rules.v2_magic, **kwargs)

    def delay_table(self) -> np.ndarray:
        """delay_ms indexed by level (index 0 unused); its length - 1 is maxDelayLevel."""
        levels = list(self.delay_levels) if self.delay_levels is not None else parse_delay_levels()
        return np.array([0, *levels], dtype=np.int64)


@dataclass
class Damage:
    """Bytes of a file the scanner could not read: file, offset in the file, global offset, length, reason."""

    path: str
    offset: int
    global_offset: int
    length: int
    reason: str


@dataclass
class SplitReport:
    """What one split saw: its first record, records/bytes owned, where its chain left or stopped, and why."""

    path: str
    file_base: int
    file_size: int
    start: int
    end: int
    sync: int | None = None
    records: int = 0
    bytes: int = 0
    exit: int | None = None
    stop: int | None = None
    stop_kind: str | None = None
    stop_reason: int = 0
    last_nonzero: int = -1
    compressed: int = 0
    """Records with a compressed body (sysflag bit 0), counted by whoever reads the batches (job 1's dispatch)."""


@dataclass
class FileAccount:
    """Byte accounting of one commitlog file: decoded + blank + zero_tail + damaged == file_size."""

    path: str
    file_base: int
    file_size: int
    valid_end: int
    records: int = 0
    decoded_bytes: int = 0
    blank_bytes: int = 0
    zero_tail_bytes: int = 0
    damaged_bytes: int = 0
    end_kind: str = ""
    damage: list[Damage] = field(default_factory=list)
    desync: bool = False

    @property
    def closes(self) -> bool:
        """True when every byte of the file is accounted for exactly once."""
        return self.decoded_bytes + self.blank_bytes + self.zero_tail_bytes + self.damaged_bytes == self.file_size


def reason_text(code: int) -> str:
    """Human text for a scanner failure code."""
    return REASONS.get(code, f"reason {code}")


def _open_local(path: str):
    """A local store file for reading; StoreAccessError naming it when it is gone (deleted after the driver listed
    the store) or cannot be opened."""
    try:
        return open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise sfs.StoreAccessError(f"{path}: the file is gone (it was listed when the run started)",
                                   reason="no such file") from None
    except OSError as e:
        raise sfs.StoreAccessError(f"{path}: cannot open: {e.strerror or e}", reason=str(e)) from None


class _Window:
    """A read buffer over one file, borrowed from a per-thread spare (fresh big buffers cost page faults).

    The window owns its buffer until `close`, so scans iterated side by side in one thread never read each
    other's bytes; closing hands the buffer back for the next window of the thread. A remote file (a URI, see
    `filterlib.store.fs`) fills the same buffer with ranged reads of at most REMOTE_READ_CHUNK bytes each, so a
    task reads its range plus the overlap that finishes its last record, never the whole object: with `limit` set
    (the scan's range end), a remote window starting before it stops REMOTE_TAIL bytes past it instead of a whole
    chunk past it; asked again at the same offset for as much (a record longer than that), the tail doubles.
    Local files keep whole-chunk windows (page-cache reads; the fast path is unchanged).
    """

    def __init__(self, path: str, file_size: int, limit: int | None = None):
        self.path = path
        self.file_size = file_size
        self.limit = limit
        self.tail = REMOTE_TAIL
        self._last_off = -1
        self.remote = sfs.open_random(path) if sfs.is_remote(path) else None
        self.fh = None if self.remote is not None else _open_local(path)
        self.buf: np.ndarray | None = getattr(_local, "buf", None)
        _local.buf = None

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
        else:
            self.fh.close()
        spare = getattr(_local, "buf", None)
        if self.buf is not None and (spare is None or len(spare) < len(self.buf)):
            _local.buf = self.buf
        self.buf = None

    def read(self, off: int, size: int) -> tuple[np.ndarray, int, bool]:
        """Bytes [off, off+size) clipped to the file; returns (array, offset, reaches_eof).

        Raises StoreFormatError when the file ends before the size taken at the start of the scan (it was cut
        while being read): the kernels would otherwise keep asking for the missing bytes.
        """
        if self.remote is not None and self.limit is not None and off < self.limit:
            if off == self._last_off:  # asked again where it started: a record reaches past the tail
                self.tail *= 2
            self._last_off = off
            size = min(size, self.limit - off + self.tail)
        size = max(0, min(size, self.file_size - off))
        buf = self.buf
        if buf is None or len(buf) < size:
            buf = self.buf = np.empty(max(size, 1 << 20), dtype=np.uint8)
        mv = memoryview(buf)
        if self.remote is not None:
            got = self.remote.readinto_at(mv[:size], off)
            if got < size:
                raise StoreFormatError(f"file shrank while being read (expected {self.file_size} bytes)",
                                       path=sfs.display(self.path), offset=off + got)
            return buf[:got], off, off + got >= self.file_size
        self.fh.seek(off)
        got = 0
        while got < size:
            try:
                k = self.fh.readinto(mv[got:size])
            except OSError as e:
                raise sfs.StoreAccessError(f"{self.path}: cannot read bytes {off + got}-{off + size - 1}: "
                                           f"{e.strerror or e}", offset=off + got, reason=str(e)) from None
            if not k:
                raise StoreFormatError(f"file shrank while being read (expected {self.file_size} bytes)",
                                       path=self.path, offset=off + got)
            got += k
        return buf[:got], off, off + got >= self.file_size


def file_base_of(path: str) -> int:
    """Global offset of a commitlog file's first byte, from its 20-digit name."""
    name = os.path.basename(path)
    if not is_mapped_file_name(name):
        raise ValueError(f"not a mapped-file name: {name!r}")
    return int(name)


def iter_ranges(file_size: int, target_bytes: int, start: int = 0) -> list[tuple[int, int]]:
    """Split [start, file_size) into about-equal ranges of roughly target_bytes (at least one range). `start` is a
    record boundary already known (where a broker's history continues inside a file); 0 reads the whole file."""
    size = file_size - start
    if size <= 0:
        return [(start, start)]
    k = max(1, -(-size // max(1, target_bytes)))
    step = -(-size // k)
    return [(s, min(s + step, file_size)) for s in range(start, file_size, step)]


_MIN_RECORD = 91  # 74 fixed bytes + two 8-byte hosts + a 1-byte topic length


class _Columns:
    """The kernel's column buffers, sized by loose upper bounds and reused batch after batch (`for_batch`): a batch
    takes exact-size copies of the parts it uses, so fresh tens of MiB are not faulted in for every batch."""

    _kept = threading.local()

    @classmethod
    def for_batch(cls, rows: int, avail: int, want_body: bool) -> _Columns:
        """Buffers for a batch of at most `rows` rows and `avail` record bytes: this thread's last ones when they
        are big enough (the batches built from them hold copies, never views, and nothing reads them after)."""
        rows = max(1, min(rows, avail // _MIN_RECORD + 1))
        cols = getattr(cls._kept, "cols", None)
        if cols is None or (cols.rows, cols.want_body) != (rows, want_body) or cols.avail < avail:
            cols = cls._kept.cols = cls(rows, max(avail, 1 << 20), want_body)
        return cols

    def __init__(self, rows: int, avail: int, want_body: bool):
        self.rows = rows = max(1, min(rows, avail // _MIN_RECORD + 1))
        self.avail = avail = max(avail, 1)
        self.want_body = want_body
        self.bufs: dict[str, pa.Buffer] = {}
        self.fixed_i64 = self._take("fixed_i64", np.int64, 7 * rows).reshape(7, rows)
        self.fixed_i32 = self._take("fixed_i32", np.int32, 8 * rows).reshape(8, rows)
        self.slow = self._take("slow", np.uint8, rows)
        self.body_off = self._take("body_off", np.int32, rows + 1)
        self.body_data = self._take("body_data", np.uint8, avail if want_body else 1)
        self.topic_off = self._take("topic_off", np.int32, rows + 1)
        self.topic_data = self._take("topic_data", np.uint8, avail)
        self.host_off = self._take("host_off", np.int32, 2 * (rows + 1)).reshape(2, rows + 1)
        self.host_data = self._take("host_data", np.uint8, 2 * rows * 56).reshape(2, rows * 56)
        self.msgid_off = self._take("msgid_off", np.int32, rows + 1)
        self.msgid_data = self._take("msgid_data", np.uint8, rows * 56)
        self.prop_off = self._take("prop_off", np.int32, rows + 1)
        self.prop_data = self._take("prop_data", np.uint8, avail)
        self.spec_off = self._take("spec_off", np.int32, 3 * (rows + 1)).reshape(3, rows + 1)
        self.spec_valid = self._take("spec_valid", np.uint8, 3 * rows).reshape(3, rows)
        self.spec_data = self._take("spec_data", np.uint8, 3 * avail).reshape(3, avail)

    def _take(self, name: str, dtype: type, n: int) -> np.ndarray:
        buf = pa.allocate_buffer(n * np.dtype(dtype).itemsize)
        self.bufs[name] = buf
        return np.frombuffer(buf, dtype=dtype)

    def args(self) -> tuple:
        """The kernel's output arguments, in order."""
        return (self.fixed_i64, self.fixed_i32, self.slow, self.body_off, self.body_data, self.topic_off,
                self.topic_data, self.host_off, self.host_data, self.msgid_off, self.msgid_data, self.prop_off,
                self.prop_data, self.spec_off, self.spec_valid,
                self.spec_data)

    def slice(self, name: str, start: int, nbytes: int) -> pa.Buffer:
        """Bytes [start, start + nbytes) of a buffer, as an exact-size copy: the buffers are the next batch's too,
        and a batch must not pin their unused rest."""
        buf = self.bufs[name]
        out = pa.allocate_buffer(nbytes)
        np.frombuffer(out, dtype=np.uint8)[:] = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=start)
        return out

    def fixed(self, name: str, typ: pa.DataType, k: int, n: int) -> pa.Array:
        """Row k of a (7, rows) fixed-width buffer as an Arrow array of n values."""
        width = typ.byte_width
        return pa.Array.from_buffers(typ, n, [None, self.slice(name, k * self.rows * width, n * width)])

    def strings(self, off: str, data: str, k: int, n: int, typ: pa.DataType | None = None,
                valid: np.ndarray | None = None) -> pa.Array:
        """Row k of an offsets buffer (rows + 1 per row) over row k of its data buffer, as n strings."""
        offsets = getattr(self, off)
        offsets = offsets[k] if offsets.ndim == 2 else offsets
        data_arr = getattr(self, data)
        data_stride = data_arr.shape[1] if data_arr.ndim == 2 else 0
        nbytes = int(offsets[n])
        width = offsets.shape[0] * 4
        vbuf = None
        nulls = 0
        if valid is not None:
            v = valid[:n].view(bool)
            nulls = n - int(np.count_nonzero(v))
            if nulls:
                vbuf = pa.py_buffer(np.packbits(v, bitorder="little"))
        return pa.Array.from_buffers(typ or pa.string(), n, [vbuf, self.slice(off, k * width, (n + 1) * 4),
                                                             self.slice(data, k * data_stride, nbytes)],
                                     null_count=nulls)


def _build_batch(cols: _Columns, rows: int, mode: int) -> pa.RecordBatch:
    i64, i32 = pa.int64(), pa.int32()
    props = cols.strings("prop_off", "prop_data", 0, rows)
    if mode == 1:
        body = cols.strings("body_off", "body_data", 0, rows, pa.binary())
    elif mode == 2 and np.any(cols.fixed_i32[5, :rows] & 1):
        body = cols.strings("body_off", "body_data", 0, rows, pa.binary(),
                            valid=(cols.fixed_i32[5, :rows] & 1).astype(np.uint8))
    else:
        body = pa.nulls(rows, pa.binary())
    a64 = "fixed_i64"
    a32 = "fixed_i32"
    arrays = [
        cols.fixed(a64, i64, 0, rows), cols.fixed(a32, i32, 0, rows), cols.fixed(a32, i32, 1, rows),
        cols.fixed(a32, i32, 2, rows), cols.fixed(a32, i32, 3, rows), cols.fixed(a32, i32, 4, rows),
        cols.fixed(a64, i64, 1, rows), cols.fixed(a64, i64, 2, rows), cols.fixed(a32, i32, 5, rows),
        cols.fixed(a64, i64, 3, rows), cols.strings("host_off", "host_data", 0, rows),
        cols.fixed(a64, i64, 4, rows), cols.strings("host_off", "host_data", 1, rows),
        cols.fixed(a32, i32, 6, rows), cols.fixed(a64, i64, 5, rows), body, cols.fixed(a32, i32, 7, rows),
        cols.strings("topic_off", "topic_data", 0, rows), props,
        cols.strings("spec_off", "spec_data", 0, rows, valid=cols.spec_valid[0]),
        cols.strings("spec_off", "spec_data", 1, rows, valid=cols.spec_valid[1]),
        cols.strings("spec_off", "spec_data", 2, rows, valid=cols.spec_valid[2]),
        cols.fixed(a64, i64, 6, rows), cols.strings("msgid_off", "msgid_data", 0, rows),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


_SLOW_COLUMNS = ("topic", "properties", "tags", "keys", "uniq_key", "tags_code")


def _fix_slow(batch: pa.RecordBatch, slow: np.ndarray, buf: np.ndarray, rel0: int, opts: ScanOptions
              ) -> tuple[pa.RecordBatch, int | None, int]:
    """Re-decode rows with malformed UTF-8 or non-ASCII DELAY the Java way; cut the batch at a failing row.

    Only the flagged rows go through `decode_record`; their values are spliced into the kernel's columns (which
    hold those rows' raw bytes), so a stray Latin-1 property costs one row's Python decode, not the batch's.
    rel0 = global offset of buf[0]. Returns (batch, row index of the first failing record or None, reason).
    """
    idx = np.flatnonzero(slow[: batch.num_rows])
    if len(idx) == 0:
        return batch, None, 0
    pos_col = batch.column("position").to_numpy()
    size_col = batch.column("store_size").to_numpy()
    cut = None
    reason = 0
    levels = list(opts.delay_levels) if opts.delay_levels is not None else None
    mv = memoryview(buf)
    recs = []
    for i in idx:
        rel = int(pos_col[i]) - rel0
        st, _, rec = decode_record(mv[rel: rel + int(size_col[i])], 0, delay_levels=levels)
        if st != 0 or rec is None:
            cut = int(i)
            reason = st
            break
        recs.append(rec)
    if cut is not None:
        batch = batch.slice(0, cut)
        idx = idx[: len(recs)]
    if len(recs) == 0:
        return batch, cut, reason
    arrays = list(batch.columns)
    for n in _SLOW_COLUMNS:
        k = SCHEMA.get_field_index(n)
        col = arrays[k]
        if n == "tags_code":
            vals = col.to_numpy().copy()
            vals[idx] = [r.tags_code for r in recs]
            arrays[k] = pa.array(vals, type=col.type)
        elif n == "properties":
            arrays[k] = _splice(col, idx, pa.array([to_text(r.properties) for r in recs], type=col.type))
        else:
            arrays[k] = _splice(col, idx, pa.array([getattr(r, n) for r in recs], type=col.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA), cut, reason


def _splice(col: pa.Array, idx: np.ndarray, new: pa.Array) -> pa.Array:
    """col with row idx[j] replaced by new[j] (idx ascending); the other rows' bytes are copied, never parsed.

    A few rows: concatenate the runs between them with the new values (about 10 us a piece). Many rows: one
    take over [col, new] (a fixed cost of a fraction of a microsecond a row), whichever is cheaper.
    """
    rows = len(col)
    if 64 * len(idx) < rows:
        pieces = []
        prev = 0
        for j, i in enumerate(idx.tolist()):
            if i > prev:
                pieces.append(col.slice(prev, i - prev))
            pieces.append(new.slice(j, 1))
            prev = i + 1
        if prev < rows:
            pieces.append(col.slice(prev))
        return pa.concat_arrays(pieces)
    perm = np.arange(rows, dtype=np.int32)
    perm[idx] = rows + np.arange(len(idx), dtype=np.int32)
    return pc.take(pa.concat_arrays([col, new]), pa.array(perm))


class RangeScan:
    """Decode the records that start in [start, end) of one commitlog file; `report` is complete after iterating."""

    def __init__(self, path: str, start: int, end: int, opts: ScanOptions | None = None,
                 file_base: int | None = None, file_size: int | None = None, anchor: int = 0):
        self.path = path
        self.anchor = anchor
        """A file offset known to be a record boundary (0, or where a broker's history continues): a range that
        starts there decodes from it; any other start first finds the next record (`find_first`)."""
        self.opts = opts or ScanOptions()
        self.file_base = file_base_of(path) if file_base is None else file_base
        self.file_size = sfs.getsize(path) if file_size is None else file_size
        end = min(end, self.file_size)
        self.report = SplitReport(path, self.file_base, self.file_size, start, end)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        win = _Window(self.path, self.file_size, limit=self.report.end)
        try:
            yield from self._run(win)
            self.report.last_nonzero = _last_nonzero(win, self.report.start, self.report.end)
        finally:
            win.close()

    def batches(self) -> list[pa.RecordBatch]:
        """All batches of the range (the report is filled in afterwards)."""
        return list(self)

    def _run(self, win: _Window) -> Iterator[pa.RecordBatch]:
        o = self.opts
        r = self.report
        tab = K.CRC_TABLE
        delay = o.delay_table()
        mode = _BODY_MODES[o.want_body]
        fsize = self.file_size
        start, end = r.start, r.end
        if start >= end:
            return
        pos = start
        buf, boff, eof = win.read(pos, o.chunk_bytes)
        if start != self.anchor:
            need = o.chunk_bytes
            while True:
                st, p = K.find_first(buf, pos - boff, end - boff, boff, self.file_base, eof, fsize, o.checks,
                                     tab)
                if st == K.ST_NEED_MORE:
                    newpos = boff + p
                    need = need * 2 if newpos == boff else o.chunk_bytes
                    pos = newpos
                    buf, boff, eof = win.read(pos, need)
                    continue
                if st == K.ST_NOT_FOUND:
                    return
                pos = boff + p
                break
        r.sync = pos
        need = o.chunk_bytes
        while True:
            rel = pos - boff
            avail = max(len(buf) - rel, 0)
            first = int.from_bytes(buf[rel:rel + 4].tobytes(), "big", signed=True) if rel + 4 <= len(buf) else 0
            avail = min(avail, max(o.batch_bytes, first))
            cols = _Columns.for_batch(o.batch_rows, avail, mode != 0)
            res = K.decode_batch(buf, rel, end - boff, boff, self.file_base, eof, fsize, o.checks, tab, delay,
                                 mode, avail, K.DecodeOut(*cols.args()))
            st, stop, rows = int(res[0]), int(res[1]), int(res[2])
            if rows:
                batch = _build_batch(cols, rows, mode)
                batch, cut, why = _fix_slow(batch, cols.slow, buf, self.file_base + boff, o)
                if cut is not None:
                    stop = int(cols.fixed_i64[0, cut]) - self.file_base - boff
                    st = why
                    rows = cut
                if rows:
                    r.records += rows
                    r.bytes += int(cols.fixed_i32[0, :rows].sum(dtype=np.int64))
                    yield batch
            newpos = boff + stop
            if st == K.ST_BATCH_FULL:
                pos = newpos
                continue
            if st == K.ST_NEED_MORE:
                need = need * 2 if newpos == pos and rows == 0 else o.chunk_bytes
                pos = newpos
                buf, boff, eof = win.read(pos, need)
                continue
            if st == K.ST_RANGE_END:
                r.exit = newpos
                self._peek(win, newpos)
                return
            r.stop = newpos
            if st == K.ST_EOF:
                r.stop_kind = "eof"
            elif st == K.ST_BLANK:
                r.stop_kind = "blank"
            else:
                r.stop_kind = "fail"
                r.stop_reason = st
            return

    def _peek(self, win: _Window, pos: int) -> None:
        """Validate the record just past the range so a damaged record on the boundary is never missed."""
        r = self.report
        if pos >= self.file_size:
            r.stop, r.stop_kind = pos, "eof"
            return
        need = 1 << 16
        while True:
            buf, boff, eof = win.read(pos, need)
            res = K.check_record(buf, 0, eof, self.file_size - pos, self.opts.checks, K.CRC_TABLE)
            st = int(res[0])
            if st == K.ST_NEED_MORE:
                need = max(need * 2, int(res[1]) + 16)
                continue
            if st == K.ST_OK and self.opts.offset_in_file and K.offset_outside(buf, 0, self.file_base,
                                                                                self.file_size):
                st = K.ST_OFFSET_OUTSIDE_FILE
            break
        if st == K.ST_OK:
            return
        r.stop = pos
        if st == K.ST_BLANK:
            r.stop_kind = "blank"
        else:
            r.stop_kind, r.stop_reason = "fail", st


def _last_nonzero(win: _Window, lo: int, hi: int) -> int:
    """Last non-zero byte in [lo, hi) of the file, reading backwards in chunks (zero tails are usually short)."""
    step = 1 << 20
    e = hi
    while e > lo:
        s = max(lo, e - step)
        buf, boff, _ = win.read(s, e - s)
        i = int(K.last_nonzero(buf, 0, len(buf)))
        if i >= 0:
            return boff + i
        e = s
        step = min(step * 4, 64 << 20)
    return -1


def merge_reports(reports: Sequence[SplitReport], prefix_records: int = 0) -> FileAccount:
    """Combine the split reports of one file into the broker scanner's verdict and its byte accounting. The reports
    tile the file from the first one's start: a start past 0 is a record boundary where an earlier read of the file
    stopped, whose `prefix_records` records (all of [0, start)) count as decoded, so the account is the whole file's."""
    rs = sorted(reports, key=lambda r: r.start)
    path, base, fsize = rs[0].path, rs[0].file_base, rs[0].file_size
    start = edge = rs[0].start
    for r in rs:
        if r.start != edge:
            raise ValueError(f"split reports of {path} do not tile the file at {edge}")
        edge = max(edge, r.end)
    if edge != fsize and fsize > 0:
        raise ValueError(f"split reports of {path} end at {edge}, file size {fsize}")
    stops = [(r.stop, r.stop_kind, r.stop_reason) for r in rs if r.stop is not None]
    if fsize == start:
        stops.append((start, "eof", 0))
    if not stops:
        stops.append((start, "fail", K.ST_TRUNCATED_HEADER))
    cut, kind, reason = min(stops, key=lambda t: t[0])
    acc = FileAccount(path, base, fsize, cut, records=prefix_records, decoded_bytes=start, end_kind=kind)
    expected = start
    desync = False
    for r in rs:
        if expected >= cut:
            break
        if r.start <= expected < r.end:
            if r.sync != expected:
                desync = True
                break
        elif r.sync is not None and r.sync < cut:
            desync = True
            break
        if r.sync is not None and r.sync < cut:
            acc.records += r.records
            acc.decoded_bytes += r.bytes
            expected = r.exit if r.exit is not None else (r.stop if r.stop is not None else r.end)
    if desync or acc.decoded_bytes != cut:
        acc.desync = True
        return acc
    last_nz = max(r.last_nonzero for r in rs)
    if kind == "blank":
        acc.blank_bytes = fsize - cut
    elif kind == "eof":
        pass
    elif last_nz < cut:
        acc.zero_tail_bytes = fsize - cut
        acc.end_kind = "zero_tail"
    else:
        acc.damaged_bytes = last_nz + 1 - cut
        acc.zero_tail_bytes = fsize - last_nz - 1
        acc.damage.append(Damage(path, cut, base + cut, acc.damaged_bytes, reason_text(reason)))
    return acc


def decode_file(path: str, opts: ScanOptions | None = None, split_bytes: int | None = None
                ) -> tuple[list[pa.RecordBatch], FileAccount]:
    """Decode one commitlog file (optionally through splits, as tasks would) into batches and its accounting."""
    opts = opts or ScanOptions()
    fsize = sfs.getsize(path)
    ranges = iter_ranges(fsize, split_bytes or max(fsize, 1))
    scans = [RangeScan(path, s, e, opts, file_size=fsize) for s, e in ranges]
    parts = [sc.batches() for sc in scans]
    acc = merge_reports([sc.report for sc in scans])
    if acc.desync:
        sc = RangeScan(path, 0, fsize, opts, file_size=fsize)
        parts = [sc.batches()]
        acc = merge_reports([sc.report])
    out = []
    for bs in parts:
        for b in bs:
            keep = _rows_before(b, acc.file_base + acc.valid_end)
            if keep:
                out.append(b if keep == b.num_rows else b.slice(0, keep))
    return out, acc


def _rows_before(batch: pa.RecordBatch, limit: int) -> int:
    pos = batch.column("position").to_numpy()
    return int(np.searchsorted(pos, limit, side="left"))


def hop_file(path: str, chunk_bytes: int = DEFAULT_CHUNK) -> tuple[int, int]:
    """Size-only record hop over a whole file (the scan ceiling): (records, bytes)."""
    fsize = sfs.getsize(path)
    win = _Window(path, fsize)
    try:
        count = 0
        nbytes = 0
        pos = 0
        while pos < fsize:
            buf, boff, eof = win.read(pos, chunk_bytes)
            c, b, p = K.hop(buf, 0, eof)
            count += int(c)
            nbytes += int(b)
            if p == 0 or eof:
                break
            pos = boff + int(p)
        return count, nbytes
    finally:
        win.close()
