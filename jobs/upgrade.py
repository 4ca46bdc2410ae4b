"""Bring a warehouse an older release wrote to today's layout, in one command, losing nothing.

    python -m jobs.upgrade --warehouse DIR [--defaults FILE] [--master URL]

Since the tables are partitioned by dump_id (jobs.delta_io.PARTITION), the jobs refuse to write into a table an
older release wrote (one directory for every dump): each table is rewritten here, in one Delta commit each, as
the same rows partitioned by dump, its statistics property without dump_id (Delta keeps none for a partition
column). Then each dump's last complete run is named again at the rewritten versions (one `runs` row per dump,
job `upgrade`), so readers read the new layout and a VACUUM of the old files loses no dump. Tables already
partitioned are left as they are: running it twice does nothing the second time. Run it while no job writes the
warehouse (a job writing meanwhile makes the rewrite of that table fail in Delta's conflict check: run again).

A messages table written before the properties were text (`filterlib.store.properties_text`) holds them as a map;
job 1 keeps writing the map there, which is correct but dearer. The upgrade rewrites that table too, the map as the
same text job 1 writes (`SQL_TEXT`), in the same one commit.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from filterlib import tables
from filterlib.store.properties_text import SQL_TEXT
from jobs.cli import ROOT, InputError, add_session_args, job_logger, load_defaults, run_main
from jobs.delta_files import map_properties
from jobs.delta_io import PARTITION, STATS_PROPERTY, laid_out, last_version, partition_columns, table_path
from jobs.runs import RUNS, pinned_versions, record_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROG = "jobs.upgrade"
DEFAULTS = ROOT / "conf" / "report.json"


@dataclass
class Inputs:
    """The checked arguments."""

    warehouse: str
    defaults: dict[str, Any]


@dataclass
class Summary:
    """What the upgrade did: the tables rewritten (name -> new version), those already laid out, dumps renamed."""

    warehouse: str
    rewritten: dict[str, int] = field(default_factory=dict)
    current: list[str] = field(default_factory=list)
    dumps: list[str] = field(default_factory=list)
    as_text: int | None = None
    """The messages version whose properties the upgrade rewrote from a map to text (None: they were text)."""

    def lines(self) -> list[str]:
        """The readable end of the run."""
        if not self.rewritten:
            return [f"{self.warehouse}: every table is already partitioned by dump ({len(self.current)} tables) and "
                    "the messages' properties are text; nothing to do"]
        laid = {t: v for t, v in self.rewritten.items() if t not in self.current}
        out = [f"{self.warehouse}: {len(laid)} tables partitioned by dump: "
               + ", ".join(f"{t} (version {v})" for t, v in sorted(laid.items())),
               f"already partitioned: {', '.join(sorted(self.current)) or 'none'}"] if laid else [
            f"{self.warehouse}: every table is already partitioned by dump ({len(self.current)} tables)"]
        if self.as_text is not None:
            out.append(f"messages: the properties rewritten from a map to text (version {self.as_text})")
        return [*out, f"dumps whose last run now names the new versions: {', '.join(self.dumps) or 'none'}"]


def upgrade_table(spark: SparkSession, warehouse: str, table: str, as_text: bool = False) -> int:
    """Rewrite one table as the same rows partitioned by dump, in one commit, the properties map as text when
    `as_text`; returns the new version."""
    from pyspark.sql import functions as F

    path = table_path(warehouse, table)
    props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    stats = props.get(STATS_PROPERTY)
    if stats is not None and PARTITION in stats.split(","):
        kept = ",".join(c for c in stats.split(",") if c != PARTITION)
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{STATS_PROPERTY}' = '{kept}')")
    version = last_version(spark, path)
    rows = spark.read.format("delta").option("versionAsOf", version).load(path)
    if as_text:
        rows = rows.withColumn("properties", F.expr(SQL_TEXT))
    (rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy(PARTITION)
     .save(path))
    return last_version(spark, path)


def run(spark: SparkSession, inputs: Inputs) -> Summary:
    """Rewrite every outdated table, then name each dump's last run again at the rewritten versions."""
    log = job_logger(PROG)
    wh = inputs.warehouse
    old, current = laid_out(spark, wh, tables.TABLES)
    summary = Summary(wh, current=current)
    if not old and not current:
        raise InputError(f"{wh}: no table of the jobs here (is it the warehouse both jobs wrote?)")
    runs_path = table_path(wh, RUNS)
    dumps = ([r[0] for r in spark.read.format("delta").load(runs_path).select(PARTITION).distinct().collect()]
             if partition_columns(spark, runs_path) is not None else [])
    pins = {d: pinned_versions(spark, wh, d) for d in sorted(dumps)}
    as_text = map_properties(spark, wh)
    for table in sorted({*old, *(["messages"] if as_text else [])}):
        text = as_text and table == "messages"
        log.info("%s: rewriting, partitioned by %s%s", table, PARTITION, ", the properties as text" if text else "")
        summary.rewritten[table] = upgrade_table(spark, wh, table, text)
        if text:
            summary.as_text = summary.rewritten[table]
    moved = {t: v for t, v in summary.rewritten.items() if t != RUNS}
    for dump, pinned in pins.items():
        renamed = {t: moved[t] for t in pinned if t in moved}
        if renamed:
            record_run(spark, wh, "upgrade", dump, {**pinned, **renamed})
            summary.dumps.append(dump)
    return summary


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Rewrite the Delta tables of a warehouse written before the tables were partitioned by dump "
                    "(one directory per dump_id), each in one commit with the same rows, so both jobs write into "
                    "it again, and a messages table whose properties are a map with them as text; tables already "
                    "laid out are left alone. Run it while no job writes the warehouse.")
    p.add_argument("--warehouse", required=True, metavar="DIR",
                   help="the Delta warehouse both jobs wrote (a local directory or a URI)")
    add_session_args(p, DEFAULTS)
    return p


def main(argv: list[str] | None = None, spark: SparkSession | None = None) -> int:
    """Parse, upgrade, print what changed; bad input is one line on stderr and exit code 2."""
    args = parser().parse_args(argv)

    def validate() -> Inputs:
        return Inputs(args.warehouse.rstrip("/") or args.warehouse, load_defaults(args.defaults))

    return run_main(PROG, validate, lambda i: PROG, lambda i: i.defaults, args.master, run, spark)


if __name__ == "__main__":
    sys.exit(main())
