"""jobs.delta_files: Parquet written by Spark tasks with pyarrow into the dump's partition, committed to Delta by the
driver in one commit per table and dump, read back by plain delta-spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.delta_files import commit_dump, file_target, frame_parts, write_part
from jobs.delta_io import STATS_PROPERTY, LayoutOutdated, last_version, replace_dump
from jobs.faults import EXIT_BUSY, TableWriteError, describe
from jobs.runs import read_dump

SCHEMA = pa.schema([("dump_id", pa.string()), ("unit", pa.int64()), ("consumer_group", pa.string()),
                    ("detail", pa.string())])
STATS = ["dump_id", "unit", "consumer_group"]
DDL = "dump_id string, unit long, consumer_group string, detail string"


def _rows(dump_id: str, n: int, start: int = 0) -> list[tuple]:
    return [(dump_id, i, f"g{i % 3}", None if i % 4 == 0 else f"detail {i}") for i in range(start, start + n)]


def _arrow(rows: list[tuple], schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def _task_write(spark, wh: str, table: str, dump_id: str, rows: list[tuple], parts: int,
                schema: pa.Schema = SCHEMA, stats: list[str] = STATS) -> list[dict]:
    """Each Spark task writes its partition of `rows` with write_part (`frame_parts`); their descriptors."""
    target = file_target(spark, wh, table, dump_id)
    ddl = ", ".join(f"{f.name} {'long' if f.type == pa.int64() else 'string'}" for f in schema)
    return frame_parts(spark.createDataFrame(rows, ddl).repartition(parts), target, schema, stats)


def _log(table: Path, version: int) -> list[dict]:
    return [json.loads(line) for line in (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def _sorted(spark, wh, table, dump_id) -> list[tuple]:
    return [tuple(r) for r in read_dump(spark, wh, table, dump_id).select("dump_id", "unit", "consumer_group", "detail")
            .orderBy("unit").collect()]


def test_task_parts_committed_once_and_readable_by_delta_spark(spark, tmp_path):
    wh = str(tmp_path)
    rows = _rows("a", 50)
    files = _task_write(spark, wh, "t", "a", rows, 3)
    assert len(files) == 3 and sum(f["num_records"] for f in files) == 50
    v = commit_dump(spark, wh, "t", "a", files, SCHEMA, STATS)
    assert v == 0 == last_version(spark, str(tmp_path / "t"))  # the first commit made the table
    assert _sorted(spark, wh, "t", "a") == rows
    adds = [a["add"] for a in _log(tmp_path / "t", 0) if "add" in a]
    assert sorted(a["path"] for a in adds) == sorted(f["path"] for f in files)
    assert all(a["partitionValues"] == {"dump_id": "a"} and a["path"].startswith("dump_id=a/") for a in adds)
    (meta,) = [a["metaData"] for a in _log(tmp_path / "t", 0) if "metaData" in a]
    assert meta["partitionColumns"] == ["dump_id"]
    assert meta["configuration"] == {STATS_PROPERTY: ",".join(s for s in STATS if s != "dump_id")}
    assert [f["name"] for f in json.loads(meta["schemaString"])["fields"]] == SCHEMA.names
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{tmp_path / 't'}`").first()
    assert detail.numFiles == 3 and detail.format == "delta" and list(detail.partitionColumns) == ["dump_id"]
    import pyarrow.parquet as pq

    assert all(pq.read_schema(tmp_path / "t" / f["path"]).names == SCHEMA.names[1:] for f in files)


def test_stats_match_what_delta_spark_writes(spark, tmp_path):
    """The statistics of a pyarrow part are the ones delta-spark's own writer records for the same rows."""
    wh = str(tmp_path)
    rows = _rows("a", 40) + [("a", 1000, None, "x" * 40)]
    (d,) = [write_part(file_target(spark, wh, "t", "a"), _arrow(rows), SCHEMA, STATS + ["detail"])]
    commit_dump(spark, wh, "t", "a", [d], SCHEMA, STATS + ["detail"])
    replace_dump(spark.createDataFrame(rows, DDL).coalesce(1), wh, "ref", "a", STATS + ["detail"])
    ours = json.loads(d["stats"])
    (theirs,) = [json.loads(a["add"]["stats"]) for a in _log(tmp_path / "ref", 1) if "add" in a]
    theirs.pop("tightBounds", None)
    assert ours == theirs
    # data skipping: a lookup on unit reads only the file whose range holds it
    commit_dump(spark, wh, "t", "b", [write_part(file_target(spark, wh, "t", "b"), _arrow(_rows("b", 5, 2000)),
                                                 SCHEMA, STATS)], SCHEMA, STATS)
    df = spark.read.format("delta").load(str(tmp_path / "t"))
    assert len(df.where("unit = 2001").inputFiles()) == 1
    assert len(df.inputFiles()) == 2


