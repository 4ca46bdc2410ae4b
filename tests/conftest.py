"""Shared pytest fixtures: one SparkSession (local[2], Delta wired in) for the whole run; Hypothesis profiles."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# `make test` (and so CI) must be reproducible: the "ci" profile derandomizes (every run tries the same
# examples), drops the deadline (a loaded machine must not turn slowness into failures) and prints a blob to
# replay a failure. `make test` selects it with HYPOTHESIS_PROFILE=ci, as does CI=true; a plain `pytest` keeps
# Hypothesis's default profile, which explores new examples on every run.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default"))


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
