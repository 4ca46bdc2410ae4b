"""A consumer group as its members (design.md, "A group is its members"): who pulls which queue, and whose
subscription the broker filters each pull with.

A group is a set of clients (`client_id`), each with its own subscriptions. The client's rebalance allocates every
queue of a topic, over every broker serving it, to ONE member, over all members of the group sorted by client id
(`AllocateMessageQueueAveragely` by default), whatever each member subscribes: a member that does not subscribe
the topic never pulls the queues it is given. A push member's pull carries no expression, so the broker filters it
with the ONE SubscriptionData it keeps per (group, topic) (`ConsumerGroupInfo.updateSubscription`: a heartbeat
replaces it only with a larger subVersion, and drops every topic the heartbeating member does not list); the
member's client then re-checks tags against its OWN subscription. Where the input cannot tell which member's
subscription the broker keeps, every possibility is replayed (`Kept.candidates`), never one guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from filterlib import tags as tagmod
from filterlib.subscriptions import POSTED, Subscription, SubscriptionsError

AVG = "AVG"
AVG_BY_CIRCLE = "AVG_BY_CIRCLE"
STRATEGIES: dict[str, str] = {AVG: AVG, "AllocateMessageQueueAveragely": AVG,
                              AVG_BY_CIRCLE: AVG_BY_CIRCLE, "AllocateMessageQueueAveragelyByCircle": AVG_BY_CIRCLE}
"""The allocation strategies replayed, by the name the client's `getName()` gives and by class name."""


def java_order(s: str) -> bytes:
    """A sort key giving Java's String.compareTo order (UTF-16 code units), which Collections.sort uses."""
    return s.encode("utf-16-be", "surrogatepass")


@dataclass(frozen=True)
class MessageQueue:
    """One queue of a topic on one broker, ordered as MessageQueue.compareTo: topic, broker name, queue id."""

    topic: str
    broker: str
    queue_id: int

    def key(self) -> tuple:
        return java_order(self.topic), java_order(self.broker), self.queue_id


