"""What a dump's own files show of the broker release that wrote them (read by `brokerversion.detect`).

Each mark was read in the releases' sources jars and checked on stores the real 5.3.3 and 5.5.1 brokers wrote
(tests/test_brokerversion.py). A mark says "this release or a later one wrote me": a broker never writes a newer
release's layout, so the newest mark found bounds the release from below.

- 5.4.0: `DefaultMessageStore`'s constructor opens `MessageRocksDBStorage` at `<root>/rocksdbstore/` (column
  families default, timer, trans) in every store type; `TopicConfigManager` adds the system topics
  RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC and RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC to every topic table; config files are
  written by fastjson2 (`fastjson.written_dialect`).
- 5.5.0: `StoreCheckpoint` writes `logicsPhysicalOffset` as a sixth long, at byte 40 of `checkpoint` (the file
  queues' flush sets it; 5.3.3 and 5.4.0 write bytes 0-39 only, the rest of the 4 KiB file stays zero).
- 5.0.0 (`since_500`, told apart from 4.9.x only: every 5.x release before 5.4.0 follows 5.3.3's rules):
  `TopicConfigManager` adds the system topics rmq_sys_REVIVE_LOG_<cluster> and rmq_sys_SYNC_BROKER_MEMBER_<broker> to
  every topic table, `TopicConfig` carries `attributes` and `DataVersion` `stateVersion` (fastjson writes both
  always), `SubscriptionGroupConfig` carries `groupRetryPolicy`; 4.9.7 has none of them. A 4.9 store (`pre_500`)
  is a readable topic table with none of these.
- 5.5.1: `ConsumerFilterManager` persists a SQL92 record without `bloomFilterData` when enableCalcFilterBitMap is
  off (every earlier release always generates it); `ConsumeQueueRocksDBStorage` no longer installs the Java
  `ConsumeQueueCompactionFilterFactory` on the RocksDB queues' default column family (5.3.3 to 5.5.0 do, and
  RocksDB records it in the database's OPTIONS file).
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

from filterlib.errors import StoreFormatError
from filterlib.store import fastjson
from filterlib.store import fs as sfs
from filterlib.store.queues import ROCKSDB, is_rocksdb_dir

ROCKSDB_TRANS_TOPICS = ("RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC", "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC")
CQ_FILTER_FACTORY = "ConsumeQueueCompactionFilterFactory"
CONFIG_JSON = ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "consumerFilter.json")


@dataclass(frozen=True)
class Mark:
    """One thing in the dump that only `since` or a later release writes, in words."""

    since: str
    text: str


def _rocksdbstore(store) -> Mark | None:
    path = os.path.join(store.root, "rocksdbstore")
    if sfs.isdir(path):
        return Mark("5.4.0", f"{path} exists (MessageRocksDBStorage, opened by every store from 5.4.0)")
    return None


def _config_root(store, name: str) -> dict | None:
    """A config file's whole JSON object, None when absent or unreadable."""
    try:
        obj = store.config(name)
    except StoreFormatError:
        return None
    return obj if isinstance(obj, dict) else None


def _topic_table(store) -> dict | None:
    return (_config_root(store, "topics") or {}).get("topicConfigTable")


def _trans_topics(store) -> Mark | None:
    topics = _topic_table(store)
    if topics and any(t in topics for t in ROCKSDB_TRANS_TOPICS):
        return Mark("5.4.0", f"the topic table holds {ROCKSDB_TRANS_TOPICS[0]} (a system topic from 5.4.0)")
    return None


def _fastjson2(store) -> Mark | None:
    for name in CONFIG_JSON:
        path = os.path.join(store.root, "config", name)
        if sfs.isfile(path):
            text = sfs.read_bytes(path).decode("utf-8", errors="replace")
            if fastjson.written_dialect(text) == fastjson.FASTJSON2:
                return Mark("5.4.0", f"{path} is laid out by fastjson2 (config files from 5.4.0)")
    return None


def _checkpoint(store) -> Mark | None:
    path = os.path.join(store.root, "checkpoint")
    if not sfs.isfile(path):
        return None
    head = sfs.read_head(path, 48)
    if len(head) == 48 and struct.unpack_from(">q", head, 40)[0] != 0:
        return Mark("5.5.0", f"{path} holds logicsPhysicalOffset at byte 40 (StoreCheckpoint from 5.5.0)")
    return None


