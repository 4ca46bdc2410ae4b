"""Job 2 over a broker's history, run after run: which of a run's subscriptions continue one the history holds,
where each pull continues on each queue, and which subscriptions the run no longer has. Pure data: the job reads
the previous complete run's `group_stats` and `pull_positions` rows and hands them here.

The rules (design.md, 'A broker's history'; docs/history.md says them to users):
- A subscription **continues** one in force when everything that decides its pulls is the same: group, topic,
  member, possibility (`kept_by`), type, expression, version, path, batch size, the kept subscription and the
  broker's answer (`WORDS`). It keeps its index and its byte in the matrix; its counts add up; its pulls are
  numbered on. Anything else is a **new** subscription: the next free index, the next free byte of its topic.
- A subscription in force that the run no longer has **ends** at the run's copy (`until_copy`): its row and its
  decisions stand.
- A pull continues where its **line** stands on the queue: the subscription's own position, else the line's (the
  subscriptions of one group and topic, per possibility: the group's consumer offset does not change with its
  selector, and a queue moved to another member continues at the group's offset), else the run's start rule
  (`--from`) decides, as for a group the broker never saw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from filterlib.replay.plans import NOT_SUBSCRIBED, Plan

WORDS = ("consumer_group", "topic", "member", "kept_by", "subscription_type", "expression", "sub_version", "path",
         "batch_size", "kept_type", "kept_expression", "answer")
"""The group_stats columns that decide a subscription's pulls: equal words, the same subscription."""


def plan_words(p: Plan) -> tuple:
    """A plan's WORDS."""
    return (p.group, p.topic, p.member, p.kept_by, p.type, p.expression, p.sub_version, p.path, p.batch_size,
            p.kept_type, p.kept_expression, p.answer)


def row_words(row: Mapping) -> tuple:
    """A group_stats row's WORDS."""
    return tuple(row.get(k) for k in WORDS)


Line = tuple[str, str, bool, str | None]


def line_of(group: str, topic: str, member: str | None, kept_by: str | None) -> Line:
    """The consumer whose offset a subscription's pulls advance: (group, topic) for a group replayed whole; for a
    group replayed as its members, (group, topic) in one possibility, whichever member owns the queue."""
    return (group, topic, member is not None, kept_by)


@dataclass
class Carried:
    """A run's plans placed in the history: stable indices and bytes, where each pull starts, what it continues."""

    plans: list[Plan]
    positions: dict[int, int]
    """{subscription index: its byte in its topic's matrix rows}."""
    widths: dict[str, int]
    """{topic: bytes per matrix row} over every subscription the history holds for it."""
    starts: dict[tuple[int, int], int] = field(default_factory=dict)
    """{(index, queue id): offset} where a pull continues (absent: the run's start rule)."""
    bases: dict[tuple[int, int], int] = field(default_factory=dict)
    """{(index, queue id): pulls the subscription already made there}: the run numbers its pulls on."""
    continued: dict[int, dict] = field(default_factory=dict)
    """{index: the previous group_stats row} of the subscriptions the run continues."""
    ended: list[dict] = field(default_factory=list)
    """The previous rows the run does not continue (in force until now, or ended before)."""
    kept_positions: list[dict] = field(default_factory=list)
    """Previous pull_positions rows of lines no plan of the run has (a group gone for a while keeps its offset)."""

    @property
    def unchanged(self) -> bool:
        """Whether every subscription in force continues and none is new."""
        return len(self.continued) == len(self.plans) and not any(r.get("until_copy") is None for r in self.ended)


def carry(plans: Sequence[Plan], stats: Iterable[Mapping], positions: Iterable[Mapping]) -> Carried:
    """Place the run's plans (indexed 0..n-1 in run order) in the history of the previous run's group_stats rows
    (`stats`) and pull_positions rows (`positions`)."""
    old = [dict(r) for r in stats]
    pos = [dict(r) for r in positions]
    in_force = {row_words(r): r for r in old if r.get("until_copy") is None}
    next_index = max((int(r["subscription_index"]) for r in old), default=-1) + 1
    next_byte: dict[str, int] = {}
    for r in old:
        t = r["topic"]
        next_byte[t] = max(next_byte.get(t, 0), int(r["subscription_position"]) + 1)
    out = Carried([], {}, {})
    for p in plans:
        prev = in_force.pop(plan_words(p), None)
        if prev is not None:
            index, byte = int(prev["subscription_index"]), int(prev["subscription_position"])
            out.continued[index] = prev
        else:
            index, next_index = next_index, next_index + 1
            byte = next_byte.get(p.topic, 0)
            next_byte[p.topic] = byte + 1
        out.plans.append(dataclasses.replace(p, index=index))
        out.positions[index] = byte
    out.ended = [r for r in old if int(r["subscription_index"]) not in out.continued]
    out.widths = dict(next_byte)
    own = {(int(r["subscription_index"]), int(r["queue_id"])): r for r in pos}
    lines: dict[tuple[Line, int], dict] = {}
    for r in pos:
        key = (line_of(r["consumer_group"], r["topic"], r.get("member"), r.get("kept_by")), int(r["queue_id"]))
        if key not in lines or int(r["next_offset"]) > int(lines[key]["next_offset"]):
            lines[key] = r
    mine = {line_of(p.group, p.topic, p.member, p.kept_by) for p in out.plans}
    for p in out.plans:
        line = line_of(p.group, p.topic, p.member, p.kept_by)
        for (ln, qid), r in lines.items():
            if ln != line or not p.pulls(qid):
                continue
            at = own.get((p.index, qid), r)
            out.starts[(p.index, qid)] = int(at["next_offset"])
            if (p.index, qid) in own:
                out.bases[(p.index, qid)] = int(own[(p.index, qid)]["pulls"])
    out.kept_positions = [r for r in pos if line_of(r["consumer_group"], r["topic"], r.get("member"),
                                                    r.get("kept_by")) not in mine]
    return out


def fresh(plans: Sequence[Plan], positions: Mapping[int, int]) -> Carried:
    """A run that begins the history (or replays a dump whole): its own indices and bytes, every pull by --from."""
    widths: dict[str, int] = {}
    for p in plans:
        widths[p.topic] = max(widths.get(p.topic, 0), positions[p.index] + 1)
    return Carried(list(plans), dict(positions), widths)


def replay_from(plans: Iterable[Plan], starts: Mapping[tuple[int, int], int], topic: str, queue_id: int
                ) -> int | None:
    """The first offset any pull of the queue starts at when every replayed plan covering it continues a line
    (the units below it were decided by earlier runs); None when one starts by the run's rule (read it whole)."""
    froms = []
    for p in plans:
        if p.topic != topic or not (p.ok or p.answer == NOT_SUBSCRIBED) or not p.pulls(queue_id):
            continue
        at = starts.get((p.index, queue_id))
        if at is None:
            return None
        froms.append(at)
    return min(froms) if froms else None
