"""Per-file verdicts from split reports: which decoded rows a file keeps, whether it needs a whole-file decode, and
its dump_files row (size = decoded + blank + zero tail + damaged bytes, first damage and why)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from filterlib.store.scan import FileAccount, SplitReport, merge_reports


@dataclass(frozen=True)
class FilePlan:
    """One file's verdict: its accounting, rows its splits emitted, and what to do with them."""

    account: FileAccount
    splits: int
    emitted: int

    @property
    def fallback(self) -> bool:
        """The splits lost sync (one resynchronised inside a record): decode the whole file as one range."""
        return self.account.desync

    @property
    def keep_below(self) -> int | None:
        """Global offset rows must start before, when splits emitted rows past the valid end; None keeps all."""
        if self.fallback or self.emitted == self.account.records:
            return None
        return self.account.file_base + self.account.valid_end


def plan_file(reports: Sequence[SplitReport], prefix_records: int = 0) -> FilePlan:
    """Merge one file's split reports into its plan; `prefix_records`: records before the first report's start
    that an earlier read decoded (a history continued inside the file), counted as emitted."""
    return FilePlan(merge_reports(reports, prefix_records), len(reports),
                    prefix_records + sum(r.records for r in reports))


def relative_path(path: str, store_root: str) -> str:
    """A store file's path relative to the store root when inside it (stable across machines), else as given."""
    rel = os.path.relpath(path, store_root)
    outside = rel == os.pardir or rel.startswith(os.pardir + os.sep)
    return path if outside else rel.replace(os.sep, "/")


def dump_file_row(plan: FilePlan, store_root: str, fallback_used: bool = False) -> dict:
    """The dump_files row of a commitlog file."""
    a = plan.account
    first = a.damage[0] if a.damage else None
    return {"path": relative_path(a.path, store_root), "kind": "commitlog", "file_base": a.file_base,
            "size": a.file_size, "records": a.records, "decoded_bytes": a.decoded_bytes,
            "blank_bytes": a.blank_bytes, "zero_tail_bytes": a.zero_tail_bytes, "damaged_bytes": a.damaged_bytes,
            "valid_end": a.valid_end, "end_kind": a.end_kind,
            "damage_offset": None if first is None else first.offset,
            "damage_global_offset": None if first is None else first.global_offset,
            "damage_length": None if first is None else first.length,
            "damage_reason": None if first is None else first.reason,
            "splits": plan.splits, "whole_file_fallback": fallback_used}
