"""filterlib.registry: the ConsumerFilterManager rules and config/consumerFilter.json.

Unit expectations follow rocketmq-facts.md §8.1-§8.4 and §10.2 (and ConsumerFilterManager in the 5.3.3 source);
the reference tests replay a real store run (harness store mode): registration results, bornTimes and bloom data
from its report, every ext bitmap the real CommitLogDispatcherCalcBitMap wrote, and the real consumerFilter.json.
SQL values in the reference tests come from the harness's eval mode (the real SqlFilter), so they do not depend on
filterlib.sql92.
"""

from __future__ import annotations

import copy
import json
import random

import pytest
from refharness import DEFAULT_VERSION, VERSIONS, eval_cases, write_store
from scenarios import heartbeat_clean_scenario, varied_scenario

from filterlib.bloom import BloomFilter
from filterlib.brokerversion import config_dialect, registry_rules
from filterlib.errors import FilterError, FilterEvaluationError, FilterSyntaxError
from filterlib.registry import ConsumerFilterData, ConsumerFilterManager, bloom_key
from filterlib.store import fastjson, releasemarks
from filterlib.store.storedir import StoreDir


class FakeExpression:
    """A compiled expression whose value is `props.get(name) == value`."""

    def __init__(self, text: str):
        self.text = text

    def evaluate(self, props):
        name, _, value = self.text.partition("=")
        return props.get(name) == value


def fake_compiler(expression_type, expression):
    """Compiles `name=value` for type SQL92; anything containing BAD fails like a syntax error."""
    if expression_type != "SQL92":
        raise FilterError(f"no SPI for {expression_type}")
    if "BAD" in expression:
        raise FilterSyntaxError("Invalid MessageSelector. ", expression)
    return FakeExpression(expression)


def manager(**kwargs) -> ConsumerFilterManager:
    return ConsumerFilterManager(compiler=fake_compiler, clock=lambda: 10**12, **kwargs)


def test_bloom_sizes_and_key():
    m = manager()
    assert (m.bloom_filter.m, m.bloom_filter.k) == (112, 3)
    assert bloom_key("G", "T") == "G#T"
    m.register("T", "G", "a=1", "SQL92", 1, now=100)
    assert m.get("T", "G").bloom_filter_data == BloomFilter(20, 32).generate("G#T")


def test_tag_and_empty_registrations_are_refused():
    m = manager()
    assert not m.register("T", "G", "TagA", "TAG", 1)
    assert not m.register("T", "G", "TagA", "", 1)
    assert not m.register("T", "G", "TagA", None, 1)
    assert not m.register("T", "G", "", "SQL92", 1)
    assert m.get("T", "G") is None and m.get_topic("T") is None


def test_new_registration_fields():
    m = manager()
    assert m.register("T", "G", "a=1", "SQL92", 7, now=500)
    d = m.get("T", "G")
    assert (d.consumer_group, d.topic, d.expression, d.expression_type) == ("G", "T", "a=1", "SQL92")
    assert (d.born_time, d.dead_time, d.client_version, d.is_dead()) == (500, 0, 7, False)
    assert d.compiled is not None and d.compile_error is None


def test_version_rules():
    m = manager()
    m.register("T", "G", "a=1", "SQL92", 5, now=100)
    assert not m.register("T", "G", "a=2", "SQL92", 4, now=200)
    assert not m.register("T", "G", "a=2", "SQL92", 5, now=200)
    assert m.get("T", "G").expression == "a=1"
    m.unregister("G", now=300)
    assert m.get("T", "G").is_dead()
    assert m.register("T", "G", "a=9", "SQL92", 5, now=400)
    d = m.get("T", "G")
    assert (d.expression, d.dead_time, d.born_time) == ("a=1", 0, 100)
    assert m.register("T", "G", "a=1", "SQL92", 6, now=500)
    assert (m.get("T", "G").client_version, m.get("T", "G").born_time) == (6, 100)
    assert m.register("T", "G", "a=2", "SQL92", 7, now=600)
    d = m.get("T", "G")
    assert (d.expression, d.born_time, d.client_version) == ("a=2", 600, 7)


