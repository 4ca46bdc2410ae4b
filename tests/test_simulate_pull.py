"""Job 2 end to end with Spark on real 5.3.3 stores: job 1 builds the warehouse, job 2 replays the pulls, and every
decision, pull and delivered message equals what the real broker's pull replay (the harness's `pull` mode over a
copy of the same store, its registry loaded from consumerFilter.json) records, for every subscription and unit."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import refharness
import scenarios
from support.filters import HARNESS_OUTCOMES
from support.job_runs import broker_conf, compare, rows, subscriptions_file

from filterlib import sql92
from filterlib import vocabulary as vocab
from filterlib.errors import FilterEvaluationError
from filterlib.store.compression import decompress_body
from filterlib.store.properties_text import as_dict
from jobs import build_queues, explain, row_forms, simulate_pull
from jobs.cli import InputError
from jobs.runs import read_dump

pytestmark = [pytest.mark.reference, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {
    "tag_sql": lambda: scenarios.tag_and_sql_scenario(1),
    "varied": lambda: scenarios.varied_scenario(4),
    "answers_on": lambda: scenarios.pull_answers_scenario(11, True),
    "answers_off": lambda: scenarios.pull_answers_scenario(11, False),
    "client_decode": lambda: scenarios.client_decode_scenario(3),
    "unregistered": lambda: scenarios.unregistered_filters_scenario(1),
    "demo": None,
    # the same scenarios written and pulled by the real 5.5.1 broker, replayed with --broker-version 5.5.1
    "tag_sql_551": lambda: scenarios.tag_and_sql_scenario(1),
    "varied_551": lambda: scenarios.varied_scenario(4),
    "answers_on_551": lambda: scenarios.pull_answers_scenario(11, True),
    "unregistered_551": lambda: scenarios.unregistered_filters_scenario(1),
    "one_queue": lambda: one_queue_scenario(5),
    "foreign": lambda: scenarios.varied_scenario(4),
}
WHOLE = {"tag_sql", "demo"}
"""Scenarios whose queues job 2 replays whole (its default for short queues); every other one is replayed in pieces
of one consumequeue file (10 units), each piece a task of its own."""
DEMO = ROOT / "demo"


def point_at_another_topic(store: Path, listing: dict) -> None:
    """Rewrite one TopicA unit (queue offset 1 of its first queue) to point at a TopicB message: the real broker
    reads and filters whatever message the unit points at."""
    a = next(r for r in listing["records"] if r["topic"] == "TopicA" and r["queueOffset"] == 1)
    b = next(r for r in listing["records"] if r["topic"] == "TopicB")
    cq = store / "consumequeue" / "TopicA" / str(a["queueId"]) / "00000000000000000000"
    data = bytearray(cq.read_bytes())
    data[20:32] = struct.pack(">qi", b["commitLogOffset"], b["size"])
    cq.write_bytes(bytes(data))


def attributed(problems: list) -> tuple[list, int]:
    """The problems but the rewritten unit's outcome, and how many decisions on it they held. The harness names a
    unit's outcome from the calls of the filter and the messages returned, which it attributes by the message's
    own queue offset; for the rewritten unit (another topic's message) it finds neither and says NOT_READ. What the
    broker did with it is still compared: each call's message and filtered counts, and the messages delivered."""
    rest, dropped = [], 0
    for p in problems:
        if p[2:3] != ("units",) or len(p[3]) != len(p[4]):
            rest.append(p)
            continue
        differ = [(t, m) for t, m in zip(p[3], p[4], strict=True) if t != m]
        if all(t[0] == 1 and t[2] == "NOT_READ" and t[:2] == m[:2] for t, m in differ):
            dropped += len(differ)
        else:
            rest.append(p)
    return rest, dropped


REWRITTEN = {"foreign": point_at_another_topic}
"""Scenarios whose store is rewritten (a copy of it) before the jobs and the real pull read it."""


def one_queue_scenario(seed: int) -> dict:
    """tag_and_sql_scenario's messages all in queue 0 of a one-queue topic: one long queue of 10-unit files."""
    scenario = scenarios.tag_and_sql_scenario(seed, n_messages=260)
    for t in scenario["topics"]:
        t["readQueueNums"] = t["writeQueueNums"] = 1
    for e in scenario["events"]:
        if "queueId" in e:
            e["queueId"] = 0
    return scenario


@pytest.fixture(scope="module")
def replayed(spark, tmp_path_factory) -> dict:
    """Each scenario: its harness store, job 1 then job 2 run over it, and the real pull replay of it."""
    out = {}
    wh = str(tmp_path_factory.mktemp("warehouse"))
    for name, make in SCENARIOS.items():
        version = "5.5.1" if name.endswith("_551") else refharness.DEFAULT_VERSION
        if make is None:  # the bundled demo dump, with its own broker.conf and subscriptions file
            scenario = json.loads((DEMO / "scenario.json").read_text())
            report = {"broker": scenario["broker"], "store": scenario["store"]}
            conf, subs, store = str(DEMO / "broker.conf"), str(DEMO / "subscriptions.json"), str(DEMO / "dump")
        else:
            scenario = make()
            run = refharness.write_store(scenario, version)
            report = json.loads((run / "report.json").read_text())
            tmp = tmp_path_factory.mktemp(name)
            conf = broker_conf(tmp / "broker.conf", report["broker"], report["store"])
            subs = subscriptions_file(tmp / "subs.json", scenario["subscriptions"])
            store = str(run / "store")
            if name in REWRITTEN:
                shutil.copytree(store, tmp / "store")
                REWRITTEN[name](tmp / "store", json.loads((run / "listing.json").read_text()))
                store = str(tmp / "store")
        args = ["--store", store, "--warehouse", wh, "--broker-conf", conf, "--dump-id", name,
                "--broker-version", version]
        bodies = ["--bodies"] if make is None else []  # the demo's bodies in the warehouse; the others' in the dump
        built = build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args + bodies)))
        pull_args = args + ["--subscriptions", subs] + ([] if name in WHOLE else ["--piece-units", "1"])
        summary = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(pull_args)))
        truth = refharness.pull({"storeDir": store, "broker": report["broker"], "store": report["store"],
                                 "subscriptions": scenario["subscriptions"]}, version)
        out[name] = {"summary": summary, "built": built, "truth": truth, "args": args + ["--subscriptions", subs],
                     "pull_args": pull_args,
                     "store": store, "report": report}
    out["warehouse"] = wh
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_decisions_pulls_and_deliveries_equal_the_real_pull(spark, replayed, name) -> None:
    units, calls, msgs, problems = compare(spark, replayed["warehouse"], name, replayed[name]["truth"])
    if name in REWRITTEN:
        problems, unattributed = attributed(problems)
        assert unattributed > 0
    assert problems == []
    assert units >= 40 and calls >= 4 and msgs > 5


