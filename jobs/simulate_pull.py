"""Job 2: every consumer group's pull replayed over a dump, as the broker would answer it now.

    python -m jobs.simulate_pull --store DIR --warehouse DIR [--dump-id ID] [--broker-conf FILE]
                                 [--subscriptions FILE] [--from earliest|committed] [--queues dump|rebuilt]

Subscriptions are the file's plus a registered SQL92 subscription for every record of the dump's
consumerFilter.json the file does not name; the registry is that file as the broker loads it. Each subscription
gets the broker's pre-read answer; those answered OK pull every queue of their topic. One Spark task per queue
decides every unit for every subscription of the topic set-at-a-time (`filterlib.replay`) and pages the pulls as
getMessage does. The consume queues and ext bitmaps are the dump's own (what the broker reads), or job 1's rebuild
(`--queues rebuilt`, and the fallback when the dump has none). The messages come from job 1's `messages` table.
Each queue is replayed once; its compact output is cached and written as the tables pull_decisions (the decision
matrix: a byte per subscription per scanned unit), decision_details, decision_codes, pulls and group_stats, each
replaced per dump in one commit. One row per decision or per delivered message: `jobs.row_forms`.
Tables: docs/simulate_pull.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from filterlib import brokerversion, tables
from filterlib import message_filter as mf
from filterlib import vocabulary as vocab
from filterlib.errors import StoreFormatError
from filterlib.members import MessageQueue, kept_words, member_pulls, split_groups, topic_queue_ids
from filterlib.rebuild.dispatch import registry_spec
from filterlib.rebuild.dumpregistry import RegistryLoad
from filterlib.registry import now_ms
from filterlib.replay import whatif
from filterlib.replay.matrix import codes_table, subscription_positions
from filterlib.replay.plans import (
    COMMITTED,
    EARLIEST,
    NOT_SUBSCRIBED,
    Plan,
    committed_offsets,
    dump_subscriptions,
    not_replayed,
    plan_all,
    plan_members,
)
from filterlib.replay.rows import MESSAGE_SIDE
from filterlib.replay.stats import (
    continued,
    pull_firsts,
    pull_numbering,
    pull_positions,
    stats_rows,
    sum_counts,
    totals,
)
from filterlib.replay.timeline import Carried, carry, replay_from
from filterlib.replay.whatif import WHAT_IF, WhatIf, WhatIfRefused, parse_what_if, what_if_plans
from filterlib.store.commitlog import COMPRESSED_FLAG
from filterlib.store.compression import body_errors
from filterlib.store.consumequeue import CQ_STORE_UNIT_SIZE
from filterlib.store.dumpqueue import units_per_file
from filterlib.store.queues import DEFAULT_ROCKSDB, ROCKSDB
from filterlib.store.storedir import StoreDir
from filterlib.subscriptions import Subscription
from jobs.cli import (
    ROOT,
    InputError,
    add_broker_version_arg,
    add_run_args,
    add_session_args,
    apply_writer_conf,
    broker_version_of,
    config_or_note,
    dump_id_of,
    dump_registry,
    job_logger,
    load_defaults,
    open_store,
    read_subscriptions,
    resolve_version,
    run_main,
)
from jobs.delta_files import (
    FileSource,
    all_null,
    commit_dump,
    dump_frame,
    dump_records,
    file_source,
    file_target,
    frame_parts,
    key_ranges,
    least_since,
    parquet_codec,
    reaching,
    replace_rows,
)
from jobs.delta_io import append_dump, replace_dump, table_path
from jobs.faults import task_writes
from jobs.history import Previous, is_history, last_pull_run
from jobs.piece_tasks import (
    Geometry,
    end_rows,
    geometry,
    packed_ddl,
    packed_dump_queues,
    packed_message_files,
    packed_rebuilt_queues,
    replay_packed,
)
from jobs.progress import progress
from jobs.pull_tasks import (
    COUNT,
    DETAIL,
    FILE,
    MATRIX,
    MESSAGE_COLUMNS,
    PIECE,
    PULL,
    QUEUE_TASK_DDL,
    UNRESOLVED,
    WRITTEN,
    PullContext,
    cq_side_ddl,
    message_files_side,
    message_side,
    out_ddl,
    piece_size,
    read_dump_queues,
    replay_queues,
    verdict_side_ddl,
    what_if_changes,
)
from jobs.runs import JOB1_TABLES, pinned_version, read_dump, read_rows, read_version, record_run
from jobs.schemas import spark_ddl
from jobs.spark import task_count

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULTS = ROOT / "conf" / "simulate_pull.json"
PROG = "simulate_pull"
log = job_logger(PROG)

DUMP, REBUILT = "dump", "rebuilt"
DEFAULT_PIECE_UNITS = 1 << 18
"""Units per piece a file queue is replayed in (rounded up to whole consumequeue files): what one task holds."""
MATRIX_COLUMNS = tables.DECISION_MATRIX.names[1:]
MATRIX_STATS = ["dump_id", "topic", "queue_id", "queue_offset", "commit_log_offset"]
"""The matrix columns Delta keeps file statistics for (what explain looks units up by; delta_io.replace_dump)."""
DETAIL_COLUMNS = tables.DECISION_DETAILS.names[1:]
PULL_COLUMNS = tables.PULLS.names[1:]
WHAT_IF_COLUMNS = tables.WHAT_IF.names[1:]
"""The columns each table's rows are selected in, after dump_id (`filterlib.tables`)."""


@dataclass
class Inputs:
    """Everything validated on the driver before Spark starts."""

    store: StoreDir | None
    dump_id: str | None
    warehouse: str
    broker_conf: str | None
    subscriptions: list[Subscription]
    start: str
    queues: str
    defaults: dict[str, Any]
    what_if: list[WhatIf] = field(default_factory=list)
    refused: list[WhatIfRefused] = field(default_factory=list)
    subscriptions_path: str | None = None
    broker_version: str | None = None
    version_line: str = ""
    piece_units: int = DEFAULT_PIECE_UNITS
    cluster: tuple[str, ...] = ()
    """The dumps of the cluster's master brokers (`--cluster`): a group replayed as its members is allocated over
    all their queues."""
    restart: bool = False
    """On a broker's history: replay it whole again instead of continuing (`--restart`)."""


@dataclass(frozen=True)
class ClusterBroker:
    """Another master broker of the dump's cluster, as its clients' route shows it: its name, its topics.json and
    the queues its store holds."""

    dump_id: str
    name: str
    topics: dict | None
    found: tuple[tuple[str, int], ...]

    def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's queues on this broker (`filterlib.members.topic_queue_ids`)."""
        ids = topic_queue_ids(self.topics, (q for t, q in self.found if t == topic), topic)
        return [MessageQueue(topic, self.name, q) for q in ids]


