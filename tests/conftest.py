"""Shared pytest fixtures: one SparkSession (local[2], Delta wired in) for the whole run; Hypothesis profiles."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# CI (which runs with CI=true) must be reproducible: derandomize makes every run try the same examples, no
# deadline (a loaded machine must not turn slowness into failures), and print_blob lets a failure be replayed
# locally. Elsewhere the default profile keeps exploring new examples.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


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
