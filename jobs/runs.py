"""One consistent snapshot per run: the `runs` Delta table names, for each complete run, the version of every table
it wrote; readers read a dump's tables at the versions of its last complete run.

A run writes its tables one commit each, then appends its row here (`record_run`), last. A run killed at any point
before that append leaves no row, so `pinned_version` still names the previous complete run's versions and
`read_dump` reads those (Delta time travel): the tables the killed run did commit hold its rows in
newer versions nobody reads until a complete run names them. The row is a blind append (another dump's run
appending at the same time does not conflict). One run per dump at a time (jobs.runlock) means no commit of the
dump's rows comes between a run's write of a table and the version it records (jobs.delta_io.last_version).
A warehouse without the table, or a table no run names (written by an older release), is read at its latest
version, as before: said once per warehouse and table in the log.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from filterlib import tables
from jobs.delta_files import Where, append_rows, dump_frame, dump_rows
from jobs.delta_io import check_dump_id, last_version, table_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

RUNS = tables.RUNS.name
JOB1_TABLES = ("messages", "consume_queue", "consumer_filters", "dumps")
"""Job 1's tables job 2 reads: job 2 records their versions as its inputs."""


def record_run(spark: SparkSession, warehouse: str, job: str, dump_id: str, written: Mapping[str, str | int],
               inputs: Iterable[str] = ()) -> dict:
    """Append the run's row (written last): each table in `written` (table -> its path, whose latest version is
    the run's commit, or the version itself) and the pinned version of each table in `inputs`. Returns the row."""
    check_dump_id(dump_id)
    versions = {t: v if isinstance(v, int) else last_version(spark, v) for t, v in written.items()}
    read = {t: v for t in inputs if (v := pinned_version(spark, warehouse, t, dump_id, quiet=True)) is not None}
    row = {"dump_id": dump_id, "run_id": uuid.uuid4().hex, "job": job, "finished_at": int(time.time() * 1000),
           "tables": versions, "inputs": read}
    append_rows(spark, warehouse, tables.RUNS, dump_id, [row])
    log.info("run %s of %s recorded: %s", row["run_id"], job,
             ", ".join(f"{t} v{v}" for t, v in sorted(versions.items())))
    return row


_said: set[tuple[str, str]] = set()


def _latest_note(warehouse: str, table: str, why: str) -> None:
    """Say once per warehouse and table that it is read at its latest version."""
    if (warehouse, table) not in _said:
        _said.add((warehouse, table))
        log.info("%s: %s; reading %s at its latest version", warehouse, why, table)


_pins: dict[tuple[str, str], tuple[int, dict[str, int]]] = {}  # (runs path, dump) -> (runs version, pins)


def pinned_versions(spark: SparkSession, warehouse: str, dump_id: str) -> dict[str, int]:
    """For each table some complete run of dump_id wrote, the version the last such run committed (looked up once
    per version of the runs table)."""

    path = table_path(warehouse, RUNS)
    runs_version = last_version(spark, path)
    if runs_version < 0:
        return {}
    hit = _pins.get((path, dump_id))
    if hit is not None and hit[0] == runs_version:
        return dict(hit[1])
    rows = read_rows(spark, warehouse, RUNS, dump_id, version=runs_version)
    out: dict[str, int] = {}
    for r in sorted(rows, key=lambda r: r["finished_at"]):
        out.update(r["tables"] or {})
    _pins[(path, dump_id)] = (runs_version, out)
    return dict(out)


def pinned_version(spark: SparkSession, warehouse: str, table: str, dump_id: str, quiet: bool = False) -> int | None:
    """The version of `table` the last complete run of dump_id wrote; None (read the latest) when no run names it."""
    version = pinned_versions(spark, warehouse, dump_id).get(table)
    if version is None:
        if not quiet:
            _latest_note(warehouse, table, f"no complete run of dump {dump_id!r} names {table}")
        return None
    if version > last_version(spark, table_path(warehouse, table)):  # the table was made again since that run
        if not quiet:
            _latest_note(warehouse, table, f"{table} is older than the version the last run of {dump_id!r} names")
        return None
    return version


def read_version(spark: SparkSession, warehouse: str, table: str, dump_id: str) -> int:
    """The version of `table` that `read_dump` reads for dump_id (its pinned version, else the latest)."""
    version = pinned_version(spark, warehouse, table, dump_id, quiet=True)
    return version if version is not None else last_version(spark, table_path(warehouse, table))


def last_run(spark: SparkSession, warehouse: str, dump_id: str, job: str) -> dict | None:
    """The runs row of the last complete run of `job` on dump_id (None: none, or no runs table)."""
    if last_version(spark, table_path(warehouse, RUNS)) < 0:
        return None
    rows = [r for r in read_rows(spark, warehouse, RUNS, dump_id, latest=True) if r["job"] == job]
    return max(rows, key=lambda r: r["finished_at"]) if rows else None


def read_rows(spark: SparkSession, warehouse: str, table: str, dump_id: str, version: int | None = None,
              latest: bool = False, columns: Sequence[str] | None = None, where: Where | None = None) -> list[dict]:
    """read_dump's rows as dicts (maps as dicts), of `columns` when given and only those meeting `where`, for what
    a run reads on the driver: read from the files the table's log names (`jobs.delta_files.dump_rows`), no Spark
    job; through read_dump where that cannot answer exactly (and for a table that does not exist, whose
    AnalysisException the caller sees)."""
    from pyspark.sql import functions as F

    if version is None:
        version = None if latest else pinned_version(spark, warehouse, table, dump_id)
        if version is None:
            version = last_version(spark, table_path(warehouse, table))
    if version >= 0:
        rows = dump_rows(spark, warehouse, table, dump_id, version, columns, where)
        if rows is not None:
            return rows
    df = read_dump(spark, warehouse, table, dump_id, version=version if version >= 0 else None)
    if where is not None:
        column, op, value = where
        if op not in ("in", ">="):
            raise ValueError(f"read_rows: no condition {op!r}")
        df = df.where(F.col(column).isin(list(value)) if op == "in" else F.col(column) >= value)
    if columns is not None:
        df = df.select(*[c for c in df.columns if c in columns])
    return [r.asDict(recursive=True) for r in df.collect()]


def read_dump(spark: SparkSession, warehouse: str, table: str, dump_id: str, version: int | None = None,
              latest: bool = False) -> DataFrame:
    """One dump's rows of a table as the dump's last complete run left it (the version that run
    committed, so a run killed part-way is never seen); `version` reads that version instead, `latest` the newest
    (a run reading what it has just written itself). A table no complete run names is read at its latest version.
    The rows come from the files the table's log names at that version (`jobs.delta_files.dump_frame`): delta-spark
    would first reconstruct the table's state, a Spark job per table and version that was most of a reader's time;
    it answers where the log reader cannot (and for a table that does not exist, whose AnalysisException the caller
    sees)."""
    from pyspark.sql import functions as F

    path = table_path(warehouse, table)
    if version is None and not latest:
        version = pinned_version(spark, warehouse, table, dump_id)
    at = version if version is not None else last_version(spark, path)
    found = dump_frame(spark, warehouse, table, dump_id, at) if at >= 0 else None
    if found is not None:
        return found[0]
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path).where(F.col("dump_id") == dump_id)
