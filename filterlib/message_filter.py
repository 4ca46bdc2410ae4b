"""The broker's two-layer message filter (ExpressionMessageFilter and its retry variant), with the deciding branch."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from filterlib import tags as tagmod
from filterlib.bloom import BloomFilter
from filterlib.errors import BrokerFilterError, FilterError, SubscriptionParseError
from filterlib.javalang import java_split
from filterlib.registry import ConsumerFilterData, ConsumerFilterManager
from filterlib.tags import Subscription
from filterlib.vocabulary import (
    BLOOM_MISS,
    CLIENT,
    COMMIT_LOG,
    COMMIT_LOG_OUTCOMES,
    CONSUME_QUEUE,
    DELIVERED,
    FILTERED_BY_OTHER_MEMBER,
    MEMBER_RECHECK_DROP,
    SQL_FALSE,
    SQL_NON_BOOLEAN,
    TAG_CLIENT_MISMATCH,
    TAG_HASH_MISS,
)

# Re-exported: the row filter's callers name outcomes through this module too.
from filterlib.vocabulary import CLIENT_DECODE_FAILED as CLIENT_DECODE_FAILED
from filterlib.vocabulary import SQL_ERROR as SQL_ERROR
from filterlib.vocabulary import SQL_NULL as SQL_NULL

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_TAGS = "TAGS"

# PullMessageProcessor's answers decided before the store is read (ResponseCode names).
OK = "OK"
FILTER_DATA_NOT_EXIST = "FILTER_DATA_NOT_EXIST"
FILTER_DATA_NOT_LATEST = "FILTER_DATA_NOT_LATEST"
SYSTEM_ERROR = "SYSTEM_ERROR"
SUBSCRIPTION_PARSE_FAILED = "SUBSCRIPTION_PARSE_FAILED"


class ExtUnitLike(Protocol):
    """Anything with a consume-queue ext unit's three fields (e.g. filterlib.store's reader objects)."""

    tags_code: int
    msg_store_time: int
    filter_bitmap: bytes | None


@dataclass(frozen=True)
class ExtUnit:
    """A ConsumeQueueExt unit: the real tagsCode, the message's store time and its bitmap (None when absent)."""

    tags_code: int
    msg_store_time: int
    filter_bitmap: bytes | None = None


@dataclass(frozen=True)
class Decision:
    """One layer's answer: matched or not, the branch that decided, and a detail (SQL value or error)."""

    matched: bool
    layer: str
    reason: str
    detail: str | None = None


@dataclass(frozen=True)
class FilterOutcome:
    """A unit's end result for the audit table: outcome, deciding layer and reason, bloom false positive flag."""

    outcome: str
    layer: str
    reason: str
    detail: str | None
    bloom_false_positive: bool
    decisions: tuple[Decision, ...]

    @property
    def delivered(self) -> bool:
        """Whether the consumer gets the message."""
        return self.outcome == DELIVERED


def parse_version(version: str | tuple[int, ...]) -> tuple[int, ...]:
    """"5.1.4" → (5, 1, 4)."""
    if isinstance(version, tuple):
        return version
    return tuple(int(p) for p in version.split(".")[:3])


def parse_retry_group(retry_topic: str, version: tuple[int, ...] = (5, 3, 3)) -> str:
    """The group of a retry topic: `KeyBuilder.parseGroup` from 5.2.0 (POP v2 `%RETRY%G+T`), else the suffix."""
    if version >= (5, 2, 0) and retry_topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and "+" in retry_topic:
        parts = java_split(retry_topic, "+")
        if len(parts) == 2:
            return parts[0][len(RETRY_GROUP_TOPIC_PREFIX):]
    return retry_topic[len(RETRY_GROUP_TOPIC_PREFIX):]


