"""The broker's two filter layers and the client's re-check over a whole set of consume-queue units at once.

The vectorised twin of `filterlib.message_filter.decide`: for one subscription's filter (plain or retry
variant) and the units it scanned as columns, every unit's outcome, deciding layer, branch, detail and bloom
false-positive flag, with the row function's rules and Java's branch order. SQL92 runs through the
set-at-a-time engine, once per distinct filter data (a retry topic's rows use the original topic's filter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from filterlib import message_filter as mf
from filterlib import vocabulary as vocab
from filterlib.engine.columns import MISSING, column_from_strings, extract_properties
from filterlib.engine.engine import Engine
from filterlib.engine.queue_layer import client_check, tag_hash_check
from filterlib.engine.results import ERROR, TRUE
from filterlib.engine.verdicts import RAISES, Layout, Verdicts, assign
from filterlib.errors import BrokerFilterError
from filterlib.kernel_cache import njit

OUTCOMES = vocab.OUTCOME_NAMES
LAYERS = vocab.LAYERS
REASONS = vocab.REASONS
_O = {name: i for i, name in enumerate(OUTCOMES)}
_L = {name: i for i, name in enumerate(LAYERS)}
_R = {name: i for i, name in enumerate(REASONS)}
_SQL_REASON = np.array([_R["sql_false"], _R["sql_true"], _R["sql_null"], _R["sql_error"]], dtype=np.int8)
_SQL_TEXT = ("FALSE", "TRUE", "NULL")
_SQL_OUTCOME = np.array([_O[vocab.SQL_FALSE], _O[vocab.DELIVERED], _O[vocab.SQL_NULL], _O[vocab.SQL_ERROR]],
                        dtype=np.int8)


@dataclass
class Units:
    """Scanned consume-queue units as columns (n rows).

    tags_code / tags_code_legal: the tagsCode the filter gets (the ext unit's when the ext address resolved;
    legal False is the broker's null). has_ext, ext_store_time, bitmaps (n, width) uint8 and bitmap_length (-1
    for a unit without bitmap) describe the ext unit. properties (map<string,string>) and tags are the
    message's, for the commit-log layer and the client; decode_errors (null where it decodes, None: all decode)
    is why the client's decode of the message's body fails. With `verdicts` (`message_verdicts` of the messages,
    its filters bound) the layers read those in place of properties and tags, which may then be None.
    """

    tags_code: np.ndarray
    tags_code_legal: np.ndarray
    has_ext: np.ndarray
    ext_store_time: np.ndarray
    bitmaps: np.ndarray
    bitmap_length: np.ndarray
    properties: pa.Array | None
    tags: pa.Array | None
    decode_errors: pa.Array | None = None
    verdicts: Verdicts | None = None

    def __len__(self) -> int:
        return len(self.tags_code)


@dataclass
class Decisions:
    """Per unit: outcome, layer and branch (indices into OUTCOMES / LAYERS / REASONS), the SQL92 state where the
    commit-log layer evaluated one (-1 elsewhere; results.FALSE / TRUE / NULL / ERROR), the error text of each
    ERROR row, and the bloom false-positive flag; `cq_reason` is the consume-queue layer's branch even where a
    later layer decided; `client_errors` is the detail of each unit lost in the client's decode."""

    outcome: np.ndarray
    layer: np.ndarray
    reason: np.ndarray
    sql_state: np.ndarray
    sql_errors: dict[int, str]
    bloom_false_positive: np.ndarray
    cq_reason: np.ndarray | None = None
    client_errors: dict[int, str] = field(default_factory=dict)

    def bloom_tested(self) -> np.ndarray:
        """Per unit: did the consume-queue layer test the ext bitmap (a bloom hit or miss)?"""
        if self.cq_reason is None:
            return np.zeros(len(self.outcome), dtype=bool)
        return (self.cq_reason == _R["bloom_hit"]) | (self.cq_reason == _R["bloom_miss"])

    def detail(self, i: int) -> str | None:
        """`decide`'s detail: the SQL value (or "JavaClass: message") where the commit-log layer decided; why the
        client lost the message where its decode did."""
        if i in self.client_errors:
            return self.client_errors[i]
        s = int(self.sql_state[i])
        if s < 0 or self.layer[i] != _L[vocab.COMMIT_LOG]:
            return None
        return self.sql_errors[i] if s == ERROR else _SQL_TEXT[s]

    def details(self, rows: np.ndarray) -> pa.Array:
        """`detail` of each unit in rows as one Arrow string array, set-at-a-time (error texts looked up only for
        the ERROR rows)."""
        state = self.sql_state[rows]
        shown = (state >= 0) & (self.layer[rows] == _L[vocab.COMMIT_LOG])
        codes = np.where(shown, state, -1).astype(np.int32)
        errors = np.flatnonzero(codes == ERROR)
        texts = list(_SQL_TEXT)
        if len(errors):
            codes[errors] = np.arange(len(texts), len(texts) + len(errors), dtype=np.int32)
            texts += [self.sql_errors[int(i)] for i in rows[errors].tolist()]
        if self.client_errors:
            lost = np.flatnonzero(np.isin(rows, np.fromiter(self.client_errors, np.int64, len(self.client_errors))))
            codes[lost] = np.arange(len(texts), len(texts) + len(lost), dtype=np.int32)
            texts += [self.client_errors[int(i)] for i in rows[lost].tolist()]
        return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0), pa.array(texts, pa.string())).cast(
            pa.string())

    def row(self, i: int) -> tuple[str, str, str, str | None, bool]:
        """(outcome, layer, reason, detail, bloom_false_positive) of unit i, as `decide` names them."""
        return (OUTCOMES[self.outcome[i]], LAYERS[self.layer[i]], REASONS[self.reason[i]], self.detail(i),
                bool(self.bloom_false_positive[i]))


