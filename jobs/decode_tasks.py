"""Job 1's Spark tasks: one byte range of one commitlog file per task, decoded by filterlib's self-synchronising
RangeScan. No filter rule lives here: the tasks only hand ranges to filterlib and batches back to Spark.

Two kinds of task, so that no decoded body ever has to be cached by Spark:

- `queue_units`: decode (bodies skipped) and dispatch in the same task (`filterlib.dispatch`: the filters of a
  topic evaluated set-at-a-time over the batch); emits the records' consume-queue units, and as its last row the
  split's SplitReport as JSON (every other column null): the driver collects only those.
- `messages`: decode with bodies and emit every record that starts before the file's valid end (known from the
  reports by then), for the messages table.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.dispatch import CQ_SCHEMA, Dispatcher, registry_from_spec
from filterlib.store.scan import SCHEMA, RangeScan, ScanOptions, SplitReport

TASK_DDL = "path string, file_base long, file_size long, range_start long, range_end long, keep_below long"
UNITS_SCHEMA = pa.schema([pa.field("file_base", pa.int64()), pa.field("position", pa.int64()), *CQ_SCHEMA,
                          pa.field("report", pa.string())])
MESSAGES_SCHEMA = SCHEMA

_SPARK_TYPES = {pa.int64(): "long", pa.int32(): "int", pa.string(): "string", pa.binary(): "binary",
                pa.bool_(): "boolean", pa.map_(pa.string(), pa.string()): "map<string,string>"}


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of an Arrow schema made of the types the tasks emit."""
    return ", ".join(f"`{f.name}` {_SPARK_TYPES[f.type]}" for f in schema)


@dataclasses.dataclass(frozen=True)
class TaskContext:
    """What every task needs, as plain picklable data: scan options and the dispatcher's settings and registry."""

    check_crc: bool
    delay_levels: tuple[int, ...]
    batch_rows: int
    ext: bool
    calc_bitmap: bool
    registry: dict

    def options(self, want_body: bool) -> ScanOptions:
        """The scan options of every task."""
        return ScanOptions(check_crc=self.check_crc, want_body=want_body, batch_rows=self.batch_rows,
                           delay_levels=list(self.delay_levels))


_dispatchers: dict[str, Dispatcher] = {}


def _dispatcher(ctx: TaskContext) -> Dispatcher:
    """One dispatcher per worker process and context (compiling the filters once, reused across tasks)."""
    key = json.dumps([ctx.ext, ctx.calc_bitmap, ctx.registry], sort_keys=True)
    if key not in _dispatchers:
        _dispatchers.clear()
        _dispatchers[key] = Dispatcher(registry_from_spec(ctx.registry), ctx.ext, ctx.calc_bitmap)
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

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        dispatcher = _dispatcher(ctx)
        for t, scan in _scans(batches, ctx.options(want_body=False)):
            for batch in scan:
                in_queue, store_time, bitmaps = dispatcher.ext_columns(batch)
                n = batch.num_rows
                cols = [pa.array(np.full(n, t["file_base"], dtype=np.int64)), batch.column("position"),
                        batch.column("topic"), batch.column("queue_id"), batch.column("queue_offset"),
                        batch.column("commit_log_offset"), batch.column("store_size"), batch.column("tags_code"),
                        store_time, bitmaps, pa.nulls(n, pa.string())]
                out = pa.RecordBatch.from_arrays(cols, schema=UNITS_SCHEMA)
                yield out if in_queue.all() else out.filter(pa.array(in_queue))
            yield report_row(scan.report)

    return run


def messages(ctx: TaskContext):
    """The mapInArrow function emitting decoded records, each task dropping rows at or past `keep_below`."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for t, scan in _scans(batches, ctx.options(want_body=True)):
            limit = t["keep_below"]
            for batch in scan:
                if limit is not None:
                    keep = pc.less(batch.column("position"), limit)
                    if not pc.all(keep).as_py():
                        batch = batch.filter(keep)
                if batch.num_rows:
                    yield batch

    return run