def test_newer_version_same_expression_revives_dead_record():
    m = manager()
    m.register("T", "G", "a=1", "SQL92", 1, now=100)
    m.unregister("G", now=200)
    assert m.register("T", "G", "a=1", "SQL92", 2, now=300)
    assert (m.get("T", "G").dead_time, m.get("T", "G").born_time) == (0, 100)


def test_compile_failures_are_recorded_and_do_not_stop_others():
    m = manager()
    assert not m.register("T", "G1", "BAD", "SQL92", 1, now=100)
    assert m.register("T", "G2", "a=1", "SQL92", 1, now=100)
    assert not m.register("T", "G3", "a=1", "sql92", 1, now=100)
    assert m.get("T", "G1") is None and m.get("T", "G3") is None
    assert isinstance(m.compile_failures[("T", "G1")].compile_error, FilterSyntaxError)
    assert isinstance(m.compile_failures[("T", "G3")].compile_error, FilterError)
    assert m.register("T", "G1", "a=2", "SQL92", 2, now=200)
    assert ("T", "G1") not in m.compile_failures


def test_changed_expression_that_fails_removes_old_record():
    m = manager()
    m.register("T", "G", "a=1", "SQL92", 1, now=100)
    assert not m.register("T", "G", "BAD", "SQL92", 2, now=200)
    assert m.get("T", "G") is None
    assert m.compile_failures[("T", "G")].expression == "BAD"


def test_group_heartbeat_kills_missing_topics_and_unregister():
    m = manager()
    m.register("T1", "G", "a=1", "SQL92", 1, now=100)
    m.register("T2", "G", "a=1", "SQL92", 1, now=100)
    m.register_group("G", [("T1", "a=1", "SQL92", 1)], now=250)
    assert not m.get("T1", "G").is_dead()
    assert m.get("T2", "G").dead_time == 250
    m.unregister("G", now=300)
    assert m.get("T1", "G").dead_time == 300 and m.get("T2", "G").dead_time == 250


def test_dead_and_live_rules():
    assert ConsumerFilterData("G", "T", "e", "SQL92", born_time=0, dead_time=0).is_dead()
    d = ConsumerFilterData("G", "T", "e", "SQL92", born_time=100, dead_time=0)
    assert not d.is_dead() and d.how_long_after_death(1000) == -1
    assert not d.is_msg_in_live(100) and d.is_msg_in_live(101)
    d.dead_time = 100
    assert d.is_dead() and d.how_long_after_death(1000) == 900


def test_clean_removes_long_dead_and_empty_topics():
    m = manager(clean_time_span=1000)
    m.register("T1", "G1", "a=1", "SQL92", 1, now=100)
    m.register("T1", "G2", "a=1", "SQL92", 1, now=100)
    m.register("T2", "G1", "a=1", "SQL92", 1, now=100)
    m.unregister("G1", now=200)
    m.clean(now=1199)
    assert m.get("T1", "G1") is not None
    m.clean(now=1200)
    assert m.get("T1", "G1") is None and m.get("T1", "G2") is not None
    assert "T2" not in m.filter_data_by_topic


def test_calc_bitmap_uses_dead_records_and_skips_uncompiled():
    m = manager()
    assert m.calc_bitmap("T", {"a": "1"}) is None
    m.register("T", "G1", "a=1", "SQL92", 1, now=100)
    m.register("T", "G2", "b=2", "SQL92", 1, now=100)
    m.unregister("G1", now=200)
    bf = m.bloom_filter
    assert m.calc_bitmap("T", {"a": "1"}) == bf.bitmap_of([m.get("T", "G1").bloom_filter_data])
    assert m.calc_bitmap("T", {}) == bytes(14)
    m.get("T", "G2").compiled = None
    assert m.calc_bitmap("T", {"b": "2"}) == bytes(14)


