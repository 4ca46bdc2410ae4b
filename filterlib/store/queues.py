"""A dump's own consume queues, whichever kind the broker kept: files (`consumequeue/<topic>/<queueId>/`, 20-byte
units, with `consumequeue_ext/`) or one RocksDB database (`storeType=defaultRocksDB`, RocketMQ 5.3).

Which kind a dump holds is read from `consumequeue/` itself (a RocksDB database has CURRENT, MANIFEST-*, OPTIONS-*
or *.sst files; a file store has topic directories). A directory holding both (a file broker with
rocksdbCQDoubleWriteEnable writes its RocksDB queues into the same directory) is read as the broker's storeType says.

The RocksDB layout is the one 5.3.3 writes (store/.../queue/RocksDBConsumeQueueTable.java and
RocksDBConsumeQueueOffsetTable.java; big-endian, CTRL_1 = 0x01):

- column family `default`, one entry per unit:
  key   = int32 len(topic) · 0x01 · topic (UTF-8) · 0x01 · int32 queueId · 0x01 · int64 queue offset
  value = int64 commit log offset · int32 size · int64 tagsCode · int64 msgStoreTime   (28 bytes)
- column family `offset`, per queue its max and min (the commit log offset and queue offset of the last / first unit):
  key   = int32 len(topic) · 0x01 · topic · 0x01 · b"max" | b"min" · 0x01 · int32 queueId
  value = int64 commit log offset · int64 queue offset
  (topic CHECKPOINT_TOPIC, queue 0, "max" holds the dispatch checkpoint: the max commit log offset in the queues).

The pull reads a RocksDB queue from getMinOffsetInQueue (the `min` entry when its commit log offset is not below the
commit log's min offset, else the first unit at or past it) to getMaxOffsetInQueue (`max` + 1), unit by unit until a
key is missing (`rangeQuery` stops there); no ext units, so tagsCode is the plain hash and there is no bloom layer.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from filterlib.errors import StoreFormatError
from filterlib.store import fastjson
from filterlib.store import fs as sfs

FILE, ROCKSDB = "file", "rocksdb"
DEFAULT_ROCKSDB = "defaultRocksDB"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
"""TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC: the offset table's dispatch checkpoint, not a queue."""
CQ_VALUE_SIZE = 28
OFFSET_VALUE_SIZE = 16
_CTRL_1 = b"\x01"
CONFIG_DBS = {"topics": ("topics", "topicConfigTable"), "subscriptionGroup": ("subscriptionGroups",
                                                                               "subscriptionGroupTable"),
              "consumerOffset": ("consumerOffsets", "offsetTable")}
"""config/<name>.json → (its RocksDB directory under config/, the JSON file's table key)."""


def is_rocksdb_dir(path: str) -> bool:
    """True when a directory holds RocksDB's own files (CURRENT, MANIFEST-*, OPTIONS-*, *.sst)."""
    if not sfs.isdir(path):
        return False
    for name in sfs.listdir(path):
        if name == "CURRENT" or name.startswith(("MANIFEST-", "OPTIONS-")) or name.endswith(".sst"):
            if sfs.isfile(os.path.join(path, name)):
                return True
    return False


def has_queue_dirs(cq_dir: str) -> bool:
    """True when consumequeue/ holds at least one topic directory (the file kind)."""
    return sfs.isdir(cq_dir) and any(sfs.isdir(os.path.join(cq_dir, n)) for n in sfs.listdir(cq_dir))


def queue_kind(store_root: str, store_type: str = "default") -> str | None:
    """The kind of queues the broker reads from this dump's consumequeue/: FILE, ROCKSDB, or None (no such dir)."""
    cq_dir = os.path.join(store_root, "consumequeue")
    if not sfs.isdir(cq_dir):
        return None
    rocks = is_rocksdb_dir(cq_dir)
    if rocks and (store_type.lower() == DEFAULT_ROCKSDB.lower() or not has_queue_dirs(cq_dir)):
        return ROCKSDB
    return FILE


