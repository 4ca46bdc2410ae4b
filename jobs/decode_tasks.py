"""Job 1's Spark tasks: one byte range of one commitlog file per task, decoded by filterlib's self-synchronising
RangeScan. No filter rule lives here: the tasks only hand ranges to filterlib and batches back to Spark.

`decode_ranges` decodes each range ONCE and dispatches the records in the same task (`filterlib.rebuild.dispatch`: the
filters of a topic evaluated set-at-a-time over the batch). One row per record carries its consume-queue unit
(`unit` says whether it has one); multi-dispatch LMQ units are rows of their own, and the split's SplitReport is
the range's last row, as JSON (every other column null): the driver collects only those, and keeps or drops each
file's rows by them. The messages rows (every field, why the client cannot decode the body, the body bytes only
when the run writes them) go one of two ways. With a `FileTarget` (a local or s3a warehouse) the task writes them
itself as one Parquet file per range (`jobs.delta_files.write_part`, pyarrow: no JVM row hop) and its report row
carries the file's descriptor, which the driver commits only if the file's rows are all valid; the range's units
wait in the task until that file is written. With a consume_queue `FileTarget` too, the task writes its units the
same way (one file per range, sorted by queue) and hands Spark only the report row, which counts them: the units
never cross into the JVM. Otherwise each record's row carries its messages row (`message`) for Spark's writer.
Without bodies only the compressed ones are copied out of the read buffer (their client decode is checked here,
`body_error`), and then dropped.

And the tasks of the two options: `export_queues` (`--export-cq`: one queue's sorted units streamed into its
consumequeue and consumequeue_ext files by `filterlib.rebuild.export.QueueWriter`), `dump_queue_units` and `diff_units`
(`--verify`: the dump's own queues read as the pull reads them, and joined pairs turned into queue_diff rows by
`filterlib.rebuild.verify`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.brokerversion import DEFAULT, RecoveryRules, recovery_rules
from filterlib.rebuild.dispatch import CQ_SCHEMA, Dispatcher, registry_from_spec
from filterlib.rebuild.export import QueueGap, QueueWriter
from filterlib.rebuild.verify import diff_batch, read_dump_queue
from filterlib.store import fs as sfs
from filterlib.store.commitlog import COMPRESSED_FLAG
from filterlib.store.compression import body_errors
from filterlib.store.properties_text import MAP_TYPE, map_column
from filterlib.store.scan import COMPRESSED_ONLY, RangeScan, ScanOptions, SplitReport
from filterlib.store.storedir import StoreDir
from filterlib.tables import CONSUME_QUEUE, COPY, MESSAGES
from jobs.delta_files import FileTarget, key_summary, write_part

TASK_DDL = "path string, file_base long, file_size long, range_start long, range_end long, anchor long"
MESSAGES_SCHEMA = MESSAGES.arrow(drop=("dump_id", COPY.name))
"""The decoded record (`filterlib.store.scan.SCHEMA`), and why the client's decode of its body fails (null where
it decodes): the messages table without dump_id and copy (the run's, `FileTarget.copy`)."""
MESSAGES_TABLE = MESSAGES.arrow()
MESSAGES_STATS = ["dump_id", "commit_log_offset", "topic", "queue_id", "queue_offset", "store_timestamp"]
"""The columns Delta keeps file statistics for (what lookups filter on; see delta_io.replace_dump)."""
ID_BLOOM_COLUMNS = ("uniq_key", "offset_msg_id")
"""The ids a reader looks one message up by (explain's --msg-id and --offset-msg-id): each row group (a decode
batch) carries a Parquet bloom filter of them, which Spark's reader tests before reading the group (ids are random
across a file: min/max statistics would skip nothing)."""
ID_BLOOM = {"ndv": ScanOptions().batch_bytes // 512, "fpp": 0.1}
"""Each id filter sized for a decode batch of records of 512 bytes or more (64 Ki ids in a batch of 32 MiB; a
batch of smaller records fills it past the 0.1 false-positive rate, which only skips fewer row groups). Measured
with 16 MiB batches (16 KiB a column for the bench's 22 k-record batches): its messages files without bodies 4 %
larger, job 1 at 4 GiB as fast (A/B 0.98); pyarrow's default of 1 Mi ids made job 1 1.6x slower."""
MESSAGES_WRITER = {"write_statistics": MESSAGES_STATS,
                   "use_dictionary": ["dump_id", "topic", "born_host", "store_host", "tags", "magic_code", "queue_id",
                                      "flag", "sys_flag", "reconsume_times", "store_size", "body_size", COPY.name],
                   "bloom_filter_options": {c: ID_BLOOM for c in ID_BLOOM_COLUMNS}}
"""pyarrow's writer settings for the messages files: Parquet statistics only where lookups filter, dictionaries
only for the few-valued columns (not ids, offsets, times or the properties text, which holds each message's
UNIQ_KEY), bloom filters of the ids. Measured on one core over the bench dump's 360,818 rows without bodies: 1.63 us
a row with pyarrow's defaults, 0.96 us with these, and a smaller file (27.3 MiB against 33.0 with snappy), when
the properties were still a map and before the bloom filters."""
LEGACY_MESSAGES_TABLE = pa.schema([pa.field(f.name, MAP_TYPE) if f.name == "properties" else f
                                   for f in MESSAGES_TABLE])
"""The messages table of a warehouse written before the properties were text: its properties a map, which job 1
keeps writing there (a Delta column keeps its type)."""
NO_BODIES_WRITER = {**MESSAGES_WRITER, "write_statistics": [*MESSAGES_STATS, "body"]}
"""The writer settings without --bodies: the body column (all null) keeps its Parquet statistics too, free for a
null column, so job 2 sees from the footers alone that no body is held (`delta_files.all_null`)."""
QUEUE_TABLE = CONSUME_QUEUE.arrow()
QUEUE_KEY = ["topic", "queue_id", "queue_offset"]
QUEUE_STATS = ["dump_id", *QUEUE_KEY, "commit_log_offset"]
"""The consume_queue columns Delta keeps file statistics for (job 2 and explain look units up by these)."""
QUEUE_WRITER = {"write_statistics": QUEUE_STATS, "use_dictionary": ["dump_id", "topic", "queue_id", COPY.name]}
"""pyarrow's writer settings for the consume_queue files: dictionaries only for the few-valued columns."""
EXAMPLES = 5
"""Undecodable bodies a split names (topic, offset, error) for the summary."""
UNIT_COLUMNS = ["file_base", "position", *CQ_SCHEMA.names, "multi"]
DECODED_SCHEMA = pa.schema([pa.field("file_base", pa.int64()), pa.field("position", pa.int64()), *CQ_SCHEMA,
                            pa.field("multi", pa.bool_()), pa.field("unit", pa.bool_()),
                            pa.field("message", pa.struct(list(MESSAGES_SCHEMA))), pa.field("report", pa.string())])
"""A split's rows: the record's file and position; its unit (valid where `unit`), and whether that is a
multi-dispatch unit (its queue offset is the one it asks for, placed later by `filterlib.rebuild.dispatch.place_queue`);
its messages row (null on an LMQ unit's row and on the report row); on the split's last row only, its report."""

EXPORT_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("first_offset", pa.int64()),
                           ("units", pa.int64()), ("cq_files", pa.int32()), ("ext_files", pa.int32()),
                           ("bytes", pa.int64()), ("error", pa.string())])

