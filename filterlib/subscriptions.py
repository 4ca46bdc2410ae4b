"""The subscriptions file: consumer groups' subscriptions the dump does not hold (design.md, "Subscriptions file").

A JSON list of objects; only `group` and `topic` are required:

    [{"group": "G1", "topic": "T", "type": "TAG", "expression": "TagA || TagB"},
     {"group": "G2", "topic": "T", "type": "SQL92", "expression": "a > 5", "sub_version": 3,
      "path": "registered", "batch_size": 32}]

`type` TAG (default) or SQL92; any other text is passed on as the broker would get it. `expression` default `*`.
`path` `registered` (default: a push consumer, its filter data from the registry) or `posted` (the pull carries its
selector: a lite-pull consumer that subscribes, or a push consumer with postSubscriptionWhenPull). `sub_version`
default: the registered client version, else 0 (None here). `batch_size` default 32. `client_id` names the member
(client) of the group the entry belongs to: a group whose entries name their clients is replayed as its members
(`filterlib.members`), with `allocate` its allocation strategy (`AVG`, the default, or `AVG_BY_CIRCLE`; the class
names AllocateMessageQueueAveragely / ...ByCircle are accepted too). An unknown key or a wrong type is a
`SubscriptionsError` naming the entry.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from filterlib.registry import ConsumerFilterManager
from filterlib.tags import TAG_TYPE, is_tag_type

REGISTERED = "registered"
POSTED = "posted"
PATHS = (REGISTERED, POSTED)
DEFAULT_BATCH_SIZE = 32
_KEYS = ("group", "topic", "type", "expression", "path", "sub_version", "batch_size", "client_id", "allocate")
ALLOCATE_NAMES = ("AVG", "AVG_BY_CIRCLE", "AllocateMessageQueueAveragely", "AllocateMessageQueueAveragelyByCircle")


class SubscriptionsError(ValueError):
    """The subscriptions file is unreadable or an entry is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class Subscription:
    """One consumer group's subscription to one topic."""

    group: str
    topic: str
    type: str = TAG_TYPE
    expression: str = "*"
    path: str = REGISTERED
    sub_version: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    client_id: str | None = None
    allocate: str | None = None

    @property
    def is_tag(self) -> bool:
        """A TAG subscription (type null, empty or TAG, as the broker's ExpressionType.isTagType)."""
        return is_tag_type(self.type)


def _entry_name(i: int, obj: object) -> str:
    if isinstance(obj, dict):
        g, t = obj.get("group"), obj.get("topic")
        if isinstance(g, str) and isinstance(t, str):
            return f"entry {i} (group {g!r}, topic {t!r})"
    return f"entry {i}"


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_entry(i: int, obj: object) -> Subscription:
    """One entry of the list; raises SubscriptionsError naming it."""
    name = _entry_name(i, obj)
    if not isinstance(obj, dict):
        raise SubscriptionsError(f"{name}: expected an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(_KEYS))
    if unknown:
        raise SubscriptionsError(f"{name}: unknown key(s) {', '.join(map(repr, unknown))}; "
                                 f"allowed: {', '.join(_KEYS)}")
    for key in ("group", "topic"):
        if key not in obj:
            raise SubscriptionsError(f"{name}: {key!r} is required")
        if not isinstance(obj[key], str) or not obj[key]:
            raise SubscriptionsError(f"{name}: {key!r} must be a non-empty string")
    for key in ("type", "expression"):
        if key in obj and not isinstance(obj[key], str):
            raise SubscriptionsError(f"{name}: {key!r} must be a string, got {type(obj[key]).__name__}")
    path = obj.get("path", REGISTERED)
    if path not in PATHS:
        raise SubscriptionsError(f"{name}: 'path' must be one of {', '.join(PATHS)}, got {path!r}")
    version = obj.get("sub_version")
    if version is not None and not (_is_int(version) and -(1 << 63) <= version < (1 << 63)):
        raise SubscriptionsError(f"{name}: 'sub_version' must be an integer (a Java long), got {version!r}")
    batch = obj.get("batch_size", DEFAULT_BATCH_SIZE)
    if not (_is_int(batch) and 0 < batch < (1 << 31)):
        raise SubscriptionsError(f"{name}: 'batch_size' must be a positive integer, got {batch!r}")
    client = obj.get("client_id")
    if client is not None and (not isinstance(client, str) or not client):
        raise SubscriptionsError(f"{name}: 'client_id' must be a non-empty string, got {client!r}")
    allocate = obj.get("allocate")
    if allocate is not None and allocate not in ALLOCATE_NAMES:
        raise SubscriptionsError(f"{name}: 'allocate' must be one of {', '.join(ALLOCATE_NAMES)}, got {allocate!r}"
                                 f" (other strategies are not replayed)")
    if allocate is not None and client is None:
        raise SubscriptionsError(f"{name}: 'allocate' needs 'client_id': only a group replayed as its members is "
                                 f"allocated")
    return Subscription(obj["group"], obj["topic"], obj.get("type", TAG_TYPE), obj.get("expression", "*"), path,
                        version, batch, client, allocate)


def parse_subscriptions(data: object) -> list[Subscription]:
    """The parsed JSON value (a list of objects) as Subscriptions, in file order."""
    if not isinstance(data, list):
        raise SubscriptionsError(f"expected a JSON list of subscriptions, got {type(data).__name__}")
    return [parse_entry(i, obj) for i, obj in enumerate(data)]


def load_subscriptions(path: str) -> list[Subscription]:
    """Read and parse a subscriptions file; every problem is a one-line SubscriptionsError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SubscriptionsError(f"{path}: cannot read the subscriptions file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise SubscriptionsError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SubscriptionsError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    try:
        return parse_subscriptions(data)
    except SubscriptionsError as e:
        raise SubscriptionsError(f"{path}: {e}") from None


def register_missing(registry: ConsumerFilterManager, subscriptions: Iterable[Subscription]) -> list[Subscription]:
    """Register, with bornTime 0 (live for every message), the non-TAG `registered` subscriptions whose (group,
    topic) the registry does not hold; returns those taken. A selector that does not compile is not registered
    and lands in `registry.compile_failures`, as the broker keeps it out of its registry."""
    taken = []
    for s in subscriptions:
        if s.path != REGISTERED or s.is_tag or registry.get(s.topic, s.group) is not None:
            continue
        if registry.register(s.topic, s.group, s.expression, s.type, s.sub_version or 0, now=0):
            taken.append(s)
    return taken
