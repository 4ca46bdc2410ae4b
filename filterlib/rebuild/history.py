"""A broker's history across store copies: where the history ends (from its dump_files rows), what part of a new
copy lies past that end (the ranges job 1 decodes), the gap retention left between them, and the records both hold
that prove the copy continues the history. Pure data: job 1 reads the rows and decodes the ranges.

A broker's commit log offsets only grow until its store is wiped, so (broker, commit log offset) names a record in
every copy, and a record's bytes are the same in every copy that holds it whole (design.md, 'A broker's history')."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from filterlib.store.storedir import MappedFile

CHECKED = ("store_size", "body_crc", "topic", "queue_id", "queue_offset", "store_timestamp", "born_timestamp")
"""The fields of a record the continuity check compares between the copy and the history's messages row."""


@dataclass(frozen=True)
class HistoryEnd:
    """Where a broker's history stops: `end`, the global offset the next copy's new bytes begin at; `first`, the
    first file's offset; `open_file`, the dump_files row of the file `end` lies inside (None when the last file
    was closed by its BLANK filler, so the next file starts at `end`)."""

    first: int
    end: int
    open_file: Mapping | None

    @property
    def open_records(self) -> int:
        """Records of the open file already in the history (the prefix a continued read adds to)."""
        return 0 if self.open_file is None else int(self.open_file["records"])


def history_end(file_rows: Sequence[Mapping]) -> HistoryEnd | None:
    """The history's end from its dump_files rows (None for an empty history): in the newest file holding data (the
    broker preallocates the next file, all zeros, before it writes there). Only a BLANK filler closes a file: a file
    whose records stop at its end of data, at zeros, or at a torn record continues in the next copy, at the valid
    end."""
    if not file_rows:
        return None
    rows = sorted(file_rows, key=lambda r: r["file_base"])
    held = [r for r in rows if r["valid_end"] > 0]  # a preallocated next file, all zeros, holds nothing yet
    last = held[-1] if held else rows[0]
    if last["end_kind"] == "blank":
        return HistoryEnd(rows[0]["file_base"], last["file_base"] + last["size"], None)
    return HistoryEnd(rows[0]["file_base"], last["file_base"] + last["valid_end"], last)


@dataclass(frozen=True)
class Read:
    """A copy file to decode from `start` (a record boundary: 0, or the history's end inside its open file)."""

    file: MappedFile
    start: int
    prefix_records: int = 0


@dataclass
class AppendPlan:
    """What of a copy job 1 decodes on a history: the reads, the gap before them (offsets no copy held), the
    records whose equality proves continuity, and why nothing is read when nothing is."""

    reads: list[Read] = field(default_factory=list)
    gap: tuple[int, int] | None = None
    check_offsets: list[int] = field(default_factory=list)
    problem: str | None = None

    @property
    def gap_bytes(self) -> int:
        """Bytes of the gap (0 without one)."""
        return 0 if self.gap is None else self.gap[1] - self.gap[0]


def plan_append(hist: HistoryEnd, files: Sequence[MappedFile], history_bases: Mapping[int, int],
                last_record: int | None = None) -> AppendPlan:
    """Which parts of the copy's files lie past the history's end, the gap before them, and the check points: the
    first record of every copy file the history also decoded (`history_bases`: file base -> records the history
    holds of it; a file starts with a record) and the history's last record (`last_record`, its offset) when the
    copy holds the bytes up to the end. A copy file that spans the history's end without being the history's file
    there (another mapped-file size: another store) is a `problem`."""
    plan = AppendPlan()
    holder = hist.end if hist.open_file is None else int(hist.open_file["file_base"])
    checks = {f.base for f in files if history_bases.get(f.base, 0) > 0}
    for f in files:
        if f.base == holder and hist.open_file is not None:
            if f.size > hist.end - f.base:
                plan.reads.append(Read(f, hist.end - f.base, hist.open_records))
            if last_record is not None and f.size >= hist.end - f.base:
                checks.add(last_record)
        elif f.base >= hist.end:
            plan.reads.append(Read(f, 0))
        elif f.base + f.size > hist.end:
            plan.problem = (f"its commitlog file {f.base:020d} ({f.size} bytes) spans the history's end {hist.end}, "
                            f"where the history's own file is {holder:020d}")
            return plan
    plan.check_offsets = sorted(checks)
    first_new = min((r.file.base for r in plan.reads if r.start == 0), default=None)
    if first_new is not None and first_new > hist.end and all(f.base != holder for f in files):
        plan.gap = (hist.end, first_new)
    return plan


Span = tuple[int, int, str]
"""(first_offset, to_offset, store) of one copy of a history: the records it held whole, and where it is."""


def copy_spans(rows: Sequence[Mapping]) -> list[Span]:
    """A history's copies (copies table rows) as spans, newest first: where a record's bytes can be read back when
    the newest copy no longer holds its file (retention deleted it before that copy was taken)."""
    ordered = sorted(rows, key=lambda r: (r["to_offset"], r["built_at"]), reverse=True)
    return [(int(r["first_offset"]), int(r["to_offset"]), str(r["store"])) for r in ordered]


def store_of(offset: int, spans: Sequence[Span], default: str | None) -> str | None:
    """The store of the newest copy that held the record at `offset` whole; `default` when no copy span holds it
    (a dump that is no history, or a history written before copies were recorded)."""
    for first, to, store in spans:
        if first <= offset < to:
            return store
    return default
