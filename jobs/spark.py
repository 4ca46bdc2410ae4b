"""The one SparkSession builder for jobs and tests: Delta Lake wired in, local or on a cluster.

Locally, the Delta jars come from the project cache that `make setup` fills with Maven (`.cache/jars`, or the
directory in $RMQ_REPLAY_JARS_DIR) and are handed to Spark with `spark.jars`. Under spark-submit the JVM is already
running, so the builder asks it (through the gateway spark-submit started) whether Delta is on its classpath —
`--packages io.delta:delta-spark_4.2_2.13:4.4.0`, `--jars ...`, or jars installed with the cluster's Spark — and
only adds the Delta SQL extension and catalog; if it is not, DeltaJarsMissing says which option to pass (the local
cache is never consulted there: the code may be running from a --py-files zip).

A session that will use an s3a:// location (a Delta warehouse on S3: `build_session(..., locations=[warehouse])`)
also needs Hadoop's S3A connector, hadoop-aws 3.5.0 (the Hadoop pyspark bundles) and the AWS SDK v2 bundle it
asks for. Locally they come from `make s3-jars`' cache (`.cache/jars-s3`, or $RMQ_REPLAY_S3_JARS_DIR), only when an
s3a:// location (or RMQ_REPLAY_S3A=1) asks for them: the bundle is ~650 MB. A local master gets them on the driver's
class path (no copy per session), any other master through spark.jars. An S3-compatible server named by
AWS_ENDPOINT_URL(_S3), as `--store` takes it, becomes the fs.s3a endpoint settings unless the conf names one.
Under spark-submit the user passes `--packages org.apache.hadoop:hadoop-aws:3.5.0` and the fs.s3a settings with
`--conf`; S3AJarsMissing says so when the connector is not on the JVM's class path.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
S3A_PACKAGE = "org.apache.hadoop:hadoop-aws:3.5.0"
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
_ROOT = Path(__file__).resolve().parent.parent
_VERSION_SUFFIX = re.compile(r"-\d[0-9A-Za-z.\-]*$")


class DeltaJarsMissing(RuntimeError):
    """No Delta jars were found locally and none were configured for the session."""


class S3AJarsMissing(DeltaJarsMissing):
    """An s3a:// location needs hadoop-aws and the AWS SDK bundle, and neither the cache nor the JVM has them."""


def jars_dir() -> Path:
    """Where `make setup` puts the Delta jars (override with $RMQ_REPLAY_JARS_DIR)."""
    return Path(os.environ.get("RMQ_REPLAY_JARS_DIR", _ROOT / ".cache" / "jars"))


def _artifact(jar: Path) -> str:
    return _VERSION_SUFFIX.sub("", jar.stem)


def delta_jars(directory: Path | None = None) -> list[Path]:
    """The cached jars Spark lacks: Delta and its own dependencies, minus artifacts pyspark already ships.

    Maven resolves delta-spark's full runtime closure, which repeats libraries Spark bundles in newer versions
    (jackson, parquet, hadoop, scala); putting the older copies first on the classpath would break Spark.
    """
    directory = directory or jars_dir()
    if not directory.is_dir():
        return []
    import pyspark

    shipped = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(j for j in directory.glob("*.jar") if _artifact(j) not in shipped)


def s3_jars_dir() -> Path:
    """Where `make s3-jars` puts hadoop-aws and its AWS SDK bundle (override with $RMQ_REPLAY_S3_JARS_DIR)."""
    return Path(os.environ.get("RMQ_REPLAY_S3_JARS_DIR", _ROOT / ".cache" / "jars-s3"))


def s3a_jars(directory: Path | None = None) -> list[Path]:
    """The cached S3A connector jars (hadoop-aws, the AWS SDK v2 bundle, ...); [] when `make s3-jars` never ran."""
    directory = directory or s3_jars_dir()
    return sorted(directory.glob("*.jar")) if directory.is_dir() else []


def needs_s3a(locations: Sequence[str | None] = ()) -> bool:
    """True when one of the session's locations is an s3a:// URI, or RMQ_REPLAY_S3A=1 asks for the connector."""
    if os.environ.get("RMQ_REPLAY_S3A") == "1":
        return True
    return any(loc and loc.split("://", 1)[0].lower() == "s3a" for loc in locations if "://" in (loc or ""))


