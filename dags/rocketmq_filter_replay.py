"""Airflow 3 DAGs: replay one RocketMQ store dump, job 1 (build_queues) then job 2 (simulate_pull), on Spark; and,
for each broker the knob `brokers` names, one DAG that appends that broker's newest store copy to its history.

Both tasks are SparkSubmitOperator (apache-airflow-providers-apache-spark) submissions of the job scripts with the
`make dist` artifacts as dependencies. The knobs below are read when the DAG file is parsed; the dump, dump id,
warehouse, broker.conf and subscriptions are run params (trigger-form fields), rendered into `application_args`.
The rendered-field checks live in tests/test_airflow_dag.py (Airflow runs in its own virtualenv there).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, Variable

DAG_ID = "rocketmq_filter_replay"
VARIABLE = "rmq_replay"  # one JSON Variable holds every knob (one lookup per parse)
ENV_PREFIX = "RMQ_REPLAY_"
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
_REPO = Path(__file__).resolve().parent.parent

# ----- knobs: env RMQ_REPLAY_<NAME>, else key <name> of the JSON Variable `rmq_replay`, else the default ------------
_variable = Variable.get(VARIABLE, default=None, deserialize_json=True) or {}
if not isinstance(_variable, dict):
    raise ValueError(f"Airflow Variable {VARIABLE!r} must be a JSON object of knobs, got {type(_variable).__name__}")


def knob(name: str, default: str) -> str:
    """One knob's value: env RMQ_REPLAY_<NAME>, else `name` in the JSON Variable `rmq_replay`, else `default`."""
    value = os.environ.get(ENV_PREFIX + name.upper())
    if value is None:
        value = _variable.get(name)
    if value is None:
        return default
    return value if isinstance(value, str) else json.dumps(value)  # e.g. spark_conf given as a JSON object


CONN_ID = knob("conn_id", "spark_default")
SCHEDULE = knob("schedule", "@daily")
START_DATE = knob("start_date", "2026-01-01")
HOME = knob("home", str(_REPO))
PY_FILES = knob("py_files", f"{HOME}/dist/rocketmq_filter_replay.zip")
ARCHIVE = knob("archive", f"{HOME}/dist/pyspark_venv.tar.gz")
PYSPARK_PYTHON = knob("pyspark_python", "./environment/bin/python")
DRIVER_PYTHON = knob("driver_python", "")
PACKAGES = knob("packages", DELTA_PACKAGE)
SPARK_CONF: dict[str, Any] = json.loads(knob("spark_conf", "{}"))
STORE = knob("store", "/data/rocketmq/dumps/{dump_id}")
WAREHOUSE = knob("warehouse", "/data/rocketmq/warehouse")
BROKER_CONF = knob("broker_conf", "")
SUBSCRIPTIONS = knob("subscriptions", "")
if not isinstance(SPARK_CONF, dict):
    raise ValueError(f"knob spark_conf must be a JSON object of Spark settings, got {SPARK_CONF!r}")
BROKERS: list[str] = json.loads(knob("brokers", "[]"))
COPY_STORE = knob("copy_store", "/data/rocketmq/copies/{broker}/{ds_nodash}")
CLUSTER: list[str] = json.loads(knob("cluster", "[]"))
NAME_PATTERN = r"^[A-Za-z0-9._:@+\-]+$"
for _name, _value in (("brokers", BROKERS), ("cluster", CLUSTER)):
    if not isinstance(_value, list) or not all(isinstance(b, str) and re.match(NAME_PATTERN, b) for b in _value):
        raise ValueError(f"knob {_name} must be a JSON list of broker names (letters, digits and . _ : @ + -), "
                         f"got {_value!r}")

# ----- templates ----------------------------------------------------------------------------------------------------
DUMP_ID = "{{ params.dump_id or ds_nodash }}"
STORE_PATH = "{{ params.store | replace('{dump_id}', params.dump_id or ds_nodash) }}"
# Optional flags are dropped from the rendered arguments when their value renders empty (the job's default applies).
OPTIONAL_FLAGS = frozenset({"--broker-conf", "--subscriptions", "--from", "--queues"})


def drop_unset_options(args: Sequence[str]) -> list[str]:
    """Remove `FLAG ""` pairs of OPTIONAL_FLAGS from rendered application arguments."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in OPTIONAL_FLAGS and i + 1 < len(args) and str(args[i + 1]).strip() == "":
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


class ReplaySubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator that leaves out an optional `--flag` whose value rendered empty."""

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        if self.application_args:
            self.application_args = drop_unset_options(self.application_args)


