"""Job 1: rebuild a dump's consume queues (with ext store times and filter bitmaps) and write the Delta tables.

    python -m jobs.build_queues --store DIR --warehouse DIR [--dump-id ID] [--broker-conf FILE]
                                [--subscriptions FILE] [--bodies]

Spark distributes byte ranges of the commitlog files and decodes each ONCE: a task decodes its range, dispatches
the records (`filterlib.rebuild.dispatch`) and emits their consume-queue units (persisted: they are small) and its split
report, the one thing the driver collects; the range's messages rows (without body bytes unless --bodies) it
writes itself as one Parquet file (`jobs.delta_files`, a local or s3a warehouse; other warehouses hand the rows to
Spark's writer). The driver merges the reports per file (valid end, damage) and re-decodes whole any file whose
splits lost sync; a split's units and its messages file are kept only when its rows lie before its file's valid
end and the file was not re-decoded (the others' files are deleted, never committed), so no record is written
twice or lost. Every table (messages, consume_queue, consumer_filters, dump_files, and queue_diff with --verify)
replaces that dump's rows in one commit per table. Tables and flags: docs/build_queues.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import posixpath
import shutil
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from filterlib import brokerversion
from filterlib.errors import StoreFormatError
from filterlib.rebuild.dispatch import CQ_SCHEMA, place_queue, registry_groups, registry_spec
from filterlib.rebuild.dumpfiles import FilePlan, dump_file_row, plan_file
from filterlib.rebuild.dumpregistry import RegistryLoad
from filterlib.rebuild.history import Read, history_end, plan_append
from filterlib.rebuild.verify import DIFF_SCHEMA, DUMP_UNITS_SCHEMA, FIELDS
from filterlib.store import fs as sfs
from filterlib.store.commitlog import parse_delay_levels
from filterlib.store.properties_text import SQL_MAP
from filterlib.store.queues import ROCKSDB
from filterlib.store.scan import SplitReport, iter_ranges
from filterlib.store.storedir import StoreDir
from filterlib.subscriptions import Subscription
from filterlib.tables import CONSUMER_FILTERS, COPIES, COPY, DUMP_FILES, DUMPS
from jobs import history
from jobs.cli import (
    ROOT,
    InputError,
    add_broker_version_arg,
    add_run_args,
    add_session_args,
    apply_writer_conf,
    config_or_note,
    dump_id_of,
    dump_registry,
    job_logger,
    load_defaults,
    open_store,
    read_subscriptions,
    resolve_version,
    run_main,
    writable_dir,
)
from jobs.decode_tasks import (
    DECODED_SCHEMA,
    EXAMPLES,
    EXPORT_SCHEMA,
    MESSAGES_SCHEMA,
    MESSAGES_STATS,
    QUEUE_STATS,
    QUEUE_TABLE,
    TASK_DDL,
    UNIT_COLUMNS,
    ExportContext,
    SplitOutput,
    TaskContext,
    VerifyContext,
    decode_ranges,
    diff_units,
    dump_queue_units,
    export_queues,
    parse_report,
)
from jobs.delta_files import FileTarget, commit_dump, file_target, map_properties, parquet_codec, replace_rows
from jobs.delta_io import append_dump, replace_dump, table_path
from jobs.faults import task_writes
from jobs.history import Held
from jobs.progress import progress
from jobs.runs import read_dump, read_rows, record_run
from jobs.schemas import spark_ddl
from jobs.spark import task_count

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULTS = ROOT / "conf" / "build_queues.json"
PROG = "build_queues"
FROM_CONF = "\0brokerName"
"""--broker given without a name: the broker.conf's brokerName names the history (else the store's name)."""
log = job_logger(PROG)

CQ_COLUMNS = CQ_SCHEMA.names
QUEUE_KEY = ["topic", "queue_id", "queue_offset"]
CQ_STATS = QUEUE_STATS


@dataclass
class Inputs:
    """Everything validated on the driver before Spark starts."""

    store: StoreDir
    dump_id: str
    warehouse: str
    broker_conf: str | None
    subscriptions: list[Subscription]
    subscriptions_path: str | None
    defaults: dict[str, Any]
    split_bytes: int
    check_crc: bool
    export_cq: str | None = None
    verify: bool = False
    broker_version: str = brokerversion.DEFAULT
    version_line: str = ""
    bodies: bool = False
    history: bool = False
    """--broker: the run appends this copy to the broker's history (dump_id is the broker's name)."""
    replace: bool = False
    """--replace: the copy begins the history again."""


@dataclass
class ExportResult:
    """What --export-cq wrote: per-queue rows (EXPORT_SCHEMA) and where."""

    root: str
    queues: list[dict] = field(default_factory=list)

    @property
    def failed(self) -> list[dict]:
        """Queues not written (offsets not consecutive)."""
        return [q for q in self.queues if q["error"] is not None]

    def lines(self) -> list[str]:
        """Summary lines."""
        ok = [q for q in self.queues if q["error"] is None]
        out = [f"exported to {self.root}: {len(ok)} queues, {sum(q['units'] for q in ok):,} units, "
               f"{sum(q['cq_files'] for q in ok)} consumequeue and {sum(q['ext_files'] for q in ok)} "
               f"consumequeue_ext files, {sum(q['bytes'] for q in ok):,} bytes"]
        out += [f"  not exported ({q['topic']}, {q['queue_id']}): {q['error']}" for q in self.failed]
        return out


@dataclass
class VerifyResult:
    """What --verify found: per-queue counts and the first differences (unexplained first)."""

    queues: list[dict] = field(default_factory=list)
    first: list[dict] = field(default_factory=list)

    def total(self, key: str) -> int:
        """A count summed over the queues."""
        return sum(q[key] for q in self.queues)

    @property
    def differences(self) -> int:
        """Rows of queue_diff."""
        return self.total("missing") + self.total("extra") + self.total("differs")

    def lines(self, shown_queues: int = 20) -> list[str]:
        """Summary lines: totals, the queues with differences, the first differences."""
        head = (f"verify against the dump's consume queues: {len(self.queues)} queues, {self.total('dump_units'):,} "
                f"units in the dump, {self.total('rebuild_units'):,} rebuilt")
        n = self.differences
        if not n:
            return [head + ": no difference"]
        unexplained = n - self.total("explained")
        bad = [q for q in self.queues if q["missing"] + q["extra"] + q["differs"]]
        out = [head + f": {n:,} differences in {len(bad)} queues ({self.total('missing'):,} missing, "
               f"{self.total('extra'):,} extra, {self.total('differs'):,} differ; {self.total('explained'):,} "
               f"bitmap differences explained by the rule, {unexplained:,} unexplained)"]
        bad.sort(key=lambda q: (q["differs"] + q["missing"] + q["extra"] == q["explained"], q["topic"],
                                q["queue_id"]))
        for q in bad[:shown_queues]:
            out.append(f"  ({q['topic']}, {q['queue_id']}): {q['dump_units']:,} units in the dump, "
                       f"{q['rebuild_units']:,} rebuilt: {q['missing']:,} missing, {q['extra']:,} extra, "
                       f"{q['differs']:,} differ" + (f" ({q['explained']:,} explained)" if q["explained"] else ""))
        if len(bad) > shown_queues:
            out.append(f"  ... and {len(bad) - shown_queues} more queues (table queue_diff)")
        out.append("first differences (unexplained first):")
        for d in self.first:
            what = f"{d['kind']} [{', '.join(d['fields'])}]" if d["fields"] else d["kind"]
            out.append(f"  ({d['topic']}, {d['queue_id']}) offset {d['queue_offset']}: {what}"
                       f"{' (explained)' if d['explained'] else ''}: {d['reason']}")
        return out


@dataclass
class Summary:
    """What a run did, for the end-of-run report and for tests."""

    dump_id: str
    files: int = 0
    ranges: int = 0
    bytes: int = 0
    records: int = 0
    units: int = 0
    queues: int = 0
    queue_set: list[tuple[str, int]] | None = None
    """The (topic, queue id) pairs the run added units to, where the tasks counted them (None: counted in Spark)."""
    bitmaps_written: int = 0
    damaged: list[dict] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    filters: int = 0
    failed_filters: list[dict] = field(default_factory=list)
    filter_rule: str = ""
    broker_version: str = brokerversion.DEFAULT
    version_line: str = ""
    recovery_line: str = ""
    issues: list[str] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    ext: bool = False
    calc_bitmap: bool = False
    export: ExportResult | None = None
    verify: VerifyResult | None = None
    undecodable: int = 0
    undecodable_examples: list[dict] = field(default_factory=list)
    bodies: bool = False
    checked: int = 0
    gap: tuple[int, int] | None = None
    from_offset: int = 0
    to_offset: int = 0
    history: list[str] = field(default_factory=list)
    """With --broker: what the copy did to the broker's history (began it, appended, a gap, a torn tail)."""
    nothing_new: str | None = None
    """With --broker: why the copy added nothing (no table was written)."""

    def lines(self) -> list[str]:
        """The human summary."""
        if self.nothing_new is not None:
            return [*self.history, self.nothing_new, f"time {self.seconds:.1f} s"]
        rate = self.records / self.seconds if self.seconds else 0.0
        mb = self.bytes / self.seconds / 1e6 if self.seconds else 0.0
        out = [*self.history,
               f"dump {self.dump_id} (broker {brokerversion.rules_release(self.broker_version)}): {self.files} "
               f"commitlog files in {self.ranges} ranges, {self.bytes:,} bytes",
               "message bodies: written to messages (--bodies)" if self.bodies else
               "message bodies: not written (messages keeps body_size and body_error; the bodies stay in the dump, "
               "read back by commit_log_offset: filterlib.store.bodies, explain; --bodies writes them)",
               *([self.version_line] if self.version_line else []),
               f"records {self.records:,}; consume-queue units {self.units:,} in {self.queues} queues; "
               f"ext {'on' if self.ext else 'off'}, bitmaps {'on' if self.calc_bitmap else 'off'} "
               f"({self.bitmaps_written:,} written)",
               f"damaged ranges: {len(self.damaged)}" + (f" ({self.recovery_line})" if self.recovery_line else "")]
        out += [f"  {d['path']} at {d['damage_offset']} ({d['damage_length']} bytes): {d['damage_reason']}"
                for d in self.damaged]
        if self.fallbacks:
            out.append(f"whole-file decode after a split lost sync: {', '.join(self.fallbacks)}")
        out.append(f"SQL92 filters: {self.filters} registrations, {len(self.failed_filters)} did not compile")
        out += [f"  did not compile: ({f['consumer_group']}, {f['topic']}) {f['expression']!r}: "
                f"{f['compile_error']}" for f in self.failed_filters]
        if self.undecodable:
            out.append(f"bodies the client cannot decode: {self.undecodable:,} (a pull that returns one loses it "
                       f"and the rest of that pull: CLIENT_DECODE_FAILED in job 2)")
            out += [f"  {e['topic']} at commit log offset {e['commit_log_offset']}: {e['body_error']}"
                    for e in self.undecodable_examples]
        if self.filter_rule and self.calc_bitmap:
            out.append(self.filter_rule)
        if self.export is not None:
            out += self.export.lines()
        if self.verify is not None:
            out += self.verify.lines()
        out += [f"issue: {i}" for i in self.issues]
        out += [f"table {t}: {p}" for t, p in self.tables.items()]
        out.append(f"time {self.seconds:.1f} s, {rate:,.0f} records/s, {mb:.1f} MB/s")
        return out