def allocate(strategy: str, cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> list[MessageQueue]:
    """The queues `cid` takes (AllocateMessageQueueStrategy.allocate; both lists already sorted, as
    RebalanceImpl.rebalanceByTopic sorts them): empty when cid is not among cid_all."""
    if not mq_all or not cid_all:
        raise ValueError("allocation over no queue or no consumer (the client throws IllegalArgumentException)")
    if cid not in cid_all:
        return []
    index, n, size = cid_all.index(cid), len(cid_all), len(mq_all)
    if STRATEGIES[strategy] == AVG_BY_CIRCLE:
        return [mq_all[i] for i in range(index, size) if i % n == index]
    mod = size % n
    average = 1 if size <= n else (size // n + 1 if mod > 0 and index < mod else size // n)
    start = index * average if mod > 0 and index < mod else index * average + mod
    return [mq_all[start + i] for i in range(min(average, size - start))]


def allocation(strategy: str, mq_all: Iterable[MessageQueue], cid_all: Iterable[str]) -> dict[str, list[MessageQueue]]:
    """Every member's queues of one topic, as each member's rebalance computes its own share."""
    mqs = sorted(set(mq_all), key=MessageQueue.key)
    cids = sorted(set(cid_all), key=java_order)
    return {cid: allocate(strategy, cid, mqs, cids) for cid in cids}


@dataclass(frozen=True)
class Member:
    """One client of a group: its id and its subscriptions, one per topic."""

    client_id: str
    subscriptions: tuple[Subscription, ...]

    def of(self, topic: str) -> Subscription | None:
        """Its subscription to `topic`, None when it does not subscribe it."""
        return next((s for s in self.subscriptions if s.topic == topic), None)


@dataclass(frozen=True)
class MemberGroup:
    """A group replayed as its members (its entries name a client_id)."""

    name: str
    allocate: str
    members: tuple[Member, ...]

    @property
    def topics(self) -> list[str]:
        """The topics any member subscribes, in first-mention order."""
        return list(dict.fromkeys(s.topic for m in self.members for s in m.subscriptions))

    def member(self, client_id: str) -> Member:
        return next(m for m in self.members if m.client_id == client_id)


def split_groups(subs: Sequence[Subscription]) -> tuple[list[MemberGroup], list[Subscription]]:
    """The groups whose entries name their client (in first-mention order), and the other entries as they were.
    SubscriptionsError where a group mixes entries with and without client_id, names one member's topic twice,
    or disagrees on its allocation strategy."""
    by_group: dict[str, list[Subscription]] = {}
    for s in subs:
        by_group.setdefault(s.group, []).append(s)
    groups, plain = [], []
    for name, entries in by_group.items():
        named = [s for s in entries if s.client_id is not None]
        if not named:
            plain += entries
            continue
        if len(named) != len(entries):
            raise SubscriptionsError(f"group {name!r}: some entries name a client_id and some do not; a group is "
                                     f"either replayed as its members (every entry names its client) or not")
        strategies = {STRATEGIES[s.allocate] for s in entries if s.allocate is not None}
        if len(strategies) > 1:
            raise SubscriptionsError(f"group {name!r}: entries name different allocation strategies "
                                     f"{', '.join(sorted(strategies))}; the group has one")
        members: dict[str, list[Subscription]] = {}
        for s in entries:
            mine = members.setdefault(s.client_id, [])
            if any(o.topic == s.topic for o in mine):
                raise SubscriptionsError(f"group {name!r}: member {s.client_id!r} subscribes topic {s.topic!r} "
                                         f"twice; a client holds one subscription per topic")
            mine.append(s)
        groups.append(MemberGroup(name, strategies.pop() if strategies else AVG,
                                  tuple(Member(c, tuple(v)) for c, v in members.items())))
    return groups, plain


def filtering_key(s: Subscription) -> tuple:
    """What the broker's filtering of a subscription depends on: its type and, for TAG, the tag set (tag order
    changes nothing), for another type its expression."""
    if s.is_tag:
        parsed = tagmod.parse_subscription(s.expression)
        return ("TAG", parsed.sub_all, parsed.tags)
    return (s.type, s.expression)


@dataclass(frozen=True)
class Kept:
    """Whose subscription the broker may keep for (group, topic): `candidates`, one client id per distinct filter
    (None alone: no member's pull uses it, every subscriber posts its own), with the words that say why, and
    the members that do not subscribe the topic (whose heartbeats drop it from the broker)."""

    topic: str
    candidates: tuple[str | None, ...]
    why: str
    not_subscribing: tuple[str, ...]


def kept(group: MemberGroup, topic: str) -> Kept:
    """The possible kept subscriptions of one topic: the largest sub_version when every member subscribes the
    topic and every subscriber gives one (ties left open); else every subscriber's, since the last heartbeat
    decides. Members whose subscriptions filter alike count once (the first by client id)."""
    subscribers = sorted((m for m in group.members if m.of(topic) is not None), key=lambda m: java_order(m.client_id))
    absent = tuple(sorted((m.client_id for m in group.members if m.of(topic) is None), key=java_order))
    if all(m.of(topic).path == POSTED for m in subscribers):
        return Kept(topic, (None,), "every subscriber posts its own expression with each pull", absent)
    versions = [m.of(topic).sub_version for m in subscribers]
    if not absent and all(v is not None for v in versions):
        top = max(versions)
        pool = [m for m in subscribers if m.of(topic).sub_version == top]
        why = f"the largest sub_version ({top})" + (" is given by several members" if len(pool) > 1 else "")
    else:
        pool = subscribers
        why = ("the members not subscribing it drop the topic from the broker at each heartbeat, and the next "
               "subscriber's heartbeat sets it again" if absent else
               "not every member gives its sub_version: the last heartbeat after a rebalance decides")
    distinct: dict[tuple, str] = {}
    for m in pool:
        distinct.setdefault(filtering_key(m.of(topic)), m.client_id)
    return Kept(topic, tuple(distinct.values()), why, absent)


def filters_with_kept(member: str | None, kept_by: str | None, path: str | None, kept_type: str | None) -> bool:
    """Whether the broker filters a member's pulls with the subscription it keeps for the group rather than the
    member's own: a registered (push) member whose subscription is not the kept one. A posted pull carries its own
    expression; a plan not replayed as a member has no kept subscription."""
    return member is not None and kept_type is not None and path != POSTED and kept_by != member


@dataclass(frozen=True)
class MemberPull:
    """One member's pulls of one topic under one possibility: its own subscription (None: it does not subscribe
    the topic, so its queues are never pulled), the kept subscription the broker filters a registered pull with,
    and the queue ids of this broker allocated to it."""

    group: str
    topic: str
    member: str
    own: Subscription | None
    kept_by: str | None
    kept: Subscription | None
    queues: tuple[int, ...]

    def broker_subscription(self) -> Subscription | None:
        """The subscription the broker filters this member's pulls with: its own when it posts it (or keeps it),
        else the kept one, carrying the member's own sub_version as the pull does."""
        if self.own is None:
            return None
        if not filters_with_kept(self.member, self.kept_by, self.own.path, self.kept and self.kept.type):
            return self.own
        k = self.kept
        return Subscription(self.group, self.topic, k.type, k.expression, self.own.path, self.own.sub_version,
                            self.own.batch_size, self.member, self.own.allocate)


def member_pulls(group: MemberGroup, topic: str, broker: str, queue_ids: Sequence[int],
                 other_queues: Iterable[MessageQueue] = ()) -> list[MemberPull]:
    """Every (possibility, member) pull of `topic`'s queues on `broker` (`queue_ids`; `other_queues`, the topic's
    queues on the cluster's other brokers, share the allocation), possibilities in candidate order, members in
    client-id order."""
    mqs = [MessageQueue(topic, broker, q) for q in queue_ids] + list(other_queues)
    if not mqs:
        return []
    share = allocation(group.allocate, mqs, (m.client_id for m in group.members))
    k = kept(group, topic)
    out = []
    for kept_by in k.candidates:
        ks = group.member(kept_by).of(topic) if kept_by is not None else None
        for cid, mine in share.items():
            out.append(MemberPull(group.name, topic, cid, group.member(cid).of(topic), kept_by, ks,
                                  tuple(q.queue_id for q in mine if q.broker == broker)))
    return out


def topic_queue_ids(topics: dict | None, found: Iterable[int], topic: str) -> list[int]:
    """The queue ids of `topic` the broker's route gives its clients: readQueueNums from topics.json (the clients'
    rebalance allocates over those, whether or not a queue holds a unit), else the queue ids the store holds."""
    config = ((topics or {}).get("topicConfigTable") or {}).get(topic) or {}
    n = config.get("readQueueNums")
    if isinstance(n, int) and n > 0:
        return list(range(n))
    return sorted(set(found))


def kept_words(group: MemberGroup, topic: str) -> str:
    """One sentence on whose subscription the broker may keep for (group, topic), for the run's summary."""
    k = kept(group, topic)
    if k.candidates == (None,):
        head = f"{group.name} on {topic}: {k.why}"
    elif len(k.candidates) == 1:
        head = f"{group.name} on {topic}: the broker filters every registered member's pulls with " \
               f"{k.candidates[0]}'s subscription ({k.why})"
    else:
        head = f"{group.name} on {topic}: which member's subscription the broker keeps is not determined ({k.why}); " \
               f"each is replayed side by side: {', '.join(k.candidates)}"
    if k.not_subscribing:
        head += f"; {', '.join(k.not_subscribing)} do{'es' if len(k.not_subscribing) == 1 else ''} not subscribe " \
                f"it: the queues allocated to them are never pulled, and the others' are pulled only while the " \
                f"broker holds the topic"
    return head


def inconsistencies(subscriptions: Iterable[tuple[str, str, str, str]]) -> tuple[list[str], list[str]]:
    """What makes a group's members inconsistent, from (member, topic, type, expression) rows (a member's own
    subscriptions; one row per member and topic): sentences on topics some members do not subscribe, on types and
    tag sets that differ (the losses), and, apart, on tag order alone differing (consistent for filtering)."""
    by_topic: dict[str, dict[str, Subscription]] = {}
    members = set()
    for member, topic, kind, expression in subscriptions:
        members.add(member)
        by_topic.setdefault(topic, {})[member] = Subscription("", topic, kind, expression)
    losses, harmless = [], []
    for topic, subs in by_topic.items():
        absent = sorted(members - set(subs), key=java_order)
        if absent:
            losses.append(f"{', '.join(absent)} do{'es' if len(absent) == 1 else ''} not subscribe {topic}")
        types = {m: ("TAG" if s.is_tag else s.type) for m, s in subs.items()}
        if len(set(types.values())) > 1:
            losses.append(f"{topic}: different types ({', '.join(f'{m} {t}' for m, t in sorted(types.items()))})")
            continue
        keys = {m: filtering_key(s) for m, s in subs.items()}
        if len(set(keys.values())) > 1:
            losses.append(f"{topic}: different {'tag sets' if next(iter(types.values())) == 'TAG' else 'expressions'}"
                          f" ({'; '.join(f'{m} `{s.expression}`' for m, s in sorted(subs.items()))})")
        elif len({s.expression for s in subs.values()}) > 1:
            harmless.append(f"{topic}: the expressions differ only in tag order "
                            f"({'; '.join(f'{m} `{s.expression}`' for m, s in sorted(subs.items()))}), which filters "
                            f"alike")
    return losses, harmless
