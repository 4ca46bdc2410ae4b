"""Job 1's dispatch: decoded CommitLog batches in, consume-queue units out, as the broker's dispatchers write them.

Which records get a unit (CommitLogDispatcherBuildConsumeQueue): transaction type NOT or COMMIT only (prepared
and rollback records get none), at the record's own topic, queue id and QUEUEOFFSET, with its commit log offset,
TOTALSIZE and tagsCode (the decoder's `tags_code`: the TAGS hash, or the delivery time in SCHEDULE_TOPIC_XXXX).
With ConsumeQueueExt on, every unit also gets an ext unit: the real tagsCode, the record's store time and the
bitmap CommitLogDispatcherCalcBitMap computed (when enableCalcFilterBitMap is on). Under enableMultiDispatch a
record's INNER_MULTI_DISPATCH queues (LMQ) get units too (`Dispatcher.lmq_units`).

**Which filters a rebuilt bitmap holds.** The broker sets, at dispatch time, the bits of every SQL92 filter then
registered on the record's topic that evaluates to TRUE on its properties, dead records included (they stay in
the registry until `clean()`). A dump holds only the final registry, so job 1 applies one rule:

    a registry record counts for a message  iff  message store time > record bornTime

(the test the broker's `isMsgInLive` applies at pull time: for a message at or before a record's bornTime the
pull skips the bloom layer, so that record's bits are never read for it). Dead records count. Counting records
that did not compile or have no bloom data are skipped, as CalcBitMap skips them. A message for which no record
of its topic counts gets no bitmap (null), as CalcBitMap writes none when the topic has no filter data; one for
which some record counts gets a bitmap of ceil(m/8) bytes, all zero when none matches.

The rule reproduces the broker exactly when every registration was made before the messages and not changed
later. When registrations changed mid-stream the broker's bitmap can hold bits the rule cannot know of: a record
whose current version was born after the message (the broker then held an earlier version of it, or the message
was dispatched after the registration in the same instant), or a record the final registry no longer holds
(removed by `clean()`, or by a changed expression that failed to compile). Under the rule the rebuilt bits are
always a subset of the broker's: `explain_bitmap` checks a difference against exactly these causes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.bloom import BloomFilter, BloomFilterData
from filterlib.brokerversion import DEFAULT, lmq_dispatch_skips, registry_rules
from filterlib.engine import TRUE, Engine
from filterlib.engine.columns import MISSING, extract_properties
from filterlib.engine.queue_layer import ext_bitmaps
from filterlib.javalang import java_is_blank, java_parse_int, java_split
from filterlib.message_filter import RETRY_GROUP_TOPIC_PREFIX
from filterlib.registry import ConsumerFilterData, ConsumerFilterManager, TopicFilters, bloom_key
from filterlib.store.commitlog import (
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from filterlib.store.consumequeue_ext import MAX_EXT_UNIT_SIZE, MIN_EXT_UNIT_SIZE

PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
LMQ_SEPARATOR = ","
LMQ_PREFIX = "%LMQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

CQ_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commit_log_offset", pa.int64()),
    ("size", pa.int32()),
    ("tags_code", pa.int64()),
    ("msg_store_time", pa.int64()),
    ("filter_bitmap", pa.binary()),
])


def enters_queue(sys_flag: np.ndarray) -> np.ndarray:
    """Per record: does it get a consume-queue unit (transaction type NOT or COMMIT, the 2-bit field 0xC)."""
    t = np.asarray(sys_flag, dtype=np.int32) & TRANSACTION_ROLLBACK_TYPE
    return (t == TRANSACTION_NOT_TYPE) | (t == TRANSACTION_COMMIT_TYPE)


def counts_for(born_time: int, store_time: np.ndarray) -> np.ndarray:
    """The rule, per message: a record counts iff the message's store time is after the record's bornTime."""
    return np.asarray(store_time, dtype=np.int64) > born_time


@dataclass
class _TopicFilters:
    """One topic's registry records: born times of all, and an engine over those CalcBitMap can use."""

    born: np.ndarray
    usable: list[int]
    groups: list[str | None]
    datas: list[BloomFilterData]
    engine: Engine | None


@dataclass
class DispatchStats:
    """Counts a dispatcher accumulates: records seen, units made, bitmaps written, matches per (group, topic)."""

    records: int = 0
    units: int = 0
    bitmaps: int = 0
    matches: dict[tuple[str, str], int] = field(default_factory=dict)


