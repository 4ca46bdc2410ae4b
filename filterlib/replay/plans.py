"""Which subscriptions job 2 pulls, with what answer and filter: each subscription as a `Plan` (where it came from,
the broker's pre-read answer), the dump's own SQL92 subscriptions, the Lite refusals, and the committed offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from filterlib import message_filter as mf
from filterlib.members import MemberPull, filters_with_kept
from filterlib.registry import ConsumerFilterManager
from filterlib.subscriptions import POSTED, REGISTERED, Subscription
from filterlib.tags import SQL92_TYPE

FROM_FILE = "subscriptions"
FROM_REGISTRY = "consumerFilter.json"
EARLIEST = "earliest"
COMMITTED = "committed"
NOT_SUBSCRIBED = "NOT_SUBSCRIBED"
"""A member's plan for a topic it does not subscribe: the queues allocated to it are never pulled (no broker
answer: the client never asks)."""


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
    member: str | None = None
    """The group member (client id) whose pulls these are; None for a group not replayed as its members."""
    kept_by: str | None = None
    """The member whose subscription the broker keeps for (group, topic) in this possibility."""
    kept_type: str | None = None
    kept_expression: str | None = None
    queues: tuple[int, ...] | None = None
    """The queue ids allocated to the member (None: every queue of the topic)."""

    @property
    def ok(self) -> bool:
        """Whether the broker reads the store for it."""
        return self.answer == mf.OK

    def pulls(self, queue_id: int) -> bool:
        """Whether this plan's member owns the queue (every plan not replayed as a member does)."""
        return self.queues is None or queue_id in self.queues

    def subscription(self) -> Subscription:
        """The subscription it was planned from (a member's own)."""
        return Subscription(self.group, self.topic, self.type, self.expression, self.path, self.sub_version,
                            self.batch_size, self.member)

    def broker_subscription(self) -> Subscription:
        """The subscription the broker filters the pulls with: the kept one for a registered member whose
        subscription the broker does not keep, else its own."""
        if not filters_with_kept(self.member, self.kept_by, self.path, self.kept_type):
            return self.subscription()
        return Subscription(self.group, self.topic, self.kept_type, self.kept_expression or "", self.path,
                            self.sub_version, self.batch_size, self.member)

    @property
    def filtered_by_other(self) -> bool:
        """Whether the broker filters this member's pulls with another member's subscription."""
        return self.broker_subscription() != self.subscription()

    def to_json(self) -> dict:
        """Plain data, for shipping to executors."""
        return asdict(self)


def dump_subscriptions(file_subs: Sequence[Subscription], registry: ConsumerFilterManager
                       ) -> list[tuple[Subscription, str]]:
    """The subscriptions to pull with their source: the file's, in file order (a (group, topic) named twice is
    replayed twice: members of one group that subscribe differently), then a registered SQL92 subscription (no
    sub_version: the pull checks the record's clientVersion) for every registry record whose (group, topic) the
    file does not name."""
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


def plan_members(pulls: Iterable[MemberPull], registry: ConsumerFilterManager, enable_property_filter: bool,
                 filter_support_retry: bool, now: int | None = None, start: int = 0) -> list[Plan]:
    """Every member pull's plan, numbered in order from `start`: answered as the broker answers the pull it
    filters with the kept subscription (`MemberPull.broker_subscription`), NOT_SUBSCRIBED for a member that does
    not subscribe the topic."""
    plans = []
    for i, mp in enumerate(pulls, start):
        k = mp.kept
        head = dict(member=mp.member, kept_by=mp.kept_by, kept_type=k.type if k else None,
                    kept_expression=k.expression if k else None, queues=mp.queues)
        if mp.own is None:
            queues = ", ".join(map(str, mp.queues)) or "none"
            plans.append(Plan(i, mp.group, mp.topic, "", "", REGISTERED, None, 0, FROM_FILE, NOT_SUBSCRIBED,
                              f"member {mp.member} does not subscribe {mp.topic}: the queues allocated to it "
                              f"({queues}) are never pulled", None, None, **head))
            continue
        own = mp.own
        a = answer(registry, mp.broker_subscription(), enable_property_filter, now)
        cls = None
        if a.ok:
            cls = "ExpressionForRetryMessageFilter" if filter_support_retry else "ExpressionMessageFilter"
        plans.append(Plan(i, mp.group, mp.topic, own.type, own.expression, own.path, own.sub_version,
                          own.batch_size, FROM_FILE, a.answer, a.remark, a.cause, cls, **head))
    return plans


def build_filter(plan: Plan, registry: ConsumerFilterManager, enable_property_filter: bool,
                 filter_support_retry: bool, now: int | None = None) -> mf.ExpressionMessageFilter:
    """The filter the broker pulls an OK plan with."""
    a = answer(registry, plan.broker_subscription(), enable_property_filter, now)
    if not a.ok:
        raise ValueError(f"({plan.group}, {plan.topic}) is answered {a.answer}: it does not pull")
    return mf.make_filter(a.subscription, a.filter_data, registry, filter_support_retry=filter_support_retry)


def own_filter(plan: Plan, registry: ConsumerFilterManager, filter_support_retry: bool, now: int | None = None
               ) -> mf.ExpressionMessageFilter | None:
    """A member's own subscription as a filter, where the broker filters its pulls with another member's: what
    the member wants (its selector compiled as a posted one: no bitmap, the SQL92 evaluated) and the tags its
    client re-checks against. None where the broker filters with the member's own."""
    if not plan.filtered_by_other:
        return None
    a = mf.pull_answer(registry, plan.topic, plan.group, plan.expression, plan.type, plan.sub_version, posted=True,
                       enable_property_filter=True, now=now)
    return mf.make_filter(a.subscription, a.filter_data, registry, filter_support_retry) if a.ok else None


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
