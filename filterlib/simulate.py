"""Job 2's core, pure data: which subscriptions pull, with what answer and filter, and one consume queue's pull
replayed for every subscription of its topic at once (`engine.decide` for the verdicts, `pull` for the paging).

The Spark job ships `plans` and the registry as plain data, gathers one queue's units (with their messages'
properties and tags) per task, and calls `simulate_queue`; the tables it writes are these functions' columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import message_filter as mf
from filterlib.engine.decide import LAYERS, OUTCOMES, REASONS, Decisions, Units
from filterlib.pull import STATUS_NAMES, PullConfig, pull_queue
from filterlib.registry import ConsumerFilterManager
from filterlib.subscriptions import POSTED, REGISTERED, Subscription
from filterlib.tags import SQL92_TYPE

FROM_FILE = "subscriptions"
FROM_REGISTRY = "consumerFilter.json"
EARLIEST = "earliest"
COMMITTED = "committed"

UNIT_FIELDS = [pa.field("queue_offset", pa.int64()), pa.field("commit_log_offset", pa.int64()),
               pa.field("size", pa.int32()), pa.field("tags_code", pa.int64())]
"""A consume-queue unit's own columns, first in every per-unit schema of job 2 (units, decisions, matrix)."""

UNITS_SCHEMA = pa.schema([
    *UNIT_FIELDS,
    ("tags_code_legal", pa.bool_()),
    ("has_ext", pa.bool_()),
    ("ext_store_time", pa.int64()),
    ("filter_bitmap", pa.binary()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("tags", pa.string()),
    ("body_error", pa.string()),
])
"""One queue's units as `simulate_queue` takes them: the consume-queue side as the broker's iterator resolves it
(tags_code_legal False: the broker's null tagsCode; has_ext False: no ext unit; filter_bitmap null: none), and the
message's properties, tags and body_error (why the client cannot decode it; null where the commit log holds no
such message or it decodes)."""
MESSAGE_SIDE = ("properties", "tags", "body_error")
"""The columns of UNITS_SCHEMA that come from the message (job 2 joins them to the consume-queue side)."""

DECISIONS_SCHEMA = pa.schema([
    ("plan", pa.int32()),
    *UNIT_FIELDS,
    ("outcome", pa.string()),
    ("layer", pa.string()),
    ("reason", pa.string()),
    ("cq_reason", pa.string()),
    ("detail", pa.string()),
    ("sql_value", pa.string()),
    ("bloom_false_positive", pa.bool_()),
    ("bloom_tested", pa.bool_()),
    ("filter_bitmap", pa.binary()),
    ("pull_index", pa.int32()),
])
"""Per (plan, scanned unit): the outcome, the layer and branch that decided, the consume-queue branch, the detail
(SQL value, or "JavaClass: message" of an evaluation error, where the commit-log layer decided), the SQL92 value
wherever the commit-log layer evaluated one (TRUE, FALSE, NULL or ERROR; null where it evaluated none), the bloom
flags, the bitmap the bloom layer read, and the index of the pull that filtered the unit."""

PULLS_SCHEMA = pa.schema([
    ("plan", pa.int32()),
    ("pull_index", pa.int32()),
    ("request_offset", pa.int64()),
    ("status", pa.string()),
    ("next_begin_offset", pa.int64()),
    ("message_count", pa.int32()),
    ("filter_message_count", pa.int32()),
])
"""Per (plan, pull): getMessage's request offset, status, next begin offset, messages returned, and messages the
commit-log layer dropped."""


@dataclass(frozen=True)
class Plan:
    """One subscription as the job pulls it: where it came from, the broker's pre-read answer, the start rule."""

    index: int
    group: str
    topic: str
    type: str
    expression: str
    path: str
    sub_version: int | None
    batch_size: int
    source: str
    answer: str
    remark: str | None
    cause: str | None
    filter_class: str | None

    @property
    def ok(self) -> bool:
        """Whether the broker reads the store for it."""
        return self.answer == mf.OK

    def subscription(self) -> Subscription:
        """The subscription it was planned from."""
        return Subscription(self.group, self.topic, self.type, self.expression, self.path, self.sub_version,
                            self.batch_size)

    def to_json(self) -> dict:
        """Plain data, for shipping to executors."""
        return asdict(self)


def dump_subscriptions(file_subs: Sequence[Subscription], registry: ConsumerFilterManager
                       ) -> list[tuple[Subscription, str]]:
    """The subscriptions to pull with their source: the file's, in file order (a (group, topic) named twice is
    replayed twice: members of one group that subscribe differently), then a registered SQL92 subscription (client
    version as sub_version) for every registry record whose (group, topic) the file does not name."""
    named = {(s.group, s.topic) for s in file_subs}
    out: list[tuple[Subscription, str]] = [(s, FROM_FILE) for s in file_subs]
    for d in sorted(registry.records(), key=lambda d: (d.topic or "", d.consumer_group or "")):
        if d.topic is None or d.consumer_group is None or (d.consumer_group, d.topic) in named:
            continue
        out.append((Subscription(d.consumer_group, d.topic, d.expression_type or SQL92_TYPE, d.expression or "",
                                 REGISTERED, None), FROM_REGISTRY))
    return out


LITE = "LITE"
TOPIC_MESSAGE_TYPE = "message.type"
LITE_BIND_TOPIC = "lite.bind.topic"


def not_replayed(subs: Sequence[tuple[Subscription, str]], topics: dict | None, groups: dict | None
                 ) -> tuple[list[tuple[Subscription, str]], list[str]]:
    """The subscriptions job 2 replays, and a sentence for each it refuses: Lite Topic consumption (5.5.0 on: a
    topic whose `message.type` attribute is LITE in topics.json, or a group bound to one by `lite.bind.topic` in
    subscriptionGroup.json) reads per-lite-topic LMQ queues by pop, with no broker-side expression filter, a path
    this replay of the pull does not model; it is never replayed as an ordinary pull."""
    topic_table = (topics or {}).get("topicConfigTable") or {}
    group_table = (groups or {}).get("subscriptionGroupTable") or {}
    kept, refused = [], []
    for s, source in subs:
        topic_attrs = (topic_table.get(s.topic) or {}).get("attributes") or {}
        bound = ((group_table.get(s.group) or {}).get("attributes") or {}).get(LITE_BIND_TOPIC)
        if topic_attrs.get(TOPIC_MESSAGE_TYPE) == LITE or bound:
            why = (f"topic {s.topic} is a Lite Topic (message.type=LITE)" if topic_attrs.get(TOPIC_MESSAGE_TYPE) == LITE
                   else f"group {s.group} is a Lite consumer group bound to {bound}")
            refused.append(f"not replayed: {s.group} on {s.topic}: {why}; Lite consumption (RocketMQ 5.5.0 on) pops "
                           f"per-lite-topic queues with no broker-side expression filter, which this replay of the "
                           f"pull does not model")
        else:
            kept.append((s, source))
    return kept, refused


def answer(registry: ConsumerFilterManager, s: Subscription, enable_property_filter: bool,
           now: int | None = None) -> mf.PullAnswer:
    """PullMessageProcessor's checks for one subscription (`message_filter.pull_answer`)."""
    return mf.pull_answer(registry, s.topic, s.group, s.expression, s.type, s.sub_version, posted=s.path == POSTED,
                          enable_property_filter=enable_property_filter, now=now)


def plan_all(subs: Iterable[tuple[Subscription, str]], registry: ConsumerFilterManager, enable_property_filter: bool,
             filter_support_retry: bool, now: int | None = None, start: int = 0) -> list[Plan]:
    """Every subscription's plan, numbered in order from `start`."""
    plans = []
    for i, (s, source) in enumerate(subs, start):
        a = answer(registry, s, enable_property_filter, now)
        cls = None
        if a.ok:
            cls = "ExpressionForRetryMessageFilter" if filter_support_retry else "ExpressionMessageFilter"
        plans.append(Plan(i, s.group, s.topic, s.type, s.expression, s.path, s.sub_version, s.batch_size, source,
                          a.answer, a.remark, a.cause, cls))
    return plans


def build_filter(plan: Plan, registry: ConsumerFilterManager, enable_property_filter: bool,
                 filter_support_retry: bool, now: int | None = None) -> mf.ExpressionMessageFilter:
    """The filter the broker pulls an OK plan with."""
    a = answer(registry, plan.subscription(), enable_property_filter, now)
    if not a.ok:
        raise ValueError(f"({plan.group}, {plan.topic}) is answered {a.answer}: it does not pull")
    return mf.make_filter(a.subscription, a.filter_data, registry, filter_support_retry=filter_support_retry)


def committed_offsets(consumer_offset: dict | None) -> dict[tuple[str, str, int], int]:
    """{(group, topic, queue id): offset} from consumerOffset.json's offsetTable ("topic@group" → {qid: offset})."""
    out: dict[tuple[str, str, int], int] = {}
    table = (consumer_offset or {}).get("offsetTable") or {}
    for key, queues in table.items():
        topic, sep, group = str(key).rpartition("@")
        if not sep:
            continue
        for qid, offset in (queues or {}).items():
            out[(group, topic, int(qid))] = int(offset)
    return out


def units_from_table(table: pa.Table) -> Units:
    """`Units` for the engine from a UNITS_SCHEMA table (bitmaps unpacked to an (n, width) byte matrix)."""
    n = table.num_rows
    bm = table.column("filter_bitmap").combine_chunks() if n else pa.array([], pa.binary())
    lengths = pc.fill_null(pc.binary_length(bm), -1).to_numpy(zero_copy_only=False).astype(np.int64) if n else \
        np.zeros(0, np.int64)
    width = int(lengths.max()) if n and lengths.max() > 0 else 0
    bitmaps = np.zeros((n, width), dtype=np.uint8)
    if width:
        rows = np.flatnonzero(lengths > 0)
        bm = bm.cast(pa.large_binary())
        offsets = np.frombuffer(bm.buffers()[1], dtype=np.int64)[bm.offset: bm.offset + n + 1]
        data = np.frombuffer(bm.buffers()[2], dtype=np.uint8)
        cols = np.arange(width)
        idx = offsets[rows][:, None] + cols[None, :]
        valid = cols[None, :] < lengths[rows][:, None]
        bitmaps[rows] = np.where(valid, data[np.minimum(idx, len(data) - 1)], 0)

    def col(name: str, fill, dtype) -> np.ndarray:
        return np.asarray(pc.fill_null(table.column(name), fill).to_numpy(), dtype=dtype) if n else \
            np.zeros(0, dtype)

    return Units(col("tags_code", 0, np.int64), col("tags_code_legal", False, bool), col("has_ext", False, bool),
                 col("ext_store_time", 0, np.int64), bitmaps, lengths,
                 table.column("properties").combine_chunks() if n else pa.array([], UNITS_SCHEMA.field(8).type),
                 table.column("tags").combine_chunks() if n else pa.array([], pa.string()),
                 table.column("body_error").combine_chunks() if n and "body_error" in table.column_names else None)


def _names(codes: np.ndarray, names: Sequence[str]) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(list(names))).cast(pa.string())


