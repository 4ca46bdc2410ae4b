"""Shared pytest fixtures: one SparkSession (local[2], Delta wired in) for the whole run; Hypothesis profiles."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import settings

# `make test` (and so CI) must be reproducible: the "ci" profile derandomizes (every run tries the same
# examples), drops the deadline (a loaded machine must not turn slowness into failures) and prints a blob to
# replay a failure. `make test` selects it with HYPOTHESIS_PROFILE=ci, as does CI=true; a plain `pytest` keeps
# Hypothesis's default profile, which explores new examples on every run.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default"))


SLOW_FIRST = ("test_simulate_pull", "test_runs", "test_cluster", "test_group_replay", "test_rocksdb_queues",
              "test_history", "test_build_queues", "test_faults", "test_store_recovery_reference", "test_engine",
              "test_group_harness", "test_history_pull", "test_demo_run", "test_store_remote", "test_upgrade")
"""The modules that take longest (harness runs and job runs in their fixtures), collected first: `make test`'s
workers take a module at a time in collection order (--dist loadfile --no-loadscope-reorder), so the longest start
at once and the short ones fill in behind them instead of one long module running alone at the end."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules of SLOW_FIRST first (the rest in their order). Tests marked s3a (a Delta warehouse on S3: the
    ~650 MB S3A jars of `make s3-jars`, a SparkSession of their own) are deselected, not skipped, unless the -m
    expression names s3a: `make s3-warehouse-test` runs them (`pytest -m s3a tests/test_warehouse_s3.py`),
    `make test` never collects them."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda i: rank.get(i.path.stem, len(rank)))  # stable: each module's own order is kept
    if "s3a" in (config.getoption("markexpr") or ""):
        return
    keep = [i for i in items if i.get_closest_marker("s3a") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("s3a") is not None])
        items[:] = keep


GROUP_RUNS = {"test_group_replay": ("group_scenario", "cluster_group_scenario", "kinds_group_scenario"),
              "test_group_harness": ("two_groups_scenario", "kinds_group_scenario")}
"""The harness `group` runs (tests/scenarios.py functions) each module reads, in the order it reads them (the
modules as SLOW_FIRST starts them)."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """When the group modules are selected, one process of the run (the first worker, or the only process) starts
    their harness `group` runs (GROUP_RUNS) in a background thread. Each run is a name server, brokers and
    real clients in one JVM: about 40 s, most of it waiting on the clients' rebalance and the brokers' shutdown,
    little CPU. Started early, that wait overlaps other modules' work instead of holding a worker; a group module
    reaching its run first waits on the harness's lock for that run and then reads its cached answer. A failure
    here is left to the module, whose own call runs the harness again and reports it."""
    config = session.config
    worker = getattr(config, "workerinput", {}).get("workerid", "gw0")
    selected = {i.path.stem for i in session.items}
    wanted = list(dict.fromkeys(name for module, names in GROUP_RUNS.items() if module in selected for name in names))
    if worker != "gw0" or not wanted:
        return

    def prefetch() -> None:
        import refharness
        import scenarios

        for name in wanted:
            try:
                refharness.run_group(getattr(scenarios, name)())
            except Exception:  # noqa: BLE001 (reported by the module that needs the run)
                pass

    config.stash[_PREFETCH] = thread = threading.Thread(target=prefetch, name="group-prefetch", daemon=True)
    thread.start()


_PREFETCH = pytest.StashKey[threading.Thread]()


def pytest_unconfigure(config: pytest.Config) -> None:
    """A prefetch still running ends with the session: its harness runs are left whole, never half cached."""
    thread = config.stash.get(_PREFETCH, None)
    if thread is not None:
        thread.join()


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
            # One JVM serves the whole suite (~800 tests, thousands of Delta tables): 2g ran out late in a run
            # (a broadcast failed for lack of heap), so more heap, and the caches that only grow bounded.
            "spark.driver.memory": "4g",
            "spark.databricks.delta.delta.log.cacheSize": "200",
            "spark.sql.ui.retainedExecutions": "50",
            "spark.ui.retainedJobs": "100",
            "spark.ui.retainedStages": "100",
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
