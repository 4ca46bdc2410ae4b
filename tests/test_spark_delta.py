"""Delta for real: the session builder's Spark writes a Delta table with delta-spark and reads it back."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.spark


def test_delta_round_trip_writes_a_real_delta_log(spark, tmp_path):
    table = tmp_path / "messages"
    rows = [(i, f"topic-{i % 3}", f"Tag{i % 2}") for i in range(50)]
    df = spark.createDataFrame(rows, "commit_log_offset long, topic string, tags string")
    df.write.format("delta").mode("overwrite").save(str(table))

    back = spark.read.format("delta").load(str(table))
    assert sorted(tuple(r) for r in back.collect()) == rows

    log = sorted((table / "_delta_log").glob("*.json"))
    assert [p.name for p in log] == ["00000000000000000000.json"]
    actions = [json.loads(line) for line in log[0].read_text().splitlines()]
    kinds = {next(iter(a)) for a in actions}
    assert {"protocol", "metaData", "add", "commitInfo"} <= kinds
    schema = json.loads(next(a["metaData"] for a in actions if "metaData" in a)["schemaString"])
    assert [f["name"] for f in schema["fields"]] == ["commit_log_offset", "topic", "tags"]


def test_delta_overwrite_is_a_new_version_not_a_duplicate(spark, tmp_path):
    table = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string")
    df.write.format("delta").mode("overwrite").save(table)
    df.write.format("delta").mode("overwrite").save(table)
    from delta.tables import DeltaTable

    assert spark.read.format("delta").load(table).count() == 2
    history = DeltaTable.forPath(spark, table).history().select("version").collect()
    assert sorted(r.version for r in history) == [0, 1]


def test_state_reconstruction_spreads_over_the_sessions_cores_unless_told(spark):
    """Delta's 50 partitions for a table's state (a checkpoint every tenth commit) become the session's default
    parallelism when the user set none; a value the user set is kept."""
    from jobs.spark import SNAPSHOT_PARTITIONS, default_snapshot_partitions

    given = spark.conf.get(SNAPSHOT_PARTITIONS)
    try:
        spark.conf.unset(SNAPSHOT_PARTITIONS)
        default_snapshot_partitions(spark)
        assert spark.conf.get(SNAPSHOT_PARTITIONS) == str(max(2, spark.sparkContext.defaultParallelism))
        spark.conf.set(SNAPSHOT_PARTITIONS, "7")
        default_snapshot_partitions(spark)
        assert spark.conf.get(SNAPSHOT_PARTITIONS) == "7"
    finally:
        spark.conf.set(SNAPSHOT_PARTITIONS, given)


def test_sessions_read_versions_older_than_the_deleted_file_retention(spark):
    """delta-spark 4.4 refuses time travel past delta.deletedFileRetentionDuration (7 days) unless this key is
    false; the jobs read pinned versions, so every session `build_session` makes (the suite's is one) turns the
    refusal off. (test_upgrade reads a bundled warehouse whose commits are older than 7 days through it.)"""
    key = "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration"
    assert spark.conf.get(key) == "false"


def test_small_inputs_share_tasks_and_large_ones_keep_a_task_each():
    """jobs.spark.task_count: a broker's split-sized commitlog ranges (or a large dump's files) keep a task each;
    inputs far smaller than the target share tasks, a target's worth each, never fewer than the cores while there
    are inputs for them, never more tasks than inputs."""
    from jobs.spark import task_count

    split = 256 << 20
    assert task_count([split] * 16, 2, split) == 16  # 4 GiB of 1 GiB files cut in 256 MiB ranges
    assert task_count([split, split, split, 100], 2, split) == 4  # a file's short last range: still its own
    assert task_count([4096] * 10, 2, split) == 2  # a test store of ten 4 KiB files: the cores
    assert task_count([4096] * 10, 64, split) == 10  # a cluster's cores: a task an input, no more
    assert task_count([1 << 20] * 100, 8, 8 << 20) == 13  # 100 MiB of 1 MiB files: 8 MiB a task
    assert task_count([3_300_000] * 4, 2, 2 << 20) == 4  # job 2's consume_queue files of a 1 GiB dump
    assert task_count([4096], 8, split) == 1
    assert task_count([], 2, split) == 1  # an empty store still runs its (empty) stage
