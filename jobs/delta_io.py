"""Delta writes for the jobs: each table lives at <warehouse>/<table>, partitioned by dump_id, and a run replaces
one dump's rows (its partition) at once."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from filterlib.store import fs as sfs
from jobs.faults import LayoutOutdated, TableWriteError, java_reason

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STATS_PROPERTY = "delta.dataSkippingStatsColumns"
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


PARTITION = "dump_id"
"""The column every table is partitioned by (one directory per dump): Delta checks a commit's read predicate
against other writers' files per partition, so runs of different dumps never conflict, and readers of one dump
prune to its directory."""
UPGRADE = "python -m jobs.upgrade --warehouse"
"""The one command that lays out a warehouse written before the partitioning (jobs.upgrade)."""


def stats_of(columns: Sequence[str]) -> list[str]:
    """The statistics columns Delta takes on a partitioned table: every column but the partition one (Delta keeps
    none for it and refuses it in delta.dataSkippingStatsColumns; its directory prunes instead)."""
    return [c for c in columns if c != PARTITION]


def partition_dir(dump_id: str) -> str:
    """The directory of a dump's files inside a table, as Spark names it (`dump_id=<id>`, ':' escaped as %3A)."""
    return f"{PARTITION}={quote(check_dump_id(dump_id), safe='@+._-')}"


def replace_dump(df: DataFrame, warehouse: str, table: str, dump_id: str, stats_columns: Sequence[str] = ()) -> str:
    """Overwrite the rows of one dump_id in a Delta table in ONE commit (replaceWhere on its partition); other dumps
    stay, and a run of another dump committing meanwhile is no conflict (PARTITION).

    stats_columns, when given, are the only columns Delta keeps per-file min/max statistics for (the table property
    delta.dataSkippingStatsColumns): by default Delta computes them for the first 32 columns of every row written,
    which doubled the write time of the wide per-decision and per-message tables; the keys lookups filter on keep
    their data skipping. A table made before the setting existed gets it (one property commit) on its next write.
    The schema is merged, so a table written by an older release takes a column added since (null on other dumps'
    rows) and keeps one dropped since (null on the new rows). A failure is TableWriteError (jobs.faults) naming the
    table and dump, its cause chained; a table not partitioned by dump is LayoutOutdated (run jobs.upgrade)."""
    path = table_path(warehouse, table)
    check_dump_id(dump_id)
    spark = df.sparkSession
    stats = stats_of(stats_columns)
    try:
        ensure_table(spark, path, table, json.loads(df.schema.json()), stats)
        _replace(df, path, dump_id, stats)
    except LayoutOutdated:
        raise
    except Exception as e:  # Py4JJavaError, a captured SQL or Python exception: the cause stays chained
        raise TableWriteError(table, path, dump_id) from e
    return path


def append_dump(df: DataFrame, warehouse: str, table: str, dump_id: str, on_top_of: int | None,
                stats_columns: Sequence[str] = ()) -> str:
    """replace_dump of dump_id's rows at version `on_top_of` (a history's last complete run; None: no rows yet)
    with df's rows added: one commit, and a re-run after a run killed past its commit never holds a row twice.
    It rewrites the partition: for tables a history keeps small, or where the tasks cannot write files themselves."""
    from pyspark.sql import functions as F

    if on_top_of is not None:
        held = (df.sparkSession.read.format("delta").option("versionAsOf", on_top_of)
                .load(table_path(warehouse, table)).where(F.col(PARTITION) == dump_id))
        df = held.unionByName(df, allowMissingColumns=True).select(*df.columns)  # a column new to the table: null
    return replace_dump(df, warehouse, table, dump_id, stats_columns)


def partition_columns(spark: SparkSession, path: str) -> list[str] | None:
    """The partition columns of the Delta table at path; None when there is no Delta table there."""
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    snapshot = log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    if int(snapshot.version()) < 0:
        return None
    return scala_list(snapshot.metadata().partitionColumns())


