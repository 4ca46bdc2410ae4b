"""The broker's ConsumerFilterManager: SQL92 registrations, their life cycle and config/consumerFilter.json, as one
release keeps them (`filterlib.brokerversion.registry_rules`: 5.3.3's, or 5.5.1's rewrite)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filterlib.bloom import BloomFilter, BloomFilterData
from filterlib.brokerversion import DEFAULT, RegistryRules, registry_rules
from filterlib.errors import FilterError
from filterlib.javalang import java_utf8_encode
from filterlib.store import fastjson
from filterlib.tags import SQL92_TYPE, is_tag_type

MS_24_HOUR = 24 * 3600 * 1000
LOAD_DEAD_BACKDATE_MS = 30 * 1000

Compiler = Callable[[str | None, str | None], Any]


def now_ms() -> int:
    """Wall-clock milliseconds, as `System.currentTimeMillis()`."""
    return time.time_ns() // 1_000_000


def bloom_key(group: str, topic: str) -> str:
    """The string the broker hashes for a registration: `group + "#" + topic`."""
    return f"{group}#{topic}"


def compile_filter(expression_type: str | None, expression: str | None, version: str = DEFAULT) -> Any:
    """`FilterFactory.INSTANCE.get(type).compile(expr)` in release `version`'s grammar: only the exact type "SQL92"
    has a compiler."""
    if expression_type != SQL92_TYPE:
        raise FilterError(f"no filter SPI registered for type {expression_type!r}")
    if expression is None:
        raise FilterError("expression is null")
    from filterlib import sql92

    return sql92.compile(expression, version=version)


@dataclass
class ConsumerFilterData:
    """One (group, topic) registration as the broker keeps it, plus the compile result for auditing."""

    consumer_group: str | None
    topic: str | None
    expression: str | None
    expression_type: str | None
    born_time: int = 0
    dead_time: int = 0
    bloom_filter_data: BloomFilterData | None = None
    client_version: int = 0
    compiled: Any = field(default=None, repr=False, compare=False)
    compile_error: BaseException | None = field(default=None, compare=False)

    def is_dead(self) -> bool:
        """`isDead`: deadTime >= bornTime (so bornTime 0 with deadTime 0 is dead)."""
        return self.dead_time >= self.born_time

    def how_long_after_death(self, now: int) -> int:
        """Milliseconds since death, or -1 when alive."""
        return now - self.dead_time if self.is_dead() else -1

    def is_msg_in_live(self, msg_store_time: int) -> bool:
        """Whether the bitmap of a message stored at this time covers this filter (store time > bornTime)."""
        return msg_store_time > self.born_time

    def to_json(self) -> dict[str, Any]:
        """The fastjson bean: fields in name order, the derived `dead`, null fields omitted."""
        return {
            "bloomFilterData": None if self.bloom_filter_data is None else self.bloom_filter_data.to_json(),
            "bornTime": self.born_time,
            "clientVersion": self.client_version,
            "consumerGroup": self.consumer_group,
            "dead": self.is_dead(),
            "deadTime": self.dead_time,
            "expression": self.expression,
            "expressionType": self.expression_type,
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ConsumerFilterData:
        """Read a bean as fastjson does: unknown keys (such as `dead`) ignored, missing ones at Java defaults."""
        return cls(
            consumer_group=obj.get("consumerGroup"),
            topic=obj.get("topic"),
            expression=obj.get("expression"),
            expression_type=obj.get("expressionType"),
            born_time=int(obj.get("bornTime") or 0),
            dead_time=int(obj.get("deadTime") or 0),
            bloom_filter_data=BloomFilterData.from_json(obj.get("bloomFilterData")),
            client_version=int(obj.get("clientVersion") or 0),
        )


@dataclass
class TopicFilters:
    """`FilterDataMapByTopic`: the registrations of one topic by group."""

    topic: str | None
    groups: dict[str, ConsumerFilterData] = field(default_factory=dict)


def _bean(value: Any, what: str) -> Mapping | None:
    """A JSON object where the broker's bean (or map) stands; fastjson throws on anything else, and the broker's
    ConfigManager.load goes on to the `.bak` (a ValueError here, as for text that does not decode)."""
    if value is not None and not isinstance(value, Mapping):
        raise ValueError(f"{what} is not a JSON object")
    return value


class ConsumerFilterManager:
    """The broker's registry of SQL92 filters keyed by topic then group, with the Bloom filter it sizes.

    `filter_data_by_topic` is what CalcBitMap reads and `persist()` writes. Under 5.5.1's rules the per-group view
    that `get`, heartbeats, `unregister` and `clean` use can lack a record that map still holds (`_stale`: the old
    record a failed expression change leaves behind); `topic_exists` (5.5.1: the broker's topic table, None for
    every topic) and `calc_bitmap` (enableCalcFilterBitMap) matter only under those rules.
    """

    def __init__(self, max_error_rate: int = 20, expect_consumer_num: int = 32,
                 clean_time_span: int = MS_24_HOUR, clock: Callable[[], int] = now_ms,
                 compiler: Compiler | None = None, rules: RegistryRules | None = None,
                 topic_exists: Callable[[str], bool] | None = None, calc_bitmap: bool = True):
        self.bloom_filter = BloomFilter.create_by_fn(max_error_rate, expect_consumer_num)
        self.clean_time_span = clean_time_span
        self.clock = clock
        self.rules = rules or registry_rules()
        self.compiler = compiler or functools.partial(compile_filter, version=self.rules.version)
        self.topic_exists = topic_exists
        self.calc_filter_bitmap = calc_bitmap
        self.filter_data_by_topic: dict[str, TopicFilters] = {}
        self.compile_failures: dict[tuple[str, str], ConsumerFilterData] = {}
        self._stale: set[tuple[str | None, str]] = set()

    def _now(self, now: int | None) -> int:
        """The given time, else the clock."""
        return self.clock() if now is None else now

    def build(self, topic: str | None, group: str, expression: str | None, expression_type: str | None,
              client_version: int, now: int | None = None) -> ConsumerFilterData | None:
        """`ConsumerFilterManager.build`: None for TAG types; else a fresh record, compiled or with its error."""
        if is_tag_type(expression_type):
            return None
        data = ConsumerFilterData(group, topic, expression, expression_type, born_time=self._now(now),
                                  dead_time=0, client_version=client_version)
        try:
            data.compiled = self.compiler(expression_type, expression)
        except Exception as exc:  # the broker catches Throwable and logs it
            data.compile_error = exc
        return data

    def register(self, topic: str, group: str, expression: str | None, expression_type: str | None,
                 client_version: int, now: int | None = None) -> bool:
        """`register(topic, group, expr, type, version)`: the release's version and change rules; True if taken."""
        if is_tag_type(expression_type) or not expression:
            return False
        rules = self.rules
        if rules.requires_topic_config and self.topic_exists is not None and not self.topic_exists(topic):
            return False
        now = self._now(now)
        if rules.requires_topic_config:  # 5.5.1 adds the topic's map only once a record is taken
            topic_filters = self.filter_data_by_topic.get(topic) or TopicFilters(topic)
        else:
            topic_filters = self.filter_data_by_topic.setdefault(topic, TopicFilters(topic))
        bloom_data = (None if rules.bloom_only_with_calc_bitmap and not self.calc_filter_bitmap
                      else self.bloom_filter.generate(bloom_key(group, topic)))
        old = self.get(topic, group)
        if old is None:
            return self._put_new(topic_filters, group, expression, expression_type, bloom_data, client_version, now)
        if client_version <= old.client_version:
            if client_version == old.client_version and old.is_dead():
                old.dead_time = 0
                return True
            return False
        changed = (old.expression != expression or old.expression_type != expression_type
                   or old.bloom_filter_data != bloom_data)
        if changed:
            if not self._put_new(topic_filters, group, expression, expression_type, bloom_data, client_version, now):
                if rules.failed_change_keeps_stale_record:
                    self._stale.add((topic, group))
                else:
                    topic_filters.groups.pop(group, None)
                return False
            return True
        old.client_version = client_version
        if old.is_dead():
            old.dead_time = 0
        return True

    def _put_new(self, topic_filters: TopicFilters, group: str, expression: str, expression_type: str,
                 bloom_data: BloomFilterData | None, client_version: int, now: int) -> bool:
        """Build and store a record; a compile failure is kept aside in `compile_failures`, not registered."""
        data = self.build(topic_filters.topic, group, expression, expression_type, client_version, now)
        key = (topic_filters.topic, group)
        if data is None or data.compiled is None:
            if data is not None:
                data.bloom_filter_data = bloom_data
                self.compile_failures[key] = data
            return False
        data.bloom_filter_data = bloom_data
        topic_filters.groups[group] = data
        self.filter_data_by_topic.setdefault(topic_filters.topic, topic_filters)
        self._stale.discard(key)
        self.compile_failures.pop(key, None)
        return True

    def register_group(self, group: str, subscriptions: Iterable[tuple[str, str | None, str | None, int]],
                       now: int | None = None) -> None:
        """Heartbeat `register(group, subList)` of (topic, expression, type, subVersion); other topics die."""
        now = self._now(now)
        subscriptions = list(subscriptions)
        for topic, expression, expression_type, version in subscriptions:
            self.register(topic, group, expression, expression_type, version, now)
        topics = {s[0] for s in subscriptions}
        if self.rules.heartbeat_refreshes_dead_time:  # 5.5.1: the group's own records, dead ones die again now
            for data in self._group_view(group):
                if data.topic not in topics:
                    data.dead_time = now
            return
        for data in self.get_by_group(group):
            if data.topic not in topics and not data.is_dead():
                data.dead_time = now

    def unregister(self, group: str, now: int | None = None) -> None:
        """`unRegister(group)`: every live record of the group dies now."""
        now = self._now(now)
        for topic, topic_filters in self.filter_data_by_topic.items():
            data = topic_filters.groups.get(group)
            if data is not None and not data.is_dead() and (topic, group) not in self._stale:
                data.dead_time = now

    def get(self, topic: str | None, group: str) -> ConsumerFilterData | None:
        """`get(topic, group)`, dead or alive."""
        if (topic, group) in self._stale:
            return None
        topic_filters = self.filter_data_by_topic.get(topic)
        return None if topic_filters is None else topic_filters.groups.get(group)

    def _group_view(self, group: str) -> list[ConsumerFilterData]:
        """5.5.1's SubscriptionFilterHandler of a group: its records by topic, without stale ones."""
        return [tf.groups[group] for topic, tf in self.filter_data_by_topic.items()
                if group in tf.groups and (topic, group) not in self._stale]

    def get_topic(self, topic: str | None) -> list[ConsumerFilterData] | None:
        """`get(topic)`: the topic's records (dead ones included), None when there are none."""
        topic_filters = self.filter_data_by_topic.get(topic)
        if topic_filters is None or not topic_filters.groups:
            return None
        return list(topic_filters.groups.values())

    def get_by_group(self, group: str) -> list[ConsumerFilterData]:
        """Every record whose own consumerGroup is the group."""
        return [d for tf in self.filter_data_by_topic.values() for d in tf.groups.values()
                if d.consumer_group == group]

    def records(self) -> list[ConsumerFilterData]:
        """All registered records."""
        return [d for tf in self.filter_data_by_topic.values() for d in tf.groups.values()]

    def clean(self, now: int | None = None) -> None:
        """`clean()`: drop records dead for at least the clean time span, then topics left empty."""
        now = self._now(now)
        for topic in list(self.filter_data_by_topic):
            groups = self.filter_data_by_topic[topic].groups
            for group in list(groups):
                if (topic, group) not in self._stale and groups[group].how_long_after_death(now) >= \
                        self.clean_time_span:
                    del groups[group]
            if not groups:
                del self.filter_data_by_topic[topic]

    def calc_bitmap(self, topic: str, properties: Mapping[str, str] | None) -> bytes | None:
        """CommitLogDispatcherCalcBitMap for one record: None without filters, else the OR of matching keys."""
        records = self.get_topic(topic)
        if not records:
            return None
        bits = self.bloom_filter.new_bits()
        for data in records:
            if data.compiled is None or data.bloom_filter_data is None:
                continue
            try:
                matched = data.compiled.evaluate(properties or {}) is True
            except FilterError:
                matched = False
            if matched:
                try:
                    self.bloom_filter.hash_to(data.bloom_filter_data, bits)
                except (ValueError, IndexError):
                    return None
        return bytes(bits)

    def to_json(self) -> dict[str, Any]:
        """The fastjson bean of the manager (only `filterDataByTopic` is written)."""
        return {"filterDataByTopic": {
            topic: {"groupFilterData": {g: d.to_json() for g, d in tf.groups.items()}, "topic": tf.topic}
            for topic, tf in self.filter_data_by_topic.items()}}

    def encode(self, pretty: bool = True, now: int | None = None, dialect: str = fastjson.FASTJSON) -> str:
        """`encode(pretty)`: clean first, as the broker does on every persist, then the release's JSON dialect
        (`brokerversion.config_dialect`)."""
        self.clean(now)
        return fastjson.dumps(self.to_json(), pretty, dialect)

    def decode(self, text: str, now: int | None = None) -> bool:
        """`decode`: recompile, mark live records dead (now − 30 s, not before bornTime); False if bloom changed.

        When any record's bloom data is not valid for this manager's filter (another f, n), nothing is taken and
        the current registrations stay, as the broker does (it only logs).
        """
        root = _bean(fastjson.loads(text), "the file")
        by_topic = None if root is None else _bean(root.get("filterDataByTopic"), "filterDataByTopic")
        if by_topic is None:
            return True
        now = self._now(now)
        loaded: dict[str, TopicFilters] = {}
        for topic, obj in by_topic.items():
            if _bean(obj, f"topic {topic!r}") is None:
                continue
            groups_obj = _bean(obj.get("groupFilterData", {}), f"groupFilterData of topic {topic!r}")
            if groups_obj is None:
                raise ValueError(f"groupFilterData of topic {topic!r} is null")
            topic_filters = TopicFilters(obj.get("topic"))
            for group, data_obj in groups_obj.items():
                if _bean(data_obj, f"group {group!r} of topic {topic!r}") is None:
                    continue
                data = ConsumerFilterData.from_json(data_obj)
                try:
                    data.compiled = self.compiler(data.expression_type, data.expression)
                except Exception as exc:  # logged and kept without a compiled expression
                    data.compile_error = exc
                if not self.bloom_filter.is_valid(data.bloom_filter_data):
                    return False
                if data.dead_time == 0:
                    dead_time = now - LOAD_DEAD_BACKDATE_MS
                    data.dead_time = data.born_time if dead_time <= data.born_time else dead_time
                topic_filters.groups[group] = data
            loaded[topic] = topic_filters
        self.filter_data_by_topic = loaded
        self._stale.clear()
        return True

    def load(self, path: str | Path, now: int | None = None) -> bool:
        """`ConfigManager.load`: the file, or its `.bak` when the file is missing, empty or does not decode."""
        from filterlib.store.storedir import config_file_texts

        for text, p in config_file_texts(str(path)):
            try:
                self.decode(text, now)
                return True
            except ValueError:
                if p.endswith(".bak"):  # loadBak() answers false only when the backup itself fails to decode
                    return False
        return True

    def persist(self, path: str | Path, now: int | None = None, dialect: str = fastjson.FASTJSON) -> None:
        """`persist()`: clean, then write the pretty text in the release's dialect (the old file moved to `.bak`)."""
        path = Path(path)
        data = java_utf8_encode(self.encode(True, now, dialect))
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.replace(Path(str(path) + ".bak"))
        path.write_bytes(data)
