"""`filterlib.engine.verdicts`: a message's answers to its topic's filters survive their Arrow column byte for byte,
a unit without a message takes a missing message's answers, and a retry message without RETRY_TOPIC raises only
where a unit that reaches the commit-log layer points at it (as the properties path does)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest
from support.filters import MAP

from filterlib import message_filter as mf
from filterlib.engine.decide import REASONS, Units, commit_log_layer, decide_units, layout_of, message_verdicts
from filterlib.engine.verdicts import RAISES, assign, from_arrow, to_arrow
from filterlib.errors import BrokerFilterError
from filterlib.registry import ConsumerFilterManager, compile_filter
from filterlib.tags import build_subscription


def _units(props: list, tags: list) -> Units:
    n = len(props)
    return Units(np.zeros(n, np.int64), np.ones(n, bool), np.zeros(n, bool), np.zeros(n, np.int64),
                 np.zeros((n, 0), np.uint8), np.full(n, -1, np.int64), pa.array(props, MAP),
                 pa.array(tags, pa.string()))


def _sql_filter(expr: str) -> mf.ExpressionMessageFilter:
    m = ConsumerFilterManager(compiler=compile_filter)
    m.register("T", "G", expr, "SQL92", 1)
    data = m.get("T", "G")
    return mf.ExpressionMessageFilter(build_subscription(expr, "SQL92", "T"), data, m.bloom_filter)


def test_verdicts_round_trip_and_decide_like_the_properties():
    sql = _sql_filter("a > 2 AND b = 'x'")
    bad = _sql_filter("a > 'q'")  # does not compile: no filter data, the same branch for every message
    tag = mf.ExpressionMessageFilter(build_subscription("TagA || TagB", "TAG", "T"), None, None)
    props = [[("a", "3"), ("b", "x")], [("a", "1")], [], None, [("a", "z"), ("b", "x")]]
    tags = ["TagA", None, "TagC", None, "TagB"]
    u = _units(props, tags)
    filters = [sql, bad, tag]
    v = message_verdicts(filters, u.properties, u.tags)
    layout = layout_of(filters)
    assert (layout.branch_bits, layout.keep_bit, layout.width) == ((2, 0, 0), (False, False, True), 1)
    back = assign(from_arrow(*to_arrow(v, layout), layout, None), filters)
    assert (back.reason == v.reason).all() and (back.sql_state == v.sql_state).all() and (back.keep == v.keep).all()
    assert back.errors == v.errors and v.errors  # the texts of the evaluation errors (a = 'z') come back
    assert (back.tags_missing == [False, True, False, True, False]).all()
    for f in filters:
        want = decide_units(f, u)
        got = decide_units(f, dataclasses.replace(u, properties=None, tags=None, verdicts=back))
        assert [got.row(i) for i in range(len(u))] == [want.row(i) for i in range(len(u))]


def test_a_null_row_takes_the_missing_messages_verdicts():
    filters = [_sql_filter("a > 1")]
    missing = message_verdicts(filters, pa.nulls(1, MAP), pa.nulls(1, pa.string()))
    v = message_verdicts(filters, pa.array([[("a", "1")]], MAP), pa.array(["TagA"]))
    layout = layout_of(filters)
    cols = to_arrow(v, layout)
    two = [pa.concat_arrays([c, pa.nulls(1, c.type)]) for c in cols]
    back = from_arrow(*two, layout, missing)
    assert back.reason[0, 1] == missing.reason[0, 0] and bool(back.tags_missing[1])
    with pytest.raises(ValueError, match="missing message"):
        from_arrow(*two, layout, None)
    wider = dataclasses.replace(layout, branch_bits=(2,) * 5, keep_bit=(False,) * 5, constant=(0,) * 5)
    with pytest.raises(ValueError, match="bytes, not 2"):
        from_arrow(*cols, wider, None)


def test_a_retry_message_without_retry_topic_raises_where_the_layer_reads_it():
    m = ConsumerFilterManager(compiler=compile_filter)
    m.register("T", "G", "a > 1", "SQL92", 1)
    sub = build_subscription("a > 1", "SQL92", "%RETRY%G")
    f = mf.ExpressionForRetryMessageFilter(sub, None, m, version=(5, 3, 3))
    u = _units([[("RETRY_TOPIC", "T"), ("a", "2")], [("a", "2")]], [None, None])
    v = assign(message_verdicts([f], u.properties, u.tags), [f])
    assert v.reason[0, 1] == RAISES and REASONS[v.reason[0, 0]] == "sql_true"
    layout = layout_of([f])
    assert layout.branch_bits == (6,)
    v = assign(from_arrow(*to_arrow(v, layout), layout, None), [f])  # RAISES survives its six bits
    assert v.reason[0, 1] == RAISES
    with_v = dataclasses.replace(u, properties=None, tags=None, verdicts=v)
    assert commit_log_layer(f, with_v, np.array([0])).matched.all()
    for units in (u, with_v):
        with pytest.raises(BrokerFilterError, match="RETRY_TOPIC"):
            commit_log_layer(f, units, np.array([0, 1]))


def test_every_slot_kind_packs_in_the_documented_bit_order_and_comes_back():
    """Random verdicts under random layouts (constant, SQL92 and retry slots, keeps or not): each message's bytes hold
    every SQL92 slot's low state bit, then the high bits, then bit j of every retry slot's branch for j = 0..5, then
    the keeps, little-endian within a byte; from_arrow gives back every branch, state and keep."""
    from filterlib.engine.verdicts import _SQL_REASONS, Layout, Verdicts

    rng = np.random.default_rng(11)
    for _ in range(40):
        slots, n = int(rng.integers(1, 10)), int(rng.integers(0, 500))
        bits = tuple(int(b) for b in rng.choice([0, 2, 6], slots))
        keep_bit = tuple(bool(k) for k in rng.random(slots) < 0.5)
        layout = Layout(bits, keep_bit, tuple(7 if b == 0 else 0 for b in bits))
        reason, state = np.full((slots, n), 7, np.int8), np.full((slots, n), -1, np.int8)
        for s, b in enumerate(bits):
            if b == 2:
                state[s] = rng.integers(0, 4, n)
                reason[s] = _SQL_REASONS[state[s]]
            elif b == 6:
                reason[s] = rng.choice([RAISES, *range(len(REASONS))], n)
                state[s] = np.where(np.isin(reason[s], _SQL_REASONS), np.argmax(
                    reason[s][None, :] == _SQL_REASONS[:, None], axis=0), -1)
        keep = rng.random((slots, n)) < 0.5
        v = Verdicts(reason, state, keep, rng.random(n) < 0.3)
        column, errors, _ = to_arrow(v, layout)
        sql = [s for s, b in enumerate(bits) if b == 2]
        full = [s for s, b in enumerate(bits) if b == 6]
        code = np.where(reason == RAISES, 0x3F, reason).astype(np.int64)
        want = ([state[s] & 1 for s in sql] + [(state[s] >> 1) & 1 for s in sql]
                + [(code[s] >> j) & 1 for j in range(6) for s in full]
                + [keep[s] for s, k in enumerate(keep_bit) if k])
        for i, row in enumerate(column.to_pylist()):
            got = [(row[b >> 3] >> (b & 7)) & 1 for b in range(len(want))]
            assert got == [int(w[i]) for w in want] and len(row) == layout.width
        assert errors.null_count == n
        back = from_arrow(column, errors, pa.array(v.tags_missing), layout, None)
        kept = [s for s, k in enumerate(keep_bit) if k]
        assert (back.reason == reason).all() and (back.sql_state == state).all()
        assert (back.keep[kept] == keep[kept]).all() and (back.tags_missing == v.tags_missing).all()
