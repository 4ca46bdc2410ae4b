"""filterlib.replay.matrix, no Spark: a queue's replay encoded as the decision matrix, its details and counts decodes
back to exactly `simulate_queue`'s decision rows (every column, the pull index from the pulls' ranges), on stores
the real broker wrote, from the earliest offset, from committed-like starts and with RocksDB paging; every
combination the engine gives has a decision code; the counts are group_stats' counts of those rows."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest
import refharness
import scenarios
from support.filters import pulling_filters, verdict_units
from support.harness_runs import pull_answers_run, store_run
from support.registry_replay import replay_registrations

from filterlib import vocabulary as vocab
from filterlib.registry import compile_filter
from filterlib.replay import matrix
from filterlib.replay.from_store import MessageIndex, load_queue
from filterlib.replay.paging import PullConfig
from filterlib.replay.rows import UNITS_SCHEMA, simulate_queue
from filterlib.store.scan import ScanOptions
from filterlib.store.storedir import StoreDir


def units_table(queue, messages: MessageIndex) -> pa.Table:
    """A dump queue's units joined to their messages, as job 2's task hands them to the replay."""
    props, tags, errors, _ = messages.take(queue.commit_log_offset)
    e = queue.ext
    n = len(queue.size)
    bitmaps = [e.bitmaps[i, :k].tobytes() if k >= 0 else None for i, k in enumerate(e.bitmap_length.tolist())]
    return pa.Table.from_arrays([
        pa.array(np.arange(queue.min_offset, queue.min_offset + n, dtype=np.int64)),
        pa.array(queue.commit_log_offset, pa.int64()), pa.array(queue.size.astype(np.int32)),
        pa.array(e.tags_code, pa.int64()), pa.array(e.tags_code_legal.astype(bool)),
        pa.array(e.has_ext.astype(bool)), pa.array(e.store_time, pa.int64()), pa.array(bitmaps, pa.binary()),
        props, tags, errors], schema=UNITS_SCHEMA)


def queues_of(run: dict, manager):
    """Per (topic, queue id) of a harness run: the units table, min offset, units per file and the OK filters."""
    store = StoreDir(str(run["out"] / "store"))
    table = pa.Table.from_batches([b for _, bs, _ in store.decode_commitlog(ScanOptions()) for b in bs])
    messages = MessageIndex(table)
    by_topic = defaultdict(list)
    for sub_row, f in pulling_filters(run, manager):
        by_topic[sub_row["topic"]].append((sub_row, f))
    for topic, subs in by_topic.items():
        for q in subs[0][0]["queues"]:
            queue = load_queue(store, topic, q["queueId"])
            yield topic, q["queueId"], units_table(queue, messages), queue, subs


def runs() -> dict:
    client = scenarios.client_decode_scenario(3)
    out = refharness.write_store(client)
    decode_run = {"out": out, "scenario": client, "report": json.loads((out / "report.json").read_text()),
                  "listing": json.loads((out / "listing.json").read_text()),
                  "pull": json.loads((out / "pull.json").read_text())}
    return {"retry_off": lambda: store_run(False), "retry_on": lambda: store_run(True),
            "answers": lambda: pull_answers_run(True), "client_decode": lambda: decode_run}


PAGINGS = {
    "earliest": (None, None),
    "started": (lambda q, i: q.min_offset + 3 * i, None),  # committed-like starts, one per plan
    "before_min": (lambda q, i: max(0, q.min_offset - 1), None),
    "rocksdb_batch": (None, (0, False)),
    "rocksdb_to_end": (None, (0, True)),
}


@pytest.mark.reference
@pytest.mark.parametrize("name", ["retry_off", "retry_on", "answers", "client_decode"])
@pytest.mark.parametrize("paging", list(PAGINGS))
def test_the_matrix_decodes_to_exactly_the_decision_rows(name, paging):
    run = runs()[name]()
    manager, _ = replay_registrations(run, {}, compiler=compile_filter)
    start_of, rocks = PAGINGS[paging]
    compared = 0
    outcomes, reasons = set(), set()
    for _topic, _qid, units, queue, subs in queues_of(run, manager):
        per_file = queue.units_per_file if rocks is None else rocks[0]
        config = PullConfig(rocksdb_to_queue_end=bool(rocks and rocks[1]))
        # positions out of plan order and a spare byte: the matrix does not assume either
        width = len(subs) + 1
        positions = {100 + i: width - 1 - i for i in range(len(subs))}
        filters = [(100 + i, f, 0 if start_of is None else start_of(queue, i), s.get("batchSize", 32))
                   for i, (s, f) in enumerate(subs)]
        rows, pulls = simulate_queue(filters, units, queue.min_offset, per_file, config)
        out = matrix.replay_queue([(p, positions[p], f, st, b) for p, f, st, b in filters], width, units,
                                  queue.min_offset, per_file, config)
        assert out.pulls.equals(pulls)
        slots = [f for _, f in reversed(subs)]  # the verdicts' slots in another order than the plans
        by_verdicts = matrix.replay_queue([(p, positions[p], f, st, b) for p, f, st, b in filters], width,
                                          verdict_units(units, slots), queue.min_offset, per_file, config, slots=slots)
        assert by_verdicts.matrix.equals(out.matrix) and by_verdicts.details.equals(out.details)
        assert by_verdicts.pulls.equals(out.pulls) and {p: c.tolist() for p, c in by_verdicts.counts.items()} == {
            p: c.tolist() for p, c in out.counts.items()}
        decoded = matrix.decode(out.matrix, out.details, out.pulls, positions, width)
        assert decoded.to_pylist() == rows.to_pylist()
        assert out.matrix.num_rows == len({r["queue_offset"] for r in rows.to_pylist()})
        for p, *_ in filters:
            mine = [r for r in rows.to_pylist() if r["plan"] == p]
            got = dict(zip(matrix.COUNT_FIELDS, out.counts[p].tolist(), strict=True))
            assert got["units_scanned"] == len(mine)
            for o, col in vocab.OUTCOME_COLUMNS.items():
                assert got[col] == sum(r["outcome"] == o for r in mine)
            assert got["bloom_false_positives"] == sum(r["bloom_false_positive"] for r in mine)
            assert got["sql_evaluations"] == sum(r["sql_value"] is not None for r in mine)
            assert got["tag_collisions"] == sum(r["reason"] == "client_tag_mismatch" for r in mine)
            assert got["bytes_delivered"] == sum(r["size"] for r in mine if r["outcome"] == "DELIVERED")
            assert got["bytes_filtered_on_broker"] == sum(
                r["size"] for r in mine if r["outcome"] != "DELIVERED" and r["layer"] != "client")
            plan_pulls = [q for q in pulls.to_pylist() if q["plan"] == p]
            assert (got["pulls"], got["empty_pulls"], got["queues"]) == (
                len(plan_pulls), sum(q["message_count"] == 0 for q in plan_pulls), 1)
        outcomes |= {r["outcome"] for r in rows.to_pylist()}
        reasons |= {r["reason"] for r in rows.to_pylist()}
        compared += rows.num_rows
    assert compared >= 40
    if name == "client_decode":
        assert {"client_decode_failed", "client_decode_lost"} <= reasons
    if name == "retry_off" and paging == "earliest":
        assert {"DELIVERED", "TAG_HASH_MISS", "BLOOM_MISS", "SQL_FALSE", "SQL_NULL", "SQL_ERROR"} <= outcomes


def test_the_code_table_is_one_byte_and_each_combination_once():
    codes = vocab.DECISION_CODES
    assert 1 < len(codes) <= 256 and [c.code for c in codes] == list(range(len(codes)))
    assert codes[vocab.NOT_SCANNED].outcome is None
    keys = [(c.outcome, c.layer, c.reason, c.cq_reason, c.sql_value) for c in codes[1:]]
    assert len(set(keys)) == len(keys)
    for c in codes[1:]:
        assert c.bloom_tested == (c.cq_reason in vocab.BLOOM_TESTED)
        assert c.bloom_false_positive == (c.cq_reason == "bloom_hit" and c.layer == vocab.COMMIT_LOG
                                          and c.outcome != vocab.DELIVERED)
        assert c.outcome in vocab.OUTCOME_NAMES and c.layer in vocab.LAYERS
    assert {c.outcome for c in codes[1:]} == set(vocab.OUTCOME_NAMES)


def test_a_combination_without_code_is_refused_in_words():
    from filterlib.engine.decide import LAYERS, OUTCOMES, REASONS, Decisions

    d = Decisions(np.array([OUTCOMES.index("DELIVERED")], np.int8), np.array([LAYERS.index("consume_queue")], np.int8),
                  np.array([REASONS.index("bloom_miss")], np.int8), np.array([-1], np.int8), {},
                  np.array([False]), np.array([REASONS.index("bloom_miss")], np.int8))
    with pytest.raises(ValueError, match="no decision code for outcome DELIVERED, layer consume_queue"):
        matrix.encode(d)