def _common_args(store: str = STORE_PATH, name: tuple[str, str] = ("--dump-id", DUMP_ID)) -> list[str]:
    return [
        "--store", store,
        "--warehouse", "{{ params.warehouse }}",
        *name,
        "--broker-conf", "{{ params.broker_conf or '' }}",
        "--subscriptions", "{{ params.subscriptions or '' }}",
    ]


JOB2_ARGS = ["--from", "{{ params.pull_from or '' }}", "--queues", "{{ params.queues or '' }}"]
"""Job 2's own flags, rendered from the run params pull_from and queues."""


def _shared_params(queues: str | None, queues_text: str) -> dict[str, Param]:
    """The run params both kinds of DAG have (all but the dump's name and store); `queues`: job 2's default."""
    return {
        "warehouse": Param(WAREHOUSE, type="string", minLength=1, description="the Delta warehouse directory"),
        "broker_conf": Param(BROKER_CONF, type=["null", "string"],
                             description="broker.conf file; empty: RocketMQ 5.3.3 defaults"),
        "subscriptions": Param(SUBSCRIPTIONS, type=["null", "string"],
                               description="subscriptions JSON file; empty: none"),
        "pull_from": Param(None, type=["null", "string"], enum=[None, "", "earliest", "committed"],
                           description="job 2 --from; empty: the job's default"),
        "queues": Param(queues, type=["null", "string"], enum=[None, "", "dump", "rebuilt"],
                        description=f"job 2 --queues; {queues_text}"),
    }


def _env_vars() -> dict[str, str]:
    env = {"PYSPARK_PYTHON": PYSPARK_PYTHON} if PYSPARK_PYTHON else {}
    if DRIVER_PYTHON:
        env["PYSPARK_DRIVER_PYTHON"] = DRIVER_PYTHON
    return env


def _submit(task_id: str, script: str, args: list[str], label: str = DUMP_ID, **kwargs: Any
            ) -> ReplaySubmitOperator:
    return ReplaySubmitOperator(
        task_id=task_id,
        conn_id=CONN_ID,
        application=f"{HOME}/jobs/{script}",
        application_args=args,
        name=f"rmq-replay-{task_id}-{label}",
        py_files=PY_FILES or None,
        archives=f"{ARCHIVE}#environment" if ARCHIVE else None,
        packages=PACKAGES or None,
        conf={**DELTA_CONF, **SPARK_CONF},
        env_vars=_env_vars(),
        **kwargs,
    )