def test_units_pointing_at_another_topics_message_are_filtered_as_the_broker_does(replayed) -> None:
    """The verdicts are computed per message under its own topic's filters; a unit that points at another topic's
    message (equal to the real pull above) makes the job replay with the properties joined, and say so."""
    s = replayed["foreign"]["summary"]
    assert s.foreign_units == 1
    assert any("1 units point at a message of another queue" in line for line in s.lines())
    assert any("1 units point at messages of another topic" in line for line in s.lines())
    assert not s.packed
    varied = replayed["varied"]["summary"]
    assert varied.foreign_units == 0 and varied.unresolved == [] and varied.packed


def test_one_long_queue_is_replayed_in_pieces_over_several_tasks(spark, replayed) -> None:
    """One queue of 10-unit consumequeue files, --piece-units 1: a task per file, spread over the session's
    partitions, none holding more than a file; and the pieces agree with the real pull (the test above) and with
    the same queue replayed whole, pull numbers included."""
    s = replayed["one_queue"]["summary"]
    assert s.queues == 1
    assert s.pieces >= 20 and s.largest_piece <= 10
    assert s.piece_partitions > 1
    assert any(f"in {s.pieces} pieces" in line for line in s.lines())
    wh = replayed["warehouse"]
    order = {"pulls": ["subscription_index", "queue_id", "pull_index"],
             "pull_decisions": ["subscription_index", "queue_id", "queue_offset"],
             "group_stats": ["subscription_index"]}
    pieced = {t: rows(spark, wh, t, "one_queue", o) for t, o in order.items()}
    args = replayed["one_queue"]["pull_args"]
    at = args.index("--piece-units")
    whole = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
        args[:at] + args[at + 2:])))
    assert whole.pieces == 1
    assert {t: rows(spark, wh, t, "one_queue", o) for t, o in order.items()} == pieced
    assert len(pieced["pulls"]) > 2 * s.pieces  # several pulls per piece, numbered over the queue