def _codes(n: int, name: str) -> np.ndarray:
    return np.full(n, _R[name], dtype=np.int8)


def consume_queue_layer(f: mf.ExpressionMessageFilter, u: Units) -> tuple[np.ndarray, np.ndarray]:
    """(matched, reason code) per unit: `check_consume_queue` in the broker's branch order."""
    n = len(u)
    sub = f.subscription
    if sub is None:
        return np.ones(n, dtype=bool), _codes(n, "no_subscription")
    if sub.class_filter_mode:
        return np.ones(n, dtype=bool), _codes(n, "class_filter")
    if sub.is_tag_type:
        matched = tag_hash_check(u.tags_code, sub, u.tags_code_legal)
        if sub.sub_string == mf.tagmod.SUB_ALL:
            reason = _codes(n, "sub_all")
        else:
            reason = np.where(matched, np.int8(_R["tag_hash_hit"]), np.int8(_R["tag_hash_miss"]))
        reason[~np.asarray(u.tags_code_legal, dtype=bool)] = _R["tag_code_null"]
        return matched, reason
    data = f.filter_data
    if data is None or data.expression is None or data.compiled is None:
        return np.ones(n, dtype=bool), _codes(n, "no_filter_data")
    if data.bloom_filter_data is None:
        return np.ones(n, dtype=bool), _codes(n, "no_bloom_data")
    matched = np.ones(n, dtype=bool)
    reason = np.empty(n, dtype=np.int8)
    bitmaps = u.bitmaps if u.bitmaps.ndim == 2 else np.zeros((n, 0), np.uint8)
    _bloom_branches(np.asarray(u.has_ext, dtype=bool), np.asarray(u.ext_store_time, dtype=np.int64),
                    np.asarray(u.bitmap_length, dtype=np.int64), bitmaps, int(data.born_time), bool(f.bloom_data_valid),
                    int(data.bloom_filter_data.bit_num), np.asarray(data.bloom_filter_data.bit_pos, dtype=np.int64),
                    _BLOOM_BRANCHES, matched, reason)
    return matched, reason


_BLOOM_BRANCHES = np.array([_R[name] for name in ("ext_null", "not_in_live", "bitmap_null", "bloom_data_invalid",
                                                  "bitmap_length_mismatch", "bloom_error", "bloom_hit", "bloom_miss")],
                           dtype=np.int8)


