"""jobs.delta_log: a table's live files replayed from its `_delta_log` on the driver, held to delta-spark's own listing
of the same versions (checkpoints single and multi-part, replaced partitions, time travel, escaped partition values),
and None where it cannot answer exactly; the driver's small-table reads and writes built on it (jobs.delta_files)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from filterlib import tables
from jobs.delta_files import all_null, append_rows, dump_records, dump_rows, file_source, replace_rows
from jobs.delta_io import last_version, replace_dump
from jobs.delta_log import file_path, latest_version, live_files, location
from jobs.runs import read_dump, read_rows

pytestmark = pytest.mark.spark

DDL = "dump_id string, unit long, note string"


def _spark_files(spark, path: str, version: int, dump_id: str | None = None) -> list[str]:
    """delta-spark's own list of the table's (or one partition's) data files at a version, as local paths."""
    from pyspark.sql import functions as F

    df = spark.read.format("delta").option("versionAsOf", version).load(path)
    if dump_id is not None:
        df = df.where(F.col("dump_id") == dump_id)
    return sorted(urlsplit(u).path for u in df.inputFiles())  # Hadoop paths: the names as they are on disk


def _delta(spark, wh: str, table: str, dump_id: str, version: int):
    """One dump's rows of a table at a version as delta-spark reads them (the reference for the log's readers)."""
    from pyspark.sql import functions as F

    return (spark.read.format("delta").option("versionAsOf", version).load(f"{wh}/{table}")
            .where(F.col("dump_id") == dump_id))


def _mine(spark, path: str, version: int, dump_id: str | None = None) -> list[str]:
    found = live_files(spark, path, version)
    assert found is not None, f"no answer at version {version}"
    adds = found.adds if dump_id is None else found.partition("dump_id", dump_id)
    return sorted(file_path(location(spark, path), a) for a in adds)


def _write(spark, wh: str, dump_id: str, n: int, start: int = 0, parts: int = 2) -> None:
    df = spark.createDataFrame([(dump_id, i, f"n{i}") for i in range(start, start + n)], DDL).repartition(parts)
    replace_dump(df, wh, "t", dump_id)


def test_every_version_lists_what_delta_spark_lists(spark, tmp_path):
    """Commits replacing and adding partitions, a checkpoint every third version: at every version, for the whole
    table and for each dump (one with ':' in its id), the files are delta-spark's."""
    wh, path = str(tmp_path), str(tmp_path / "t")
    dumps = ["a", "b", "x:1"]
    _write(spark, wh, "a", 5)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '3')")
    for i in range(8):
        _write(spark, wh, dumps[i % 3], 3 + i, start=10 * i, parts=1 + i % 3)
    end = last_version(spark, path)
    assert any(p.name.endswith(".checkpoint.parquet") for p in (tmp_path / "t" / "_delta_log").iterdir())
    for v in range(end + 1):
        assert _mine(spark, path, v) == _spark_files(spark, path, v), v
    for d in dumps:
        assert _mine(spark, path, end, d) == _spark_files(spark, path, end, d), d
    # read_dump reads those files itself: the rows, columns and types delta-spark reads, at every version
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (added_later int)")
    _write_added(spark, wh, "b")
    for v in (0, 4, end, end + 2):
        for d in dumps + ["never"]:
            theirs = _delta(spark, wh, "t", d, v)
            mine = read_dump(spark, wh, "t", d, version=v)
            assert mine.schema == theirs.schema, (v, d)
            assert sorted(map(tuple, mine.collect())) == sorted(map(tuple, theirs.collect())), (v, d)
    assert live_files(spark, path, end).plain


def _spark_version(spark, path: str) -> int:
    """delta-spark's newest version of the table at path (-1: none)."""
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    return int(log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty()).version())