def test_recommit_replaces_and_other_dumps_stay(spark, tmp_path):
    wh = str(tmp_path)
    commit_dump(spark, wh, "t", "a", _task_write(spark, wh, "t", "a", _rows("a", 20), 2), SCHEMA, STATS)
    commit_dump(spark, wh, "t", "b", _task_write(spark, wh, "t", "b", _rows("b", 7), 2), SCHEMA, STATS)
    v = commit_dump(spark, wh, "t", "a", _task_write(spark, wh, "t", "a", _rows("a", 12, 100), 2), SCHEMA, STATS)
    assert v == 2
    assert _sorted(spark, wh, "t", "a") == _rows("a", 12, 100)
    assert _sorted(spark, wh, "t", "b") == _rows("b", 7)
    removed = [a["remove"] for a in _log(tmp_path / "t", 2) if "remove" in a]
    assert len(removed) == 2 and all(r["path"].startswith("dump_id=a/") for r in removed)
    (info,) = [a["commitInfo"] for a in _log(tmp_path / "t", 2) if "commitInfo" in a]
    assert info["operation"] == "WRITE" and info["operationParameters"]["predicate"] == "dump_id = 'a'"


def test_empty_dump_removes_its_rows(spark, tmp_path):
    wh = str(tmp_path)
    commit_dump(spark, wh, "t", "a", [write_part(file_target(spark, wh, "t", "a"), _arrow(_rows("a", 4)), SCHEMA)],
                SCHEMA)
    commit_dump(spark, wh, "t", "b", [write_part(file_target(spark, wh, "t", "b"), _arrow(_rows("b", 3)), SCHEMA)],
                SCHEMA)
    assert write_part(file_target(spark, wh, "t", "a"), _arrow([]), SCHEMA) is None
    assert write_part(file_target(spark, wh, "t", "a"), iter([]), SCHEMA) is None
    assert commit_dump(spark, wh, "t", "a", [None], SCHEMA) == 2
    assert read_dump(spark, wh, "t", "a").count() == 0 and read_dump(spark, wh, "t", "b").count() == 3
    # a dump without rows on a missing table still makes the table, empty
    assert commit_dump(spark, wh, "u", "a", [], SCHEMA) == 0
    assert spark.read.format("delta").load(str(tmp_path / "u")).columns == SCHEMA.names


def test_table_made_by_replace_dump_then_commit_dump_and_back(spark, tmp_path):
    wh = str(tmp_path)
    replace_dump(spark.createDataFrame(_rows("a", 9), DDL).repartition(3), wh, "t", "a", STATS)
    replace_dump(spark.createDataFrame(_rows("b", 5), DDL), wh, "t", "b", STATS)
    commit_dump(spark, wh, "t", "a", [write_part(file_target(spark, wh, "t", "a"), _arrow(_rows("a", 3, 50)),
                                                 SCHEMA, STATS)], SCHEMA, STATS)
    assert _sorted(spark, wh, "t", "a") == _rows("a", 3, 50)
    assert _sorted(spark, wh, "t", "b") == _rows("b", 5)
    replace_dump(spark.createDataFrame(_rows("a", 2, 70), DDL), wh, "t", "a", STATS)
    assert _sorted(spark, wh, "t", "a") == _rows("a", 2, 70)
    assert _sorted(spark, wh, "t", "b") == _rows("b", 5)
    assert last_version(spark, str(tmp_path / "t")) == 4