def _open(path: str, what: str):
    """The RocksDB database at `path`, opened read-only with every column family; StoreFormatError naming the path."""
    if sfs.is_remote(path):
        raise StoreFormatError(f"{what} is a RocksDB database, which is read from a local or mounted path only "
                               f"(copy the dump locally)", path=sfs.display(path))
    try:
        from rocksdict import AccessType, Options, Rdict
    except ImportError:
        raise StoreFormatError(f"{what} is a RocksDB database and the rocksdict package that reads it is not "
                               f"installed (pip install rocksdict)", path=path) from None
    try:
        families = Rdict.list_cf(path)
        return Rdict(path, Options(raw_mode=True),
                     column_families={cf: Options(raw_mode=True) for cf in families if cf != "default"},
                     access_type=AccessType.read_only())
    except Exception as e:  # rocksdict raises plain Exceptions carrying RocksDB's status text
        raise StoreFormatError(f"{what} is a RocksDB database that cannot be opened read-only "
                               f"({str(e).splitlines()[0] if str(e) else type(e).__name__})", path=path) from None


def _prefix(topic: str) -> bytes:
    """The key prefix every entry of a topic starts with: int32 length, CTRL_1, topic bytes, CTRL_1."""
    t = topic.encode("utf-8")
    return struct.pack(">i", len(t)) + _CTRL_1 + t + _CTRL_1


def cq_key(topic: str, queue_id: int, offset: int) -> bytes:
    """RocksDBConsumeQueueTable's key of one unit."""
    return _prefix(topic) + struct.pack(">i", queue_id) + _CTRL_1 + struct.pack(">q", offset)


def offset_key(topic: str, queue_id: int, which: str) -> bytes:
    """RocksDBConsumeQueueOffsetTable's key of a queue's "max" or "min" entry."""
    return _prefix(topic) + which.encode() + _CTRL_1 + struct.pack(">i", queue_id)


def parse_offset_key(key: bytes) -> tuple[str, str, int] | None:
    """(topic, "max"|"min", queue id) of an offset-table key; None for a malformed one."""
    if len(key) < 4:
        return None
    (n,) = struct.unpack_from(">i", key)
    if n < 0 or len(key) != 4 + 1 + n + 1 + 3 + 1 + 4:
        return None
    topic = key[5:5 + n].decode("utf-8", errors="replace")
    which = key[6 + n:9 + n].decode("ascii", errors="replace")
    (qid,) = struct.unpack_from(">i", key, 10 + n)
    return topic, which, qid


@dataclass
class QueueColumns:
    """One queue's units as the pull reads them: queue offsets from the min offset on, commit log offsets, sizes,
    tagsCode, store times (RocksDB values carry them; None for file units, whose store time lives in ext units)."""

    queue_offset: np.ndarray
    commit_log_offset: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray
    store_time: np.ndarray | None