_SQL_VALUES = pa.array(["FALSE", "TRUE", "NULL", "ERROR"])


def _sql_values(state: np.ndarray) -> pa.Array:
    codes = pa.array(state.astype(np.int32), mask=state < 0)
    return pa.DictionaryArray.from_arrays(codes, _SQL_VALUES).cast(pa.string())


def _decision_table(plan: int, units: pa.Table, d: Decisions, unit_call: np.ndarray) -> pa.Table:
    rows = np.flatnonzero(unit_call >= 0)
    k = len(rows)
    take = pa.array(rows)
    tested = d.bloom_tested()[rows]
    bitmaps = units.column("filter_bitmap").take(take)
    if not tested.all():
        bitmaps = pc.if_else(pa.array(tested), bitmaps, pa.nulls(k, pa.binary()))
    legal = pc.fill_null(units.column("tags_code_legal").take(take), False)
    cols = {
        "plan": pa.array(np.full(k, plan, dtype=np.int32)),
        "tags_code": pc.if_else(legal, units.column("tags_code").take(take), pa.nulls(k, pa.int64())),
        "outcome": _names(d.outcome[rows], OUTCOMES), "layer": _names(d.layer[rows], LAYERS),
        "reason": _names(d.reason[rows], REASONS), "cq_reason": _names(d.cq_reason[rows], REASONS),
        "detail": d.details(rows), "sql_value": _sql_values(d.sql_state[rows]),
        "bloom_false_positive": pa.array(d.bloom_false_positive[rows]), "bloom_tested": pa.array(tested),
        "filter_bitmap": bitmaps, "pull_index": pa.array(unit_call[rows].astype(np.int32)),
    }
    for name in ("queue_offset", "commit_log_offset", "size"):
        cols[name] = units.column(name).take(take)
    return pa.Table.from_arrays([cols[f.name] for f in DECISIONS_SCHEMA], schema=DECISIONS_SCHEMA)


