"""What-if candidates: a subscription a group might use instead of its current one, parsed and refused as the
broker would, planned beside the current one, and what it would gain or lose."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib import tables
from filterlib import vocabulary as vocab
from filterlib.replay.matrix import codes_of
from filterlib.replay.plans import Plan
from filterlib.subscriptions import POSTED, Subscription

WHAT_IF = "what-if"
"""The source of a candidate's plan."""


@dataclass(frozen=True)
class WhatIf:
    """A candidate subscription to replay beside a group's current one: `G[@TOPIC]=TYPE:EXPRESSION`."""

    group: str
    topic: str | None
    type: str
    expression: str
    spec: str


@dataclass(frozen=True)
class WhatIfRefused:
    """A candidate that does not compile: what was given, where it fails and why."""

    spec: str
    position: int | None
    reason: str


def parse_what_if(spec: str) -> WhatIf | WhatIfRefused:
    """Parse `G[@TOPIC]=SQL92:<expr>` or `G[@TOPIC]=TAG:<expr>`; a malformed spec is a ValueError, a candidate
    RocketMQ would refuse (SQL92 that does not compile, a tag expression FilterAPI cannot split) a WhatIfRefused
    with the position (in the expression) and the reason."""
    from filterlib import sql92
    from filterlib.errors import FilterSyntaxError
    from filterlib.tags import build_subscription, is_tag_type

    target, eq, rest = spec.partition("=")
    kind, colon, expression = rest.partition(":")
    if not eq or not colon or not target or kind.upper() not in ("SQL92", "TAG"):
        raise ValueError(f"--what-if {spec!r}: expected GROUP[@TOPIC]=SQL92:<expression> or GROUP[@TOPIC]=TAG:<tags>")
    group, at, topic = target.partition("@")
    kind = kind.upper()
    try:
        if is_tag_type(kind):
            build_subscription(expression, kind, topic or None)
        else:
            sql92.compile(expression)
    except FilterSyntaxError as e:
        where = f" at position {e.position}" if e.position is not None else ""
        return WhatIfRefused(spec, e.position, f"{kind} `{expression}` does not compile{where}: {e}")
    return WhatIf(group, topic if at else None, kind, expression, spec)


def what_if_plans(candidates: Sequence[WhatIf], plans: Sequence[Plan]) -> list[tuple[Subscription, int]]:
    """Each candidate as a posted subscription (exact, no bloom data: the dump's bitmaps never knew it) for every
    current plan of its group (and topic) that pulls; with the index of the plan it is compared with. A group
    (and topic) without such a plan is a ValueError naming the subscriptions it has."""
    out = []
    for c in candidates:
        current = [p for p in plans if p.group == c.group and (c.topic is None or p.topic == c.topic)
                   and p.source != WHAT_IF]
        if current and all(p.member is not None for p in current):
            raise ValueError(f"--what-if {c.spec!r}: group {c.group!r} is replayed as its members (client_id in the "
                             f"subscriptions file); a what-if stands in for a group's one subscription, not for a "
                             f"member's: replay the group with the member's new subscription instead")
        if not current:
            have = sorted({f"{p.group}@{p.topic}" for p in plans if p.source != WHAT_IF})
            raise ValueError(f"--what-if {c.spec!r}: no current subscription of group {c.group!r}"
                             f"{' to topic ' + repr(c.topic) if c.topic else ''}; subscriptions: {', '.join(have)}")
        for p in current:
            out.append((Subscription(c.group, p.topic, c.type, c.expression, POSTED, p.sub_version, p.batch_size),
                        p.index))
    return out




GAINED, LOST = "gained", "lost"
CHANGES_SCHEMA = tables.WHAT_IF.arrow(drop=("dump_id", "msg_id", "tags"))
"""What `changes` gives per changed unit: the what_if table's columns but the dump id and the message's own ids
(the job adds those from `messages`)."""
_DELIVERED = np.array([c.outcome == vocab.DELIVERED for c in vocab.DECISION_CODES])
_OUTCOME_NAMES = pa.array([c.outcome for c in vocab.DECISION_CODES], pa.string())


@dataclass(frozen=True)
class Comparison:
    """One candidate against the subscription it stands in for: both plans' bytes in their topic's matrix rows."""

    group: str
    topic: str
    candidate_expression: str
    current_expression: str
    candidate_position: int
    current_position: int
    width: int
    """The topic's matrix row: the run's subscriptions' bytes, then its candidates'."""


