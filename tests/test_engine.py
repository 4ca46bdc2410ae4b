"""The set-at-a-time engine gives the interpreter's exact answers: every (row, filter) TRUE / FALSE / NULL or the
same FilterEvaluationError (Java class, cause and message), on every backend, forced and chosen.

The interpreter itself is checked against the real RocketMQ jars elsewhere (test_sql92_conformance); here the
engine is held to it on that whole suite (as batches of mixed rows), on Hypothesis-generated batches and on the
messages of real harness stores, and its ext bitmaps to the real broker's.
"""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pyarrow as pa
import pytest
import refharness
import scenarios
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.harness_runs import store_run
from support.registry_replay import replay_registrations
from support.sql92_cases import selector_cases

from filterlib import sql92
from filterlib.engine import KERNEL, PROGRAM, TABLE, Engine
from filterlib.engine.columns import extract_properties
from filterlib.engine.numbers import COMPARISONS, Parsed, compare_states
from filterlib.engine.queue_layer import ext_bitmaps
from filterlib.errors import FilterEvaluationError, FilterSyntaxError
from filterlib.javalang import java_utf8_decode, java_utf8_encode
from filterlib.registry import compile_filter
from filterlib.sql92.javanum import double_compare
from filterlib.store.properties_text import as_dict
from filterlib.store.scan import ScanOptions
from filterlib.store.storedir import StoreDir

PATHS = [TABLE, KERNEL, "auto"]
"""The backends each test holds to the interpreter: "auto" runs the program (`filterlib.engine.program`)."""
MAP_TYPE = pa.map_(pa.string(), pa.string())


def as_stored(text: str | None) -> str | None:
    """A string as it comes back from a store: Java's UTF-8 encoder writes '?' for a lone surrogate (a null
    value stays null: to Java's MessageEvaluationContext, as to the engine, it is a missing property)."""
    return None if text is None else java_utf8_decode(java_utf8_encode(text))


def props_batch(maps: list[dict[str, str] | None]) -> tuple[pa.RecordBatch, list[dict[str, str]]]:
    """A batch with a properties map column, and the maps as the engine sees them (stored form)."""
    stored = [None if m is None else {as_stored(k): as_stored(v) for k, v in m.items()} for m in maps]
    col = pa.array([None if m is None else list(m.items()) for m in stored], type=MAP_TYPE)
    return pa.record_batch({"properties": col}), [m or {} for m in stored]


def _interpret(expr, props):
    try:
        return expr.evaluate(props)
    except FilterEvaluationError as e:
        return e


def _same(a, b) -> bool:
    if isinstance(a, FilterEvaluationError) or isinstance(b, FilterEvaluationError):
        return (type(a) is type(b) and a.java_class == b.java_class and a.java_cause == b.java_cause
                and str(a) == str(b))
    return a is b


def expected(exprs, maps) -> list[list]:
    """The interpreter's answer for every (filter, row)."""
    return [[_interpret(e, p) for p in maps] for e in exprs]


def disagreements(exprs, maps, results, label: str, want: list[list] | None = None) -> list[str]:
    """Every (row, filter) where the engine's answer differs from the interpreter's."""
    want = expected(exprs, maps) if want is None else want
    problems = []
    for expr, res, wants in zip(exprs, results, want, strict=True):
        got = res.outcomes()
        assert len(got) == len(maps)
        for props, w, g in zip(maps, wants, got, strict=True):
            if not _same(w, g):
                problems.append(f"{label} {expr.text!r} {props!r}: interpreter {w!r}, engine {g!r}")
        assert np.array_equal(res.matches, np.array([w is True for w in wants], dtype=bool))
    return problems


def compiled(texts) -> list:
    """The selectors RocketMQ accepts, compiled (the others are dropped)."""
    out = []
    for t in texts:
        try:
            out.append(sql92.compile(t))
        except FilterSyntaxError:
            continue
    return out


def check(exprs, maps, label: str, paths=PATHS) -> None:
    batch, seen = props_batch(maps)
    engine = Engine(exprs)
    want = expected(exprs, seen)
    problems = []
    for path in paths:
        results = engine.evaluate(batch, path)
        assert {r.path for r in results} <= {PROGRAM if path == "auto" else path}
        problems += disagreements(exprs, seen, results, f"{label}/{path}", want)
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:30])


# -- the whole conformance suite, as batches of mixed rows ----------------------------------------------------

