"""RocksDB consume queues (storeType=defaultRocksDB, issue 18 part 3) on real 5.3.3 stores written by the harness:
the reader gives the units the broker's own iterator lists, job 2's decisions, pulls and deliveries over the dump's
own RocksDB queues equal the real pull replay, job 1's --verify finds the rebuild equal to them, the configs kept in
RocksDB are read, and a queue directory the jobs cannot read, or a dump without queues for its topics, is one
sentence and exit code 2 instead of a silent replay of nothing."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import refharness
import scenarios
from support.job_runs import broker_conf, compare, subscriptions_file

from filterlib.replay.from_store import load_queue
from filterlib.replay.plans import committed_offsets
from filterlib.store.queues import FILE, ROCKSDB, queue_kind
from filterlib.store.storedir import StoreDir
from jobs import build_queues, simulate_pull

pytestmark = [pytest.mark.reference, pytest.mark.spark]
SCENARIOS = {"tag_sql": lambda: scenarios.tag_and_sql_scenario(1), "varied": lambda: scenarios.varied_scenario(4),
             # the same, written and pulled by the real 5.5.1 broker, replayed with --broker-version 5.5.1
             "tag_sql_551": lambda: scenarios.tag_and_sql_scenario(1),
             "varied_551": lambda: scenarios.varied_scenario(4)}


def version_of(name: str) -> str:
    """The release whose broker writes and pulls a scenario's store."""
    return "5.5.1" if name.endswith("_551") else refharness.DEFAULT_VERSION


def rocksdb(scenario: dict) -> dict:
    """The scenario written by a broker with storeType=defaultRocksDB."""
    return {**scenario, "store": {**scenario.get("store", {}), "storeType": "defaultRocksDB"}}


def rocksdb_conf(path: Path, report: dict) -> str:
    """The harness run's broker.conf, with its storeType as a RocksDB broker's broker.conf has it."""
    conf = broker_conf(path, report["broker"], report["store"])
    with open(conf, "a") as f:
        f.write(f"storeType={report['store']['storeType']}\n")
    return conf


@pytest.fixture(scope="module")
def rocks(spark, tmp_path_factory) -> dict:
    """Each scenario on a RocksDB store: job 1 (with --verify), job 2, and the real pull replay of the store."""
    out = {}
    wh = str(tmp_path_factory.mktemp("warehouse"))
    for name, make in SCENARIOS.items():
        scenario = rocksdb(make())
        run = refharness.write_store(scenario, version_of(name))
        report = json.loads((run / "report.json").read_text())
        tmp = tmp_path_factory.mktemp(name)
        conf = rocksdb_conf(tmp / "broker.conf", report)
        subs = subscriptions_file(tmp / "subs.json", scenario["subscriptions"])
        store = str(run / "store")
        args = ["--store", store, "--warehouse", wh, "--broker-conf", conf, "--dump-id", name,
                "--broker-version", version_of(name)]
        built = build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args + ["--verify"])))
        summary = simulate_pull.run(spark, simulate_pull.validate(
            simulate_pull.parser().parse_args(args + ["--subscriptions", subs])))
        truth = refharness.pull({"storeDir": store, "broker": report["broker"], "store": report["store"],
                                 "subscriptions": scenario["subscriptions"]}, version_of(name))
        out[name] = {"scenario": scenario, "run": run, "report": report, "built": built, "summary": summary,
                     "truth": truth, "args": args + ["--subscriptions", subs], "store": store, "conf": conf}
    out["warehouse"] = wh
    return out


def test_the_harness_wrote_a_rocksdb_store(rocks) -> None:
    """The premise: consumequeue/ is one RocksDB database, no ext files, configs in RocksDB directories."""
    for name in SCENARIOS:
        root = Path(rocks[name]["store"])
        assert rocks[name]["report"]["store"]["storeType"] == "defaultRocksDB"
        assert (root / "consumequeue" / "CURRENT").is_file()
        assert not (root / "consumequeue_ext").exists()
        assert (root / "config" / "topics" / "CURRENT").is_file()
        assert not (root / "config" / "topics.json").exists()
        assert queue_kind(str(root), "defaultRocksDB") == ROCKSDB


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_reader_gives_the_units_the_brokers_iterator_lists(rocks, name) -> None:
    """Per queue: min and max offset as getMinOffsetInQueue / getMaxOffsetInQueue answer, and every unit's commit
    log offset, size and tagsCode as the real RocksDBConsumeQueue iterator gave them to the harness listing, with
    the record's store time in the value."""
    check_reader(rocks[name]["run"], rocks[name]["store"], rocks[name]["conf"])


