"""One consistent snapshot per run (jobs.runs): both jobs stopped after one table and after several, and killed with
SIGKILL after the last, leave readers on the previous complete run; a following complete run moves them forward.

Job 1 first builds the bundled demo dump (store A) and job 2 replays it, in this process. Then job 1 runs as a
process on store B (the demo dump without its last commitlog file: fewer messages, other rows in every table) and
is stopped once a given table's Delta commit appears in its `_delta_log` (killed at the last such table); read_dump,
job 2, explain and report must still see A. Job 2 is stopped and killed the same way with fewer subscriptions.
Complete runs then move the readers to B.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.job_process import start_job

from jobs import build_queues, report, simulate_pull
from jobs.delta_io import last_version, table_path
from jobs.runs import read_dump, read_rows

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
DUMP = "demo"
JOB1 = ("dump_files", "consumer_filters", "consume_queue", "messages", "dumps")  # in the order job 1 writes them
JOB2 = ("pull_decisions", "decision_details", "pulls", "decision_codes", "group_stats")  # as job 2 writes them


def _snapshot(spark, wh: str, names: tuple[str, ...], latest: bool = False) -> dict[str, tuple[int, int]]:
    """Each table's (row count, order-free checksum of every column) for the dump, as read_dump reads it: the
    tables' sums in one Spark job (a union), not one job a table."""
    from functools import reduce

    from pyspark.sql import functions as F

    parts = []
    for t in names:
        df = read_dump(spark, wh, t, DUMP, latest=latest)
        parts.append(df.select(F.lit(t).alias("t"), F.xxhash64(F.to_json(F.struct(*df.columns)))
                               .cast("decimal(38,0)").alias("h")))
    sums = {r.t: (r.n, int(r.s or 0)) for r in reduce(lambda a, b: a.unionByName(b), parts).groupBy("t").agg(
        F.count(F.lit(1)).alias("n"), F.sum("h").alias("s")).collect()}
    return {t: sums.get(t, (0, 0)) for t in names}


def _runs(spark, wh: str) -> list[dict]:
    """The dump's runs rows, oldest first, as the jobs read them (the files the runs table's newest log names)."""
    return sorted(read_rows(spark, wh, "runs", DUMP, latest=True), key=lambda r: r["finished_at"])


def _commits(wh: str, table: str) -> int:
    log = Path(wh) / table / "_delta_log"
    return max((int(p.stem) for p in log.glob("*.json")), default=-1) if log.is_dir() else -1


def _stopped_at(argv: list[str], wh: str, tables: tuple[str, ...]) -> Iterator[str]:
    """Run a job as a process and stop it (SIGSTOP, its whole process group) as soon as each of `tables`, in the
    order the job writes them, gets a new commit; yield the table while it is stopped, then let it go on (SIGCONT).
    A stopped process writes nothing, so the warehouse at each stop is what a SIGKILL at that instant leaves; after
    the last table the process is SIGKILLed. One process serves every kill point (a process per point started a JVM
    and Spark, and redid the job's work up to the point, each time)."""
    before = {t: _commits(wh, t) for t in tables}
    proc = start_job(*argv, stdout=subprocess.DEVNULL)
    try:
        for i, table in enumerate(tables):
            deadline = time.monotonic() + 600
            while _commits(wh, table) == before[table]:
                if proc.poll() is not None:
                    pytest.fail(f"the job ended before committing {table}: {proc.stderr.read()[-3000:]}")
                assert time.monotonic() < deadline, f"no commit of {table}"
                time.sleep(0.005)
            os.killpg(proc.pid, signal.SIGKILL if i == len(tables) - 1 else signal.SIGSTOP)
            yield table
            if i < len(tables) - 1:
                os.killpg(proc.pid, signal.SIGCONT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
    assert proc.returncode == -signal.SIGKILL, "the job ended by itself before the kill"


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, str]:
    """Store A (the demo dump) and store B (a copy without its last commitlog file)."""
    b = tmp_path_factory.mktemp("store-b") / "dump"
    shutil.copytree(DEMO / "dump", b)
    last = sorted((b / "commitlog").iterdir())[-1]
    last.unlink()
    return {"A": str(DEMO / "dump"), "B": str(b)}


def _job1_args(wh: str, store: str) -> list[str]:
    return ["--store", store, "--warehouse", wh, "--broker-conf", str(DEMO / "broker.conf"), "--dump-id", DUMP]


def _job2_args(wh: str, subs: str) -> list[str]:  # the store and broker.conf come from the dumps table
    return ["--warehouse", wh, "--dump-id", DUMP, "--subscriptions", subs]