def test_every_outcome_and_answer_is_covered(replayed) -> None:
    """The scenarios together exercise every outcome, both bloom verdicts, SQL errors and every pre-read answer
    (counted from each run's group_stats rows; the decisions behind them equal the real pull's, test above)."""
    stats = [st for name in SCENARIOS for st in replayed[name]["summary"].stats]
    outcomes = {o for o, column in vocab.OUTCOME_COLUMNS.items() if any(st[column] for st in stats)}
    answers = {st["answer"] for st in stats}
    assert outcomes == {"DELIVERED", "TAG_HASH_MISS", "TAG_CLIENT_MISMATCH", "BLOOM_MISS", "SQL_FALSE", "SQL_NULL",
                        "SQL_ERROR", "CLIENT_DECODE_FAILED"}
    assert answers == {"OK", "FILTER_DATA_NOT_EXIST", "FILTER_DATA_NOT_LATEST", "SYSTEM_ERROR",
                       "SUBSCRIPTION_PARSE_FAILED"}
    assert sum(st["bloom_false_positives"] for st in stats) > 0


def test_rerun_leaves_identical_tables(spark, replayed, monkeypatch) -> None:
    """A re-run replaces the dump's rows with the same rows; so does a run whose tables Spark writes (a warehouse
    the tasks cannot write themselves, neither local nor s3a: the matrix, details and pulls through Spark's writer,
    the pulls numbered in a mapInArrow instead of in the writing tasks)."""
    wh, name = replayed["warehouse"], "tag_sql"
    tables = {"pull_decisions": ["subscription_index", "queue_id", "queue_offset"],
              "pulls": ["subscription_index", "queue_id", "pull_index"],
              "delivered_messages": ["subscription_index", "queue_id", "queue_offset"],
              "group_stats": ["subscription_index"], "decision_details": ["subscription_index", "queue_id",
                                                                           "queue_offset"],
              "decision_codes": ["code"]}
    before = {t: rows(spark, wh, t, name, o) for t, o in tables.items()}
    simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(replayed[name]["args"])))
    after = {t: rows(spark, wh, t, name, o) for t, o in tables.items()}
    assert after == before
    monkeypatch.setattr(simulate_pull, "_file_targets", lambda *args: {})
    simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(replayed[name]["args"])))
    by_spark = {t: rows(spark, wh, t, name, o) for t, o in tables.items()}
    assert by_spark == before


def test_a_dump_whose_body_error_reads_back_null_still_equals_the_real_pull(spark, replayed) -> None:
    """Rows of a dump written before job 1 had body_error (bodies always written then) read back null once a later
    dump added the column (the schema merge): job 2 works the errors out itself from the bodies, so the
    client_decode dump's messages with body_error nulled still replay equal to the real pull, undecodable bodies
    included."""
    from pyspark.sql import functions as F

    from jobs.delta_io import replace_dump

    wh, source = replayed["warehouse"], replayed["client_decode"]
    old = "client_decode_old"
    args = [old if a == "client_decode" else a for a in source["args"]]
    # such a dump holds its bodies (job 1 wrote them then): --bodies
    built = [a for a in args if a != "--subscriptions" and not a.endswith("subs.json")] + ["--bodies"]
    build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(built)))
    nulled = read_dump(spark, wh, "messages", old).withColumn("body_error", F.lit(None).cast("string"))
    replace_dump(nulled.localCheckpoint(), wh, "messages", old)
    # as an older release left it: no run row names the dump's tables, so readers read the latest versions
    spark.sql(f"DELETE FROM delta.`{wh}/runs` WHERE dump_id = '{old}'")
    assert read_dump(spark, wh, "messages", old).where(F.col("body_error").isNotNull()).count() == 0
    simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(args)))
    units, _calls, _msgs, problems = compare(spark, wh, old, source["truth"])
    assert problems == [] and units >= 40
    assert row_forms.pull_decisions(spark, wh, old).where(F.col("outcome") == "CLIENT_DECODE_FAILED").count()


def test_rebuilt_queues_give_the_same_decisions_when_the_rule_is_exact(spark, replayed) -> None:
    """tag_and_sql_scenario registers its filter before any message, so job 1's rebuilt queues and bitmaps equal
    the broker's: pulling them gives the same decisions and pulls as the dump's own."""
    wh, name = replayed["warehouse"], "tag_sql"
    before = rows(spark, wh, "pull_decisions", name, ["subscription_index", "queue_id", "queue_offset"])
    args = replayed[name]["pull_args"] + ["--queues", "rebuilt"]
    s = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(args)))
    assert s.queues_source == "rebuilt"
    after = rows(spark, wh, "pull_decisions", name, ["subscription_index", "queue_id", "queue_offset"])
    assert [(d["outcome"], d["bloom_false_positive"], d["pull_index"]) for d in after] == \
        [(d["outcome"], d["bloom_false_positive"], d["pull_index"]) for d in before]
    assert any(d["bloom_tested"] for d in after)