def test_the_newest_version_is_delta_sparks_or_none(spark, tmp_path):
    """The log's listing gives delta-spark's newest version after each commit (checkpoints among them), -1 where no
    table is; None where it cannot be sure: the newest commit's checksum missing, a staged commit, a URI it cannot
    reach."""
    wh, path = str(tmp_path), str(tmp_path / "t")
    assert latest_version(spark, path) == -1 == _spark_version(spark, path)
    _write(spark, wh, "a", 3)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    seen = [latest_version(spark, path)]
    for i in range(4):
        _write(spark, wh, "ab"[i % 2], 2 + i, start=10 * i)
        seen.append(latest_version(spark, path))
        assert seen[-1] == _spark_version(spark, path) == last_version(spark, path) > seen[-2]
    log = tmp_path / "t" / "_delta_log"
    assert any(p.name.endswith(".checkpoint.parquet") for p in log.iterdir())
    assert latest_version(spark, "gs://bucket/wh/t") is None
    end = seen[-1]
    staged = log / "_staged_commits" / f"{end + 1:020d}.0b7e1f4a-uuid.json"
    staged.parent.mkdir(exist_ok=True)
    staged.write_text("{}")
    assert latest_version(spark, path) is None
    staged.unlink()
    (log / f"{end:020d}.crc").unlink()
    assert latest_version(spark, path) is None
    assert last_version(spark, path) == end  # delta-spark answers then


def _write_added(spark, wh: str, dump_id: str) -> None:
    """A dump's rows written after the column added_later was: older files lack it (read as null)."""
    df = spark.createDataFrame([(dump_id, 1000 + i, f"m{i}", i) for i in range(3)],
                               "dump_id string, unit long, note string, added_later int")
    replace_dump(df, wh, "t", dump_id)


def test_a_multi_part_checkpoint_is_read_whole(spark, tmp_path):
    wh, path = str(tmp_path), str(tmp_path / "t")
    _write(spark, wh, "a", 4, parts=3)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    spark.conf.set("spark.databricks.delta.checkpoint.partSize", "2")
    try:
        for i in range(3):
            _write(spark, wh, f"d{i}", 3, parts=2)
    finally:
        spark.conf.unset("spark.databricks.delta.checkpoint.partSize")
    names = [p.name for p in (tmp_path / "t" / "_delta_log").iterdir()]
    assert any(".checkpoint.0000000001.00000000" in n for n in names), names
    end = last_version(spark, path)
    assert _mine(spark, path, end) == _spark_files(spark, path, end)


def test_what_it_cannot_answer_is_none(spark, tmp_path):
    """A commit gone from the log after the last checkpoint, deletion vectors, a URI it cannot reach: None, so
    the caller asks delta-spark."""
    wh, path = str(tmp_path), str(tmp_path / "t")
    for i in range(3):
        _write(spark, wh, "a", 3, start=i)
    assert live_files(spark, path, 2) is not None
    (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").unlink()
    assert live_files(spark, path, 2) is None
    assert live_files(spark, "gs://bucket/wh/t", 0) is None

    dv = str(tmp_path / "dv")
    spark.createDataFrame([("a", 1, "x")], DDL).write.format("delta").partitionBy("dump_id") \
        .option("delta.enableDeletionVectors", "true").save(dv)
    assert live_files(spark, dv, last_version(spark, dv)) is None


def test_small_tables_written_and_read_by_the_driver_equal_sparks(spark, tmp_path):
    """replace_rows / append_rows write what delta-spark reads back; dump_rows reads what delta-spark reads;
    dump_records counts what Spark counts; all_null sees a column no row holds."""
    wh = str(tmp_path)
    stats = [{"dump_id": "d", "consumer_group": f"g{i}", "topic": "T", "subscription_index": i, "units_scanned": 10 * i}
             for i in range(3)]
    replace_rows(spark, wh, tables.GROUP_STATS, "d", stats)
    replace_rows(spark, wh, tables.GROUP_STATS, "e", stats[:1])
    replace_rows(spark, wh, tables.GROUP_STATS, "d", stats[1:])  # replaces d's rows, leaves e's
    runs = [{"run_id": f"r{i}", "job": "j", "finished_at": i, "tables": {"t": i}, "inputs": {}} for i in range(2)]
    for r in runs:
        append_rows(spark, wh, tables.RUNS, "d", [r])
    for table, dump, n in (("group_stats", "d", 2), ("group_stats", "e", 1), ("runs", "d", 2)):
        path = str(tmp_path / table)
        v = last_version(spark, path)
        theirs = sorted((r.asDict(recursive=True) for r in _delta(spark, wh, table, dump, v).collect()), key=repr)
        mine = sorted(dump_rows(spark, wh, table, dump, v), key=repr)
        assert mine == theirs and len(mine) == n, table
        assert dump_records(spark, wh, table, dump, v) == n
    assert [r["subscription_index"] for r in sorted(dump_rows(spark, wh, "group_stats", "d", 2),
                                                    key=lambda r: r["subscription_index"])] == [1, 2]
    assert dump_rows(spark, wh, "runs", "d", 0)[0]["tables"] == {"t": 0}  # the first commit made the table

    for where in (("units_scanned", ">=", 20), ("subscription_index", "in", [0, 2]), ("units_scanned", ">=", 99)):
        column, op, value = where
        cond = F.col(column).isin(value) if op == "in" else F.col(column) >= value
        theirs = sorted(r.asDict() for r in _delta(spark, wh, "group_stats", "d", 2).where(cond)
                        .select("subscription_index", "units_scanned").collect())
        mine = sorted(dump_rows(spark, wh, "group_stats", "d", 2, ["units_scanned", "subscription_index"], where),
                      key=lambda r: r["subscription_index"])
        assert mine == theirs and len(mine) == {">=": 1 if value == 20 else 0, "in": 1}[op], where

    source = file_source(spark, None, wh, "group_stats", "d", last_version(spark, str(tmp_path / "group_stats")))
    assert source is not None and len(source.paths) == 1
    assert all_null(source, "not_a_column")  # a file without the column holds no value in it
    assert all_null(source, "answer") and not all_null(source, "topic")
    import pyarrow.parquet as pq

    nulls = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"body": pa.array([None, None], pa.binary())}), nulls)
    assert all_null(type(source)((nulls,)), "body")
    pq.write_table(pa.table({"body": pa.array([None, None], pa.binary())}), nulls, write_statistics=False)
    assert not all_null(type(source)((nulls,)), "body")  # no statistics: it cannot say