def comparisons(plans: Sequence[Plan], compared: Mapping[int, int], positions: Mapping[int, int],
                widths: Mapping[str, tuple[int, int]]) -> list[Comparison]:
    """Each candidate (by plan index, `compared`: {candidate: current}) with its byte and its current's
    (`matrix.subscription_positions`)."""
    out = []
    for cand, cur in compared.items():
        p, base = plans[cand], plans[cur]
        out.append(Comparison(p.group, p.topic, p.expression, base.expression, positions[cand], positions[cur],
                              sum(widths[p.topic])))
    return out


def changes(rows: pa.Table | pa.RecordBatch, compared: Sequence[Comparison]) -> pa.Table:
    """The units each candidate gains or loses (CHANGES_SCHEMA), from matrix rows (topic, queue_id, queue_offset,
    commit_log_offset, decisions: every subscription's byte then every candidate's). A unit is gained when the
    candidate's decision delivers it and the current one's does not (not scanned counts as not delivered), lost
    the other way round; the outcomes are the decisions' (null where the plan's pulls never reached the unit)."""
    rows = pa.table(rows) if isinstance(rows, pa.RecordBatch) else rows
    parts = []
    topic_col = rows.column("topic")
    for topic in sorted({c.topic for c in compared}):
        mine = rows.filter(pc.equal(topic_col, topic))
        if mine.num_rows == 0:
            continue
        comps = [c for c in compared if c.topic == topic]
        codes = codes_of(mine, comps[0].width)
        for c in comps:
            got, had = _DELIVERED[codes[:, c.candidate_position]], _DELIVERED[codes[:, c.current_position]]
            take = np.flatnonzero(got != had)
            if len(take) == 0:
                continue
            k = len(take)
            picked = mine.take(pa.array(take))
            cols = {
                "consumer_group": pa.array([c.group] * k, pa.string()), "topic": picked.column("topic"),
                "queue_id": picked.column("queue_id"), "queue_offset": picked.column("queue_offset"),
                "commit_log_offset": picked.column("commit_log_offset"),
                "change": pa.array(np.where(got[take], GAINED, LOST).tolist(), pa.string()),
                "current_expression": pa.array([c.current_expression] * k, pa.string()),
                "candidate_expression": pa.array([c.candidate_expression] * k, pa.string()),
                "current_outcome": _OUTCOME_NAMES.take(pa.array(codes[take, c.current_position])),
                "candidate_outcome": _OUTCOME_NAMES.take(pa.array(codes[take, c.candidate_position])),
            }
            parts.append(pa.Table.from_arrays([pc.cast(cols[f.name], f.type) for f in CHANGES_SCHEMA],
                                              schema=CHANGES_SCHEMA))
    return pa.concat_tables(parts) if parts else CHANGES_SCHEMA.empty_table()


def summarize(plans: Sequence[Plan], compared: Mapping[int, int], counts: Iterable[Mapping],
              firsts: Iterable[Mapping], examples: int = 3) -> tuple[list[dict], list[str]]:
    """Per candidate, what the summary says: gained and lost in all and by queue, and the first few units of each
    (`counts`: what_if rows counted by consumer_group, topic, candidate_expression, queue_id, change as `count`;
    `firsts`: what_if rows in topic, queue, offset order). With a sentence for each candidate the broker refuses:
    it would receive nothing."""
    counts, firsts = list(counts), list(firsts)
    out, notes = [], []
    for i, c in compared.items():
        p, base = plans[i], plans[c]
        key = (p.group, p.topic, p.expression)
        queues: dict[int, dict] = {}
        for r in counts:
            if (r["consumer_group"], r["topic"], r["candidate_expression"]) == key:
                q = queues.setdefault(r["queue_id"], {"queue_id": r["queue_id"], GAINED: 0, LOST: 0})
                q[r["change"]] += r["count"]
        ex = [dict(r) for r in firsts if (r["consumer_group"], r["topic"], r["candidate_expression"]) == key]
        ex = [e for e in ex if e["change"] == GAINED][:examples] + [e for e in ex if e["change"] == LOST][:examples]
        out.append({"consumer_group": p.group, "topic": p.topic, "candidate": f"{p.type}:{p.expression}",
                    "current": f"{base.type}:{base.expression}", "answer": p.answer,
                    GAINED: sum(q[GAINED] for q in queues.values()), LOST: sum(q[LOST] for q in queues.values()),
                    "queues": [queues[k] for k in sorted(queues)], "examples": ex})
        if not p.ok:
            notes.append(f"what-if {p.group} on {p.topic}: the broker answers the candidate {p.answer} "
                         f"({p.remark or p.cause}): it would receive nothing")
    return out, notes
