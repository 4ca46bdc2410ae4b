"""The release a dump came from, told by its own files (`brokerversion.detect`, issue 18 item 1), on stores the real
5.3.3 and 5.5.1 brokers wrote (file and RocksDB queues); both jobs default to it and an explicit flag wins."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import refharness
import scenarios
from support.job_runs import broker_conf

from filterlib import brokerversion
from filterlib.brokerversion import BrokerVersion, detect
from filterlib.store.storedir import StoreDir
from jobs import build_queues, simulate_pull
from jobs.runs import read_dump

pytestmark = [pytest.mark.reference]


def rocksdb(scenario: dict) -> dict:
    """The scenario written by a broker with storeType=defaultRocksDB."""
    return {**scenario, "store": {**scenario.get("store", {}), "storeType": "defaultRocksDB"}}


def written(scenario: dict, version: str) -> tuple[Path, dict]:
    """The store a release's broker wrote for a scenario, and its write report."""
    out = refharness.write_store(scenario, version)
    report = json.loads((out / "report.json").read_text())
    assert report["rocketmqVersion"] == "V" + version.replace(".", "_")
    return out / "store", report


def opened(store: Path, report: dict) -> StoreDir:
    return StoreDir(str(store), store_type=report["store"]["storeType"])


@pytest.mark.parametrize("kind", ["file", "rocksdb"])
def test_a_533_store_is_detected_as_533(kind) -> None:
    """No mark of 5.4.0 or later, and a topic table without the system topics every 5.4.0+ broker adds."""
    sc = scenarios.tag_and_sql_scenario(1)
    store, report = written(rocksdb(sc) if kind == "rocksdb" else sc, "5.3.3")
    version, evidence = detect(opened(store, report))
    assert version == brokerversion.V5_3_3, evidence
    assert "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC" in evidence and "before 5.4.0" in evidence
    assert not (store / "rocksdbstore").exists()


def test_a_551_rocksdb_store_is_detected_as_551() -> None:
    """The RocksDB queues' OPTIONS file lacks the Java compaction filter factory 5.3.3 to 5.5.0 install."""
    store, report = written(rocksdb(scenarios.tag_and_sql_scenario(1)), "5.5.1")
    version, evidence = detect(opened(store, report))
    assert version == brokerversion.V5_5_1, evidence
    assert "ConsumeQueueCompactionFilterFactory" in evidence and "pass --broker-version" not in evidence
    # the marks of the older releases are there too; the newest bounds the release
    from filterlib.store import releasemarks
    since = {m.since for m in releasemarks.marks(opened(store, report))}
    assert since == {"5.5.1", "5.4.0"}


def test_a_551_file_store_is_detected_as_550_the_oldest_release_it_allows() -> None:
    """A file-queue 5.5.1 store with bitmaps on shows 5.5.0's checkpoint (logicsPhysicalOffset at byte 40) and
    nothing only 5.5.1 writes: the oldest consistent release is 5.5.0, and the evidence says 5.5.1 is possible."""
    store, report = written(scenarios.tag_and_sql_scenario(1), "5.5.1")
    assert report["broker"]["enableCalcFilterBitMap"]
    version, evidence = detect(opened(store, report))
    assert version == BrokerVersion(5, 5, 0), evidence
    assert "logicsPhysicalOffset" in evidence and "5.5.1" in evidence and "--broker-version" in evidence


def test_a_551_store_with_bitmaps_off_is_detected_as_551() -> None:
    """5.5.1 persists SQL92 records without bloom data when enableCalcFilterBitMap is off; no earlier release does."""
    store, report = written(scenarios.bitmap_off_restart_scenario(1), "5.5.1")
    assert not report["broker"]["enableCalcFilterBitMap"]
    version, evidence = detect(opened(store, report))
    assert version == brokerversion.V5_5_1, evidence
    assert "bloomFilterData" in evidence
    store_533, report_533 = written(scenarios.bitmap_off_restart_scenario(1), "5.3.3")
    assert detect(opened(store_533, report_533))[0] == brokerversion.V5_3_3


def test_a_dump_of_commitlog_only_tells_nothing(tmp_path) -> None:
    store, _ = written(scenarios.tag_and_sql_scenario(1), "5.5.1")
    shutil.copytree(store / "commitlog", tmp_path / "bare" / "commitlog")
    version, evidence = detect(StoreDir(str(tmp_path / "bare")))
    assert version is None
    assert evidence.startswith("nothing in the dump tells") and "--broker-version 4.9.7" in evidence


@pytest.mark.spark
def test_both_jobs_default_to_the_detected_release_and_a_flag_wins(spark, tmp_path) -> None:
    """Job 1 without --broker-version replays a 5.5.1 RocksDB dump as 5.5.1, says why and records it; job 2 takes
    the recorded release; --broker-version 5.3.3 on either job wins and is said to be given."""
    sc = rocksdb(scenarios.tag_and_sql_scenario(1))
    store, report = written(sc, "5.5.1")
    conf = broker_conf(tmp_path / "broker.conf", report["broker"], report["store"])
    with open(conf, "a") as f:
        f.write("storeType=defaultRocksDB\n")
    wh = str(tmp_path / "wh")
    base = ["--store", str(store), "--warehouse", wh, "--broker-conf", conf, "--dump-id", "d"]
    s1 = build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(base)))
    lines = s1.lines()
    assert lines[0].startswith("dump d (broker 5.5.1)")
    assert any(x.startswith("broker version 5.5.1 (detected: ") for x in lines), lines
    assert read_dump(spark, wh, "dumps", "d").first().broker_version == "5.5.1"
    s2 = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
        ["--warehouse", wh, "--dump-id", "d"])))
    assert "broker version 5.5.1 (recorded by job 1 in the dumps table)" in s2.lines()
    # with --store too, job 2 keeps the release job 1 recorded for the same store; another dump id detects
    s3 = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
        ["--warehouse", wh, "--dump-id", "d", "--store", str(store), "--broker-conf", conf])))
    assert "broker version 5.5.1 (recorded by job 1 in the dumps table)" in s3.lines()
    flagged = build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(
        base + ["--broker-version", "5.3.3"])))
    assert "broker version 5.3.3 (given by --broker-version)" in flagged.lines()
    assert read_dump(spark, wh, "dumps", "d").first().broker_version == "5.3.3"
    s5 = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
        ["--warehouse", wh, "--dump-id", "d", "--store", str(store), "--broker-conf", conf])))
    assert "broker version 5.3.3 (recorded by job 1 in the dumps table)" in s5.lines()
    s4 = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
        ["--warehouse", wh, "--dump-id", "d", "--broker-version", "5.5.1"])))
    assert "broker version 5.5.1 (given by --broker-version)" in s4.lines()