class Dispatcher:
    """Consume-queue units of decoded batches under one broker setting and one (final) filter registry."""

    def __init__(self, registry: ConsumerFilterManager | None, ext: bool, calc_bitmap: bool,
                 multi_dispatch: bool = False, lmq: bool = False, version: str = DEFAULT):
        self.registry = registry
        self.ext = ext
        self.multi_dispatch = multi_dispatch
        self.lmq = lmq
        self.lmq_skips = lmq_dispatch_skips(version)
        self.calc_bitmap = calc_bitmap and ext and registry is not None
        self.stats = DispatchStats()
        self._topics: dict[str, _TopicFilters | None] = {}

    @property
    def bloom(self) -> BloomFilter | None:
        """The registry's bloom filter (its m gives the bitmap width)."""
        return None if self.registry is None else self.registry.bloom_filter

    def _filters(self, topic: str) -> _TopicFilters | None:
        if topic not in self._topics:
            records = self.registry.get_topic(topic) if self.registry is not None else None
            if not records:
                self._topics[topic] = None
            else:
                usable = [i for i, d in enumerate(records)
                          if d.compiled is not None and d.bloom_filter_data is not None]
                engine = Engine([records[i].compiled for i in usable]) if usable else None
                self._topics[topic] = _TopicFilters(
                    np.array([d.born_time for d in records], dtype=np.int64), usable,
                    [records[i].consumer_group for i in usable], [records[i].bloom_filter_data for i in usable],
                    engine)
        return self._topics[topic]

    def units(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.RecordBatch]:
        """Per row of a decoded batch (filterlib.store.scan SCHEMA): whether it gets a unit, and its unit
        (CQ_SCHEMA, every row, in the batch's order: keep the rows the mask says)."""
        in_queue, store_time, bitmaps = self.ext_columns(batch)
        cols = [batch.column("topic"), batch.column("queue_id"), batch.column("queue_offset"),
                batch.column("commit_log_offset"), batch.column("store_size"), batch.column("tags_code"),
                store_time, bitmaps]
        return in_queue, pa.RecordBatch.from_arrays(cols, schema=CQ_SCHEMA)

    def ext_columns(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.Array, pa.Array]:
        """Per row of a decoded batch: (gets a unit, its ext msg store time, its ext bitmap); nulls without ext."""
        n = batch.num_rows
        in_queue = enters_queue(batch.column("sys_flag").to_numpy(zero_copy_only=False))
        self.stats.records += n
        self.stats.units += int(in_queue.sum())
        if not self.ext:
            return in_queue, pa.nulls(n, pa.int64()), pa.nulls(n, pa.binary())
        bitmaps = self._bitmaps(batch, in_queue) if self.calc_bitmap else pa.nulls(n, pa.binary())
        ext_size = MIN_EXT_UNIT_SIZE + pc.fill_null(pc.binary_length(bitmaps), 0).to_numpy(zero_copy_only=False)
        has_ext = in_queue & (ext_size <= MAX_EXT_UNIT_SIZE)
        store_time = batch.column("store_timestamp")
        if not has_ext.all():
            mask = pa.array(~has_ext)
            store_time = pc.if_else(mask, pa.nulls(n, pa.int64()), store_time)
            bitmaps = pc.if_else(mask, pa.nulls(n, pa.binary()), bitmaps)
        return in_queue, store_time, bitmaps

    def lmq_units(self, batch: pa.RecordBatch, in_queue: np.ndarray) -> tuple[np.ndarray, pa.RecordBatch] | None:
        """The multi-dispatch units of a decoded batch (ConsumeQueue.multiDispatchLmqQueue, under
        enableMultiDispatch), with the batch row each comes from; None when there are none.

        After a record's own unit, every queue named in its INNER_MULTI_DISPATCH property ("," separated, as
        String.split) gets a unit asking for the offset in the same place of INNER_MULTI_QUEUE_OFFSET (where it
        lands is `append_positions`' rule, over the whole queue): the record's commit log offset, size and plain
        tagsCode, never an ext unit; queue id 0 for a `%LMQ%` queue under enableLmq,
        else the record's. From 5.0.0 (`brokerversion.lmq_dispatch_skips`) not for %RETRY% topics, rmq_sys_* topics
        or SCHEDULE_TOPIC_XXXX, and a name holding "/" is skipped (4.9.x dispatches them all); nothing when either
        property is blank or the two lists differ in length. An offset Long.parseLong refuses stops the record's
        list there (the broker's dispatch throws; job 1 goes on).
        """
        if not self.multi_dispatch or not batch.num_rows:
            return None
        props = extract_properties(batch.column("properties"), [PROPERTY_INNER_MULTI_DISPATCH,
                                                                PROPERTY_INNER_MULTI_QUEUE_OFFSET])
        names_col, offsets_col = props[PROPERTY_INNER_MULTI_DISPATCH], props[PROPERTY_INNER_MULTI_QUEUE_OFFSET]
        rows = np.flatnonzero(in_queue & (names_col.codes != MISSING) & (offsets_col.codes != MISSING))
        if not len(rows):
            return None
        topics = batch.column("topic").take(pa.array(rows)).to_pylist()
        queue_ids = batch.column("queue_id").to_numpy(zero_copy_only=False)
        names_all, offsets_all = names_col.pylist(), offsets_col.pylist()
        src, out_topic, out_qid, out_offset = [], [], [], []
        for i, topic in zip(rows.tolist(), topics, strict=True):
            if self.lmq_skips and (topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(SYSTEM_TOPIC_PREFIX)
                                   or topic == SCHEDULE_TOPIC):
                continue
            names, offsets = names_all[names_col.codes[i]], offsets_all[offsets_col.codes[i]]
            if java_is_blank(names) or java_is_blank(offsets):
                continue
            names, offsets = java_split(names, LMQ_SEPARATOR), java_split(offsets, LMQ_SEPARATOR)
            if len(names) != len(offsets):
                continue
            for name, text in zip(names, offsets, strict=True):
                if self.lmq_skips and "/" in name:
                    continue
                offset = java_parse_int(text, 64)
                if offset is None:
                    break
                src.append(i)
                out_topic.append(name)
                out_qid.append(0 if self.lmq and name.startswith(LMQ_PREFIX) else int(queue_ids[i]))
                out_offset.append(offset)
        if not src:
            return None
        take = pa.array(src, pa.int64())
        k = len(src)
        cols = [pa.array(out_topic, pa.string()), pa.array(out_qid, pa.int32()), pa.array(out_offset, pa.int64()),
                batch.column("commit_log_offset").take(take), batch.column("store_size").take(take),
                batch.column("tags_code").take(take), pa.nulls(k, pa.int64()), pa.nulls(k, pa.binary())]
        self.stats.units += k
        return np.asarray(src, dtype=np.int64), pa.RecordBatch.from_arrays(cols, schema=CQ_SCHEMA)

    def _bitmaps(self, batch: pa.RecordBatch, in_queue: np.ndarray) -> pa.Array:
        """CalcBitMap under the rule for the rows that get a unit: binary bitmaps, null elsewhere and where none."""
        n = batch.num_rows
        bloom = self.registry.bloom_filter
        width = bloom.byte_length
        out = np.zeros((n, width), dtype=np.uint8)
        written = np.zeros(n, dtype=bool)
        enc = pc.dictionary_encode(batch.column("topic"))
        codes = enc.indices.to_numpy(zero_copy_only=False)
        codes = np.where(in_queue, codes, -1)
        store_all = batch.column("store_timestamp").to_numpy(zero_copy_only=False)
        for code, topic in enumerate(enc.dictionary.to_pylist()):
            tf = self._filters(topic)
            if tf is None:
                continue
            rows = np.flatnonzero(codes == code)
            store = store_all[rows]
            any_counts = store > tf.born.min()  # some record counts (`counts_for`) iff the eldest does
            if not any_counts.any():
                continue
            matches = []
            if tf.engine is not None:
                props = batch.column("properties")
                if len(rows) < n:  # a batch of one topic's units (the usual case) needs no copy
                    props = props.take(pa.array(rows))
                matches = tf.engine.states(props) == TRUE
                late = np.flatnonzero(store.min() <= tf.born[tf.usable])
                if len(late):  # filters born after some of the rows: those rows do not count for them
                    matches[late] &= tf.born[np.asarray(tf.usable)[late]][:, None] < store[None, :]
                for count, g in zip(np.count_nonzero(matches, axis=1).tolist(), tf.groups, strict=True):
                    self.stats.matches[(g, topic)] = self.stats.matches.get((g, topic), 0) + count
            bits, ok = ext_bitmaps(matches, tf.datas, bloom, len(rows))
            ok &= any_counts
            if len(rows) == n:  # the batch is one topic's units (the usual case): no copy into place
                out = bits
            else:
                out[rows] = bits
            written[rows] = ok
        self.stats.bitmaps += int(written.sum())
        validity = pa.py_buffer(np.packbits(written, bitorder="little"))
        if n * width >= 1 << 31:  # past binary's 32-bit offsets: Arrow's cast splits nothing, so let it say so
            return pa.Array.from_buffers(pa.binary(width), n, [validity, pa.py_buffer(out)]).cast(pa.binary())
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)  # every row `width` bytes; a null's unread
        return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(out)])


