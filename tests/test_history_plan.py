"""filterlib.rebuild.history without Spark: where a history ends (only a BLANK filler closes a file), which bytes of
a copy lie past that end, the gap retention left, the check points, and a copy whose files cannot be this store's."""

from __future__ import annotations

from filterlib.rebuild.history import Read, history_end, plan_append
from filterlib.store.storedir import MappedFile

M = 1000


def row(base: int, valid_end: int, end_kind: str, records: int = 5, size: int = M) -> dict:
    return {"file_base": base, "size": size, "valid_end": valid_end, "end_kind": end_kind, "records": records}


def f(base: int, size: int = M) -> MappedFile:
    return MappedFile(f"/s/commitlog/{base:020d}", base, size)


def test_only_a_blank_filler_closes_a_file() -> None:
    assert history_end([]) is None
    closed = history_end([row(M, 990, "blank"), row(0, 995, "blank")])
    assert (closed.first, closed.end, closed.open_file) == (0, 2 * M, None)
    for kind in ("eof", "zero_tail", "fail"):
        open_ = history_end([row(0, 995, "blank"), row(M, 420, kind, records=7)])
        assert (open_.end, open_.open_records) == (M + 420, 7), kind
    preallocated = history_end([row(0, 995, "blank"), row(M, 420, "zero_tail", 7), row(2 * M, 0, "zero_tail", 0)])
    assert (preallocated.end, preallocated.open_file["file_base"]) == (M + 420, M)
    assert history_end([row(0, 0, "zero_tail", 0)]).end == 0


def test_a_copy_continues_inside_the_open_file_and_reads_the_files_after_it() -> None:
    hist = history_end([row(0, 995, "blank"), row(M, 420, "zero_tail", records=7)])
    plan = plan_append(hist, [f(0), f(M), f(2 * M)], {0: 5, M: 7}, last_record=M + 380)
    assert plan.reads == [Read(f(M), 420, 7), Read(f(2 * M), 0)]
    assert plan.gap is None and plan.problem is None
    assert plan.check_offsets == [0, M, M + 380]


def test_an_older_copy_or_the_same_one_reads_nothing() -> None:
    hist = history_end([row(0, 995, "blank"), row(M, 420, "zero_tail", records=7)])
    assert plan_append(hist, [f(0), f(M, 420)], {0: 5, M: 7}, M + 380).reads == []
    assert plan_append(hist, [f(0)], {0: 5, M: 7}, M + 380).reads == []
    closed = history_end([row(0, 995, "blank")])
    assert plan_append(closed, [f(0)], {0: 5}).reads == []


def test_files_retention_deleted_before_any_copy_held_them_are_a_gap() -> None:
    hist = history_end([row(0, 995, "blank"), row(M, 420, "fail", records=7)])
    plan = plan_append(hist, [f(3 * M), f(4 * M)], {0: 5, M: 7}, M + 380)
    assert plan.reads == [Read(f(3 * M), 0), Read(f(4 * M), 0)]
    assert (plan.gap, plan.gap_bytes, plan.check_offsets) == ((M + 420, 3 * M), 3 * M - M - 420, [])
    closed = history_end([row(0, 995, "blank")])
    assert plan_append(closed, [f(2 * M)], {0: 5}).gap == (M, 2 * M)
    assert plan_append(closed, [f(M)], {0: 5}).gap is None


def test_a_file_spanning_the_end_that_is_not_the_historys_is_a_problem() -> None:
    hist = history_end([row(0, 995, "blank"), row(M, 420, "eof", records=7)])
    plan = plan_append(hist, [MappedFile("/s/commitlog/x", 0, 4 * M)], {0: 5, M: 7}, M + 380)
    assert plan.problem is not None and "spans the history's end 1420" in plan.problem


def test_a_record_is_read_back_from_the_newest_copy_that_held_it() -> None:
    from filterlib.rebuild.history import copy_spans, store_of

    spans = copy_spans([{"first_offset": 0, "to_offset": 1420, "store": "/c1", "built_at": 1},
                        {"first_offset": 2 * M, "to_offset": 5 * M, "store": "/c3", "built_at": 3},
                        {"first_offset": 0, "to_offset": 3 * M, "store": "/c2", "built_at": 2}])
    assert [s[2] for s in spans] == ["/c3", "/c2", "/c1"]
    assert [store_of(o, spans, "/dump") for o in (0, 1419, 1420, 2 * M, 5 * M)] == ["/c2", "/c2", "/c2", "/c3",
                                                                                   "/dump"]
    assert store_of(5, [], None) is None