def test_a_table_not_partitioned_by_dump_has_no_dump_files(spark, tmp_path):
    """An older release's layout (dump_id a plain column): the log cannot name a dump's files, so the readers go
    to delta-spark (jobs.upgrade reads such a warehouse's runs table)."""
    path = str(tmp_path / "runs")
    spark.createDataFrame([("d", 1, "x")], DDL).write.format("delta").save(path)
    found = live_files(spark, path, 0)
    assert found is not None and len(found.adds) == 1 and found.partition("dump_id", "d") is None
    assert dump_rows(spark, str(tmp_path), "runs", "d", 0) is None
    assert dump_records(spark, str(tmp_path), "runs", "d", 0) is None
    # read_rows answers through Spark then, with the same columns and condition
    assert read_rows(spark, str(tmp_path), "runs", "d", version=0, columns=["unit"], where=("unit", ">=", 1)) == [
        {"unit": 1}]
    assert read_rows(spark, str(tmp_path), "runs", "d", version=0, where=("unit", "in", [2])) == []


def test_key_ranges_and_least_since_equal_a_scan_of_every_row(tmp_path):
    """The bounds job 2 takes from row-group statistics equal the bounds of every row, whether a row group holds one
    queue (statistics), several (its rows read), or has no statistics at all."""
    import random

    from jobs.delta_files import FileSource, key_ranges, least_since

    rng = random.Random(7)
    rows = []
    for topic in ("TopicA", "TopicB", "T" * 80):  # a long name: statistics equal at min and max must stay exact
        for queue in range(3):
            n = rng.randrange(1, 40)
            first = rng.randrange(0, 100)
            rows += [(topic, queue, first + i, rng.randrange(0, 1 << 40)) for i in range(n)]
    rows.sort()
    keys = ("topic", "queue_id")
    plain, summed = [], []
    for i, (lo, hi, group, stats) in enumerate(((0, 60, 7, True), (60, len(rows) - 30, 25, True),
                                                (len(rows) - 30, len(rows), 10, False))):
        plain.append(_units_file(tmp_path / f"part-{i}.parquet", rows[lo:hi], group, stats))
        # as job 1 writes them: in commit log order (queues share row groups), a key summary in the footer
        summed.append(_units_file(tmp_path / f"summed-{i}.parquet", sorted(rows[lo:hi], key=lambda r: r[3]), 4,
                                  stats, summary=True))
    sources = [FileSource(tuple(plain)), FileSource(tuple(summed)), FileSource((plain[0], summed[1], plain[2]))]
    expected: dict = {}
    for t, q, off, _ in rows:
        lo, hi = expected.get((t, q), (off, off))
        expected[(t, q)] = (min(lo, off), max(hi, off))
    for source in sources:
        assert key_ranges(source, keys, "queue_offset") == expected
    for trial in range(20):
        starts = {k: (None if rng.random() < 0.3 else rng.randrange(lo - 5, hi + 5))
                  for k, (lo, hi) in expected.items() if rng.random() < 0.6}
        want = min((c for t, q, off, c in rows if (t, q) in starts
                    and (starts[(t, q)] is None or off >= starts[(t, q)])), default=None)
        for source in sources:
            assert least_since(source, keys, "queue_offset", starts, "commit_log_offset") == want, (trial, starts)


