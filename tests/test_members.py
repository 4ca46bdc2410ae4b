"""A group as its members (filterlib.members): the subscriptions file's client_id / allocate, the allocation's
shape, and which member's subscription the broker may keep. What the real clients allocate and receive is held
in tests/test_group_replay.py against the reference harness's real broker and consumers."""

from __future__ import annotations

import itertools

import pytest

from filterlib.members import (
    AVG,
    AVG_BY_CIRCLE,
    MessageQueue,
    allocation,
    java_order,
    kept,
    member_pulls,
    split_groups,
    topic_queue_ids,
)
from filterlib.subscriptions import SubscriptionsError, parse_subscriptions


def _group(entries: list[dict]):
    groups, plain = split_groups(parse_subscriptions(entries))
    assert not plain
    (g,) = groups
    return g


@pytest.mark.parametrize("strategy", [AVG, AVG_BY_CIRCLE])
@pytest.mark.parametrize("queues,members", [(1, 3), (4, 2), (8, 3), (5, 5), (7, 4), (16, 6)])
def test_the_allocation_gives_every_queue_to_exactly_one_member_in_near_equal_shares(strategy, queues, members):
    mqs = [MessageQueue("T", b, q) for b in ("broker-b", "broker-a") for q in range(queues)]
    cids = [f"10.0.0.{i}@c" for i in range(members)]
    share = allocation(strategy, mqs, cids)
    got = [q for qs in share.values() for q in qs]
    assert sorted(got, key=MessageQueue.key) == sorted(mqs, key=MessageQueue.key) and len(got) == len(set(got))
    sizes = [len(qs) for qs in share.values()]
    assert max(sizes) - min(sizes) <= 1
    if strategy == AVG:  # contiguous runs in MessageQueue order, larger shares first
        order = sorted(mqs, key=MessageQueue.key)
        for qs in share.values():
            if qs:
                at = order.index(qs[0])
                assert qs == order[at: at + len(qs)]
        assert sizes == sorted(sizes, reverse=True)


def test_java_order_is_utf16_code_unit_order():
    # U+FF21 sorts after U+1F600 by code point but before it in UTF-16 (a surrogate pair starts with 0xD83D).
    assert java_order("\U0001F600") < java_order("\uFF21")
    assert sorted(["b", "a", "ab"], key=java_order) == ["a", "ab", "b"]


def test_a_group_either_names_every_client_or_none():
    with pytest.raises(SubscriptionsError, match="some entries name a client_id and some do not"):
        split_groups(parse_subscriptions([{"group": "G", "topic": "T", "client_id": "a"},
                                          {"group": "G", "topic": "U"}]))
    with pytest.raises(SubscriptionsError, match="subscribes topic 'T' twice"):
        split_groups(parse_subscriptions([{"group": "G", "topic": "T", "client_id": "a"},
                                          {"group": "G", "topic": "T", "client_id": "a", "expression": "X"}]))
    with pytest.raises(SubscriptionsError, match="different allocation strategies"):
        split_groups(parse_subscriptions([{"group": "G", "topic": "T", "client_id": "a", "allocate": "AVG"},
                                          {"group": "G", "topic": "T", "client_id": "b",
                                           "allocate": "AVG_BY_CIRCLE"}]))
    with pytest.raises(SubscriptionsError, match="'allocate' needs 'client_id'"):
        parse_subscriptions([{"group": "G", "topic": "T", "allocate": "AVG"}])
    with pytest.raises(SubscriptionsError, match="'allocate' must be one of"):
        parse_subscriptions([{"group": "G", "topic": "T", "client_id": "a", "allocate": "HASH"}])
    groups, plain = split_groups(parse_subscriptions([
        {"group": "G", "topic": "T", "client_id": "a", "allocate": "AllocateMessageQueueAveragelyByCircle"},
        {"group": "H", "topic": "T"}]))
    assert [g.allocate for g in groups] == [AVG_BY_CIRCLE] and [s.group for s in plain] == ["H"]