@dataclass
class Summary:
    """What a run did, for the end-of-run report and for tests."""

    dump_id: str
    queues_source: str = DUMP
    start: str = EARLIEST
    plans: list[Plan] = field(default_factory=list)
    stats: list[dict] = field(default_factory=list)
    queues: int = 0
    pieces: int = 0
    """The replay's tasks: each file queue is cut into pieces of whole consumequeue files (one when short)."""
    piece_partitions: int = 0
    largest_piece: int = 0
    foreign_units: int = 0
    """Units whose message belongs to another topic (the replay then joins the properties; `_replay`)."""
    unresolved: list[int] = field(default_factory=list)
    """The commit log offsets of units a packed replay found no message for among their queue's (`_replay`)."""
    packed: bool = False
    """True when the decisions written came from the packed replay (`jobs.piece_tasks`)."""
    decisions: int = 0
    delivered: int = 0
    pulls: int = 0
    notes: list[str] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    what_if: list[dict] = field(default_factory=list)
    refused: list[WhatIfRefused] = field(default_factory=list)
    broker_version: str = brokerversion.DEFAULT
    version_line: str = ""
    queue_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    """{(topic, queue id): the offset past its last unit} of the queues replayed."""
    positions: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    """{(subscription index, queue id): (its pulls' furthest next_begin_offset, its pulls)} of the run's pulls."""
    ended: list[dict] = field(default_factory=list)
    """Over a broker's history: the group_stats rows of subscriptions no longer in force (kept as they were)."""

    def lines(self) -> list[str]:
        """The human summary: one block per subscription, then the totals."""
        rate = self.decisions / self.seconds if self.seconds else 0.0
        out = [f"dump {self.dump_id} (broker {brokerversion.rules_release(self.broker_version)}): consume queues "
               f"from the {self.queues_source} "
               f"({'the broker’s own files' if self.queues_source == DUMP else 'job 1’s consume_queue table'}), "
               f"pulls from the {self.start} offset; {len(self.plans)} subscriptions over {self.queues} queues"
               + (f" in {self.pieces} pieces of whole consumequeue files" if self.pieces > self.queues else "")]
        if self.version_line:
            out.append(self.version_line)
        for s in self.stats:
            head = f"  {s['consumer_group']} on {s['topic']} [{s['subscription_type']} {s['expression']!r}, " \
                   f"{s['path']}, {s['source']}]"
            if s.get("member") is not None:
                head = _member_head(s)
            if s["answer"] == NOT_SUBSCRIBED:
                out.append(f"{head}: {s['answer_remark']}; {s['never_pulled']:,} units never pulled")
                continue
            if s["answer"] != mf.OK:
                out.append(f"{head}: broker answers {s['answer']}: {s['answer_remark'] or s['answer_cause']}")
                continue
            drops = ", ".join(f"{k} {s[k]:,}" for k in vocab.OUTCOME_COLUMNS.values() if k != "delivered" and s[k])
            out.append(f"{head}: scanned {s['units_scanned']:,}, delivered {s['delivered']:,}"
                       f"{'; ' + drops if drops else ''}; {s['pulls']:,} pulls ({s['empty_pulls']:,} empty)")
            if s["tag_collisions"]:
                out.append(f"    tag-hash collisions: {s['tag_collisions']:,} messages passed the hash check "
                           f"with another tag")
            if s["sql_evaluations"] or s["bloom_miss"]:
                saved = f", {s['bloom_miss']:,} avoided by the bloom bitmap" if s["bloom_miss"] else ""
                out.append(f"    SQL92 on the broker: {s['sql_evaluations']:,} evaluations{saved}")
            if s["bloom_tested"]:
                rate_txt = "n/a" if s["bloom_fp_rate"] is None else f"{s['bloom_fp_rate']:.1%}"
                out.append(f"    bloom: {s['bloom_tested']:,} bitmaps tested, {s['bloom_false_positives']:,} false "
                           f"positives ({rate_txt} of the non-matching; configured {s['configured_fp_rate']:.0%})")
        for r in self.refused:
            out.append(f"what-if {r.spec!r} refused, nothing replayed for it: {r.reason}")
        for w in self.what_if:
            out.append(f"what-if {w['consumer_group']} on {w['topic']}: {w['candidate']!r} instead of "
                       f"{w['current']!r}: {w['gained']:,} messages gained, {w['lost']:,} lost")
            for q in w["queues"]:
                out.append(f"    queue {q['queue_id']}: +{q['gained']:,} -{q['lost']:,}")
            for e in w["examples"]:
                out.append(f"    {e['change']}: queue {e['queue_id']} offset {e['queue_offset']}, msgId "
                           f"{e['msg_id']}, tag {e['tags']!r} (current {e['current_outcome'] or 'not pulled'}, "
                           f"candidate {e['candidate_outcome']})")
        out += [f"note: {n}" for n in self.notes]
        out += [f"table {t}: {p}" for t, p in self.tables.items()]
        out.append(f"decisions {self.decisions:,}, delivered {self.delivered:,}, pulls {self.pulls:,}; "
                   f"time {self.seconds:.1f} s, {rate:,.0f} decisions/s")
        return out


def parser() -> argparse.ArgumentParser:
    """The command line (every flag explained in --help)."""
    p = argparse.ArgumentParser(
        prog="python -m jobs.simulate_pull",
        description="Replay every consumer group's pull over a RocketMQ store dump, as the broker would answer "
                    "it: per scanned consume-queue unit every subscription's outcome and the filter layer that "
                    "decided (a decision matrix, exploded to one row per decision or per delivered message by "
                    "jobs.row_forms), the pulls themselves and per-group statistics, as Delta tables under the "
                    "warehouse. Needs job 1 (python -m jobs.build_queues) run on the same dump and warehouse "
                    "first. Re-running a dump replaces its rows.")
    p.add_argument("--store", metavar="DIR|URI",
                   help="the dump (the broker store root job 1 read, a path or a URI as job 1 takes it): its "
                        "consumequeue/ and consumequeue_ext/ are the queues pulled by default, "
                        "config/consumerFilter.json the SQL92 registry, config/consumerOffset.json the committed "
                        "offsets (default: the store job 1 recorded for the dump in the warehouse's dumps table, "
                        "with its broker.conf and subscriptions file unless those flags are given)")
    p.add_argument("--warehouse", required=True, metavar="DIR",
                   help="the Delta warehouse job 1 wrote (its messages table is read; the tables of this job are "
                        "written beside them)")
    p.add_argument("--dump-id", "--broker", metavar="ID",
                   help="the dump's name in the tables, or the broker whose history job 1 built (--broker); "
                        "default: the store directory's name, as job 1")
    p.add_argument("--broker-conf", metavar="FILE",
                   help="the broker's broker.conf: enablePropertyFilter (off refuses SQL92 with SYSTEM_ERROR), "
                        "filterSupportRetry, maxErrorRateOfBloomFilter, expectConsumerNumUseFilter, "
                        "mappedFileSizeConsumeQueue (default: RocketMQ 5.3.3's defaults)")
    p.add_argument("--subscriptions", metavar="FILE",
                   help="JSON list of subscriptions (design.md, 'Subscriptions file'): tag subscriptions live only "
                        "in broker memory, so they come from here; consumerFilter.json records not named here are "
                        "pulled as registered SQL92 subscriptions")
    p.add_argument("--from", dest="start", choices=[EARLIEST, COMMITTED], default=EARLIEST,
                   help="where each queue's pull starts: offset 0 (earliest, default), or the group's committed "
                        "offset from config/consumerOffset.json (queues without one start at the earliest)")
    p.add_argument("--queues", choices=[DUMP, REBUILT], default=None,
                   help="the consume queues and ext bitmaps pulled: the dump's own files (default for a dump; what "
                        "the real broker reads) or job 1's consume_queue table (rebuilt; the default for a broker's "
                        "history, whose newest copy holds only its own window, and the fallback when the dump has no "
                        "consumequeue/)")
    p.add_argument("--restart", action="store_true",
                   help="on a broker's history (job 1 with --broker): replay the whole history again from --from, "
                        "replacing the tables' rows of it, instead of continuing each subscription where the previous "
                        "run stopped (docs/history.md)")
    p.add_argument("--what-if", action="append", default=[], metavar="G[@TOPIC]=TYPE:EXPR",
                   help="replay a candidate subscription beside group G's current one (on every topic G "
                        "subscribes to, or on TOPIC) and report the messages gained and lost by topic and queue, "
                        "with examples, in the summary and the what_if table; TYPE is SQL92 or TAG, e.g. "
                        "'billing=SQL92:amount > 100' or 'audit@Orders=TAG:TagA || TagB'; repeatable. The "
                        "candidate is pulled as a posted subscription (exact SQL92, no bloom bits); the other "
                        "tables are not changed by it. A candidate that does not compile is reported with its "
                        "position and reason and skipped")
    p.add_argument("--piece-units", type=int, default=DEFAULT_PIECE_UNITS, metavar="N",
                   help="replay each file queue in pieces of whole consumequeue files of at least N units, one "
                        "task each, so one long queue uses every core and a task holds one piece whatever the "
                        "queue's length (exact: a call never scans past its consumequeue file); 0 replays every "
                        "queue whole. A RocksDB queue is always replayed whole (default: %(default)s)")
    p.add_argument("--cluster", metavar="DUMP[,DUMP...]",
                   help="the dumps, in this warehouse, of the other master brokers of this broker's cluster (this "
                        "one may be listed too): a group replayed as its members (client_id in the subscriptions "
                        "file) is allocated over the queues of every listed broker, as its clients' rebalance "
                        "does (each broker's topics.json, brokerName from the broker.conf job 1 recorded, else the "
                        "dump id). Run job 2 once per broker with the same list. A slave's copy is refused")
    add_broker_version_arg(p, f"default: what job 1 recorded for the dump (read from the same store), else the "
                              f"release the dump's files show (brokerversion.detect), else {brokerversion.DEFAULT}")
    add_session_args(p, DEFAULTS)
    add_run_args(p)
    return p