def test_a_table_not_partitioned_by_dump_is_refused_in_words(spark, tmp_path):
    """A table an older release wrote (one directory for every dump) is not written into: LayoutOutdated names the
    table and the upgrade command, and the table keeps its version."""
    wh = str(tmp_path)
    spark.createDataFrame(_rows("a", 3) + _rows("b", 3), DDL).write.format("delta").save(str(tmp_path / "t"))
    with pytest.raises(LayoutOutdated, match=r"table t was written before tables were partitioned by dump .*"
                                               r"run `python -m jobs.upgrade --warehouse .*` once"):
        commit_dump(spark, wh, "t", "a", [write_part(file_target(spark, wh, "t", "a"), _arrow(_rows("a", 1)),
                                                     SCHEMA)], SCHEMA)
    with pytest.raises(LayoutOutdated):
        replace_dump(spark.createDataFrame(_rows("a", 1), DDL), wh, "t", "a")
    assert last_version(spark, str(tmp_path / "t")) == 0


def test_dump_ids_with_escaped_characters_land_where_spark_puts_them(spark, tmp_path):
    """A dump id with ':' (escaped in a directory name) and '@', '+': task files go to the directory Spark's own
    writer uses for the same partition, and both writers' rows read back under the id."""
    wh, dump = str(tmp_path), "host:9876@b+1"
    replace_dump(spark.createDataFrame(_rows(dump, 3), DDL), wh, "t", dump, STATS)
    (spark_dir,) = {p.parent.name for p in (tmp_path / "t").glob("*/*.parquet")}
    commit_dump(spark, wh, "t", "other", [write_part(file_target(spark, wh, "t", "other"),
                                                     _arrow(_rows("other", 2)), SCHEMA, STATS)], SCHEMA, STATS)
    d = write_part(file_target(spark, wh, "t", dump), _arrow(_rows(dump, 2, 10)), SCHEMA, STATS)
    assert d["path"].split("/")[0] == spark_dir
    commit_dump(spark, wh, "t", dump, [d], SCHEMA, STATS)
    assert _sorted(spark, wh, "t", dump) == _rows(dump, 2, 10)
    assert _sorted(spark, wh, "t", "other") == _rows("other", 2)
    assert {p.parent.name for p in (tmp_path / "t").glob("*/*.parquet")} == {spark_dir, "dump_id=other"}


def test_schema_merge_adds_and_keeps_columns(spark, tmp_path):
    wh = str(tmp_path)
    commit_dump(spark, wh, "t", "a", [write_part(file_target(spark, wh, "t", "a"), _arrow(_rows("a", 4)), SCHEMA)],
                SCHEMA)
    wider = SCHEMA.append(pa.field("body_error", pa.string()))
    rows_b = [(*r, f"err {r[1]}") for r in _rows("b", 3)]
    commit_dump(spark, wh, "t", "b", [write_part(file_target(spark, wh, "t", "b"), _arrow(rows_b, wider), wider)],
                wider)
    df = spark.read.format("delta").load(str(tmp_path / "t"))
    assert df.columns == wider.names
    assert read_dump(spark, wh, "t", "a").where("body_error is null").count() == 4
    assert sorted(r.body_error for r in read_dump(spark, wh, "t", "b").collect()) == ["err 0", "err 1", "err 2"]
    narrower = pa.schema([f for f in SCHEMA if f.name != "detail"])
    commit_dump(spark, wh, "t", "b", [write_part(file_target(spark, wh, "t", "b"),
                                                 _arrow([r[:3] for r in _rows("b", 2)], narrower), narrower)],
                narrower)
    assert spark.read.format("delta").load(str(tmp_path / "t")).columns == wider.names
    assert [(r.detail, r.body_error) for r in read_dump(spark, wh, "t", "b").collect()] == [(None, None)] * 2
    assert read_dump(spark, wh, "t", "a").where("detail is not null").count() == 3
    clash = pa.schema([("dump_id", pa.string()), ("unit", pa.string())])
    with pytest.raises(TableWriteError):
        commit_dump(spark, wh, "t", "c", [], clash)