def append_positions(asked: np.ndarray) -> np.ndarray:
    """Where ConsumeQueue.putMessagePositionInfo puts a queue's units, given in dispatch order with the queue
    offsets they ask for: the first at its offset (a pre-blank fills the file before it), each later one appended
    right after the last whatever it asks (the broker only logs a gap), except one asking for a nonzero offset
    below the append position, which is skipped as a repeat (-1). Multi-dispatch offsets skip numbers when a
    message's LMQ offset was taken but its dispatch list was refused, so its later units shift down."""
    asked = np.asarray(asked, dtype=np.int64)
    n = len(asked)
    if n == 0:
        return asked.copy()
    straight = asked[0] + np.arange(n, dtype=np.int64)
    if (asked[1:] >= straight[1:]).all() and (asked[1:] != 0).all():
        return straight
    out = np.empty(n, dtype=np.int64)
    current = int(asked[0])
    out[0] = current
    for i in range(1, n):
        a = int(asked[i])
        if a != 0 and a < current + 1:
            out[i] = -1
            continue
        current += 1
        out[i] = current
    return out


def registry_spec(registry: ConsumerFilterManager) -> dict:
    """The registry as plain data (bloom f and n, every record's fastjson bean) for shipping to other processes."""
    return {"f": registry.bloom_filter.f, "n": registry.bloom_filter.n, "version": registry.rules.version,
            "records": [[topic, group, d.to_json()] for topic, tf in registry.filter_data_by_topic.items()
                        for group, d in tf.groups.items()]}


