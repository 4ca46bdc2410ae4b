"""Job 1's Spark tasks: one byte range of one commitlog file per task, decoded by filterlib's self-synchronising
RangeScan. No filter rule lives here: the tasks only hand ranges to filterlib and batches back to Spark.

Two kinds of task, so that no decoded body ever has to be cached by Spark:

- `queue_units`: decode (bodies skipped) and dispatch in the same task (`filterlib.dispatch`: the filters of a
  topic evaluated set-at-a-time over the batch); emits the records' consume-queue units (multi-dispatch LMQ units
  included), and as its last row the
  split's SplitReport as JSON (every other column null): the driver collects only those.
- `messages`: decode with bodies and emit every record that starts before the file's valid end (known from the
  reports by then), for the messages table, with why the client cannot decode a body (`body_error`).

And the tasks of the two options: `export_queues` (`--export-cq`: one queue's sorted units streamed into its
consumequeue and consumequeue_ext files by `filterlib.cqexport.QueueWriter`), `dump_queue_units` and `diff_units`
(`--verify`: the dump's own queues read as the pull reads them, and joined pairs turned into queue_diff rows by
`filterlib.queuediff`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.cqexport import QueueGap, QueueWriter
from filterlib.dispatch import CQ_SCHEMA, Dispatcher, registry_from_spec
from filterlib.queuediff import diff_batch, read_dump_queue
from filterlib.store import fs as sfs
from filterlib.store.commitlog import COMPRESSED_FLAG
from filterlib.store.compression import body_errors
from filterlib.store.scan import RangeScan, ScanOptions, SplitReport
from filterlib.tables import MESSAGES

TASK_DDL = "path string, file_base long, file_size long, range_start long, range_end long, keep_below long"
UNITS_SCHEMA = pa.schema([pa.field("file_base", pa.int64()), pa.field("position", pa.int64()), *CQ_SCHEMA,
                          pa.field("multi", pa.bool_()), pa.field("report", pa.string())])
"""A split's units: the record's file and position, the unit, whether it is a multi-dispatch unit (its queue
offset is the one it asks for, placed later by `filterlib.dispatch.place_queue`), and, on the split's last row
only, its report."""
MESSAGES_SCHEMA = MESSAGES.arrow(drop=("dump_id",))
"""The decoded record (`filterlib.store.scan.SCHEMA`), and why the client's decode of its body fails (null where
it decodes): the messages table without dump_id."""

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
    negative_size_fails: bool = False
    offset_in_file: bool = False

    def options(self, want_body: bool) -> ScanOptions:
        """The scan options of every task (the release's recovery checks: `brokerversion.recovery_rules`)."""
        return ScanOptions(check_crc=self.check_crc, want_body=want_body, batch_rows=self.batch_rows,
                           delay_levels=list(self.delay_levels), negative_size_fails=self.negative_size_fails,
                           offset_in_file=self.offset_in_file)


_dispatchers: dict[str, Dispatcher] = {}


def _dispatcher(ctx: TaskContext) -> Dispatcher:
    """One dispatcher per worker process and context (compiling the filters once, reused across tasks)."""
    key = json.dumps([ctx.ext, ctx.calc_bitmap, ctx.multi_dispatch, ctx.lmq, ctx.registry], sort_keys=True)
    if key not in _dispatchers:
        _dispatchers.clear()
        _dispatchers[key] = Dispatcher(registry_from_spec(ctx.registry), ctx.ext, ctx.calc_bitmap,
                                       ctx.multi_dispatch, ctx.lmq)
    return _dispatchers[key]


def _scans(batches: Iterator[pa.RecordBatch], opts: ScanOptions) -> Iterator[tuple[dict, RangeScan]]:
    for tasks in batches:
        for t in tasks.to_pylist():
            yield t, RangeScan(t["path"], t["range_start"], t["range_end"], opts, file_base=t["file_base"],
                               file_size=t["file_size"])


def report_row(report: SplitReport) -> pa.RecordBatch:
    """A one-row units batch carrying a split report as JSON, every other column null."""
    cols = [pa.nulls(1, f.type) for f in UNITS_SCHEMA][:-1] + [pa.array([json.dumps(dataclasses.asdict(report))])]
    return pa.RecordBatch.from_arrays(cols, schema=UNITS_SCHEMA)


def parse_report(text: str) -> SplitReport:
    """A SplitReport from its JSON row."""
    return SplitReport(**json.loads(text))


def queue_units(ctx: TaskContext):
    """The mapInArrow function emitting consume-queue units (with position and file) and split reports."""
    remote = sfs.snapshot()  # a remote store's file system, for the task's ranged reads

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sfs.install(remote)
        dispatcher = _dispatcher(ctx)
        for t, scan in _scans(batches, ctx.options(want_body=False)):
            compressed = 0
            for batch in scan:
                flags = batch.column("sys_flag").to_numpy(zero_copy_only=False)
                compressed += int(np.count_nonzero(flags & COMPRESSED_FLAG))
                in_queue, units = dispatcher.units(batch)
                n = batch.num_rows
                cols = [pa.array(np.full(n, t["file_base"], dtype=np.int64)), batch.column("position"),
                        *units.columns, pa.array(np.zeros(n, dtype=bool)), pa.nulls(n, pa.string())]
                out = pa.RecordBatch.from_arrays(cols, schema=UNITS_SCHEMA)
                yield out if in_queue.all() else out.filter(pa.array(in_queue))
                lmq = dispatcher.lmq_units(batch, in_queue)
                if lmq is not None:
                    rows, units = lmq
                    head = [pa.array(np.full(len(rows), t["file_base"], dtype=np.int64)),
                            batch.column("position").take(pa.array(rows))]
                    yield pa.RecordBatch.from_arrays(head + units.columns + [
                        pa.array(np.ones(len(rows), dtype=bool)), pa.nulls(len(rows), pa.string())],
                        schema=UNITS_SCHEMA)
            yield report_row(dataclasses.replace(scan.report, compressed=compressed))

    return run


def messages(ctx: TaskContext):
    """The mapInArrow function emitting decoded records, each task dropping rows at or past `keep_below`."""
    remote = sfs.snapshot()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sfs.install(remote)
        for t, scan in _scans(batches, ctx.options(want_body=True)):
            limit = t["keep_below"]
            for batch in scan:
                if limit is not None:
                    keep = pc.less(batch.column("position"), limit)
                    if not pc.all(keep).as_py():
                        batch = batch.filter(keep)
                if batch.num_rows:
                    flags = batch.column("sys_flag").fill_null(0).to_numpy(zero_copy_only=False)
                    yield batch.append_column("body_error", body_errors(flags, batch.column("body")))

    return run


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


def dump_queue_units(store_root: str, store_type: str = "default", min_phy_offset: int = 0):
    """The mapInArrow function reading the dump's own queues (rows: topic, queue_id) as the pull reads them (the
    broker's storeType picks file or RocksDB queues; the commit log's min offset bounds a RocksDB queue's start)."""
    remote = sfs.snapshot()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sfs.install(remote)
        for tasks in batches:
            for t in tasks.to_pylist():
                yield from read_dump_queue(store_root, t["topic"], t["queue_id"], store_type, min_phy_offset)

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