def evaluate_sql(data: ConsumerFilterData, properties: Mapping[str, str] | None) -> Decision:
    """Evaluate a filter's compiled expression as the broker does: only Boolean TRUE matches."""
    try:
        value: Any = data.compiled.evaluate(properties or {})
    except FilterError as exc:
        java_class = getattr(exc, "java_class", type(exc).__name__)
        return Decision(False, COMMIT_LOG, "sql_error", f"{java_class}: {exc}")
    if value is True:
        return Decision(True, COMMIT_LOG, "sql_true", "TRUE")
    if value is False:
        return Decision(False, COMMIT_LOG, "sql_false", "FALSE")
    if value is None:
        return Decision(False, COMMIT_LOG, "sql_null", "NULL")
    return Decision(False, COMMIT_LOG, SQL_NON_BOOLEAN, f"NON_BOOLEAN:{type(value).__name__}")


class ExpressionMessageFilter:
    """`ExpressionMessageFilter`: tag hashes or Bloom bitmap at the consume queue, SQL92 at the commit log."""

    def __init__(self, subscription: Subscription | None, filter_data: ConsumerFilterData | None,
                 bloom_filter: BloomFilter | None):
        self.subscription = subscription
        self.filter_data = filter_data
        self.bloom_filter = bloom_filter
        self.bloom_data_valid = (filter_data is not None and bloom_filter is not None
                                 and bloom_filter.is_valid(filter_data.bloom_filter_data))

    def check_consume_queue(self, tags_code: int | None, ext_unit: ExtUnitLike | None) -> Decision:
        """`isMatchedByConsumeQueue(tagsCode, cqExtUnit)` with the deciding branch."""
        sub = self.subscription
        if sub is None:
            return Decision(True, CONSUME_QUEUE, "no_subscription")
        if sub.class_filter_mode:
            return Decision(True, CONSUME_QUEUE, "class_filter")
        if sub.is_tag_type:
            matched, reason = tagmod.check_consume_queue(sub, tags_code)
            return Decision(matched, CONSUME_QUEUE, reason)
        data = self.filter_data
        if data is None or data.expression is None or data.compiled is None:
            return Decision(True, CONSUME_QUEUE, "no_filter_data")
        if data.bloom_filter_data is None:
            return Decision(True, CONSUME_QUEUE, "no_bloom_data")
        if ext_unit is None:
            return Decision(True, CONSUME_QUEUE, "ext_null")
        if not data.is_msg_in_live(ext_unit.msg_store_time):
            return Decision(True, CONSUME_QUEUE, "not_in_live")
        bitmap = ext_unit.filter_bitmap
        if bitmap is None:
            return Decision(True, CONSUME_QUEUE, "bitmap_null")
        if not self.bloom_data_valid:
            return Decision(True, CONSUME_QUEUE, "bloom_data_invalid")
        if len(bitmap) * 8 != data.bloom_filter_data.bit_num:
            return Decision(True, CONSUME_QUEUE, "bitmap_length_mismatch")
        try:
            hit = self.bloom_filter.is_hit(data.bloom_filter_data, bitmap)
        except (ValueError, IndexError) as exc:
            return Decision(True, CONSUME_QUEUE, "bloom_error", str(exc))
        return Decision(hit, CONSUME_QUEUE, "bloom_hit" if hit else "bloom_miss")

    def is_matched_by_consume_queue(self, tags_code: int | None, ext_unit: ExtUnitLike | None) -> bool:
        """The broker's consume-queue layer answer."""
        return self.check_consume_queue(tags_code, ext_unit).matched

    def _commit_log_prelude(self) -> Decision | None:
        """The checks both filters make first: no subscription, class filter, TAG type."""
        sub = self.subscription
        if sub is None:
            return Decision(True, COMMIT_LOG, "no_subscription")
        if sub.class_filter_mode:
            return Decision(True, COMMIT_LOG, "class_filter")
        if sub.is_tag_type:
            return Decision(True, COMMIT_LOG, "tag_type")
        return None

    def check_commit_log(self, properties: Mapping[str, str] | None) -> Decision:
        """`isMatchedByCommitLog(properties)` with the deciding branch (the SQL value or error as detail)."""
        early = self._commit_log_prelude()
        if early is not None:
            return early
        data = self.filter_data
        if data is None or data.expression is None or data.compiled is None:
            return Decision(True, COMMIT_LOG, "no_filter_data")
        return evaluate_sql(data, properties)

    def is_matched_by_commit_log(self, properties: Mapping[str, str] | None) -> bool:
        """The broker's commit-log layer answer."""
        return self.check_commit_log(properties).matched


