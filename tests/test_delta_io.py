"""jobs.delta_io.replace_dump: one dump's rows replaced in one commit, file statistics only where lookups need them."""

from __future__ import annotations

import json
from pathlib import Path

from jobs.delta_io import STATS_PROPERTY, replace_dump
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
    assert stats and all(set(s["minValues"]) == {"dump_id", "unit"} for s in stats)
    assert _properties(spark, tmp_path / "t")[STATS_PROPERTY] == "dump_id,unit"
    # A lookup on a column with statistics still finds its row.
    assert read_dump(spark, wh, "t", "a").where("unit = 7").count() == 1


def test_default_keeps_statistics_for_every_column(spark, tmp_path):
    replace_dump(_rows(spark, "a", 5), str(tmp_path), "t", "a")
    stats = _last_add_stats(tmp_path / "t")
    assert all(set(s["minValues"]) == {"dump_id", "unit", "consumer_group", "detail"} for s in stats)


def test_a_table_made_without_the_setting_gets_it_and_keeps_other_dumps(spark, tmp_path):
    wh = str(tmp_path)
    replace_dump(_rows(spark, "a", 4), wh, "t", "a")
    replace_dump(_rows(spark, "b", 6), wh, "t", "b", ["dump_id", "consumer_group"])
    assert _properties(spark, tmp_path / "t")[STATS_PROPERTY] == "dump_id,consumer_group"
    assert all(set(s["minValues"]) == {"dump_id", "consumer_group"} for s in _last_add_stats(tmp_path / "t"))
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


def test_a_write_that_loses_only_to_another_dumps_run_is_made_again(spark, tmp_path):
    """Two runs of different dumps writing one table at the same moment: dump b's run commits while dump a's write
    is under way (its files begin to appear; a Python UDF keeps the write going for seconds), Delta refuses a's
    commit as a concurrent append, and replace_dump writes a again on the new snapshot: both dumps' rows, once."""
    import threading
    import time

    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    wh, table = str(tmp_path), tmp_path / "t"
    replace_dump(_rows(spark, "a", 4), wh, "t", "a")
    replace_dump(_rows(spark, "b", 4), wh, "t", "b")
    before = {p.name for p in table.glob("*.parquet")}

    @F.udf(LongType())
    def slowly(unit):
        time.sleep(1.0)
        return unit

    ours = _rows(spark, "a", 8).coalesce(1).withColumn("unit", slowly("unit"))
    done: dict = {}
    writer = threading.Thread(target=lambda: done.setdefault("path", replace_dump(ours, wh, "t", "a")))
    writer.start()
    deadline = time.monotonic() + 120
    while not {p.name for p in table.glob("*.parquet")} - before:
        assert writer.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    replace_dump(_rows(spark, "b", 2), wh, "t", "b")  # commits while a's write runs
    writer.join(300)
    assert done.get("path") == str(table)
    commits = [[json.loads(line) for line in p.read_text().splitlines()]
               for p in sorted((table / "_delta_log").glob("*.json"))]
    assert len(commits) == 4  # a, b, b's second run, then a's write made again
    assert "dump_id = 'b'" in json.dumps(commits[2]) and "dump_id = 'a'" in json.dumps(commits[3])
    assert sorted(r.unit for r in read_dump(spark, wh, "t", "a").collect()) == list(range(8))
    assert sorted(r.unit for r in read_dump(spark, wh, "t", "b").collect()) == [0, 1]
