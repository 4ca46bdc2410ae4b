"""Store-directory reader: commitlog files in order (mapped-file size derived), queues, ext queues, configs."""

from __future__ import annotations

import os
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pyarrow as pa

from filterlib.errors import StoreFormatError
from filterlib.javalang import java_utf8_decode
from filterlib.store import fastjson
from filterlib.store import fs as sfs
from filterlib.store.brokerconf import BrokerFilterConf
from filterlib.store.commitlog import is_mapped_file_name
from filterlib.store.consumequeue import CqUnit, read_queue
from filterlib.store.consumequeue_ext import CqExtUnit, read_ext_queue
from filterlib.store.queues import (
    DEFAULT_ROCKSDB,
    ROCKSDB,
    QueueColumns,
    RocksDBQueues,
    config_db_path,
    is_rocksdb_dir,
    queue_kind,
    read_config_db,
)
from filterlib.store.scan import FileAccount, ScanOptions, decode_file


@dataclass(frozen=True)
class MappedFile:
    """One commitlog file: path, global start offset (its name) and actual size."""

    path: str
    base: int
    size: int


@dataclass
class CommitLogFiles:
    """The commitlog files of a store in offset order, the derived mapped-file size and any layout issues."""

    files: list[MappedFile]
    mapped_file_size: int
    issues: list[str] = field(default_factory=list)


def list_commitlog(dirs: str | list[str]) -> CommitLogFiles:
    """Commitlog files from one directory or several (storePathCommitLog may list several, comma-separated).

    The mapped-file size is the most common size among non-empty files, cross-checked with the spacing of the
    names; files whose size differs or whose name is not a multiple of it are listed in `issues` but still read.
    """
    if isinstance(dirs, str):
        dirs = [d for d in dirs.split(",") if d]
    files = []
    missing = []
    for d in dirs:
        if not sfs.isdir(d):
            missing.append(f"{d!r}: commitlog directory not found (storePathCommitLog entries are not trimmed)")
            continue
        for name in sfs.listdir(d):
            p = os.path.join(d, name)
            if is_mapped_file_name(name) and sfs.isfile(p):
                files.append(MappedFile(p, int(name), sfs.getsize(p)))
    files.sort(key=lambda f: f.base)
    sizes = Counter(f.size for f in files if f.size > 0)
    issues: list[str] = missing
    if not sizes:
        return CommitLogFiles(files, 0, issues)
    top = max(sizes.values())
    size = max(s for s, c in sizes.items() if c == top)
    gaps = [b.base - a.base for a, b in pairwise(files)]
    if gaps and min(gaps) > size and all(g % min(gaps) == 0 for g in gaps) and len(sizes) > 1:
        size = min(gaps)
    for f in files:
        if f.size != size and not (f is files[-1] and f.size == 0):
            issues.append(f"{f.path}: size {f.size} differs from the mapped file size {size}")
        if f.base % size:
            issues.append(f"{f.path}: start offset is not a multiple of the mapped file size {size}")
    for a, b in pairwise(files):
        if b.base != a.base + size:
            issues.append(f"gap or overlap between {os.path.basename(a.path)} and {os.path.basename(b.path)}")
    return CommitLogFiles(files, size, issues)


def _queue_id(name: str) -> int | None:
    """The queue id a directory name spells the way `queue_dir` writes it (str(int)), else None."""
    if not name.isascii():
        return None
    try:
        qid = int(name)
    except ValueError:
        return None
    return qid if str(qid) == name else None


def config_file_texts(path: str) -> Iterator[tuple[str, str]]:
    """(text, path) of a broker config file, then of its `.bak`, as ConfigManager.load tries them: a missing or
    empty file is passed over (`MixAll.file2String`, Java's UTF-8 decoding); the caller goes on to the next when its
    decode fails, as load() falls back to loadBak() on any exception."""
    for p in (path, path + ".bak"):
        if sfs.isfile(p):
            text = java_utf8_decode(sfs.read_bytes(p))
            if text:
                yield text, p