def scala_list(seq: Any) -> list[Any]:
    """A Scala Seq's elements as a Python list, by index: iterating it through py4j ends in a Java exception that
    PySpark's error conversion takes ~25 ms to turn into StopIteration, a cost per table per run."""
    return [seq.apply(i) for i in range(int(seq.size()))]


def ensure_table(spark: SparkSession, path: str, table: str, schema: dict, stats_columns: Sequence[str]) -> None:
    """Create the table at path, empty and partitioned by dump, unless it exists: a commit of rows needs a table
    to read, or two runs' first commits into a new warehouse would both claim its version 0 (Delta refuses the
    second). Losing that race to another run's creation is fine once its table is partitioned by dump. A table
    there that is not partitioned by dump is LayoutOutdated."""
    have = partition_columns(spark, path)
    if have is not None:
        if have != [PARTITION]:
            raise outdated(path, table)
        return
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    txn = delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
    if txn.readVersion() >= 0:
        return
    txn.updateMetadata(delta.actions.Action.fromJson(creation_metadata(schema, stats_columns)), False)
    op = getattr(delta, "DeltaOperations$CreateTable")(txn.metadata(), False, False, jvm.scala.Option.empty())
    try:
        txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(jvm.java.util.ArrayList()).toList(), op)
    except Exception:
        if partition_columns(spark, path) != [PARTITION]:
            raise


def creation_metadata(schema: dict, stats_columns: Sequence[str]) -> str:
    """The metaData action (JSON) of a new table of the jobs: the schema (Spark StructType JSON, every column
    nullable), partitioned by dump, statistics kept for `stats_columns` only when given."""
    fields = [{**f, "nullable": True} for f in schema["fields"]]
    conf = {STATS_PROPERTY: ",".join(stats_columns)} if stats_columns else {}
    return json.dumps({"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                                    "schemaString": json.dumps({**schema, "fields": fields}),
                                    "partitionColumns": [PARTITION], "configuration": conf,
                                    "createdTime": int(time.time() * 1000)}})


def laid_out(spark: SparkSession, warehouse: str, names: Iterable[str]) -> tuple[list[str], list[str]]:
    """(tables not partitioned by dump, tables that are) among `names` present in the warehouse."""
    old, current = [], []
    for name in sorted(set(names)):
        have = partition_columns(spark, table_path(warehouse, name))
        if have is not None:
            (current if have == [PARTITION] else old).append(name)
    return old, current


def layout_problem(spark: SparkSession, warehouse: str, names: Iterable[str]) -> str | None:
    """One sentence naming the tables an older release laid out (not partitioned by dump) and the upgrade command;
    None when every table present is partitioned by dump."""
    old, _ = laid_out(spark, warehouse, names)
    if not old:
        return None
    return (f"{warehouse}: tables {', '.join(old)} were written before tables were partitioned by dump (one "
            f"directory per dump); run `{UPGRADE} {warehouse}` once, then run again")


def check_layout(spark: SparkSession, path: str, table: str) -> None:
    """LayoutOutdated when the table at path exists and is not partitioned by dump (PARTITION)."""
    have = partition_columns(spark, path)
    if have is not None and have != [PARTITION]:
        raise outdated(path, table)


def outdated(path: str, table: str) -> LayoutOutdated:
    """The refusal of a table an older release laid out, naming it and the upgrade command."""
    warehouse = path.rstrip("/").rsplit("/", 1)[0]
    return LayoutOutdated(f"{path}: table {table} was written before tables were partitioned by dump (one "
                          f"directory per dump); run `{UPGRADE} {warehouse}` once, then run again")


def _replace(df: DataFrame, path: str, dump_id: str, stats_columns: Sequence[str]) -> None:
    """replace_dump's write itself."""
    writer = (df.write.format("delta").mode("overwrite").option("replaceWhere", f"dump_id = '{check_dump_id(dump_id)}'")
              .option("mergeSchema", "true").partitionBy(PARTITION))
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
    from jobs.delta_log import latest_version

    listed = latest_version(spark, path)  # the log's listing where it answers exactly, else delta-spark's snapshot
    if listed is not None:
        return listed
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
