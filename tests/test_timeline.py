"""The rules of job 2 over a broker's history, on plain rows (filterlib.replay.timeline): which subscription
continues, which is new or ended, where each pull continues, which units a run reads."""

from __future__ import annotations

from filterlib.replay.explain import decided_by
from filterlib.replay.plans import Plan
from filterlib.replay.timeline import carry, replay_from


def plan(index: int, group: str, topic: str = "T", expression: str = "TagA", member: str | None = None,
         kept_by: str | None = None, queues: tuple[int, ...] | None = None, answer: str = "OK") -> Plan:
    return Plan(index, group, topic, "TAG", expression, "registered", 0, 32, "subscriptions", answer, None, None,
                None, member, kept_by, "TAG" if kept_by else None, expression if kept_by else None, queues)


def stats_row(p: Plan, index: int, position: int, until: str | None = None) -> dict:
    return {"subscription_index": index, "consumer_group": p.group, "topic": p.topic, "member": p.member,
            "kept_by": p.kept_by, "subscription_type": p.type, "expression": p.expression,
            "sub_version": p.sub_version, "path": p.path, "batch_size": p.batch_size, "kept_type": p.kept_type,
            "kept_expression": p.kept_expression, "answer": p.answer, "subscription_position": position,
            "since_copy": "c1", "until_copy": until}


def position(index: int, p: Plan, queue_id: int, next_offset: int, pulls: int) -> dict:
    return {"subscription_index": index, "consumer_group": p.group, "topic": p.topic, "member": p.member,
            "kept_by": p.kept_by, "queue_id": queue_id, "next_offset": next_offset, "pulls": pulls}


def test_an_unchanged_subscription_keeps_its_index_byte_positions_and_pull_count() -> None:
    a, b = plan(0, "A"), plan(1, "B", topic="U")
    old = [stats_row(b, 4, 0), stats_row(a, 7, 2)]
    pos = [position(7, a, 0, 40, 5), position(7, a, 1, 12, 2), position(4, b, 0, 3, 1)]
    c = carry([a, b], old, pos)
    assert [p.index for p in c.plans] == [7, 4]
    assert c.positions == {7: 2, 4: 0}
    assert c.starts == {(7, 0): 40, (7, 1): 12, (4, 0): 3}
    assert c.bases == {(7, 0): 5, (7, 1): 2, (4, 0): 1}
    assert set(c.continued) == {4, 7} and c.ended == [] and c.unchanged
    assert c.widths == {"T": 3, "U": 1}


def test_a_changed_subscription_is_new_from_the_groups_position_and_the_old_one_ends() -> None:
    old_a, other = plan(0, "A", expression="TagA"), plan(1, "O")
    new_a = plan(0, "A", expression="TagB")
    old = [stats_row(old_a, 0, 0), stats_row(other, 1, 1), stats_row(plan(9, "Z"), 2, 5, until="c2")]
    pos = [position(0, old_a, 0, 40, 5), position(1, other, 0, 41, 6)]
    c = carry([new_a, other], old, pos)
    assert [p.index for p in c.plans] == [3, 1]  # after every index the history had, ended ones too
    assert c.positions[3] == 6  # after every byte the topic had
    assert c.starts[(3, 0)] == 40 and (3, 0) not in c.bases  # the group's position, its own pulls from 0
    assert [r["subscription_index"] for r in c.ended] == [0, 2] and not c.unchanged


def test_a_group_new_to_the_history_starts_by_the_run_rule_and_a_gone_groups_positions_are_kept() -> None:
    gone, new = plan(0, "gone"), plan(0, "new")
    kept = position(0, gone, 0, 40, 5)
    c = carry([new], [stats_row(gone, 0, 0)], [kept])
    assert c.starts == {} and c.bases == {}
    assert c.kept_positions == [kept]
    assert replay_from(c.plans, c.starts, "T", 0) is None  # read the queue whole


def test_a_queue_moved_to_another_member_continues_at_the_groups_position() -> None:
    m1 = plan(0, "G", member="m1", kept_by="m1", queues=(0,))
    m2 = plan(1, "G", member="m2", kept_by="m1", queues=(1,))
    old = [stats_row(m1, 0, 0), stats_row(m2, 1, 1)]
    pos = [position(0, m1, 0, 30, 3), position(1, m2, 1, 20, 2)]
    swapped = [plan(0, "G", member="m1", kept_by="m1", queues=(1,)), plan(1, "G", member="m2", kept_by="m1",
                                                                       queues=(0,))]
    c = carry(swapped, [dict(r) for r in old], pos)
    # the allocation is part of no subscription's words: each member keeps its index; the queues' positions follow
    assert [p.index for p in c.plans] == [0, 1]
    assert c.starts == {(0, 1): 20, (1, 0): 30} and c.bases == {}
    other = plan(0, "G", member="m1", kept_by="m2", queues=(0, 1))  # another possibility: a line of its own
    assert carry([other], old, pos).starts == {}


def test_a_queue_is_read_from_its_earliest_continuing_pull() -> None:
    a, b, c_ = plan(0, "A"), plan(1, "B"), plan(2, "C", topic="U")
    starts = {(0, 0): 40, (1, 0): 25, (2, 0): 3}
    assert replay_from([a, b, c_], starts, "T", 0) == 25
    assert replay_from([a, b], {(0, 0): 40}, "T", 0) is None  # B starts by the run's rule: the whole queue
    refused = plan(3, "D", answer="FILTER_DATA_NOT_EXIST")
    assert replay_from([a, refused], starts, "T", 0) == 40  # a plan that never reads the store does not count


def test_a_decision_is_made_by_the_run_of_the_copy_that_added_its_unit_or_of_the_subscriptions_first() -> None:
    copies = [{"store": "c2", "from_offset": 100, "to_offset": 200},
              {"store": "c1", "from_offset": 0, "to_offset": 100},
              {"store": "c3", "from_offset": 200, "to_offset": 300}]
    assert decided_by(150, "c1", copies) == "c2"
    assert decided_by(150, "c3", copies) == "c3"  # a subscription new at c3 decided the unit c2 added
    assert decided_by(250, "c1", copies) == "c3"
    assert decided_by(5000, "c1", copies) is None  # no copy added it