def test_rebuilt_queues_follow_the_dumps_registry_not_the_file(spark, replayed) -> None:
    """unregistered_filters_scenario's file names SQL92 subscriptions the dump's registry lacks (never registered,
    or removed by clean). With --queues rebuilt job 2 uses the registry job 1 built the bitmaps with, so those are
    FILTER_DATA_NOT_EXIST as on the real broker, and every decision equals the real pull over the broker's own
    queues (G_REG's bit positions are disjoint from the removed G_CLEAN's, so its bloom verdicts agree)."""
    wh, name = replayed["warehouse"], "unregistered"
    regs = replayed[name]["truth"]["subscriptions"]
    assert {s["group"]: s["answer"] for s in regs if s["group"] != "G_TAG"} == {
        "G_REG": "OK", "G_CLEAN": "FILTER_DATA_NOT_EXIST", "G_NEVER": "FILTER_DATA_NOT_EXIST",
        "G_PLAIN": "FILTER_DATA_NOT_EXIST"}
    args = replayed[name]["pull_args"] + ["--queues", "rebuilt"]
    s = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(args)))
    assert s.queues_source == "rebuilt"
    units, _calls, _msgs, problems = compare(spark, wh, name, replayed[name]["truth"])
    assert problems == [] and units >= 40


@pytest.mark.parametrize("version", list(refharness.VERSIONS))
def test_each_broker_release_gets_its_own_answers(spark, version, tmp_path) -> None:
    """bitmap_off_restart_scenario written and pulled by each release's real broker: 5.3.3 keeps its SQL92 filters
    across the restart, 5.5.1 (no bloom data without enableCalcFilterBitMap, a registry without bloom data discarded
    on load) answers FILTER_DATA_NOT_EXIST. Both jobs run with that --broker-version and give every answer,
    decision, pull and delivery of the real pull of that release."""
    scenario = scenarios.bitmap_off_restart_scenario(5)
    run = refharness.write_store(scenario, version)
    report = json.loads((run / "report.json").read_text())
    conf = broker_conf(tmp_path / "broker.conf", report["broker"], report["store"])
    subs = subscriptions_file(tmp_path / "subs.json", scenario["subscriptions"])
    store, wh, name = str(run / "store"), str(tmp_path / "wh"), f"restart_{version.replace('.', '_')}"
    args = ["--store", store, "--warehouse", wh, "--broker-conf", conf, "--dump-id", name,
            "--broker-version", version]
    build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args)))
    summary = simulate_pull.run(spark, simulate_pull.validate(
        simulate_pull.parser().parse_args(args + ["--subscriptions", subs])))
    truth = refharness.pull({"storeDir": store, "broker": report["broker"], "store": report["store"],
                             "subscriptions": scenario["subscriptions"]}, version)
    answers = {s["group"]: s["answer"] for s in truth["subscriptions"]}
    registered = "FILTER_DATA_NOT_EXIST" if version == "5.5.1" else "OK"
    assert answers == {"G_SQL": registered, "G_GT": registered, "G_POSTED": "OK", "G_TAG": "OK"}
    units, _calls, _msgs, problems = compare(spark, wh, name, truth)
    assert problems == [] and units >= 40
    text = "\n".join(summary.lines())
    assert f"(broker {version})" in text
    assert ("records without bloom data" in text) == (version == "5.5.1")


def test_lite_topic_consumption_is_refused_in_words(spark, tmp_path) -> None:
    """A store the real 5.5.1 broker wrote with a Lite Topic (message.type=LITE) and a group bound to it
    (lite.bind.topic): job 2 refuses both subscriptions with a sentence each and replays none of them; the ordinary
    subscriptions beside them still equal the real pull."""
    scenario = scenarios.lite_topic_scenario(2)
    run = refharness.write_store(scenario, "5.5.1")
    report = json.loads((run / "report.json").read_text())
    conf = broker_conf(tmp_path / "broker.conf", report["broker"], report["store"])
    subs = subscriptions_file(tmp_path / "subs.json", scenario["replayable"] + scenario["lite"])
    store, wh = str(run / "store"), str(tmp_path / "wh")
    args = ["--store", store, "--warehouse", wh, "--broker-conf", conf, "--dump-id", "lite",
            "--broker-version", "5.5.1"]
    build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args)))
    summary = simulate_pull.run(spark, simulate_pull.validate(
        simulate_pull.parser().parse_args(args + ["--subscriptions", subs])))
    text = "\n".join(summary.lines())
    assert "not replayed: G_LITE on TopicTest: group G_LITE is a Lite consumer group bound to LiteParent" in text
    assert f"not replayed: G_ON_LITE on {scenarios.LITE_PARENT}: topic {scenarios.LITE_PARENT} is a Lite Topic" in text
    stats = rows(spark, wh, "group_stats", "lite", ["subscription_index"])
    assert [s["consumer_group"] for s in stats] == ["G_TAG", "G_SQL"]
    truth = refharness.pull({"storeDir": store, "broker": report["broker"], "store": report["store"],
                             "subscriptions": scenario["replayable"]}, "5.5.1")
    units, _calls, _msgs, problems = compare(spark, wh, "lite", truth)
    assert problems == [] and units >= 40


