"""RocketMQ 4.9 (issue 29): a store the real 4.9.7 broker wrote is detected as 4.9 from its own files, and both jobs,
given no --broker-version, replay it as a 4.9.7 broker and client answer, held to the real 4.9.7 pull: the 4.9
grammar (no CONTAINS / STARTSWITH / ENDSWITH, the parser stops where they stand), the retry filter before 5.1.4, the
client that keeps the compressed flag. The same scenario on a 5.3.3 store is replayed as 5.3.3 and gets 5.3.3's
answers, and no 5.x store is taken for 4.9."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import refharness
import scenarios
from support.job_runs import broker_conf, compare, rows, subscriptions_file

from filterlib import brokerversion, sql92
from filterlib.brokerversion import detect
from filterlib.store.properties_text import as_dict
from filterlib.store.storedir import StoreDir
from jobs import build_queues, explain, report, report_html, simulate_pull
from jobs.runs import read_dump

pytestmark = [pytest.mark.reference]

DEMO = Path(__file__).resolve().parent.parent / "demo" / "dump"


def _written(scenario: dict, version: str) -> tuple[Path, dict]:
    out = refharness.write_store(scenario, version)
    report_json = json.loads((out / "report.json").read_text())
    assert report_json["rocketmqVersion"] == "V" + version.replace(".", "_")
    return out / "store", report_json


@pytest.mark.parametrize("ext", [True, False], ids=["ext_on", "ext_off"])
def test_a_497_store_is_detected_as_497(ext) -> None:
    """The 4.9.7 broker's topic table has none of what every 5.x broker writes (TopicConfig `attributes`, the REVIVE
    and SYNC_BROKER_MEMBER system topics), with ext units and bitmaps on or off."""
    store, _ = _written(scenarios.grammar_scenario(1, ext), "4.9.7")
    version, evidence = detect(StoreDir(str(store)))
    assert version == brokerversion.V4_9_7, evidence
    assert "attributes" in evidence and "before 5.0.0" in evidence


@pytest.mark.parametrize("version,kind", [("5.3.3", "file"), ("5.3.3", "rocksdb"), ("5.5.1", "file"),
                                          ("5.5.1", "rocksdb")])
def test_no_5x_store_is_taken_for_49(version, kind) -> None:
    """Stores of each 5.x release the harness runs, file and RocksDB queues, and the demo's real 5.3.3 dump: each is
    read as 5.x, with the 5.0.0 marks named where nothing later tells the release."""
    sc = scenarios.grammar_scenario(1, True)
    if kind == "rocksdb":
        sc = {**sc, "store": {**sc["store"], "storeType": "defaultRocksDB"}}
    store, report_json = _written(sc, version)
    found, evidence = detect(StoreDir(str(store), store_type=report_json["store"]["storeType"]))
    assert found is not None and found >= brokerversion.V5_3_3, (found, evidence)
    found, evidence = detect(StoreDir(str(DEMO)))
    assert found == brokerversion.V5_3_3 and "rmq_sys_REVIVE_LOG_" in evidence, evidence


def test_a_497_store_without_its_topic_table_tells_nothing_and_says_the_flag(tmp_path) -> None:
    store, _ = _written(scenarios.grammar_scenario(1, False), "4.9.7")
    shutil.copytree(store / "commitlog", tmp_path / "bare" / "commitlog")
    found, evidence = detect(StoreDir(str(tmp_path / "bare")))
    assert found is None and "--broker-version 4.9.7" in evidence


def _replay(spark, tmp_path: Path, version: str, ext: bool) -> dict:
    """Both jobs, without --broker-version, over the store `version`'s real broker wrote; with the real pull."""
    scenario = scenarios.grammar_scenario(1, ext)
    store, report_json = _written(scenario, version)
    conf = broker_conf(tmp_path / "broker.conf", report_json["broker"], report_json["store"])
    subs = subscriptions_file(tmp_path / "subs.json", scenario["subscriptions"])
    wh, name = str(tmp_path / "wh"), f"grammar_{version.replace('.', '_')}"
    args = ["--store", str(store), "--warehouse", wh, "--broker-conf", conf, "--dump-id", name]
    s1 = build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args)))
    s2 = simulate_pull.run(spark, simulate_pull.validate(
        simulate_pull.parser().parse_args(["--warehouse", wh, "--dump-id", name, "--subscriptions", subs])))
    truth = refharness.pull({"storeDir": str(store), "broker": report_json["broker"], "store": report_json["store"],
                             "subscriptions": scenario["subscriptions"]}, version)
    return {"wh": wh, "name": name, "truth": truth, "job1": s1.lines(), "job2": s2.lines(), "store": store}