class StoreDir:
    """A broker store root (a dump): commitlog, consumequeue, consumequeue_ext, config, checkpoint, broker.conf."""

    def __init__(self, root: str, commitlog_dirs: str | list[str] | None = None, broker_conf: str | None = None,
                 store_type: str | None = None):
        given = root
        try:
            # a path as given, or a remote store's canonical URI (its file system registered for the readers)
            root = sfs.store_root(root)
            if not sfs.isdir(root):
                if sfs.is_remote(root):
                    raise StoreFormatError(f"store not found: {sfs.missing_reason(root)}", path=sfs.display(given))
                raise StoreFormatError("store directory not found", path=root)
        except sfs.StoreAccessError as e:
            raise StoreFormatError(f"cannot read the store: {e.reason}", path=sfs.display(given)) from None
        self.root = root
        self.conf = BrokerFilterConf.load(broker_conf) if broker_conf else BrokerFilterConf()
        if store_type is not None:  # the broker's storeType when only the store root travels (a Spark task)
            self.conf.storeType = store_type
        dirs = commitlog_dirs or self.conf.storePathCommitLog or os.path.join(root, "commitlog")
        self.commitlog = list_commitlog(dirs)
        if not self.commitlog.files:
            raise StoreFormatError("no commitlog files (20-digit offset names) found", path=str(dirs))
        self.issues: list[str] = list(self.commitlog.issues)
        self._rocks: RocksDBQueues | None = None
        self.queue_kind = queue_kind(root, self.conf.storeType)
        """FILE, ROCKSDB or None: the kind of consume queues the broker reads from this dump (`queues`)."""
        if self.queue_kind == ROCKSDB:
            if self.conf.storeType.lower() != DEFAULT_ROCKSDB.lower():
                self.issues.append(f"{os.path.join(root, 'consumequeue')}: a RocksDB database, read as a broker with "
                                   f"storeType=defaultRocksDB reads it (the broker settings given say "
                                   f"storeType={self.conf.storeType})")
            if self.conf.enableConsumeQueueExt:
                self.issues.append("storeType=defaultRocksDB keeps its consume queues in RocksDB, which has no ext "
                                   "units: enableConsumeQueueExt is ignored (no bitmaps, no bloom layer)")
                self.conf.enableConsumeQueueExt = False

    @property
    def name(self) -> str:
        """The store as the tables name it (dumps.store, copies.store, a position's copy): the absolute path, or
        the URI as given."""
        return self.root if "://" in self.root else os.path.abspath(self.root)

    def decode_commitlog(self, opts: ScanOptions | None = None, split_bytes: int | None = None
                         ) -> Iterator[tuple[MappedFile, list[pa.RecordBatch], FileAccount]]:
        """Decode every commitlog file in order: (file, batches, accounting); damage stops only its own file."""
        for f in self.commitlog.files:
            batches, acc = decode_file(f.path, opts, split_bytes)
            yield f, batches, acc

    def queue_ids(self, ext: bool = False) -> list[tuple[str, int]]:
        """(topic, queueId) pairs present under consumequeue/ (or consumequeue_ext/)."""
        if self.queue_kind == ROCKSDB:
            if ext:
                return []
            with self.rocksdb_queues() as db:
                return db.queue_ids()
        base = os.path.join(self.root, "consumequeue_ext" if ext else "consumequeue")
        out = []
        if not sfs.isdir(base):
            return out
        for topic in sorted(sfs.listdir(base)):
            tdir = os.path.join(base, topic)
            if not sfs.isdir(tdir):
                continue
            for q in sfs.listdir(tdir):
                if _queue_id(q) is not None and sfs.isdir(os.path.join(tdir, q)):
                    out.append((topic, int(q)))
        return sorted(out)

    def rocksdb_queues(self) -> RocksDBQueues:
        """consumequeue/ opened read-only as the RocksDB database it is (StoreFormatError naming it if it cannot);
        the caller closes it."""
        min_phy = self.commitlog.files[0].base if self.commitlog.files else 0
        return RocksDBQueues(os.path.join(self.root, "consumequeue"), min_phy)

    def queue_columns(self, topic: str, queue_id: int) -> QueueColumns:
        """One RocksDB queue's units as the pull reads them (the database stays open for the next queue)."""
        if self._rocks is None:
            self._rocks = self.rocksdb_queues()
        return self._rocks.columns(topic, queue_id)

    def queue_dir(self, topic: str, queue_id: int, ext: bool = False) -> str:
        """Directory of one queue's files."""
        return os.path.join(self.root, "consumequeue_ext" if ext else "consumequeue", topic, str(queue_id))

    def read_queue(self, topic: str, queue_id: int) -> list[CqUnit]:
        """Valid units of one consume queue."""
        return read_queue(self.queue_dir(topic, queue_id))

    def read_ext(self, topic: str, queue_id: int) -> dict[int, CqExtUnit]:
        """Ext units of one queue keyed by decorated address ({} when the queue has no ext files)."""
        d = self.queue_dir(topic, queue_id, ext=True)
        return read_ext_queue(d) if sfs.isdir(d) else {}

    def config_texts(self, name: str) -> Iterator[tuple[str, str]]:
        """config/<name>.json's candidate texts (`config_file_texts`)."""
        return config_file_texts(os.path.join(self.root, "config", f"{name}.json"))

    def config(self, name: str) -> Any | None:
        """config/<name>.json in fastjson's dialect; None if absent.

        A config a RocksDB broker keeps in config/<topics|subscriptionGroups|consumerOffsets>/ is read from that
        database (in the JSON file's shape) when the broker's storeType is defaultRocksDB or there is no JSON file;
        StoreFormatError naming the directory when it cannot be opened, or when the only copy is config/rdb/
        (configManagerVersion=v2, not read).

        Like the broker's ConfigManager.load, a missing, empty or unreadable file falls back to its `.bak`
        sibling. Every unreadable file is recorded in `issues`; when neither parses, the broker starts with an
        empty config, and so does this (None), with the issue saying so.
        """
        path = os.path.join(self.root, "config", f"{name}.json")
        db_path = config_db_path(self.root, name)
        if db_path is not None and is_rocksdb_dir(db_path) and (
                self.conf.storeType.lower() == DEFAULT_ROCKSDB.lower()
                or not (sfs.isfile(path) or sfs.isfile(path + ".bak"))):
            return read_config_db(self.root, name)
        v2 = os.path.join(self.root, "config", "rdb")
        if db_path is not None and not (sfs.isfile(path) or sfs.isfile(path + ".bak")) and is_rocksdb_dir(v2):
            raise StoreFormatError("the dump keeps its topics, subscription groups and consumer offsets only in "
                                   "config/rdb/, the one RocksDB database of configManagerVersion=v2 (ConfigStorage), "
                                   "which is not read here", path=v2)
        errors: list[str] = []
        for text, p in self.config_texts(name):
            try:
                return fastjson.loads(text)
            except ValueError as e:
                errors.append(f"{p}: {e}")
                self.issues.append(f"{p}: not valid fastjson ({e}); trying the backup as the broker does")
        if errors:
            self.issues.append(f"{path}: neither the file nor its backup is readable; the broker would start "
                               f"with an empty {name}")
        return None

    def checkpoint(self) -> dict[str, int] | None:
        """The checkpoint file's timestamps and offsets (big-endian longs), None if absent or short."""
        p = os.path.join(self.root, "checkpoint")
        if not sfs.isfile(p):
            return None
        data = sfs.read_head(p, 40)
        names = ["physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp", "masterFlushedOffset",
                 "confirmPhyOffset"]
        n = len(data) // 8
        return dict(zip(names, struct.unpack(f">{n}q", data[: n * 8]), strict=False)) if n >= 3 else None