def simulate_queue(filters: Sequence[tuple[int, mf.ExpressionMessageFilter, int, int]], units: pa.Table,
                   min_offset: int, units_per_file: int, config: PullConfig | None = None,
                   engine_cache: dict | None = None) -> tuple[pa.Table, pa.Table]:
    """Every (plan, filter, start offset, batch size) over one queue: (decisions of the scanned units, pulls).

    `units` (UNITS_SCHEMA) holds the queue's units from `min_offset` on, in queue order. The verdicts are computed
    once per filter set-at-a-time; the pulls are paged from each start as getMessage does, and only the units a
    pull scanned get a decision row.
    """
    base = config or PullConfig()
    u = units_from_table(units)
    sizes = np.asarray(pc.fill_null(units.column("size"), 0).to_numpy(), dtype=np.int64) if len(u) else \
        np.zeros(0, np.int64)
    cache = {} if engine_cache is None else engine_cache
    decisions, pulls = [], []
    for plan, f, start, batch_size in filters:
        cfg = dataclasses.replace(base, batch_size=batch_size)
        d, calls = pull_queue(f, u, sizes, start, min_offset, units_per_file, cfg, cache)
        decisions.append(_decision_table(plan, units, d, calls.unit_call))
        k = len(calls.status)
        pulls.append(pa.Table.from_arrays([
            pa.array(np.full(k, plan, dtype=np.int32)), pa.array(np.arange(k, dtype=np.int32)),
            pa.array(calls.request_offset), pa.array([STATUS_NAMES[s] for s in calls.status.tolist()], pa.string()),
            pa.array(calls.next_begin_offset), pa.array(calls.message_count.astype(np.int32)),
            pa.array(calls.filter_message_count.astype(np.int32))], schema=PULLS_SCHEMA))
    empty_d, empty_p = DECISIONS_SCHEMA.empty_table(), PULLS_SCHEMA.empty_table()
    return (pa.concat_tables(decisions) if decisions else empty_d, pa.concat_tables(pulls) if pulls else empty_p)