@pytest.mark.spark
@pytest.mark.parametrize("version,ext", [("4.9.7", True), ("4.9.7", False), ("5.3.3", True)],
                         ids=["4.9.7-ext_on", "4.9.7-ext_off", "5.3.3-ext_on"])
def test_jobs_replay_each_store_as_its_release_answers(spark, tmp_path, version, ext) -> None:
    """Every answer, decision, pull and delivered message (with the sysFlag the consumer holds) equals the real pull
    of the release that wrote the store, which both jobs detect and say. On 4.9.7 the CONTAINS / STARTSWITH /
    ENDSWITH groups and the retry subscription filtered by G_CONTAINS's selector receive nothing, while 5.3.3
    delivers them."""
    r = _replay(spark, tmp_path, version, ext)
    assert any(line.startswith(f"broker version {version} (detected: ") for line in r["job1"]), r["job1"]
    assert f"broker version {version} (recorded by job 1 in the dumps table)" in r["job2"]
    units, _calls, msgs, problems = compare(spark, r["wh"], r["name"], r["truth"])
    assert problems == [] and units >= 300 and msgs >= 60, problems[:3]
    stats = {(s["consumer_group"], s["topic"]): s["delivered"]
             for s in rows(spark, r["wh"], "group_stats", r["name"], ["subscription_index"])}
    grammar = [("G_CONTAINS", scenarios.TOPIC), ("G_AFFIX", scenarios.TOPIC), ("G_AND", scenarios.TOPIC),
               ("G_POSTED", scenarios.TOPIC), ("G_CONTAINS", "%RETRY%G_CONTAINS")]
    if version == "4.9.7":
        assert [stats[k] for k in grammar] == [0] * len(grammar)
    else:
        assert all(stats[k] > 0 for k in grammar)
    assert stats[("G_GT", scenarios.TOPIC)] > 0
    delivered = rows(spark, r["wh"], "delivered_messages", r["name"], ["subscription_index", "queue_offset"])
    compressed = [d for d in delivered if d["sys_flag"] & 1]
    assert compressed and {d["client_sys_flag"] & 1 for d in compressed} == {int(version == "4.9.7")}


@pytest.mark.spark
def test_explain_and_the_report_say_a_selector_means_something_else_on_49(spark, tmp_path) -> None:
    """On the 4.9.7 dump: explain puts the 4.9 reading of G_CONTAINS's selector beside its decision, and the report's
    grammar section lists the three selectors 4.9 reads otherwise (not `a > 2`), each with both readings."""
    r = _replay(spark, tmp_path, "4.9.7", False)
    messages = rows(spark, r["wh"], "messages", r["name"], ["commit_log_offset"])
    m = next(m for m in messages
             if m["topic"] == scenarios.TOPIC and "ab" in (as_dict(m["properties"]) or {}).get("name", ""))
    args = explain.parser().parse_args(["--warehouse", r["wh"], "--dump-id", r["name"], "--group", "G_CONTAINS",
                                        "--offset-msg-id", m["offset_msg_id"]])
    text = "\n".join(explain.answer(spark, explain.validate(args)).text)
    assert "on a 4.9.7 broker SQL92 `name CONTAINS 'ab'` means something else than on 5.x" in text, text
    assert "4.9.7 reads only `name` and ignores `CONTAINS 'ab'`" in text, text
    data = report.collect(spark, r["wh"], r["name"])
    assert data["broker_version"] == "4.9.7"
    noted = {(n["consumer_group"], n["expression"]) for n in data["grammar"]}
    want = {(g, e) for g, e in scenarios.GRAMMAR_EXPRS.items() if sql92.grammar_note(e, "4.9.7")} | \
        {("G_POSTED", scenarios.GRAMMAR_EXPRS["G_AFFIX"])}
    assert noted == want and len(want) == 4 and all(g != "G_GT" for g, _ in noted)
    assert 'class="grammar-table"' in report_html.render(data)
    assert read_dump(spark, r["wh"], "dumps", r["name"]).first().broker_version == "4.9.7"
