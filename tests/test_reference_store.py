"""The reference harness's `store` and `pull` modes are real: a real 5.3.3 store over several commit log files whose
replayed pull delivers exactly what a hand-written oracle of the filter semantics predicts."""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from collections import Counter
from pathlib import Path

import pytest
import refharness
import scenarios

from filterlib.store import fastjson
from filterlib.tags import tags_code

pytestmark = pytest.mark.reference

SEED = 7
BLANK_MAGIC = 0xCBD43194
RECORD_MAGICS = {0xDAA320A7, 0xDAA320AB}
INT_RE = re.compile(r"[+-]?[0-9]+")


@pytest.fixture(scope="module")
def scenario() -> dict:
    return scenarios.tag_and_sql_scenario(SEED)


@pytest.fixture(scope="module")
def out(scenario) -> Path:
    return refharness.write_store(scenario)


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _messages(scenario: dict) -> list[dict]:
    return [e for e in scenario["events"] if e["kind"] == "message"]


def _landing_in_topic(scenario: dict) -> list[dict]:
    """Messages a consumer of the real topic can see: not delayed, not retry, and not an unfinished/rolled-back tx."""
    committed = {e["ref"] for e in scenario["events"] if e["kind"] == "commit"}
    return [m for m in _messages(scenario)
            if not m.get("delayLevel") and "retry" not in m and (m.get("tx") != "prepared" or m["id"] in committed)]


def _java_int(text: str | None) -> int | None:
    """Integer.valueOf as the SQL92 comparison with an int literal applies it (None = throws / absent)."""
    if text is None or not INT_RE.fullmatch(text):
        return None
    v = int(text)
    return v if -2**31 <= v < 2**31 else None


def _tag_oracle(m: dict) -> bool:
    return m.get("tags") in {"TagA", "TagC"}


def _sql_oracle(m: dict) -> bool:
    a = _java_int(m.get("props", {}).get("a"))
    return m.get("tags") in {"TagA", "TagB"} and a is not None and 0 <= a <= 3


def _delivered(pull: dict, group: str) -> Counter:
    sub = next(s for s in pull["subscriptions"] if s["group"] == group)
    assert sub["answer"] == "OK"
    return Counter(m["uniqKey"] for q in sub["queues"] for m in q["messages"] if m["clientKept"])


def _expected(scenario: dict, oracle) -> Counter:
    return Counter(f"UNIQ-{m['id']}" for m in _landing_in_topic(scenario) if oracle(m))


def test_tag_subscription_delivers_the_oracles_set(scenario, out):
    pull = _json(out / "pull.json")
    expected = _expected(scenario, _tag_oracle)
    assert expected, "scenario must deliver something"
    assert _delivered(pull, "G_TAG") == expected


@pytest.mark.parametrize("group", ["G_SQL", "G_POSTED"])
def test_sql_subscription_delivers_the_oracles_set(scenario, out, group):
    pull = _json(out / "pull.json")
    expected = _expected(scenario, _sql_oracle)
    assert expected, "scenario must deliver something"
    assert _delivered(pull, group) == expected


def test_decision_rows_are_attributed_and_explained(out):
    pull = _json(out / "pull.json")
    outcomes = Counter()
    for sub in pull["subscriptions"]:
        for q in sub["queues"]:
            offsets = [u["queueOffset"] for u in q["units"]]
            assert offsets == list(range(q["minOffset"], q["maxOffset"])), "every unit scanned exactly once, in order"
            for u in q["units"]:
                assert u["attributionOk"] and not u["cqBranch"].startswith("UNEXPLAINED")
                outcomes[(sub["group"], u["outcome"])] += 1
    assert outcomes[("G_TAG", "TAG_HASH_MISS")] and outcomes[("G_SQL", "BLOOM_MISS")]
    assert outcomes[("G_SQL", "DELIVERED")] and outcomes[("G_TAG", "DELIVERED")]
    assert outcomes[("G_POSTED", "SQL_FALSE")] and outcomes[("G_POSTED", "SQL_ERROR")], "coercion stress reaches SQL"


def test_client_recheck_drops_hash_collisions(scenario, out):
    pull = _json(out / "pull.json")
    sub = next(s for s in pull["subscriptions"] if s["group"] == "G_TAG")
    collided = Counter(m["uniqKey"] for q in sub["queues"] for u in q["units"] if u["outcome"] == "TAG_CLIENT_MISMATCH"
                       for m in q["messages"] if m["queueOffset"] == u["queueOffset"])
    expected = Counter(f"UNIQ-{m['id']}" for m in _landing_in_topic(scenario) if m.get("tags") == "UBgA")
    assert expected and collided == expected, "the very messages whose tag collides with TagA's hash"


def _walk(path: Path) -> tuple[int, int | None]:
    """Independent walk of one commit log file: (records, position of the BLANK header or None)."""
    data = path.read_bytes()
    pos = records = 0
    while pos + 8 <= len(data):
        size, magic = struct.unpack_from(">iI", data, pos)
        if magic == BLANK_MAGIC:
            assert size == len(data) - pos, "a BLANK's TOTALSIZE covers the rest of the file"
            return records, pos
        if magic not in RECORD_MAGICS:
            break
        records += 1
        pos += size
    return records, None


