"""`filterlib.engine.decide`: the broker's layers over whole sets of units give, unit for unit, what the row
function `message_filter.decide` gives and what the real broker's pull replay recorded (harness pull.json)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest
from support.filters import HARNESS_OUTCOMES, MAP, pulling_filters, sql_setup, units_of
from support.harness_runs import pull_answers_run, store_run
from support.registry_replay import replay_registrations

from filterlib.engine.decide import REASONS, Units, decide_units, layout_of, message_verdicts
from filterlib.engine.verdicts import assign, from_arrow, to_arrow
from filterlib.message_filter import ExtUnit, decide
from filterlib.registry import compile_filter


def with_verdicts(units: Units, filters: list) -> Units:
    """The units as job 2's replay takes them: no properties or tags, the messages' verdicts (through their Arrow
    columns) in their place."""
    v = message_verdicts(filters, units.properties, units.tags)
    layout = layout_of(filters)
    back = assign(from_arrow(*to_arrow(v, layout), layout, None), filters)
    return dataclasses.replace(units, properties=None, tags=None, verdicts=back)


def compare(run: dict, manager) -> tuple[int, list]:
    records = {r["commitLogOffset"]: r for r in run["listing"]["records"]}
    compared, problems = 0, []
    for sub_row, f in pulling_filters(run, manager):
        if not any(q["units"] for q in sub_row["queues"]):
            continue
        units, rows = units_of(sub_row, records)
        got = decide_units(f, units)
        details = got.details(np.arange(len(rows))).to_pylist()  # the set-at-a-time column the job writes
        by_verdicts = decide_units(f, with_verdicts(units, [f]))
        if by_verdicts.details(np.arange(len(rows))).to_pylist() != details:
            problems.append((sub_row["group"], "verdicts' details differ"))
        for i, u in enumerate(rows):
            compared += 1
            if details[i] != got.row(i)[3]:
                problems.append((sub_row["group"], u["queueOffset"], "details", details[i], got.row(i)[3]))
            tc = None if u["tagsCode"] is None else int(u["tagsCode"])
            ext = None
            if u["ext"]:
                bitmap = None if u["bitmapHex"] is None else bytes.fromhex(u["bitmapHex"])
                ext = ExtUnit(tc, u["extMsgStoreTime"], bitmap)
            want = decide(f, tc, ext, records[u["commitLogOffset"]]["properties"] or {})
            row = got.row(i)
            if by_verdicts.row(i) != row:
                problems.append((sub_row["group"], u["queueOffset"], "verdicts", by_verdicts.row(i), row))
            if row != (want.outcome, want.layer, want.reason, want.detail, want.bloom_false_positive):
                problems.append((sub_row["group"], u["queueOffset"], row, want))
            harness = (HARNESS_OUTCOMES.get(u["outcome"], u["outcome"]), u["bloomFalsePositive"])
            if (row[0], row[4]) != harness:
                problems.append((sub_row["group"], u["queueOffset"], "harness", row, harness))
    return compared, problems


@pytest.mark.reference
@pytest.mark.parametrize("filter_support_retry", [False, True])
def test_units_decided_like_the_row_filter_and_the_real_pull(filter_support_retry):
    run = store_run(filter_support_retry)
    manager, _ = replay_registrations(run, {}, compiler=compile_filter)
    compared, problems = compare(run, manager)
    assert problems == []
    assert compared > 2000


@pytest.mark.reference
@pytest.mark.parametrize("enable_property_filter", [False, True])
def test_pull_answer_scenarios(enable_property_filter):
    run = pull_answers_run(enable_property_filter)
    manager, _ = replay_registrations(run, {}, compiler=compile_filter)
    compared, problems = compare(run, manager)
    assert problems == []
    assert compared >= (200 if enable_property_filter else 40)


def test_every_consume_queue_branch_in_one_batch():
    """The row tests' branch cases (message_filter) as one batch: same branches, born-time edge included."""
    from filterlib.engine.decide import consume_queue_layer
    from filterlib.message_filter import ExpressionMessageFilter

    _, data, f, hit = sql_setup(born=1000)
    cases = [(False, 0, None), (True, 1000, bytes(14)), (True, 999, hit), (True, 1001, None),
             (True, 1001, bytes(13)), (True, 1001, bytes(14)), (True, 1001, hit)]
    n = len(cases)
    bitmaps = np.zeros((n, 14), dtype=np.uint8)
    for i, (_, _, b) in enumerate(cases):
        if b is not None:
            bitmaps[i, :len(b)] = np.frombuffer(b, dtype=np.uint8)
    units = Units(np.full(n, 5, dtype=np.int64), np.ones(n, dtype=bool), np.array([c[0] for c in cases]),
                  np.array([c[1] for c in cases], dtype=np.int64), bitmaps,
                  np.array([-1 if c[2] is None else len(c[2]) for c in cases], dtype=np.int64),
                  pa.array([[]] * n, type=MAP), pa.array([None] * n, pa.string()))
    for flt in (f, ExpressionMessageFilter(f.subscription, data, None)):
        matched, reason = consume_queue_layer(flt, units)
        want = [flt.check_consume_queue(5, ExtUnit(5, t, b) if has else None) for has, t, b in cases]
        assert [REASONS[r] for r in reason] == [w.reason for w in want]
        assert list(matched) == [w.matched for w in want]
    assert REASONS.index("not_in_live") in reason and REASONS.index("bloom_hit") in consume_queue_layer(f, units)[1]