def s3a_env_conf(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """fs.s3a settings for the S3-compatible server AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL names (as `--store`
    reads it): its endpoint, path-style requests, TLS as the URL's scheme says, the region from
    AWS_REGION / AWS_DEFAULT_REGION. {} when neither variable is set (AWS itself: s3a finds the endpoint)."""
    env = os.environ if environ is None else environ
    url = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if not url:
        return {}
    url = url if "://" in url else "https://" + url
    out = {"spark.hadoop.fs.s3a.endpoint": url.rstrip("/"),
           "spark.hadoop.fs.s3a.path.style.access": "true",
           "spark.hadoop.fs.s3a.connection.ssl.enabled": str(url.lower().startswith("https://")).lower()}
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = region
    return out


def _is_local(master: str | None) -> bool:
    return master is None or master == "local" or master.startswith("local[")


def _s3a_conf(conf: dict[str, str], master: str | None) -> None:
    """Add the S3A connector (and AWS_ENDPOINT_URL's server) to a session this process starts; the caller's conf
    keeps precedence. S3AJarsMissing when `make s3-jars` never ran and the conf names no hadoop-aws either."""
    if not any(k.startswith("spark.hadoop.fs.s3a.endpoint") for k in conf):
        for k, v in s3a_env_conf().items():
            conf.setdefault(k, v)
    named = " ".join(conf.get(k, "") for k in ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath"))
    if "hadoop-aws" in named:
        return
    jars = s3a_jars()
    if not jars:
        raise S3AJarsMissing(
            f"an s3a:// location needs the S3A connector, and {s3_jars_dir()} has no jars: run `make s3-jars`, "
            f"or on a cluster pass `--packages {S3A_PACKAGE}` to spark-submit")
    if _is_local(master):
        # One JVM: the driver's class path is the executors' too, and the ~650 MB bundle is not copied per session.
        key, sep = "spark.driver.extraClassPath", os.pathsep
    else:
        key, sep = "spark.jars", ","
    conf[key] = sep.join([*(v for v in [conf.get(key)] if v), *(str(j) for j in jars)])


def _submitted_conf() -> dict[str, str]:
    """The settings spark-submit handed the launched JVM (--packages, --jars, --conf ...); {} when not submitted.

    A plain `SparkConf()` built before any SparkContext exists has no JVM behind it and sees none of them, so this
    first connects to the gateway spark-submit already started (PYSPARK_GATEWAY_PORT: no new JVM is launched).
    """
    if not _submitted():
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return dict(SparkConf(_jvm=SparkContext._jvm).getAll())


def _jvm_can_load(cls: str) -> bool:
    """True when the running (spark-submit) JVM can load the class (Delta's session extension, the S3A file
    system): --packages, --jars, or jars installed with Spark itself (a cluster image, Databricks, EMR)."""
    from pyspark import SparkContext

    try:
        return bool(SparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(cls))
    except Exception:  # an unexpected gateway: fall back to reading the settings
        return False


def _delta_configured(builder_conf: Mapping[str, str]) -> bool:
    """True when --packages/--jars (spark-submit), jars already on Spark's classpath, or the caller's conf bring
    delta-spark."""
    submitted = _submitted_conf()
    text = " ".join(
        v for k in ("spark.jars.packages", "spark.jars")
        for v in (submitted.get(k, ""), builder_conf.get(k, "")) if v
    )
    return "delta-spark" in text or (_submitted() and _jvm_can_load(DELTA_EXTENSION))


LOCAL_FS = {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
            "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
            "spark.sql.streaming.checkpointFileManagerClass":
                "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"}
"""file:// paths without Hadoop's checksum layer. Without Hadoop's native library (pip's pyspark has none), each
file status FileContext's rename checks forks `readlink` and each file created forks `chmod`: a Delta commit
forked about 19 processes, 10 without the hidden `.<name>.crc` sidecar files the checksum layer writes and renames
beside every file, 6 once Delta's `<version>.crc` goes through Spark's FileSystem-based checkpoint file manager
(Delta writes it with Spark's; its rename is Java's). The commit file itself stays with Delta's default log store
for `file://`, FileContext's rename: it checks that the target does not exist a fraction of a millisecond before
renaming, where Delta's LocalLogStore checks before writing the file (a fork's time earlier), a wider window for
two runs of other dumps committing the same version to lose one commit silently. A `conf` entry overrides any
of them."""


OLD_VERSIONS = {"spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration": "false"}
"""delta-spark 4.4 refuses to read a version older than the table's delta.deletedFileRetentionDuration (7 days) by
default, even its newest. The jobs read the version the last complete run committed (`jobs.runs`) and commit on top
of the version they read: a dump left alone for a week would fail every reader and the next run. A version whose
files a VACUUM removed still fails, naming a missing file. A `conf` entry overrides it."""


def build_session(app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None,
                  locations: Sequence[str | None] = ()) -> SparkSession:
    """Return a SparkSession that reads and writes Delta tables.

    master: e.g. "local[*]"; None keeps what spark-submit or the environment chose (local[*] if nothing did).
    conf: extra Spark settings, applied last.
    locations: the warehouse (and any other Hadoop URIs) the session will use: an s3a:// one brings the S3A
    connector (see the module's docstring).
    """
    from pyspark.sql import SparkSession

    conf = dict(conf or {})
    if not _submitted():
        # Python workers (mapInArrow) must run this interpreter, the one with filterlib's dependencies, not
        # whatever `python3` is first on PATH (PySpark reads the variable when it starts the context).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not _submitted():
        builder = builder.master("local[*]")
    if not _delta_configured(conf):
        if _submitted():
            # The JVM is already running: jars named now would reach the executors but not the driver's classpath.
            raise DeltaJarsMissing(
                f"Delta Lake is not on this spark-submit's classpath: pass `--packages {DELTA_PACKAGE}` (or "
                f"`--jars` with the Delta jars, `make setup` puts them in .cache/jars) to spark-submit")
        jars = delta_jars()
        if not jars:
            raise DeltaJarsMissing(
                f"Delta Lake jars not found in {jars_dir()}: run `make setup`, or on a cluster pass "
                f"`--packages {DELTA_PACKAGE}` to spark-submit")
        conf["spark.jars"] = ",".join([*(v for v in [conf.get("spark.jars")] if v), *(str(j) for j in jars)])
    if not _submitted():
        from jobs.class_archive import with_archive

        conf = with_archive(conf)  # the classes a local driver loads, mapped from `make setup`'s archive
    if needs_s3a(locations):
        if not _submitted():
            _s3a_conf(conf, master or "local[*]")
        elif not _jvm_can_load(S3A_CLASS):
            raise S3AJarsMissing(
                f"an s3a:// location needs the S3A connector, and it is not on this spark-submit's classpath: pass "
                f"`--packages {S3A_PACKAGE}` (or `--jars` with the jars `make s3-jars` puts in .cache/jars-s3)")
    builder = (
        builder.config("spark.sql.extensions", DELTA_EXTENSION)
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in {**LOCAL_FS, **OLD_VERSIONS, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    default_snapshot_partitions(spark)
    return spark


def default_snapshot_partitions(spark: SparkSession) -> None:
    """SNAPSHOT_PARTITIONS, unless set, to the session's default parallelism (at least 2)."""
    if spark.conf.get(SNAPSHOT_PARTITIONS, None) is None:
        spark.conf.set(SNAPSHOT_PARTITIONS, str(max(2, spark.sparkContext.defaultParallelism)))


SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
"""The partitions delta-spark spreads a table's log over when it reconstructs the table's state (a checkpoint, every
tenth commit of a table; a read the driver's log reader cannot answer). Delta's default is 50, whatever the
cluster: on local[2] the runs table's checkpoint (every fifth job pair) took 12-15 s of 150 tasks over a few
kilobytes, against 5.7 s with 2. Unless set, a session takes its default parallelism (the cores it has)."""


def task_count(sizes: Sequence[int], cores: int, target_bytes: int) -> int:
    """Spark tasks for work over inputs of these sizes (commitlog ranges, Parquet files): a task an input while
    inputs are about `target_bytes` or more (a broker's 1 GiB commitlog files, a large dump's messages files),
    fewer where they are far smaller (a store of small files, a history copy's few new records: they share tasks,
    a target's worth each, as each task costs a Python worker's round trip), never fewer than the cores while there
    are inputs for them."""
    return max(1, min(len(sizes), max(cores, -(-sum(sizes) // max(1, target_bytes)))))


def _submitted() -> bool:
    """True when running under spark-submit (which sets spark.master in the launched JVM's conf)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