@dataclasses.dataclass(frozen=True)
class TaskContext:
    """What every task needs, as plain picklable data: scan options and the dispatcher's settings and registry."""

    check_crc: bool
    delay_levels: tuple[int, ...]
    batch_rows: int
    ext: bool
    calc_bitmap: bool
    registry: dict
    multi_dispatch: bool = False
    lmq: bool = False
    bodies: bool = False
    """Write the body bytes into `messages` (--bodies); else only the compressed ones are decoded, for body_error."""
    messages: FileTarget | None = None
    """Where tasks write the messages Parquet files themselves; None: the rows go to Spark (`message` column)."""
    queue: FileTarget | None = None
    """Where tasks write the consume_queue files themselves (only with `messages`, never under multi-dispatch,
    whose units are placed over whole queues); None: the units go to Spark."""
    compression: str = "snappy"
    """The Parquet codec of those files (the session's spark.sql.parquet.compression.codec, in pyarrow's words)."""
    recovery: RecoveryRules = dataclasses.field(default_factory=lambda: recovery_rules(DEFAULT))
    """The release's per-record recovery checks (`brokerversion.recovery_rules`)."""
    properties_map: bool = False
    """The warehouse's messages table holds the properties as a map (LEGACY_MESSAGES_TABLE): write them so."""

    def messages_table(self) -> pa.Schema:
        """The Arrow schema of the messages files these tasks write."""
        return LEGACY_MESSAGES_TABLE if self.properties_map else MESSAGES_TABLE

    def options(self) -> ScanOptions:
        """The scan options of every task (the release's recovery checks: `brokerversion.recovery_rules`)."""
        return ScanOptions.of(self.recovery, check_crc=self.check_crc,
                              want_body=True if self.bodies else COMPRESSED_ONLY, batch_rows=self.batch_rows,
                              delay_levels=list(self.delay_levels))