def _units_file(path, rows: list, group: int, stats: bool, summary: bool = False) -> str:
    """(topic, queue_id, queue_offset, commit_log_offset) rows as a Parquet file of `group`-row row groups, with
    job 1's key summary in its footer when `summary`."""
    import pyarrow.parquet as pq

    from jobs.delta_files import key_summary

    table = pa.table({"topic": [r[0] for r in rows], "queue_id": pa.array([r[1] for r in rows], pa.int32()),
                      "queue_offset": pa.array([r[2] for r in rows], pa.int64()),
                      "commit_log_offset": [r[3] for r in rows]})
    if summary:
        table = table.replace_schema_metadata(key_summary(table, ("topic", "queue_id"),
                                                          ("queue_offset", "commit_log_offset")))
    pq.write_table(table, str(path), row_group_size=group, write_statistics=stats)
    return str(path)


def test_a_key_summary_answers_for_its_file_and_declines_what_it_cannot_tell(tmp_path):
    """The footer's key summary is what the bounds are read from (a summary that differs from the rows is what
    they say), and where a queue's start falls inside its offsets, or its offsets have nulls, the rows answer."""
    import pyarrow.parquet as pq

    from jobs.delta_files import FileSource, key_ranges, key_summary, least_since

    keys, cols = ("topic", "queue_id"), ("queue_offset", "commit_log_offset")
    rows = [("T", 0, 10, 500), ("T", 1, 3, 510), ("T", 0, 11, 520), ("T", 1, 4, 530), ("T", 0, 12, 540)]
    path = _units_file(tmp_path / "u.parquet", rows, 2, True)
    told = pa.table({"topic": ["T"], "queue_id": pa.array([0], pa.int32()), "queue_offset": pa.array([7], pa.int64()),
                     "commit_log_offset": [1]})
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata(key_summary(told, keys, cols)), str(tmp_path / "told.parquet"))
    source = FileSource((str(tmp_path / "told.parquet"),))
    assert key_ranges(source, keys, "queue_offset") == {("T", 0): (7, 7)}
    assert least_since(source, keys, "queue_offset", {("T", 0): 5}, "commit_log_offset") == 1
    # the true summary: inside a queue's offsets the rows answer; null offsets are no row at or after a start
    summed = FileSource((_units_file(tmp_path / "s.parquet", rows, 2, True, summary=True),))
    assert key_ranges(summed, keys, "queue_offset") == {("T", 0): (10, 12), ("T", 1): (3, 4)}
    assert least_since(summed, keys, "queue_offset", {("T", 0): 11, ("T", 1): 5}, "commit_log_offset") == 520
    assert least_since(summed, keys, "queue_offset", {("T", 0): 13, ("T", 1): 3}, "commit_log_offset") == 510
    with_null = pa.table({"topic": ["T", "T"], "queue_id": pa.array([0, 0], pa.int32()),
                          "queue_offset": pa.array([None, 20], pa.int64()), "commit_log_offset": [1, 2]})
    pq.write_table(with_null.replace_schema_metadata(key_summary(with_null, keys, cols)), str(tmp_path / "n.parquet"))
    nulls = FileSource((str(tmp_path / "n.parquet"),))
    assert least_since(nulls, keys, "queue_offset", {("T", 0): 0}, "commit_log_offset") == 2
    assert least_since(nulls, keys, "queue_offset", {("T", 0): None}, "commit_log_offset") == 1