def check_reader(run: Path, root: str, conf: str | None) -> None:
    """The reader against the harness listing and report of one RocksDB store run."""
    store = StoreDir(root, broker_conf=conf)
    listing = json.loads((run / "listing.json").read_text())
    want = defaultdict(dict)
    times = defaultdict(dict)
    for r in listing["records"]:
        cq = r.get("cq")
        if cq:
            key = (r["topic"], r["queueId"])
            want[key][r["queueOffset"]] = (r["commitLogOffset"], r["size"], int(cq["tagsCode"]))
            times[key][r["queueOffset"]] = r["storeTimestamp"]
    queues = json.loads((run / "report.json").read_text())["queues"]
    assert sorted(store.queue_ids()) == sorted((q["topic"], q["queueId"]) for q in queues)
    for q in queues:
        key = (q["topic"], q["queueId"])
        got = load_queue(store, *key)
        assert (got.min_offset, got.min_offset + len(got.size)) == (q["minOffset"], q["maxOffset"]), q
        assert not got.ext.has_ext.any() and got.units_per_file == 0
        mine = {got.min_offset + i: (int(c), int(s), int(t)) for i, (c, s, t) in
                enumerate(zip(got.commit_log_offset, got.size, got.ext.tags_code, strict=True))}
        assert mine == want[key], q
        cols = store.queue_columns(*key)
        assert dict(zip(cols.queue_offset.tolist(), cols.store_time.tolist(), strict=True)) == times[key], q


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_decisions_pulls_and_deliveries_equal_the_real_pull_on_rocksdb(spark, rocks, name) -> None:
    """Job 2 over the dump's own RocksDB queues: every decision, pull and delivered message as the real broker's."""
    units, calls, msgs, problems = compare(spark, rocks["warehouse"], name, rocks[name]["truth"])
    assert not problems, problems[:3]
    summary = rocks[name]["summary"]
    assert summary.queues_source == "dump" and summary.queues > 0
    assert any("is a RocksDB database" in n for n in summary.notes)
    assert units == summary.decisions > 0 and calls == summary.pulls and msgs > 0
    assert all(s["bloom_tested"] == 0 for s in summary.stats)  # RocksDB queues carry no ext bitmaps
    batch = {(s["group"], s["topic"]): s["batchSize"] for s in rocks[name]["truth"]["subscriptions"]}
    spans = [c["nextBeginOffset"] - c["requestOffset"] for s in rocks[name]["truth"]["subscriptions"]
             for q in s["queues"] for c in q["calls"]]
    assert max(spans) > 10  # one call read past the 10-unit CQ file a file store would stop at
    # 5.3.3 reads one batch of units per call; 5.5.1's RocksDBReusableIterator reads on to the queue's end
    assert (max(spans) <= max(batch.values())) == (version_of(name) == "5.3.3")


def test_rebuilt_queues_of_a_rocksdb_dump_are_pulled_as_the_broker_pulls_its_own(spark, rocks) -> None:
    """--queues rebuilt on a RocksDB dump: job 1 rebuilt it without ext units and job 2 pages the rebuild a batch
    at a time, so every decision, pull and delivery still equals the real pull (this replaces tag_sql's tables)."""
    summary = simulate_pull.run(spark, simulate_pull.validate(
        simulate_pull.parser().parse_args(rocks["tag_sql"]["args"] + ["--queues", "rebuilt"])))
    assert summary.queues_source == "rebuilt" and summary.decisions > 0
    assert any("RocksDB" in n for n in summary.notes)
    units, calls, msgs, problems = compare(spark, rocks["warehouse"], "tag_sql", rocks["tag_sql"]["truth"])
    assert not problems, problems[:3]
    assert units == summary.decisions and calls == summary.pulls


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_verify_finds_the_rebuild_equal_to_the_rocksdb_queues(rocks, name) -> None:
    verify = rocks[name]["built"].verify
    queues = rocks[name]["report"]["queues"]
    assert verify.differences == 0, verify.first[:3]
    assert verify.total("dump_units") == sum(q["maxOffset"] - q["minOffset"] for q in queues) > 0
    assert verify.total("rebuild_units") == verify.total("dump_units")


def test_committed_offsets_and_groups_come_from_the_rocksdb_configs(rocks) -> None:
    scenario = rocks["varied"]["scenario"]
    store = StoreDir(rocks["varied"]["store"], broker_conf=rocks["varied"]["conf"])
    offsets = committed_offsets(store.config("consumerOffset"))
    assert offsets == {(o["group"], o["topic"], o["queueId"]): o["offset"] for o in scenario["offsets"]}
    groups = set(store.config("subscriptionGroup")["subscriptionGroupTable"])
    assert {s["group"] for s in scenario["subscriptions"]} <= groups
    topics = store.config("topics")["topicConfigTable"]
    assert {t["name"] for t in scenario["topics"]} <= set(topics)


