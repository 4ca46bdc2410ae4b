"""Shared pytest fixtures: one SparkSession (local[2], Delta wired in) for the whole run."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The session-scoped SparkSession every Spark test shares (built by the jobs' own builder)."""
    from jobs.spark import build_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = build_session(
        "rocketmq-filter-replay-tests",
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.driver.memory": "2g",
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