_dispatchers: dict[str, Dispatcher] = {}


def _dispatcher(ctx: TaskContext) -> Dispatcher:
    """One dispatcher per worker process and context (compiling the filters once, reused across tasks)."""
    key = json.dumps([ctx.ext, ctx.calc_bitmap, ctx.multi_dispatch, ctx.lmq, ctx.registry], sort_keys=True)
    if key not in _dispatchers:
        _dispatchers.clear()
        _dispatchers[key] = Dispatcher(registry_from_spec(ctx.registry), ctx.ext, ctx.calc_bitmap,
                                       ctx.multi_dispatch, ctx.lmq, ctx.registry.get("version", DEFAULT))
    return _dispatchers[key]


def _scans(batches: Iterator[pa.RecordBatch], opts: ScanOptions) -> Iterator[tuple[dict, RangeScan]]:
    for tasks in batches:
        for t in tasks.to_pylist():
            yield t, RangeScan(t["path"], t["range_start"], t["range_end"], opts, file_base=t["file_base"],
                               file_size=t["file_size"], anchor=t["anchor"])


@dataclasses.dataclass
class SplitOutput:
    """What a split's report row carries beside its SplitReport: the messages file it wrote (a write_part
    descriptor, None without rows or without a FileTarget), and its undecodable bodies (count, first examples)."""

    part: dict | None = None
    undecodable: int = 0
    examples: list[dict] = dataclasses.field(default_factory=list)
    queue_part: dict | None = None
    """The consume_queue file it wrote (a `TaskContext.queue` run), with what the driver counts of it:"""
    units: int = 0
    bitmaps: int = 0
    queues: list[list] = dataclasses.field(default_factory=list)
    """[topic, queue_id] of every queue it holds units of."""


def report_row(report: SplitReport, out: SplitOutput | None = None) -> pa.RecordBatch:
    """A one-row batch carrying a split report (and its SplitOutput) as JSON, every other column null."""
    text = json.dumps({**dataclasses.asdict(report), "output": dataclasses.asdict(out or SplitOutput())})
    cols = [pa.nulls(1, f.type) for f in DECODED_SCHEMA][:-1] + [pa.array([text])]
    return pa.RecordBatch.from_arrays(cols, schema=DECODED_SCHEMA)


def parse_report(text: str) -> tuple[SplitReport, SplitOutput]:
    """A SplitReport and its SplitOutput from their JSON row."""
    d = json.loads(text)
    return SplitReport(**{k: v for k, v in d.items() if k != "output"}), SplitOutput(**(d.get("output") or {}))


def message_columns(batch: pa.RecordBatch, flags: np.ndarray, bodies: bool) -> list[pa.Array]:
    """A decoded batch as messages columns (MESSAGES_SCHEMA): body_error from the (compressed) bodies, the body kept
    only if asked."""
    cols = dict(zip(batch.schema.names, batch.columns, strict=True))
    cols["body_error"] = body_errors(flags, batch.column("body"))
    if not bodies:
        cols["body"] = pa.nulls(batch.num_rows, pa.binary())
    return [cols[f.name] for f in MESSAGES_SCHEMA]


