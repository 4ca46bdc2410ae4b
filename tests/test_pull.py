"""filterlib.pull: the consumer's pulls over each queue equal the real broker's getMessage calls (harness
pull.json: request offset, status, next begin offset, messages, filtered messages, and the call of every unit),
with the per-unit verdicts from the set-at-a-time filter."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_engine_decide import pulling_filters, units_of
from test_message_filter import pull_answers_run
from test_registry import replay_registrations, store_run

from filterlib.engine.decide import OUTCOMES, Decisions, decide_units
from filterlib.message_filter import BLOOM_MISS, SQL_ERROR, SQL_FALSE, SQL_NULL, TAG_HASH_MISS
from filterlib.pull import PullConfig, replay_pulls
from filterlib.registry import compile_filter
from filterlib.store.consumequeue import CQ_STORE_UNIT_SIZE

CQ_DROPS = {OUTCOMES.index(TAG_HASH_MISS), OUTCOMES.index(BLOOM_MISS)}
CL_DROPS = {OUTCOMES.index(o) for o in (SQL_FALSE, SQL_NULL, SQL_ERROR)}


def verdicts(d: Decisions) -> tuple[np.ndarray, np.ndarray]:
    cq = ~np.isin(d.outcome, list(CQ_DROPS))
    cl = ~np.isin(d.outcome, list(CL_DROPS))
    return cq, cl


def units_per_file(store: str, topic: str, qid: int) -> int:
    qdir = os.path.join(store, "consumequeue", topic, str(qid))
    return os.path.getsize(os.path.join(qdir, sorted(os.listdir(qdir))[0])) // CQ_STORE_UNIT_SIZE


def compare(run: dict, manager) -> tuple[int, list]:
    records = {r["commitLogOffset"]: r for r in run["listing"]["records"]}
    store = str(run["out"] / "store")
    calls, problems = 0, []
    for sub_row, f in pulling_filters(run, manager):
        for q in sub_row["queues"]:
            rows = q["units"]
            assert [u["queueOffset"] for u in rows] == list(range(q["minOffset"], q["maxOffset"]))
            if rows:
                one = dict(sub_row, queues=[q])
                units, _ = units_of(one, records)
                cq, cl = verdicts(decide_units(f, units))
                per_file = units_per_file(store, sub_row["topic"], q["queueId"])
            else:
                cq = cl = np.zeros(0, dtype=bool)
                per_file = 1
            sizes = np.array([u["size"] for u in rows], dtype=np.int64)
            got = replay_pulls(0, q["minOffset"], sizes, cq, cl, per_file,
                               PullConfig(batch_size=sub_row.get("batchSize", 32)))
            mine = list(zip(got.request_offset.tolist(), got.status_names(), got.next_begin_offset.tolist(),
                            got.message_count.tolist(), got.filter_message_count.tolist(), strict=True))
            theirs = [(c["requestOffset"], c["status"], c["nextBeginOffset"], c["messageCount"],
                       c["filterMessageCount"]) for c in q["calls"]]
            if mine != theirs:
                problems.append((sub_row["group"], sub_row["topic"], q["queueId"], theirs, mine))
            if got.unit_call.tolist() != [u["call"] for u in rows]:
                problems.append((sub_row["group"], q["queueId"], "unit calls"))
            calls += len(theirs)
    return calls, problems


@pytest.mark.reference
@pytest.mark.parametrize("filter_support_retry", [False, True])
def test_pulls_equal_the_real_broker(filter_support_retry):
    run = store_run(filter_support_retry)
    manager, _ = replay_registrations(run, {}, compiler=compile_filter)
    calls, problems = compare(run, manager)
    assert problems == []
    assert calls > 50


@pytest.mark.reference
@pytest.mark.parametrize("enable_property_filter", [False, True])
def test_pulls_of_the_pull_answer_scenarios(enable_property_filter):
    run = pull_answers_run(enable_property_filter)
    manager, _ = replay_registrations(run, {}, compiler=compile_filter)
    calls, problems = compare(run, manager)
    assert problems == []
    assert calls > 5


def test_batch_limits_cut_calls():
    """32 deliverable units of 10 KiB: the in-memory transfer limit (256 KiB) ends a call after 25 messages."""
    n = 40
    got = replay_pulls(0, 0, np.full(n, 10 * 1024), np.ones(n, bool), np.ones(n, bool), 1000)
    assert got.message_count.tolist() == [25, 15, 0]
    assert got.status_names() == ["FOUND", "FOUND", "OFFSET_OVERFLOW_ONE"]
    disk = replay_pulls(0, 0, np.full(n, 100), np.ones(n, bool), np.ones(n, bool), 1000, in_mem=np.zeros(n, bool))
    assert disk.message_count.tolist()[:2] == [8, 8]


def test_filter_scan_limit_per_call():
    """A call filters at most maxFilterMessageSize / 20 = 800 units (16000 bytes of units) when none match."""
    n = 2000
    got = replay_pulls(0, 0, np.full(n, 100), np.zeros(n, bool), np.zeros(n, bool), 100_000)
    assert got.next_begin_offset.tolist() == [800, 1600, 2000, 2000]
    assert got.status_names() == ["NO_MATCHED_MESSAGE"] * 3 + ["OFFSET_OVERFLOW_ONE"]
    wide = replay_pulls(0, 0, np.full(n, 100), np.zeros(n, bool), np.zeros(n, bool), 100_000,
                        PullConfig(batch_size=1000))
    assert wide.next_begin_offset.tolist()[0] == 1000