def test_conformance_suite_as_batches():
    cases = selector_cases()
    rng = random.Random(7)
    pool = [p for c in cases for p in c["props"]]
    compiled = []
    for c in cases:
        try:
            compiled.append((sql92.compile(c["expr"]), c["props"]))
        except FilterSyntaxError:
            continue
    assert len(compiled) > 2000
    evaluations = 0
    for start in range(0, len(compiled), 60):
        chunk = compiled[start:start + 60]
        maps = [p for _, props in chunk for p in props] + rng.sample(pool, 60)
        rng.shuffle(maps)
        check([e for e, _ in chunk], maps, f"chunk{start}")
        evaluations += len(chunk) * len(maps)
    assert evaluations > 1_500_000


# -- generated batches --------------------------------------------------------------------------------------

PROPS = ["a", "b", "c", "TAGS"]
NUMBERS = ["0", "1", "3", "5", "-2", "10", "2147483647", "2147483648", "9223372036854775807", "5L", "1.5", "2.0",
           "1e3", "0.25", "-3.5"]
STRING_LITS = ["'x'", "'5'", "''", "'TagA'", "'é😀'", "'1e3'", "' 5'", "'NaN'", "'a''b'"]
VALUES = st.one_of(
    st.sampled_from(["5", " 5", "5.5", "1e3", "NaN", "-NaN", "Infinity", "0x10", "0x1p3", "9223372036854775808",
                     "-0", "-0.0", "", "true", "TRUE", "x", "1d", "+5", "05", "１２", "2147483648", "TagA", "é",
                     "😀", "a'b", "\ud83d", "1_0", ".5", "5.", "3", "9" * 400, "1" + "0" * 350 + ".5",
                     "-" + "1" * 40, "x" * 5000, "0." + "0" * 400 + "1"]),
    st.integers(-10**20, 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=6),
)


@st.composite
def selectors(draw, depth: int = 0) -> str:
    """A valid-looking selector over the whole grammar (some are refused by the compiler; those are dropped)."""
    if depth < 3 and draw(st.booleans()):
        op = draw(st.sampled_from(["AND", "OR"]))
        parts = draw(st.lists(selectors(depth + 1), min_size=2, max_size=4))
        text = f" {op} ".join(f"({p})" for p in parts)
        return f"NOT ({text})" if draw(st.integers(0, 5)) == 0 else text
    p = draw(st.sampled_from(PROPS))
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return f"{p} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == 1:
        vals = draw(st.lists(st.sampled_from(STRING_LITS), min_size=1, max_size=3))
        return f"{p} {draw(st.sampled_from(['', 'NOT ']))}IN ({', '.join(vals)})"
    if kind == 2:
        lo, hi = draw(st.sampled_from(NUMBERS)), draw(st.sampled_from(NUMBERS))
        return f"{p} {draw(st.sampled_from(['', 'NOT ']))}BETWEEN {lo} AND {hi}"
    if kind == 3:
        op = draw(st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH", "NOT CONTAINS"]))
        return f"{p} {op} {draw(st.sampled_from(STRING_LITS))}"
    if kind == 4:
        return p
    op = draw(st.sampled_from(["=", "<>", ">", ">=", "<", "<="]))
    other = draw(st.sampled_from([*NUMBERS, *STRING_LITS, "TRUE", "FALSE", "-5", "-1.5", draw(
        st.sampled_from(PROPS))]))
    return f"{other} {op} {p}" if kind == 5 else f"{p} {op} {other}"


prop_maps = st.dictionaries(st.sampled_from(PROPS), VALUES, max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(selectors(), min_size=1, max_size=6), st.lists(st.one_of(prop_maps, st.none()), min_size=1,
                                                                max_size=60))
def test_generated_batches(texts, maps):
    exprs = compiled(texts)
    if exprs:
        check(exprs, maps, "hypothesis")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(selectors(), min_size=1, max_size=4), st.integers(0, 2**31))