def test_decode_marks_live_dead_and_keeps_compile_errors():
    src = manager()
    src.register("T", "G1", "a=1", "SQL92", 1, now=10_000)
    src.register("T", "G2", "a=2", "SQL92", 1, now=50_000)
    src.register("T", "G3", "a=3", "SQL92", 1, now=1_000)
    src.unregister("G3", now=2_000)
    src.get("T", "G2").expression = "BAD"
    text = src.encode(now=60_000)
    dst = manager()
    assert dst.decode(text, now=70_000)
    assert dst.get("T", "G1").dead_time == 40_000
    assert dst.get("T", "G2").dead_time == 50_000
    assert dst.get("T", "G3").dead_time == 2_000
    assert dst.get("T", "G2").compiled is None and isinstance(dst.get("T", "G2").compile_error, FilterSyntaxError)


def test_decode_with_other_bloom_parameters_drops_everything():
    src = manager()
    src.register("T", "G1", "a=1", "SQL92", 1, now=100)
    other = manager(max_error_rate=20, expect_consumer_num=64)
    other.register("X", "G", "a=1", "SQL92", 1, now=100)
    assert not other.decode(src.encode(now=200), now=300)
    assert other.get("T", "G1") is None and other.get("X", "G") is not None


def test_decode_without_bloom_data_drops_everything():
    text = '{"filterDataByTopic":{"T":{"groupFilterData":{"G":{"bornTime":1,"expression":"a=1",' \
           '"expressionType":"SQL92","topic":"T","consumerGroup":"G"}},"topic":"T"}}}'
    m = manager()
    assert not m.decode(text, now=10)
    assert m.records() == []


def test_load_falls_back_to_bak(tmp_path):
    src = manager()
    src.register("T", "G", "a=1", "SQL92", 1, now=100)
    path = tmp_path / "config" / "consumerFilter.json"
    src.persist(path, now=200)
    src.persist(path, now=200)
    assert path.with_name("consumerFilter.json.bak").exists()
    path.write_text("{not json")
    m = manager()
    assert m.load(path, now=300)
    assert m.get("T", "G").born_time == 100
    path.write_text("")
    assert manager().load(path, now=300)


def test_fastjson_dialect():
    # consumerOffset.json exactly as the real 5.3.3 broker wrote it (harness store 0f28ee57...):
    # an Integer-key map gets no line break before its keys, only before its closing brace.
    broker = ('{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":1795294586121\n\t},'
              '\n\t"groupTopicMap":{\n\t\t"G1":["TopicA"]\n\t},'
              '\n\t"offsetTable":{\n\t\t"TopicA@G1":{0:1\n\t\t}\n\t}\n}')
    assert fastjson.loads(broker) == {
        "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 1795294586121},
        "groupTopicMap": {"G1": ["TopicA"]}, "offsetTable": {"TopicA@G1": {0: 1}}}
    assert fastjson.dumps(fastjson.loads(broker)) == broker
    assert fastjson.loads('{\n\t"offsetTable":{\n\t\t"T@G":{0:12,1:40,-1:3}\n\t}\n}') == \
        {"offsetTable": {"T@G": {0: 12, 1: 40, -1: 3}}}
    assert fastjson.loads('{"a":"x 1: y","b":[1,2]}') == {"a": "x 1: y", "b": [1, 2]}
    # Expected text printed by fastjson-1.2.83.jar's JSON.toJSONString(map, true) for the same Java
    # values (LinkedHashMap; "b" a LinkedHashSet, "t" an int[]): the null entry still counts for the
    # closing line break, and a String key after an Integer key starts a new line again.
    assert fastjson.dumps({"a": {0: 1, 1: None}, "b": [1, 2], "c": "q\"\\\t\x01\x7f\u2028é",
                           "d": {"s": 1, 3: 4, "t": [5]}}) == \
        ('{\n\t"a":{0:1\n\t},\n\t"b":[1,2],\n\t"c":"q\\"\\\\\\t\\u0001\\u007F\\u2028é",'
         '\n\t"d":{\n\t\t"s":1,3:4,\n\t\t"t":[5]\n\t}\n}')
    assert fastjson.dumps({"k": {0: None}}) == '{\n\t"k":{\n\t}\n}'
    assert fastjson.dumps({"k": {}}) == '{\n\t"k":{}\n}'


