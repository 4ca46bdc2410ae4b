"""filterlib.replay.paging: the consumer's pulls over each queue equal the real broker's getMessage calls (harness
pull.json: request offset, status, next begin offset, messages, filtered messages, and the call of every unit),
with the per-unit verdicts from the set-at-a-time filter."""

from __future__ import annotations

import os

import numpy as np
import pytest
from support.filters import pulling_filters, units_of
from support.harness_runs import pull_answers_run, store_run
from support.registry_replay import replay_registrations

from filterlib.engine.decide import OUTCOMES, Decisions, decide_units
from filterlib.message_filter import BLOOM_MISS, SQL_ERROR, SQL_FALSE, SQL_NULL, TAG_HASH_MISS
from filterlib.registry import compile_filter
from filterlib.replay.paging import PullConfig, Span, replay_pulls, span_start
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


def _pieces(min_offset: int, n: int, size: int, base: int = 0) -> list[tuple[int, int]]:
    """[begin, end) runs of whole files of `size` units over the queue [min_offset, min_offset + n), cut at
    base + k * size (`base` a file boundary: where job 2 counts a queue's pieces from)."""
    cuts = list(range(base + ((min_offset - base) // size + 1) * size, min_offset + n, size))
    edges = [min_offset, *cuts, min_offset + n]
    return list(zip(edges[:-1], edges[1:], strict=True))


@pytest.mark.parametrize("seed", range(40))
def test_a_queue_paged_in_pieces_of_whole_files_gives_the_same_calls(seed):
    """Cut anywhere on consumequeue file boundaries, each piece paged on its own (`Span`) and its calls numbered on
    over the queue gives exactly the whole queue's calls and per-unit call: a call never scans past its file."""
    rng = np.random.default_rng(seed)
    per_file = int(rng.choice([3, 7, 10, 64, 900]))
    min_offset = int(rng.integers(0, 3 * per_file))
    n = int(rng.integers(0, 12 * per_file + 50))
    sizes = rng.choice([100, 5000, 40 * 1024, 200 * 1024], n, p=[0.6, 0.2, 0.15, 0.05])
    dense = float(rng.choice([0.0, 0.02, 0.5, 1.0]))
    cq_pass = rng.random(n) < dense
    cl_pass = rng.random(n) < 0.8
    start = int(rng.choice([0, min_offset, min_offset + n // 2, min_offset + n, min_offset + n + 3,
                            max(0, min_offset - 1)]))
    config = PullConfig(batch_size=int(rng.choice([1, 8, 32, 1000])))
    whole = replay_pulls(start, min_offset, sizes, cq_pass, cl_pass, per_file, config)
    for files, base in ((1, 0), (2, 0), (5, 0), (2, per_file), (5, 3 * per_file)):
        got = {k: [] for k in ("request_offset", "status", "next_begin_offset", "message_count",
                               "filter_message_count")}
        unit_call = []
        pieces = _pieces(min_offset, n, files * per_file, base) if n else [(min_offset, min_offset)]
        for begin, end in pieces:
            i, j = begin - min_offset, end - min_offset
            calls = replay_pulls(start, begin, sizes[i:j], cq_pass[i:j], cl_pass[i:j], per_file, config,
                                 span=Span(min_offset, holds_end=end == min_offset + n))
            before = len(got["status"])
            unit_call += [c + before if c >= 0 else -1 for c in calls.unit_call.tolist()]
            for k in got:
                got[k] += getattr(calls, k).tolist()
        for k in got:
            assert got[k] == getattr(whole, k).tolist(), (k, files, base)
        assert unit_call == whole.unit_call.tolist()


def test_span_start_names_where_the_pull_reaches_a_piece():
    span = Span(queue_min=10, holds_end=False)
    assert span_start(3, 10, 20, span) == 3  # the first piece makes the pull's first call, OFFSET_TOO_SMALL
    assert span_start(3, 20, 30, span) == 20
    assert span_start(25, 20, 30, span) == 25
    assert span_start(35, 20, 30, span) is None  # the pull starts after this piece
    assert span_start(35, 30, 40, Span(10, holds_end=True)) == 35
    assert span_start(45, 30, 40, Span(10, holds_end=True)) == 45  # OFFSET_OVERFLOW_BADLY, in the last piece