def _bloomless_filter(store) -> Mark | None:
    path = os.path.join(store.root, "config", "consumerFilter.json")
    for p in (path, path + ".bak"):
        if not sfs.isfile(p):
            continue
        try:
            data = fastjson.loads(sfs.read_bytes(p).decode("utf-8", errors="replace"))
        except ValueError:
            continue
        for per_topic in ((data or {}).get("filterDataByTopic") or {}).values():
            for rec in ((per_topic or {}).get("groupFilterData") or {}).values():
                if isinstance(rec, dict) and rec.get("bloomFilterData") is None:
                    return Mark("5.5.1", f"{p} holds a filter record without bloomFilterData (5.5.1 keeps bloom "
                                         f"data only with enableCalcFilterBitMap on)")
        return None
    return None


def _options_file(db: str) -> str | None:
    """The newest OPTIONS-<n> file of a RocksDB directory (what the last open wrote)."""
    found = [(int(m.group(1)), n) for n in sfs.listdir(db) if (m := re.fullmatch(r"OPTIONS-(\d+)", n))]
    return os.path.join(db, max(found)[1]) if found else None


def _rocksdb_queue_options(store) -> Mark | None:
    db = os.path.join(store.root, "consumequeue")
    if store.queue_kind != ROCKSDB and not is_rocksdb_dir(db):
        return None
    path = _options_file(db)
    if path is None:
        return None
    text = sfs.read_bytes(path).decode("utf-8", errors="replace")
    default = text.split('[CFOptions "default"]', 1)[1].split("\n[", 1)[0] if '[CFOptions "default"]' in text else ""
    if default and CQ_FILTER_FACTORY not in default:
        return Mark("5.5.1", f"{path}: the RocksDB queues' default column family has no {CQ_FILTER_FACTORY} "
                             f"(dropped in 5.5.1)")
    return None


MARKS: tuple[Callable, ...] = (_bloomless_filter, _rocksdb_queue_options, _checkpoint, _rocksdbstore, _trans_topics,
                               _fastjson2)


def marks(store) -> list[Mark]:
    """Every release mark the dump shows (a StoreDir), newest-release marks first."""
    return [m for f in MARKS if (m := f(store)) is not None]


FIVE_ZERO_TOPICS = ("rmq_sys_REVIVE_LOG_", "rmq_sys_SYNC_BROKER_MEMBER_")


def since_500(store) -> list[Mark]:
    """What the dump's configs show that only a 5.x broker writes (5.0.0 on), in words; empty when nothing does."""
    found = []
    topics_obj = _config_root(store, "topics") or {}
    topics = topics_obj.get("topicConfigTable")
    if isinstance(topics, dict):
        system = sorted(t for t in topics if t.startswith(FIVE_ZERO_TOPICS))
        if system:
            found.append(Mark("5.0.0", f"the topic table holds {system[0]} (a system topic every broker adds from "
                                       f"5.0.0)"))
        if any(isinstance(c, dict) and "attributes" in c for c in topics.values()):
            found.append(Mark("5.0.0", "the topic table's entries carry `attributes` (TopicConfig from 5.0.0)"))
    if isinstance(topics_obj.get("dataVersion"), dict) and "stateVersion" in topics_obj["dataVersion"]:
        found.append(Mark("5.0.0", "topics.json's dataVersion carries `stateVersion` (DataVersion from 5.0.0)"))
    groups = (_config_root(store, "subscriptionGroup") or {}).get("subscriptionGroupTable")
    if isinstance(groups, dict) and any(isinstance(g, dict) and "groupRetryPolicy" in g for g in groups.values()):
        found.append(Mark("5.0.0", "the subscription groups carry `groupRetryPolicy` (SubscriptionGroupConfig from "
                                   "5.0.0)"))
    return found


def pre_500(store, five: list[Mark]) -> str | None:
    """Words for the dump's sign of a 4.x broker: a topic table, and none of what every 5.x broker writes (`five`,
    what `since_500` found); None when the dump has no readable topic table or shows a 5.x mark."""
    topics = _topic_table(store)
    if not topics or five:
        return None
    return (f"the topic table ({len(topics)} topics) has no entry with `attributes` and none of the system topics "
            f"rmq_sys_REVIVE_LOG_* or rmq_sys_SYNC_BROKER_MEMBER_*, which every 5.x broker writes")


def pre_540(store) -> str | None:
    """Words for the dump's sign of a release before 5.4.0: a topic table without the system topics every 5.4.0+
    broker adds (None when the dump has no readable topic table)."""
    topics = _topic_table(store)
    if not topics:
        return None
    return (f"the topic table ({len(topics)} topics) lacks {ROCKSDB_TRANS_TOPICS[0]}, which every broker from 5.4.0 "
            f"adds, and there is no rocksdbstore/")