def _split(t: dict, scan: RangeScan, ctx: TaskContext, out: SplitOutput, carry: bool
           ) -> Iterator[tuple[pa.RecordBatch, list[pa.Array] | None]]:
    """One range's rows (DECODED_SCHEMA; `message` filled when `carry`) each with its messages columns (None on an
    LMQ row); counts the compressed and undecodable bodies into the report and `out`."""
    dispatcher = _dispatcher(ctx)
    compressed = 0
    for batch in scan:
        flags = batch.column("sys_flag").to_numpy(zero_copy_only=False)
        compressed += int(np.count_nonzero(flags & COMPRESSED_FLAG))
        in_queue, units = dispatcher.units(batch)
        n = batch.num_rows
        msgs = message_columns(batch, flags, ctx.bodies)
        errors = msgs[MESSAGES_SCHEMA.get_field_index("body_error")]
        if errors.null_count < n:
            bad = np.flatnonzero(errors.is_valid().to_numpy(zero_copy_only=False))
            out.undecodable += len(bad)
            for i in bad[:max(0, EXAMPLES - len(out.examples))].tolist():
                out.examples.append({"topic": batch.column("topic")[i].as_py(), "commit_log_offset":
                                     batch.column("commit_log_offset")[i].as_py(), "body_error": errors[i].as_py()})
        message = (pa.StructArray.from_arrays(msgs, fields=list(MESSAGES_SCHEMA)) if carry
                   else pa.nulls(n, DECODED_SCHEMA.field("message").type))
        yield pa.RecordBatch.from_arrays(
            [pa.array(np.full(n, t["file_base"], dtype=np.int64)), batch.column("position"), *units.columns,
             pa.array(np.zeros(n, dtype=bool)), pa.array(in_queue), message, pa.nulls(n, pa.string())],
            schema=DECODED_SCHEMA), msgs
        lmq = dispatcher.lmq_units(batch, in_queue)
        if lmq is not None:
            rows, units = lmq
            k = len(rows)
            yield pa.RecordBatch.from_arrays(
                [pa.array(np.full(k, t["file_base"], dtype=np.int64)), batch.column("position").take(pa.array(rows)),
                 *units.columns, pa.array(np.ones(k, dtype=bool)), pa.array(np.ones(k, dtype=bool)),
                 pa.nulls(k, DECODED_SCHEMA.field("message").type), pa.nulls(k, pa.string())],
                schema=DECODED_SCHEMA), None
    scan.report.compressed = compressed


def _messages_table(t: dict, scan: RangeScan, ctx: TaskContext, out: SplitOutput, held: list[pa.RecordBatch]
                    ) -> Iterator[pa.RecordBatch]:
    """A range's messages rows as batches for write_part (whose partition directory holds dump_id); its unit rows
    go to `held`."""
    for rows, msgs in _split(t, scan, ctx, out, carry=False):
        held.append(rows)
        if msgs is not None:
            batch = pa.RecordBatch.from_arrays(msgs, schema=MESSAGES_SCHEMA)
            if ctx.properties_map:
                props = MESSAGES_SCHEMA.get_field_index("properties")
                batch = batch.set_column(props, pa.field("properties", MAP_TYPE), map_column(batch.column(props)))
            yield batch


def decode_ranges(ctx: TaskContext, records: Any = None):
    """The mapInArrow function decoding each range once: per record its unit (and its messages row, or that row
    written to the range's own Parquet file), LMQ units, and the split's report as the last row. `records`, a
    Spark accumulator, is added each range's records (the job's progress lines)."""
    remote = sfs.snapshot()  # a remote store's file system, for the task's ranged reads

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sfs.install(remote)
        for t, scan in _scans(batches, ctx.options()):
            out = SplitOutput()
            if ctx.messages is None:
                for rows, _ in _split(t, scan, ctx, out, carry=True):
                    yield rows
            else:
                held: list[pa.RecordBatch] = []  # the range's units, until its messages file is written
                out.part = write_part(ctx.messages, _messages_table(t, scan, ctx, out, held), ctx.messages_table(),
                                      MESSAGES_STATS, ctx.compression,
                                      MESSAGES_WRITER if ctx.bodies else NO_BODIES_WRITER)
                if ctx.queue is None:
                    yield from held
                else:
                    write_units(ctx, held, out)
            if records is not None:
                records.add(scan.report.records)
            yield report_row(scan.report, out)

    return run