class ExpressionForRetryMessageFilter(ExpressionMessageFilter):
    """`ExpressionForRetryMessageFilter` (filterSupportRetry): retry topics use the original topic's filter."""

    def __init__(self, subscription: Subscription | None, filter_data: ConsumerFilterData | None,
                 manager: ConsumerFilterManager, version: str | tuple[int, ...] = "5.3.3"):
        super().__init__(subscription, filter_data, manager.bloom_filter)
        self.manager = manager
        self.version = parse_version(version)

    def check_commit_log(self, properties: Mapping[str, str] | None) -> Decision:
        """Retry-aware commit-log check; before 5.1.4 a TAG subscription on a retry topic is SQL-filtered too."""
        sub = self.subscription
        if sub is None or sub.class_filter_mode:
            return self._commit_log_prelude()
        if sub.topic is None:
            raise ValueError("the retry filter needs the subscription's topic")
        is_retry = sub.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if self.version >= (5, 1, 4):
            if sub.is_tag_type:
                return Decision(True, COMMIT_LOG, "tag_type")
        elif not is_retry and sub.is_tag_type:
            return Decision(True, COMMIT_LOG, "tag_type")
        data = self.filter_data
        if is_retry:
            if properties is None:
                raise BrokerFilterError("retry message without properties")
            real_topic = properties.get(PROPERTY_RETRY_TOPIC)
            if real_topic is None:
                raise BrokerFilterError("retry message without RETRY_TOPIC: ConcurrentHashMap.containsKey(null)")
            data = self.manager.get(real_topic, parse_retry_group(sub.topic, self.version))
        if data is None or data.expression is None or data.compiled is None:
            return Decision(True, COMMIT_LOG, "no_filter_data")
        return evaluate_sql(data, properties)


def make_filter(subscription: Subscription | None, filter_data: ConsumerFilterData | None,
                manager: ConsumerFilterManager, filter_support_retry: bool = False,
                version: str | tuple[int, ...] | None = None) -> ExpressionMessageFilter:
    """The filter PullMessageProcessor builds: the retry variant when `filterSupportRetry` is on, following the
    rules of `version` (default: the release the registry keeps its rules for)."""
    if filter_support_retry:
        return ExpressionForRetryMessageFilter(subscription, filter_data, manager, version or manager.rules.version)
    return ExpressionMessageFilter(subscription, filter_data, manager.bloom_filter)