def test_store_spans_several_commitlog_files_with_blanks(scenario, out):
    files = sorted((out / "store" / "commitlog").iterdir())
    walked = [_walk(f) for f in files]
    with_data = [w for w in walked if w[0]]
    assert len(with_data) >= 3
    for _records, blank in with_data[:-1]:
        assert blank is not None, "every full file ends with a BLANK"
    report = _json(out / "report.json")
    assert report["way"] in ("A", "B")
    assert [f["blankAt"] for f in report["commitlog"]["files"]] == [b for _, b in walked]
    listing = _json(out / "listing.json")
    assert sum(r for r, _ in walked) == len(listing["records"])
    assert len(listing["blanks"]) == sum(1 for _, b in walked if b is not None)


def test_listing_covers_every_scenario_message(scenario, out):
    listing = _json(out / "listing.json")
    msgs = _messages(scenario)
    by_id = Counter(r["scenarioId"] for r in listing["records"])
    assert sorted(i for i in by_id if i in {m["id"] for m in msgs}) == sorted(m["id"] for m in msgs)
    ends = [e for e in scenario["events"] if e["kind"] in ("commit", "rollback")]
    commits = sum(1 for e in ends if e["kind"] == "commit")
    assert len(listing["records"]) == len(msgs) + commits + len(ends)
    hosts = ({r["bornHost"][0] == "[" for r in listing["records"]}
             | {r["storeHost"][0] == "[" for r in listing["records"]})
    assert hosts == {True, False}, "both IPv4 and IPv6 hosts are on disk"
    for r in listing["records"]:
        assert r["bodyCRC"] == (zlib.crc32(base64.b64decode(r["body"])) & 0x7FFFFFFF)
    for m in msgs:
        rec = next(r for r in listing["records"] if r["scenarioId"] == m["id"])
        if "compress" not in m and "bodyBase64" in m:
            assert rec["body"] == m["bodyBase64"]
        if "compress" in m:
            expected = m.get("bodyBase64") or base64.b64encode(m["body"].encode()).decode()
            assert rec["bodyDecompressed"] == expected and rec["sysFlag"] & 1


def test_config_json_persisted(out):
    config = out / "store" / "config"
    for name in ("consumerFilter.json", "topics.json", "subscriptionGroup.json", "consumerOffset.json"):
        assert (config / name).is_file()
    text = (config / "consumerFilter.json").read_text()
    assert '"G_SQL"' in text and scenarios.TOPIC in text


def test_config_json_content_matches_scenario(scenario, out):
    """The persisted configs hold what the scenario asked for: its topics' queue numbers, perm and filter type,
    its groups, its committed offsets, and exactly its registered SQL92 filters (expression, type, version)."""
    config = out / "store" / "config"

    def load(name: str):
        return fastjson.loads((config / name).read_text(encoding="utf-8"))

    topics = load("topics.json")["topicConfigTable"]
    assert scenario["topics"]
    for t in scenario["topics"]:
        c = topics[t["name"]]
        want = (t["name"], t["readQueueNums"], t["writeQueueNums"], t.get("perm", 6),
                t.get("topicFilterType", "SINGLE_TAG"))
        assert (c["topicName"], c["readQueueNums"], c["writeQueueNums"], c["perm"], c["topicFilterType"]) == want
    groups = load("subscriptionGroup.json")["subscriptionGroupTable"]
    assert set(scenario["groups"]) <= set(groups)
    assert all(groups[g]["groupName"] == g for g in scenario["groups"])
    offsets: dict[str, dict[int, int]] = {}
    for o in scenario.get("offsets", []):
        offsets.setdefault(f"{o['topic']}@{o['group']}", {})[o["queueId"]] = o["offset"]
    assert load("consumerOffset.json")["offsetTable"] == offsets
    assert not any(e["kind"] == "unregister" for e in scenario["events"])
    registered = {(e["topic"], e["group"]): e for e in scenario["events"] if e["kind"] == "register"}
    assert registered
    by_topic = load("consumerFilter.json")["filterDataByTopic"]
    persisted = {(t, g): fd for t, v in by_topic.items() for g, fd in v["groupFilterData"].items()}
    assert set(persisted) == set(registered)
    for (topic, group), e in registered.items():
        fd = persisted[(topic, group)]
        assert (fd["topic"], fd["consumerGroup"], fd["expression"], fd["expressionType"], fd["clientVersion"]) == \
            (topic, group, e["expression"], e.get("type", "SQL92"), e.get("clientVersion", 1))
        assert (fd["dead"], fd["deadTime"]) == (False, 0)
        assert by_topic[topic]["topic"] == topic


