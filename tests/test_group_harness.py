"""The reference harness's `group` mode is real: a name server, a broker and push consumers of two consumer groups in
one JVM (`SPEC`), and one group whose members are the three client kinds, push, push_posted and lite_pull
(`KIND_SPEC`), whose output holds together as a harness answer. Only the harness's own invariants are checked here
(every message listed once, allocations disjoint, members receive only from queues they hold, the store is there);
what each member should have received is the replay's business, compared elsewhere against this truth."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import refharness
from scenarios import TWO_GROUPS_QUEUES as QUEUES
from scenarios import kinds_group_scenario, two_groups_scenario

pytestmark = pytest.mark.reference

SPEC = two_groups_scenario()


@pytest.fixture(scope="module")
def result() -> dict:
    return refharness.run_group(SPEC)


def _group(result: dict, name: str) -> dict:
    return next(g for g in result["groups"] if g["group"] == name)


def _queue(row: dict) -> tuple[str, str, int]:
    return row["broker"], row["topic"], row["queue"]


def test_every_message_sent_is_listed_once(result):
    sent = result["messages"]
    assert [m["index"] for m in sent] == list(range(len(SPEC["messages"])))
    assert [(m["topic"], m["broker"], m["queue"]) for m in sent] == \
        [(m["topic"], m["broker"], m["queue"]) for m in SPEC["messages"]]
    assert len({m["commit_log_offset"] for m in sent}) == len(sent)
    assert len({m["msg_id"] for m in sent}) == len(sent)
    # one producer sending in order: each queue's offsets are 0, 1, 2, ... in send order
    per_queue: dict[tuple, list[int]] = {}
    for m in sent:
        per_queue.setdefault(_queue(m), []).append(m["queue_offset"])
    assert all(offsets == list(range(len(offsets))) for offsets in per_queue.values())


def test_every_broker_lists_every_member(result):
    for group in SPEC["groups"]:
        ids = sorted(m["client_id"] for m in group["members"])
        assert _group(result, group["group"])["consumer_ids"] == {"broker-a": ids}
        out = _group(result, group["group"])
        assert [m["client_id"] for m in out["members"]] == [m["client_id"] for m in group["members"]]


def test_allocations_of_a_topic_are_disjoint(result):
    for group in result["groups"]:
        held = Counter(_queue(q) for m in group["members"] for q in m["allocation"])
        assert held and all(n == 1 for n in held.values()), held


def test_a_topic_every_member_subscribes_is_covered(result):
    """T1 (every member of G1 subscribes it) is held whole; T2, which only m1 subscribes, is allocated over all three
    members all the same (RocketMQ's strategies know members, not their subscriptions): its queue 1 goes to m2,
    which does not subscribe T2, so nobody consumes it."""
    g1 = _group(result, "G1")
    t1 = {_queue(q) for m in g1["members"] for q in m["allocation"] if q["topic"] == "T1"}
    assert t1 == {("broker-a", "T1", q) for q in range(4)}
    assert all(q["topic"] == "T2" for q in g1["unassigned"])
    assert _group(result, "G2")["unassigned"] == []


def test_the_kept_subscriptions_held_while_messages_flowed(result):
    """G2 and G1's T1 kept one subscription from before the sends to after the last message was consumed. G1's T2
    is subscribed by m1 only: every heartbeat of m2 or m3 drops it from the group's table and m1's puts it back, so
    the broker holds m1's subscription or none, and G1 as a whole is not stable."""
    assert _group(result, "G2")["stable"]
    g1 = _group(result, "G1")
    t1 = [r for r in g1["kept_seen"] if r["topic"] == "T1"]
    assert len(t1) == 1 and t1[0]["type"] is not None
    assert [r for r in g1["kept_before"] if r["topic"] == "T1"] == t1 == \
        [r for r in g1["kept_after"] if r["topic"] == "T1"]
    m1 = next(s for s in g1["members"][0]["subscriptions"] if s["topic"] == "T2")
    for row in (r for r in g1["kept_seen"] if r["topic"] == "T2"):
        assert row["type"] is None or (row["type"], row["expression"]) == (m1["type"], m1["expression"])


def test_the_second_group_received_every_t1_message(result):
    (member,) = _group(result, "G2")["members"]
    t1 = sorted((m["commit_log_offset"], m["msg_id"]) for m in result["messages"] if m["topic"] == "T1")
    assert sorted((r["commit_log_offset"], r["msg_id"]) for r in member["received"]) == t1


def test_members_receive_only_sent_messages_of_queues_they_hold(result):
    sent = {m["commit_log_offset"]: m for m in result["messages"]}
    for group in result["groups"]:
        for member in group["members"]:
            held = {_queue(q) for q in member["allocation"]}
            for r in member["received"]:
                assert _queue(r) in held, (group["group"], member["client_id"], r)
                m = sent[r["commit_log_offset"]]
                assert (_queue(m), m["queue_offset"], m["msg_id"]) == (_queue(r), r["queue_offset"], r["msg_id"])
                assert r["tags"] == SPEC["messages"][m["index"]]["tags"]


def test_members_reached_the_end_of_every_queue_of_a_topic_all_subscribe(result):
    for group in result["groups"]:
        everyone = set.intersection(*({s["topic"] for s in m["subscriptions"]} for m in group["members"]))
        for member in group["members"]:
            for q in member["offsets"]:
                if q["topic"] in everyone:
                    assert q["offset"] == q["max_offset"], (group["group"], member["client_id"], q)


def test_the_store_is_there(result):
    store = Path(result["brokers"]["broker-a"]["store"])
    assert store.is_absolute() and store.is_dir()
    assert any((store / "commitlog").iterdir())
    for topic, queue in QUEUES:
        assert any((store / "consumequeue" / topic / str(queue)).iterdir())
    for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "consumerFilter.json"):
        assert (store / "config" / name).is_file()
    assert sorted(p.name for p in store.parent.parent.parent.iterdir()) == ["brokers", "group.json", "logs"]