def validate(args: argparse.Namespace) -> Inputs:
    """Check every input before Spark starts; raise InputError with one line naming what is wrong."""
    defaults = load_defaults(args.defaults)
    store = None if args.store is None else open_store(args.store, args.broker_conf)
    subs = read_subscriptions(args.subscriptions)
    dump_id = args.dump_id if store is None else dump_id_of(args.dump_id, args.store)
    local_wh = "://" not in args.warehouse
    if local_wh and not os.path.isdir(os.path.join(table_path(args.warehouse, "messages"), "_delta_log")):
        raise InputError(f"{args.warehouse}: not a warehouse of job 1 (no Delta table messages/ in it); run "
                         f"python -m jobs.build_queues on the dump with --warehouse {args.warehouse} first")
    if store is None and local_wh and not os.path.isdir(os.path.join(table_path(args.warehouse, "dumps"),
                                                                       "_delta_log")):
        raise InputError(f"{args.warehouse}: no dumps table recording where job 1's dumps are: pass --store")
    candidates, refused = [], []
    for spec in args.what_if:
        try:
            parsed = parse_what_if(spec)
        except ValueError as e:
            raise InputError(str(e)) from None
        (refused if isinstance(parsed, WhatIfRefused) else candidates).append(parsed)
    version = None if args.broker_version is None else broker_version_of(args.broker_version)
    if args.piece_units < 0:
        raise InputError(f"--piece-units {args.piece_units}: give a count of units, or 0 to replay queues whole")
    cluster = tuple(dict.fromkeys(d.strip() for d in (args.cluster or "").split(",") if d.strip()))
    if args.cluster is not None and not cluster:
        raise InputError("--cluster names no dump: give the dump ids of the cluster's brokers, comma-separated")
    return Inputs(store, dump_id, args.warehouse, args.broker_conf, subs, args.start, args.queues, defaults,
                  candidates, refused, args.subscriptions, version, piece_units=args.piece_units, cluster=cluster,
                  restart=args.restart)


def resolve_store(spark: SparkSession, inputs: Inputs) -> Inputs:
    """With no --store: the store (and, unless given, the broker.conf and subscriptions file) job 1 recorded for
    the dump in the warehouse's dumps table; the only dump there when no --dump-id is given."""

    from pyspark.errors import AnalysisException

    if inputs.store is not None and inputs.version_line:  # resolved already (run_main's resolve, then run)
        return inputs
    if inputs.store is not None:
        recorded = None if inputs.broker_version else _recorded_version(spark, inputs)
        version, line = ((recorded, f"broker version {recorded} (recorded by job 1 in the dumps table)") if recorded
                         else resolve_version(inputs.broker_version, inputs.store))
        return replace(inputs, broker_version=version, version_line=line)
    try:
        rows = (read_rows(spark, inputs.warehouse, "dumps", inputs.dump_id) if inputs.dump_id is not None
                else [r.asDict() for r in spark.read.format("delta").load(table_path(inputs.warehouse, "dumps"))
                      .limit(50).collect()])
    except AnalysisException as e:
        raise InputError(f"{table_path(inputs.warehouse, 'dumps')}: cannot read job 1's dumps table "
                         f"({str(e).splitlines()[0]}); pass --store") from None
    if len(rows) != 1:
        known = ", ".join(sorted(r["dump_id"] for r in rows)) or "none"
        what = f"dump {inputs.dump_id!r} is not recorded" if inputs.dump_id else f"{len(rows)} dumps are recorded"
        raise InputError(f"{inputs.warehouse}: {what} (dumps: {known}); pass --store (and --dump-id)")
    row = rows[0]
    broker_conf = inputs.broker_conf or row["broker_conf"]
    subs_path = inputs.subscriptions_path or row["subscriptions"]
    log.info("store from the dumps table: %s (broker.conf %s, subscriptions %s)", row["store"], broker_conf,
             subs_path)
    store = open_store(row["store"], broker_conf)
    recorded = None if inputs.broker_version else row.get("broker_version")
    version, line = ((recorded, f"broker version {recorded} (recorded by job 1 in the dumps table)") if recorded
                     else resolve_version(inputs.broker_version, store))
    return replace(inputs, store=store, dump_id=row["dump_id"], broker_conf=broker_conf,
                   broker_version=version, version_line=line,
                   subscriptions=inputs.subscriptions if inputs.subscriptions_path else read_subscriptions(subs_path),
                   subscriptions_path=subs_path)


def _recorded_version(spark: SparkSession, inputs: Inputs) -> str | None:
    """The release job 1 recorded for this dump when it read the same store (None: no such row, or no table)."""
    from pyspark.errors import AnalysisException

    try:
        rows = read_rows(spark, inputs.warehouse, "dumps", inputs.dump_id, latest=True)
    except AnalysisException:
        return None
    if not rows:
        return None
    row = rows[0]
    root = inputs.store.root
    same = row.get("store") in (root, os.path.abspath(root))
    return row.get("broker_version") if same else None


def _registry(inputs: Inputs, as_job1: bool) -> RegistryLoad:
    """The dump's registry; `as_job1`: the one job 1 built the rebuilt bitmaps with (the file's registered SQL92
    subscriptions taken when the dump has no registry)."""
    return dump_registry(inputs.store, inputs.subscriptions if as_job1 else (),
                         inputs.broker_version or brokerversion.DEFAULT)


def _messages(spark: SparkSession, inputs: Inputs) -> tuple[DataFrame, DataFrame | None, FileSource | None]:
    """The dump's messages (`_checked_bodies`), the persisted body checks to unpersist at the end (or None), and the
    table's files where tasks can read them themselves (`delta_files.file_source`). Whether the dump has rows and
    bodies is read from the files' statistics where they say, else by a query."""
    from pyspark.errors import AnalysisException

    wh, dump = inputs.warehouse, inputs.dump_id
    try:
        df = read_dump(spark, wh, "messages", dump)
        version = read_version(spark, wh, "messages", dump)
        present = dump_records(spark, wh, "messages", dump, version)
        if present is None:
            present = df.select("commit_log_offset").limit(1).count()
    except AnalysisException as e:
        raise InputError(f"{table_path(wh, 'messages')}: cannot read job 1's messages table "
                         f"({str(e).splitlines()[0]})") from None
    if not present:
        raise InputError(f"{table_path(wh, 'messages')}: no rows for dump {dump!r}; run "
                         f"python -m jobs.build_queues on it first (or pass its --dump-id)")
    source = file_source(spark, df, wh, "messages", dump, version)
    return (*_checked_bodies(df, source is not None and all_null(source, "body")), source)


def _compressed():
    from pyspark.sql import functions as F

    return (F.coalesce(F.col("sys_flag"), F.lit(0)).bitwiseAND(COMPRESSED_FLAG)) != 0


def _checked_bodies(df: DataFrame, no_bodies: bool = False) -> tuple[DataFrame, DataFrame | None]:
    """The messages with body_error worked out here for the compressed ones whose body the table holds (null for
    every other row that holds its body: only a compressed, non-empty body can fail the client's decode). There
    job 1's column is not trusted: a dump written before it existed reads it back as null once a later dump added
    it to the table, which would deliver undecodable bodies. A row without its body (job 1 without --bodies, which
    works body_error out in its decode) keeps job 1's. A dump without compressed bodies in the table costs one
    query on sys_flag, and its bodies are never read here; otherwise the checks (a few bytes per compressed
    message) are persisted, as the replays and the delivered bodies each read them. `no_bodies`: the files' own
    statistics say no row holds its body, so not even that query runs."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if "body_error" not in df.columns:
        df = df.withColumn("body_error", F.lit(None).cast("string"))
    held = F.col("body").isNotNull()
    if no_bodies or not df.where(_compressed() & held).limit(1).count():
        return df.withColumn("body_error", F.when(held, F.lit(None)).otherwise(F.col("body_error"))), None
    errors = (df.where(_compressed() & held).select("commit_log_offset", "sys_flag", "body")
              .mapInArrow(_body_errors, "commit_log_offset long, body_error string")
              .withColumnRenamed("body_error", "checked_error").withColumn("checked", F.lit(True))
              .persist(StorageLevel.MEMORY_AND_DISK))
    out = df.join(errors, "commit_log_offset", "left").withColumn(
        "body_error", F.when(F.col("checked"), F.col("checked_error")).when(held, F.lit(None))
        .otherwise(F.col("body_error")))
    return out.drop("checked", "checked_error"), errors


def _body_errors(batches):
    """mapInArrow over compressed messages: why the client's decode of each body fails, null where it decodes."""
    for b in batches:
        flags = b.column("sys_flag").fill_null(0).to_numpy(zero_copy_only=False)
        yield pa.RecordBatch.from_arrays([b.column("commit_log_offset"), body_errors(flags, b.column("body"))],
                                         names=["commit_log_offset", "body_error"])


def _member_head(s: dict) -> str:
    """A member's summary head: group, topic, member, its own subscription, whose the broker keeps, its queues."""
    own = "not subscribed" if s["answer"] == NOT_SUBSCRIBED else f"{s['subscription_type']} {s['expression']!r}"
    kept = ("its own" if s["kept_by"] == s["member"] else f"{s['kept_by']}'s {s['kept_type']} "
            f"{s['kept_expression']!r}") if s["kept_by"] is not None else "none (posted)"
    return f"  {s['consumer_group']} on {s['topic']}, member {s['member']} [{own}; broker keeps {kept}; queues " \
           f"{s['owned_queues'] or 'none'}]"


@dataclass(frozen=True)
class MessageFiles:
    """The messages a replay reads: the DataFrame, and where its tasks can read the table's Parquet files
    themselves (`delta_files.FileSource`, None: through Spark), from commit log offset `low` on (None: all)."""

    df: DataFrame
    source: FileSource | None = None
    low: int | None = None