def test_files_for_another_dump_are_refused(spark, tmp_path):
    wh = str(tmp_path)
    d = write_part(file_target(spark, wh, "t", "a"), _arrow(_rows("a", 2)), SCHEMA)
    with pytest.raises(TableWriteError):
        commit_dump(spark, wh, "t", "b", [d], SCHEMA)
    with pytest.raises(ValueError):
        file_target(spark, "gs://bucket/wh", "t", "a")


def _race(spark, monkeypatch, wh: str, other: str):
    """Dumps a and b committed; then a's next commit with another writer's commit of `other` landing between its
    read and its write (once). Returns a's new file."""
    import jobs.delta_files as delta_files

    for d in ("a", "b"):
        commit_dump(spark, wh, "t", d, [write_part(file_target(spark, wh, "t", d), _arrow(_rows(d, 3)), SCHEMA,
                                                   STATS)], SCHEMA, STATS)
    theirs = write_part(file_target(spark, wh, "t", other), _arrow(_rows(other, 5, 500)), SCHEMA, STATS)
    real = delta_files._files_to_remove

    def meanwhile(*a, **kw):
        found = real(*a, **kw)
        monkeypatch.setattr(delta_files, "_files_to_remove", real)
        commit_dump(spark, wh, "t", other, [theirs], SCHEMA, STATS)
        return found

    monkeypatch.setattr(delta_files, "_files_to_remove", meanwhile)
    return write_part(file_target(spark, wh, "t", "a"), _arrow(_rows("a", 2, 900)), SCHEMA, STATS)


def test_a_concurrent_commit_of_the_same_dump_is_a_conflict_and_writes_nothing(spark, tmp_path, monkeypatch):
    """Another writer commits this dump's rows between this commit's read and its write: Delta's conflict check
    refuses ours (TableWriteError, exit 3 in a job), and it is not made again: the other writer's version stays."""
    wh = str(tmp_path)
    ours = _race(spark, monkeypatch, wh, "a")
    with pytest.raises(TableWriteError) as e:
        commit_dump(spark, wh, "t", "a", [ours], SCHEMA, STATS)
    assert "DELTA_CONCURRENT_APPEND" in str(e.value.__cause__)
    said = describe(e.value, "a")
    assert said is not None and said[1] == EXIT_BUSY and "another writer committed to table t" in said[0], said
    assert last_version(spark, str(tmp_path / "t")) == 2
    assert _sorted(spark, wh, "t", "a") == _rows("a", 5, 500)
    assert _sorted(spark, wh, "t", "b") == _rows("b", 3)
    # and once the other writer is done, the same commit goes through
    assert commit_dump(spark, wh, "t", "a", [ours], SCHEMA, STATS) == 3
    assert _sorted(spark, wh, "t", "a") == _rows("a", 2, 900)


def test_another_dumps_commit_meanwhile_is_no_conflict(spark, tmp_path, monkeypatch):
    """The tables are partitioned by dump, so a run of dump b committing between a's read and a's commit touches
    nothing a read: Delta takes a's commit as it is, once, on top of b's; both runs' rows are there."""
    wh = str(tmp_path)
    ours = _race(spark, monkeypatch, wh, "b")
    assert commit_dump(spark, wh, "t", "a", [ours], SCHEMA, STATS) == 3
    (info,) = [a["commitInfo"] for a in _log(tmp_path / "t", 3) if "commitInfo" in a]
    assert info["readVersion"] == 1  # read before b's commit (version 2), committed after it without a new try
    assert [a["commitInfo"]["operationParameters"]["predicate"] for a in _log(tmp_path / "t", 2)
            if "commitInfo" in a] == ["dump_id = 'b'"]
    assert _sorted(spark, wh, "t", "a") == _rows("a", 2, 900)
    assert _sorted(spark, wh, "t", "b") == _rows("b", 5, 500)