def oracle_compiler(table: dict):
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


def props_key(props) -> str:
    return json.dumps(sorted((props or {}).items()))


def decode_value(result: dict):
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


def sql_table(expressions, property_maps) -> dict:
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


def _message(rng: random.Random, topic: str, index: int) -> dict:
    props = {}
    if rng.random() < 0.8:
        props["a"] = rng.choice(["0", "1", "2", "3", "4", "5", "6", "7", "50", "150", "abc", "5.5", "-1"])
    if rng.random() < 0.5:
        props["b"] = rng.choice(["x", "y", "X"])
    if rng.random() < 0.3:
        props["c"] = "c"
    if rng.random() < 0.3:
        props["d"] = "d"
    return {"kind": "message", "id": f"{topic}-{index}", "topic": topic, "queueId": rng.randrange(2),
            "tags": rng.choice(["TagA", "TagB", "Aa", "BB", None, "*"]), "props": props}


def scenario(filter_support_retry: bool = False) -> dict:
    """A seeded store scenario touching every registration rule and every filter branch."""
    rng = random.Random(4242)
    counter = iter(range(10**6))

    def msgs(topic, count):
        return [_message(rng, topic, next(counter)) for _ in range(count)]

    def reg(group, topic, expression, version, kind="SQL92"):
        return {"kind": "register", "group": group, "topic": topic, "expression": expression, "type": kind,
                "clientVersion": version}

    events = msgs("T1", 3)
    events += [reg("G1", "T1", "a > 5", 1), reg("G2", "T1", "b = 'x' OR c IS NULL", 1),
               reg("G3", "T1", "TagA", 1, "TAG"), reg("G4", "T1", "a >> 5", 1), reg("G5", "T1", "a < 3", 1),
               reg("G6", "T1", "a BETWEEN 1 AND 100", 1), reg("G11", "T1", "a > 1", 1, "sql92")]
    events += msgs("T1", 25)
    events += [reg("G5", "T1", "a < 3", 1), reg("G5", "T1", "a < 9", 0), reg("G5", "T1", "a < 4", 2),
               {"kind": "unregister", "group": "G6"}]
    events += msgs("T1", 20)
    events += [reg("G6", "T1", "a BETWEEN 1 AND 100", 1), reg("G1", "T1", "a > 5", 3), reg("G2", "T1", "b = ", 2),
               reg("G7", "T2", "a > 0", 1)]
    events += msgs("T1", 15) + msgs("T2", 15)
    events += [reg("G1", "T2", "d IS NOT NULL", 1), reg("G7", "T2", "a > 0 AND b = 'x'", 5)]
    events += msgs("T2", 15) + msgs("T1", 5)
    events += [reg(f"H{i}", "T3", f"x > {i}", 1) for i in range(40)]
    events += [{"kind": "message", "id": f"x{i}", "topic": "T3", "queueId": 0, "tags": None,
                "props": {"x": str(rng.randrange(0, 41))}} for i in range(60)]
    retry_props = [{"a": str(v)} for v in (1, 7, 9, 200)] + [{}]
    events += [{"kind": "message", "id": f"r{i}", "topic": "ignored", "tags": "TagA", "props": p,
                "retry": {"group": "G1", "originalTopic": "T1", "delayLevel": 3}}
               for i, p in enumerate(retry_props)]

    def sub(group, topic, expression, kind="SQL92", path="registered", version=None):
        s = {"group": group, "topic": topic, "type": kind, "expression": expression, "path": path}
        if version is not None:
            s["subVersion"] = version
        return s

    subscriptions = [sub("G1", "T1", "a > 5", version=3), sub("G2", "T1", "b = 'x' OR c IS NULL", version=1),
                     sub("G5", "T1", "a < 4", version=2), sub("G6", "T1", "a BETWEEN 1 AND 100", version=1),
                     sub("G7", "T2", "a > 0 AND b = 'x'", version=5), sub("G1", "T2", "d IS NOT NULL", version=1),
                     sub("G3", "T1", "Aa || TagB", "TAG"), sub("G8", "T1", " * ", "TAG"), sub("G9", "T1", "*", "TAG"),
                     sub("G10", "T1", "a > 5", path="posted", version=1),
                     sub("G12", "T1", "a >> 5", path="posted", version=1),
                     sub("G1", "%RETRY%G1", "*", "TAG"), sub("G1", "%RETRY%G1", "a < 100", path="posted", version=1)]
    subscriptions += [sub(f"H{i}", "T3", f"x > {i}", version=1) for i in range(40)]
    return {"broker": {"filterSupportRetry": filter_support_retry}, "events": events,
            "subscriptions": subscriptions}


