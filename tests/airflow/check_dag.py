"""Load the project's DAGs with Airflow's DagBag and write what tests/test_airflow_dag.py checks, as JSON.

Runs with the Airflow virtualenv's Python (tests/airflow/setup_venv.sh), never the project's: Airflow and the
Spark provider (which pulls pyspark-client) cannot share the project's virtualenv.

    check_dag.py DAGS_DIR SCENARIOS_JSON OUT_JSON

SCENARIOS_JSON: a list of {"name", "logical_date" (ISO, or null), "conf" (the run's conf)}. For each scenario
and task the templated fields are rendered the way a worker renders them (a RuntimeTaskInstance's template
context, run conf validated against the DAG's params), with no database and no API server, and the spark-submit
command line the provider's hook would run is built (the Spark connection comes from AIRFLOW_CONN_* in the
environment).
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import pendulum


def _describe_task(task: Any) -> dict[str, Any]:
    return {
        "class": type(task).__name__,
        "mro": [c.__module__ + "." + c.__qualname__ for c in type(task).__mro__],
        "upstream": sorted(task.upstream_task_ids),
        "depends_on_past": task.depends_on_past,
        "downstream": sorted(task.downstream_task_ids),
        "conn_id": task._conn_id,
        "archives": task._archives,
        "template_fields": list(task.template_fields),
        "application": task.application,
        "application_args": task.application_args,
        "py_files": task.py_files,
        "packages": task.packages,
        "conf": task.conf,
        "env_vars": task.env_vars,
        "name": task.name,
    }


def _render(dag: Any, task: Any, scenario: dict[str, Any]) -> dict[str, Any]:
    from airflow.sdk.api.datamodels._generated import DagRun, DagRunState, DagRunType, TIRunContext
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    logical = pendulum.parse(scenario["logical_date"]) if scenario.get("logical_date") else None
    now = pendulum.now("UTC")
    run_id = f"manual__{scenario['name']}"
    dag_run = DagRun(
        dag_id=dag.dag_id, run_id=run_id, logical_date=logical,
        data_interval_start=logical, data_interval_end=logical,  # a CronTriggerTimetable run's interval
        run_after=logical or now, start_date=now, end_date=None, run_type=DagRunType.MANUAL,
        state=DagRunState.RUNNING, conf=scenario.get("conf") or {}, consumed_asset_events=[], partition_key=None,
    )
    task = task.prepare_for_execution()
    ti = RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(), task_id=task.task_id, dag_id=dag.dag_id, run_id=run_id, try_number=1,
        dag_version_id=uuid.uuid4(), map_index=-1, start_date=now, task=task, max_tries=0,
        _ti_context_from_server=TIRunContext(dag_run=dag_run, max_tries=0),
    )
    try:
        ti.render_templates()
    except Exception as e:  # reported, not raised: a scenario may be meant to fail
        return {"error": f"{type(e).__name__}: {e}"}
    out = {field: getattr(task, field) for field in task.template_fields}
    out["command"] = task._get_hook()._build_spark_submit_command(task.application)
    return out


def _render_all(dags_dir: str, dag_id: str, scenario: dict[str, Any]) -> dict[str, Any]:
    """Every task rendered for one scenario, on a fresh parse of the DAG file, as a worker has.

    (Merging a run's conf into the params sets the parsed DAG's own Param objects: a second scenario on the same
    parse would see the first one's values.)
    """
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=dags_dir, safe_mode=False).dags[dag_id]
    return {t.task_id: _render(dag, t, scenario) for t in dag.tasks}


def _serialize(dag: Any) -> dict[str, Any]:
    """What the scheduler and the UI see: the DAG serialized and read back."""
    from airflow.serialization.serialized_objects import DagSerialization

    try:
        back = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {
        "task_ids": sorted(back.task_ids),
        "downstream": {t.task_id: sorted(t.downstream_task_ids) for t in back.tasks},
        "task_types": {t.task_id: t.task_type for t in back.tasks},
    }


def main(dags_dir: str, scenarios_path: str, out_path: str) -> int:
    from airflow.dag_processing.dagbag import DagBag

    with open(scenarios_path, encoding="utf-8") as f:
        scenarios = json.load(f)
    bag = DagBag(dag_folder=dags_dir, safe_mode=False)
    result: dict[str, Any] = {
        "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
        "warnings": {str(k): list(map(str, v)) for k, v in bag.captured_warnings.items()},
        "dag_ids": sorted(bag.dag_ids),
        "dags": {},
    }
    for dag_id in sorted(bag.dag_ids):
        dag = bag.dags[dag_id]  # get_dag() would consult the metadata database
        result["dags"][dag_id] = {
            "schedule": str(dag.schedule),
            "timetable": type(dag.timetable).__name__,
            "catchup": dag.catchup,
            "max_active_runs": dag.max_active_runs,
            "start_date": dag.start_date.isoformat() if dag.start_date else None,
            "doc_md": dag.doc_md,
            "params": {k: dag.params.get_param(k).resolve(suppress_exception=True) for k in dag.params},
            "serialized": _serialize(dag),
            "task_ids": list(dag.task_ids),
            "topological": [t.task_id for t in dag.topological_sort()],
            "tasks": {t.task_id: _describe_task(t) for t in dag.tasks},
            "renders": {s["name"]: _render_all(dags_dir, dag_id, s) for s in scenarios},
        }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
