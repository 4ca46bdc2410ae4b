"""The broker's two filter layers and the client's re-check over a whole set of consume-queue units at once.

The vectorised twin of `filterlib.message_filter.decide`: for one subscription's filter (plain or retry
variant) and the units it scanned as columns, every unit's outcome, deciding layer, branch, detail and bloom
false-positive flag, with the row function's rules and Java's branch order. SQL92 runs through the
set-at-a-time engine, once per distinct filter data (a retry topic's rows use the original topic's filter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from filterlib import message_filter as mf
from filterlib.engine.columns import MISSING, extract_properties
from filterlib.engine.engine import Engine
from filterlib.engine.queue_layer import client_check, tag_hash_check
from filterlib.engine.results import ERROR, TRUE
from filterlib.errors import BrokerFilterError

OUTCOMES = (mf.DELIVERED, mf.TAG_HASH_MISS, mf.TAG_CLIENT_MISMATCH, mf.BLOOM_MISS, mf.SQL_FALSE, mf.SQL_NULL,
            mf.SQL_ERROR)
LAYERS = (mf.CONSUME_QUEUE, mf.COMMIT_LOG, mf.CLIENT)
_O = {name: i for i, name in enumerate(OUTCOMES)}
_L = {name: i for i, name in enumerate(LAYERS)}


@dataclass
class Units:
    """Scanned consume-queue units as columns (n rows).

    tags_code / tags_code_legal: the tagsCode the filter gets (the ext unit's when the ext address resolved;
    legal False is the broker's null). has_ext, ext_store_time, bitmaps (n, width) uint8 and bitmap_length (-1
    for a unit without bitmap) describe the ext unit. properties (map<string,string>) and tags are the
    message's, for the commit-log layer and the client.
    """

    tags_code: np.ndarray
    tags_code_legal: np.ndarray
    has_ext: np.ndarray
    ext_store_time: np.ndarray
    bitmaps: np.ndarray
    bitmap_length: np.ndarray
    properties: pa.Array
    tags: pa.Array

    def __len__(self) -> int:
        return len(self.tags_code)


@dataclass
class Decisions:
    """Per unit: outcome and layer (indices into OUTCOMES / LAYERS), branch, detail, bloom false positive."""

    outcome: np.ndarray
    layer: np.ndarray
    reason: np.ndarray
    detail: np.ndarray
    bloom_false_positive: np.ndarray

    def row(self, i: int) -> tuple[str, str, str, str | None, bool]:
        """(outcome, layer, reason, detail, bloom_false_positive) of unit i, as `decide` names them."""
        return (OUTCOMES[self.outcome[i]], LAYERS[self.layer[i]], self.reason[i], self.detail[i],
                bool(self.bloom_false_positive[i]))


def _const(n: int, value) -> np.ndarray:
    out = np.empty(n, dtype=object)
    out[:] = value
    return out


def consume_queue_layer(f: mf.ExpressionMessageFilter, u: Units) -> tuple[np.ndarray, np.ndarray]:
    """(matched, reason) per unit: `check_consume_queue` in the broker's branch order."""
    n = len(u)
    sub = f.subscription
    if sub is None:
        return np.ones(n, dtype=bool), _const(n, "no_subscription")
    if sub.class_filter_mode:
        return np.ones(n, dtype=bool), _const(n, "class_filter")
    if sub.is_tag_type:
        matched = tag_hash_check(u.tags_code, sub, u.tags_code_legal)
        reason = np.where(~u.tags_code_legal, "tag_code_null",
                          np.where(sub.sub_string == mf.tagmod.SUB_ALL, "sub_all",
                                   np.where(matched, "tag_hash_hit", "tag_hash_miss"))).astype(object)
        return matched, reason
    data = f.filter_data
    if data is None or data.expression is None or data.compiled is None:
        return np.ones(n, dtype=bool), _const(n, "no_filter_data")
    if data.bloom_filter_data is None:
        return np.ones(n, dtype=bool), _const(n, "no_bloom_data")
    matched = np.ones(n, dtype=bool)
    reason = _const(n, None)
    todo = np.ones(n, dtype=bool)

    def settle(mask: np.ndarray, why: str) -> None:
        nonlocal todo
        hit = todo & mask
        reason[hit] = why
        todo &= ~mask

    settle(~u.has_ext, "ext_null")
    settle(u.ext_store_time <= data.born_time, "not_in_live")
    settle(u.bitmap_length < 0, "bitmap_null")
    if not f.bloom_data_valid:
        settle(np.ones(n, dtype=bool), "bloom_data_invalid")
        return matched, reason
    settle(u.bitmap_length * 8 != data.bloom_filter_data.bit_num, "bitmap_length_mismatch")
    positions = np.asarray(data.bloom_filter_data.bit_pos, dtype=np.int64)
    width = u.bitmaps.shape[1] if u.bitmaps.ndim == 2 else 0
    if todo.any() and (positions.min() < 0 or positions.max() >= width * 8):
        settle(np.ones(n, dtype=bool), "bloom_error")
        return matched, reason
    if todo.any():
        rows = np.flatnonzero(todo)
        bits = u.bitmaps[rows][:, positions >> 3] & (np.uint8(1) << (positions & 7).astype(np.uint8))
        hit = (bits != 0).all(axis=1)
        matched[rows] = hit
        reason[rows] = np.where(hit, "bloom_hit", "bloom_miss")
    return matched, reason