def test_committed_offsets_start_the_pulls_there(spark, replayed) -> None:
    """varied_scenario commits G1's TopicA queue 0 at offset 1: with --from committed that queue's first pull asks
    for offset 1 and unit 0 is never scanned; queues without a committed offset start at 0 (the summary says so)."""
    wh, name = replayed["warehouse"], "varied"
    args = replayed[name]["pull_args"] + ["--from", "committed"]
    s = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(args)))
    assert any("no committed offset" in n for n in s.notes)
    pulls = rows(spark, wh, "pulls", name, ["subscription_index", "queue_id", "pull_index"])
    g1 = [p for p in pulls if (p["consumer_group"], p["topic"]) == ("G1", "TopicA")]
    assert [p["request_offset"] for p in g1 if p["queue_id"] == 0][0] == 1
    assert all(p["request_offset"] == 0 for p in g1 if p["queue_id"] != 0 and p["pull_index"] == 0)
    decided = rows(spark, wh, "pull_decisions", name, ["queue_offset"])
    assert not [d for d in decided if (d["consumer_group"], d["topic"], d["queue_id"], d["queue_offset"]) ==
                ("G1", "TopicA", 0, 0)]
    simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(replayed[name]["pull_args"])))


def test_bad_input_is_one_line_and_exit_2(replayed, tmp_path, capsys) -> None:
    args = replayed["tag_sql"]["args"]
    store, wh = args[1], args[3]
    cases = [
        (["--store", str(tmp_path / "nowhere"), "--warehouse", wh], "store directory not found"),
        (["--store", store, "--warehouse", str(tmp_path)], "not a warehouse of job 1"),
        (["--store", store, "--warehouse", wh, "--broker-conf", str(tmp_path / "no.conf")], "broker.conf not found"),
    ]
    for argv, message in cases:
        assert simulate_pull.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("simulate_pull: error: ") and message in err and err.count("\n") == 1, err


