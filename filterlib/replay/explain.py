"""Plain words for one pull decision: what each filter layer saw and decided for one message and one subscription.

Pure functions over plain rows (dicts shaped like the jobs' tables: a pull_decisions row, a messages row, the
subscription's group_stats row, its consumer_filters row); `jobs.explain` looks them up and prints these lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from filterlib import message_filter as mf
from filterlib import sql92, tags
from filterlib import vocabulary as vocab
from filterlib.errors import FilterError
from filterlib.javalang import to_int32
from filterlib.members import filters_with_kept
from filterlib.rebuild.dispatch import bit_set
from filterlib.store.properties_text import as_dict

Row = Mapping[str, Any]

_CQ_WORDS = vocab.words(vocab.CONSUME_QUEUE)
_CL_WORDS = vocab.words(vocab.COMMIT_LOG)
_CLIENT_WORDS = vocab.words(vocab.CLIENT)


def _when(ms: int | None) -> str:
    """An epoch-millisecond time as UTC text, with the raw value."""
    if ms is None:
        return "an unknown time"
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"{stamp} UTC ({ms})"


def _props_text(props: Mapping[str, str] | None, names: frozenset[str] | set[str]) -> str:
    props = props or {}
    parts = [f"{n} = {props[n]!r}" if n in props else f"{n} missing" for n in sorted(names)]
    return ", ".join(parts) if parts else "(the expression names no property)"


def consume_queue_words(d: Row, sub: Row, filt: Row | None, message: Row | None) -> str:
    """The consume-queue layer in words: the tag hash or the bloom bits tested, and the verdict."""
    why = d["cq_reason"]
    if why in ("tag_hash_hit", "tag_hash_miss"):
        parsed = tags.parse_subscription(sub["expression"])
        code = d["tags_code"]
        codes = ", ".join(f"{t} → {tags.tags_code(t)}" for t in sorted(parsed.tags))
        tag = message["tags"] if message else None
        seen = f"the message's tag {tag!r}" if tag is not None else "the message (no tag)"
        verdict = "in the set: passes" if why == "tag_hash_hit" else f"not in the set: dropped ({vocab.TAG_HASH_MISS})"
        return (f"tag hash: {seen} has tagsCode {to_int32(code) if code is not None else None}; the subscription's "
                f"hashes are {{{codes}}}: {verdict}")
    if why in ("bloom_hit", "bloom_miss"):
        positions = list((filt or {}).get("bloom_bit_pos") or [])
        bitmap = d.get("bloom_bitmap")
        have = bit_set(bitmap) if bitmap is not None else set()
        tested = ", ".join(f"{p} {'set' if p in have else 'not set'}" for p in positions)
        verdict = "all set: passes to the commit-log layer" if why == "bloom_hit" else \
            f"not all set: dropped ({vocab.BLOOM_MISS}), the SQL expression is never evaluated"
        return (f"bloom bitmap ({len(bitmap) * 8 if bitmap else 0} bits, {len(have)} set by the filters that "
                f"matched at dispatch): this filter's bits {{{tested}}}: {verdict}")
    if why == "not_in_live":
        born = (filt or {}).get("born_time")
        stored = message["store_timestamp"] if message else None
        return (f"the message was stored at {_when(stored)}, not after the filter's bornTime {_when(born)}: its "
                f"bitmap cannot know this filter, so the bloom test is skipped (isMsgInLive)")
    return _CQ_WORDS.get(why, why)


def evaluated_filter(d: Row, message: Row | None, filters: Mapping[tuple[str, str], Row]) -> Row | None:
    """The registered filter the retry variant evaluates for a unit of a retry topic: the one of the message's
    original topic (its RETRY_TOPIC property) and the group (ExpressionForRetryMessageFilter); None elsewhere, where
    the subscription's own expression is the one evaluated."""
    if not str(d["topic"]).startswith(mf.RETRY_GROUP_TOPIC_PREFIX) or not message or not message.get("properties"):
        return None
    real = as_dict(message["properties"]).get(mf.PROPERTY_RETRY_TOPIC)
    return filters.get((real, d["consumer_group"])) if real is not None else None


