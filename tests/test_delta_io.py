"""jobs.delta_io.replace_dump: one dump's rows replaced in one commit, file statistics only where lookups need them."""

from __future__ import annotations

import json
from pathlib import Path

from jobs.delta_io import STATS_PROPERTY, append_dump, replace_dump
from jobs.runs import read_dump


def _rows(spark, dump_id: str, n: int):
    return spark.createDataFrame([(dump_id, i, f"g{i % 3}", f"detail {i}") for i in range(n)],
                                 "dump_id string, unit long, consumer_group string, detail string")


def _last_add_stats(table: Path) -> list[dict]:
    """The stats of the files the newest commit added."""
    newest = sorted((table / "_delta_log").glob("*.json"))[-1]
    actions = [json.loads(line) for line in newest.read_text().splitlines()]
    return [json.loads(a["add"]["stats"]) for a in actions if "add" in a]


def _properties(spark, table: Path) -> dict:
    return {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{table}`").collect()}


def test_stats_only_for_the_given_columns(spark, tmp_path):
    wh = str(tmp_path)
    replace_dump(_rows(spark, "a", 10), wh, "t", "a", ["dump_id", "unit"])
    stats = _last_add_stats(tmp_path / "t")
    assert stats and all(set(s["minValues"]) == {"unit"} for s in stats)  # dump_id: the partition directory
    assert _properties(spark, tmp_path / "t")[STATS_PROPERTY] == "unit"
    # A lookup on a column with statistics still finds its row.
    assert read_dump(spark, wh, "t", "a").where("unit = 7").count() == 1


def test_default_keeps_statistics_for_every_column(spark, tmp_path):
    replace_dump(_rows(spark, "a", 5), str(tmp_path), "t", "a")
    stats = _last_add_stats(tmp_path / "t")
    assert all(set(s["minValues"]) == {"unit", "consumer_group", "detail"} for s in stats)


def test_a_table_made_without_the_setting_gets_it_and_keeps_other_dumps(spark, tmp_path):
    wh = str(tmp_path)
    replace_dump(_rows(spark, "a", 4), wh, "t", "a")
    replace_dump(_rows(spark, "b", 6), wh, "t", "b", ["dump_id", "consumer_group"])
    assert _properties(spark, tmp_path / "t")[STATS_PROPERTY] == "consumer_group"
    assert all(set(s["minValues"]) == {"consumer_group"} for s in _last_add_stats(tmp_path / "t"))
    replace_dump(_rows(spark, "b", 3), wh, "t", "b", ["dump_id", "consumer_group"])
    assert read_dump(spark, wh, "t", "a").count() == 4
    assert read_dump(spark, wh, "t", "b").count() == 3


def test_a_table_from_an_older_release_takes_new_columns_and_keeps_dropped_ones(spark, tmp_path):
    """A warehouse written before a column was added (or after one was dropped) is replaced without a schema
    error: the new column is null on the other dumps' rows, a dropped one null on the new rows."""
    wh = str(tmp_path)
    replace_dump(_rows(spark, "a", 4), wh, "t", "a")
    b = _rows(spark, "b", 3)
    replace_dump(b.withColumn("body_error", b.detail), wh, "t", "b")
    assert read_dump(spark, wh, "t", "b").where("body_error is not null").count() == 3
    assert read_dump(spark, wh, "t", "a").where("body_error is null").count() == 4
    replace_dump(_rows(spark, "b", 2).drop("detail"), wh, "t", "b")
    assert [r.detail for r in read_dump(spark, wh, "t", "b").collect()] == [None, None]
    assert read_dump(spark, wh, "t", "a").where("detail is not null").count() == 4


def test_an_append_with_a_column_new_to_the_table_keeps_the_held_rows_null_in_it(spark, tmp_path):
    """A broker's history written before a column existed (e.g. `copy`) is appended to: the rows it held stay,
    null in the new column, and the new rows hold it."""
    from pyspark.sql import functions as F

    from jobs.delta_io import last_version, table_path

    wh = str(tmp_path)
    replace_dump(_rows(spark, "a", 4), wh, "t", "a")
    held = last_version(spark, table_path(wh, "t"))
    new = _rows(spark, "a", 2).withColumn("unit", F.col("unit") + 10).withColumn("copy", F.lit("c2"))
    append_dump(new, wh, "t", "a", held)
    rows = {r.unit: r.copy for r in read_dump(spark, wh, "t", "a").collect()}
    assert rows == {0: None, 1: None, 2: None, 3: None, 10: "c2", 11: "c2"}


def test_another_dumps_run_committing_during_a_write_is_no_conflict(spark, tmp_path):
    """Two runs of different dumps writing one table at the same moment: dump b's run commits while dump a's write
    is under way (a Python UDF keeps the write going for seconds and marks its first row). The table is
    partitioned by dump, so Delta's own conflict check finds nothing of a's partition touched and takes a's commit
    as it is, written once: both dumps' rows, once each."""
    import threading
    import time

    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    wh, table = str(tmp_path), tmp_path / "t"
    replace_dump(_rows(spark, "a", 4), wh, "t", "a")
    replace_dump(_rows(spark, "b", 4), wh, "t", "b")
    started = tmp_path / "a-started"

    @F.udf(LongType())
    def slowly(unit):
        started.touch()
        time.sleep(1.0)
        return unit

    ours = _rows(spark, "a", 16).coalesce(1).withColumn("unit", slowly("unit"))
    done: dict = {}
    writer = threading.Thread(target=lambda: done.setdefault("path", replace_dump(ours, wh, "t", "a")))
    writer.start()
    deadline = time.monotonic() + 120
    while not started.exists():
        assert writer.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    replace_dump(_rows(spark, "b", 2), wh, "t", "b")  # commits while a's write runs
    writer.join(300)
    assert done.get("path") == str(table)
    commits = [[json.loads(line) for line in p.read_text().splitlines()]
               for p in sorted((table / "_delta_log").glob("*.json"))]
    assert len(commits) == 5  # the table made, a, b, b's second run, then a's write: once
    assert "dump_id = 'b'" in json.dumps(commits[3]) and "dump_id = 'a'" in json.dumps(commits[4])
    (info,) = [a["commitInfo"] for a in commits[4] if "commitInfo" in a]
    assert info["readVersion"] == 2  # a read the table before b's commit at version 3
    assert sorted(r.unit for r in read_dump(spark, wh, "t", "a").collect()) == list(range(16))
    assert sorted(r.unit for r in read_dump(spark, wh, "t", "b").collect()) == [0, 1]