def test_killed_runs_leave_readers_on_the_last_complete_run(spark, stores, tmp_path) -> None:
    wh = str(tmp_path / "wh")
    subs_all = str(DEMO / "subscriptions.json")
    subs_few = tmp_path / "few.json"
    subs_few.write_text(json.dumps(json.loads(Path(subs_all).read_text())[:3]))

    assert build_queues.main(_job1_args(wh, stores["A"]), spark=spark) == 0
    assert simulate_pull.main(_job2_args(wh, subs_all), spark=spark) == 0
    runs = _runs(spark, wh)
    assert [r["job"] for r in runs] == ["build_queues", "simulate_pull"]
    assert runs[0]["tables"] == {t: last_version(spark, table_path(wh, t)) for t in JOB1}
    assert runs[1]["inputs"] == {t: runs[0]["tables"][t] for t in ("messages", "consume_queue",
                                                                    "consumer_filters", "dumps")}
    a1, a2 = _snapshot(spark, wh, JOB1), _snapshot(spark, wh, JOB2)
    assert a1 == _snapshot(spark, wh, JOB1, latest=True)
    report_a = report.collect(spark, wh, DUMP, generated_at="x")

    # job 1 on store B, stopped after its first table and after messages (four tables), killed after its last
    for table in _stopped_at(["jobs.build_queues", *_job1_args(wh, stores["B"])], wh, ("dump_files", "messages",
                                                                                        "dumps")):
        assert len(_runs(spark, wh)) == 2, f"killed after {table}: no run row"
        assert _snapshot(spark, wh, JOB1) == a1, table
        assert _snapshot(spark, wh, (table,), latest=True)[table] != a1[table], table  # B's rows, committed
    assert _snapshot(spark, wh, JOB2) == a2

    # job 2 replays job 1's last complete run (store A from its dumps row, A's messages and queues)
    assert simulate_pull.main(_job2_args(wh, subs_all), spark=spark) == 0
    runs = _runs(spark, wh)
    assert len(runs) == 3 and runs[2]["inputs"] == runs[1]["inputs"]
    assert _snapshot(spark, wh, JOB2) == a2

    # job 2 with three subscriptions, stopped after its first table, killed after its last
    for table in _stopped_at(["jobs.simulate_pull", *_job2_args(wh, str(subs_few))], wh, ("pull_decisions",
                                                                                           "group_stats")):
        assert len(_runs(spark, wh)) == 3, f"killed after {table}: no run row"
        assert _snapshot(spark, wh, JOB2) == a2, table
        assert _snapshot(spark, wh, (table,), latest=True)[table] != a2[table], table
    assert report.collect(spark, wh, DUMP, generated_at="x") == report_a

    # complete runs move the readers forward, job 1's first (job 2 then replays B)
    assert build_queues.main(_job1_args(wh, stores["B"]), spark=spark) == 0
    b1 = _snapshot(spark, wh, JOB1)
    assert b1 == _snapshot(spark, wh, JOB1, latest=True)
    assert b1["messages"][0] < a1["messages"][0] and b1["dumps"] != a1["dumps"]
    assert simulate_pull.main(_job2_args(wh, str(subs_few)), spark=spark) == 0
    runs = _runs(spark, wh)
    assert runs[-1]["inputs"] == {t: runs[-2]["tables"][t] for t in runs[-1]["inputs"]}
    assert _snapshot(spark, wh, JOB2) == _snapshot(spark, wh, JOB2, latest=True) != a2
    groups = report.collect(spark, wh, DUMP, generated_at="x")["groups"]
    assert len(groups) == _snapshot(spark, wh, ("group_stats",))["group_stats"][0] < len(report_a["groups"])


def test_a_warehouse_without_runs_reads_the_latest(spark, tmp_path, caplog) -> None:
    """Tables from an older release (no runs table), or written outside a run: read at their newest version."""
    import logging

    from jobs.delta_io import replace_dump

    wh = str(tmp_path)
    replace_dump(spark.createDataFrame([(DUMP, 1)], "dump_id string, x long"), wh, "t", DUMP)
    with caplog.at_level(logging.INFO, logger="jobs.runs"):
        assert [r.x for r in read_dump(spark, wh, "t", DUMP).collect()] == [1]
        assert [r.x for r in read_dump(spark, wh, "t", DUMP).collect()] == [1]
    assert sum("reading t at its latest version" in m for m in caplog.messages) == 1
    from jobs.runs import record_run

    record_run(spark, wh, "test", DUMP, {"t": table_path(wh, "t")})
    replace_dump(spark.createDataFrame([(DUMP, 2)], "dump_id string, x long"), wh, "t", DUMP)
    assert [r.x for r in read_dump(spark, wh, "t", DUMP).collect()] == [1]
    assert [r.x for r in read_dump(spark, wh, "t", DUMP, latest=True).collect()] == [2]
    assert [r.x for r in read_dump(spark, wh, "t", DUMP, version=2).collect()] == [2]  # version 0 made the table
    # another dump's run does not move this dump's readers
    record_run(spark, wh, "test", "other", {"t": table_path(wh, "t")})
    assert [r.x for r in read_dump(spark, wh, "t", DUMP).collect()] == [1]