def test_command_line_help() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    text = subprocess.run([sys.executable, "-m", "jobs.simulate_pull", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=env, check=True).stdout
    for flag in ("--store", "--warehouse", "--dump-id", "--broker-conf", "--subscriptions", "--from", "--queues"):
        assert flag in text


def _explain(spark, wh: str, group: str, *key: str, dump_id: str = "demo") -> explain.Answer:
    args = explain.parser().parse_args(["--warehouse", wh, "--dump-id", dump_id, "--group", group, *key])
    return explain.answer(spark, explain.validate(args))


def test_explain_names_the_layer_and_the_reason(spark, replayed) -> None:
    """On the demo dump: for one unit of each outcome, explain (by each kind of id) states the table's outcome and
    layer, the bloom bits or tag hashes tested, and the SQL92 value the interpreter gives on the message."""
    wh = replayed["warehouse"]
    decisions = rows(spark, wh, "pull_decisions", "demo", ["subscription_index", "queue_id", "queue_offset"])
    messages = {m["commit_log_offset"]: m for m in rows(spark, wh, "messages", "demo", ["commit_log_offset"])}
    filters = rows(spark, wh, "consumer_filters", "demo", ["topic"])
    seen = set()
    for d in decisions:
        kind = (d["outcome"], d["bloom_false_positive"])
        if kind in seen or d["topic"].startswith("%RETRY%"):
            continue
        seen.add(kind)
        m = messages[d["commit_log_offset"]]
        keys = [("--queue", f"{d['topic']}:{d['queue_id']}:{d['queue_offset']}"),
                ("--offset-msg-id", m["offset_msg_id"]), ("--msg-id", m["uniq_key"] or m["offset_msg_id"])]
        key = keys[len(seen) % len(keys)]
        a = _explain(spark, wh, d["consumer_group"], *key)
        assert a.outcomes == {d["commit_log_offset"]: [d["outcome"]]}
        text = "\n".join(a.lines())
        assert f"{d['outcome']}, decided by the {d['layer']} layer" in text
        assert ("bloom false positive" in text) == d["bloom_false_positive"]
        if d["cq_reason"] in ("bloom_hit", "bloom_miss"):
            (f,) = [f for f in filters if (f["consumer_group"], f["topic"]) == (d["consumer_group"], d["topic"])]
            for p in f["bloom_bit_pos"]:
                is_set = d["bloom_bitmap"][p // 8] >> (p % 8) & 1
                assert f"{p} {'set' if is_set else 'not set'}" in text
        if d["sql_value"] is not None:
            expr = d["expression"]
            try:
                result = sql92.compile(expr).evaluate(as_dict(m["properties"]))
                value = {True: "TRUE", False: "FALSE", None: "NULL"}[result]
            except FilterEvaluationError as e:
                value = "ERROR"
                assert e.java_class in text
            assert value == d["sql_value"]
            props = as_dict(m["properties"])
            for name in sql92.compile(expr).referenced_properties:
                assert (f"{name} = {props[name]!r}" if name in props else f"{name} missing") in text
            assert (f"is {value}" in text) if value != "ERROR" else "threw" in text
        if d["outcome"] == "TAG_CLIENT_MISMATCH":
            assert "collision" in text or "no TAGS" in text
    assert {o for o, _ in seen} == {"DELIVERED", "TAG_HASH_MISS", "TAG_CLIENT_MISMATCH", "BLOOM_MISS", "SQL_FALSE",
                                    "SQL_NULL", "SQL_ERROR"}


def test_bodies_the_client_cannot_decode_are_named_and_explained(spark, replayed) -> None:
    """client_decode_scenario: job 1's body_error is set exactly where the real client's decode of the record
    fails (the harness listing), and explain names the failing body or the earlier message of the pull."""
    wh, store = replayed["warehouse"], Path(replayed["client_decode"]["store"])
    listing = json.loads((store.parent / "listing.json").read_text())["records"]
    undecodable = {r["commitLogOffset"] for r in listing if r["sysFlag"] & 1 and r["bodyDecompressed"] is None}
    messages = rows(spark, wh, "messages", "client_decode", ["commit_log_offset"])
    assert undecodable and {m["commit_log_offset"] for m in messages if m["body_error"]} == undecodable
    built = replayed["client_decode"]["built"]
    assert built.undecodable == len(undecodable)
    assert f"bodies the client cannot decode: {len(undecodable)}" in "\n".join(built.lines())
    errors = {m["commit_log_offset"]: m["body_error"] for m in messages}
    decisions = [d for d in rows(spark, wh, "pull_decisions", "client_decode", ["subscription_index", "queue_id",
                                                                                 "queue_offset"])
                 if d["outcome"] == "CLIENT_DECODE_FAILED"]
    failed = next(d for d in decisions if d["reason"] == "client_decode_failed")
    lost = next(d for d in decisions if d["reason"] == "client_decode_lost")
    for d in (failed, lost):
        a = _explain(spark, wh, d["consumer_group"], "--queue", f"{d['topic']}:{d['queue_id']}:{d['queue_offset']}",
                     dump_id="client_decode")
        text = "\n".join(a.lines())
        assert "CLIENT_DECODE_FAILED, decided by the client layer" in text and "decodesBatch" in text
        # job 1 ran without --bodies: explain reads the body back from the store and says what the client meets
        assert f"(read from the store {store}" in text
    text = "\n".join(_explain(spark, wh, failed["consumer_group"], "--queue",
                               f"{failed['topic']}:{failed['queue_id']}:{failed['queue_offset']}",
                               dump_id="client_decode").lines())
    assert f"the client cannot decode it: {errors[failed['commit_log_offset']]}" in text
    assert failed["detail"] == errors[failed["commit_log_offset"]]
    first = next(d for d in decisions if (d["subscription_index"], d["queue_id"], d["pull_index"]) ==
                 (lost["subscription_index"], lost["queue_id"], lost["pull_index"]) and
                 d["reason"] == "client_decode_failed")
    assert f"queue offset {first['queue_offset']} did not decode" in lost["detail"]


def test_explain_a_message_the_group_never_scanned(spark, replayed) -> None:
    wh = replayed["warehouse"]
    payment = next(m for m in rows(spark, wh, "messages", "demo", ["commit_log_offset"])
                   if m["topic"] == "PaymentEvents" and m["keys"])
    a = _explain(spark, wh, "billing-paid", "--key", payment["keys"].split(" ")[0])
    assert payment["commit_log_offset"] in a.outcomes and a.outcomes[payment["commit_log_offset"]] is None
    # the demo ran job 1 with --bodies: the warehouse's own body is shown, as the client decodes it
    body = decompress_body(payment["body"], payment["sys_flag"]).decode()
    assert f"(from the warehouse): {body[:explain.BODY_PREVIEW]!r}" in "\n".join(a.lines())
    assert "does not subscribe to topic PaymentEvents" in "\n".join(a.lines())
    assert _explain(spark, wh, "billing-paid", "--msg-id", "NO-SUCH-ID").lines() == \
        ["no message with --msg-id NO-SUCH-ID in dump 'demo'"]
    with pytest.raises(InputError, match="group 'nobody' has no subscription"):
        _explain(spark, wh, "nobody", "--msg-id", "X")


def test_what_if_reports_gains_and_losses_and_changes_nothing_else(spark, replayed) -> None:
    """On the demo dump: widening billing-paid's selector to OrderShipped gains exactly the OrderShipped orders
    (taken from the messages table, not from the job), a narrower TAG subscription loses exactly the orders it no
    longer names, a candidate that does not compile is refused with its position, and the other tables are the
    same as without the what-ifs."""
    wh = replayed["warehouse"]
    tables = {"pull_decisions": ["subscription_index", "queue_id", "queue_offset"],
              "group_stats": ["subscription_index"], "pulls": ["subscription_index", "queue_id", "pull_index"]}
    before = {t: rows(spark, wh, t, "demo", o) for t, o in tables.items()}
    args = replayed["demo"]["args"] + [
        "--what-if", "billing-paid=SQL92:TAGS IN ('OrderPaid', 'OrderShipped')",
        "--what-if", "order-tag-consumer@TradeOrder=TAG:OrderPaid",
        "--what-if", "vip-orders=SQL92:level >> 4"]
    s = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(args)))
    assert {t: rows(spark, wh, t, "demo", o) for t, o in tables.items()} == before
    (refused,) = s.refused
    assert refused.spec == "vip-orders=SQL92:level >> 4" and refused.position == 7 and "position 7" in refused.reason
    queued = {d["commit_log_offset"] for d in before["pull_decisions"] if d["topic"] == "TradeOrder"}
    orders = {m["commit_log_offset"]: m for m in rows(spark, wh, "messages", "demo", ["commit_log_offset"])
              if m["commit_log_offset"] in queued}
    changes = rows(spark, wh, "what_if", "demo", ["consumer_group", "commit_log_offset"])
    billing = [c for c in changes if c["consumer_group"] == "billing-paid"]
    assert {c["commit_log_offset"] for c in billing if c["change"] == "gained"} == \
        {o for o, m in orders.items() if m["tags"] == "OrderShipped"}
    assert not [c for c in billing if c["change"] == "lost"]
    tag = [c for c in changes if c["consumer_group"] == "order-tag-consumer"]
    assert {c["commit_log_offset"] for c in tag if c["change"] == "lost"} == \
        {o for o, m in orders.items() if m["tags"] in ("OrderShipped", "Aa")}
    assert not [c for c in tag if c["change"] == "gained"]
    (b,) = [w for w in s.what_if if w["consumer_group"] == "billing-paid"]
    assert b["gained"] == len([c for c in billing if c["change"] == "gained"]) and b["lost"] == 0
    assert sum(q["gained"] for q in b["queues"]) == b["gained"] and len(b["examples"]) == 3
    text = "\n".join(s.lines())
    assert "what-if 'vip-orders=SQL92:level >> 4' refused" in text and f"{b['gained']:,} messages gained" in text
    with pytest.raises(InputError, match="no current subscription of group 'nobody'"):
        simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
            replayed["demo"]["args"] + ["--what-if", "nobody=TAG:*"])))