def commit_log_words(d: Row, sub: Row, message: Row | None, retry_filter: Row | None = None,
                     version: str = sql92.DEFAULT_VERSION) -> str:
    """The commit-log layer in words: the SQL92 value and the property values it came from (on a retry topic, of
    the original topic's registered filter, `evaluated_filter`, where that is what was evaluated), read in the
    grammar of the dump's broker `version`."""
    if d["layer"] == vocab.CONSUME_QUEUE:
        return "not reached: the consume-queue layer dropped the unit"
    sql = d.get("sql_value")
    if sql is None:
        if d["layer"] == vocab.COMMIT_LOG:
            return _CL_WORDS.get(d["reason"], d["reason"])
        is_tag = tags.is_tag_type(sub["subscription_type"])
        return _CL_WORDS["tag_type"] if is_tag else _CL_WORDS["no_filter_data"]
    expr = sub["expression"]
    if retry_filter is not None and retry_filter.get("expression") is not None:
        expr = retry_filter["expression"]
    try:
        names = sql92.compile(expr, version=version).referenced_properties
    except FilterError:
        names = frozenset()
    props = message["properties"] if message else None
    values = _props_text(as_dict(props), names)
    if sql == "TRUE":
        return f"SQL92 `{expr}` is TRUE with {values}: passes"
    if sql == "FALSE":
        return f"SQL92 `{expr}` is FALSE with {values}: dropped ({vocab.SQL_FALSE})"
    if sql == "NULL":
        return (f"SQL92 `{expr}` is NULL (unknown) with {values}: a comparison with a missing property is "
                f"unknown, and the broker delivers only TRUE: dropped ({vocab.SQL_NULL})")
    cls, _, text = (d.get("detail") or "").partition(": ")
    return (f"SQL92 `{expr}` with {values}: the expression threw {cls} ({text}), and the broker treats an "
            f"evaluation error as no match: dropped ({vocab.SQL_ERROR})")


def client_words(d: Row) -> str:
    """The client's decode of the pull's response and its exact tag re-check, in words."""
    if d["layer"] != vocab.CLIENT:
        return "not reached: the broker did not return the message"
    if d["reason"] in vocab.DECODE_BRANCHES:
        return _CLIENT_WORDS[d["reason"]].format(detail=d.get("detail") or "no detail")
    return _CLIENT_WORDS.get(d["reason"], d["reason"])


def broker_subscription(sub: Row) -> Row:
    """The group_stats row as the broker filtered with it: for a registered member whose subscription the broker
    does not keep, the kept one's type and expression."""
    if not filters_with_kept(sub.get("member"), sub.get("kept_by"), sub.get("path"), sub.get("kept_type")):
        return sub
    return {**sub, "subscription_type": sub["kept_type"], "expression": sub.get("kept_expression") or ""}


def member_words(d: Row, sub: Row) -> list[str]:
    """Who owns the unit's queue and whose subscription the broker filtered with, for a group replayed as its
    members (nothing for another group)."""
    member, kept_by = sub.get("member"), sub.get("kept_by")
    if member is None:
        return []
    if d["outcome"] == vocab.NEVER_PULLED:
        return [f"  member {member} owns queue {d['queue_id']} (the group's allocation) and does not subscribe "
                f"{d['topic']}: it never pulls the queue and no other member does; no filter layer saw the message"]
    if kept_by is None or sub.get("path") == "posted":
        kept = f"its own: the pull posts `{sub['expression']}`"
    elif kept_by == member:
        kept = "its own (the broker keeps this member's subscription)"
    else:
        kept = f"{kept_by}'s {sub.get('kept_type')} `{sub.get('kept_expression')}`, the one the broker keeps for the " \
               f"group"
    lines = [f"  member {member} owns queue {d['queue_id']}; the broker filtered its pulls with {kept}"]
    if d["outcome"] == vocab.FILTERED_BY_OTHER_MEMBER:
        lines.append(f"  lost to another member's subscription: {member}'s own {sub['subscription_type']} "
                     f"`{sub['expression']}` would have delivered it ({vocab.FILTERED_BY_OTHER_MEMBER})")
    return lines


