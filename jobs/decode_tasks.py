"""Job 1's Spark tasks: one byte range of one commitlog file per task, decoded and dispatched in the same task.

Each task gets (path, file_base, file_size, start, end), runs filterlib's self-synchronising RangeScan over it, and
for every decoded batch emits the records with their consume-queue side (unit or not, ext store time, ext bitmap:
`filterlib.dispatch`); its last row carries the split's SplitReport as JSON (every other column null), which is
all the driver collects. No filter rule lives here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from filterlib.dispatch import Dispatcher, registry_from_spec
from filterlib.store.scan import SCHEMA, RangeScan, ScanOptions, SplitReport

TASK_DDL = "path string, file_base long, file_size long, range_start long, range_end long"
EXTRA = [("file_base", pa.int64()), ("in_queue", pa.bool_()), ("msg_store_time", pa.int64()),
         ("filter_bitmap", pa.binary()), ("report", pa.string())]
OUT_SCHEMA = pa.schema(list(SCHEMA) + [pa.field(n, t) for n, t in EXTRA])
MESSAGE_COLUMNS = SCHEMA.names

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

    def options(self) -> ScanOptions:
        """The scan options of every task."""
        return ScanOptions(check_crc=self.check_crc, want_body=True, batch_rows=self.batch_rows,
                           delay_levels=list(self.delay_levels))


_dispatchers: dict[str, Dispatcher] = {}


def _dispatcher(ctx: TaskContext) -> Dispatcher:
    """One dispatcher per worker process and context (compiling the filters once, reused across tasks)."""
    key = json.dumps([ctx.ext, ctx.calc_bitmap, ctx.registry], sort_keys=True)
    if key not in _dispatchers:
        _dispatchers.clear()
        _dispatchers[key] = Dispatcher(registry_from_spec(ctx.registry), ctx.ext, ctx.calc_bitmap)
    return _dispatchers[key]


def _with_queue_side(batch: pa.RecordBatch, file_base: int, dispatcher: Dispatcher) -> pa.RecordBatch:
    in_queue, store_time, bitmaps = dispatcher.ext_columns(batch)
    n = batch.num_rows
    cols = list(batch.columns) + [pa.array(np.full(n, file_base, dtype=np.int64)), pa.array(in_queue),
                                  store_time, bitmaps, pa.nulls(n, pa.string())]
    return pa.RecordBatch.from_arrays(cols, schema=OUT_SCHEMA)


def report_row(report: SplitReport) -> pa.RecordBatch:
    """A one-row batch carrying a split report as JSON, every other column null."""
    cols = [pa.nulls(1, f.type) for f in OUT_SCHEMA][:-1] + [pa.array([json.dumps(dataclasses.asdict(report))])]
    return pa.RecordBatch.from_arrays(cols, schema=OUT_SCHEMA)


def parse_report(text: str) -> SplitReport:
    """A SplitReport from its JSON row."""
    return SplitReport(**json.loads(text))


def decode_ranges(ctx: TaskContext):
    """The mapInArrow function for a context: task rows in, decoded records and split reports out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        opts = ctx.options()
        dispatcher = _dispatcher(ctx)
        for tasks in batches:
            for t in tasks.to_pylist():
                scan = RangeScan(t["path"], t["range_start"], t["range_end"], opts, file_base=t["file_base"],
                                 file_size=t["file_size"])
                for batch in scan:
                    yield _with_queue_side(batch, t["file_base"], dispatcher)
                yield report_row(scan.report)

    return run
