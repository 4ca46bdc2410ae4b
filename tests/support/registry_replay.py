"""A harness run's registrations replayed on filterlib's ConsumerFilterManager, SQL answered by the real SqlFilter."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterable

from refharness import eval_cases

from filterlib.brokerversion import registry_rules
from filterlib.errors import FilterError, FilterEvaluationError, FilterSyntaxError
from filterlib.registry import ConsumerFilterData, ConsumerFilterManager, compile_filter


def oracle_compiler(table: dict) -> Callable[[str | None, str | None], object]:
    """A compiler answering from the real SqlFilter: table[expr] = (compile error or None, {props_key: result})."""

    class OracleExpression:
        def __init__(self, expr):
            self.expr = expr

        def evaluate(self, props):
            result = table[self.expr][1][props_key(props)]
            if "error" in result:
                raise FilterEvaluationError(result.get("message") or "", result["error"])
            return decode_value(result)

    def compile_(expression_type, expression):
        if expression_type != "SQL92" or expression is None:
            raise FilterError(f"no SPI for {expression_type}")
        error, _ = table[expression]
        if error is not None:
            raise FilterSyntaxError(error, expression)
        return OracleExpression(expression)

    return compile_


def props_key(props: dict | None) -> str:
    """A property map as a key of the oracle's table."""
    return json.dumps(sorted((props or {}).items()))


def decode_value(result: dict) -> object:
    """The Python value of one harness eval result."""
    kind, value = result["type"], result.get("value")
    if kind == "null":
        return None
    if kind == "Boolean":
        return value
    if kind in ("Long", "Integer"):
        return int(value)
    if kind in ("Double", "Float"):
        return float(value)
    return value


def sql_table(expressions: Iterable[str], property_maps: Iterable[dict]) -> dict:
    """Evaluate every expression on every property map with the real classes."""
    maps = {props_key(p): p for p in property_maps}
    keys = list(maps)
    exprs = sorted(set(expressions))
    results = eval_cases([{"kind": "sql", "expr": e, "props": [maps[k] for k in keys]} for e in exprs])
    table = {}
    for expr, res in zip(exprs, results, strict=True):
        if res.get("compile") != "ok":
            table[expr] = (json.dumps(res.get("compile")), {})
        else:
            table[expr] = (None, dict(zip(keys, res["evals"], strict=True)))
    return table


def run_sql_table(run: dict) -> dict:
    """The oracle table of every expression the run registers or subscribes, on every message it stored."""
    exprs = [e["expression"] for e in run["scenario"]["events"] if e["kind"] == "register"]
    exprs += [s["expression"] for e in run["scenario"]["events"] if e["kind"] == "heartbeat"
              for s in e["subscriptions"]]
    exprs += [s["expression"] for s in run["scenario"].get("subscriptions", [])]
    return sql_table(exprs, [r["properties"] or {} for r in run["listing"]["records"]])


def replay_registrations(run: dict, table: dict, check: list | None = None,
                         compiler: Callable | None = None,
                         on_message: Callable[[ConsumerFilterManager, dict], None] | None = None
                         ) -> tuple[ConsumerFilterManager, list]:
    """Replay the scenario's events on a Python manager; return it and the bitmap comparisons per message.

    `on_message(manager, record)` is called at each message event with the registry as the broker had it then.

    New records take the broker's bornTime only when the broker really built one; otherwise a time the broker
    never used, so a wrongly rebuilt record shows up as a bornTime mismatch.
    """
    bloom = run["report"]["bloom"]
    topics = {t["name"] for t in run["scenario"].get("topics", [])}   # the broker's topic table, as it grows
    m = ConsumerFilterManager(bloom["f"], bloom["n"], compiler=compiler or oracle_compiler(table),
                              rules=registry_rules(run["report"]["rocketmqVersion"]), topic_exists=topics.__contains__,
                              calc_bitmap=run["report"]["broker"]["enableCalcFilterBitMap"])
    rows: dict[int, list[dict]] = {}
    for r in run["report"]["registrations"]:
        rows.setdefault(r["eventIndex"], []).append(r)
    by_id = {r["scenarioId"]: r for r in run["listing"]["records"] if r.get("scenarioId")}
    bitmaps = []
    for index, event in enumerate(run["scenario"]["events"]):
        if event["kind"] == "register":
            (row,) = rows[index]
            old = m.get(event["topic"], event["group"])
            born = row.get("bornTime")
            now = born if born is not None and (old is None or born != old.born_time) else -7
            result = m.register(event["topic"], event["group"], event["expression"], event.get("type", "SQL92"),
                                event.get("clientVersion", 1), now=now)
            if check is not None:
                check.append((index, "result", result, row["result"]))
                mine = m.get(event["topic"], event["group"])
                theirs = row["filterData"]
                check.append((index, "state", None if mine is None else summary(mine),
                              None if theirs is None else summary_json(theirs)))
        elif event["kind"] == "unregister":
            dead_times = rows.get(index, [])
            m.unregister(event["group"], now=dead_times[0]["deadTime"] if dead_times else 0)
        elif event["kind"] == "heartbeat":
            # register(group, subList) reads the clock once per new record and once per killed one: every time it
            # sets lies in [nowBefore, nowAfter]. Replay at nowBefore, compare with times in that window taken as
            # "now", then adopt the broker's exact times so later bitmaps compare exactly.
            (row,) = rows[index]
            subs = [(s["topic"], s["expression"], s.get("type", "SQL92"), s.get("subVersion", 1))
                    for s in event["subscriptions"]]
            m.register_group(event["group"], subs, now=row["nowBefore"])
            window = (row["nowBefore"], row["nowAfter"])
            if check is not None:
                check.append((index, "heartbeat", state(m, window), state_json(row["filters"], window)))
            for f in row["filters"]:
                d = m.get(f["topic"], f["group"])
                if d is not None:
                    d.born_time, d.dead_time = f["bornTime"], f["deadTime"]
        elif event["kind"] == "clean":
            # clean() reads the clock once per record, somewhere in [nowBefore, nowAfter]: the broker's result
            # must be ours at one of the two bounds (they differ only if a record's age crossed the span inside
            # the call). The span is BrokerConfig.filterDataCleanTimeSpan, set for this event only.
            (row,) = rows[index]
            theirs = (row["topics"], state_json(row["filters"]))
            outcomes = []
            for now in (row["nowBefore"], row["nowAfter"]):
                trial = copy.deepcopy(m)
                trial.clean_time_span = event["spanMs"]
                trial.clean(now=now)
                outcomes.append((trial, (sorted(trial.filter_data_by_topic), state(trial))))
            trial, mine = next(((t, o) for t, o in outcomes if o == theirs), outcomes[0])
            if check is not None:
                check.append((index, "clean", mine, theirs))
            trial.clean_time_span = m.clean_time_span
            m = trial
        elif event["kind"] == "message":
            record = by_id[event["id"]]
            topics.add(record["topic"])
            if on_message is not None:
                on_message(m, record)
            ext = (record.get("cq") or {}).get("ext")
            mine = m.calc_bitmap(record["topic"], record["properties"] or {})
            bitmaps.append((event["id"], None if mine is None else mine.hex(), ext and ext["bitmapHex"]))
    return m, bitmaps