DOC_MD = f"""
### RocketMQ filter replay

Replays one RocketMQ store dump: **build_queues** (job 1: decode the commitlog, rebuild the consume queues and
bitmaps, write `messages`, `consume_queue`, `consumer_filters`, `dump_files`), then **simulate_pull** (job 2: the
pull of every consumer group, `pull_decisions` (a decision matrix), `decision_details`, `decision_codes`, `pulls`,
`group_stats`; one row per decision or delivered message is `jobs.row_forms`). Both are `spark-submit`s
through the Spark connection; re-running a dump replaces its rows. One run at a time (`max_active_runs=1`).

**Run params** (trigger form or `conf`):

| param | meaning | default |
| --- | --- | --- |
| `dump_id` | the dump's name in the tables | empty: the run's logical date, `{{{{ ds_nodash }}}}` |
| `store` | the dump (a broker store root); `{{dump_id}}` is replaced by the dump id | knob `store` |
| `warehouse` | directory or Hadoop URI of the Delta tables | knob `warehouse` |
| `broker_conf` | the broker's `broker.conf` | knob `broker_conf`; empty: not passed (RocketMQ 5.3.3 defaults) |
| `subscriptions` | subscriptions JSON file | knob `subscriptions`; empty: not passed |
| `pull_from` | job 2 `--from`: `earliest` or `committed` | not passed (the job's default) |
| `queues` | job 2 `--queues`: `dump` or `rebuilt` | not passed (the job's default) |

A run without a logical date (an API trigger with `logical_date: null`) must set `dump_id`.

**Knobs**, read when the file is parsed: environment variable `RMQ_REPLAY_<NAME>`, else key `<name>` of the JSON
Airflow Variable `{VARIABLE}` (e.g. `{{"conn_id": "spark_yarn", "home": "/opt/replay"}}`, also settable as env
`AIRFLOW_VAR_RMQ_REPLAY`), else the default.

| knob | default | what |
| --- | --- | --- |
| `conn_id` | `spark_default` | the Spark connection (master, deploy mode, queue, spark-submit binary) |
| `schedule` | `@daily` | the DAG's schedule (cron or preset) |
| `start_date` | `2026-01-01` | first logical date (no catch-up) |
| `home` | the checkout holding this file | where `jobs/` and `dist/` are on the submitting worker |
| `py_files` | `<home>/dist/rocketmq_filter_replay.zip` | `--py-files` (from `make dist`) |
| `archive` | `<home>/dist/pyspark_venv.tar.gz` | `--archives ...#environment` (from `make dist`) |
| `pyspark_python` | `./environment/bin/python` | `PYSPARK_PYTHON` (the unpacked archive) |
| `driver_python` | empty | `PYSPARK_DRIVER_PYTHON`: a Python with the project installed; client mode needs it |
| `packages` | `{DELTA_PACKAGE}` | `--packages` (Delta Lake) |
| `spark_conf` | `{{}}` | JSON object of extra `--conf` settings, added to the two Delta ones |
| `store` | `/data/rocketmq/dumps/{{dump_id}}` | default of param `store` |
| `warehouse` | `/data/rocketmq/warehouse` | default of param `warehouse` |
| `broker_conf`, `subscriptions` | empty | defaults of those params |
| `brokers` | `[]` | JSON list of broker names: one history DAG `{DAG_ID}__<broker>` each (docs/history.md) |
| `copy_store` | `/data/rocketmq/copies/{{broker}}/{{ds_nodash}}` | where a history DAG finds the day's copy |
| `cluster` | `[]` | JSON list of a cluster's master brokers: one DAG `{DAG_ID}__cluster`, appends then `--cluster` |

In client mode the driver runs on the Airflow worker, where the archive is not unpacked: set `driver_python`.
An empty `py_files`, `archive`, `pyspark_python` or `packages` leaves that option out (a cluster that has the
project, its Python or Delta installed already).
Environment variables in spark-submit's environment (`PYSPARK_PYTHON`, `PYSPARK_DRIVER_PYTHON`) go to
`spark.yarn.appMasterEnv.*` on YARN and `spark.kubernetes.driverEnv.*` on Kubernetes (the provider does this).
"""

with DAG(
    dag_id=DAG_ID,
    description="Replay a RocketMQ store dump: build_queues then simulate_pull (Spark, Delta)",
    schedule=SCHEDULE,
    start_date=pendulum.parse(START_DATE, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC_MD,
    tags=["rocketmq", "spark", "delta"],
    params={
        "dump_id": Param("", type="string", pattern=r"^[A-Za-z0-9._:@+\-]*$",
                         description="name of the dump in the tables; empty: the logical date (ds_nodash)"),
        "store": Param(STORE, type="string", minLength=1,
                       description="the store dump directory or URI; {dump_id} is replaced by the dump id"),
        **_shared_params(None, "empty: the job's default"),
    },
) as dag:
    build_queues = _submit("build_queues", "build_queues.py", _common_args())
    simulate_pull = _submit("simulate_pull", "simulate_pull.py", _common_args() + JOB2_ARGS)
    build_queues >> simulate_pull


BROKER_DOC_MD = f"""
### RocketMQ filter replay: one broker's history

Each run appends the broker's store copy of its logical date to the broker's history in the warehouse
(**build_queues** `--broker`: only the records past the history's end are decoded, after checking that the copy
continues the history; docs/history.md), then **simulate_pull** continues its last run over the history's new units
(`--dump-id` the broker, `--queues rebuilt`): each subscription's pulls go on where they stopped, and one changed in
the day's subscriptions decides from that copy on. Runs follow each other in logical-date order: catch-up is on, one
run at a time (`max_active_runs=1`), and a day's build_queues waits for the day before's (`depends_on_past`). A copy
with nothing new (the same or an older copy) ends green, and its log says "nothing new"; a copy that does not
continue the history (a wiped store, another broker's copy) fails in one sentence, and the later days wait.

**Run params**: `store` (default knob `copy_store`, `{{broker}}` and `{{ds_nodash}}` replaced), `warehouse`,
`broker_conf`, `subscriptions`, `pull_from`, `queues` (default `rebuilt`), as in `{DAG_ID}`.

**Knobs** (as in `{DAG_ID}`): `brokers`, a JSON list of broker names, one DAG `{DAG_ID}__<broker>` each
(characters other than letters, digits, `.`, `-` and `_` become `_` in the DAG id); `copy_store`, default
`/data/rocketmq/copies/{{broker}}/{{ds_nodash}}`, where the day's copy of each broker is.
"""


def _safe(name: str) -> str:
    """A broker name as it may appear in a DAG or task id."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def broker_dag_id(broker: str) -> str:
    """The DAG id of a broker's history DAG."""
    return f"{DAG_ID}__{_safe(broker)}"


def _copy_of(broker: str) -> str:
    """The day's copy of one broker: param `store` with {broker} and {ds_nodash} replaced."""
    return "{{ params.store | replace('{broker}', '" + broker + "') | replace('{ds_nodash}', ds_nodash) }}"


def _history_dag(dag_id: str, description: str, doc_md: str, tags: list[str]) -> DAG:
    """A DAG appending store copies day after day: catch-up on, one run at a time, param `store` the copy."""
    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=SCHEDULE,
        start_date=pendulum.parse(START_DATE, tz="UTC"),
        catchup=True,
        max_active_runs=1,
        doc_md=doc_md,
        tags=["rocketmq", "spark", "delta", *tags],
        params={
            "store": Param(COPY_STORE, type="string", minLength=1,
                           description="the day's store copy (of each broker); {broker} and {ds_nodash} are replaced"),
            **_shared_params("rebuilt", "the history's queues are job 1's rebuild"),
        },
    )