def _sql(data, props: pa.Array, rows: np.ndarray, engine_cache: dict) -> tuple[np.ndarray, np.ndarray,
                                                                                np.ndarray]:
    """(matched, reason, detail) of `evaluate_sql` for one filter data over the given rows."""
    engine = engine_cache.get(id(data.compiled))
    if engine is None:
        engine = engine_cache[id(data.compiled)] = Engine([data.compiled])
    (res,) = engine.evaluate(props.take(pa.array(rows)))
    state = res.state
    reason = np.array(["sql_false", "sql_true", "sql_null", "sql_error"], dtype=object)[state]
    detail = np.array(["FALSE", "TRUE", "NULL", None], dtype=object)[state]
    for i in np.flatnonzero(state == ERROR):
        exc = res.errors[int(res.error_index[i])]
        detail[i] = f"{exc.java_class}: {exc}"
    return state == TRUE, reason, detail


def commit_log_layer(f: mf.ExpressionMessageFilter, u: Units, rows: np.ndarray,
                     engine_cache: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(matched, reason, detail) of `check_commit_log` for the given rows (the retry variant included)."""
    cache = {} if engine_cache is None else engine_cache
    k = len(rows)
    sub = f.subscription
    if sub is None:
        return np.ones(k, dtype=bool), _const(k, "no_subscription"), _const(k, None)
    if sub.class_filter_mode:
        return np.ones(k, dtype=bool), _const(k, "class_filter"), _const(k, None)
    data = f.filter_data
    if isinstance(f, mf.ExpressionForRetryMessageFilter):
        if sub.topic is None:
            raise ValueError("the retry filter needs the subscription's topic")
        is_retry = sub.topic.startswith(mf.RETRY_GROUP_TOPIC_PREFIX)
        if (f.version >= (5, 1, 4) or not is_retry) and sub.is_tag_type:
            return np.ones(k, dtype=bool), _const(k, "tag_type"), _const(k, None)
        if is_retry:
            return _retry_commit_log(f, u, rows, cache)
    elif sub.is_tag_type:
        return np.ones(k, dtype=bool), _const(k, "tag_type"), _const(k, None)
    if data is None or data.expression is None or data.compiled is None:
        return np.ones(k, dtype=bool), _const(k, "no_filter_data"), _const(k, None)
    return _sql(data, u.properties, rows, cache)


def _retry_commit_log(f: mf.ExpressionForRetryMessageFilter, u: Units, rows: np.ndarray, cache: dict):
    """A retry topic: each row is checked with the filter of its RETRY_TOPIC (the original topic)."""
    k = len(rows)
    col = extract_properties(u.properties.take(pa.array(rows)), [mf.PROPERTY_RETRY_TOPIC])[mf.PROPERTY_RETRY_TOPIC]
    if (col.codes == MISSING).any():
        raise BrokerFilterError("retry message without RETRY_TOPIC: ConcurrentHashMap.containsKey(null)")
    matched = np.ones(k, dtype=bool)
    reason = _const(k, "no_filter_data")
    detail = _const(k, None)
    group = mf.parse_retry_group(f.subscription.topic, f.version)
    for code, real_topic in enumerate(col.pylist()):
        data = f.manager.get(real_topic, group)
        if data is None or data.expression is None or data.compiled is None:
            continue
        sel = np.flatnonzero(col.codes == code)
        m, r, d = _sql(data, u.properties, rows[sel], cache)
        matched[sel], reason[sel], detail[sel] = m, r, d
    return matched, reason, detail


_CL_OUTCOME = {"sql_false": _O[mf.SQL_FALSE], "sql_null": _O[mf.SQL_NULL], "sql_non_boolean": _O[mf.SQL_NULL],
               "sql_error": _O[mf.SQL_ERROR]}


def decide_units(f: mf.ExpressionMessageFilter, u: Units, engine_cache: dict | None = None) -> Decisions:
    """Both broker layers and the client re-check on every unit: the first layer that drops a unit decides."""
    n = len(u)
    outcome = np.full(n, _O[mf.DELIVERED], dtype=np.int8)
    layer = np.full(n, _L[mf.CONSUME_QUEUE], dtype=np.int8)
    detail = _const(n, None)
    bloom_fp = np.zeros(n, dtype=bool)
    cq_ok, reason = consume_queue_layer(f, u)
    cq_reason = reason.copy()
    missed = ~cq_ok
    outcome[missed] = np.where(reason[missed] == "bloom_miss", _O[mf.BLOOM_MISS], _O[mf.TAG_HASH_MISS])
    rows = np.flatnonzero(cq_ok)
    if len(rows) == 0:
        return Decisions(outcome, layer, reason, detail, bloom_fp)
    cl_ok, cl_reason, cl_detail = commit_log_layer(f, u, rows, engine_cache)
    layer[rows] = _L[mf.COMMIT_LOG]
    reason[rows], detail[rows] = cl_reason, cl_detail
    dropped = rows[~cl_ok]
    if len(dropped):
        outcome[dropped] = [_CL_OUTCOME.get(r, _O[mf.SQL_FALSE]) for r in cl_reason[~cl_ok]]
        bloom_fp[dropped] = cq_reason[dropped] == "bloom_hit"
    passed = rows[cl_ok]
    sub = f.subscription
    if sub is None or len(passed) == 0:
        return Decisions(outcome, layer, reason, detail, bloom_fp)
    keep = client_check(u.tags.take(pa.array(passed)), sub)
    layer[passed] = _L[mf.CLIENT]
    detail[passed] = None
    client_reason = _client_reasons(sub, u.tags.take(pa.array(passed)), keep)
    reason[passed] = client_reason
    outcome[passed[~keep]] = _O[mf.TAG_CLIENT_MISMATCH]
    return Decisions(outcome, layer, reason, detail, bloom_fp)


def _client_reasons(sub, tags: pa.Array, keep: np.ndarray) -> np.ndarray:
    """`tags.check_client`'s branch names."""
    k = len(keep)
    if not sub.tags or sub.class_filter_mode:
        return _const(k, "client_keep_all")
    missing = np.asarray(tags.is_null(), dtype=bool)
    return np.where(missing, "client_no_tags", np.where(keep, "client_tag_match", "client_tag_mismatch")
                    ).astype(object)