def _at(t: int, window: tuple[int, int] | None):
    """A time as compared: "now" when it lies in the window of one call, else itself."""
    return "now" if window is not None and window[0] <= t <= window[1] else t


def state(m: ConsumerFilterManager, window: tuple[int, int] | None = None) -> list[tuple]:
    """Every record as (topic, group, summary), times inside `window` shown as "now"."""
    rows = []
    for d in m.records():
        s = summary(d)
        rows.append((d.topic, d.consumer_group, *s[:3], _at(s[3], window), _at(s[4], window), *s[5:]))
    return sorted(rows, key=repr)


def state_json(filters: list[dict], window: tuple[int, int] | None = None) -> list[tuple]:
    """The same rows from the harness's FILTER objects."""
    rows = []
    for f in filters:
        s = summary_json(f)
        rows.append((f["topic"], f["group"], *s[:3], _at(s[3], window), _at(s[4], window), *s[5:]))
    return sorted(rows, key=repr)


def summary(d: ConsumerFilterData) -> tuple:
    """The fields of a record the comparisons look at."""
    bloom = d.bloom_filter_data
    return (d.expression, d.expression_type, d.client_version, d.born_time, d.dead_time, d.is_dead(),
            d.compiled is not None, None if bloom is None else bloom.bit_pos, None if bloom is None else bloom.bit_num)


def summary_json(d: dict) -> tuple:
    """summary() of the harness's FILTER object."""
    bloom = d["bloom"]
    return (d["expression"], d["type"], d["clientVersion"], d["bornTime"], d["deadTime"], d["dead"],
            d["compiled"], None if bloom is None else tuple(bloom["bitPos"]),
            None if bloom is None else bloom["bitNum"])


def load_registry(store: str, broker: dict) -> ConsumerFilterManager:
    """The dump's final registry as job 1 loads it: consumerFilter.json under the broker's bloom settings."""
    reg = ConsumerFilterManager(broker["maxErrorRateOfBloomFilter"], broker["expectConsumerNumUseFilter"])
    assert reg.load(os.path.join(store, "config", "consumerFilter.json"))
    return reg


def hidden_at_dispatch(run: dict, reg: ConsumerFilterManager) -> dict[int, tuple[set[tuple[str, str]], set[int]]]:
    """Per commit log offset: the (group, topic) records the broker held at dispatch that the rule cannot see in
    the final registry (gone since, or now born at or after the message), and the bits the matching ones set."""
    out: dict[int, tuple[set[tuple[str, str]], set[int]]] = {}

    def on_message(manager: ConsumerFilterManager, record: dict) -> None:
        hidden: set[tuple[str, str]] = set()
        bits: set[int] = set()
        for d in manager.get_topic(record["topic"]) or []:
            final = reg.get(d.topic, d.consumer_group)
            if final is None or final.born_time >= record["storeTimestamp"]:
                hidden.add((d.consumer_group, d.topic))
                if d.compiled is not None and d.compiled.matches(record["properties"] or {}):
                    bits |= set(d.bloom_filter_data.bit_pos)
        out[record["physicalOffset"]] = (hidden, bits)

    # Records written by an end-transaction event (commit, store-mode rollback) are dispatched there: replay
    # them as message events at that place so the registry of that moment is seen.
    listed = {r["scenarioId"] for r in run["listing"]["records"]}
    events = []
    moved = {}
    for i, e in enumerate(run["scenario"]["events"]):
        moved[i] = len(events)
        events.append(e)
        for suffix in ("commit", "rollback"):
            if e["kind"] == suffix and f"{e['ref']}:{suffix}" in listed:
                events.append({"kind": "message", "id": f"{e['ref']}:{suffix}"})
    rows = [{**r, "eventIndex": moved[r["eventIndex"]]} for r in run["report"]["registrations"]]
    replay_registrations({**run, "scenario": {**run["scenario"], "events": events},
                          "report": {**run["report"], "registrations": rows}},
                         {}, compiler=compile_filter, on_message=on_message)
    return out
