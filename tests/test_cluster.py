"""The jobs under a real spark-submit on a Spark standalone cluster, with `make dist`'s artifacts exactly as the
README's "Running on a cluster" recipe submits them, against a local run of the same jobs on the same dump.

A master and one worker (2 cores, 2 GiB) are started from this venv's pyspark (tests/cluster/standalone.py) and
always stopped, failure or not. Client deploy mode: the driver runs this venv's Python (PYSPARK_DRIVER_PYTHON), the
executors the packed environment's (PYSPARK_PYTHON=./environment/bin/python from --archives ...#environment),
which has the jobs' dependencies but no pyspark: Spark puts its own pyspark.zip and py4j zip on their path.
Delta comes from --jars (the jars `make setup` fetched; the README gives --packages as the other way).

It takes minutes (a spark-submit is ~10 s of JVM start before any work) and needs `make dist`'s artifacts:
`make test` builds them and runs it (RMQ_REPLAY_CLUSTER=1); a plain `pytest` without that variable skips it;
`make cluster-test` builds `make dist` and runs only this file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from cluster.standalone import Standalone, submit
from support.job_process import SHORT_LIVED_JVM

from jobs import row_forms

needs_cluster = pytest.mark.skipif(os.environ.get("RMQ_REPLAY_CLUSTER") != "1",
                                   reason="needs make dist: make test and make cluster-test run it")

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
ZIP = DIST / "rocketmq_filter_replay.zip"
ENV = DIST / "pyspark_venv.tar.gz"
DEMO = ROOT / "demo"
DUMP_ID = "demo"
DELTA_CONF = ["--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
              "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog"]
# Kept small: other test runs share the machine. An executor lives as long as its job, seconds on the demo dump:
# its JVM compiles with C1 only, as the drivers do (tests/support/job_process.py).
SMALL = ["--driver-memory", "1g", "--executor-memory", "1g", "--conf", "spark.cores.max=2",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
         "--conf", f"spark.executor.extraJavaOptions={SHORT_LIVED_JVM}"]
JOB_ARGS = ["--store", str(DEMO / "dump"), "--broker-conf", str(DEMO / "broker.conf"),
            "--subscriptions", str(DEMO / "subscriptions.json"), "--dump-id", DUMP_ID]
_LOG_LINE = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN|DEBUG) |WARNING: Using incubator|Using Spark's "
                       r"default log4j|\s*$)")


def _stale(target: Path, sources: list[Path]) -> bool:
    return not target.exists() or any(s.stat().st_mtime > target.stat().st_mtime for s in sources)


@pytest.fixture(scope="module")
def dist() -> dict[str, Path]:
    """`make dist`'s artifacts, rebuilt with `make dist` when missing or older than what they pack."""
    code = [p for d in ("filterlib", "jobs") for p in (ROOT / d).rglob("*.py")] + list((ROOT / "conf").glob("*.json"))
    if _stale(ZIP, code) or _stale(ENV, [ROOT / "setup.cfg", ROOT / "pyproject.toml"]):
        subprocess.run(["make", "-s", "dist"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return {"zip": ZIP, "env": ENV}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, dist):
    c = Standalone(tmp_path_factory.mktemp("standalone"))
    try:
        yield c.start()
    finally:
        c.stop()


def delta_jars_arg() -> str:
    from jobs.spark import delta_jars

    jars = delta_jars()
    assert jars, "no Delta jars in .cache/jars: run `make setup`"
    return ",".join(str(j) for j in jars)


def spark_submit(cluster: Standalone, script: str, args: list[str], *, jars: bool = True,
                 timeout: float = 900) -> subprocess.CompletedProcess:
    """The README's spark-submit line against the test cluster."""
    cmd = ["--master", cluster.url, "--deploy-mode", "client", *SMALL,
           *(["--jars", delta_jars_arg()] if jars else []), *DELTA_CONF,
           "--archives", f"{ENV}#environment", "--py-files", str(ZIP), script, *args]
    return submit(cmd, cwd=ROOT, driver_python=sys.executable, timeout=timeout)


def user_lines(r: subprocess.CompletedProcess) -> list[str]:
    """What the job itself said: spark-submit's output without Spark's log4j lines. (Spark's PythonRunner merges
    the Python driver's stderr into its stdout, so the jobs' messages arrive on spark-submit's stdout.)"""
    return [line for line in (r.stdout + r.stderr).splitlines() if not _LOG_LINE.match(line)]


@pytest.fixture(scope="module")
def submitted(cluster, tmp_path_factory) -> dict:
    """Both jobs submitted to the cluster, one after the other, into one warehouse."""
    wh = tmp_path_factory.mktemp("cluster-warehouse")
    runs = {}
    for job in ("build_queues", "simulate_pull"):
        t0 = time.monotonic()
        r = spark_submit(cluster, f"jobs/{job}.py", [*JOB_ARGS, "--warehouse", str(wh)])
        runs[job] = (r, time.monotonic() - t0)
        assert r.returncode == 0, f"{job} under spark-submit exited {r.returncode}: {user_lines(r)[-40:]}"
    return {"warehouse": wh, "runs": runs, "apps": sorted(p.name for p in cluster.work_dir.glob("app-*"))}


@pytest.fixture(scope="module")
def local_run(spark, tmp_path_factory) -> Path:
    """The same two jobs on the same dump with the local test session."""
    from jobs import build_queues, simulate_pull

    wh = tmp_path_factory.mktemp("local-warehouse")
    args = [*JOB_ARGS, "--warehouse", str(wh)]
    assert build_queues.main(args, spark=spark) == 0
    assert simulate_pull.main(args, spark=spark) == 0
    return wh


def tables(wh: Path) -> list[str]:
    return sorted(p.name for p in wh.iterdir() if (p / "_delta_log").is_dir())


CLOCK = {"dumps": ["built_at"], "runs": ["run_id", "finished_at"]}
"""Columns that hold when (and as which run) a run happened, not what it found."""


def comparable(spark, path: Path):
    """The table with map columns as JSON text (set operations refuse maps), without its clock columns."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    df = spark.read.format("delta").load(str(path)).drop(*CLOCK.get(path.name, []))
    return df.select(*[F.to_json(f.name).alias(f.name) if isinstance(f.dataType, MapType) else F.col(f.name)
                       for f in df.schema])


@pytest.mark.spark
@needs_cluster
def test_both_jobs_on_a_standalone_cluster_write_what_a_local_run_writes(spark, submitted, local_run) -> None:
    wh = submitted["warehouse"]
    for job, (r, seconds) in submitted["runs"].items():
        print(f"{job}: spark-submit {seconds:.0f} s; stdout: {r.stdout.strip()}")
    expected = {"messages", "consume_queue", "consumer_filters", "dump_files", "dumps",
                "pull_decisions", "decision_details", "decision_codes", "pulls", "group_stats"}
    assert expected <= set(tables(wh)), tables(wh)
    assert tables(wh) == tables(local_run)
    for name in tables(wh):  # the same multiset of rows: each side collected once (the demo's tables are small)
        got, want = comparable(spark, wh / name), comparable(spark, local_run / name)
        assert got.schema == want.schema, name
        got_rows, want_rows = (Counter(repr(tuple(r)) for r in df.collect()) for df in (got, want))
        assert want_rows and got_rows == want_rows, (name, (got_rows - want_rows).most_common(3),
                                                     (want_rows - got_rows).most_common(3))
    # a few key columns, spelled out: the demo dump's messages, the pull's outcomes per group
    msgs = spark.read.format("delta").load(str(wh / "messages"))
    assert msgs.select("dump_id").distinct().collect()[0][0] == DUMP_ID
    outcomes = {(r.consumer_group, r.outcome): r["count"] for r in row_forms.pull_decisions(spark, str(wh))
                .groupBy("consumer_group", "outcome").count().collect()}
    assert any(o == "DELIVERED" for _, o in outcomes) and any(o != "DELIVERED" for _, o in outcomes)


@pytest.mark.spark
@needs_cluster
def test_executors_ran_the_packed_environment(cluster, submitted) -> None:
    # both jobs' executors got the archive, unpacked as ./environment in their working directory
    for app in submitted["apps"]:
        executors = list((cluster.work_dir / app).iterdir())
        assert executors and all((e / "environment" / "bin" / "python").exists() for e in executors), app
    # and a probe submitted the same way shows which Python ran the Spark tasks and what it imported from where
    r = spark_submit(cluster, "tests/cluster/probe_env.py", [])
    assert r.returncode == 0, user_lines(r)[-40:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["driver"]["executable"] == sys.executable
    assert report["driver"]["jobs_spark"].startswith(str(ZIP)), report["driver"]
    for task in report["tasks"]:
        env = Path(task["cwd"]) / "environment"
        assert task["executable"] in (str(env / "bin" / "python"), "./environment/bin/python"), task
        assert Path(task["prefix"]) == env, task
        assert task["filterlib"].startswith(str(ZIP.name)) or ZIP.name in task["filterlib"], task
        for dep in ("numba", "pyarrow", "mmh3"):
            assert task[dep].startswith(str(env)), (dep, task)
        assert task["pyspark"].endswith("pyspark.zip/pyspark/__init__.py"), task  # Spark's, not the env's
        assert task["tags_code"] == 2598919  # "TagA".hashCode()


@needs_cluster
@pytest.mark.parametrize("case", ["missing store", "warehouse not Delta", "malformed defaults", "broker.conf dir",
                                  "no Delta jars"])
def test_bad_input_under_spark_submit_is_one_line(cluster, tmp_path, case) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = tmp_path / "defaults.json"
    bad.write_text('{"master": ')
    job, args, jars, code, message = {
        "missing store": ("build_queues", ["--store", str(tmp_path / "nope"), "--warehouse", str(empty)], True, 2,
                          "store directory not found"),
        "warehouse not Delta": ("simulate_pull", ["--store", str(DEMO / "dump"), "--warehouse", str(empty)], True,
                                2, "not a warehouse of job 1"),
        "malformed defaults": ("simulate_pull", ["--store", str(DEMO / "dump"), "--warehouse", str(empty),
                                                 "--defaults", str(bad)], True, 2, "not valid JSON"),
        "broker.conf dir": ("build_queues", ["--store", str(DEMO / "dump"), "--warehouse", str(empty),
                                             "--broker-conf", str(empty)], True, 2, "broker.conf not found"),
        "no Delta jars": ("build_queues", ["--store", str(DEMO / "dump"), "--warehouse", str(empty)], False, 1,
                          "Delta Lake is not on this spark-submit's classpath"),
    }[case]
    r = spark_submit(cluster, f"jobs/{job}.py", args, jars=jars, timeout=300)
    said = user_lines(r)
    assert r.returncode == code, (r.returncode, said[-20:])
    assert len(said) == 1 and said[0].startswith(f"{job}: error: ") and message in said[0], said


# ----- the defaults files from a --py-files zip (no Spark, run by `make test`) ---------------------------------------

def _zip_with(tmp_path: Path, members: dict[str, str]) -> Path:
    import zipfile

    z = tmp_path / "code.zip"
    with zipfile.ZipFile(z, "w") as f:
        for name, text in members.items():
            f.writestr(name, text)
    return z


def test_defaults_load_from_inside_the_py_files_zip(tmp_path) -> None:
    from jobs.cli import load_defaults

    conf = json.loads((ROOT / "conf" / "simulate_pull.json").read_text())
    z = _zip_with(tmp_path, {"conf/simulate_pull.json": json.dumps(conf)})
    assert load_defaults(z / "conf" / "simulate_pull.json") == conf
    assert load_defaults(str(z / "conf" / "simulate_pull.json")) == conf


@pytest.mark.parametrize("member, text, message", [
    ("conf/other.json", "{}", "no member conf/simulate_pull.json in"),
    ("conf/simulate_pull.json", '{"master": ', "not valid JSON"),
    ("conf/simulate_pull.json", "[1]", "expected a JSON object"),
])
def test_defaults_in_a_zip_fail_as_one_line(tmp_path, member, text, message) -> None:
    from jobs.cli import InputError, load_defaults

    z = _zip_with(tmp_path, {member: text})
    with pytest.raises(InputError, match=re.escape(message)):
        load_defaults(z / "conf" / "simulate_pull.json")


def test_a_missing_defaults_file_outside_any_zip_is_one_line(tmp_path) -> None:
    from jobs.cli import InputError, load_defaults

    with pytest.raises(InputError, match="cannot read the defaults file"):
        load_defaults(tmp_path / "conf" / "nope.json")
    (tmp_path / "plain").write_text("not a zip")
    with pytest.raises(InputError, match="cannot read the defaults file"):
        load_defaults(tmp_path / "plain" / "conf" / "nope.json")
