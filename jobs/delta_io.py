"""Delta writes for the jobs: each table lives at <warehouse>/<table>, and a run replaces one dump's rows at once."""

from __future__ import annotations

import json
import logging
import posixpath
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote

from filterlib.store import fs as sfs
from jobs.faults import TableWriteError, java_reason

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DUMP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$")
DUMP_TAG = "dump_id"
"""The tag each file commit_dump adds carries: the dump its rows belong to."""
COMMIT_ATTEMPTS = 4
"""Tries of a dump's commit that loses only to other dumps' commits (`retrying`)."""
log = logging.getLogger(__name__)
T = TypeVar("T")


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
        retrying(df.sparkSession, path, table, dump_id, lambda: _replace(df, path, dump_id, stats_columns))
    except Exception as e:  # Py4JJavaError, a captured SQL or Python exception: the cause stays chained
        raise TableWriteError(table, path, dump_id) from e
    return path


def holds_dump(add: dict, dump_id: str) -> bool | None:
    """Whether a table file (its add action) holds dump_id's rows by its tag or exact statistics; None when they
    cannot tell."""
    tags = add.get("tags") or {}
    if DUMP_TAG in tags:
        return tags[DUMP_TAG] == dump_id
    stats = json.loads(add["stats"]) if add.get("stats") else {}
    lo, hi = (stats.get("minValues") or {}).get("dump_id"), (stats.get("maxValues") or {}).get("dump_id")
    if stats.get("numRecords") == 0:
        return False
    if lo is not None and (dump_id < lo or (hi is not None and dump_id > hi)):
        return False
    if lo is not None and lo == hi and (stats.get("nullCount") or {}).get("dump_id", 0) == 0:
        return lo == dump_id
    return None


_CONFLICTS = ("DELTA_CONCURRENT_APPEND", "DELTA_CONCURRENT_DELETE_READ", "ConcurrentAppendException",
              "ConcurrentDeleteReadException")
_PREDICATE_DUMP = re.compile(r"dump_id\W+=\W+'([^'\\]*)'")


def is_conflict(e: BaseException) -> bool:
    """Whether Delta refused a commit because another writer's came first: files added, or files this one read
    removed (the two conflicts a commit of another dump's rows causes in a table that is not partitioned)."""
    seen: BaseException | None = e
    while seen is not None:
        if any(c in str(seen) for c in _CONFLICTS):
            return True
        seen = seen.__cause__
    return False


def others_only(spark: SparkSession, path: str, since: int, dump_id: str) -> bool:
    """Whether every commit after version `since` replaced other dumps' rows only: its commitInfo's predicate
    names dump ids and not this one, every file it adds holds another dump's rows (tags or statistics), no file it
    removes is tagged with this dump, and it changes neither the schema nor the protocol. A commit of dump_id
    that lost to such commits only can be made again on the new snapshot."""
    latest = last_version(spark, path)
    if since < 0 or latest <= since:
        return False
    logs = [f"{path}/_delta_log/{v:020d}.json" for v in range(since + 1, latest + 1)]
    commits: dict[str, list[dict]] = {}
    for r in spark.read.text(logs).selectExpr("input_file_name() AS f", "value").collect():
        commits.setdefault(posixpath.basename(unquote(r.f)), []).append(json.loads(r.value))
    if len(commits) != len(logs):
        return False
    for actions in commits.values():
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        named = set(_PREDICATE_DUMP.findall(json.dumps((info.get("operationParameters") or {}).get("predicate"))))
        if not named or dump_id in named:
            return False
        for a in actions:
            if "metaData" in a or "protocol" in a:
                return False
            if "add" in a and holds_dump(a["add"], dump_id) is not False:
                return False
            if "remove" in a and ((a["remove"].get("tags") or {}).get(DUMP_TAG) == dump_id):
                return False
    return True


def retrying(spark: SparkSession, path: str, table: str, dump_id: str, write: Callable[[], T]) -> T:
    """`write()`, made again, up to COMMIT_ATTEMPTS times in all, when Delta refuses its commit only because runs
    of other dumps committed to the table since the version it started from (`others_only`):
    the tables are not partitioned, and Delta counts any concurrent append as a conflict. A conflict with a
    commit that touched this dump's rows, or any other failure, is raised at once."""
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        since = last_version(spark, path)
        try:
            return write()
        except Exception as e:
            if attempt == COMMIT_ATTEMPTS or not is_conflict(e) or not others_only(spark, path, since, dump_id):
                raise
            log.warning("%s: another dump's run committed first; committing dump %s again (try %d of %d)",
                        table, dump_id, attempt + 1, COMMIT_ATTEMPTS)
    raise AssertionError("unreachable")


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