def test_store_and_broker_conf_come_from_job_1s_dumps_table(spark, replayed) -> None:
    """As design.md's command line has it, without --store: job 1 recorded the demo dump's store and broker.conf in
    the dumps table, and job 2 finds them there and decides exactly as with them given; a dump the table does not
    hold is one clear error."""
    wh = replayed["warehouse"]
    (row,) = rows(spark, wh, "dumps", "demo", ["dump_id"])
    assert row["store"] == str(DEMO / "dump") and row["broker_conf"] == str(DEMO / "broker.conf")
    assert row["records"] == 968
    key = ["subscription_index", "queue_id", "queue_offset"]
    before = rows(spark, wh, "pull_decisions", "demo", key)
    args = ["--warehouse", wh, "--dump-id", "demo", "--subscriptions", str(DEMO / "subscriptions.json")]
    s = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(args)))
    assert s.dump_id == "demo" and s.decisions == len(before)
    blocks: list[list[str]] = []  # the summary's block of each subscription, in subscription order
    for line in s.lines()[1:]:
        if line.startswith("  ") and not line.startswith("    "):
            blocks.append([line])
        elif line.startswith("    ") and blocks:
            blocks[-1].append(line)
    truth = replayed["demo"]["truth"]["subscriptions"]
    assert len(blocks) == len(truth)
    checked = 0
    for block, sub in zip(blocks, truth, strict=True):
        units = [u for q in sub.get("queues", []) for u in q["units"]]
        evaluated = sum(u["sqlValue"] is not None for u in units)  # the real broker's commit-log SQL evaluations
        avoided = sum(HARNESS_OUTCOMES.get(u["outcome"], u["outcome"]) == "BLOOM_MISS" for u in units)
        if evaluated or avoided:
            checked += 1
            saved = f", {avoided:,} avoided by the bloom bitmap" if avoided else ""
            assert f"    SQL92 on the broker: {evaluated:,} evaluations{saved}" in block, block
    assert checked >= 2
    assert rows(spark, wh, "pull_decisions", "demo", key) == before
    with pytest.raises(InputError, match="dump 'nope' is not recorded"):
        simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
            ["--warehouse", wh, "--dump-id", "nope"])))