@dataclass(frozen=True)
class PullAnswer:
    """What PullMessageProcessor decides before it reads the store, and what it would filter with when OK.

    `remark` is the broker's response remark; `cause` the FilterAPI error behind SUBSCRIPTION_PARSE_FAILED;
    `sub_version` the subscription version the check used.
    """

    answer: str
    subscription: Subscription | None = None
    filter_data: ConsumerFilterData | None = None
    sub_version: int = 0
    remark: str | None = None
    cause: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the broker goes on to read the store with a filter."""
        return self.answer == OK


def pull_answer(manager: ConsumerFilterManager, topic: str, group: str, expression: str | None,
                expression_type: str | None = tagmod.TAG_TYPE, sub_version: int | None = None, *,
                posted: bool = False, enable_property_filter: bool, now: int | None = None) -> PullAnswer:
    """PullMessageProcessor.processRequest's subscription and filter-data checks (5.3.3), in the broker's order.

    Posted path (`posted`, the pull carries its subscription: pull/lite-pull consumers): `FilterAPI.build`
    failing → SUBSCRIPTION_PARSE_FAILED; the filter data is `ConsumerFilterManager.build(...)` (no bloom data; a
    selector that does not compile filters nothing). Registered path (push consumers, heartbeat subscription):
    for a non-TAG type, no record from `get(topic, group)` → FILTER_DATA_NOT_EXIST, a record whose clientVersion
    is below the pull's subVersion → FILTER_DATA_NOT_LATEST (`sub_version` None: the record's clientVersion, or 0).
    Then, for any non-TAG type, `enablePropertyFilter` off (the broker's default) → SYSTEM_ERROR: the broker
    refuses SQL92 subscriptions outright. A parse failure on the registered path means the client could not
    have subscribed in the first place (FilterAPI runs in the client too).
    """
    try:
        sub = tagmod.build_subscription(expression, expression_type, topic)
    except SubscriptionParseError as exc:
        return PullAnswer(SUBSCRIPTION_PARSE_FAILED, sub_version=sub_version or 0,
                          remark="parse the consumer's subscription failed", cause=str(exc))
    data = None
    if posted:
        version = sub_version or 0
        if not sub.is_tag_type:
            data = manager.build(topic, group, expression, expression_type, version, now)
    else:
        registered = manager.get(topic, group)
        version = sub_version if sub_version is not None else (0 if registered is None else registered.client_version)
        if not sub.is_tag_type:
            data = registered
            if data is None:
                return PullAnswer(FILTER_DATA_NOT_EXIST, sub, None, version,
                                  "The broker's consumer filter data is not exist!Your expression may be wrong!")
            if data.client_version < version:
                return PullAnswer(FILTER_DATA_NOT_LATEST, sub, data, version,
                                  "the consumer's consumer filter data not latest")
    if not sub.is_tag_type and not enable_property_filter:
        return PullAnswer(SYSTEM_ERROR, sub, data, version,
                          f"The broker does not support consumer to filter message by {sub.expression_type}")
    return PullAnswer(OK, sub, data, version)


def check_client(subscription: Subscription, message_tags: str | None) -> Decision:
    """The client's re-check of a returned message (exact TAGS membership when the tag set is non-empty)."""
    matched, reason = tagmod.check_client(subscription, message_tags)
    return Decision(matched, CLIENT, reason)


def decide(message_filter: ExpressionMessageFilter, tags_code: int | None, ext_unit: ExtUnitLike | None,
           properties: Mapping[str, str] | None, own: ExpressionMessageFilter | None = None) -> FilterOutcome:
    """Run both broker layers and the client re-check on one unit; the first layer that drops it decides.

    `own`: a group member's own filter where the broker filters with another member's subscription (the kept
    one): the client re-checks with the member's own tags, and a broker drop the member's own subscription would
    have delivered is FILTERED_BY_OTHER_MEMBER."""
    out = _decide(message_filter, tags_code, ext_unit, properties, own)
    if own is not None and out.layer in (CONSUME_QUEUE, COMMIT_LOG) and out.outcome != DELIVERED and \
            decide(own, tags_code, ext_unit, properties).outcome == DELIVERED:
        return dataclasses.replace(out, outcome=FILTERED_BY_OTHER_MEMBER)
    return out


def _decide(message_filter: ExpressionMessageFilter, tags_code: int | None, ext_unit: ExtUnitLike | None,
            properties: Mapping[str, str] | None, own: ExpressionMessageFilter | None) -> FilterOutcome:
    cq = message_filter.check_consume_queue(tags_code, ext_unit)
    if not cq.matched:
        outcome = BLOOM_MISS if cq.reason == "bloom_miss" else TAG_HASH_MISS
        return FilterOutcome(outcome, cq.layer, cq.reason, cq.detail, False, (cq,))
    cl = message_filter.check_commit_log(properties)
    if not cl.matched:
        return FilterOutcome(COMMIT_LOG_OUTCOMES.get(cl.reason, SQL_FALSE), cl.layer, cl.reason, cl.detail,
                             cq.reason == "bloom_hit", (cq, cl))
    sub = message_filter.subscription
    if sub is None:
        return FilterOutcome(DELIVERED, cl.layer, cl.reason, cl.detail, False, (cq, cl))
    tags = None if properties is None else properties.get(PROPERTY_TAGS)
    client = check_client(own.subscription if own is not None else sub, tags)
    if not client.matched:
        if own is not None and check_client(sub, tags).matched:
            client = Decision(False, CLIENT, "client_not_own_tag")
            return FilterOutcome(MEMBER_RECHECK_DROP, client.layer, client.reason, None, False, (cq, cl, client))
        return FilterOutcome(TAG_CLIENT_MISMATCH, client.layer, client.reason, None, False, (cq, cl, client))
    return FilterOutcome(DELIVERED, client.layer, client.reason, None, False, (cq, cl, client))
