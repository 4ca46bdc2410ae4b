"""Message bodies read back from a store dump by commit log offset, so a warehouse built without bodies can show them.

job 1 writes `messages` without body bytes unless asked (`--bodies`): the dump holds them, and this module reads
just the records asked for, local files with positioned reads and remote ones (`filterlib.store.fs`) with ranged
reads, never a whole file. Offsets close together share one read (a window of at most WINDOW_BYTES), so reading
every body of a stretch costs about one sequential read of it. Each record is checked before its body is trusted:
a message magic code and a PHYSICALOFFSET field equal to the offset asked for (what a record that starts there
carries), and a body that fits inside the record. The body is given as the client sees it: inflated when the
sysflag says compressed (`filterlib.store.compression`), exactly as the consumer's MessageDecoder would.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from filterlib.store import fs as sfs
from filterlib.store.commitlog import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
)
from filterlib.store.compression import DecompressError, decompress_body
from filterlib.store.storedir import MappedFile, StoreDir

WINDOW_BYTES = 1 << 20
"""Offsets within this many bytes of a window's first one are read together."""
HEAD_BYTES = 16 << 10
"""Bytes read past a window's last offset: a typical record whole; a longer one is read again at its size."""
_MIN_RECORD = 91


@dataclass(frozen=True)
class StoredBody:
    """What the store holds at one commit log offset: the body as stored and as the client sees it, or why not."""

    offset: int
    sys_flag: int | None
    stored: bytes | None
    """The body bytes as stored (compressed when sys_flag says so); None where no record starts at the offset."""
    body: bytes | None
    """The body as the consumer's client decodes it; None where there is no record or its decode fails."""
    error: str | None
    """Why `body` is None: no record at the offset (and what is there), or the client's decode error as
    `JavaClass: message`; None when the body is there."""


def body_start(sys_flag: int) -> int:
    """Where a record's body starts, counted from the record's first byte (the layout depends on the IPv6 bits)."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    return 72 + born + store


class _Reader:
    """Positioned reads of one commitlog file, local (os.pread) or remote (ranged GETs)."""

    def __init__(self, f: MappedFile):
        self.size = f.size
        self.remote = sfs.open_random(f.path) if sfs.is_remote(f.path) else None
        self.fd = None if self.remote is not None else os.open(f.path, os.O_RDONLY)

    def read(self, off: int, n: int) -> bytes:
        n = max(0, min(n, self.size - off))
        if self.remote is not None:
            return self.remote.read_at(n, off)
        return os.pread(self.fd, n, off)

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
        else:
            os.close(self.fd)


def _record(reader: _Reader, buf: bytes, rel: int, offset: int, file_off: int) -> StoredBody:
    """The body of the record at `offset` (buf[rel:] holds the bytes from there, maybe fewer than the record)."""
    def missing(why: str) -> StoredBody:
        return StoredBody(offset, None, None, None, f"no message record at commit log offset {offset}: {why}")

    if reader.size - file_off < 8:
        return missing("the file ends there")
    if len(buf) - rel < 8:
        buf, rel = reader.read(file_off, HEAD_BYTES), 0
    total, magic = struct.unpack_from(">ii", buf, rel)
    if magic == BLANK_MAGIC_CODE:
        return missing("a BLANK filler starts there")
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return missing(f"the bytes there are no message magic code ({magic:#010x})")
    if total < _MIN_RECORD or file_off + total > reader.size:
        return missing(f"TOTALSIZE {total} does not fit the file")
    if len(buf) - rel < total:
        buf, rel = reader.read(file_off, total), 0
    (phys,) = struct.unpack_from(">q", buf, rel + 28)
    if phys != offset:
        return missing(f"the record there names offset {phys}")
    (sys_flag,) = struct.unpack_from(">i", buf, rel + 36)
    start = body_start(sys_flag)
    (size,) = struct.unpack_from(">i", buf, rel + start - 4)
    size = max(size, 0)
    if start + size > total:
        return missing(f"its body length {size} runs past the record's TOTALSIZE {total}")
    stored = bytes(buf[rel + start: rel + start + size])
    try:
        return StoredBody(offset, sys_flag, stored, decompress_body(stored, sys_flag), None)
    except DecompressError as e:
        return StoredBody(offset, sys_flag, stored, None, str(e))


def read_stored(store: StoreDir, offsets: Sequence[int]) -> list[StoredBody]:
    """What the store holds at each commit log offset (in the order given; repeats allowed), read ranged."""
    files = store.commitlog.files
    bases = [f.base for f in files]
    found: dict[int, StoredBody] = {}
    by_file: dict[int, list[int]] = {}
    for off in sorted(set(int(o) for o in offsets)):
        i = bisect.bisect_right(bases, off) - 1
        if i < 0 or off >= files[i].base + files[i].size:
            found[off] = StoredBody(off, None, None, None,
                                    f"no message record at commit log offset {off}: no commitlog file of the store "
                                    f"holds it")
        else:
            by_file.setdefault(i, []).append(off)
    for i, offs in by_file.items():
        f = files[i]
        reader = _Reader(f)
        try:
            k = 0
            while k < len(offs):
                first = offs[k]
                j = k
                while j + 1 < len(offs) and offs[j + 1] - first < WINDOW_BYTES:
                    j += 1
                buf = reader.read(first - f.base, offs[j] - first + HEAD_BYTES)
                for off in offs[k:j + 1]:
                    found[off] = _record(reader, buf, off - first, off, off - f.base)
                k = j + 1
        finally:
            reader.close()
    return [found[int(o)] for o in offsets]


def read_bodies(store: StoreDir, offsets: Sequence[int]) -> list[bytes | None]:
    """The body the client sees at each commit log offset (inflated when compressed), in the order given; None
    where no record starts at the offset or the client cannot decode its body (`read_stored` says why)."""
    return [s.body for s in read_stored(store, offsets)]