def decided_by(commit_log_offset: int, since_copy: str | None, copies: Sequence[Row]) -> str | None:
    """The copy whose run of job 2 made a decision over a broker's history: the copy that added the unit's message
    (`copies` rows: store, from_offset, to_offset), or the subscription's first copy when it came in force later (a
    subscription new to the history decides the units earlier copies added)."""
    ordered = sorted(copies, key=lambda c: (c["to_offset"], c.get("built_at") or 0))
    stores = [c["store"] for c in ordered]
    added = next((c["store"] for c in ordered if c["from_offset"] <= commit_log_offset < c["to_offset"]), None)
    if added is not None and since_copy in stores and stores.index(since_copy) > stores.index(added):
        return since_copy
    return added


def timeline_words(sub: Row, subs: Sequence[Row], d: Row | None = None, copies: Sequence[Row] = ()) -> list[str]:
    """Over a broker's history whose group changed its subscription: the one the decision was made under (by the
    run of which copy: the unit `d`'s `copy`, or for rows written before it, the history's `copies` rows), the
    copies it was in force between, and the one in force now (nothing for a subscription that never changed)."""
    key = (sub["consumer_group"], sub["topic"], sub.get("member"))
    others = [s for s in subs if (s["consumer_group"], s["topic"], s.get("member")) == key
              and s["subscription_index"] != sub["subscription_index"] and s.get("since_copy")]
    until = sub.get("until_copy")
    if not sub.get("since_copy") or (until is None and not others):
        return []
    span = f"in force from the copy {sub['since_copy']}" + (f" until the copy {until}" if until else " on")
    by = d.get("copy") if d is not None else None  # the decision's own row says it (tables.COPY); older rows:
    if by is None and d is not None and copies:  # the copies' offset ranges do
        by = decided_by(d["commit_log_offset"], sub["since_copy"], copies)
    line = f"  decided under {sub['subscription_type']} `{sub['expression']}`" + \
        (f" by the run of the copy {by}" if by else "") + f" ({span})"
    now = [s for s in others if s.get("until_copy") is None]
    if until is not None:
        line += ("; the group subscribes " + " and ".join(
            f"{s['subscription_type']} `{s['expression']}` since the copy {s['since_copy']}" for s in now)
            if now else f"; the group no longer subscribes {sub['topic']}")
    return [line]


def explain(d: Row, sub: Row, filt: Row | None, message: Row | None, retry_filter: Row | None = None,
            version: str = sql92.DEFAULT_VERSION, subs: Sequence[Row] = (), copies: Sequence[Row] = ()) -> list[str]:
    """Every layer's decision for one scanned unit, in the order the broker and client apply them (`retry_filter`:
    the original topic's filter a retry topic's unit was evaluated with, `evaluated_filter`; `version`: the release
    the dump was replayed as, whose grammar may read the selector otherwise than 5.x). For a group member the
    broker's layers read the subscription the broker kept (`broker_subscription`), the client its own. `subs`: the
    group's group_stats rows, which say when over a broker's history the subscription was in force, and `copies`
    the history's copies rows (`timeline_words`)."""
    who = f", member {sub['member']}" if sub.get("member") else ""
    if sub.get("kept_by") and sub.get("member"):
        who += f" (if {sub['kept_by']}'s subscription is the one the broker keeps)"
    layer = f", decided by the {d['layer']} layer" if d.get("layer") else ""
    head = (f"{d['consumer_group']} on {d['topic']} queue {d['queue_id']} offset {d['queue_offset']} "
            f"(commit log offset {d['commit_log_offset']}){who}: {d['outcome']}{layer}"
            f"{' — a bloom false positive' if d['bloom_false_positive'] else ''}")
    if d["outcome"] == vocab.NEVER_PULLED:
        return [head, *member_words(d, sub)]
    b = broker_subscription(sub)
    lines = [head, f"  subscription: {sub['subscription_type']} `{sub['expression']}` ({sub['path']}, from "
                   f"{sub['source']}); pulled by pull #{d['pull_index']} of this queue",
             *timeline_words(sub, subs, d, copies), *member_words(d, sub)]
    lines.append(f"  1. consume queue: {consume_queue_words(d, b, filt, message)}")
    if not tags.is_tag_type(b["subscription_type"]) and b["expression"] is not None:
        note = sql92.grammar_note(b["expression"], version)
        if note is not None:
            lines.append(f"  note: {note}")
    lines.append(f"  2. commit log: {commit_log_words(d, b, message, retry_filter, version)}")
    lines.append(f"  3. client: {client_words(d)}")
    return lines