@njit(cache=True)
def _bloom_branches(has_ext, store_time, length, bitmaps, born, valid, bit_num, positions, branch, matched, reason):
    """The consume-queue layer of an SQL92 filter with bloom data, per unit in the broker's branch order: no ext
    unit, stored before the filter was born, no bitmap, the bloom data invalid, a bitmap of another length; then,
    for the units left, a bloom error if a bit position lies beyond the bitmaps, else every position set or not
    (`branch`: those eight reasons' codes). Sets matched False where the bloom test misses."""
    left = False
    for i in range(len(has_ext)):
        if not has_ext[i]:
            reason[i] = branch[0]
        elif store_time[i] <= born:
            reason[i] = branch[1]
        elif length[i] < 0:
            reason[i] = branch[2]
        elif not valid:
            reason[i] = branch[3]
        elif length[i] * 8 != bit_num:
            reason[i] = branch[4]
        else:
            reason[i] = -1
            left = True
    if not left:
        return
    beyond = False
    for p in positions:
        if p < 0 or p >= bitmaps.shape[1] * 8:
            beyond = True
    for i in range(len(has_ext)):
        if reason[i] != -1:
            continue
        if beyond:
            reason[i] = branch[5]
            continue
        hit = True
        for p in positions:
            if bitmaps[i, p >> 3] & (1 << (p & 7)) == 0:
                hit = False
                break
        matched[i] = hit
        reason[i] = branch[6] if hit else branch[7]


@dataclass
class _CommitLog:
    """The commit-log layer over some rows: matched, reason code, SQL state (-1: no SQL ran), error texts."""

    matched: np.ndarray
    reason: np.ndarray
    sql_state: np.ndarray
    errors: dict[int, str]

    @classmethod
    def constant(cls, k: int, name: str) -> _CommitLog:
        return cls(np.ones(k, dtype=bool), _codes(k, name), np.full(k, -1, dtype=np.int8), {})


def _sql(data, props: pa.Array, rows: np.ndarray, cache: dict, done: dict | None = None) -> _CommitLog:
    """`evaluate_sql` for one filter data over the given rows, through the engine (`done`: results over every row
    already computed, by the compiled expression's id)."""
    if done is not None and id(data.compiled) in done and len(rows) == len(props):
        res = done[id(data.compiled)]
    else:
        engine = cache.get(id(data.compiled))
        if engine is None:
            engine = cache[id(data.compiled)] = Engine([data.compiled])
        (res,) = engine.evaluate(props if len(rows) == len(props) else props.take(pa.array(rows)))
    state = res.state
    errors, texts = {}, {}
    for i in np.flatnonzero(state == ERROR).tolist():  # each distinct error formatted once
        e = int(res.error_index[i])
        if e not in texts:
            exc = res.errors[e]
            texts[e] = f"{exc.java_class}: {exc}"
        errors[i] = texts[e]
    return _CommitLog(state == TRUE, _SQL_REASON[state], state.astype(np.int8), errors)


def commit_log_layer(f: mf.ExpressionMessageFilter, u: Units, rows: np.ndarray,
                     engine_cache: dict | None = None) -> _CommitLog:
    """`check_commit_log` for the given rows (the retry variant included), from the units' verdicts where they
    carry them; BrokerFilterError where the broker throws."""
    if u.verdicts is not None:
        reason, state, errors = u.verdicts.commit_log(f, rows)
        out = _CommitLog((state == -1) | (state == TRUE), reason.copy(), state.copy(), errors)
    else:
        out = _commit_log(f, u.properties, rows, {} if engine_cache is None else engine_cache)
    if (out.reason == RAISES).any():
        raise BrokerFilterError("retry message without RETRY_TOPIC: ConcurrentHashMap.containsKey(null)")
    return out


CONSTANT, RETRY, SQL = "constant", "retry", "sql"


def _branch(f: mf.ExpressionMessageFilter) -> tuple[str, object]:
    """What `check_commit_log` does with filter f's messages, in the broker's branch order: (CONSTANT, the branch
    every message takes), (RETRY, None: each message's original topic's filter) or (SQL, the filter data)."""
    sub = f.subscription
    if sub is None:
        return CONSTANT, "no_subscription"
    if sub.class_filter_mode:
        return CONSTANT, "class_filter"
    if isinstance(f, mf.ExpressionForRetryMessageFilter):
        if sub.topic is None:
            raise ValueError("the retry filter needs the subscription's topic")
        is_retry = sub.topic.startswith(mf.RETRY_GROUP_TOPIC_PREFIX)
        if (f.version >= (5, 1, 4) or not is_retry) and sub.is_tag_type:
            return CONSTANT, "tag_type"
        if is_retry:
            return RETRY, None
    elif sub.is_tag_type:
        return CONSTANT, "tag_type"
    data = f.filter_data
    if data is None or data.expression is None or data.compiled is None:
        return CONSTANT, "no_filter_data"
    return SQL, data