def test_a_double_write_dump_is_read_as_its_store_type_says(tmp_path) -> None:
    """rocksdbCQDoubleWriteEnable: file queues and a RocksDB database in one consumequeue/; the default storeType
    reads the files, defaultRocksDB the database, and both hold the same units."""
    run = refharness.write_store({**scenarios.tag_and_sql_scenario(1),
                                  "store": {**scenarios.tag_and_sql_scenario(1)["store"],
                                            "rocksdbCQDoubleWriteEnable": True}})
    root = str(run / "store")
    files, rocks = StoreDir(root), StoreDir(root, store_type="defaultRocksDB")
    assert (files.queue_kind, rocks.queue_kind) == (FILE, ROCKSDB)
    assert files.queue_ids() == rocks.queue_ids() and files.queue_ids()
    for topic, qid in files.queue_ids():
        a, b = load_queue(files, topic, qid), load_queue(rocks, topic, qid)
        assert a.min_offset == b.min_offset and a.units_per_file > 0 and b.units_per_file == 0
        assert np.array_equal(a.commit_log_offset, b.commit_log_offset) and np.array_equal(a.size, b.size)
        assert np.array_equal(a.ext.tags_code, b.ext.tags_code)


def test_an_unreadable_rocksdb_queue_dir_is_one_sentence_and_exit_2(spark, rocks, tmp_path, capsys) -> None:
    """A consumequeue/ database whose CURRENT names a manifest that is not there: job 2 and job 1 --verify refuse,
    naming the directory, rather than replaying or verifying zero queues."""
    store = tmp_path / "broken"
    shutil.copytree(rocks["tag_sql"]["store"], store)
    (store / "consumequeue" / "CURRENT").write_text("MANIFEST-999999\n")
    args = rocks["tag_sql"]["args"]
    argv = ["--store", str(store), *args[2:]]
    assert simulate_pull.main(argv, spark=spark) == 2
    err = capsys.readouterr().err
    assert err.startswith("simulate_pull: error: ") and err.count("\n") == 1, err
    assert str(store / "consumequeue") in err and "RocksDB" in err
    assert build_queues.main([a for a in argv if a not in args[-2:]] + ["--verify"], spark=spark) == 2
    err = capsys.readouterr().err
    assert err.startswith("build_queues: error: ") and err.count("\n") == 1, err
    assert str(store / "consumequeue") in err


def test_a_file_dump_without_queues_for_its_topics_is_refused(spark, tmp_path, capsys) -> None:
    """A file-queue dump whose subscribed topic has messages but no queue directory: job 2 says so and exits 2;
    with --queues rebuilt it pulls job 1's rebuild and the summary says so. An empty rocksdbstore/ beside file
    queues changes nothing."""
    scenario = scenarios.tag_and_sql_scenario(1)
    run = refharness.write_store(scenario)
    report = json.loads((run / "report.json").read_text())
    store = tmp_path / "noqueues"
    shutil.copytree(run / "store", store)
    (store / "rocksdbstore").mkdir()
    assert StoreDir(str(store)).queue_kind == FILE
    shutil.rmtree(store / "consumequeue" / scenarios.TOPIC)
    conf = broker_conf(tmp_path / "broker.conf", report["broker"], report["store"])
    subs = subscriptions_file(tmp_path / "subs.json", scenario["subscriptions"])
    wh = str(tmp_path / "wh")
    args = ["--store", str(store), "--warehouse", wh, "--broker-conf", conf, "--dump-id", "noqueues"]
    assert build_queues.main(args, spark=spark) == 0
    capsys.readouterr()
    assert simulate_pull.main(args + ["--subscriptions", subs], spark=spark) == 2
    err = capsys.readouterr().err
    assert err.startswith("simulate_pull: error: ") and err.count("\n") == 1, err
    assert str(store / "consumequeue") in err and scenarios.TOPIC in err and "--queues rebuilt" in err
    assert simulate_pull.main(args + ["--subscriptions", subs, "--queues", "rebuilt"], spark=spark) == 0
    out = capsys.readouterr().out
    assert "consume queues from the rebuilt" in out
    decisions = int(out.rsplit("\ndecisions ", 1)[1].split(", delivered")[0].replace(",", ""))
    assert decisions > 0


def test_committed_offsets_only_in_a_v2_config_database_are_refused(spark, rocks, tmp_path, capsys) -> None:
    """No consumerOffset.json and no config/consumerOffsets/, but config/rdb/ (configManagerVersion=v2, one RocksDB
    database this version does not read): --from committed refuses, naming config/rdb/, instead of pulling every
    queue from 0 as if no offset had been committed."""
    store = tmp_path / "v2"
    shutil.copytree(rocks["tag_sql"]["store"], store)
    shutil.move(store / "config" / "consumerOffsets", store / "config" / "rdb")
    with pytest.raises(ValueError, match="configManagerVersion=v2"):
        StoreDir(str(store)).config("consumerOffset")
    args = rocks["tag_sql"]["args"]
    assert simulate_pull.main(["--store", str(store), *args[2:], "--from", "committed"], spark=spark) == 2
    err = capsys.readouterr().err
    assert err.startswith("simulate_pull: error: ") and err.count("\n") == 1, err
    assert str(store / "config" / "rdb") in err and "--from committed" in err