def parser() -> argparse.ArgumentParser:
    """The command line (every flag explained in --help)."""
    p = argparse.ArgumentParser(
        prog="python -m jobs.build_queues",
        description="Rebuild a RocketMQ store dump's consume queues (ext store times and SQL92 bloom bitmaps "
                    "included) from its commitlog with Spark, and write the Delta tables messages, consume_queue, "
                    "consumer_filters and dump_files under the warehouse. Re-running a dump replaces its rows.")
    p.add_argument("--store", required=True, metavar="DIR|URI",
                   help="the dump: a broker store root holding commitlog/ (and config/consumerFilter.json for "
                        "the SQL92 registrations; consumequeue/ and consumequeue_ext/ are read only by --verify); "
                        "a local path or a file://, s3://, gs://, hdfs:// or abfs:// URI read in place "
                        "(s3://bucket/prefix?endpoint_override=host:port&scheme=http for an S3-compatible server)")
    p.add_argument("--warehouse", required=True, metavar="DIR",
                   help="directory (or Hadoop URI) of the Delta tables, one per table: <warehouse>/<table>")
    name = p.add_mutually_exclusive_group()
    name.add_argument("--dump-id", metavar="ID",
                      help="name of this dump in the tables (default: the store directory's name); letters, "
                           "digits and . _ : @ + -. A re-run of a dump replaces its rows")
    name.add_argument("--broker", metavar="NAME", nargs="?", const=FROM_CONF,
                      help="append this copy of the broker's store to the broker's history NAME (same characters; "
                           "--broker alone: the broker.conf's brokerName, else the store directory's name): "
                           "the first copy begins it; each later one adds only the records past the history's end, "
                           "after checking that the records both hold are equal (a copy of another broker or of a "
                           "wiped store is refused in words; an older copy or the same one again adds nothing, exit "
                           "0); offsets deleted by retention before any copy held them are a gap, said and recorded "
                           "in the table copies (docs/history.md)")
    p.add_argument("--replace", action="store_true",
                   help="with --broker: begin the history again from this copy (its rows replace the history's)")
    p.add_argument("--broker-conf", metavar="FILE",
                   help="the broker's broker.conf (Java properties): enableConsumeQueueExt, "
                        "enableCalcFilterBitMap, maxErrorRateOfBloomFilter, expectConsumerNumUseFilter, "
                        "messageDelayLevel, checkCRCOnRecover, storePathCommitLog... "
                        "(default: RocketMQ 5.3.3's defaults, where ext and bitmaps are off)")
    p.add_argument("--subscriptions", metavar="FILE",
                   help="JSON list of subscriptions (design.md, 'Subscriptions file'); only when the dump has no "
                        "config/consumerFilter.json do its registered SQL92 ones count as registered (bornTime 0) "
                        "for the bitmaps: a filter the dump's registry does not hold never set a bit")
    p.add_argument("--split-bytes", type=int, metavar="N",
                   help="target bytes per Spark task (default from the defaults file: 256 MiB; files smaller "
                        "than that are one task each)")
    crc = p.add_mutually_exclusive_group()
    crc.add_argument("--check-crc", dest="check_crc", action="store_true", default=None,
                     help="check every body CRC (default: broker.conf's checkCRCOnRecover, true in 5.3.3)")
    crc.add_argument("--no-check-crc", dest="check_crc", action="store_false",
                     help="skip the body CRC check (faster; damage inside a body is then not detected)")
    p.add_argument("--bodies", action="store_true",
                   help="also write every message's body bytes (as stored) into messages, so the warehouse "
                        "outlives its dump; by default the body column is null and the bodies stay in the dump "
                        "(body_size, body_crc, sys_flag and body_error are written either way; explain reads a body "
                        "back from the store the dumps table names)")
    add_broker_version_arg(p, f"default: the release the dump's files show (brokerversion.detect), else "
                              f"{brokerversion.DEFAULT}; recorded in the dumps table for job 2")
    add_session_args(p, DEFAULTS, "split_bytes, batch_rows, check_crc, units_per_partition, master, spark_conf "
                                  "for a session the job starts itself, parquet_conf set on the session for the "
                                  "Parquet writers")
    add_run_args(p)
    p.add_argument("--export-cq", metavar="DIR",
                   help="also write the rebuilt queues as the broker's files, DIR/consumequeue/<topic>/<queueId>/ "
                        "(and DIR/consumequeue_ext/... when enableConsumeQueueExt is on), sized by "
                        "mappedFileSizeConsumeQueue(Ext); Spark tasks write them, so on a cluster DIR must be a "
                        "path every executor shares. Any consumequeue/ and consumequeue_ext/ already in DIR are "
                        "replaced once all queues are written. DIR must not be the store itself")
    p.add_argument("--verify", action="store_true",
                   help="compare the rebuild with the dump's own consumequeue/ and consumequeue_ext/ unit by unit, "
                        "write the differences to the table queue_diff (this dump's rows replaced) and summarise "
                        "them; bitmap differences are checked against the filter rule (docs/build_queues.md)")
    return p