def test_the_largest_sub_version_is_kept_when_every_member_subscribes_and_gives_one():
    g = _group([{"group": "G", "topic": "T", "client_id": "a", "expression": "A", "sub_version": 7},
                {"group": "G", "topic": "T", "client_id": "b", "expression": "B", "sub_version": 9}])
    assert kept(g, "T").candidates == ("b",)
    tie = _group([{"group": "G", "topic": "T", "client_id": "a", "expression": "A", "sub_version": 9},
                  {"group": "G", "topic": "T", "client_id": "b", "expression": "B", "sub_version": 9}])
    assert kept(tie, "T").candidates == ("a", "b")


def test_without_versions_or_with_a_member_not_subscribing_every_subscriber_may_be_kept():
    g = _group([{"group": "G", "topic": "T", "client_id": "b", "expression": "B"},
                {"group": "G", "topic": "T", "client_id": "a", "expression": "A", "sub_version": 1}])
    assert kept(g, "T").candidates == ("a", "b")
    partial = _group([{"group": "G", "topic": "T", "client_id": "a", "expression": "A", "sub_version": 1},
                      {"group": "G", "topic": "T", "client_id": "b", "expression": "B", "sub_version": 2},
                      {"group": "G", "topic": "U", "client_id": "c"}])
    k = kept(partial, "T")
    assert k.candidates == ("a", "b") and k.not_subscribing == ("c",)


def test_tag_order_alone_filters_alike_and_counts_once():
    g = _group([{"group": "G", "topic": "T", "client_id": "a", "expression": "TagA || TagB"},
                {"group": "G", "topic": "T", "client_id": "b", "expression": "TagB ||TagA"}])
    assert kept(g, "T").candidates == ("a",)


def test_posted_members_filter_with_their_own_and_every_member_gets_a_pull_per_possibility():
    g = _group([{"group": "G", "topic": "T", "client_id": "a", "expression": "A", "path": "posted"},
                {"group": "G", "topic": "T", "client_id": "b", "expression": "B", "path": "posted"}])
    assert kept(g, "T").candidates == (None,)
    two = _group([{"group": "G", "topic": "T", "client_id": "a", "expression": "A"},
                  {"group": "G", "topic": "T", "client_id": "b", "expression": "B", "path": "posted"},
                  {"group": "G", "topic": "U", "client_id": "c"}])
    pulls = member_pulls(two, "T", "broker-a", range(6))
    assert [(p.kept_by, p.member) for p in pulls] == list(itertools.product(("a", "b"), ("a", "b", "c")))
    by = {(p.kept_by, p.member): p for p in pulls}
    assert by[("b", "a")].broker_subscription().expression == "B"  # a registered member filtered with b's
    assert by[("a", "b")].broker_subscription().expression == "B"  # a posted member always with its own
    assert by[("a", "c")].own is None and by[("a", "c")].broker_subscription() is None
    assert sorted(q for p in pulls if p.kept_by == "a" for q in p.queues) == list(range(6))


def test_the_queues_come_from_topics_json_else_the_store():
    topics = {"topicConfigTable": {"T": {"readQueueNums": 4, "writeQueueNums": 8}}}
    assert topic_queue_ids(topics, [0, 1, 7], "T") == [0, 1, 2, 3]
    assert topic_queue_ids(topics, [3, 1, 1], "U") == [1, 3]


def test_a_what_if_on_a_group_replayed_as_its_members_is_refused_in_words():
    from filterlib.registry import ConsumerFilterManager
    from filterlib.replay.plans import plan_members
    from filterlib.replay.whatif import parse_what_if, what_if_plans

    g = _group([{"group": "G", "topic": "T", "client_id": "a", "expression": "A"},
                {"group": "G", "topic": "T", "client_id": "b", "expression": "B"}])
    plans = plan_members(member_pulls(g, "T", "broker-a", range(4)), ConsumerFilterManager(), True, False)
    with pytest.raises(ValueError, match="group 'G' is replayed as its members"):
        what_if_plans([parse_what_if("G=TAG:C")], plans)