def store_run(filter_support_retry: bool = False, version: str = DEFAULT_VERSION) -> dict:
    """Run the scenario through one release's real broker; return its report, listing, pull output and store dir."""
    out = write_store(scenario(filter_support_retry), version)
    pull_path = out / "pull.json"
    return {"out": out, "report": json.loads((out / "report.json").read_text()),
            "listing": json.loads((out / "listing.json").read_text()),
            "pull": json.loads(pull_path.read_text()) if pull_path.exists() else None,
            "scenario": scenario(filter_support_retry)}


def run_sql_table(run: dict) -> dict:
    exprs = [e["expression"] for e in run["scenario"]["events"] if e["kind"] == "register"]
    exprs += [s["expression"] for e in run["scenario"]["events"] if e["kind"] == "heartbeat"
              for s in e["subscriptions"]]
    exprs += [s["expression"] for s in run["scenario"].get("subscriptions", [])]
    return sql_table(exprs, [r["properties"] or {} for r in run["listing"]["records"]])


def replay_registrations(run: dict, table: dict, check: list | None = None,
                         compiler=None, on_message=None) -> tuple[ConsumerFilterManager, list]:
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
    bloom = d.bloom_filter_data
    return (d.expression, d.expression_type, d.client_version, d.born_time, d.dead_time, d.is_dead(),
            d.compiled is not None, None if bloom is None else bloom.bit_pos, None if bloom is None else bloom.bit_num)


def summary_json(d: dict) -> tuple:
    bloom = d["bloom"]
    return (d["expression"], d["type"], d["clientVersion"], d["bornTime"], d["deadTime"], d["dead"],
            d["compiled"], None if bloom is None else tuple(bloom["bitPos"]),
            None if bloom is None else bloom["bitNum"])


@pytest.fixture(scope="module", params=list(VERSIONS))
def run(request) -> dict:
    return store_run(version=request.param)


@pytest.mark.reference
def test_registration_rules_and_bitmaps_match_the_real_broker(run):
    table = run_sql_table(run)
    checks: list = []
    m, bitmaps = replay_registrations(run, table, checks)
    assert [c for c in checks if c[2] != c[3]] == []
    assert [b for b in bitmaps if b[1] != b[2]] == []
    assert sum(b[2] is not None for b in bitmaps) >= 80
    final = {(f["topic"], f["group"]): summary_json(f) for f in run["report"]["filters"]}
    assert {(d.topic, d.consumer_group): summary(d) for d in m.records()} == final