def validate(args: argparse.Namespace) -> Inputs:
    """Check every input before Spark starts; raise InputError with one line naming what is wrong."""
    defaults = load_defaults(args.defaults)
    store = open_store(args.store, args.broker_conf)
    conf = store.conf
    try:
        parse_delay_levels(conf.messageDelayLevel)
    except (ValueError, KeyError, IndexError):
        raise InputError(f"{args.broker_conf}: messageDelayLevel {conf.messageDelayLevel!r} is not a list like "
                         f"'1s 5s 10m 2h'") from None
    subs = read_subscriptions(args.subscriptions)
    broker = (store.conf.brokerName or None) if args.broker == FROM_CONF else args.broker
    dump_id = dump_id_of(broker or args.dump_id, args.store)
    history = args.broker is not None
    if args.replace and not history:
        raise InputError("--replace goes with --broker (a run with --dump-id always replaces its dump's rows)")
    if history and not args.replace and (args.verify or args.export_cq is not None):
        raise InputError("--verify and --export-cq compare or write a whole copy's queues: with --broker they need "
                         "--replace, which begins the history again from this copy")
    if "://" not in args.warehouse:
        try:
            os.makedirs(args.warehouse, exist_ok=True)
        except OSError as e:
            raise InputError(f"{args.warehouse}: cannot create the warehouse directory ({e.strerror or e})") from None
    split = args.split_bytes if args.split_bytes is not None else int(defaults.get("split_bytes", 256 << 20))
    if split <= 0:
        raise InputError(f"--split-bytes must be positive, got {split}")
    check = args.check_crc
    if check is None:
        check = defaults.get("check_crc")
    if check is None:
        check = conf.checkCRCOnRecover
    export = None
    if args.export_cq is not None:
        export = _check_export_dir(args.export_cq, store.root)
    if args.verify and store.queue_kind is None:
        raise InputError(f"{store.root}: --verify needs the dump's consumequeue/ directory, and it has none")
    if args.verify and store.queue_kind == ROCKSDB:
        try:
            store.rocksdb_queues().close()
        except StoreFormatError as e:
            raise InputError(f"{e}; --verify cannot compare the rebuild with it") from None
    version, version_line = resolve_version(args.broker_version, store)
    return Inputs(store, dump_id, args.warehouse, args.broker_conf, subs, args.subscriptions, defaults, split,
                  bool(check), export, args.verify, version, version_line, args.bodies,
                  history, args.replace)


def _check_export_dir(path: str, store_root: str) -> str:
    """The --export-cq directory, created, as an absolute path; never the store root or inside its queues."""
    if "://" in path:
        raise InputError(f"{path}: --export-cq takes a local or shared file system path, not a URI")
    target = os.path.realpath(path)
    root = os.path.realpath(store_root)
    if target == root or any(target == os.path.join(root, sub) or target.startswith(os.path.join(root, sub) + os.sep)
                             for sub in ("consumequeue", "consumequeue_ext", "commitlog")):
        raise InputError(f"{path}: --export-cq must not write into the dump itself ({store_root})")
    writable_dir(target, "the export directory", path)
    return target


def _registry(inputs: Inputs) -> RegistryLoad:
    return dump_registry(inputs.store, inputs.subscriptions, inputs.broker_version)


def _decode(spark: SparkSession, ctx: TaskContext, tasks: list[tuple], description: str, slices: int,
            records: Any = None) -> DataFrame:
    """Decode and dispatch the ranges once, in `slices` tasks: units, messages rows and split reports, persisted
    (read by the reports, consume_queue and messages; bodies only under --bodies). `records`: an accumulator of the
    records decoded, for the progress lines."""
    from pyspark import StorageLevel

    sc = spark.sparkContext
    rdd = sc.parallelize(tasks, slices)
    df = spark.createDataFrame(rdd, TASK_DDL).mapInArrow(decode_ranges(ctx, records), spark_ddl(DECODED_SCHEMA))
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    sc.setJobDescription(description)
    return df


