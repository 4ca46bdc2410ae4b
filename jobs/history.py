"""A broker's history in the warehouse (job 1 with --broker): the state its last complete run left (dump_files at
the pinned version, the history's end and last record), and a new copy checked against it record by record at the
check points before anything is appended (`filterlib.rebuild.history`); and the state job 2's last complete run
over it left, which the next run continues (`filterlib.replay.timeline`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from filterlib.rebuild.history import CHECKED, HistoryEnd, Span, copy_spans, history_end
from filterlib.store.scan import RangeScan, ScanOptions
from filterlib.store.storedir import MappedFile
from jobs.delta_files import stats_max
from jobs.delta_io import PARTITION, table_path
from jobs.runs import last_run, pinned_versions, read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class Held:
    """What the warehouse holds of a history: its end, its dump_files rows, its last record's offset, and the
    versions its last complete run of job 1 committed (what an append builds on)."""

    end: HistoryEnd
    files: list[dict]
    last_record: int | None
    versions: dict[str, int]

    @property
    def bases(self) -> dict[int, int]:
        """File base -> records the history holds of that file."""
        return {int(r["file_base"]): int(r["records"]) for r in self.files}


JOB1_TABLES = ("messages", "consume_queue", "dump_files", "dumps")


def load(spark: SparkSession, warehouse: str, broker: str) -> Held | None:
    """The history of `broker` as its last complete job-1 run left it; None when no such run wrote its tables."""
    versions = pinned_versions(spark, warehouse, broker)
    if any(t not in versions for t in JOB1_TABLES):
        return None
    rows = _rows(spark, warehouse, "dump_files", broker, versions["dump_files"])
    end = history_end(rows)
    if end is None:
        return None
    last = None
    if end.open_records:  # the last record's offset: the largest of all, when it lies in the open file
        base = int(end.open_file["file_base"])
        known, top = stats_max(spark, warehouse, "messages", broker, versions["messages"], "commit_log_offset")
        if not known:
            offsets = read_rows(spark, warehouse, "messages", broker, version=versions["messages"],
                                columns=["commit_log_offset"], where=("commit_log_offset", ">=", base))
            top = max((int(r["commit_log_offset"]) for r in offsets), default=None)
        last = int(top) if top is not None and int(top) >= base else None
    return Held(end, rows, last, versions)


def _rows(spark: SparkSession, warehouse: str, table: str, broker: str, version: int | None = None) -> list[dict]:
    """The broker's rows of a table (at `version`, else as its last complete run left them), without the partition
    column: what a history's run builds on."""
    return [{k: v for k, v in r.items() if k != PARTITION}
            for r in read_rows(spark, warehouse, table, broker, version=version)]


def copy_record(files: Sequence[MappedFile], offset: int, opts: ScanOptions) -> dict | None:
    """The copy's record at a global offset known to be a record boundary, decoded (None: no record there)."""
    for f in files:
        if f.base <= offset < f.base + f.size:
            at = offset - f.base
            for batch in RangeScan(f.path, at, at + 1, opts, file_base=f.base, file_size=f.size, anchor=at):
                if batch.num_rows:
                    return {c: batch.column(c)[0].as_py() for c in CHECKED}
            return None
    return None


def _said(rec: dict | None) -> str:
    if rec is None:
        return "no record"
    return (f"a record of {rec['store_size']} bytes, topic {rec['topic']} queue {rec['queue_id']} offset "
            f"{rec['queue_offset']}, stored at {rec['store_timestamp']}, body CRC {rec['body_crc']}")


def continuity_problem(spark: SparkSession, warehouse: str, broker: str, held: Held, files: Sequence[MappedFile],
                       offsets: Sequence[int], opts: ScanOptions) -> str | None:
    """The first check point where the copy's record differs from the history's messages row, in words; None when
    every one is equal (or there is none)."""
    if not offsets:
        return None
    known = {int(r["commit_log_offset"]): r for r in
             read_rows(spark, warehouse, "messages", broker, version=held.versions["messages"],
                       columns=["commit_log_offset", *CHECKED], where=("commit_log_offset", "in", list(offsets)))}
    for off in offsets:
        mine = known.get(off)
        theirs = copy_record(files, off, opts)
        if mine is not None:
            mine = {c: mine[c] for c in CHECKED}
        if mine != theirs:
            return (f"at commit log offset {off} the history holds {_said(mine)}, the copy {_said(theirs)}")
    return None


def spans_of(spark: SparkSession, warehouse: str, dump_id: str | None) -> dict[str, list[Span]]:
    """{history: its copies as spans, newest first} from the copies table (one history's at its last complete run,
    or every history's when dump_id is None); empty where there is no copies table (no history in the warehouse)."""
    from delta.tables import DeltaTable

    path = table_path(warehouse, "copies")
    if not DeltaTable.isDeltaTable(spark, path):
        return {}
    found = (read_rows(spark, warehouse, "copies", dump_id) if dump_id is not None else
             [r.asDict() for r in spark.read.format("delta").load(path)
              .select("dump_id", "first_offset", "to_offset", "store", "built_at").collect()])
    rows: dict[str, list[dict]] = {}
    for r in found:
        rows.setdefault(r["dump_id"], []).append(r)
    return {d: copy_spans(rs) for d, rs in rows.items()}


def is_history(spark: SparkSession, warehouse: str, dump_id: str) -> bool:
    """Whether job 1 built the dump as a broker's history (`--broker`: its copies table has rows of it)."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, table_path(warehouse, "copies")):
        return False
    return bool(read_rows(spark, warehouse, "copies", dump_id, columns=["dump_id"]))


@dataclass
class Previous:
    """Job 2's last complete run over a broker's history: its group_stats and pull_positions rows, the versions of
    every table it committed (what the next run appends to), the versions of job 1's tables it read, and whether
    job 1 began the history again (--replace) since."""

    stats: list[dict]
    positions: list[dict]
    versions: dict[str, int]
    inputs: dict[str, int]
    begun_again: bool = False


CONTINUED = ("pull_decisions", "decision_details", "pulls", "group_stats", "pull_positions")
"""The tables a run over a broker's history continues from (a previous run lacking one is replayed anew)."""


def last_pull_run(spark: SparkSession, warehouse: str, broker: str, job: str) -> Previous | None:
    """Job 2's (`job`) last complete run over the history of `broker`; None when there is none that wrote every
    table a run continues from."""
    versions = pinned_versions(spark, warehouse, broker)
    last = last_run(spark, warehouse, broker, job)
    if last is None or any(t not in versions for t in CONTINUED):
        return None
    begun = min((r["built_at"] for r in read_rows(spark, warehouse, "copies", broker, columns=["built_at"])
                 if r["built_at"] is not None), default=None)
    if begun is not None and begun > last["finished_at"]:
        return Previous([], [], versions, {}, begun_again=True)

    stats, positions = _rows(spark, warehouse, "group_stats", broker), _rows(spark, warehouse, "pull_positions", broker)
    return Previous(stats, positions, versions, dict(last.get("inputs") or {}))
