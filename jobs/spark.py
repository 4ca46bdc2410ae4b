"""The one SparkSession builder for jobs and tests: Delta Lake wired in, local or on a cluster.

Locally, the Delta jars come from the project cache that `make setup` fills with Maven (`.cache/jars`, or the
directory in $RMQ_REPLAY_JARS_DIR) and are handed to Spark with `spark.jars`. Under spark-submit the JVM is already
running, so the builder asks it (through the gateway spark-submit started) whether Delta is on its classpath —
`--packages io.delta:delta-spark_4.2_2.13:4.4.0`, `--jars ...`, or jars installed with the cluster's Spark — and
only adds the Delta SQL extension and catalog; if it is not, DeltaJarsMissing says which option to pass (the local
cache is never consulted there: the code may be running from a --py-files zip).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
_ROOT = Path(__file__).resolve().parent.parent
_VERSION_SUFFIX = re.compile(r"-\d[0-9A-Za-z.\-]*$")


class DeltaJarsMissing(RuntimeError):
    """No Delta jars were found locally and none were configured for the session."""


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


def _jvm_has_delta() -> bool:
    """True when the running (spark-submit) JVM can load Delta's session extension: --packages, --jars, or jars
    installed with Spark itself (a cluster image, Databricks, EMR)."""
    from pyspark import SparkContext

    try:
        return bool(SparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(DELTA_EXTENSION))
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
    return "delta-spark" in text or (_submitted() and _jvm_has_delta())


def build_session(app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """Return a SparkSession that reads and writes Delta tables.

    master: e.g. "local[*]"; None keeps what spark-submit or the environment chose (local[*] if nothing did).
    conf: extra Spark settings, applied last.
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
        conf.setdefault("spark.jars", ",".join(str(j) for j in jars))
    builder = (
        builder.config("spark.sql.extensions", DELTA_EXTENSION)
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _submitted() -> bool:
    """True when running under spark-submit (which sets spark.master in the launched JVM's conf)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