def _broker_dag(broker: str) -> DAG:
    """One broker's history DAG: the day's copy appended by job 1 (--broker), then job 2 over the history."""
    store = _copy_of(broker)
    with _history_dag(broker_dag_id(broker), f"Append broker {broker}'s store copies to its history: build_queues "
                      f"--broker, then simulate_pull", BROKER_DOC_MD, ["history"]) as broker_dag:
        label = f"{broker}-{{{{ ds_nodash }}}}"
        append = _submit("build_queues", "build_queues.py", _common_args(store, ("--broker", broker)), label,
                         depends_on_past=True)
        replay = _submit("simulate_pull", "simulate_pull.py", _common_args(store, ("--dump-id", broker)) + JOB2_ARGS,
                         label)
        append >> replay
    return broker_dag


for _broker in BROKERS:
    globals()[broker_dag_id(_broker)] = _broker_dag(_broker)


CLUSTER_DOC_MD = """
### RocketMQ filter replay: one cluster's brokers

Each run appends every master broker's store copy of its logical date to that broker's history, in parallel
(**build_queues__&lt;broker&gt;**, `--broker`, as a history DAG does), then replays each broker
(**simulate_pull__&lt;broker&gt;**, `--queues rebuilt`) with every broker's queues (`--cluster`): a group whose
subscriptions name their members is allocated over all of them, as its clients' rebalance does
(docs/simulate_pull.md). Catch-up is on, one run at a time, and a day's appends wait for the day before's.

**Run params**: as in the history DAGs. **Knobs**: `cluster`, a JSON list of the cluster's master brokers;
`copy_store`, where each broker's day's copy is.
"""


def _cluster_dag(brokers: list[str]) -> DAG:
    """A cluster's DAG: every broker's copy appended in parallel, then every broker replayed with --cluster."""
    with _history_dag(f"{DAG_ID}__cluster", f"Append and replay the brokers of one cluster ({', '.join(brokers)}) "
                      f"with --cluster", CLUSTER_DOC_MD, ["history", "cluster"]) as cluster_dag:
        appends = [_submit(f"build_queues__{_safe(b)}", "build_queues.py", _common_args(_copy_of(b), ("--broker", b)),
                           f"{b}-{{{{ ds_nodash }}}}", depends_on_past=True) for b in brokers]
        for b in brokers:
            replay = _submit(f"simulate_pull__{_safe(b)}", "simulate_pull.py",
                             _common_args(_copy_of(b), ("--dump-id", b)) + JOB2_ARGS + ["--cluster", ",".join(brokers)],
                             f"{b}-{{{{ ds_nodash }}}}")
            appends >> replay
    return cluster_dag


if CLUSTER:
    cluster_dag = _cluster_dag(CLUSTER)
