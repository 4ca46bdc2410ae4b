"""The Airflow 3 DAG (dags/rocketmq_filter_replay.py): it loads, runs build_queues then simulate_pull, and submits
the jobs with the dist artifacts, Delta and the run's params rendered into the arguments.

Airflow and the Spark provider cannot live in the project's virtualenv (the provider pulls pyspark-client, which
clashes with pyspark), so tests/airflow/setup_venv.sh makes a virtualenv of their own (.cache/airflow-venv, once,
from PyPI) and tests/airflow/check_dag.py runs there: it loads the DAG with DagBag, renders every task's templated
fields as a worker would (no database, no API server) and builds the spark-submit command the provider would run,
and writes it all as JSON that the tests below check. No Airflow virtualenv is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DAGS = ROOT / "dags"
DAG_FILE = DAGS / "rocketmq_filter_replay.py"
SETUP = ROOT / "tests" / "airflow" / "setup_venv.sh"
CHECKER = ROOT / "tests" / "airflow" / "check_dag.py"
AIRFLOW_VENV = Path(os.environ.get("AIRFLOW_VENV", ROOT / ".cache" / "airflow-venv"))
DAG_ID = "rocketmq_filter_replay"

DELTA = "io.delta:delta-spark_4.2_2.13:4.4.0"
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
DATE = "2026-03-04T00:00:00+00:00"
OVERRIDE = {
    "dump_id": "broker-a.1", "store": "hdfs:///dumps/{dump_id}/store", "warehouse": "/wh",
    "broker_conf": "/etc/rocketmq/broker.conf", "subscriptions": "/etc/rocketmq/subs.json",
    "pull_from": "committed", "queues": "rebuilt",
}
SCENARIOS = [
    {"name": "defaults", "logical_date": DATE, "conf": {}},
    {"name": "override", "logical_date": DATE, "conf": OVERRIDE},
    {"name": "empty_optionals", "logical_date": DATE,
     "conf": {"broker_conf": "", "subscriptions": None, "pull_from": "", "queues": None}},
    {"name": "no_date", "logical_date": None, "conf": {}},
    {"name": "no_date_dump_id", "logical_date": None, "conf": {"dump_id": "adhoc"}},
    {"name": "bad_queues", "logical_date": DATE, "conf": {"queues": "nope"}},
    {"name": "bad_dump_id", "logical_date": DATE, "conf": {"dump_id": "a/b"}},
]
# The Spark connection the hook resolves (Airflow reads AIRFLOW_CONN_<ID> from the environment).
SPARK_LOCAL = json.dumps({"conn_type": "spark", "host": "local[2]"})


@pytest.fixture(scope="module")
def airflow_python() -> Path:
    """The Airflow virtualenv's Python; made by setup_venv.sh when missing or stale (a failure if it cannot be)."""
    env = {**os.environ, "AIRFLOW_VENV": str(AIRFLOW_VENV)}
    try:
        proc = subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        pytest.fail(f"creating the Airflow virtualenv ({SETUP.relative_to(ROOT)}) took over 30 minutes",
                    pytrace=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        pytest.fail(
            f"the Airflow virtualenv {AIRFLOW_VENV} could not be created, so the DAG cannot be checked.\n"
            f"{SETUP.relative_to(ROOT)} needs PyPI the first time (run it by hand to see why). Its output:\n{tail}",
            pytrace=False)
    if proc.stdout.strip():
        print(proc.stdout.strip(), file=sys.stderr)
    return AIRFLOW_VENV / "bin" / "python"


def _check(airflow_python: Path, tmp_path: Path, env_extra: dict[str, str] | None = None) -> dict:
    """Run check_dag.py in the Airflow virtualenv; return its JSON (knobs only from env_extra)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "RMQ_REPLAY_", "PYSPARK_", "SPARK_", "PYTHON"))}
    env.update({
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW_CONN_SPARK_DEFAULT": SPARK_LOCAL,
        "AIRFLOW_CONN_SPARK_YARN": json.dumps({"conn_type": "spark", "host": "yarn",
                                               "extra": {"deploy-mode": "cluster"}}),
        **(env_extra or {}),
    })
    scenarios = tmp_path / "scenarios.json"
    scenarios.write_text(json.dumps(SCENARIOS))
    out = tmp_path / "out.json"
    proc = subprocess.run([str(airflow_python), str(CHECKER), str(DAGS), str(scenarios), str(out)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0 and out.exists(), f"check_dag.py failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def checked(airflow_python, tmp_path_factory) -> dict:
    return _check(airflow_python, tmp_path_factory.mktemp("airflow-defaults"))


@pytest.fixture(scope="module")
def dag(checked) -> dict:
    assert checked["dag_ids"] == [DAG_ID]
    return checked["dags"][DAG_ID]


def _args(dag: dict, scenario: str, task: str) -> list[str]:
    rendered = dag["renders"][scenario][task]
    assert "error" not in rendered, rendered.get("error")
    return rendered["application_args"]


def _submit_options(command: list[str]) -> list[str]:
    """spark-submit's options, up to the application."""
    return command[1:next(i for i, a in enumerate(command) if a.endswith(".py"))]


def test_dag_loads_without_import_errors(checked):
    assert checked["import_errors"] == {}
    assert checked["dag_ids"] == [DAG_ID]


def test_schedule_and_run_policy(dag):
    assert dag["schedule"] == "@daily"
    assert dag["catchup"] is False
    assert dag["max_active_runs"] == 1
    assert dag["start_date"] == "2026-01-01T00:00:00+00:00"


def test_two_spark_submit_tasks_build_queues_first(dag):
    assert sorted(dag["task_ids"]) == ["build_queues", "simulate_pull"]
    assert dag["topological"] == ["build_queues", "simulate_pull"]
    tasks = dag["tasks"]
    assert tasks["build_queues"]["downstream"] == ["simulate_pull"]
    assert tasks["build_queues"]["upstream"] == []
    assert tasks["simulate_pull"]["upstream"] == ["build_queues"]
    for task in tasks.values():
        assert "airflow.providers.apache.spark.operators.spark_submit.SparkSubmitOperator" in task["mro"]
    # what the scheduler and the UI get: the serialized DAG, read back
    assert dag["serialized"] == {
        "task_ids": ["build_queues", "simulate_pull"],
        "downstream": {"build_queues": ["simulate_pull"], "simulate_pull": []},
        "task_types": {"build_queues": "ReplaySubmitOperator", "simulate_pull": "ReplaySubmitOperator"},
    }


def test_dist_artifacts_delta_and_connection(dag):
    for task_id in ("build_queues", "simulate_pull"):
        task = dag["tasks"][task_id]
        assert task["conn_id"] == "spark_default"
        assert task["application"] == f"{ROOT}/jobs/{task_id}.py"
        assert task["py_files"] == f"{ROOT}/dist/rocketmq_filter_replay.zip"
        assert task["archives"] == f"{ROOT}/dist/pyspark_venv.tar.gz#environment"
        assert task["packages"] == DELTA
        assert task["conf"] == DELTA_CONF
        assert task["env_vars"] == {"PYSPARK_PYTHON": "./environment/bin/python"}


def test_params_defaults(dag):
    assert dag["params"] == {
        "dump_id": "", "store": "/data/rocketmq/dumps/{dump_id}", "warehouse": "/data/rocketmq/warehouse",
        "broker_conf": "", "subscriptions": "", "pull_from": None, "queues": None,
    }


def test_rendered_defaults_use_the_logical_date(dag):
    common = ["--store", "/data/rocketmq/dumps/20260304", "--warehouse", "/data/rocketmq/warehouse",
              "--dump-id", "20260304"]
    assert _args(dag, "defaults", "build_queues") == common
    assert _args(dag, "defaults", "simulate_pull") == common
    rendered = dag["renders"]["defaults"]["build_queues"]
    assert rendered["name"] == "rmq-replay-build_queues-20260304"
    assert rendered["application"] == f"{ROOT}/jobs/build_queues.py"


def test_rendered_overrides_from_the_run_conf(dag):
    common = ["--store", "hdfs:///dumps/broker-a.1/store", "--warehouse", "/wh", "--dump-id", "broker-a.1",
              "--broker-conf", "/etc/rocketmq/broker.conf", "--subscriptions", "/etc/rocketmq/subs.json"]
    assert _args(dag, "override", "build_queues") == common
    assert _args(dag, "override", "simulate_pull") == common + ["--from", "committed", "--queues", "rebuilt"]
    assert dag["renders"]["override"]["simulate_pull"]["name"] == "rmq-replay-simulate_pull-broker-a.1"


def test_empty_optional_params_leave_their_flags_out(dag):
    for task_id in ("build_queues", "simulate_pull"):
        args = _args(dag, "empty_optionals", task_id)
        assert args == ["--store", "/data/rocketmq/dumps/20260304", "--warehouse", "/data/rocketmq/warehouse",
                        "--dump-id", "20260304"]


def test_spark_submit_command_as_the_provider_builds_it(dag):
    for task_id in ("build_queues", "simulate_pull"):
        command = dag["renders"]["override"][task_id]["command"]
        assert command[0] == "spark-submit"
        assert _submit_options(command) == [
            "--master", "local[2]",
            "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
            "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "--py-files", f"{ROOT}/dist/rocketmq_filter_replay.zip",
            "--archives", f"{ROOT}/dist/pyspark_venv.tar.gz#environment",
            "--packages", DELTA,
            "--name", f"rmq-replay-{task_id}-broker-a.1",
        ]
        application = command.index(f"{ROOT}/jobs/{task_id}.py")
        assert command[application + 1:] == _args(dag, "override", task_id)


def test_a_run_without_logical_date_needs_a_dump_id(dag):
    for task_id in ("build_queues", "simulate_pull"):
        assert "ds_nodash" in dag["renders"]["no_date"][task_id]["error"]
        assert _args(dag, "no_date_dump_id", task_id)[:6] == [
            "--store", "/data/rocketmq/dumps/adhoc", "--warehouse", "/data/rocketmq/warehouse",
            "--dump-id", "adhoc"]


def test_invalid_params_are_refused_before_submitting(dag):
    assert "queues" in dag["renders"]["bad_queues"]["simulate_pull"]["error"]
    assert "dump_id" in dag["renders"]["bad_dump_id"]["build_queues"]["error"]


def test_every_knob_is_documented_in_doc_md(dag):
    knobs = re.findall(r'knob\("(\w+)"', DAG_FILE.read_text())
    assert len(knobs) >= 10
    for name in knobs:
        assert f"`{name}`" in dag["doc_md"], f"knob {name} is not in the DAG's doc_md"


def test_knobs_from_env_and_the_airflow_variable(airflow_python, tmp_path):
    variable = {
        "conn_id": "spark_from_variable",   # the env knob below wins
        "home": "/opt/replay",
        "schedule": "0 3 * * *",
        "spark_conf": {"spark.executor.memory": "4g"},
        "driver_python": "/opt/replay/.venv/bin/python",
        "warehouse": "s3a://lake/replay",
    }
    out = _check(airflow_python, tmp_path, {
        "AIRFLOW_VAR_RMQ_REPLAY": json.dumps(variable),   # the JSON Variable, as Airflow reads it from env
        "RMQ_REPLAY_CONN_ID": "spark_yarn",
        "RMQ_REPLAY_PACKAGES": f"{DELTA},org.apache.hadoop:hadoop-aws:3.4.1",
    })
    assert out["import_errors"] == {}
    dag = out["dags"][DAG_ID]
    assert dag["schedule"] == "0 3 * * *"
    assert dag["params"]["warehouse"] == "s3a://lake/replay"
    task = dag["tasks"]["simulate_pull"]
    assert task["conn_id"] == "spark_yarn"
    assert task["application"] == "/opt/replay/jobs/simulate_pull.py"
    assert task["py_files"] == "/opt/replay/dist/rocketmq_filter_replay.zip"
    assert task["archives"] == "/opt/replay/dist/pyspark_venv.tar.gz#environment"
    assert task["packages"] == f"{DELTA},org.apache.hadoop:hadoop-aws:3.4.1"
    assert task["conf"] == {**DELTA_CONF, "spark.executor.memory": "4g"}
    assert task["env_vars"] == {"PYSPARK_PYTHON": "./environment/bin/python",
                                "PYSPARK_DRIVER_PYTHON": "/opt/replay/.venv/bin/python"}
    # on YARN the provider hands the environment to the application master as spark.yarn.appMasterEnv.*
    command = dag["renders"]["defaults"]["simulate_pull"]["command"]
    options = _submit_options(command)
    assert options[:2] == ["--master", "yarn"]
    assert "spark.yarn.appMasterEnv.PYSPARK_PYTHON=./environment/bin/python" in options
    assert "spark.executor.memory=4g" in options
    assert options[-2:] == ["--deploy-mode", "cluster"]
    assert command[-6:] == ["--store", "/data/rocketmq/dumps/20260304", "--warehouse", "s3a://lake/replay",
                            "--dump-id", "20260304"]


def test_empty_knobs_leave_their_options_out(airflow_python, tmp_path):
    """A cluster with the project, its Python and Delta installed: no --py-files, --archives, --packages."""
    out = _check(airflow_python, tmp_path, {f"RMQ_REPLAY_{k}": "" for k in
                                            ("PY_FILES", "ARCHIVE", "PACKAGES", "PYSPARK_PYTHON")})
    task = out["dags"][DAG_ID]["tasks"]["build_queues"]
    assert (task["py_files"], task["archives"], task["packages"], task["env_vars"]) == (None, None, None, {})
    options = _submit_options(out["dags"][DAG_ID]["renders"]["defaults"]["build_queues"]["command"])
    assert not {"--py-files", "--archives", "--packages"} & set(options)
    assert options[-2:] == ["--name", "rmq-replay-build_queues-20260304"]


def test_the_dag_file_never_imports_the_project():
    """The DAG runs where Airflow runs: it must not import filterlib or jobs (nor pyspark)."""
    source = DAG_FILE.read_text()
    assert not re.search(r"^\s*(from|import)\s+(filterlib|jobs|pyspark)\b", source, re.M)


def test_one_history_dag_per_broker_appends_its_copies_in_order(airflow_python, tmp_path):
    out = _check(airflow_python, tmp_path, {"RMQ_REPLAY_BROKERS": '["broker-a", "b:1"]'})
    assert out["import_errors"] == {}
    ids = {"broker-a": f"{DAG_ID}__broker-a", "b:1": f"{DAG_ID}__b_1"}
    assert out["dag_ids"] == sorted([DAG_ID, *ids.values()])
    for broker, dag_id in ids.items():
        dag = out["dags"][dag_id]
        assert (dag["catchup"], dag["max_active_runs"], dag["schedule"]) == (True, 1, "@daily")
        assert dag["topological"] == ["build_queues", "simulate_pull"]
        assert dag["tasks"]["build_queues"]["depends_on_past"] is True  # a day waits for the day before
        assert dag["params"]["queues"] == "rebuilt"
        common = ["--store", f"/data/rocketmq/copies/{broker}/20260304", "--warehouse", "/data/rocketmq/warehouse"]
        assert _args(dag, "defaults", "build_queues") == [*common, "--broker", broker]
        assert _args(dag, "defaults", "simulate_pull") == [*common, "--dump-id", broker, "--queues", "rebuilt"]
        assert dag["renders"]["defaults"]["build_queues"]["name"] == f"rmq-replay-build_queues-{broker}-20260304"
        for knob in ("brokers", "copy_store"):
            assert f"`{knob}`" in dag["doc_md"]


def test_a_cluster_dag_appends_every_broker_then_replays_each_with_the_others_queues(airflow_python, tmp_path):
    out = _check(airflow_python, tmp_path, {"RMQ_REPLAY_CLUSTER": '["broker-a", "b:1"]'})
    assert out["import_errors"] == {}
    dag = out["dags"][f"{DAG_ID}__cluster"]
    assert (dag["catchup"], dag["max_active_runs"]) == (True, 1)
    builds, replays = ["build_queues__broker-a", "build_queues__b_1"], ["simulate_pull__broker-a", "simulate_pull__b_1"]
    assert sorted(dag["tasks"]) == sorted(builds + replays)
    for r in replays:  # each replay waits for every broker's append: the allocation reads every broker's queues
        assert dag["tasks"][r]["upstream"] == sorted(builds)
    for b in builds:
        assert dag["tasks"][b]["depends_on_past"] is True and dag["tasks"][b]["upstream"] == []
    for broker, safe in (("broker-a", "broker-a"), ("b:1", "b_1")):
        common = ["--store", f"/data/rocketmq/copies/{broker}/20260304", "--warehouse", "/data/rocketmq/warehouse"]
        assert _args(dag, "defaults", f"build_queues__{safe}") == [*common, "--broker", broker]
        assert _args(dag, "defaults", f"simulate_pull__{safe}") == [*common, "--dump-id", broker, "--queues",
                                                                     "rebuilt", "--cluster", "broker-a,b:1"]
    assert "`cluster`" in out["dags"][DAG_ID]["doc_md"]


def test_a_broker_name_unfit_for_the_tables_is_an_import_error(airflow_python, tmp_path):
    out = _check(airflow_python, tmp_path, {"RMQ_REPLAY_BROKERS": '["a/b"]'})
    (error,) = out["import_errors"].values()
    assert "knob brokers must be a JSON list of broker names" in error and "a/b" in error