def test_two_runs_making_a_new_table_at_once_both_land(spark, tmp_path, monkeypatch):
    """Two dumps' first commits into a warehouse without the table (each commit makes the table it writes): the one
    whose transaction began before the other made it finds it made at its commit and goes on with that table;
    both dumps' rows land, once each, and the table is made once."""
    import jobs.delta_files as delta_files

    wh = str(tmp_path)
    real = delta_files.creation_metadata
    looks: list[int] = []

    def late(*args):  # b's run makes the table after a's transaction found none, before a's commit
        looks.append(1)
        monkeypatch.setattr(delta_files, "creation_metadata", real)
        commit_dump(spark, wh, "t", "b", [write_part(file_target(spark, wh, "t", "b"), _arrow(_rows("b", 3)),
                                                     SCHEMA, STATS)], SCHEMA, STATS)
        return real(*args)

    monkeypatch.setattr(delta_files, "creation_metadata", late)
    commit_dump(spark, wh, "t", "a", [write_part(file_target(spark, wh, "t", "a"), _arrow(_rows("a", 4)), SCHEMA,
                                                 STATS)], SCHEMA, STATS)
    assert looks == [1]  # the race happened
    assert _sorted(spark, wh, "t", "a") == _rows("a", 4)
    assert _sorted(spark, wh, "t", "b") == _rows("b", 3)
    creations = [v for v in range(last_version(spark, str(tmp_path / "t")) + 1)
                 if any("metaData" in a for a in _log(tmp_path / "t", v))]
    assert creations == [0]


def test_stats_max_is_the_largest_value_the_files_hold_or_unknown(spark, tmp_path):
    """A dump's largest `unit` from the log's file statistics equals the rows' own largest, for files the tasks
    wrote and files delta-spark wrote; a dump whose values are all null has none; a file without the statistic
    leaves it unknown (the caller reads the rows)."""
    from jobs.delta_files import stats_max

    wh = str(tmp_path)
    rows = _rows("a", 30) + _rows("a", 7, 5000)
    commit_dump(spark, wh, "t", "a", _task_write(spark, wh, "t", "a", rows, 3), SCHEMA, STATS)
    v = last_version(spark, str(tmp_path / "t"))
    assert stats_max(spark, wh, "t", "a", v, "unit") == (True, max(r[1] for r in rows))
    replace_dump(spark.createDataFrame(_rows("b", 12, 40), DDL).repartition(2), wh, "t", "b", STATS)
    assert stats_max(spark, wh, "t", "b", last_version(spark, str(tmp_path / "t")), "unit") == (True, 51)
    assert stats_max(spark, wh, "t", "a", v, "unit") == (True, 5006)  # the version read, not the newest
    nulls = [("c", None, "g", None), ("c", None, "g", "x")]
    commit_dump(spark, wh, "t", "c", [write_part(file_target(spark, wh, "t", "c"), _arrow(nulls), SCHEMA, STATS)],
                SCHEMA, STATS)
    assert stats_max(spark, wh, "t", "c", last_version(spark, str(tmp_path / "t")), "unit") == (True, None)
    bare = write_part(file_target(spark, wh, "t", "d"), _arrow(_rows("d", 4)), SCHEMA, ["consumer_group"])
    commit_dump(spark, wh, "t", "d", [bare], SCHEMA, STATS)
    assert stats_max(spark, wh, "t", "d", last_version(spark, str(tmp_path / "t")), "unit") == (False, None)


def test_a_constant_column_is_the_value_on_every_row_or_null():
    from jobs.delta_files import constant

    for value, n in (("/backups/broker-a/2026-11-20", 5), ("", 3), ("é", 2), (None, 4), ("x", 0)):
        a = constant(value, n)
        a.validate(full=True)
        assert a.type == pa.string() and a.to_pylist() == [value] * n