def write_units(ctx: TaskContext, held: list[pa.RecordBatch], out: SplitOutput) -> None:
    """A range's units as one consume_queue file, described and counted in `out`. The rows stay in commit log
    order (each queue's offsets ascending): readers group by queue, and a file's statistics span its range's
    queues either way, so a sort would buy nothing (it cost 0.4 us a unit)."""
    cols = [*CQ_SCHEMA.names, "unit"]
    schema = pa.schema([DECODED_SCHEMA.field(c) for c in cols])
    units = pa.Table.from_batches([b.select(cols) for b in held], schema)
    units = units.filter(units.column("unit")).drop_columns("unit")
    out.units = units.num_rows
    out.bitmaps = units.num_rows - units.column("filter_bitmap").null_count
    keys = units.group_by(["topic", "queue_id"]).aggregate([]) if units.num_rows else None
    out.queues = [[k["topic"], k["queue_id"]] for k in keys.to_pylist()] if keys is not None else []
    out.queue_part = write_part(ctx.queue, units, QUEUE_TABLE, QUEUE_STATS, ctx.compression, QUEUE_WRITER,
                                key_summary(units, QUEUE_KEY[:2], ("queue_offset", "commit_log_offset")))


@dataclasses.dataclass(frozen=True)
class ExportContext:
    """Where and how `export_queues` writes: the root of consumequeue/ and consumequeue_ext/, the broker's mapped
    file sizes (mappedFileSizeConsumeQueue, mappedFileSizeConsumeQueueExt) and whether ext is on."""

    root: str
    cq_file_size: int
    ext_file_size: int
    ext: bool


def export_queues(ctx: ExportContext):
    """The mapInArrow function writing the files of the queues in a partition (rows clustered by queue and sorted
    by queue offset); emits one EXPORT_SCHEMA row per queue. A queue whose offsets are not consecutive is not
    written (its row says why)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        done: list[dict] = []
        key = None
        writer: QueueWriter | None = None
        error: str | None = None

        def finish() -> None:
            if writer is None:
                return
            if error is None:
                writer.close()
            done.append({"topic": key[0], "queue_id": key[1], "first_offset": writer.first_offset,
                         "units": writer.units, "cq_files": len(writer.cq_files), "ext_files": len(writer.ext_files),
                         "bytes": writer.bytes, "error": error})

        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            topic, qid = batch.column("topic"), batch.column("queue_id")
            change = pc.or_(pc.not_equal(topic.slice(1), topic.slice(0, n - 1)),
                            pc.not_equal(qid.slice(1), qid.slice(0, n - 1)))
            cuts = [0, *(np.flatnonzero(change.to_numpy(zero_copy_only=False)) + 1).tolist(), n]
            for s, e in pairwise(cuts):
                k = (topic[s].as_py(), qid[s].as_py())
                if k != key:
                    finish()
                    key, error = k, None
                    writer = QueueWriter(ctx.root, k[0], k[1], ctx.cq_file_size, ctx.ext_file_size, ctx.ext)
                if error is not None:
                    continue
                part = batch.slice(s, e - s)
                try:
                    writer.add(*(part.column(c) for c in ("queue_offset", "commit_log_offset", "size", "tags_code",
                                                          "msg_store_time", "filter_bitmap")))
                except QueueGap as gap:
                    writer.abort()
                    error = f"not written: {gap} (a record of the queue is missing or repeated)"
        finish()
        if done:
            yield pa.RecordBatch.from_pylist(done, schema=EXPORT_SCHEMA)

    return run


def dump_queue_units(store_root: str, store_type: str, commitlog_dirs: list[str]):
    """The mapInArrow function reading the dump's own queues (rows: topic, queue_id) as the pull reads them (the
    broker's storeType picks file or RocksDB queues; the commit log's min offset bounds a RocksDB queue's start)."""
    remote = sfs.snapshot()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sfs.install(remote)
        store = StoreDir(store_root, commitlog_dirs, store_type=store_type)
        for tasks in batches:
            for t in tasks.to_pylist():
                yield from read_dump_queue(store, t["topic"], t["queue_id"])

    return run


@dataclasses.dataclass(frozen=True)
class VerifyContext:
    """What `diff_units` needs: the registry the rebuild used (as `registry_spec`) and the groups the dump knows."""

    registry: dict
    groups: tuple[str, ...]


def diff_units(ctx: VerifyContext):
    """The mapInArrow function turning joined (rebuild, dump) unit pairs into queue_diff rows."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        registry = registry_from_spec(ctx.registry)
        for batch in batches:
            out = diff_batch(batch, registry, ctx.groups)
            if out.num_rows:
                yield out

    return run