def registry_from_spec(spec: dict) -> ConsumerFilterManager:
    """Rebuild a registry from `registry_spec`: the same records (times kept as given), each compiled again in the
    grammar of the registry's release."""
    m = ConsumerFilterManager(spec["f"], spec["n"], rules=registry_rules(spec.get("version", DEFAULT)))
    for topic, group, obj in spec["records"]:
        d = ConsumerFilterData.from_json(obj)
        try:
            d.compiled = m.compiler(d.expression_type, d.expression)
        except Exception as exc:  # kept uncompiled, as the broker's load keeps it
            d.compile_error = exc
        m.filter_data_by_topic.setdefault(topic, TopicFilters(obj.get("topic"))).groups[group] = d
    return m


def dispatch(batches: Iterable[pa.RecordBatch], dispatcher: Dispatcher) -> pa.Table:
    """Every unit of a run of batches as one table (convenience for tests and notebooks): each queue that holds
    multi-dispatch units placed whole by `place_queue`, as job 1 places it."""
    own, multi = [], []
    for b in batches:
        in_queue, units = dispatcher.units(b)
        own.append(units if in_queue.all() else units.filter(pa.array(in_queue)))
        lmq = dispatcher.lmq_units(b, in_queue)
        if lmq is not None:
            multi.append(lmq[1])
    table = pa.Table.from_batches(own, schema=CQ_SCHEMA)
    if not multi:
        return table
    lmq = pa.Table.from_batches(multi, schema=CQ_SCHEMA)
    shared = pc.is_in(_queue_key(table), value_set=pc.unique(_queue_key(lmq)))
    n = pc.sum(shared).as_py() or 0
    mixed = pa.concat_tables([table.filter(shared).append_column("multi", pa.array(np.zeros(n, dtype=bool))),
                              lmq.append_column("multi", pa.array(np.ones(len(lmq), dtype=bool)))])
    return pa.concat_tables([table.filter(pc.invert(shared)), place_queues(mixed).drop_columns(["multi"])])


def _queue_key(units: pa.Table) -> pa.Array:
    """topic NUL queue_id per unit: one value naming its queue."""
    return pc.binary_join_element_wise(units.column("topic"), pc.cast(units.column("queue_id"), pa.string()), "\0")


def place_queue(units: pa.Table) -> pa.Table:
    """One queue's units (any order) placed as the broker's consume queue writes them: in dispatch (commit log)
    order, a record's second unit in the same queue dropped (putMessagePositionInfo's "build repeatedly" check),
    then `append_positions` (queue_offset rewritten, skipped units dropped). A record's own unit is written before
    its multi-dispatch ones (column `multi`, when present): of two in one queue, the own unit stays."""
    order = [("commit_log_offset", "ascending")]
    if "multi" in units.column_names:
        order.append(("multi", "ascending"))
    q = units.sort_by(order)
    clo = q.column("commit_log_offset").to_numpy()
    pos = np.full(len(clo), -1, dtype=np.int64)
    first = np.ones(len(clo), dtype=bool)
    first[1:] = clo[1:] != clo[:-1]
    pos[first] = append_positions(q.column("queue_offset").to_numpy()[first])
    q = q.set_column(q.schema.get_field_index("queue_offset"), "queue_offset", pa.array(pos, pa.int64()))
    return q.filter(pa.array(pos >= 0))


