"""filterlib.rebuild.dumpfiles: file plans from split reports and dump_files rows, held to merge_reports' verdict."""

from __future__ import annotations

from filterlib.rebuild import dumpfiles as df
from filterlib.store import commitlog as cl
from filterlib.store.scan import SplitReport

BASE = 1 << 20
SIZE = 1000
PATH = "/store/commitlog/" + cl.file_name(BASE)


def report(start, end, **kw):
    return SplitReport(PATH, BASE, SIZE, start, end, **kw)


def test_a_clean_file_ending_in_a_blank_keeps_every_row():
    """Seven 100-byte records, then the BLANK filler: two splits tile the file, the second stops at the blank."""
    plan = df.plan_file([report(500, 1000, sync=500, records=2, bytes=200, stop=700, stop_kind="blank",
                                last_nonzero=707),
                         report(0, 500, sync=0, records=5, bytes=500, exit=500, last_nonzero=499)])
    a = plan.account
    assert (plan.splits, plan.emitted) == (2, 7)
    assert (a.records, a.decoded_bytes, a.blank_bytes, a.zero_tail_bytes, a.damaged_bytes) == (7, 700, 300, 0, 0)
    assert (a.valid_end, a.end_kind, a.damage) == (700, "blank", [])
    assert not plan.fallback and plan.keep_below is None
    row = df.dump_file_row(plan, "/store")
    assert (row["decoded_bytes"], row["blank_bytes"], row["end_kind"], row["damage_reason"]) == \
        (700, 300, "blank", None)


def test_rows_past_damage_are_cut_at_the_valid_end():
    """A bad magic at 300 ends the file's valid data; the second split resynchronised at 500 and emitted four rows
    the broker never reads: the plan keeps rows that start before base + 300, and the damage runs to the last
    non-zero byte."""
    plan = df.plan_file([report(0, 500, sync=0, records=3, bytes=300, stop=300, stop_kind="fail",
                                stop_reason=cl.BAD_MAGIC, last_nonzero=499),
                         report(500, 1000, sync=500, records=4, bytes=400, stop=900, stop_kind="blank",
                                last_nonzero=907)])  # the BLANK's 8-byte header, zeros after it
    a = plan.account
    assert (plan.emitted, a.records, a.valid_end, a.end_kind) == (7, 3, 300, "fail")
    assert plan.keep_below == BASE + 300 and not plan.fallback
    assert (a.damaged_bytes, a.zero_tail_bytes, a.blank_bytes) == (908 - 300, SIZE - 908, 0)
    assert a.decoded_bytes + a.blank_bytes + a.zero_tail_bytes + a.damaged_bytes == SIZE
    row = df.dump_file_row(plan, "/store")
    assert row["path"] == "commitlog/" + cl.file_name(BASE)
    assert (row["kind"], row["file_base"], row["size"], row["records"], row["valid_end"]) == \
        ("commitlog", BASE, SIZE, 3, 300)
    assert (row["damage_offset"], row["damage_global_offset"], row["damage_length"]) == (300, BASE + 300, 608)
    assert row["damage_reason"] == cl.REASONS[cl.BAD_MAGIC]
    assert (row["splits"], row["whole_file_fallback"]) == (2, False)


def test_a_split_that_resynchronised_inside_a_record_falls_back_to_the_whole_file():
    """300-byte records: the first split's chain leaves at 600, the second split found a fake record at 520."""
    plan = df.plan_file([report(0, 500, sync=0, records=2, bytes=600, exit=600, last_nonzero=499),
                         report(500, 1000, sync=520, records=1, bytes=300, stop=1000, stop_kind="eof",
                                last_nonzero=999)])
    assert plan.fallback and plan.keep_below is None
    assert df.dump_file_row(plan, "/store", fallback_used=True)["whole_file_fallback"] is True


def test_zeros_after_the_last_record_are_a_zero_tail_not_damage():
    plan = df.plan_file([report(0, 1000, sync=0, records=4, bytes=400, stop=400, stop_kind="fail",
                                stop_reason=cl.BAD_MAGIC, last_nonzero=399)])
    a = plan.account
    assert (a.end_kind, a.zero_tail_bytes, a.damaged_bytes, a.damage) == ("zero_tail", 600, 0, [])
    assert plan.keep_below is None  # one split: it emitted exactly the valid records
    row = df.dump_file_row(plan, "/store")
    assert (row["damage_offset"], row["damage_global_offset"], row["damage_length"], row["damage_reason"]) == \
        (None, None, None, None)
    assert (row["zero_tail_bytes"], row["end_kind"], row["splits"]) == (600, "zero_tail", 1)


def test_an_empty_file():
    plan = df.plan_file([SplitReport(PATH, BASE, 0, 0, 0)])
    a = plan.account
    assert (a.records, a.valid_end, a.end_kind, plan.emitted, plan.keep_below) == (0, 0, "eof", 0, None)


def test_relative_path_inside_and_outside_the_store_root():
    assert df.relative_path("/data/store/commitlog/" + cl.file_name(0), "/data/store") == \
        "commitlog/" + cl.file_name(0)
    assert df.relative_path("/data/store/", "/data/store/") == "."
    outside = "/mnt/other/commitlog/" + cl.file_name(0)  # storePathCommitLog elsewhere
    assert df.relative_path(outside, "/data/store") == outside
    sibling = "/data/store2/commitlog/" + cl.file_name(0)  # shares the root's prefix, but is not inside it
    assert df.relative_path(sibling, "/data/store") == sibling
    dotted = "/data/store/..cl/" + cl.file_name(0)  # inside the root, a name that merely starts with ".."
    assert df.relative_path(dotted, "/data/store") == "..cl/" + cl.file_name(0)