# ---- one group of the three client kinds --------------------------------------------------------------------------

KIND_QUEUES = 4
KIND_SPEC = kinds_group_scenario()


@pytest.fixture(scope="module")
def kinds_result() -> dict:
    return refharness.run_group(KIND_SPEC)


def test_kinds_every_message_sent_is_listed_once(kinds_result):
    sent = kinds_result["messages"]
    assert [m["index"] for m in sent] == list(range(len(KIND_SPEC["messages"])))
    assert [_queue(m) for m in sent] == [(m["broker"], m["topic"], m["queue"]) for m in KIND_SPEC["messages"]]
    assert len({m["commit_log_offset"] for m in sent}) == len(sent)
    assert len({m["msg_id"] for m in sent}) == len(sent)


def test_kinds_every_member_is_listed_with_its_kind(kinds_result):
    (spec,) = KIND_SPEC["groups"]
    group = _group(kinds_result, "GK")
    assert group["consumer_ids"] == {"broker-a": sorted(m["client_id"] for m in spec["members"])}
    assert [(m["client_id"], m["consumer"]) for m in group["members"]] == \
        [(m["client_id"], m["consumer"]) for m in spec["members"]]
    for member, asked in zip(group["members"], spec["members"], strict=True):
        (sub,) = member["subscriptions"]
        (want,) = asked["subscriptions"]
        assert (sub["topic"], sub["type"], sub["expression"]) == (want["topic"], want["type"], want["expression"])
        assert isinstance(sub["sub_version"], int)


def test_kinds_allocations_are_disjoint_and_cover_the_topic(kinds_result):
    group = _group(kinds_result, "GK")
    held = Counter(_queue(q) for m in group["members"] for q in m["allocation"])
    assert set(held) == {("broker-a", "T1", q) for q in range(KIND_QUEUES)}
    assert all(n == 1 for n in held.values()), held
    assert all(m["allocation"] for m in group["members"])
    assert group["unassigned"] == []


def test_kinds_members_receive_only_sent_messages_of_queues_they_hold(kinds_result):
    sent = {m["commit_log_offset"]: m for m in kinds_result["messages"]}
    for member in _group(kinds_result, "GK")["members"]:
        held = {_queue(q) for q in member["allocation"]}
        for r in member["received"]:
            assert _queue(r) in held, (member["client_id"], r)
            m = sent[r["commit_log_offset"]]
            assert (_queue(m), m["queue_offset"], m["msg_id"]) == (_queue(r), r["queue_offset"], r["msg_id"])
            assert r["tags"] == KIND_SPEC["messages"][m["index"]]["tags"]


def test_kinds_the_drain_waited_for_every_member(kinds_result):
    """What the run waits for before it records offsets: a push member's offset at its queue's end; a lite pull
    member pulled to the end (`pull_offset`) and committed what it polled, which is never past the end."""
    for member in _group(kinds_result, "GK")["members"]:
        assert {_queue(q) for q in member["offsets"]} == {_queue(q) for q in member["allocation"]}
        for q in member["offsets"]:
            if member["consumer"] == "lite_pull":
                assert q["pull_offset"] == q["max_offset"] and q["offset"] <= q["max_offset"], (member["client_id"], q)
            else:
                assert "pull_offset" not in q and q["offset"] == q["max_offset"], (member["client_id"], q)
