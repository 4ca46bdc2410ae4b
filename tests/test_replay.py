"""filterlib.replay.from_store from the store directory alone (consume queues, ext files, commitlog decoded):
every unit's outcome, every call and the delivered set equal the real broker's pull replay."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import refharness
import scenarios
from support.filters import HARNESS_OUTCOMES, pulling_filters
from support.harness_runs import pull_answers_run, store_run
from support.registry_replay import replay_registrations

from filterlib.engine.decide import OUTCOMES, REASONS
from filterlib.registry import compile_filter
from filterlib.replay.from_store import MessageIndex, load_queue, replay_queue
from filterlib.replay.paging import PullConfig
from filterlib.store.scan import ScanOptions
from filterlib.store.storedir import StoreDir


def compare(run: dict, manager) -> tuple[int, int, list]:
    store = StoreDir(str(run["out"] / "store"))
    table = pa.Table.from_batches([b for _, bs, _ in store.decode_commitlog(ScanOptions(check_crc=True)) for b in bs])
    messages = MessageIndex(table)
    units = calls = 0
    problems = []
    for sub_row, f in pulling_filters(run, manager):
        for q in sub_row["queues"]:
            queue = load_queue(store, sub_row["topic"], q["queueId"])
            assert queue.min_offset == q["minOffset"] and queue.min_offset + len(queue.size) == q["maxOffset"]
            decisions, got = replay_queue(f, queue, messages, 0, PullConfig(batch_size=sub_row.get("batchSize", 32)))
            mine = [(OUTCOMES[o], bool(b)) for o, b in zip(decisions.outcome, decisions.bloom_false_positive,
                                                            strict=True)]
            theirs = [(HARNESS_OUTCOMES.get(u["outcome"], u["outcome"]), u["bloomFalsePositive"]) for u in q["units"]]
            if mine != theirs:
                problems.append((sub_row["group"], sub_row["topic"], q["queueId"], "units", theirs, mine))
            tags = [None if u["tagsCode"] is None else int(u["tagsCode"]) for u in q["units"]]
            resolved = [int(t) if ok else None for t, ok in zip(queue.ext.tags_code, queue.ext.tags_code_legal,
                                                                 strict=True)]
            if resolved != tags:
                problems.append((sub_row["group"], q["queueId"], "tagsCode", tags, resolved))
            calls_mine = list(zip(got.request_offset.tolist(), got.status_names(), got.next_begin_offset.tolist(),
                                  got.message_count.tolist(), got.filter_message_count.tolist(), strict=True))
            calls_theirs = [(c["requestOffset"], c["status"], c["nextBeginOffset"], c["messageCount"],
                             c["filterMessageCount"]) for c in q["calls"]]
            if calls_mine != calls_theirs:
                problems.append((sub_row["group"], q["queueId"], "calls", calls_theirs, calls_mine))
            failing = [qo for qo, m in _first_undecoded(q["messages"])]
            mine_failing = [queue.min_offset + i for i, r in enumerate(decisions.reason)
                            if REASONS[r] == "client_decode_failed"]
            if failing != mine_failing:
                problems.append((sub_row["group"], q["queueId"], "first undecoded message per pull", failing,
                                 mine_failing))
            delivered = {int(queue.commit_log_offset[i]) for i, o in enumerate(mine) if o[0] == "DELIVERED"}
            if delivered != {m["commitLogOffset"] for m in q["messages"] if m["clientKept"]}:
                problems.append((sub_row["group"], q["queueId"], "delivered"))
            units += len(mine)
            calls += len(calls_theirs)
    return units, calls, problems


def _first_undecoded(messages: list[dict]) -> list[tuple[int, dict]]:
    """(queue offset, message) of the first message of each pull that the client's decodesBatch did not reach."""
    out, seen = [], set()
    for m in messages:
        if not m["clientDecoded"] and m["call"] not in seen:
            seen.add(m["call"])
            out.append((m["queueOffset"], m))
    return out


@pytest.mark.reference
@pytest.mark.parametrize("filter_support_retry", [False, True])
def test_replay_from_the_store_equals_the_real_pull(filter_support_retry):
    run = store_run(filter_support_retry)
    manager, _ = replay_registrations(run, {}, compiler=compile_filter)
    units, calls, problems = compare(run, manager)
    assert problems == []
    assert units > 2000 and calls > 50


@pytest.mark.reference
@pytest.mark.parametrize("enable_property_filter", [False, True])
def test_replay_of_the_pull_answer_scenarios(enable_property_filter):
    run = pull_answers_run(enable_property_filter)
    manager, _ = replay_registrations(run, {}, compiler=compile_filter)
    units, calls, problems = compare(run, manager)
    assert problems == []
    assert units >= 40


@pytest.mark.reference
def test_replay_loses_what_the_client_cannot_decode():
    """Compressed bodies that do not inflate: the client loses the first such message of a pull and the rest of
    that pull; every unit's outcome, each pull's first undecoded message and the delivered set equal the real
    client's decodesBatch over the broker's responses."""
    scenario = scenarios.client_decode_scenario(3)
    out = refharness.write_store(scenario)
    run = {"out": out, "scenario": scenario, "report": json.loads((out / "report.json").read_text()),
           "listing": json.loads((out / "listing.json").read_text()),
           "pull": json.loads((out / "pull.json").read_text())}
    manager, _ = replay_registrations(run, {}, compiler=compile_filter)
    units, calls, problems = compare(run, manager)
    assert problems == []
    outcomes = [u["outcome"] for s in run["pull"]["subscriptions"] for q in s["queues"] for u in q["units"]]
    lost_after = [m for s in run["pull"]["subscriptions"] for q in s["queues"] for m in q["messages"]
                  if not m["clientDecoded"] and (m["queueOffset"], m) not in _first_undecoded(q["messages"])]
    assert outcomes.count("CLIENT_DECODE_FAILED") >= 10 and lost_after  # failures, and messages lost after one