def test_the_documented_sql_gives_the_row_form(spark, replayed) -> None:
    """docs/simulate_pull.md's plain SQL over the stored tables gives exactly row_forms.pull_decisions' rows (on a
    dump with SQL errors, bloom tests and decode failures: every column, the detail and the pull included), and the
    stored matrix is one row per scanned unit, far fewer rows than decisions."""
    wh = replayed["warehouse"]
    doc = (ROOT / "docs" / "simulate_pull.md").read_text(encoding="utf-8")
    assert row_forms.PULL_DECISIONS_SQL in doc
    key = ["subscription_index", "queue_id", "queue_offset"]
    for name in ("demo", "client_decode"):
        by_sql = spark.sql(row_forms.PULL_DECISIONS_SQL.format(warehouse=wh, dump_id=name)).orderBy(*key)
        assert by_sql.columns == row_forms.tables.PULL_DECISIONS.names
        decided = rows(spark, wh, "pull_decisions", name, key)
        assert by_sql.toArrow().to_pylist() == decided and decided
        units = read_dump(spark, wh, "pull_decisions", name).count()
        assert units == len({(d["topic"], d["queue_id"], d["queue_offset"]) for d in decided})
        assert units < len(decided) or name != "demo"


def test_delivered_bodies_come_from_the_dump_when_the_warehouse_has_none(spark, replayed) -> None:
    """The demo dump's tables copied under another dump id with every body nulled (a body-less `messages`):
    delivered_messages reads each body from the store given, inflated as the client does, and gives exactly the
    rows it gives with the bodies in the warehouse; with no store to read, the bodies are null and nothing else
    changes."""
    from pyspark.sql import functions as F

    from jobs.delta_io import replace_dump

    wh, copy = replayed["warehouse"], "demo_bodiless"
    for t in ("pull_decisions", "decision_details", "decision_codes", "pulls", "group_stats", "messages"):
        df = read_dump(spark, wh, t, "demo").withColumn("dump_id", F.lit(copy))
        if t == "messages":
            df = df.withColumn("body", F.lit(None).cast("binary"))
        replace_dump(df.localCheckpoint(), wh, t, copy)
    key = ["subscription_index", "queue_id", "queue_offset"]
    want = [dict(r, dump_id=copy) for r in rows(spark, wh, "delivered_messages", "demo", key)]
    assert want and any(r["sys_flag"] & 1 for r in want)  # compressed bodies among them
    got = row_forms.delivered_messages(spark, wh, copy, store=str(DEMO / "dump")).orderBy(*key)
    sizes = [r.pop("stored_body_size") for r in want]
    got_rows = got.toArrow().to_pylist()
    assert [r.pop("stored_body_size") for r in got_rows] == sizes  # job 1's body_size: the size stays
    assert got_rows == want
    bare = row_forms.delivered_messages(spark, wh, copy).orderBy(*key).toArrow().to_pylist()
    assert [r["body"] for r in bare] == [None] * len(want)
    assert [{k: v for k, v in r.items() if k not in ("body", "stored_body_size")} for r in bare] == \
        [{k: v for k, v in r.items() if k != "body"} for r in want]
