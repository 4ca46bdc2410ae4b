"""What-if candidates: a subscription a group might use instead of its current one, parsed and refused as the
broker would, planned beside the current one, and what it would gain or lose."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
        if not current:
            have = sorted({f"{p.group}@{p.topic}" for p in plans if p.source != WHAT_IF})
            raise ValueError(f"--what-if {c.spec!r}: no current subscription of group {c.group!r}"
                             f"{' to topic ' + repr(c.topic) if c.topic else ''}; subscriptions: {', '.join(have)}")
        for p in current:
            out.append((Subscription(c.group, p.topic, c.type, c.expression, POSTED, p.sub_version, p.batch_size),
                        p.index))
    return out


