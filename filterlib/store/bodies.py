"""Message bodies read straight from a dump: one record at a commit-log offset, its body inflated as the consumer's
client inflates it. For a warehouse written without body copies (job 2's delivered messages are references)."""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable

from filterlib.store import fs as sfs
from filterlib.store.commitlog import OK, decode_record
from filterlib.store.compression import DecompressError, decompress_body
from filterlib.store.storedir import StoreDir


def _reader(path: str):
    if sfs.is_remote(path):
        f = sfs.open_random(path)
        return f, lambda n, off: f.read_at(n, off)
    f = open(path, "rb")  # noqa: SIM115 - closed by read_bodies

    def read(n: int, off: int) -> bytes:
        f.seek(off)
        return f.read(n)

    return f, read


def read_bodies(store: StoreDir, offsets: Iterable[int]) -> list[bytes | None]:
    """The body of the record at each commit-log offset, decompressed as the client does; None where no record
    starts there, or its body does not decode (the client loses such a message: it is never delivered)."""
    files = store.commitlog.files
    bases = [f.base for f in files]
    open_files: dict[int, tuple] = {}
    out: list[bytes | None] = []
    try:
        for offset in offsets:
            i = bisect.bisect_right(bases, int(offset)) - 1
            if i < 0 or int(offset) >= files[i].base + files[i].size:
                out.append(None)
                continue
            if i not in open_files:
                open_files[i] = _reader(files[i].path)
            _f, read = open_files[i]
            pos = int(offset) - files[i].base
            head = read(4, pos)
            if len(head) < 4:
                out.append(None)
                continue
            (total,) = struct.unpack(">i", head)
            status, _size, rec = decode_record(read(max(total, 8), pos), 0) if total > 0 else (None, 0, None)
            if status != OK or rec is None:
                out.append(None)
                continue
            try:
                out.append(decompress_body(rec.body, rec.sys_flag))
            except DecompressError:
                out.append(None)
    finally:
        for f, _read in open_files.values():
            f.close()
    return out