@pytest.mark.reference
def test_real_consumer_filter_json_loads_and_round_trips(run):
    text = (run["out"] / "store" / "config" / "consumerFilter.json").read_text(encoding="utf-8")
    assert fastjson.dumps(fastjson.loads(text)) == text
    bloom = run["report"]["bloom"]
    table = run_sql_table(run)
    now = max(f["bornTime"] for f in run["report"]["filters"]) + 10**6
    loaded = ConsumerFilterManager(bloom["f"], bloom["n"], compiler=oracle_compiler(table))
    assert loaded.decode(text, now=now)
    expected = {}
    for f in run["report"]["filters"]:
        dead_time = f["deadTime"] if f["deadTime"] != 0 else max(now - 30_000, f["bornTime"])
        expected[(f["topic"], f["group"])] = summary_json({**f, "deadTime": dead_time, "dead": True})
    assert {(d.topic, d.consumer_group): summary(d) for d in loaded.records()} == expected
    replayed, _ = replay_registrations(run, table)
    assert fastjson.loads(replayed.encode(now=min(f["bornTime"] for f in run["report"]["filters"]))) == \
        fastjson.loads(text)
    other = ConsumerFilterManager(bloom["f"], bloom["n"] * 2, compiler=oracle_compiler(table))
    assert not other.decode(text, now=now) and other.records() == []


@pytest.mark.reference
@pytest.mark.parametrize("version", list(VERSIONS))
def test_every_config_file_round_trips_in_its_releases_dialect(version):
    """Every config/*.json (and .bak) the real broker of each release wrote for a varied scenario reads back and is
    written again byte for byte in that release's dialect (5.3.3: fastjson 1.x, 5.5.1: fastjson2), and the other
    dialect would not reproduce the files."""
    out = write_store(varied_scenario(4), version)
    files = sorted((out / "store" / "config").glob("*.json*"))
    assert {p.name for p in files} >= {"topics.json", "consumerOffset.json", "subscriptionGroup.json",
                                       "consumerFilter.json"}
    dialect = config_dialect(version)
    other = fastjson.FASTJSON if dialect == fastjson.FASTJSON2 else fastjson.FASTJSON2
    differs = 0
    for p in files:
        text = p.read_text(encoding="utf-8")
        value = fastjson.loads(text)
        assert fastjson.dumps(value, True, dialect) == text, p.name
        differs += fastjson.dumps(value, True, other) != text
    assert differs >= 3
    offsets = fastjson.loads((out / "store" / "config" / "consumerOffset.json").read_text(encoding="utf-8"))
    assert offsets["offsetTable"]["TopicA@G1"] == {0: 1}
    # the layout tells the release apart (one of brokerversion.detect's marks)
    for p in files:
        assert fastjson.written_dialect(p.read_text(encoding="utf-8")) in (dialect, None), p.name
    assert fastjson.written_dialect((out / "store" / "config" / "topics.json").read_text(encoding="utf-8")) == dialect
    mark = releasemarks._fastjson2(StoreDir(str(out / "store")))
    assert (mark is not None and mark.since == "5.4.0") == (version == "5.5.1")


@pytest.mark.reference
@pytest.mark.parametrize("version", list(VERSIONS))
def test_heartbeat_and_clean_match_the_real_broker(version):
    """register(group, subList) and clean() as the real ConsumerFilterManager of each release applies them
    (heartbeat/clean events of the harness's store mode): the state after each call, and every bitmap written in
    between."""
    scenario = heartbeat_clean_scenario(3)
    out = write_store(scenario, version)
    run = {"out": out, "scenario": scenario, "report": json.loads((out / "report.json").read_text()),
           "listing": json.loads((out / "listing.json").read_text())}
    checks: list = []
    m, bitmaps = replay_registrations(run, run_sql_table(run), checks)
    assert [c for c in checks if c[2] != c[3]] == []
    assert [c[1] for c in checks].count("heartbeat") == 5 and [c[1] for c in checks].count("clean") == 4
    assert [b for b in bitmaps if b[1] != b[2]] == []
    assert sum(b[2] is not None for b in bitmaps) > 20
    assert state(m) == state_json(run["report"]["filters"]) == []
    # The spans' fixed outcomes: 10^12 keeps every record, 0 drops every dead one, -1 drops everything.
    cleans = [r for r in run["report"]["registrations"] if r["kind"] == "clean"]
    assert len(cleans[0]["filters"]) == 5 and all(not f["dead"] for f in cleans[2]["filters"])
    assert cleans[3]["topics"] == [] and cleans[3]["filters"] == []
