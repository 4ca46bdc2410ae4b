"""The SQL92 filter registry job 1 dispatches with (and job 2 replays rebuilt queues with): the dump's
consumerFilter.json as the broker loads it, and one row per registration for the consumer_filters table.

The subscriptions file's registered SQL92 subscriptions count as registered (bornTime 0) only when the dump holds no
readable registry (consumerFilter.json or its .bak). When it holds one, a filter it does not hold never reached the
broker (heartbeat-only, or its filter data never arrived) or was removed before the dump (unregister and `clean`):
CalcBitMap set no bit of it that the rule could place, so it contributes none, and `--verify` explains the bits the
broker set for removed filters (`dispatch.explain_bitmap`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from filterlib.brokerversion import RegistryRules
from filterlib.registry import ConsumerFilterData, ConsumerFilterManager
from filterlib.store import fastjson
from filterlib.store.storedir import StoreDir
from filterlib.subscriptions import REGISTERED, Subscription, register_missing

DUMP = "consumerFilter.json"
SUBSCRIPTIONS = "subscriptions"


@dataclass
class RegistryLoad:
    """The registry, the consumer_filters rows, the subscriptions registered from the file (and those the rule left
    out), the dump's registry file read (None: the dump has none), and any issues."""

    registry: ConsumerFilterManager
    rows: list[dict] = field(default_factory=list)
    added: list[Subscription] = field(default_factory=list)
    left_out: list[Subscription] = field(default_factory=list)
    dump_registry: str | None = None
    issues: list[str] = field(default_factory=list)

    def rule_line(self) -> str:
        """Which filters count, in one sentence (job 1's summary)."""
        if self.dump_registry is not None:
            out = (f"SQL92 filters for the bitmaps: the dump's registry ({self.dump_registry}); a filter it does not "
                   f"hold sets no bits")
            if self.left_out:
                out += (" (not held, from the subscriptions file: "
                        + ", ".join(f"({s.group}, {s.topic})" for s in self.left_out) + ")")
            return out
        out = "SQL92 filters for the bitmaps: the dump has no readable consumerFilter.json, so the subscriptions file's"
        if not self.added:
            return out + " registered SQL92 subscriptions count as registered (none)"
        return (out + " registered SQL92 subscriptions count as registered with bornTime 0 (live for every message): "
                + ", ".join(f"({s.group}, {s.topic})" for s in self.added))

    @property
    def failed(self) -> list[dict]:
        """Rows of registrations whose selector did not compile."""
        return [r for r in self.rows if not r["compiled"]]


def _row(d: ConsumerFilterData, source: str, registered: bool, file_dead_time: int | None = None) -> dict:
    bloom = d.bloom_filter_data
    dead_time = d.dead_time if file_dead_time is None else file_dead_time
    return {"consumer_group": d.consumer_group, "topic": d.topic, "expression": d.expression,
            "expression_type": d.expression_type, "client_version": d.client_version, "born_time": d.born_time,
            "dead_time": dead_time, "dead": dead_time >= d.born_time, "source": source,
            "registered": registered, "compiled": d.compiled is not None,
            "compile_error": None if d.compile_error is None else str(d.compile_error).splitlines()[0],
            "bloom_bit_pos": None if bloom is None or bloom.bit_pos is None else list(bloom.bit_pos),
            "bloom_bit_num": None if bloom is None else bloom.bit_num}


def load_registry(store: StoreDir, max_error_rate: int, expect_consumer_num: int,
                  subscriptions: Sequence[Subscription] = (), rules: RegistryRules | None = None,
                  topic_exists: Callable[[str], bool] | None = None, calc_bitmap: bool = True) -> RegistryLoad:
    """Load the dump's registry under the broker's bloom settings; without one, register the file's registered SQL92
    subscriptions (bornTime 0); with one, list those it does not hold as left out.

    As the broker's load: a file whose bloom data does not fit (another f or n) leaves the registry empty (the
    issue says so); records that do not compile stay, uncompiled. Rows carry the file's own deadTime (the load
    marks every live record dead; dead records still filter).
    """
    out = RegistryLoad(ConsumerFilterManager(max_error_rate, expect_consumer_num, rules=rules,
                                             topic_exists=topic_exists, calc_bitmap=calc_bitmap))
    file_dead: dict[tuple[str, str], int] = {}
    for text, path in store.config_texts(DUMP.removesuffix(".json")):
        try:
            raw = fastjson.loads(text) or {}
            fits = out.registry.decode(text)
        except ValueError as e:
            out.issues.append(f"{path}: unreadable ({e}); the broker goes on to its backup, else starts with no "
                              f"filters")
            continue
        out.dump_registry = path
        no_bloom = 0
        for topic_obj in (raw.get("filterDataByTopic") or {}).values():
            for group, obj in ((topic_obj or {}).get("groupFilterData") or {}).items():
                if obj is not None:
                    file_dead[(obj.get("topic"), group)] = int(obj.get("deadTime") or 0)
                    no_bloom += obj.get("bloomFilterData") is None
        if not fits and no_bloom:
            out.issues.append(f"{path}: {no_bloom} records without bloom data (a 5.5.1 broker stores none while "
                              f"enableCalcFilterBitMap is off); the broker's load discards the whole registry, "
                              f"so no SQL92 filter of it survives a restart, and the replay loads none")
        elif not fits:
            out.issues.append(f"{path}: its bloom data does not fit maxErrorRateOfBloomFilter={max_error_rate}, "
                              f"expectConsumerNumUseFilter={expect_consumer_num}; the broker would load no "
                              f"filter, and neither does the rebuild")
        break
    for d in out.registry.records():
        out.rows.append(_row(d, DUMP, True, file_dead.get((d.topic, d.consumer_group))))
    if out.dump_registry is not None:
        out.left_out = [s for s in subscriptions if s.path == REGISTERED and not s.is_tag
                        and out.registry.get(s.topic, s.group) is None]
    else:
        out.added = register_missing(out.registry, subscriptions)
    for s in out.added:
        out.rows.append(_row(out.registry.get(s.topic, s.group), SUBSCRIPTIONS, True))
    for d in out.registry.compile_failures.values():
        out.rows.append(_row(d, SUBSCRIPTIONS, False))
    return out