def test_generated_high_cardinality_batches(texts, seed):
    """Many distinct values per property (ids, free numbers): `auto` takes the kernels, which must still agree."""
    exprs = compiled(texts)
    rng = random.Random(seed)
    maps = []
    for i in range(600):
        m = {}
        if rng.random() < 0.9:
            m["a"] = str(rng.randint(-10**6, 10**6)) if rng.random() < 0.8 else f"{rng.random() * 1e4:.3f}"
        if rng.random() < 0.8:
            m["b"] = f"id-{i}" if rng.random() < 0.7 else str(i)
        if rng.random() < 0.5:
            m["c"] = rng.choice(["x", "5", "TagA", "", "NaN"])
        if rng.random() < 0.7:
            m["TAGS"] = f"Tag{rng.randrange(50)}"
        maps.append(m)
    if exprs:
        check(exprs, maps, "high-cardinality")
        batch, _ = props_batch(maps)
        engine = Engine(exprs)
        states = engine.states(batch)
        assert [r.path for r in engine.evaluate(batch)] == [PROGRAM] * len(exprs)
        assert np.array_equal(states, np.stack([r.state for r in engine.evaluate(batch, KERNEL)]))


def test_states_without_errors_texts_equal_the_interpreters():
    """`Engine.states` (what bitmaps and verdicts read): every filter's state per row, errors as ERROR, under AND /
    OR / NOT chains whose later operands would raise where an earlier one decides (short-circuit)."""
    rng = random.Random(3)
    maps = [{"region": rng.choice(["eu", "us", "x"]), "uid": f"u{i}",
             "amount": str(rng.randrange(10**6)) if i % 7 else "n/a"} for i in range(4000)]
    maps[5].pop("region")
    batch, seen = props_batch(maps)
    exprs = [sql92.compile(t) for t in [
        "region = 'eu'", "uid = 'u7' OR region = 'us'", "amount > 500000",
        "region = 'eu' AND amount > 10", "region <> 'eu' OR amount > 10 OR uid IS NULL",
        "NOT (region IN ('eu', 'x') AND (amount < 3 OR uid = 'u9'))", "(region = 'us') = (amount > 7)",
        "(region IS NOT NULL AND amount > 5) AND (NOT (uid = 'u3') AND (amount < 900000 AND region <> 'x'))",
        "(amount > 5 OR region = 'x') OR (NOT (NOT (region IS NULL)) OR (amount = 17 OR uid = 'u1'))"]]
    states = Engine(exprs).states(batch)
    codes = {True: 1, False: 0, None: 2}
    for expr, row in zip(exprs, states, strict=True):
        want = [3 if isinstance(w, FilterEvaluationError) else codes[w] for w in (_interpret(expr, m) for m in seen)]
        assert row.tolist() == want, expr.text
    assert (states == 3).any() and (states == 2).any()


def test_number_comparisons_are_javas_compare_to_on_every_edge():
    """The leaves' compiled comparison against the interpreter's Double.compare (itself held to Java elsewhere) and
    Long.compareTo, over NaN, both zeros, infinities and the integer extremes, each value against each constant;
    an unparsed string takes the error state."""
    doubles = np.array([math.nan, -math.inf, -1.5, -0.0, 0.0, 2.0, math.inf, 7.0])
    ok = np.array([True] * 7 + [False])
    longs = np.array([-2**63, -1, 0, 1, 2**63 - 1, 5], dtype=np.int64)
    for op in COMPARISONS:
        test = {"=": lambda r: r == 0, ">": lambda r: r > 0, ">=": lambda r: r >= 0, "<": lambda r: r < 0,
                "<=": lambda r: r <= 0}[op]
        for c in doubles[:7]:
            out = np.empty(len(doubles), np.int8)
            compare_states(Parsed(doubles, ok, {}), op, c, 3, out)
            want = [int(test(double_compare(x, c))) for x in doubles[:7]] + [3]
            assert out.tolist() == want, (op, c)
        for c in (-2**63, 0, 2**63 - 1):
            out = np.empty(len(longs), np.int8)
            compare_states(Parsed(longs, np.ones(len(longs), bool), {}), op, c, 3, out)
            assert out.tolist() == [int(test((x > c) - (x < c))) for x in longs.tolist()], (op, c)


def test_extraction_keeps_the_last_of_a_repeated_key_and_handles_slices():
    col = pa.array([[("a", "1"), ("a", "2")], None, [("b", "x"), ("a", "3")], []], type=MAP_TYPE)
    for arr, want in ((col, ["2", None, "3", None]), (col.slice(1), [None, "3", None])):
        c = extract_properties(arr, ["a"])["a"]
        values = c.pylist()
        assert [values[k] if k >= 0 else None for k in c.codes] == want


# -- real harness stores ------------------------------------------------------------------------------------

