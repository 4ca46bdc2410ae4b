"""What-if candidates without Spark (`filterlib.replay.whatif`): parsing and refusing them as the broker would,
planning one per current subscription, and the gained/lost rule over matrix rows built from the real decision
codes; job 2's end-to-end what-if run is held to the demo dump in test_simulate_pull."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from filterlib import sql92
from filterlib import vocabulary as vocab
from filterlib.errors import FilterSyntaxError
from filterlib.message_filter import OK
from filterlib.registry import ConsumerFilterManager
from filterlib.replay import whatif
from filterlib.replay.matrix import matrix_column, subscription_positions
from filterlib.replay.plans import FROM_FILE, plan_all
from filterlib.subscriptions import POSTED, REGISTERED, Subscription

DELIVERING = [c.code for c in vocab.DECISION_CODES if c.outcome == vocab.DELIVERED]
DROPPING = [c.code for c in vocab.DECISION_CODES if c.outcome not in (None, vocab.DELIVERED)]


def test_a_malformed_spec_is_an_error_and_a_selector_rocketmq_rejects_is_refused_with_its_position() -> None:
    for bad in ("G", "G=SQL92", "=TAG:a", "G=XML:a"):
        with pytest.raises(ValueError, match="expected GROUP"):
            whatif.parse_what_if(bad)
    refused = whatif.parse_what_if("G=SQL92:a >> 4")
    with pytest.raises(FilterSyntaxError) as compiled:
        sql92.compile("a >> 4")
    where = compiled.value.position
    assert isinstance(refused, whatif.WhatIfRefused) and refused.position == where
    assert f"position {where}" in refused.reason
    assert isinstance(whatif.parse_what_if("G=TAG:A || || B"), whatif.WhatIf)  # FilterAPI splits it: empty parts go
    ok = whatif.parse_what_if("G@T=tag:A || B")
    assert ok == whatif.WhatIf("G", "T", "TAG", "A || B", "G@T=tag:A || B")
    assert whatif.parse_what_if("G=SQL92:a = 'x=y:z'").expression == "a = 'x=y:z'"
    assert whatif.parse_what_if("G=TAG:*").topic is None


def _plans(subs: list[Subscription]) -> list:
    return plan_all([(s, FROM_FILE) for s in subs], ConsumerFilterManager(), True, False, 0)


def test_a_candidate_stands_in_for_each_current_subscription_of_its_group_as_a_posted_selector() -> None:
    plans = _plans([Subscription("G", "T1", "TAG", "A", REGISTERED, 3, 16),
                    Subscription("G", "T2", "TAG", "*"), Subscription("H", "T1", "TAG", "*")])
    pairs = whatif.what_if_plans([whatif.parse_what_if("G=SQL92:a > 1")], plans)
    assert [(s.topic, cur) for s, cur in pairs] == [("T1", 0), ("T2", 1)]
    first = pairs[0][0]
    assert (first.group, first.type, first.expression, first.path, first.sub_version, first.batch_size) == \
        ("G", "SQL92", "a > 1", POSTED, 3, 16)
    assert [cur for _, cur in whatif.what_if_plans([whatif.parse_what_if("G@T2=TAG:B")], plans)] == [1]
    with pytest.raises(ValueError, match=r"no current subscription of group 'X'.*G@T1, G@T2, H@T1"):
        whatif.what_if_plans([whatif.parse_what_if("X=TAG:*")], plans)
    with pytest.raises(ValueError, match="to topic 'T3'"):
        whatif.what_if_plans([whatif.parse_what_if("G@T3=TAG:*")], plans)


def _run(rng: random.Random):
    """Two topics, a subscription or two each, a candidate for some; each unit's byte per plan a random real
    decision code (0: never scanned). Returns the plans, compared, the matrix rows and the codes per unit."""
    subs = [Subscription("G", "T1", "TAG", "A"), Subscription("H", "T1", "TAG", "*"),
            Subscription("G", "T2", "TAG", "*")]
    plans = _plans(subs)
    cands = [whatif.parse_what_if("G=TAG:B"), whatif.parse_what_if("H=SQL92:a IS NULL")]
    pairs = whatif.what_if_plans(cands, plans)
    cand_plans = plan_all([(s, whatif.WHAT_IF) for s, _ in pairs], ConsumerFilterManager(), True, False, 0,
                          start=len(plans))
    compared = {p.index: cur for p, (_, cur) in zip(cand_plans, pairs, strict=True)}
    every = plans + cand_plans
    positions, widths = subscription_positions(every, len(plans))
    rows, codes = [], []
    pool = [0] + DELIVERING + DROPPING
    for topic in ("T1", "T2"):
        width = sum(widths[topic])
        for qo in range(40):
            c = [rng.choice(pool) for _ in range(width)]
            rows.append({"topic": topic, "queue_id": qo % 3, "queue_offset": qo,
                         "commit_log_offset": 1000 * qo + len(topic), "decisions": bytes(c)})
            codes.append(c)
    table = pa.Table.from_pylist(rows, pa.schema([("topic", pa.string()), ("queue_id", pa.int32()),
                                                   ("queue_offset", pa.int64()), ("commit_log_offset", pa.int64()),
                                                   ("decisions", pa.binary())]))
    return every, compared, positions, widths, table


@pytest.mark.parametrize("seed", range(5))
def test_a_unit_is_gained_when_only_the_candidate_delivers_it_and_lost_when_only_the_current_one_does(seed) -> None:
    plans, compared, positions, widths, table = _run(random.Random(seed))
    compared_list = whatif.comparisons(plans, compared, positions, widths)
    got = whatif.changes(table, compared_list)
    assert got.schema == whatif.CHANGES_SCHEMA
    outcome = {c.code: c.outcome for c in vocab.DECISION_CODES}
    expected = set()
    for row in table.to_pylist():
        for cand, cur in compared.items():
            p, base = plans[cand], plans[cur]
            if p.topic != row["topic"]:
                continue
            new, old = row["decisions"][positions[cand]], row["decisions"][positions[cur]]
            delivers_new, delivers_old = outcome[new] == vocab.DELIVERED, outcome[old] == vocab.DELIVERED
            if delivers_new != delivers_old:
                expected.add((p.group, row["topic"], row["queue_id"], row["queue_offset"], row["commit_log_offset"],
                              "gained" if delivers_new else "lost", base.expression, p.expression, outcome[old],
                              outcome[new]))
    assert expected  # the seeds give both kinds
    assert {tuple(r.values()) for r in got.to_pylist()} == expected and got.num_rows == len(expected)
    # a batch of one topic's rows (the job hands mapInArrow batches) gives that topic's share
    t2 = table.filter(pa.compute.equal(table.column("topic"), "T2"))
    assert {tuple(r.values()) for r in whatif.changes(t2.to_batches()[0], compared_list).to_pylist()} == \
        {e for e in expected if e[1] == "T2"}


def test_rows_as_the_replay_encodes_them_compare_the_same() -> None:
    """The matrix column the tasks write (`matrix.matrix_column`, one topic's rows at a time) is what `changes`
    reads; no rows, no changes."""
    plans, compared, positions, widths, table = _run(random.Random(9))
    compared_list = whatif.comparisons(plans, compared, positions, widths)
    parts = []
    for topic in ("T1", "T2"):
        mine = table.filter(pa.compute.equal(table.column("topic"), topic))
        codes = np.array([list(b) for b in mine.column("decisions").to_pylist()], dtype=np.uint8)
        parts.append(mine.set_column(4, "decisions", matrix_column(codes)))
    encoded = pa.concat_tables(parts)
    assert whatif.changes(encoded, compared_list).equals(whatif.changes(table, compared_list))
    assert whatif.changes(table.slice(0, 0), compared_list).num_rows == 0


def test_the_summary_counts_by_queue_gives_a_few_examples_of_each_and_says_a_refused_candidate_gets_nothing() -> None:
    plans, compared, positions, widths, table = _run(random.Random(3))
    rows = whatif.changes(table, whatif.comparisons(plans, compared, positions, widths)).to_pylist()
    rows.sort(key=lambda r: (r["topic"], r["queue_id"], r["queue_offset"]))
    counts: dict[tuple, int] = {}
    for r in rows:
        k = (r["consumer_group"], r["topic"], r["candidate_expression"], r["queue_id"], r["change"])
        counts[k] = counts.get(k, 0) + 1
    names = ["consumer_group", "topic", "candidate_expression", "queue_id", "change"]
    count_rows = [dict(zip(names, k, strict=True), count=n) for k, n in counts.items()]
    out, notes = whatif.summarize(plans, compared, count_rows, rows, examples=2)
    assert [(o["consumer_group"], o["topic"], o["candidate"], o["current"]) for o in out] == \
        [(plans[c].group, plans[c].topic, f"{plans[c].type}:{plans[c].expression}",
          f"{plans[b].type}:{plans[b].expression}") for c, b in compared.items()]
    for o in out:
        mine = [r for r in rows if (r["consumer_group"], r["topic"]) == (o["consumer_group"], o["topic"])]
        assert o["gained"] == sum(r["change"] == "gained" for r in mine)
        assert o["lost"] == sum(r["change"] == "lost" for r in mine)
        assert [q["queue_id"] for q in o["queues"]] == sorted({r["queue_id"] for r in mine})
        assert sum(q["gained"] + q["lost"] for q in o["queues"]) == len(mine)
        gained = [r for r in mine if r["change"] == "gained"][:2]
        lost = [r for r in mine if r["change"] == "lost"][:2]
        assert o["examples"] == gained + lost
    assert all(p.answer == OK for p in plans) and notes == []
    refused = [p if p.index not in compared else type(p)(**{**p.to_json(), "answer": "SUBSCRIPTION_NOT_LATEST",
                                                            "remark": "old"}) for p in plans]
    _, notes = whatif.summarize(refused, compared, count_rows, rows)
    assert len(notes) == len(compared) and all("SUBSCRIPTION_NOT_LATEST (old): it would receive nothing" in n
                                               for n in notes)