def _commit_log(f: mf.ExpressionMessageFilter, props: pa.Array, rows: np.ndarray, cache: dict,
                done: dict | None = None) -> _CommitLog:
    """The commit-log layer over the given rows of the messages' properties (RAISES where the broker throws;
    `done` as in `_sql`)."""
    kind, what = _branch(f)
    if kind == CONSTANT:
        return _CommitLog.constant(len(rows), what)
    if kind == RETRY:
        return _retry_commit_log(f, props, rows, cache)
    return _sql(what, props, rows, cache, done)


def _retry_commit_log(f: mf.ExpressionForRetryMessageFilter, props: pa.Array, rows: np.ndarray,
                      cache: dict) -> _CommitLog:
    """A retry topic: each row is checked with the filter of its RETRY_TOPIC (the original topic); a row without
    one is RAISES."""
    col = extract_properties(props.take(pa.array(rows)), [mf.PROPERTY_RETRY_TOPIC])[mf.PROPERTY_RETRY_TOPIC]
    out = _CommitLog.constant(len(rows), "no_filter_data")
    out.reason[col.codes == MISSING] = RAISES
    group = mf.parse_retry_group(f.subscription.topic, f.version)
    for code, real_topic in enumerate(col.pylist()):
        data = f.manager.get(real_topic, group)
        if data is None or data.expression is None or data.compiled is None:
            continue
        sel = np.flatnonzero(col.codes == code)
        part = _sql(data, props, rows[sel], cache)
        out.matched[sel], out.reason[sel], out.sql_state[sel] = part.matched, part.reason, part.sql_state
        out.errors.update({int(sel[i]): text for i, text in part.errors.items()})
    return out


def take_units(u: Units, rows: np.ndarray) -> Units:
    """The given rows of `u`, as Units."""
    t = pa.array(rows)
    return Units(u.tags_code[rows], u.tags_code_legal[rows], u.has_ext[rows], u.ext_store_time[rows],
                 u.bitmaps[rows] if u.bitmaps.ndim == 2 else u.bitmaps, u.bitmap_length[rows],
                 None if u.properties is None else u.properties.take(t), None if u.tags is None else u.tags.take(t),
                 None if u.decode_errors is None else u.decode_errors.take(t),
                 None if u.verdicts is None else u.verdicts.take(rows))


_BROKER_DROPS = np.array([_O[o.name] for o in vocab.OUTCOMES if o.layer in (vocab.CONSUME_QUEUE, vocab.COMMIT_LOG)],
                         dtype=np.int8)


def decide_units(f: mf.ExpressionMessageFilter, u: Units, engine_cache: dict | None = None,
                 own: mf.ExpressionMessageFilter | None = None) -> Decisions:
    """Both broker layers and the client re-check on every unit: the first layer that drops a unit decides.

    `own`, for a member of a group whose broker filters with another member's subscription (`f`, the one it keeps
    for the group): the member's own filter. The client re-checks tags against the member's own subscription
    (MEMBER_RECHECK_DROP where only the kept one would keep the message), and a unit the broker dropped that the
    member's own subscription delivers is FILTERED_BY_OTHER_MEMBER."""
    cq_ok, reason = consume_queue_layer(f, u)
    return decide_after_consume_queue(f, u, cq_ok, reason, engine_cache, own)