def place_queues(units: pa.Table) -> pa.Table:
    """`place_queue` for every (topic, queue_id) of a table of units."""
    parts = []
    for key in units.select(["topic", "queue_id"]).group_by(["topic", "queue_id"]).aggregate([]).to_pylist():
        mask = pc.and_(pc.equal(units.column("topic"), key["topic"]),
                       pc.equal(units.column("queue_id"), key["queue_id"]))
        parts.append(place_queue(units.filter(mask)))
    return pa.concat_tables(parts) if parts else units


@dataclass(frozen=True)
class Explanation:
    """Why a rebuilt bitmap differs from the broker's: explained or not, why, and the (group, topic) records cited."""

    explained: bool
    reasons: tuple[str, ...]
    records: tuple[tuple[str, str], ...] = ()


def bit_set(bitmap: bytes) -> set[int]:
    """Positions of the set bits of a bitmap (BitsArray order: byte p/8, bit p%8)."""
    return {i * 8 + b for i, byte in enumerate(bitmap) for b in range(8) if byte >> b & 1}


def explain_bitmap(topic: str, store_time: int, mine: bytes | None, broker: bytes | None,
                   registry: ConsumerFilterManager, known_groups: Iterable[str]) -> Explanation:
    """Account for a rebuilt bitmap that differs from the broker's by the rule's two blind spots.

    Under the rule every rebuilt bit is one the broker set too (a counting record existed, unchanged, when the
    message was dispatched), so `mine` must be a subset of `broker`, and mine non-null implies broker non-null.
    The broker's extra bits (or its bitmap where the rule writes none) must come from records the rule cannot
    see: a final-registry record of the topic born at or after the message (the broker held an earlier version
    of it then), or a (group, topic) of a known group that the final registry does not hold for this topic (a
    record removed since). A candidate can account for bits only if all its positions are set in the broker's
    bitmap (a matching filter sets all of them); the extra bits must lie in the union of those candidates. A
    broker bitmap where the rule writes none needs at least one candidate (the broker had filter data then).
    """
    if mine == broker:
        return Explanation(True, ())
    if broker is None:
        return Explanation(False, ("the rule wrote a bitmap where the broker wrote none",))
    bloom = registry.bloom_filter
    records = registry.get_topic(topic) or []
    held = {d.consumer_group for d in records}
    born_after: list[_Candidate] = [
        _Candidate(d.consumer_group, d.bloom_filter_data.bit_pos,
                   f"({d.consumer_group}, {topic}) born at {d.born_time}, not before the message stored at "
                   f"{store_time}: the broker held an earlier registration of it")
        for d in records
        if store_time <= d.born_time and d.bloom_filter_data is not None and d.bloom_filter_data.bit_pos]
    removed = [_Candidate(g, bloom.generate(bloom_key(g, topic)).bit_pos,
                          f"({g}, {topic}) is not in the final registry: a registration removed since")
               for g in sorted(set(known_groups) - held)]
    theirs = bit_set(broker)
    ours = bit_set(mine) if mine is not None else set()
    if not ours <= theirs:
        return Explanation(False, (f"rebuilt bits {sorted(ours - theirs)} are not set by the broker",))
    extra = theirs - ours
    usable = [c for c in born_after + removed if set(c.bits) <= theirs]
    covered = set().union(*(set(c.bits) for c in usable))
    if not extra <= covered:
        return Explanation(False, (f"broker bits {sorted(extra - covered)} match no record the rule omits",))
    cited = [c for c in usable if set(c.bits) & extra]
    if mine is None and not cited:
        cited = born_after or removed
        if not cited:
            return Explanation(False, ("the broker had filter data for the topic; the registry shows none then",))
    return Explanation(True, tuple(c.reason for c in cited), tuple((c.group, topic) for c in cited))


@dataclass(frozen=True)
class _Candidate:
    """A (group, topic) record the rule cannot see: its group, bit positions and why it is a candidate."""

    group: str
    bits: tuple[int, ...]
    reason: str


def registry_groups(registry: ConsumerFilterManager) -> set[str]:
    """Every consumer group that has a record in the registry, on any topic."""
    return {d.consumer_group for d in registry.records() if d.consumer_group is not None}