def _store_scenarios() -> dict[str, dict]:
    return {"tag_ext": scenarios.tag_and_sql_scenario(1), "varied1": scenarios.varied_scenario(1),
            "varied2": scenarios.varied_scenario(2), "varied3": scenarios.varied_scenario(3),
            "answers_off": scenarios.pull_answers_scenario(11, False),
            "answers_on": scenarios.pull_answers_scenario(11, True),
            "heartbeat": scenarios.heartbeat_clean_scenario(3)}


def _decoded(store: str) -> pa.Table:
    sd = StoreDir(store)
    batches = [b for _, bs, _ in sd.decode_commitlog(ScanOptions(check_crc=True)) for b in bs]
    return pa.Table.from_batches(batches)


@pytest.fixture(scope="module")
def harness_runs() -> dict[str, dict]:
    runs = {"registry": store_run()}
    for name, sc in _store_scenarios().items():
        out = refharness.write_store(sc)
        import json

        runs[name] = {"out": out, "scenario": sc,
                      "report": json.loads((out / "report.json").read_text()),
                      "listing": json.loads((out / "listing.json").read_text())}
    return runs


def _selectors_of(run: dict) -> list[str]:
    texts = {e["expression"] for e in run["scenario"]["events"] if e["kind"] == "register"}
    texts |= {s["expression"] for e in run["scenario"]["events"] if e["kind"] == "heartbeat"
              for s in e["subscriptions"]}
    texts |= {s["expression"] for s in run["scenario"].get("subscriptions", [])}
    return sorted(texts)


@pytest.mark.reference
@pytest.mark.parametrize("name", ["registry", "tag_ext", "varied1", "varied2"])
def test_harness_store_messages(harness_runs, name):
    run = harness_runs[name]
    table = _decoded(str(run["out"] / "store"))
    assert table.num_rows > 50
    exprs = compiled(_selectors_of(run) + [c["expr"] for c in random.Random(11).sample(selector_cases(), 400)])
    maps = [as_dict(p) or {} for p in table.column("properties").to_pylist()]
    engine = Engine(exprs)
    want = expected(exprs, maps)
    problems = []
    for path in PATHS:
        problems += disagreements(exprs, maps, engine.evaluate(table, path), f"{name}/{path}", want)
    assert not problems, "\n".join(problems[:30])


@pytest.mark.reference
@pytest.mark.parametrize("name", ["registry", "tag_ext", "varied1", "varied3", "answers_off", "answers_on",
                                  "heartbeat"])
def test_ext_bitmaps_equal_the_broker(harness_runs, name):
    """Messages grouped by the registry the broker had at their dispatch; the engine's bitmaps equal the ext's.
    Every ext-enabled harness scenario (varied2 and the large-body store run with ConsumeQueueExt off: no bitmaps;
    varied3 has f=5, n=64, the others f=20; heartbeat registers, kills and cleans records mid-stream)."""
    run = harness_runs[name]
    table = _decoded(str(run["out"] / "store"))
    row_of = {off: i for i, off in enumerate(table.column("commit_log_offset").to_pylist())}
    groups: dict[tuple, tuple[list, list]] = {}

    def on_message(manager, record):
        ext = (record.get("cq") or {}).get("ext")
        if ext is None:
            return
        datas = manager.get_topic(record["topic"]) or []
        key = (record["topic"], tuple((id(d.compiled), d.bloom_filter_data) for d in datas))
        entry = groups.setdefault(key, ([(d.compiled, d.bloom_filter_data) for d in datas], []))
        entry[1].append((row_of[record["physicalOffset"]], ext["bitmapHex"]))

    manager, _ = replay_registrations(run, {}, compiler=compile_filter, on_message=on_message)
    compared = set_bits = 0
    for filters, rows in groups.values():
        idx = [r for r, _ in rows]
        batch = table.take(pa.array(idx))
        if not filters:
            assert all(hexed is None for _, hexed in rows)
            continue
        usable = [(c, d) for c, d in filters if c is not None and d is not None]
        results = Engine([c for c, _ in usable]).evaluate(batch) if usable else []
        bitmaps, written = ext_bitmaps([r.matches for r in results], [d for _, d in usable], manager.bloom_filter,
                                       len(idx))
        for i, (_, hexed) in enumerate(rows):
            mine = bitmaps[i].tobytes().hex() if written[i] else None
            assert mine == hexed, f"{name}: row {idx[i]} bitmap {mine} != broker {hexed}"
            compared += 1
            set_bits += bool(hexed and int(hexed, 16))
    assert compared > 20 and set_bits > 5
    assert os.path.isdir(run["out"] / "store" / "consumequeue_ext")