def _plans(df: DataFrame, prefixes: dict[int, int]
           ) -> tuple[dict[int, FilePlan], dict[int, list[tuple[SplitReport, SplitOutput]]]]:
    """Each file's plan from its splits' reports (`prefixes`: records a history already holds of a file read from
    its end), and the splits' reports and outputs by file."""
    splits = defaultdict(list)
    for row in df.where(df.report.isNotNull()).select("report").collect():
        r, out = parse_report(row.report)
        splits[r.file_base].append((r, out))
    return {base: plan_file([r for r, _ in rs], prefixes.get(base, 0)) for base, rs in splits.items()}, splits


def _kept(splits: dict[int, list[tuple[SplitReport, SplitOutput]]], plans: dict[int, FilePlan]
          ) -> tuple[list[SplitOutput], list[SplitOutput]]:
    """The outputs of the splits whose rows the tables keep, and of the others. A file re-decoded whole keeps none
    of its splits; otherwise a split keeps its rows when its first record lies before the file's valid end: the
    splits' record chains then tile [0, valid end) exactly (`merge_reports`), so a split's rows are all before the
    valid end or all past it (a split that resynchronised beyond a damaged record), never some of each."""
    kept: list[SplitOutput] = []
    dropped: list[SplitOutput] = []
    for base, rs in splits.items():
        plan = plans[base]
        for r, out in rs:
            ok = not plan.fallback and r.sync is not None and r.sync < plan.account.valid_end
            (kept if ok else dropped).append(out)
    return kept, dropped


def _valid_rows(df: DataFrame, plans: dict[int, FilePlan]) -> DataFrame:
    """The rows a file keeps (units and messages alike): rows past a file's valid end and files to re-decode whole
    are dropped, and so are the report rows."""
    from pyspark.sql import functions as F

    rows = df.where(F.col("report").isNull())
    redo = [b for b, p in plans.items() if p.fallback]
    if redo:
        rows = rows.where(~F.col("file_base").isin(redo))
    limits = [(b, p.keep_below) for b, p in plans.items() if p.keep_below is not None]
    if limits:
        cond = None
        for base, limit in limits:
            cond = (F.when(F.col("file_base") == base, F.col("position") < limit) if cond is None
                    else cond.when(F.col("file_base") == base, F.col("position") < limit))
        rows = rows.where(cond.otherwise(F.lit(True)))
    return rows


def _placed(spark: SparkSession, units: DataFrame) -> DataFrame:
    """Units with every queue that holds multi-dispatch units placed as the broker's consume queue writes them
    (`rebuild.dispatch.place_queue`, applied to each such queue's units); the other queues' units as they are."""
    from pyspark.sql import functions as F

    keys = [tuple(r) for r in units.where(F.col("multi")).select("topic", "queue_id").distinct().collect()]
    if not keys:
        return units
    key_df = F.broadcast(spark.createDataFrame(keys, "topic string, queue_id int"))
    rest = units.join(key_df, ["topic", "queue_id"], "left_anti")
    affected = units.join(key_df, ["topic", "queue_id"], "left_semi")
    placed = affected.groupBy("topic", "queue_id").applyInArrow(place_queue, affected.schema)
    return rest.unionByName(placed)