def test_pull_mode_on_a_copy_agrees(scenario, out):
    report = _json(out / "report.json")
    before = sorted(p.name for p in (out / "store").iterdir())
    result = refharness.pull({"storeDir": str(out / "store"), "broker": report["broker"], "store": report["store"],
                              "subscriptions": scenario["subscriptions"]})
    assert result["consumerFilterLoaded"] is True
    assert all(f["dead"] for f in result["filters"]), "a load marks every filter dead"
    assert _delivered(result, "G_TAG") == _expected(scenario, _tag_oracle)
    assert _delivered(result, "G_SQL") == _expected(scenario, _sql_oracle)
    assert _delivered(result, "G_POSTED") == _expected(scenario, _sql_oracle)
    assert sorted(p.name for p in (out / "store").iterdir()) == before, "the original dump is untouched"


@pytest.mark.parametrize("seed", [1, 2])
def test_varied_scenario_writes_and_replays(seed):
    scenario = scenarios.varied_scenario(seed)
    out = refharness.write_store(scenario)
    report, listing, pull = (_json(out / n) for n in ("report.json", "listing.json", "pull.json"))
    assert report["transactionMode"] == scenario["transactionMode"]
    assert {m["status"] for m in report["messages"]} == {"PUT_OK"}
    ends = [e for e in scenario["events"] if e["kind"] in ("commit", "rollback")]
    commits = sum(1 for e in ends if e["kind"] == "commit")
    extra = len(ends) if scenario["transactionMode"] == "store" else commits + len(ends)
    assert len(listing["records"]) == len(_messages(scenario)) + extra
    long_retry = any(len(m.get("retry", {}).get("group", "")) > 120 for m in _messages(scenario))
    assert ("V2" in {r["version"] for r in listing["records"]}) == long_retry
    for r in listing["records"]:
        tx = r["sysFlag"] & 0xC
        assert (r["cq"] is None) == (tx in (0x4, 0xC)), "prepared/rollback records never reach the consume queue"
    for sub in pull["subscriptions"]:
        for q in sub["queues"]:
            for u in q["units"]:
                assert u["attributionOk"] and not u["cqBranch"].startswith("UNEXPLAINED")


def _untimed(value):
    """A harness answer without what the clock gives: store and born times, and a tagsCode that is a time (a
    delayed message's delivery time, milliseconds since 1970) rather than a tag's hash or an ext address."""
    if isinstance(value, dict):
        return {k: "clock" if k.startswith("tagsCode") and 10**12 <= abs(int(v)) < 10**14 else _untimed(v)
                for k, v in value.items() if not re.search(r"Time(stamp)?$|^now", k)}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def test_a_served_run_answers_as_a_run_alone(monkeypatch, tmp_path):
    """Two store runs served by one JVM (PROTOCOL.md, serve), the second after the first's broker came and went, give
    the second's answers (listing, pull replay, report) as a JVM of its own does."""
    monkeypatch.setattr(refharness, "CACHE_DIR", tmp_path / "served")
    monkeypatch.delenv("RMQREF_SERVE", raising=False)
    refharness.write_store(scenarios.varied_scenario(SEED))
    pid = refharness._SERVERS[refharness.DEFAULT_VERSION].proc.pid
    served = refharness.write_store(scenarios.tag_and_sql_scenario(SEED + 1))
    assert refharness._SERVERS[refharness.DEFAULT_VERSION].proc.pid == pid, "both runs in one JVM"
    monkeypatch.setattr(refharness, "CACHE_DIR", tmp_path / "alone")
    monkeypatch.setenv("RMQREF_SERVE", "0")
    alone = refharness.write_store(scenarios.tag_and_sql_scenario(SEED + 1))
    for name in ("listing.json", "pull.json", "report.json"):  # paths under each cache named alike
        s, a = (json.loads((run / name).read_text(encoding="utf-8").replace(str(root), "ROOT"))
                for run, root in ((served, tmp_path / "served"), (alone, tmp_path / "alone")))
        assert _untimed(s) == _untimed(a), name


def test_a_served_run_that_fails_is_reported_as_a_run_alone_and_the_next_gets_a_new_jvm(monkeypatch, tmp_path):
    """A served run that fails is run again alone: its error is the one raised, nothing is cached for it, and the
    failed run's JVM is replaced before the next run."""
    monkeypatch.setattr(refharness, "CACHE_DIR", tmp_path)
    monkeypatch.delenv("RMQREF_SERVE", raising=False)
    refharness.eval_cases([{"kind": "tag_hash", "tag": "TagA"}])
    first = refharness._SERVERS[refharness.DEFAULT_VERSION].proc
    with pytest.raises(refharness.HarnessError, match=r"pull failed \(rc=1\)(.|\n)*NoSuchFileException: /nonexistent"):
        refharness.run("pull", {"storeDir": "/nonexistent/store", "subscriptions": []})
    assert first.poll() is not None, "the server that ran the failed run is gone"
    assert not list((tmp_path / "pull").glob("*/.done")), "no answer cached for the failed run"
    assert refharness.eval_cases([{"kind": "tag_hash", "tag": "TagB"}])[0]["hash"] == tags_code("TagB")
    assert refharness._SERVERS[refharness.DEFAULT_VERSION].proc.poll() is None, "a new server answered"