def _message_files(messages: DataFrame, body_checks: DataFrame | None, source: FileSource | None, units: DataFrame,
                   carried: Carried | None, least: int | None = None) -> MessageFiles:
    """The replay's messages. A continued history's start at the first one its units to replay point at (file
    statistics prune the rest; `least`, that first one where the caller knows it): the replay pays for what is
    new, not for the whole history. Where the table's rows are its files' rows and no body is checked here, the
    tasks read the files themselves."""
    from pyspark.sql import functions as F

    low = None
    source = source if body_checks is None else None
    if carried is not None:
        found = least if least is not None else units.agg(F.min("commit_log_offset")).first()[0]
        if found is not None:
            low = int(found)
            messages = messages.where(F.col("commit_log_offset") >= low)
            if source is not None:
                source = reaching(source, "commit_log_offset", low)
    return MessageFiles(messages, source, low)


@dataclass(frozen=True)
class PackedQueues:
    """The pulled queues' units packed per piece (`jobs.piece_tasks`), and the pieces' geometry the messages are
    placed by."""

    df: DataFrame
    where: Geometry


def _queue_units(spark: SparkSession, inputs: Inputs, topics: set[str], summary: Summary,
                 carried: Carried | None = None) -> tuple[DataFrame, int | None, PackedQueues | None]:
    """Every pulled queue's units with min_offset, units_per_file and the piece they are replayed in, and each
    queue's end row (`pull_tasks.CQ_SIDE`: the CQ side only), from the dump or job 1. Over a history continued
    (`carried`), a file queue's units from where its first continuing pull starts (`timeline.replay_from`), and
    the least commit log offset those units point at where job 1's files tell it without a Spark job; and the same
    units packed per piece where tasks can read them without Spark's rows (`PackedQueues`, else None)."""
    from pyspark.sql import functions as F

    source = inputs.queues
    store = inputs.store
    if source == DUMP and store.queue_kind is None:
        summary.notes.append("the dump has no consumequeue/: pulled job 1's rebuilt queues instead")
        source = REBUILT
    summary.queues_source = source
    if source == DUMP:
        pairs = [q for q in _dump_queue_ids(store) if q[0] in topics]
        if store.queue_kind == ROCKSDB:
            summary.notes.append(f"{os.path.join(store.root, 'consumequeue')} is a RocksDB database "
                                 f"(storeType=defaultRocksDB): its units carry no ext unit, so no bloom layer, and "
                                 f"getMessage reads at most a batch of them per pull")
        _check_queues_found(spark, inputs, topics, {t for t, _ in pairs}, summary)
        summary.queues = len(pairs)
        if not pairs:
            return spark.createDataFrame([], cq_side_ddl()), None, None
        tasks = spark.createDataFrame(spark.sparkContext.parallelize(
            [(t, q, inputs.piece_units) for t, q in pairs], max(1, min(len(pairs), 64))), QUEUE_TASK_DDL)
        sizes = [(t, q, units_per_file(store, t, q)) for t, q in pairs]
        where = geometry([(t, q, 0, piece_size(n, inputs.piece_units), None, None, n, None) for t, q, n in sizes])
        packed = PackedQueues(tasks.mapInArrow(packed_dump_queues(store.root, store.conf.storeType), packed_ddl()),
                              where)
        return tasks.mapInArrow(read_dump_queues(store.root, store.conf.storeType), cq_side_ddl()), None, packed
    if store.queue_kind == ROCKSDB:
        summary.notes.append("the dump's consume queues are a RocksDB database (storeType=defaultRocksDB): "
                             "the rebuilt queues are paged as the broker pages RocksDB queues, with no bloom layer")
    cq, bounds, files = _rebuilt_queues(spark, inputs, topics)
    per_file = 0 if _pages_rocksdb(store) else max(1, store.conf.mappedFileSizeConsumeQueue // CQ_STORE_UNIT_SIZE)
    size = piece_size(per_file, inputs.piece_units)
    summary.queues = len(bounds)
    froms = [] if carried is None or not per_file else [
        (t, q, at) for t, q, _lo, _hi in bounds if (at := replay_from(carried.plans, carried.starts, t, q)) is not None]
    firsts = {(t, q): at for t, q, at in froms}

    def base(t: str, q: int, lo: int) -> int:
        """Where the queue's pieces are counted from: the file holding its first unit replayed, so a continued
        run's few new units make as few pieces as a fresh run's (each piece costs every subscription a call)."""
        return firsts.get((t, q), lo) // per_file * per_file if per_file else 0

    lows = spark.createDataFrame([(t, q, lo, base(t, q, lo)) for t, q, lo, _ in bounds],
                                 "topic string, queue_id int, min_offset long, piece_base long")
    piece = (F.floor((F.col("queue_offset") - F.col("piece_base")) / size) if size else F.lit(0)).cast("long")
    least = None
    if carried is not None and files is not None:
        cq, least, files = _past_starts(spark, inputs, topics, cq, files, bounds, froms)
    if froms:
        cuts = spark.createDataFrame(froms, "topic string, queue_id int, replay_from long")
        cq = cq.join(F.broadcast(cuts), ["topic", "queue_id"], "left").where(
            F.col("replay_from").isNull() | (F.col("queue_offset") >= F.col("replay_from"))).drop("replay_from")
    units = cq.join(F.broadcast(lows), ["topic", "queue_id"]).select(
        "topic", "queue_id", piece.alias("piece"), "min_offset", F.lit(per_file).cast("long").alias("units_per_file"),
        F.lit(None).cast("long").alias("end_offset"), "queue_offset", "commit_log_offset", "size", "tags_code",
        F.lit(True).alias("tags_code_legal"), F.col("msg_store_time").isNotNull().alias("has_ext"),
        F.col("msg_store_time").alias("ext_store_time"), "filter_bitmap")
    ends = spark.createDataFrame([(t, q, (hi - base(t, q, lo)) // size if size else 0, lo, per_file, hi)
                                  for t, q, lo, hi in bounds],
                                 "topic string, queue_id int, piece long, min_offset long, units_per_file long, "
                                 "end_offset long")
    packed = None
    if files is not None:
        where = geometry([(t, q, base(t, q, lo), size, lo, hi, per_file, firsts.get((t, q)))
                          for t, q, lo, hi in bounds])
        paths = _path_tasks(spark, files)
        tails = spark.createDataFrame(end_rows([(t, q, (hi - base(t, q, lo)) // size if size else 0, lo, per_file, hi)
                                                for t, q, lo, hi in bounds]), packed_ddl())
        packed = PackedQueues(paths.mapInArrow(packed_rebuilt_queues(files, where), packed_ddl()).unionByName(tails),
                              where)
    return units.unionByName(ends, allowMissingColumns=True), least, packed


def _past_starts(spark: SparkSession, inputs: Inputs, topics: set[str], cq: DataFrame, files: FileSource,
                 bounds: list[tuple[str, int, int, int]], froms: list[tuple[str, int, int]]
                 ) -> tuple[DataFrame, int | None, FileSource]:
    """A continued history's units read only from the consume-queue files that hold one past its queue's start
    (each file's statistics, `delta_files.least_since`: older copies' files drop out before Spark reads them), the
    least commit log offset those units point at, and those files."""
    from pyspark.sql import functions as F

    starts = {(t, q): None for t, q, _lo, _hi in bounds} | {(t, q): at for t, q, at in froms}
    firsts = {p: least_since(FileSource((p,), files.kind, files.s3), ("topic", "queue_id"), "queue_offset", starts,
                             "commit_log_offset") for p in files.paths}
    kept = [p for p, first in firsts.items() if first is not None]
    least = min((firsts[p] for p in kept), default=None)
    log.info("continued: %d of the history's %d consume-queue files hold units to replay", len(kept),
             len(files.paths))
    if len(kept) < len(files.paths):
        wh, dump = inputs.warehouse, inputs.dump_id
        found = dump_frame(spark, wh, "consume_queue", dump, read_version(spark, wh, "consume_queue", dump), set(kept))
        if found is not None:
            cq = found[0].where(F.col("topic").isin(sorted(topics)))
    return cq, least, files.only(kept)


def _rebuilt_queues(spark: SparkSession, inputs: Inputs, topics: set[str]
                    ) -> tuple[DataFrame, list[tuple[str, int, int, int]], FileSource | None]:
    """Job 1's units of the pulled topics, each queue's (topic, queue_id, first offset, end offset) and the files
    behind them: read from the files the table's log names, the bounds from their statistics
    (`delta_files.key_ranges`), no Spark job; through delta-spark where the log cannot answer (no files)."""
    from pyspark.sql import functions as F

    wh, dump = inputs.warehouse, inputs.dump_id
    found = dump_frame(spark, wh, "consume_queue", dump, read_version(spark, wh, "consume_queue", dump))
    if found is not None:
        cq, source = found
        ranges = key_ranges(source, ("topic", "queue_id"), "queue_offset")
        bounds = sorted((t, q, lo, hi + 1) for (t, q), (lo, hi) in ranges.items() if t in topics)
    else:
        source = None
        cq = read_dump(spark, wh, "consume_queue", dump)
        bounds = [(r.topic, r.queue_id, r.lo, r.hi) for r in cq.where(F.col("topic").isin(sorted(topics)))
                  .groupBy("topic", "queue_id").agg(F.min("queue_offset").alias("lo"),
                                                    (F.max("queue_offset") + 1).alias("hi")).collect()]
    return cq.where(F.col("topic").isin(sorted(topics))), bounds, source


def _pages_rocksdb(store: StoreDir) -> bool:
    """True when the broker reads RocksDB consume queues (units_per_file 0: paged by batch, see replay.paging)."""
    return store.queue_kind == ROCKSDB or (store.queue_kind is None
                                           and store.conf.storeType.lower() == DEFAULT_ROCKSDB.lower())


def _dump_queue_ids(store: StoreDir) -> list[tuple[str, int]]:
    """The dump's own queues; InputError naming consumequeue/ when it cannot be read (a RocksDB database that does
    not open), never an empty list in its place."""
    try:
        return store.queue_ids()
    except StoreFormatError as e:
        raise InputError(f"{e}; pass --queues rebuilt to pull job 1's rebuild instead") from None


def _check_queues_found(spark: SparkSession, inputs: Inputs, topics: set[str], found: set[str],
                        summary: Summary) -> None:
    """Say which pulled topics have messages in the commit log but no queue in the dump: InputError when that is
    every topic with messages (the run would replay nothing), a note otherwise."""
    from pyspark.sql import functions as F

    missing = sorted(topics - found)
    if not missing:
        return
    counts = {r["topic"]: r["count"] for r in read_dump(spark, inputs.warehouse, "messages", inputs.dump_id)
              .where(F.col("topic").isin(missing)).groupBy("topic").count().collect()}
    lost = {t: n for t, n in counts.items() if n}
    if not lost:
        return
    cq_dir = os.path.join(inputs.store.root, "consumequeue")
    what = ", ".join(f"{t} ({n:,} messages)" for t, n in sorted(lost.items()))
    kind = "a RocksDB database" if inputs.store.queue_kind == ROCKSDB else "consume queue files"
    if not found:
        raise InputError(f"{cq_dir} ({kind}) holds no queue of the subscribed topics {what}: nothing would be "
                         f"pulled; pass --queues rebuilt to pull job 1's rebuild")
    summary.notes.append(f"{cq_dir} ({kind}) holds no queue of {what}: nothing pulled for "
                         f"{'it' if len(lost) == 1 else 'them'} (--queues rebuilt pulls job 1's rebuild)")
    log.warning("no dump queue for topics with messages: %s", what)


def _starts(inputs: Inputs, plans: list[Plan], summary: Summary) -> dict[str, int]:
    """{"<plan>:<queue id>": start offset} for --from committed (absent: offset 0)."""
    if inputs.start != COMMITTED:
        return {}
    try:
        offsets = committed_offsets(inputs.store.config("consumerOffset"))
    except StoreFormatError as e:
        raise InputError(f"{e}: the committed offsets of --from committed cannot be read") from None
    starts = {f"{p.index}:{qid}": off for p in plans for (g, t, qid), off in offsets.items()
              if p.ok and (g, t) == (p.group, p.topic)}
    missing = sorted({f"({p.group}, {p.topic})" for p in plans if p.ok} -
                     {f"({g}, {t})" for (g, t, _q) in offsets})
    if missing:
        summary.notes.append(f"no committed offset in consumerOffset.json for {', '.join(missing)}: "
                             f"those queues were pulled from the earliest offset")
    return starts


def _file_targets(spark: SparkSession, warehouse: str, dump_id: str, copy: str | None) -> dict:
    """{table: delta_files.FileTarget} of the tables the replay tasks write themselves (pyarrow Parquet, one Delta
    commit per table by the driver), their rows' `copy` given; empty for a warehouse delta_files cannot write
    (neither local nor s3a://): then the replay's output is cached and each table written through Spark."""
    try:
        return {name: file_target(spark, warehouse, name, dump_id, copy) for name in WRITTEN}
    except ValueError as e:
        log.info("tables written through Spark: %s", e)
        return {}


def _codes_rows() -> list[dict]:
    """The decision code table (`filterlib.vocabulary.DECISION_CODES`) as decision_codes rows."""
    return codes_table().to_pylist()


@dataclass
class Planned:
    """The run's subscriptions as plans (answers included), and its what-if candidates after them."""

    plans: list[Plan]
    candidates: list[Plan]
    compared: dict[int, int]
    """{candidate's index: the index of the subscription it stands in for}."""
    registry: RegistryLoad
    now: int
    carried: Carried | None = None
    """Over a broker's history continued: the plans placed in it (`filterlib.replay.timeline`); None otherwise."""
    previous: Previous | None = None
    """The run a history's run continues (its tables' versions are what this run appends to)."""
    history: bool = False
    """Whether the dump is a broker's history (its runs leave pull_positions for the next to continue from)."""

    def on_top_of(self, table: str) -> int | None:
        """The version a continuing run appends `table`'s rows to (None: the run replaces the dump's rows)."""
        return None if self.previous is None else self.previous.versions[table]

    @property
    def all(self) -> list[Plan]:
        return self.plans + self.candidates

    @property
    def current(self) -> int:
        """The first what-if candidate's index: every index below it is one of the run's subscriptions."""
        return min((c.index for c in self.candidates), default=max((p.index for p in self.plans), default=-1) + 1)


def _previous(spark: SparkSession, inputs: Inputs, summary: Summary) -> Previous | None:
    """Job 2's last complete run over this history, to continue from (`jobs.history.last_pull_run`); None without
    one, or with --restart, or when job 1 began the history again since (--replace): then it is replayed whole."""
    if inputs.restart:
        return None
    previous = last_pull_run(spark, inputs.warehouse, inputs.dump_id, PROG)
    if previous is not None and previous.begun_again:
        summary.notes.append(f"job 1 began the history of {inputs.dump_id} again (--replace) after job 2's last "
                             f"run: replayed whole from the {inputs.start} offset")
        return None
    return previous


def _copy_name(inputs: Inputs) -> str:
    """The run's copy as the tables name it: its store (job 1's copies.store)."""
    return inputs.store.name


def _row_copy(inputs: Inputs, planned: Planned) -> str | None:
    """The `copy` column of the rows the run writes (tables.COPY): its copy over a broker's history, else null."""
    return _copy_name(inputs) if planned.history else None


def _continue(spark: SparkSession, inputs: Inputs, planned: Planned, previous: Previous, summary: Summary) -> bool:
    """Place the run's plans in the history (`timeline.carry`); False when nothing is new since the previous run
    (job 1 appended no copy since and every subscription is the same): then nothing is replayed or written."""
    if planned.candidates or inputs.refused:
        raise InputError("--what-if compares a candidate with a subscription over a whole replay; on a broker's "
                         "history that continues, run it with --restart (or on one copy's dump)")
    carried = carry(planned.plans, previous.stats, previous.positions)
    planned.plans, planned.carried = carried.plans, carried
    now = {t: v for t in JOB1_TABLES if (v := pinned_version(spark, inputs.warehouse, t, inputs.dump_id,
                                                             quiet=True)) is not None}
    if carried.unchanged and now == previous.inputs:
        summary.notes.append(f"nothing new since job 2's last run over the history of {inputs.dump_id} (job 1 "
                             f"appended no copy since, and every subscription is the same): nothing written")
        summary.plans = planned.plans
        return False
    ended = [r for r in carried.ended if r.get("until_copy") is None]
    summary.notes.append(
        f"history {inputs.dump_id} continued from job 2's last run: {len(carried.continued)} subscriptions "
        f"continue where they stopped, {len(planned.plans) - len(carried.continued)} new "
        f"(from the {inputs.start} offset where their group has no position), {len(ended)} ended at this copy"
        + (": " + "; ".join(f"{r['consumer_group']} on {r['topic']} {r['subscription_type']} "
                            f"{r['expression']!r}" for r in ended) if ended else ""))
    return True


def _master(store: StoreDir, dump_id: str) -> str:
    """The broker's name; InputError where the broker.conf says it is a slave, whose queues no client's route
    lists for pulling (its master's copy is the one to replay)."""
    conf = store.conf
    if conf.brokerId != 0 or conf.brokerRole.upper() == "SLAVE":
        raise InputError(f"dump {dump_id!r} is a slave's copy (brokerId {conf.brokerId}, brokerRole "
                         f"{conf.brokerRole}) of {conf.brokerName or 'its broker'}: replay its master's copy in "
                         f"--cluster")
    return conf.brokerName or dump_id


def _cluster(spark: SparkSession, inputs: Inputs) -> list[ClusterBroker]:
    """The other master brokers of `--cluster`, from the stores and broker.confs job 1 recorded for them."""
    if not inputs.cluster:
        return []
    from pyspark.sql import functions as F

    _master(inputs.store, inputs.dump_id)
    others = [d for d in inputs.cluster if d != inputs.dump_id]
    rows = {r.dump_id: r for r in spark.read.format("delta").load(table_path(inputs.warehouse, "dumps"))
            .where(F.col("dump_id").isin(others)).select("dump_id", "store", "broker_conf").collect()}
    missing = [d for d in others if d not in rows]
    if missing:
        raise InputError(f"--cluster: {', '.join(missing)} not recorded in {table_path(inputs.warehouse, 'dumps')}; "
                         f"run python -m jobs.build_queues on each broker's copy first")
    out = []
    for d in others:
        store = open_store(rows[d].store, rows[d].broker_conf)
        try:
            found = tuple(store.queue_ids()) if store.queue_kind is not None else ()
        except StoreFormatError:
            found = ()
        out.append(ClusterBroker(d, _master(store, d), store.config("topics"), found))
    names = [b.name for b in out] + [inputs.store.conf.brokerName or inputs.dump_id]
    if len(set(names)) != len(names):
        raise InputError(f"--cluster: two dumps name the same broker ({', '.join(sorted(names))}): list one copy "
                         f"per master broker")
    return out


def _plan(inputs: Inputs, summary: Summary, cluster: list[ClusterBroker] | None = None) -> Planned:
    """Subscriptions (the file's, then the registry's), their pre-read answers, and the what-if candidates; what
    the summary should say about them."""
    conf = inputs.store.conf
    reg = _registry(inputs, as_job1=inputs.queues == REBUILT)
    summary.notes += reg.issues
    unread: list[str] = []
    lite_unknown = "a Lite Topic subscription cannot be told apart: every subscription is replayed as an ordinary one"
    topics = config_or_note(inputs.store, "topics", lite_unknown, unread)
    subs, lite = not_replayed(dump_subscriptions(inputs.subscriptions, reg.registry), topics,
                              config_or_note(inputs.store, "subscriptionGroup", lite_unknown, unread))
    summary.notes += list(dict.fromkeys(unread))
    summary.notes += lite
    try:
        groups, _ = split_groups([s for s, _ in subs])
    except ValueError as e:
        raise InputError(f"{inputs.subscriptions_path}: {e}") from None
    as_members = {g.name for g in groups}
    subs = [(s, source) for s, source in subs if s.group not in as_members]
    twice = sorted({f"({s.group}, {s.topic})" for s, _ in subs
                    if sum((o.group, o.topic) == (s.group, s.topic) for o, _ in subs) > 1})
    if twice:
        summary.notes.append(f"several subscriptions of one group to one topic, each replayed on its own (the "
                             f"broker keeps the last heartbeat's; name each entry's client_id to replay the group "
                             f"as its members): {', '.join(twice)}")
    now = now_ms()
    plans = plan_all(subs, reg.registry, conf.enablePropertyFilter, conf.filterSupportRetry, now)
    plans += _member_plans(inputs, groups, topics, reg, now, len(plans), summary, cluster or [])
    summary.plans = plans
    summary.refused = inputs.refused
    if not conf.enablePropertyFilter and any(not Subscription(p.group, p.topic, p.type).is_tag for p in plans):
        summary.notes.append("enablePropertyFilter is off (the broker's default): every SQL92 subscription is "
                             "refused with SYSTEM_ERROR; pass the broker.conf that has it on if the broker did")
    try:
        candidates = what_if_plans(inputs.what_if, plans)
    except ValueError as e:
        raise InputError(str(e)) from None
    cand_plans = plan_all([(c, WHAT_IF) for c, _ in candidates], reg.registry, conf.enablePropertyFilter,
                          conf.filterSupportRetry, now, start=len(plans))
    compared = {cp.index: cur for cp, (_, cur) in zip(cand_plans, candidates, strict=True)}
    log.info("subscriptions: %d (%d from the file, %d from consumerFilter.json), %d answered OK", len(plans),
             sum(p.source == "subscriptions" for p in plans), sum(p.source != "subscriptions" for p in plans),
             sum(p.ok for p in plans + cand_plans))
    return Planned(plans, cand_plans, compared, reg, now)


def _member_plans(inputs: Inputs, groups: list, topics: dict | None, reg: RegistryLoad, now: int, start: int,
                  summary: Summary, cluster: list[ClusterBroker]) -> list[Plan]:
    """The plans of the groups replayed as their members: every (possibility, member) of each topic over the
    queues the group's allocation (over every broker of `cluster` too) gives it on this broker; the summary says
    whose subscription the broker keeps."""
    if not groups:
        return []
    try:
        found = inputs.store.queue_ids() if inputs.store.queue_kind is not None else []
    except StoreFormatError:
        found = []
    broker = _master(inputs.store, inputs.dump_id) if cluster else inputs.store.conf.brokerName or inputs.dump_id
    if cluster:
        summary.notes.append(f"cluster: the members' queues are allocated over {broker} (this dump) and "
                             f"{', '.join(f'{b.name} (dump {b.dump_id})' for b in cluster)}")
    pulls = []
    for g in groups:
        for topic in g.topics:
            ids = topic_queue_ids(topics, (q for t, q in found if t == topic), topic)
            if not ids:
                summary.notes.append(f"{g.name} on {topic}: no queue of the topic in topics.json or the store; "
                                     f"nothing allocated")
                continue
            pulls += member_pulls(g, topic, broker, ids, (q for b in cluster for q in b.queues(topic)))
            summary.notes.append(kept_words(g, topic))
    conf = inputs.store.conf
    return plan_members(pulls, reg.registry, conf.enablePropertyFilter, conf.filterSupportRetry, now, start)


def _context(spark: SparkSession, inputs: Inputs, planned: Planned, summary: Summary) -> PullContext:
    """What every replay task needs: the registry (job 1's when the rebuilt queues are pulled), the plans, the
    start offsets, each plan's byte in its topic's matrix rows, the release's paging and where to write."""
    conf = inputs.store.conf
    reg = planned.registry
    if inputs.queues == DUMP and summary.queues_source == REBUILT:
        reg = _registry(inputs, as_job1=True)
    spec = registry_spec(reg.registry)
    starts = _starts(inputs, planned.all, summary)
    carried = planned.carried
    if carried is not None:  # a history continued: each pull where its line stands, the bytes the history gave
        starts.update({f"{i}:{q}": off for (i, q), off in carried.starts.items()})
        positions, widths = carried.positions, {t: (w, 0) for t, w in carried.widths.items()}
    else:
        positions, widths = subscription_positions(planned.all, len(planned.plans))
    plan_json = tuple(p.to_json() for p in planned.all)
    key = hashlib.sha256(json.dumps([spec, plan_json, starts, planned.now], sort_keys=True,
                                    default=str).encode()).hexdigest()
    return PullContext(key, spec, plan_json, starts, conf.enablePropertyFilter, conf.filterSupportRetry,
                       planned.now, positions={str(k): v for k, v in positions.items()}, widths=widths,
                       rocksdb_to_queue_end=brokerversion.rocksdb_pull_to_queue_end(
                           inputs.broker_version or brokerversion.DEFAULT, conf.iteratorWhenUseRocksdbConsumeQueue),
                       current=planned.current,
                       targets=_file_targets(spark, inputs.warehouse, inputs.dump_id, _row_copy(inputs, planned)),
                       continued=frozenset(f"{i}:{q}" for i, q in (carried.bases if carried else {})))


def _replay(units: DataFrame, messages: MessageFiles, ctx: PullContext, decisions: Any = None,
            by_verdicts: bool = True, packed: PackedQueues | None = None) -> DataFrame:
    """The one replay, in two stages: where the messages are read, each one's verdicts under its topic's filters
    (`pull_tasks.message_files_side` or `message_side`, a few bits a filter); then a task per piece of a queue
    (whole consumequeue files; a queue is one piece when short or RocksDB) pages every subscription of its topic at
    once over its units and those bytes (`pull_tasks.OUT_SCHEMA` rows): no properties are joined or shuffled.
    `by_verdicts` False joins the properties instead (for units that point at messages of another topic). Tasks
    write the matrix and details as Parquet files themselves where they can (`ctx.targets`) and hand back the
    files, the pulls and a count row per subscription; elsewhere the compact output itself comes back. Persisted:
    the counts, the pulls and the tables all read it, and nothing is replayed twice or read back to count.
    `decisions`: an accumulator of the decisions made, for the progress lines.
    `packed`: the units packed per piece; where the tasks read the messages' files too, both sides come to each
    piece as a few rows of bytes (`jobs.piece_tasks`), not a row per unit joined and grouped by Spark."""
    from pyspark import StorageLevel

    if by_verdicts and packed is not None and messages.source is not None:
        side = _path_tasks(messages.df.sparkSession, messages.source).mapInArrow(
            packed_message_files(ctx, messages.source, messages.low, packed.where), packed_ddl())
        out = packed.df.unionByName(side).groupBy("topic", "queue_id", "piece").applyInArrow(
            replay_packed(ctx, decisions), out_ddl())
        return out.persist(StorageLevel.MEMORY_AND_DISK)
    if by_verdicts and messages.source is not None:
        side = _path_tasks(messages.df.sparkSession, messages.source).mapInArrow(
            message_files_side(ctx, messages.source, messages.low), verdict_side_ddl())
    elif by_verdicts:
        side = messages.df.select(*MESSAGE_COLUMNS).mapInArrow(message_side(ctx), verdict_side_ddl())
    else:
        side = messages.df.select("commit_log_offset", *MESSAGE_SIDE)
    joined = units.join(side, "commit_log_offset", "left")
    out = joined.groupBy("topic", "queue_id", "piece").applyInArrow(replay_queues(ctx, decisions), out_ddl())
    return out.persist(StorageLevel.MEMORY_AND_DISK)


FILE_TASK_BYTES = 2 << 20
"""Files a replay's tasks read themselves share a task up to this many bytes (`jobs.spark.task_count`): a large
dump's files, each a commitlog range's rows (a 256 MiB range: messages ~14 MB, consume_queue ~3.3 MB of Parquet),
keep a task each; a small store's, kilobytes each, share, where a task's Python round trip cost more than its
reading."""


def _path_tasks(spark: SparkSession, files: FileSource) -> DataFrame:
    """A `path` row per file, without a shuffle: a task per file, or files far smaller than FILE_TASK_BYTES
    together (where the log gave their sizes)."""
    paths = files.paths
    slices = (task_count(files.sizes, spark.sparkContext.defaultParallelism, FILE_TASK_BYTES)
              if len(files.sizes) == len(paths) else max(1, len(paths)))
    return spark.createDataFrame(spark.sparkContext.parallelize([(p,) for p in paths], slices), "path string")


def _found_elsewhere(spark: SparkSession, msgs: MessageFiles, offsets: list[int]) -> int:
    """How many of `offsets` (units a packed replay found no message for in their own queue's pieces) are a
    message's offset after all: 0 means each points at no message, as the joined replay would have found too."""
    if not offsets:
        return 0
    log.info("%d units found no message among their queue's: looking them up in the messages", len(offsets))
    wanted = spark.createDataFrame([(o,) for o in sorted(set(offsets))], "commit_log_offset long")
    return wanted.join(msgs.df.select("commit_log_offset"), "commit_log_offset", "left_semi").count()


def _count(spark: SparkSession, inputs: Inputs, planned: Planned, ctx: PullContext, out: DataFrame,
           summary: Summary, decisions: Any) -> tuple[list, dict[tuple[int, int, int], int]]:
    """Run the replay, keeping only the small rows on the driver (counts, pieces, written files): the summary's
    statistics and totals from them. Returns the FILE rows, and the number over its queue of each piece's first
    pull of each subscription (`stats.pull_firsts`)."""
    from pyspark.sql import functions as F

    mine = F.col("subscription_index") < planned.current
    spark.sparkContext.setJobDescription(f"{PROG} {inputs.dump_id}: replay the pulls of {summary.queues} queues"
                                         f"{' and write their files' if ctx.targets else ''}")
    with task_writes("pull_decisions", table_path(inputs.warehouse, "pull_decisions"), inputs.dump_id), \
            progress(spark, log, f"replay {summary.queues} queues",
                     counted={"decisions": decisions}):
        small = out.where(((F.col("kind") == COUNT) & mine) | F.col("kind").isin(FILE, PIECE, UNRESOLVED)).select(
            "kind", "topic", "queue_id", "piece", "subscription_index", "counts", "next_begin_offset", "file").collect()
    pieces = [r.counts for r in small if r.kind == PIECE]
    summary.queue_ends = {(r.topic, r.queue_id): r.counts[2] for r in small
                          if r.kind == PIECE and len(r.counts) > 2 and r.counts[2] >= 0}
    summary.pieces = len(pieces)
    summary.piece_partitions = len({p[1] for p in pieces})
    summary.largest_piece = max((p[0] for p in pieces), default=0)
    summary.foreign_units = sum(p[3] for p in pieces if len(p) > 3)
    summary.unresolved = [o for r in small if r.kind == UNRESOLVED for o in r.counts]
    counts = sum_counts((r.subscription_index, r.counts) for r in small if r.kind == COUNT)
    summary.positions = pull_positions((r.subscription_index, r.queue_id, r.next_begin_offset, r.counts)
                                       for r in small if r.kind == COUNT)
    positions = {int(k): v for k, v in ctx.positions.items()}
    summary.stats = stats_rows(planned.plans, counts, positions, inputs.dump_id, inputs.start,
                               inputs.store.conf.maxErrorRateOfBloomFilter)
    copy = _copy_name(inputs)
    for row in summary.stats:
        row.update(since_copy=copy, until_copy=None)
    if planned.carried is not None:
        summary.stats = [continued(planned.carried.continued[r["subscription_index"]], r)
                         if r["subscription_index"] in planned.carried.continued else r for r in summary.stats]
        summary.ended = [{**r, "dump_id": inputs.dump_id, "until_copy": r.get("until_copy") or copy}
                         for r in planned.carried.ended]
    summary.decisions, summary.delivered, summary.pulls = totals(counts)
    log.info("decided: %d units, %d delivered, %d pulls; %d queues replayed in %d pieces (the largest %d units) "
             "over %d tasks", summary.decisions, summary.delivered, summary.pulls, summary.queues, summary.pieces,
             summary.largest_piece, summary.piece_partitions)
    bases = planned.carried.bases if planned.carried is not None else {}
    firsts = pull_firsts(((r.subscription_index, r.queue_id, r.piece, r.counts) for r in small if r.kind == COUNT),
                         bases)
    return [r for r in small if r.kind == FILE], firsts


def _write(spark: SparkSession, inputs: Inputs, planned: Planned, ctx: PullContext, out: DataFrame, files: list,
           firsts: dict[tuple[int, int, int], int], summary: Summary) -> None:
    """Every table of the run but what_if: the tasks' own files committed (or the compact output written through
    Spark), then pulls numbered over each queue (`firsts`, each piece's first), decision_codes and group_stats."""
    from pyspark.sql import functions as F

    sc, wh, dump = spark.sparkContext, inputs.warehouse, inputs.dump_id
    dump_id = F.lit(dump).alias("dump_id")
    mine = F.col("subscription_index") < planned.current
    copy = _row_copy(inputs, planned)
    out = out.withColumn(tables.COPY.name, F.lit(copy).cast("string"))  # the Spark writes' rows: the tasks' have it
    if ctx.targets:
        by_uri = {t.table_uri: name for name, t in ctx.targets.items()}
        parts: dict[str, list[dict]] = {name: [] for name in ctx.targets}
        for r in files:
            d = json.loads(r.file)
            parts[by_uri[d["table_uri"]]].append(d)
        for name, (table, stats) in WRITTEN.items():
            sc.setJobDescription(f"{PROG} {dump}: commit {name} ({len(parts[name])} files)")
            commit_dump(spark, wh, name, dump, parts[name], table.arrow(), stats, planned.on_top_of(name))
            summary.tables[name] = table_path(wh, name)
    else:
        sc.setJobDescription(f"{PROG} {dump}: write pull_decisions (the decision matrix)")
        matrix_df = out.where((F.col("kind") == MATRIX) & F.col("scanned")).select(dump_id, *MATRIX_COLUMNS)
        summary.tables["pull_decisions"] = append_dump(matrix_df, wh, "pull_decisions", dump,
                                                       planned.on_top_of("pull_decisions"), MATRIX_STATS)
        sc.setJobDescription(f"{PROG} {dump}: write decision_details")
        details_df = out.where((F.col("kind") == DETAIL) & mine).select(dump_id, *DETAIL_COLUMNS)
        summary.tables["decision_details"] = append_dump(details_df, wh, "decision_details", dump,
                                                         planned.on_top_of("decision_details"))
    sc.setJobDescription(f"{PROG} {dump}: write pulls")
    if ctx.targets:  # the tasks number the pulls and write the files, the commit lists the partition from the log
        schema = tables.PULLS.arrow()
        pulls = out.where((F.col("kind") == PULL) & mine).select("piece", *(c for c in PULL_COLUMNS
                                                                          if c != "consumer_group"))
        parts = frame_parts(pulls, file_target(spark, wh, "pulls", dump, copy), schema, schema.names,
                            parquet_codec(spark), pull_numbering(firsts, planned.all))
        commit_dump(spark, wh, "pulls", dump, parts, schema, schema.names, planned.on_top_of("pulls"))
        summary.tables["pulls"] = table_path(wh, "pulls")
    else:  # numbered the same way, by a mapInArrow, then written by Spark
        body = tables.PULLS.arrow(drop=["dump_id"])
        number = pull_numbering(firsts, planned.all)

        def numbered(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
            for batch in batches:
                yield from number(batch).select(body.names).cast(body).to_batches()

        pulls = (out.where((F.col("kind") == PULL) & mine)
                 .select("piece", *(c for c in PULL_COLUMNS if c != "consumer_group"))
                 .mapInArrow(numbered, ", ".join(f"`{f.name}` {tables.sql_type(f.type)}" for f in body))
                 .select(dump_id, *PULL_COLUMNS))
        summary.tables["pulls"] = append_dump(pulls, wh, "pulls", dump, planned.on_top_of("pulls"))
    sc.setJobDescription(f"{PROG} {dump}: write decision_codes and group_stats")
    summary.tables["decision_codes"] = replace_rows(spark, wh, tables.DECISION_CODES, dump, _codes_rows())
    summary.tables["group_stats"] = replace_rows(spark, wh, tables.GROUP_STATS, dump, summary.stats + summary.ended)
    if planned.history:
        sc.setJobDescription(f"{PROG} {dump}: write pull_positions")
        rows = _position_rows(planned, summary, _copy_name(inputs))
        summary.tables["pull_positions"] = replace_rows(spark, wh, tables.PULL_POSITIONS, dump, rows)


def _position_rows(planned: Planned, summary: Summary, copy: str) -> list[dict]:
    """The pull_positions rows the run leaves: per (subscription, queue) its last pull's next begin offset and
    its pulls so far (`summary.positions`, from the replay's COUNT rows: no Spark job); a member that never pulls
    its queue stands at the queue's end; positions of lines the run did not have stay as they were
    (`timeline.Carried.kept_positions`)."""
    carried = planned.carried
    bases = carried.bases if carried is not None else {}
    by_index = {p.index: p for p in planned.plans}
    rows = []

    def row(p: Plan, queue_id: int, next_offset: int, pulls: int) -> dict:
        return {"dump_id": summary.dump_id, "consumer_group": p.group, "topic": p.topic,
                "subscription_index": p.index, "member": p.member, "kept_by": p.kept_by, "queue_id": queue_id,
                "next_offset": next_offset, "pulls": pulls + bases.get((p.index, queue_id), 0), "copy": copy}

    for (index, queue_id), (next_offset, pulls) in sorted(summary.positions.items()):
        rows.append(row(by_index[index], queue_id, next_offset, pulls))
    for p in planned.plans:
        if p.answer == NOT_SUBSCRIBED:
            rows += [row(p, q, end, 0) for (t, q), end in sorted(summary.queue_ends.items())
                     if t == p.topic and p.pulls(q)]
    if carried is not None:
        rows += [{**r, "dump_id": summary.dump_id} for r in carried.kept_positions]
    return rows


def _compare(spark: SparkSession, inputs: Inputs, planned: Planned, ctx: PullContext, out: DataFrame,
             messages: DataFrame, summary: Summary) -> None:
    """The what-if candidates against the subscriptions they stand in for, from the same replay's matrix rows: the
    what_if table (one row per changed unit, `filterlib.replay.whatif.changes` in the tasks) and, per candidate,
    counts by queue and a few examples (`whatif.summarize`)."""
    from pyspark.sql import functions as F

    spark.sparkContext.setJobDescription(f"{PROG} {inputs.dump_id}: compare the what-if candidates")
    positions = {int(k): v for k, v in ctx.positions.items()}
    compared = whatif.comparisons(planned.all, planned.compared, positions, ctx.widths)
    both = F.expr("concat(decisions, coalesce(what_if_decisions, X''))").alias("decisions")
    rows = out.where(F.col("kind") == MATRIX).select("topic", "queue_id", "queue_offset", "commit_log_offset", both)
    changed = rows.mapInArrow(what_if_changes(compared), spark_ddl(whatif.CHANGES_SCHEMA))
    ids = messages.select("commit_log_offset", F.coalesce("uniq_key", "offset_msg_id").alias("msg_id"), "tags")
    table = changed.join(ids, "commit_log_offset", "left").select(F.lit(inputs.dump_id).alias("dump_id"),
                                                                   *WHAT_IF_COLUMNS)
    summary.tables["what_if"] = replace_dump(table, inputs.warehouse, "what_if", inputs.dump_id)
    saved = read_dump(spark, inputs.warehouse, "what_if", inputs.dump_id, latest=True)
    counts = saved.groupBy("consumer_group", "topic", "candidate_expression", "queue_id", "change").count().collect()
    firsts = saved.orderBy("topic", "queue_id", "queue_offset").limit(500).collect()
    summary.what_if, notes = whatif.summarize(planned.all, planned.compared, [r.asDict() for r in counts],
                                              [r.asDict() for r in firsts])
    summary.notes += notes


def run(spark: SparkSession, inputs: Inputs) -> Summary:
    """Replay the pulls of one dump with an existing session; returns the summary. The steps: read the inputs,
    plan the subscriptions, find the queues, replay once, count, write, compare the what-if candidates, and name
    the run's tables in the runs table last."""
    t0 = time.monotonic()
    apply_writer_conf(spark, inputs.defaults)
    inputs = resolve_store(spark, inputs)
    summary = Summary(inputs.dump_id, start=inputs.start, broker_version=inputs.broker_version,
                      version_line=inputs.version_line)
    summary.notes += inputs.store.issues
    history = is_history(spark, inputs.warehouse, inputs.dump_id)
    if inputs.queues is None:
        inputs = replace(inputs, queues=REBUILT if history else DUMP)
    messages, body_checks, source = _messages(spark, inputs)
    planned = _plan(inputs, summary, _cluster(spark, inputs))
    planned.history = history
    planned.previous = _previous(spark, inputs, summary) if history else None
    if planned.previous is not None and not _continue(spark, inputs, planned, planned.previous, summary):
        spark.sparkContext.setJobDescription(None)
        summary.seconds = time.monotonic() - t0
        return summary
    topics = {p.topic for p in planned.all if p.ok or p.answer == NOT_SUBSCRIBED}
    units, least, packed = _queue_units(spark, inputs, topics, summary, planned.carried)
    msgs = _message_files(messages, body_checks, source, units, planned.carried, least)
    ctx = _context(spark, inputs, planned, summary)
    log.info("replay: %d queues of %d topics from the %s", summary.queues, len(topics), summary.queues_source)
    decisions = spark.sparkContext.accumulator(0)
    out = _replay(units, msgs, ctx, decisions, packed=packed)
    files, firsts = _count(spark, inputs, planned, ctx, out, summary, decisions)
    summary.packed = packed is not None and msgs.source is not None
    elsewhere = _found_elsewhere(spark, msgs, summary.unresolved) if summary.packed else 0
    if elsewhere:  # rare: a queue points at a message of another queue, which the packed pieces did not hold
        summary.notes.append(f"{elsewhere:,} units point at a message of another queue: replayed with the units "
                             f"joined to the messages")
        out.unpersist()
        decisions = spark.sparkContext.accumulator(0)
        out = _replay(units, msgs, ctx, decisions)
        files, firsts = _count(spark, inputs, planned, ctx, out, summary, decisions)
        summary.packed = False
    if summary.foreign_units:  # rare: verdicts are per the message's topic, so join these units' properties
        summary.notes.append(f"{summary.foreign_units:,} units point at messages of another topic: replayed with "
                             f"the messages' properties joined to the units")
        out.unpersist()
        decisions = spark.sparkContext.accumulator(0)
        foreign = summary.foreign_units
        out = _replay(units, msgs, ctx, decisions, by_verdicts=False)
        files, firsts = _count(spark, inputs, planned, ctx, out, summary, decisions)
        summary.foreign_units = foreign
    with progress(spark, log, "write the tables"):
        _write(spark, inputs, planned, ctx, out, files, firsts, summary)
    if planned.candidates:
        _compare(spark, inputs, planned, ctx, out, msgs.df, summary)
    out.unpersist()
    if body_checks is not None:
        body_checks.unpersist()
    record_run(spark, inputs.warehouse, PROG, inputs.dump_id, summary.tables, JOB1_TABLES)  # last: readers move on
    spark.sparkContext.setJobDescription(None)
    summary.seconds = time.monotonic() - t0
    return summary


def main(argv: list[str] | None = None, spark: SparkSession | None = None) -> int:
    """Parse, validate, run, print the summary; bad input is one line on stderr and exit code 2."""
    args = parser().parse_args(argv)
    return run_main(PROG, lambda: validate(args), lambda i: f"{PROG} {i.dump_id or ''}".strip(), lambda i: i.defaults,
                    args.master, run, spark, break_lock=args.break_lock, resolve=resolve_store)


if __name__ == "__main__":
    sys.exit(main())
