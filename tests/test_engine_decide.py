"""`filterlib.engine.decide`: the broker's layers over whole sets of units give, unit for unit, what the row
function `message_filter.decide` gives and what the real broker's pull replay recorded (harness pull.json); the
codes by table (`filterlib.replay.codes.by_table`) are the codes of those decisions."""

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
from filterlib.replay import codes


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
        verdict_units = with_verdicts(units, [f])
        by_verdicts = decide_units(f, verdict_units)
        if by_verdicts.details(np.arange(len(rows))).to_pylist() != details:
            problems.append((sub_row["group"], "verdicts' details differ"))
        by_table = codes.by_table(f, verdict_units, 0, {})
        if by_table is None or not np.array_equal(by_table, codes.encode(by_verdicts)):
            problems.append((sub_row["group"], "the codes by table differ from the decisions' codes"))
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


def _random_units(rng: np.random.Generator, n: int, hit: bytes, tags_code: int) -> Units:
    """Units over every consume-queue branch a filter can meet: no ext, born-time edges, no bitmap, short bitmaps,
    the filter's own bits or none, illegal and other tags codes; messages with and without TAGS and properties."""
    width = len(hit)
    lengths = rng.choice([-1, width - 1, width, width, width], n).astype(np.int64)
    bitmaps = np.zeros((n, width), dtype=np.uint8)
    full = rng.random(n) < 0.5
    bitmaps[full] = np.frombuffer(hit, dtype=np.uint8)
    bitmaps[~full] = rng.integers(0, 256, (int((~full).sum()), width), dtype=np.uint8) & rng.integers(
        0, 2, (int((~full).sum()), 1), dtype=np.uint8) * 255
    props = [[] if rng.random() < 0.2 else [("a", str(rng.choice(["0", "1", "2", "3", "x"])))] for _ in range(n)]
    tags = [None if rng.random() < 0.2 else str(rng.choice(["TagA", "TagB", "Aa"])) for _ in range(n)]
    codes = np.where(rng.random(n) < 0.5, tags_code, rng.integers(-5, 5, n)).astype(np.int64)
    return Units(codes, rng.random(n) < 0.9, rng.random(n) < 0.9, rng.choice([999, 1000, 1001, 5000], n),
                 bitmaps, lengths, pa.array(props, MAP), pa.array(tags, pa.string()))


def test_the_consume_queue_layer_and_the_codes_by_table_over_random_units():
    """The consume-queue layer gives each unit the row function's branch, and `codes.by_table` gives every unit the
    code `encode(decide_units(...))` gives it, for each kind of filter
    (SQL92 with and without bloom data, a TAG set, every tag, no subscription), its table filled as combinations
    first appear and reused; a unit whose body does not decode leaves the decision to the general way."""
    from filterlib.engine.decide import consume_queue_layer
    from filterlib.message_filter import ExpressionMessageFilter
    from filterlib.tags import build_subscription, tags_code

    rng = np.random.default_rng(7)
    m, data, _, hit = sql_setup(born=1000)
    data = dataclasses.replace(data, compiled=compile_filter("SQL92", "a > 1"))  # every SQL92 state, by message
    sql = ExpressionMessageFilter(build_subscription("a > 1", "SQL92", "T"), data, m.bloom_filter)
    no_bloom = dataclasses.replace(data, compiled=compile_filter("SQL92", "a BETWEEN 1 AND 2"), bloom_filter_data=None)
    filters = [sql, ExpressionMessageFilter(sql.subscription, no_bloom, m.bloom_filter),
               ExpressionMessageFilter(build_subscription("TagA || Aa", "TAG", "T"), None, m.bloom_filter),
               ExpressionMessageFilter(build_subscription("*", "TAG", "T"), None, m.bloom_filter),
               ExpressionMessageFilter(None, None, m.bloom_filter)]
    tables: dict = {}
    for round_ in range(3):
        units = with_verdicts(_random_units(rng, 400, hit, tags_code("TagA")), filters)
        for slot, f in enumerate(filters):
            matched, reason = consume_queue_layer(f, units)
            for i in range(len(units)):  # the consume-queue layer is the row function's, unit for unit
                tc = int(units.tags_code[i]) if units.tags_code_legal[i] else None
                bitmap = bytes(units.bitmaps[i, :units.bitmap_length[i]]) if units.bitmap_length[i] >= 0 else None
                want = f.check_consume_queue(tc, ExtUnit(tc, int(units.ext_store_time[i]), bitmap)
                                             if units.has_ext[i] else None)
                assert (bool(matched[i]), REASONS[reason[i]]) == (want.matched, want.reason), (slot, i)
            want = codes.encode(decide_units(f, units))
            got = codes.by_table(f, units, slot, tables)
            assert got is not None and np.array_equal(got, want), (round_, slot)
    assert len(tables) == len(filters)
    assert all((t >= 0).sum() >= 2 for _, t in tables.values())
    lost = dataclasses.replace(units, decode_errors=pa.array(["bad body"] + [None] * (len(units) - 1)))
    assert codes.by_table(sql, lost, 0, tables) is None
