"""A rebuilt queue's units as the broker's files: consumequeue/<topic>/<qid>/ and consumequeue_ext/<topic>/<qid>/.

The units of one queue, in queue-offset order, are written as ConsumeQueue and ConsumeQueueExt write them: the ext
units first (their decorated addresses become the CQ units' tagsCode field), pre-blank units before a queue's first
offset, every file zero-padded to its mapped size.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from filterlib.store.consumequeue import encode_queue_files
from filterlib.store.consumequeue_ext import CqExtUnit, encode_ext_files, is_ext_addr


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
    the put failed, as for a unit over 32767 bytes); one without keeps its plain tagsCode.
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
        ext_files, addrs = encode_ext_files(units, ext_file_size)
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
