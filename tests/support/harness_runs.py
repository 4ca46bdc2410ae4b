"""Harness store runs several test modules replay: the seeded registry scenario and the pull-answers scenario."""

from __future__ import annotations

import json
import random

from refharness import DEFAULT_VERSION, write_store
from scenarios import pull_answers_scenario


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


def pull_answers_run(enable_property_filter: bool) -> dict:
    """pull_answers_scenario(11) through the real broker: its scenario, report, listing and pull output."""
    scenario = pull_answers_scenario(11, enable_property_filter)
    out = write_store(scenario)
    return {"out": out, "scenario": scenario, "report": json.loads((out / "report.json").read_text()),
            "listing": json.loads((out / "listing.json").read_text()),
            "pull": json.loads((out / "pull.json").read_text())}