def decide_after_consume_queue(f: mf.ExpressionMessageFilter, u: Units, cq_ok: np.ndarray, reason: np.ndarray,
                               engine_cache: dict | None = None,
                               own: mf.ExpressionMessageFilter | None = None) -> Decisions:
    """`decide_units` once the consume-queue layer gave (matched, reason code) per unit: the commit-log layer and
    the client's re-check on what it passed (`reason` is taken over as the decisions' branch)."""
    n = len(u)
    outcome = np.full(n, _O[vocab.DELIVERED], dtype=np.int8)
    layer = np.full(n, _L[vocab.CONSUME_QUEUE], dtype=np.int8)
    sql_state = np.full(n, -1, dtype=np.int8)
    bloom_fp = np.zeros(n, dtype=bool)
    cq_reason = reason.copy()
    outcome[~cq_ok] = np.where(reason[~cq_ok] == _R["bloom_miss"], np.int8(_O[vocab.BLOOM_MISS]),
                               np.int8(_O[vocab.TAG_HASH_MISS]))
    rows = np.flatnonzero(cq_ok)
    errors: dict[int, str] = {}
    d = Decisions(outcome, layer, reason, sql_state, errors, bloom_fp, cq_reason)
    if len(rows):
        cl = commit_log_layer(f, u, rows, engine_cache)
        bloom_hit = reason[rows] == _R["bloom_hit"]
        layer[rows] = _L[vocab.COMMIT_LOG]
        reason[rows] = cl.reason
        sql_state[rows] = cl.sql_state
        errors.update({int(rows[i]): text for i, text in cl.errors.items()})
        dropped = ~cl.matched
        if dropped.any():
            outcome[rows[dropped]] = _SQL_OUTCOME[cl.sql_state[dropped]]
            bloom_fp[rows[dropped]] = bloom_hit[dropped]
        _client_layer(d, u, rows[cl.matched], f, own)
    if own is not None:
        _wanted_by_own(d, u, own, engine_cache)
    return d


def _client_keeps(u: Units, f: mf.ExpressionMessageFilter, rows: np.ndarray) -> np.ndarray:
    """Does the client's tag re-check under f's subscription keep each row's message?"""
    if u.verdicts is not None:
        return u.verdicts.client(f, rows)
    return client_check(u.tags if len(rows) == len(u) else u.tags.take(pa.array(rows)), f.subscription)


def _client_layer(d: Decisions, u: Units, passed: np.ndarray, f: mf.ExpressionMessageFilter,
                  own: mf.ExpressionMessageFilter | None) -> None:
    """The client's re-check of the units the broker passed, against the member's own subscription (`own`'s,
    else the pull's)."""
    sub = f.subscription
    if sub is None or len(passed) == 0:
        return
    checker = own if own is not None else f
    check = checker.subscription
    keep = _client_keeps(u, checker, passed)
    d.layer[passed] = _L[vocab.CLIENT]
    if not check.tags or check.class_filter_mode:
        d.reason[passed] = _R["client_keep_all"]
    else:
        if u.verdicts is not None:
            missing = u.verdicts.tags_missing[passed]
        else:
            tags = u.tags if len(passed) == len(u) else u.tags.take(pa.array(passed))
            missing = np.asarray(tags.is_null(), dtype=bool)
        d.reason[passed] = np.where(missing, np.int8(_R["client_no_tags"]), np.where(
            keep, np.int8(_R["client_tag_match"]), np.int8(_R["client_tag_mismatch"])))
    d.outcome[passed[~keep]] = _O[vocab.TAG_CLIENT_MISMATCH]
    if own is not None and (~keep).any():
        kept_keeps = _client_keeps(u, f, passed)
        other = passed[~keep & kept_keeps]
        d.reason[other] = _R["client_not_own_tag"]
        d.outcome[other] = _O[vocab.MEMBER_RECHECK_DROP]


def _wanted_by_own(d: Decisions, u: Units, own: mf.ExpressionMessageFilter, engine_cache: dict | None) -> None:
    """Units the broker dropped under the kept subscription that the member's own subscription would have
    delivered become FILTERED_BY_OTHER_MEMBER (their layer and branch stay the broker's)."""
    rows = np.flatnonzero(np.isin(d.outcome, _BROKER_DROPS))
    if not len(rows):
        return
    mine = decide_units(own, take_units(u, rows), engine_cache)
    d.outcome[rows[mine.outcome == _O[vocab.DELIVERED]]] = _O[vocab.FILTERED_BY_OTHER_MEMBER]


