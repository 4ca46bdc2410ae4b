"""Delta writes for the jobs: each table lives at <warehouse>/<table>, and a run replaces one dump's rows at once."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from filterlib.store import fs as sfs
from jobs.faults import TableWriteError, java_reason

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DUMP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$")


def table_path(warehouse: str, table: str) -> str:
    """<warehouse>/<table> (a local directory or a Hadoop URI)."""
    return f"{warehouse.rstrip('/')}/{table}"


def check_dump_id(dump_id: str) -> str:
    """The dump id if it is safe inside a SQL predicate (letters, digits and ._:@+-), else ValueError."""
    if not DUMP_ID.match(dump_id):
        raise ValueError(f"dump id {dump_id!r} must start with a letter or digit and hold only letters, digits "
                         f"and . _ : @ + - (pass --dump-id)")
    return dump_id


STATS_PROPERTY = "delta.dataSkippingStatsColumns"


def replace_dump(df: DataFrame, warehouse: str, table: str, dump_id: str, stats_columns: Sequence[str] = ()) -> str:
    """Overwrite the rows of one dump_id in a Delta table in ONE commit (replaceWhere); other dumps stay.

    stats_columns, when given, are the only columns Delta keeps per-file min/max statistics for (the table property
    delta.dataSkippingStatsColumns): by default Delta computes them for the first 32 columns of every row written,
    which doubled the write time of the wide per-decision and per-message tables; the keys lookups filter on keep
    their data skipping. A table made before the setting existed gets it (one property commit) on its next write.
    The schema is merged, so a table written by an older release takes a column added since (null on other dumps'
    rows) and keeps one dropped since (null on the new rows). A failure is TableWriteError (jobs.faults) naming the
    table and dump, its cause chained."""
    path = table_path(warehouse, table)
    check_dump_id(dump_id)
    try:
        _replace(df, path, dump_id, stats_columns)
    except Exception as e:  # Py4JJavaError, a captured SQL or Python exception: the cause stays chained

        raise TableWriteError(table, path, dump_id) from e
    return path


def _replace(df: DataFrame, path: str, dump_id: str, stats_columns: Sequence[str]) -> None:
    """replace_dump's write itself."""
    writer = (df.write.format("delta").mode("overwrite").option("replaceWhere", f"dump_id = '{check_dump_id(dump_id)}'")
              .option("mergeSchema", "true"))
    if stats_columns:
        wanted = ",".join(stats_columns)
        current = _table_properties(df.sparkSession, path)
        if current is None:
            writer = writer.option(STATS_PROPERTY, wanted)
        elif current.get(STATS_PROPERTY) != wanted:
            df.sparkSession.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{STATS_PROPERTY}' = '{wanted}')")
    writer.save(path)


def _table_properties(spark: SparkSession, path: str) -> dict[str, str] | None:
    """A Delta table's properties, None when there is no Delta table at path yet."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return dict(DeltaTable.forPath(spark, path).detail().select("properties").first()[0] or {})


def last_version(spark: SparkSession, path: str) -> int:
    """The newest committed Delta version of the table at path (-1 when there is none): what a run records for a
    table replace_dump wrote (one run per dump at a time, jobs.runlock, so no commit of this dump comes between)."""
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    return int(log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty()).version())


# Fail fast when probing: a refused connection or a missing bucket is one answer, not minutes of S3A retries.
_PROBE_CONF = {"fs.s3a.bucket.probe": "2", "fs.s3a.attempts.maximum": "1", "fs.s3a.retry.limit": "1",
               "fs.s3a.retry.interval": "100ms", "fs.s3a.connection.establish.timeout": "5s"}


def warehouse_problem(spark: SparkSession, warehouse: str) -> str | None:
    """Why a warehouse given as a URI cannot be used, in one line naming it; None when its file system answers.

    The URI's Hadoop file system is opened as Delta will open it (the session's Hadoop settings) but as a fresh
    instance with retries cut to one and, for s3a, the bucket probed at start: an unknown scheme (no connector on
    the class path), a missing bucket, a refused connection or rejected credentials each give one line, not a
    Java stack trace minutes later. Whether the tables exist is each job's own question. A local path (or
    file: URI) is not probed."""
    if "://" not in warehouse or warehouse.lower().startswith("file:"):
        return None
    from py4j.protocol import Py4JError

    name = sfs.display(warehouse)  # without credentials or query, as store URIs are shown
    hint = " (a warehouse on S3 is an s3a:// URI)" if warehouse.lower().startswith("s3://") else ""
    try:
        jvm = spark.sparkContext._jvm
        hconf = spark._jsparkSession.sessionState().newHadoopConf()
        for k, v in _PROBE_CONF.items():
            hconf.set(k, v)
        path = jvm.org.apache.hadoop.fs.Path(warehouse)
        fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(path.toUri(), hconf)
        try:
            fs.exists(path)
        finally:
            fs.close()
    except Py4JError as e:
        return f"{name}: cannot use the warehouse: {java_reason(e)}{hint}"
    return None