class RocksDBQueues:
    """The consume queues of a RocksDB dump (consumequeue/ as one database), read-only."""

    def __init__(self, cq_dir: str, min_phy_offset: int = 0):
        self.path = cq_dir
        self.min_phy_offset = min_phy_offset
        self.db = _open(cq_dir, "consumequeue/ (storeType=defaultRocksDB)")
        try:
            self.offsets = self.db.get_column_family("offset")
        except Exception:
            self.db.close()
            raise StoreFormatError("consumequeue/ is a RocksDB database without the 'offset' column family that "
                                   "RocksDBConsumeQueueStore writes", path=cq_dir) from None

    def close(self) -> None:
        """Release the database."""
        self.db.close()

    def __enter__(self) -> RocksDBQueues:
        """The open database, closed on leaving the block."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the database."""
        self.close()

    def queue_ids(self) -> list[tuple[str, int]]:
        """(topic, queueId) of every queue the offset table has a max entry for (the checkpoint excluded)."""
        out = set()
        for key in self.offsets.keys():
            parsed = parse_offset_key(bytes(key))
            if parsed and parsed[1] == "max" and parsed[0] != CHECKPOINT_TOPIC:
                out.add((parsed[0], parsed[2]))
        return sorted(out)

    def _offset_entry(self, topic: str, queue_id: int, which: str) -> tuple[int, int] | None:
        v = self.offsets.get(offset_key(topic, queue_id, which))
        if v is None or len(v) < OFFSET_VALUE_SIZE:
            return None
        phy, cq = struct.unpack_from(">qq", v)
        return phy, cq

    def bounds(self, topic: str, queue_id: int) -> tuple[int | None, int]:
        """(the min entry's queue offset when getMinCqOffset keeps it, else None; getMaxOffsetInQueue)."""
        mx = self._offset_entry(topic, queue_id, "max")
        mn = self._offset_entry(topic, queue_id, "min")
        kept = mn[1] if mn is not None and mn[0] >= self.min_phy_offset else None
        return kept, (mx[1] + 1 if mx else 0)

    def columns(self, topic: str, queue_id: int) -> QueueColumns:
        """The queue's units from its min offset up to its max offset or the first missing key."""
        kept_min, max_offset = self.bounds(topic, queue_id)
        prefix = _prefix(topic) + struct.pack(">i", queue_id) + _CTRL_1
        qos, vals = [], []
        it = self.db.iter()
        try:
            it.seek(prefix + struct.pack(">q", kept_min or 0))
            while it.valid():
                key = bytes(it.key())
                if not key.startswith(prefix) or len(key) != len(prefix) + 8:
                    break
                (qo,) = struct.unpack_from(">q", key, len(prefix))
                if qo >= max_offset or (qos and qo != qos[-1] + 1):
                    break
                value = bytes(it.value())
                if len(value) < CQ_VALUE_SIZE:
                    break
                qos.append(qo)
                vals.append(value[:CQ_VALUE_SIZE])
                it.next()
        finally:
            del it
        rec = np.frombuffer(b"".join(vals), dtype=np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8"),
                                                             ("time", ">i8")]))
        qo = np.asarray(qos, dtype=np.int64)
        phy = rec["offset"].astype(np.int64)
        # getMinCqOffset: without a min entry it keeps, the first unit at or past the commit log's min offset
        live = np.flatnonzero(phy >= self.min_phy_offset)
        first = 0 if kept_min is not None else (int(live[0]) if len(live) else len(phy))
        return QueueColumns(qo[first:], phy[first:], rec["size"].astype(np.int64)[first:],
                            rec["tags"].astype(np.int64)[first:], rec["time"].astype(np.int64)[first:])


def config_db_path(store_root: str, name: str) -> str | None:
    """config/<dir>/ of a config the broker keeps in RocksDB under storeType=defaultRocksDB (None: no such config)."""
    entry = CONFIG_DBS.get(name)
    return os.path.join(store_root, "config", entry[0]) if entry else None


def read_config_db(store_root: str, name: str) -> dict[str, Any] | None:
    """A RocksDB config store in its JSON file's shape ({table key: {key: value}}); None when there is none.

    Keys are topic names (topics), group names (subscriptionGroups) or "topic@group" (consumerOffsets); values are
    fastjson text (RocksDBOffsetSerializeWrapper for offsets: {"offsetTable": {queueId: offset}})."""
    path = config_db_path(store_root, name)
    if path is None or not is_rocksdb_dir(path):
        return None
    db = _open(path, f"config/{CONFIG_DBS[name][0]}/")
    table: dict[str, Any] = {}
    try:
        for k, v in db.items():
            key = bytes(k).decode("utf-8", errors="replace")
            try:
                value = fastjson.loads(bytes(v).decode("utf-8", errors="replace"))
            except ValueError as e:
                raise StoreFormatError(f"config/{CONFIG_DBS[name][0]}/: entry {key!r} is not fastjson ({e})",
                                       path=path) from None
            if name == "consumerOffset":
                value = (value or {}).get("offsetTable") or {}
            table[key] = value
    finally:
        db.close()
    return {CONFIG_DBS[name][1]: table}