def message_verdicts(filters: Sequence[mf.ExpressionMessageFilter], properties: pa.Array, tags: pa.Array,
                     engine_cache: dict | None = None) -> Verdicts:
    """Every filter's answers over a batch of messages (properties, tags), its verdicts in slot order: what
    `decide_units` reads from a unit's message, computed once per message where the messages are read."""
    cache = {} if engine_cache is None else engine_cache
    n, k = len(properties), len(filters)
    reason = np.empty((k, n), dtype=np.int8)
    state = np.empty((k, n), dtype=np.int8)
    keep = np.ones((k, n), dtype=bool)
    errors: dict[tuple[int, int], str] = {}
    rows = np.arange(n)
    compiled = {id(d.compiled): d.compiled for kind, d in map(_branch, filters) if kind == SQL}
    done = {}
    if compiled and n:  # the filters' expressions over the batch at once: the named properties extracted once
        key = ("all", *compiled)
        engine = cache.get(key)
        if engine is None:
            engine = cache[key] = Engine(list(compiled.values()))
        done = dict(zip(compiled, engine.evaluate(properties), strict=True))
    tag_column = column_from_strings(tags) if n and any(
        f.subscription is not None and f.subscription.tags for f in filters) else None
    for s, f in enumerate(filters):
        cl = _commit_log(f, properties, rows, cache, done)
        reason[s], state[s] = cl.reason, cl.sql_state
        errors.update({(i, s): text for i, text in cl.errors.items()})
        if f.subscription is not None:
            keep[s] = client_check(tags, f.subscription, tag_column)
    return assign(Verdicts(reason, state, keep, np.asarray(tags.is_null(), dtype=bool) if n else np.zeros(0, bool),
                           errors), filters)


_BITS = {CONSTANT: 0, SQL: 2, RETRY: 6}
"""A verdict's branch bits by `_branch` kind: none where every message takes the same branch, an SQL92 state, any
branch (the original topic's filter, RAISES included)."""


def layout_of(filters: Sequence[mf.ExpressionMessageFilter]) -> Layout:
    """How these filters' verdicts are packed (`verdicts.Layout`), from what each one's commit-log layer can answer
    (`_branch`), and a client keep where the subscription names tags."""
    kinds = [_branch(f) for f in filters]
    keep = tuple(bool(f.subscription is not None and f.subscription.tags and not f.subscription.class_filter_mode)
                 for f in filters)
    return Layout(tuple(_BITS[k] for k, _ in kinds), keep, tuple(_R[w] if k == CONSTANT else 0 for k, w in kinds))


_RETURNED = np.array([_O[vocab.DELIVERED], _O[vocab.TAG_CLIENT_MISMATCH], _O[vocab.MEMBER_RECHECK_DROP]],
                     dtype=np.int8)


def client_decode_layer(d: Decisions, unit_call: np.ndarray, decode_errors: pa.Array | None,
                        min_offset: int) -> None:
    """The client's decodesBatch over each pull's response, applied in place once the pulls are paged: the first
    returned message whose body does not decode ends the list, so it and every later message the broker returned
    in that pull are lost (CLIENT_DECODE_FAILED), before the client's tag re-check. Units run from min_offset."""
    if decode_errors is None or decode_errors.null_count == len(decode_errors):
        return
    n = len(d.outcome)
    returned = (unit_call >= 0) & np.isin(d.outcome, _RETURNED)
    bad = returned & np.asarray(decode_errors.is_valid(), dtype=bool)
    if not bad.any():
        return
    first = np.full(int(unit_call.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first, unit_call[bad], np.flatnonzero(bad))
    index = np.arange(n)
    lost = returned & (index >= first[np.maximum(unit_call, 0)])
    failing = lost & (index == first[np.maximum(unit_call, 0)])
    d.outcome[lost] = _O[vocab.CLIENT_DECODE_FAILED]
    d.layer[lost] = _L[vocab.CLIENT]
    d.reason[lost] = np.where(failing[lost], np.int8(_R["client_decode_failed"]), np.int8(_R["client_decode_lost"]))
    errors = decode_errors.to_pylist() if failing.any() else []
    for i in np.flatnonzero(lost).tolist():
        f = int(first[unit_call[i]])
        d.client_errors[i] = errors[i] if i == f else \
            f"lost with its pull: the message at queue offset {min_offset + f} did not decode ({errors[f]})"
