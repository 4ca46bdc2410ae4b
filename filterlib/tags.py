"""Tag subscriptions as RocketMQ builds and checks them: hash codes, parsing, broker and client matching."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from filterlib.errors import SubscriptionParseError
from filterlib.javalang import java_split, java_string_hash, java_trim, to_int32

SUB_ALL = "*"
TAG_TYPE = "TAG"
SQL92_TYPE = "SQL92"



def tags_code(tag: str) -> int:
    """Java `String.hashCode` of a tag: over UTF-16 code units, wrapped to a signed 32-bit int."""
    return java_string_hash(tag)


def is_tag_type(expression_type: str | None) -> bool:
    """`ExpressionType.isTagType`: null, "" and exactly "TAG" are tag types (case-sensitive)."""
    return expression_type is None or expression_type == "" or expression_type == TAG_TYPE


@dataclass(frozen=True)
class Subscription:
    """A consumer's SubscriptionData: the expression as given and, for tags, the tag and hash sets."""

    sub_string: str
    sub_all: bool
    tags: frozenset[str] = field(default_factory=frozenset)
    codes: frozenset[int] = field(default_factory=frozenset)
    expression_type: str | None = TAG_TYPE
    class_filter_mode: bool = False
    topic: str | None = None

    @property
    def is_tag_type(self) -> bool:
        """Whether the broker filters this subscription by tag hash (`ExpressionType.isTagType`)."""
        return is_tag_type(self.expression_type)


def parse_subscription(expr: str | None, topic: str | None = None) -> Subscription:
    """`FilterAPI.buildSubscriptionData`: SUB_ALL for null/""/"*", else the trimmed non-empty `||` pieces."""
    if expr is None or expr == "" or expr == SUB_ALL:
        return Subscription(sub_string=SUB_ALL, sub_all=True, topic=topic)
    pieces = java_split(expr, "||")
    if not pieces:
        raise SubscriptionParseError("subString split error", expression=expr)
    tags = frozenset(t for t in (java_trim(p) for p in pieces) if t)
    return Subscription(sub_string=expr, sub_all=False, tags=tags,
                        codes=frozenset(tags_code(t) for t in tags), topic=topic)


def build_subscription(expr: str | None, expression_type: str | None = TAG_TYPE,
                       topic: str | None = None) -> Subscription:
    """`FilterAPI.build(topic, expr, type)`: tag parsing for null/"TAG", else the raw expression (non-empty)."""
    if expression_type is None or expression_type == TAG_TYPE:
        return parse_subscription(expr, topic)
    if expr is None or expr == "":
        raise SubscriptionParseError(f"Expression can't be null! {expression_type}", expression=expr or "")
    return Subscription(sub_string=expr, sub_all=expr == SUB_ALL, expression_type=expression_type, topic=topic)


def check_consume_queue(sub: Subscription, tags_code_value: int | None) -> tuple[bool, str]:
    """The broker's tag check on a consume-queue unit, with the branch that decided it."""
    if tags_code_value is None:
        return True, "tag_code_null"
    if sub.sub_string == SUB_ALL:
        return True, "sub_all"
    if to_int32(tags_code_value) in sub.codes:
        return True, "tag_hash_hit"
    return False, "tag_hash_miss"


def matches_consume_queue(sub: Subscription, tags_code_value: int | None) -> bool:
    """`ExpressionMessageFilter.isMatchedByConsumeQueue` for a tag subscription (null tagsCode matches)."""
    return check_consume_queue(sub, tags_code_value)[0]


def check_client(sub: Subscription, message_tags: str | None) -> tuple[bool, str]:
    """The client's exact re-check (`PullAPIWrapper.processPullResult`), with the branch that decided it."""
    if not sub.tags or sub.class_filter_mode:
        return True, "client_keep_all"
    if message_tags is None:
        return False, "client_no_tags"
    if message_tags in sub.tags:
        return True, "client_tag_match"
    return False, "client_tag_mismatch"


def matches_client(sub: Subscription, message_tags: str | None) -> bool:
    """Whether the client keeps a pulled message: empty tag set keeps all, else the exact TAGS string."""
    return check_client(sub, message_tags)[0]


def find_collisions(tags: Iterable[str]) -> dict[int, frozenset[str]]:
    """Hash codes shared by two or more distinct tags, each with the tags that share it."""
    by_code: dict[int, set[str]] = defaultdict(set)
    for tag in set(tags):
        by_code[tags_code(tag)].add(tag)
    return {code: frozenset(group) for code, group in by_code.items() if len(group) > 1}


def subscription_collisions(sub: Subscription, tags: Iterable[str]) -> Mapping[str, int]:
    """Tags (not subscribed) whose hash equals a subscribed tag's hash: they pass the broker, not the client."""
    return {t: c for t in set(tags) if t not in sub.tags and (c := tags_code(t)) in sub.codes}