@dataclass(frozen=True)
class WhatIf:
    """A candidate subscription to replay beside a group's current one: `G[@TOPIC]=TYPE:EXPRESSION`."""

    group: str
    topic: str | None
    type: str
    expression: str
    spec: str


@dataclass(frozen=True)
class WhatIfRefused:
    """A candidate that does not compile: what was given, where it fails and why."""

    spec: str
    position: int | None
    reason: str


def parse_what_if(spec: str) -> WhatIf | WhatIfRefused:
    """Parse `G[@TOPIC]=SQL92:<expr>` or `G[@TOPIC]=TAG:<expr>`; a malformed spec is a ValueError, a candidate
    RocketMQ would refuse (SQL92 that does not compile, a tag expression FilterAPI cannot split) a WhatIfRefused
    with the position (in the expression) and the reason."""
    from filterlib import sql92
    from filterlib.errors import FilterSyntaxError
    from filterlib.tags import build_subscription, is_tag_type

    target, eq, rest = spec.partition("=")
    kind, colon, expression = rest.partition(":")
    if not eq or not colon or not target or kind.upper() not in ("SQL92", "TAG"):
        raise ValueError(f"--what-if {spec!r}: expected GROUP[@TOPIC]=SQL92:<expression> or GROUP[@TOPIC]=TAG:<tags>")
    group, at, topic = target.partition("@")
    kind = kind.upper()
    try:
        if is_tag_type(kind):
            build_subscription(expression, kind, topic or None)
        else:
            sql92.compile(expression)
    except FilterSyntaxError as e:
        where = f" at position {e.position}" if e.position is not None else ""
        return WhatIfRefused(spec, e.position, f"{kind} `{expression}` does not compile{where}: {e}")
    return WhatIf(group, topic if at else None, kind, expression, spec)


def what_if_plans(candidates: Sequence[WhatIf], plans: Sequence[Plan]) -> list[tuple[Subscription, int]]:
    """Each candidate as a posted subscription (exact, no bloom data: the dump's bitmaps never knew it) for every
    current plan of its group (and topic) that pulls; with the index of the plan it is compared with. A group
    (and topic) without such a plan is a ValueError naming the subscriptions it has."""
    out = []
    for c in candidates:
        current = [p for p in plans if p.group == c.group and (c.topic is None or p.topic == c.topic)
                   and p.source != WHAT_IF]
        if not current:
            have = sorted({f"{p.group}@{p.topic}" for p in plans if p.source != WHAT_IF})
            raise ValueError(f"--what-if {c.spec!r}: no current subscription of group {c.group!r}"
                             f"{' to topic ' + repr(c.topic) if c.topic else ''}; subscriptions: {', '.join(have)}")
        for p in current:
            out.append((Subscription(c.group, p.topic, c.type, c.expression, POSTED, p.sub_version, p.batch_size),
                        p.index))
    return out


WHAT_IF = "what-if"