def _partitions(spark: SparkSession, queues: int, units: int, per_part: int) -> int:
    """Partitions for per-queue work: enough for the cores and the unit count, never more than the queues."""
    return max(1, min(max(queues, 1), max(spark.sparkContext.defaultParallelism, -(-units // per_part))))


def _export(spark: SparkSession, units: DataFrame, inputs: Inputs, summary: Summary) -> ExportResult:
    """Write every rebuilt queue's files under a staging directory in Spark tasks (one queue at a time, streamed),
    then swap the staged consumequeue/ and consumequeue_ext/ in for any the export directory held."""
    conf = inputs.store.conf
    final = inputs.export_cq
    stage = os.path.join(final, f".export-{uuid.uuid4().hex}")
    ctx = ExportContext(stage, conf.mappedFileSizeConsumeQueue, conf.mappedFileSizeConsumeQueueExt,
                        conf.enableConsumeQueueExt)
    per_part = max(1, int(inputs.defaults.get("units_per_partition", 4_000_000)))
    parts = _partitions(spark, summary.queues, summary.units, per_part)
    try:
        rows = (units.select(*CQ_COLUMNS).repartition(parts, "topic", "queue_id").sortWithinPartitions(*QUEUE_KEY)
                .mapInArrow(export_queues(ctx), spark_ddl(EXPORT_SCHEMA)).collect())
        old = os.path.join(stage, "replaced")
        os.makedirs(old)
        for sub in ("consumequeue", "consumequeue_ext"):
            if os.path.exists(os.path.join(final, sub)):
                os.rename(os.path.join(final, sub), os.path.join(old, sub))
            if os.path.exists(os.path.join(stage, sub)):
                os.rename(os.path.join(stage, sub), os.path.join(final, sub))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return ExportResult(final, sorted((r.asDict() for r in rows), key=lambda q: (q["topic"], q["queue_id"])))


def _known_groups(inputs: Inputs, reg: RegistryLoad, notes: list[str]) -> tuple[str, ...]:
    """Groups the dump knows of (subscriptionGroup.json, the registry, the subscriptions file): a bitmap bit of a
    (group, topic) the final registry lacks can only come from one of these."""
    groups = set(registry_groups(reg.registry)) | {s.group for s in inputs.subscriptions}
    try:
        table = config_or_note(inputs.store, "subscriptionGroup", "--verify explains bitmaps by the groups of the "
                                                                  "registry and the subscriptions file only", notes)
    except StoreFormatError as e:
        raise InputError(f"{e}: the groups --verify explains bitmaps by cannot be read") from None
    if isinstance(table, dict):
        groups |= set((table.get("subscriptionGroupTable") or {}).keys())
    return tuple(sorted(groups))


def _verify(spark: SparkSession, units: DataFrame, inputs: Inputs, reg: RegistryLoad, summary: Summary
            ) -> VerifyResult:
    """The dump's own queues (read in Spark tasks) joined to the rebuild per (topic, queue, offset); pairs that
    differ become queue_diff rows (`filterlib.rebuild.verify`), written in one commit for this dump."""
    from functools import reduce

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    queues = inputs.store.queue_ids()
    qdf = spark.createDataFrame(sc.parallelize(queues, max(1, min(len(queues), sc.defaultParallelism * 4))),
                                "topic string, queue_id int")
    root = inputs.store.root if sfs.is_remote(inputs.store.root) else os.path.abspath(inputs.store.root)
    dirs = sorted({os.path.dirname(f.path) for f in inputs.store.commitlog.files})
    dump = (qdf.mapInArrow(dump_queue_units(root, inputs.store.conf.storeType, dirs), spark_ddl(DUMP_UNITS_SCHEMA))
            .persist(StorageLevel.MEMORY_AND_DISK))
    r = units.select(*QUEUE_KEY, F.lit(True).alias("r_present"), *[F.col(c).alias(f"r_{c}") for c in FIELDS])
    d = dump.select(*QUEUE_KEY, F.lit(True).alias("d_present"),
                    *[F.col(c).alias(f"d_{c}") for c in (*FIELDS, "cq_tags_field")])
    same = reduce(lambda a, b: a & b, [F.col(f"r_{c}").eqNullSafe(F.col(f"d_{c}")) for c in FIELDS])
    pairs = (r.join(d, on=QUEUE_KEY, how="full_outer")
             .where(F.col("r_present").isNull() | F.col("d_present").isNull() | ~same)
             .fillna(False, subset=["r_present", "d_present"]))
    ctx = VerifyContext(registry_spec(reg.registry), _known_groups(inputs, reg, summary.issues))
    diff = (pairs.mapInArrow(diff_units(ctx), spark_ddl(DIFF_SCHEMA))
            .persist(StorageLevel.MEMORY_AND_DISK))
    per_part = max(1, int(inputs.defaults.get("units_per_partition", 4_000_000)))
    rows = diff.count()
    summary.tables["queue_diff"] = replace_dump(
        diff.select(F.lit(inputs.dump_id).alias("dump_id"), *DIFF_SCHEMA.names)
        .repartitionByRange(max(1, -(-rows // per_part)), *QUEUE_KEY).sortWithinPartitions(*QUEUE_KEY),
        inputs.warehouse, "queue_diff", inputs.dump_id)
    zero = {"dump_units": 0, "rebuild_units": 0, "missing": 0, "extra": 0, "differs": 0, "explained": 0}
    counts: dict[tuple[str, int], dict] = {key: dict(zero) for key in queues}  # a queue without valid units too
    for row in dump.groupBy("topic", "queue_id").count().collect():
        counts.setdefault((row.topic, row.queue_id), dict(zero))["dump_units"] = row["count"]
    for row in units.groupBy("topic", "queue_id").count().collect():
        counts.setdefault((row.topic, row.queue_id), dict(zero))["rebuild_units"] = row["count"]
    for row in diff.groupBy("topic", "queue_id").agg(
            *[F.sum((F.col("kind") == k).cast("long")).alias(k) for k in ("missing", "extra", "differs")],
            F.sum(F.col("explained").cast("long")).alias("explained")).collect():
        counts.setdefault((row.topic, row.queue_id), dict(zero)).update(
            {k: row[k] for k in ("missing", "extra", "differs", "explained")})
    first = [row.asDict() for row in diff.orderBy("explained", *QUEUE_KEY).limit(10).collect()]
    diff.unpersist()
    dump.unpersist()
    return VerifyResult(sorted(({"topic": t, "queue_id": q, **c} for (t, q), c in counts.items()),
                               key=lambda q: (q["topic"], q["queue_id"])), first)


def _messages_target(spark: SparkSession, inputs: Inputs) -> FileTarget | None:
    """Where the decode tasks write the messages files themselves: a local or s3a warehouse; None for any other
    (Spark's writer then writes the rows the tasks hand it)."""
    try:
        return file_target(spark, inputs.warehouse, "messages", inputs.dump_id, _row_copy(inputs))
    except ValueError:
        return None


def _row_copy(inputs: Inputs) -> str | None:
    """The `copy` column of the rows the run writes (tables.COPY): the copy appended to a broker's history (its
    store, as copies.store names it), else null."""
    return inputs.store.name if inputs.history else None


def _queue_target(spark: SparkSession, inputs: Inputs, messages: FileTarget | None) -> FileTarget | None:
    """Where the decode tasks write the consume_queue files themselves: beside their messages files, except under
    multi-dispatch (LMQ units are placed over whole queues in Spark first); None: the units go through Spark."""
    if messages is None or inputs.store.conf.enableMultiDispatch:
        return None
    return file_target(spark, inputs.warehouse, "consume_queue", inputs.dump_id, _row_copy(inputs))


def _delete_parts(target: FileTarget, parts: list[dict]) -> None:
    """Delete files the tasks wrote that no commit names (a file re-decoded whole, a split past the valid end):
    a tidy-up only, as the table never reads them."""
    fs = target.filesystem()
    for p in parts:
        with contextlib.suppress(OSError):
            fs.delete_file(posixpath.join(target.root, p["path"]) if target.kind != "local"
                           else os.path.join(target.root, p["path"]))


def _rows_written(spark: SparkSession, path: str) -> int | None:
    """numOutputRows of a Delta table's latest commit (None if the commit does not say)."""
    (metrics,) = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").select("operationMetrics").first()
    value = (metrics or {}).get("numOutputRows")
    return None if value is None else int(value)


def _start(inputs: Inputs) -> tuple[Summary, RegistryLoad]:
    """The summary's first words (settings, what the dump holds against them) and the registry the bitmaps use."""
    conf = inputs.store.conf
    ext, calc = conf.enableConsumeQueueExt, conf.enableCalcFilterBitMap
    summary = Summary(inputs.dump_id, ext=ext, calc_bitmap=calc and ext, broker_version=inputs.broker_version,
                      bodies=inputs.bodies)
    summary.issues += inputs.store.issues
    summary.version_line = inputs.version_line
    if sfs.isdir(os.path.join(inputs.store.root, "consumequeue_ext")) and not ext:
        summary.issues.append("the dump has consumequeue_ext/ but enableConsumeQueueExt is off "
                              f"({'in ' + inputs.broker_conf if inputs.broker_conf else 'no --broker-conf given'}):"
                              f" no ext units or bitmaps are rebuilt")
    reg = _registry(inputs)
    summary.issues += reg.issues
    summary.filters = len(reg.rows)
    summary.failed_filters = reg.failed
    summary.filter_rule = reg.rule_line()
    log.info("registry: %d SQL92 registrations (%d from the subscriptions file), %d did not compile",
             len(reg.rows), len(reg.added), len(reg.failed))
    return summary, reg


def _context(spark: SparkSession, inputs: Inputs, reg: RegistryLoad, summary: Summary) -> TaskContext:
    """What every decode task needs: the scan options of the release's recovery, the dispatcher's settings and
    registry, and where the tasks write their files (none: Spark's writer)."""
    conf = inputs.store.conf
    target = _messages_target(spark, inputs)
    recovery = brokerversion.recovery_rules(inputs.broker_version, sfs.isfile(os.path.join(inputs.store.root, "abort")),
                                            conf.checkCommitLogOffsetOnRecover)
    summary.recovery_line = recovery.text
    return TaskContext(inputs.check_crc, tuple(parse_delay_levels(conf.messageDelayLevel)),
                       int(inputs.defaults.get("batch_rows", 65536)), conf.enableConsumeQueueExt,
                       conf.enableCalcFilterBitMap, registry_spec(reg.registry), conf.enableMultiDispatch,
                       conf.enableLmq, inputs.bodies, target, _queue_target(spark, inputs, target),
                       parquet_codec(spark), recovery,
                       map_properties(spark, inputs.warehouse))


@dataclass
class Decoded:
    """The decode pass: its persisted frames, each file's plan, the splits whose rows the tables keep and the
    others, and the rows kept (what goes through Spark when the tasks do not write the tables)."""

    frames: list[DataFrame]
    plans: dict[int, FilePlan]
    kept: list[SplitOutput]
    dropped: list[SplitOutput]
    valid: DataFrame
    fallback_bases: set[int]


def _decode_all(spark: SparkSession, inputs: Inputs, ctx: TaskContext, summary: Summary, reads: list[Read]
                ) -> Decoded:
    """Decode and dispatch every range of the reads once (a whole file, or a file from a history's end); a file
    whose splits lose sync is decoded again as one range from its read's start."""
    tasks = [(r.file.path, r.file.base, r.file.size, s, e, r.start) for r in reads
             for s, e in iter_ranges(r.file.size, inputs.split_bytes, r.start)]
    prefixes = {r.file.base: r.prefix_records for r in reads}
    starts = {r.file.base: r.start for r in reads}
    summary.files, summary.ranges = len(reads), len(tasks)
    summary.bytes = sum(r.file.size - r.start for r in reads)
    files = reads
    log.info("decode and dispatch: %d commitlog files, %d ranges, %d bytes (CRC check %s)", len(files), len(tasks),
             summary.bytes, "on" if inputs.check_crc else "off")
    records = spark.sparkContext.accumulator(0)
    slices = task_count([t[4] - t[3] for t in tasks], spark.sparkContext.defaultParallelism, inputs.split_bytes)
    decoded = [_decode(spark, ctx, tasks, f"{PROG} {inputs.dump_id}: decode and dispatch {len(tasks)} ranges", slices,
                       records)]
    with task_writes("messages", table_path(inputs.warehouse, "messages"), inputs.dump_id), \
            progress(spark, log, f"decode and dispatch {len(tasks)} ranges in {slices} tasks",
                     counted={"records": records}):
        plans, splits = _plans(decoded[0], prefixes)
    kept, dropped = _kept(splits, plans)
    valid = _valid_rows(decoded[0], plans)
    redo = [p for p in plans.values() if p.fallback]
    if redo:
        summary.fallbacks = [os.path.basename(p.account.path) for p in redo]
        log.info("desync: %d files re-decoded as one range each: %s", len(redo), ", ".join(summary.fallbacks))
        whole = [(p.account.path, p.account.file_base, p.account.file_size, starts[p.account.file_base],
                  p.account.file_size, starts[p.account.file_base]) for p in redo]
        decoded.append(_decode(spark, ctx, whole, f"{PROG} {inputs.dump_id}: whole-file decode of {len(whole)} files",
                               len(whole)))
        with task_writes("messages", table_path(inputs.warehouse, "messages"), inputs.dump_id):
            again, more = _plans(decoded[-1], prefixes)
        also, gone = _kept(more, again)
        kept, dropped = kept + also, dropped + gone
        stuck = [os.path.basename(p.account.path) for p in again.values() if p.fallback]
        if stuck:  # one range from a record boundary follows the record chain itself: it cannot lose sync
            raise RuntimeError(f"whole-file decode of {', '.join(stuck)} is inconsistent with its own report")
        plans.update(again)
        # the first pass's rows of these files were dropped by _valid_rows: the whole-file decode's stand alone
        valid = valid.unionByName(_valid_rows(decoded[-1], again))
    return Decoded(decoded, plans, kept, dropped, valid, {p.account.file_base for p in redo})


def _units(spark: SparkSession, inputs: Inputs, ctx: TaskContext, d: Decoded, summary: Summary
           ) -> DataFrame | None:
    """Count the units, bitmaps and queues (from the tasks' reports when they wrote consume_queue themselves, else
    over the units in Spark, multi-dispatch units placed first); returns those units in the second case."""
    from pyspark.sql import functions as F

    units = None
    if ctx.queue is None:
        units = d.valid.where(F.col("unit")).select(*UNIT_COLUMNS)
        if ctx.multi_dispatch:
            units = _placed(spark, units)
        spark.sparkContext.setJobDescription(f"{PROG} {inputs.dump_id}: count queues")
        stats = units.agg(F.count(F.lit(1)).alias("units"), F.count("filter_bitmap").alias("bitmaps"),
                          F.countDistinct("topic", "queue_id").alias("queues")).collect()[0]
        summary.units, summary.bitmaps_written, summary.queues = stats.units, stats.bitmaps, stats.queues
    else:  # the tasks wrote and counted their units
        summary.units = sum(o.units for o in d.kept)
        summary.bitmaps_written = sum(o.bitmaps for o in d.kept)
        summary.queue_set = sorted({(t, q) for o in d.kept for t, q in o.queues})
        summary.queues = len(summary.queue_set)
    log.info("dispatched: %d units in %d queues, %d bitmaps", summary.units, summary.queues, summary.bitmaps_written)
    return units


def _write_queue(spark: SparkSession, inputs: Inputs, ctx: TaskContext, d: Decoded, units: DataFrame | None,
                 summary: Summary, on_top_of: int | None = None) -> DataFrame | None:
    """consume_queue: the tasks' files committed (the kept splits'; the others deleted), or the units written
    through Spark, range-partitioned and sorted by queue; added to a history's at version `on_top_of` when given.
    Returns the units for --export-cq and --verify."""
    from pyspark.sql import functions as F

    sc, wh = spark.sparkContext, inputs.warehouse
    if ctx.queue is None:
        sc.setJobDescription(f"{PROG} {inputs.dump_id}: write consume_queue")
        per_part = max(1, int(inputs.defaults.get("units_per_partition", 4_000_000)))
        cq_df = (units.withColumn("dump_id", F.lit(inputs.dump_id))
                 .select("dump_id", *CQ_COLUMNS, F.lit(_row_copy(inputs)).cast("string").alias(COPY.name))
                 .repartitionByRange(max(1, -(-summary.units // per_part)), *QUEUE_KEY)
                 .sortWithinPartitions(*QUEUE_KEY))
        summary.tables["consume_queue"] = append_dump(cq_df, wh, "consume_queue", inputs.dump_id, on_top_of, CQ_STATS)
    else:
        sc.setJobDescription(f"{PROG} {inputs.dump_id}: commit consume_queue")
        commit_dump(spark, wh, "consume_queue", inputs.dump_id, [o.queue_part for o in d.kept], QUEUE_TABLE,
                    QUEUE_STATS, on_top_of)
        summary.tables["consume_queue"] = table_path(wh, "consume_queue")
        _delete_parts(ctx.queue, [o.queue_part for o in d.dropped if o.queue_part is not None])
        if inputs.export_cq is not None or inputs.verify:
            units = read_dump(spark, wh, "consume_queue", inputs.dump_id, latest=True)
    log.info("wrote consume_queue: %d units", summary.units)
    return units


def _write_messages(spark: SparkSession, inputs: Inputs, ctx: TaskContext, d: Decoded, summary: Summary,
                    on_top_of: int | None = None) -> None:
    """messages: the kept splits' files committed (the others deleted), or the kept rows written through Spark;
    added to a history's at version `on_top_of` when given; the rows written checked against the records the split
    reports counted."""
    from pyspark.sql import functions as F

    wh = inputs.warehouse
    spark.sparkContext.setJobDescription(f"{PROG} {inputs.dump_id}: commit messages" if ctx.messages else
                                         f"{PROG} {inputs.dump_id}: write messages")
    if ctx.messages is not None:
        parts = [o.part for o in d.kept if o.part is not None]
        commit_dump(spark, wh, "messages", inputs.dump_id, parts, ctx.messages_table(), MESSAGES_STATS, on_top_of)
        summary.tables["messages"] = table_path(wh, "messages")
        _delete_parts(ctx.messages, [o.part for o in d.dropped if o.part is not None])
        written = sum(p["num_records"] for p in parts)
    else:
        msg_df = d.valid.where(F.col("message").isNotNull()).select(
            F.lit(inputs.dump_id).alias("dump_id"), *[F.col("message." + c).alias(c) for c in MESSAGES_SCHEMA.names],
            F.lit(_row_copy(inputs)).cast("string").alias(COPY.name))
        if ctx.properties_map:
            msg_df = msg_df.withColumn("properties", F.expr(SQL_MAP))
        summary.tables["messages"] = append_dump(msg_df, wh, "messages", inputs.dump_id, on_top_of, MESSAGES_STATS)
        written = _rows_written(spark, summary.tables["messages"])
        if on_top_of is not None and written is not None:  # the partition was rewritten with the history's rows
            written -= read_dump(spark, wh, "messages", inputs.dump_id, version=on_top_of).count()
    if written != summary.records:
        summary.issues.append(f"the messages write holds {written} rows where the split reports counted "
                              f"{summary.records} records")
    log.info("wrote messages: %d records%s", written, " with bodies" if ctx.bodies else "")
    summary.undecodable = sum(o.undecodable for o in d.kept)
    summary.undecodable_examples = sorted((e for o in d.kept for e in o.examples),
                                          key=lambda e: e["commit_log_offset"])[:EXAMPLES]
    if summary.undecodable:
        log.info("bodies the client cannot decode: %d", summary.undecodable)


def _held(spark: SparkSession, inputs: Inputs) -> Held | None:
    """The broker's history the copy continues (--broker without --replace), None when it begins one."""
    if not inputs.history or inputs.replace:
        return None
    held = history.load(spark, inputs.warehouse, inputs.dump_id)
    if held is not None and inputs.store.conf.enableMultiDispatch:
        raise InputError(f"{inputs.store.root}: appending to broker {inputs.dump_id}'s history is not supported "
                         f"with enableMultiDispatch (LMQ queue offsets are placed over whole queues); --replace "
                         f"begins the history again from this copy")
    return held


def _reads(spark: SparkSession, inputs: Inputs, held: Held | None, ctx: TaskContext, summary: Summary
           ) -> list[Read]:
    """What of the copy to decode: every file, or on a history the bytes past its end, once the records both hold
    are proved equal (InputError naming the broker, the offset and what differs otherwise); the gap said."""
    files = inputs.store.commitlog.files
    if held is None:
        return [Read(f, 0) for f in files]
    plan = plan_append(held.end, files, held.bases, held.last_record)
    where = f"{inputs.store.root} is not a copy of broker {inputs.dump_id}'s history"
    if plan.problem is None:
        plan.problem = history.continuity_problem(spark, inputs.warehouse, inputs.dump_id, held, files,
                                                  plan.check_offsets, ctx.options())
    if plan.problem is not None:
        raise InputError(f"{where}: {plan.problem} (a wiped and restarted store, or another broker's copy: name "
                         f"another --broker, or --replace to begin the history again from this copy)")
    summary.checked = len(plan.check_offsets)
    summary.gap = plan.gap
    if plan.gap is not None:
        summary.history.append(f"gap: offsets {plan.gap[0]} to {plan.gap[1]} ({plan.gap_bytes:,} bytes) were deleted "
                               f"by retention before a copy held them: their records are not in the history")
    log.info("history %s ends at %d; the copy adds %d reads; %d records checked equal", inputs.dump_id,
             held.end.end, len(plan.reads), summary.checked)
    return plan.reads


def _history_rows(inputs: Inputs, held: Held | None, reads: list[Read],
                  file_rows: list[dict], summary: Summary) -> list[dict]:
    """The history's dump_files rows after this copy (the files it read replace the history's rows of them), and
    the summary's words on what the copy did."""
    merged = file_rows if held is None else (
        [r for r in held.files if r["file_base"] not in {f["file_base"] for f in file_rows}] + file_rows)
    merged.sort(key=lambda r: r["file_base"])
    if not inputs.history:
        return merged
    end = history_end(merged)
    summary.from_offset = (held.end.end if held is not None and summary.gap is None else
                           summary.gap[1] if summary.gap is not None else
                           min((r.file.base + r.start for r in reads), default=0))
    summary.to_offset = end.end if end is not None else summary.from_offset
    began = "began the history" if held is None else "continues the history"
    summary.history.insert(0, f"broker {inputs.dump_id}: this copy {began}: offsets {summary.from_offset} to "
                              f"{summary.to_offset}, {summary.records:,} records"
                              + (f" ({summary.checked} records both hold compared: equal)" if summary.checked else ""))
    row = None if end is None else end.open_file
    if row is not None and row["end_kind"] == "fail" and row in file_rows:
        summary.history.append(f"the copy ends inside a record at offset {row['file_base'] + row['valid_end']} "
                               f"(a copy taken while the broker writes): the history ends before it, and the next "
                               f"copy decodes it whole")
    return merged


def _nothing_new(inputs: Inputs, held: Held, summary: Summary, t0: float) -> Summary:
    """The summary of a copy that adds nothing to the history (no table is written)."""
    summary.history = [h for h in summary.history if not h.startswith(f"broker {inputs.dump_id}:")]
    summary.nothing_new = (f"nothing new: the history of broker {inputs.dump_id} ends at offset {held.end.end} and "
                           f"the copy holds no record past it (an older copy, or the same one again); no table "
                           f"written")
    summary.seconds = time.monotonic() - t0
    return summary


def run(spark: SparkSession, inputs: Inputs) -> Summary:
    """Build the tables of one dump with an existing session, or append a copy to a broker's history (--broker);
    returns the summary. The steps: the registry, the history's end and the copy checked against it, the one
    decode pass, the counts, the small tables, consume_queue, --export-cq / --verify, messages, the dumps and
    copies rows, and the runs row last."""
    t0 = time.monotonic()
    sc = spark.sparkContext
    wh = inputs.warehouse
    apply_writer_conf(spark, inputs.defaults)
    summary, reg = _start(inputs)
    held = _held(spark, inputs)
    ctx = _context(spark, inputs, reg, summary)
    reads = _reads(spark, inputs, held, ctx, summary)
    if held is not None and not reads:
        return _nothing_new(inputs, held, summary, t0)
    d = _decode_all(spark, inputs, ctx, summary, reads)
    file_rows = [dump_file_row(d.plans[r.file.base], inputs.store.root, r.file.base in d.fallback_bases)
                 for r in reads]
    summary.records = sum(r["records"] for r in file_rows) - sum(r.prefix_records for r in reads)
    summary.damaged = [r for r in file_rows if r["damage_offset"] is not None]
    log.info("decoded: %d records, %d damaged ranges", summary.records, len(summary.damaged))
    merged = _history_rows(inputs, held, reads, file_rows, summary)
    if held is not None and summary.records == 0:
        for target, parts in ((ctx.messages, [o.part for o in d.kept + d.dropped]),
                              (ctx.queue, [o.queue_part for o in d.kept + d.dropped])):
            if target is not None:
                _delete_parts(target, [p for p in parts if p is not None])
        for df in d.frames:
            df.unpersist()
        return _nothing_new(inputs, held, summary, t0)
    on_top_of = (lambda t: held.versions.get(t)) if held is not None else (lambda t: None)
    units = _units(spark, inputs, ctx, d, summary)
    sc.setJobDescription(f"{PROG} {inputs.dump_id}: write dump_files")
    summary.tables["dump_files"] = replace_rows(spark, wh, DUMP_FILES, inputs.dump_id, merged)
    sc.setJobDescription(f"{PROG} {inputs.dump_id}: write consumer_filters")
    summary.tables["consumer_filters"] = replace_rows(spark, wh, CONSUMER_FILTERS, inputs.dump_id, reg.rows)
    with progress(spark, log, "write consume_queue"):
        units = _write_queue(spark, inputs, ctx, d, units, summary, on_top_of("consume_queue"))
    if inputs.export_cq is not None:
        sc.setJobDescription(f"{PROG} {inputs.dump_id}: export consume queues")
        summary.export = _export(spark, units, inputs, summary)
        log.info("exported %d queues to %s", len(summary.export.queues), inputs.export_cq)
    if inputs.verify:
        sc.setJobDescription(f"{PROG} {inputs.dump_id}: verify against the dump's consume queues")
        summary.verify = _verify(spark, units, inputs, reg, summary)
        log.info("verified: %d differences", summary.verify.differences)
    with progress(spark, log, "write messages"):
        _write_messages(spark, inputs, ctx, d, summary, on_top_of("messages"))
    for df in d.frames:
        df.unpersist()
    sc.setJobDescription(f"{PROG} {inputs.dump_id}: write dumps")
    summary.tables["dumps"] = replace_rows(spark, wh, DUMPS, inputs.dump_id,
                                           [_dump_row(spark, inputs, summary, held, merged)])
    if inputs.history:
        sc.setJobDescription(f"{PROG} {inputs.dump_id}: write copies")
        summary.tables["copies"] = replace_rows(spark, wh, COPIES, inputs.dump_id, [_copy_row(inputs, summary)],
                                                on_top_of=on_top_of("copies"))
    record_run(spark, wh, PROG, inputs.dump_id, summary.tables)  # last: readers move to this run's tables
    sc.setJobDescription(None)
    summary.seconds = time.monotonic() - t0
    return summary


def _copy_row(inputs: Inputs, summary: Summary) -> dict:
    """The copies table's row of this copy."""
    files = inputs.store.commitlog.files
    return {"dump_id": inputs.dump_id, "store": inputs.store.name,
            "built_at": int(time.time() * 1000), "first_offset": files[0].base if files else 0,
            "from_offset": summary.from_offset, "to_offset": summary.to_offset,
            "gap_from": None if summary.gap is None else summary.gap[0],
            "gap_bytes": 0 if summary.gap is None else summary.gap[1] - summary.gap[0],
            "files": summary.files, "records": summary.records, "units": summary.units,
            "checked": summary.checked, "broker_version": inputs.broker_version,
            "queue_ids": None if summary.queue_set is None else [f"{q}:{t}" for t, q in summary.queue_set]}


def _dump_row(spark: SparkSession, inputs: Inputs, summary: Summary, held: Held | None, files: list[dict]) -> dict:
    """The dumps table's row: where the dump (a history's newest copy) and its inputs are, so job 2 and explain can
    find them again, and what the tables hold of it (a history's counts are the whole history's)."""
    def local(path: str | None) -> str | None:
        return None if path is None else os.path.abspath(path)

    row = {"dump_id": inputs.dump_id, "store": inputs.store.name,
           "broker_conf": local(inputs.broker_conf), "subscriptions": local(inputs.subscriptions_path),
           "built_at": int(time.time() * 1000), "files": summary.files, "bytes": summary.bytes,
           "records": summary.records, "units": summary.units, "queues": summary.queues,
           "broker_version": inputs.broker_version}
    if held is not None:
        (before,) = read_rows(spark, inputs.warehouse, "dumps", inputs.dump_id, version=held.versions["dumps"])
        row.update(files=len(files), bytes=sum(f["size"] for f in files), records=sum(f["records"] for f in files),
                   units=(before["units"] or 0) + summary.units, queues=_history_queues(spark, inputs, summary, held))
    return row


def _history_queues(spark: SparkSession, inputs: Inputs, summary: Summary, held: Held) -> int:
    """The history's queues after this copy: the union of its copies rows' queues and this run's (a few rows read),
    else, where a copies row lacks them, a distinct count over the whole history's consume_queue."""
    version = held.versions.get("copies")
    if summary.queue_set is not None and version is not None:
        rows = read_rows(spark, inputs.warehouse, "copies", inputs.dump_id, version=version)
        if rows and all(r.get("queue_ids") is not None for r in rows):
            held_ids = {tuple(q.split(":", 1)[::-1]) for r in rows for q in r["queue_ids"]}
            return len(held_ids | {(t, str(q)) for t, q in summary.queue_set})
    return (read_dump(spark, inputs.warehouse, "consume_queue", inputs.dump_id, latest=True)
            .select("topic", "queue_id").distinct().count())


def _prepare(args: argparse.Namespace) -> Inputs:
    inputs = validate(args)
    _registry(inputs)
    return inputs




def main(argv: list[str] | None = None, spark: SparkSession | None = None) -> int:
    """Parse, validate, run, print the summary; bad input is one line on stderr and exit code 2."""
    args = parser().parse_args(argv)
    return run_main(PROG, lambda: _prepare(args), lambda i: f"{PROG} {i.dump_id}", lambda i: i.defaults,
                    args.master, run, spark, break_lock=args.break_lock)


if __name__ == "__main__":
    sys.exit(main())
