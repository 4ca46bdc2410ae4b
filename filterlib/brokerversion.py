"""The broker release a dump came from, and every rule that differs between the releases the project replays.

One place names the version each rule follows, so a new release is one entry here plus the tests against its jars.
Each rule below was read from the release's published sources jar and is held to its real jars by the reference
harness (tests/reference, `-Procketmq-5.5.1`, `-Procketmq-4.9.7`):

- 4.9.7 (every release before 5.0.0 follows it): the SQL92 grammar before 5.1.3 (no CONTAINS / STARTSWITH /
  ENDSWITH: `RegistryRules.version` is the grammar `sql92.compile` reads with); the retry filter before 5.1.4 (a
  TAG subscription to a retry topic is SQL-filtered by the original topic's filter, `message_filter`); the client
  keeps COMPRESSED_FLAG after inflating (`client_keeps_compressed_flag`); recovery without the remaining-bytes check
  before the magic (5.3.3 on) and without the v2 magic (5.0.0 on) (`recovery_rules`); multi-dispatch of every
  record to every named queue (`lmq_dispatch_skips`). Its ConsumerFilterManager, CalcBitMap, bloom filter, pull
  checks and paging are 5.3.3's.
- `ConsumerFilterManager` is the same class in 5.3.3, 5.4.0 and 5.5.0 and was rewritten in 5.5.1 (a per-group
  `SubscriptionFilterHandler` beside the per-topic map CalcBitMap reads). From 5.5.1:
  - `register(topic, ...)` refuses a topic the broker's topic table does not hold;
  - bloom filter data is generated only when `enableCalcFilterBitMap` is on (else null, so a persisted registry
    whose records have no bloom data is discarded whole on the next load, as `isValid(null)` is false);
  - a heartbeat marks every record of the group on a topic it no longer lists dead *now*, even one already dead;
  - a changed expression that does not compile leaves the old record in the per-topic map (CalcBitMap still
    evaluates it, `persist()` still writes it) while `get(topic, group)`, `unRegister` and `clean()` no longer see it.
- From 5.5.0, `RocksDBConsumeQueue.iterateFrom(offset, maxMsgNums)` returns a `RocksDBReusableIterator` (while
  `iteratorWhenUseRocksdbConsumeQueue`, default true) that reads batch after batch to the queue's end, so one
  getMessage call on a RocksDB queue scans like a file queue without file ends; 5.3.3 and 5.4.0 read one batch of
  units per call. (File queues page alike in every release.)
- Config files are written by fastjson 1.x up to 5.3.x and by fastjson2 from 5.4.0 (`config_dialect`).
- Commit log recovery (`recovery_rules`), held to the real jars by the harness's scan and recover modes:
  - 5.5.1's `checkMessageAndReturnSize` fails a negative TOTALSIZE before it reads the magic code, so a BLANK magic
    behind a negative size ends the valid data (earlier releases take it for the file's BLANK filler);
  - from 5.5.0, `recoverAbnormally` (the abort file left by a crash) with `checkCommitLogOffsetOnRecover` (default
    false) ends the valid data at the first record whose PHYSICALOFFSET lies outside [file start, file start + file
    size]; `recoverNormally` never checks it, and no release compares it with the record's own position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT = "5.3.3"


@dataclass(frozen=True, order=True)
class BrokerVersion:
    """A RocketMQ release number, compared numerically."""

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> BrokerVersion:
        """"5.5.1" (also MQVersion's "V5_5_1", a leading "v" or "rocketmq-all-", a "-SNAPSHOT" tail); else
        ValueError."""
        m = re.fullmatch(r"(?:rocketmq-all-|[vV])?(\d+)([._])(\d+)\2(\d+)(?:-SNAPSHOT)?", text.strip())
        if m is None:
            raise ValueError(f"not a RocketMQ release number: {text!r} (expected e.g. 5.3.3 or 5.5.1)")
        return cls(int(m.group(1)), int(m.group(3)), int(m.group(4)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


V4_9_7 = BrokerVersion(4, 9, 7)
V5_0_0 = BrokerVersion(5, 0, 0)
V5_3_3 = BrokerVersion(5, 3, 3)
V5_5_1 = BrokerVersion(5, 5, 1)
# The releases whose jars the reference harness holds the project to.
TESTED = (V4_9_7, V5_3_3, V5_5_1)


@dataclass(frozen=True)
class RegistryRules:
    """How ConsumerFilterManager registers, kills and keeps SQL92 filter data in one release."""

    release: BrokerVersion
    requires_topic_config: bool
    bloom_only_with_calc_bitmap: bool
    heartbeat_refreshes_dead_time: bool
    failed_change_keeps_stale_record: bool
    version: str = DEFAULT
    """The release asked for, exactly: the SQL92 grammar the registry compiles with (`sql92.compile`'s version) and
    the retry filter's rules follow it, not the nearest tested release."""


def _version(version: BrokerVersion | str) -> BrokerVersion:
    """A release given as text or already parsed."""
    return BrokerVersion.parse(version) if isinstance(version, str) else version


def registry_rules(version: BrokerVersion | str = DEFAULT) -> RegistryRules:
    """The ConsumerFilterManager rules a release follows (4.9.7's before 5.0.0, 5.3.3's up to 5.5.1, 5.5.1's from it
    on; 4.9.7's registry keeps 5.3.3's rules, its SQL92 grammar is older)."""
    v = _version(version)
    if v >= V5_5_1:
        return RegistryRules(V5_5_1, True, True, True, True, str(v))
    if v < V5_0_0:
        return RegistryRules(V4_9_7, False, False, False, False, str(v))
    return RegistryRules(V5_3_3, False, False, False, False, str(v))


def lmq_dispatch_skips(version: BrokerVersion | str) -> bool:
    """Whether multi-dispatch (enableMultiDispatch) skips the records of %RETRY%, rmq_sys_* and SCHEDULE_TOPIC_XXXX
    topics and the queue names holding "/" (5.0.0 on); 4.9.x's ConsumeQueue.multiDispatchLmqQueue dispatches every
    record to every queue its INNER_MULTI_DISPATCH names."""
    return _version(version) >= V5_0_0


def client_keeps_compressed_flag(version: BrokerVersion | str) -> bool:
    """Whether the consumer's `MessageDecoder.decode` leaves COMPRESSED_FLAG in a message's sysFlag after inflating
    its body (4.9.x's client does; 5.0.0 on clears it): what the consumer holds differs, not whether it decodes."""
    return _version(version) < V5_0_0


V5_4_0 = BrokerVersion(5, 4, 0)
V5_5_0 = BrokerVersion(5, 5, 0)


def rocksdb_pull_to_queue_end(version: BrokerVersion | str, iterator_setting: bool = True) -> bool:
    """Whether getMessage's scan of a RocksDB queue runs to the queue's end (5.5.0 on with
    iteratorWhenUseRocksdbConsumeQueue) rather than stopping after one batch of units (before 5.5.0)."""
    return _version(version) >= V5_5_0 and iterator_setting


def config_dialect(version: BrokerVersion | str) -> str:
    """The JSON dialect a release writes its config files in: fastjson2 from 5.4.0 (`filterlib.store.fastjson`)."""
    from filterlib.store import fastjson

    return fastjson.FASTJSON2 if _version(version) >= V5_4_0 else fastjson.FASTJSON


@dataclass(frozen=True)
class RecoveryRules:
    """What the release's commit log recovery checks per record, and in words which walk ran."""

    negative_size_fails: bool
    offset_in_file: bool
    text: str
    size_before_magic: bool = True
    v2_magic: bool = True


def recovery_rules(version: BrokerVersion | str, crashed: bool = False, check_offset: bool = False) -> RecoveryRules:
    """The recovery a broker of `version` runs on the dump: recoverAbnormally when it `crashed` (an abort file),
    else recoverNormally; `check_offset` is broker.conf's checkCommitLogOffsetOnRecover (read from 5.5.0)."""
    v = _version(version)
    negative = v >= V5_5_1
    size_first = v >= V5_3_3
    v2 = v >= V5_0_0
    offset = crashed and check_offset and v >= V5_5_0
    walk = ("recoverAbnormally (the dump has an abort file: the broker did not shut down cleanly)" if crashed
            else "recoverNormally (no abort file: a clean shutdown)")
    if offset:
        walk += ", with checkCommitLogOffsetOnRecover: a record whose PHYSICALOFFSET lies outside its file ends it"
    elif crashed and check_offset:
        walk += f"; checkCommitLogOffsetOnRecover is set but {v} has no such check (from 5.5.0)"
    if negative:
        walk += "; a negative TOTALSIZE ends the valid data even before a BLANK magic (5.5.1)"
    if not size_first:
        walk += "; a BLANK magic ends a file whatever its TOTALSIZE (no size check before the magic before 5.3.3)"
    if not v2:
        walk += "; the v2 magic code (5.x's long topics) is an illegal one"
    return RecoveryRules(negative, offset, f"commit log recovery of {v}: {walk}", size_first, v2)


def rules_release(version: BrokerVersion | str) -> str:
    """Which tested release's rules a version follows, in words for a summary."""
    v = _version(version)
    follows = registry_rules(v).release
    return str(v) if v == follows else f"{v} (the filter registry rules of {follows}, the nearest tested release)"


# The releases whose rules the project tells apart: a rule changes at each of them (registry at 5.5.1, RocksDB
# paging at 5.5.0, config dialect at 5.4.0, grammar and client at 5.x); detection names the oldest of them the dump's
# marks allow.
MODELLED = (V4_9_7, V5_3_3, V5_4_0, V5_5_0, V5_5_1)


def detect(store) -> tuple[BrokerVersion | None, str]:
    """The oldest modelled release consistent with what the dump's files show (a `StoreDir`), and the evidence in
    words; (None, why) when nothing in the dump tells (`filterlib.store.releasemarks`)."""
    from filterlib.store import releasemarks

    found = releasemarks.marks(store)
    if found:
        newest = max(BrokerVersion.parse(m.since) for m in found)
        said = [m.text for m in found if BrokerVersion.parse(m.since) == newest]
        later = [str(v) for v in MODELLED if v > newest]
        tail = (f"; a {' or '.join(later)} broker can leave the same marks: pass --broker-version if it was one"
                if later else "")
        return newest, "; ".join(said) + tail
    five = releasemarks.since_500(store)
    four = releasemarks.pre_500(store, five)
    if four is not None:
        return V4_9_7, four + " (a release before 5.0.0: 4.9.7's rules)"
    older = releasemarks.pre_540(store)
    if older is not None:
        said = f"{five[0].text}, and " if five else ""
        return V5_3_3, said + older + " (a release before 5.4.0: 5.3.3's rules)"
    return None, NOTHING_TELLS


NOTHING_TELLS = ("nothing in the dump tells (no readable config/topics.json): pass --broker-version 4.9.7 if a 4.9 "
                 "broker wrote it, its SQL92 grammar and client differ")
