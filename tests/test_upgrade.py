"""jobs.upgrade on a warehouse the release before the partitioning wrote (tests/data/README.md says how it was
made: job 1 and job 2 of that release on the demo dump as `day1`, job 1 as `day2`): both jobs refuse it in one
sentence, the upgrade lays out every table by dump losing no row, and the jobs then write into it again."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from pyspark.sql.types import MapType, StringType

from filterlib import tables
from filterlib.store.properties_text import SQL_MAP, from_text, to_text
from jobs import build_queues, row_forms, upgrade
from jobs.delta_io import last_version, partition_columns, table_path
from jobs.runs import pinned_versions, read_dump

ROOT = Path(__file__).resolve().parent.parent
OLD = ROOT / "tests" / "data" / "warehouse-before-partitioning.tar.gz"
DEMO = ROOT / "demo"
DUMPS = ("day1", "day2")
WRITTEN = ("messages", "consume_queue", "consumer_filters", "dump_files", "dumps", "pull_decisions",
           "decision_details", "decision_codes", "pulls", "group_stats")


@pytest.fixture
def old_wh(tmp_path) -> str:
    with tarfile.open(OLD) as tar:
        tar.extractall(tmp_path, filter="data")
    return str(tmp_path / "oldwh")


def _rows(spark, wh: str, table: str, dump: str) -> list[dict]:
    """A dump's rows of a table as readers see them (the last complete run's version), in key order."""
    key = [k for k in tables.TABLES[table].key if k != "dump_id"] or ["dump_id"]
    return read_dump(spark, wh, table, dump).orderBy(*key).toArrow().to_pylist()


def _as_text(rows: list[dict]) -> list[dict]:
    """Messages rows with a map's properties as the text job 1 writes (`to_text`, the map's order)."""
    return [{**r, "properties": to_text(dict(r["properties"])) if isinstance(r["properties"], list)
             else r["properties"]} for r in rows]


def _versions(wh: str) -> dict[str, int]:
    return {t: max(int(p.stem) for p in (Path(wh) / t / "_delta_log").glob("*.json"))
            for t in (*WRITTEN, "runs")}


def _job1(spark, wh: str, dump: str) -> int:
    return build_queues.main(["--store", str(DEMO / "dump"), "--broker-conf", str(DEMO / "broker.conf"),
                              "--warehouse", wh, "--dump-id", dump], spark=spark)


def test_the_jobs_refuse_an_old_warehouse_in_one_sentence_and_write_nothing(spark, old_wh, capsys):
    before = _versions(old_wh)
    assert _job1(spark, old_wh, "day1") == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "build_queues: error: " in last, last
    assert f"{old_wh}: tables " in last and "consume_queue" in last and "messages" in last and "runs" in last
    assert f"run `python -m jobs.upgrade --warehouse {old_wh}` once, then run again" in last
    assert _versions(old_wh) == before


def test_the_upgrade_lays_out_every_table_by_dump_and_loses_no_row(spark, old_wh, capsys):
    present = [t for t in WRITTEN if partition_columns(spark, table_path(old_wh, t)) is not None]
    assert set(present) == set(WRITTEN)
    before = {(t, d): _rows(spark, old_wh, t, d) for t in present for d in DUMPS}
    assert before[("messages", "day2")] and before[("pull_decisions", "day1")] and not before[("pulls", "day2")]

    assert all(isinstance(r["properties"], list) for r in before[("messages", "day2")])  # that release's map

    assert upgrade.main(["--warehouse", old_wh], spark=spark) == 0
    out = capsys.readouterr().out
    assert f"{old_wh}: {len(present) + 1} tables partitioned by dump: " in out, out
    assert "messages: the properties rewritten from a map to text (version " in out, out
    assert "dumps whose last run now names the new versions: day1, day2" in out
    for t in (*present, "runs"):
        assert partition_columns(spark, table_path(old_wh, t)) == ["dump_id"], t
        props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{table_path(old_wh, t)}`").collect()}
        assert "dump_id" not in props.get("delta.dataSkippingStatsColumns", "").split(","), t
    for (t, d), rows in before.items():
        assert _rows(spark, old_wh, t, d) == (_as_text(rows) if t == "messages" else rows), (t, d)
    runs = spark.read.format("delta").load(table_path(old_wh, "runs")).where("job = 'upgrade'").collect()
    assert sorted(r.dump_id for r in runs) == list(DUMPS)
    for r in runs:  # every table the dump's runs named, at the version the upgrade wrote
        assert all(v == last_version(spark, table_path(old_wh, t)) for t, v in r.tables.items()), r.tables
    assert set(next(r for r in runs if r.dump_id == "day1").tables) == set(WRITTEN)

    assert upgrade.main(["--warehouse", old_wh], spark=spark) == 0
    assert "already partitioned by dump (11 tables) and the messages' properties are text; nothing to do" in (
        capsys.readouterr().out)


def _without_copy(rows: list[dict]) -> list[dict]:
    """Rows without the `copy` column, which tables written before it lack until a job writes them again."""
    return [{k: v for k, v in r.items() if k != "copy"} for r in rows]


def test_after_the_upgrade_the_jobs_write_again_and_other_dumps_stay(spark, old_wh):
    assert upgrade.main(["--warehouse", old_wh], spark=spark) == 0
    day1 = {t: _rows(spark, old_wh, t, "day1") for t in WRITTEN}
    day2 = _rows(spark, old_wh, "messages", "day2")
    assert _job1(spark, old_wh, "day2") == 0
    # the same dump decoded again: the same rows, the text job 1 writes equal to the text the upgrade made of the map
    again = _rows(spark, old_wh, "messages", "day2")
    assert _without_copy(again) == day2 and all(r["copy"] is None for r in again)  # not a broker's history
    assert isinstance(spark.read.format("delta").load(table_path(old_wh, "messages")).schema["properties"].dataType,
                      StringType)
    mapped = {r.commit_log_offset: dict(r.properties) for r in row_forms.messages(spark, old_wh, "day2").collect()}
    assert mapped == {r["commit_log_offset"]: from_text(r["properties"]) for r in day2} and any(mapped.values())
    assert {t: _without_copy(_rows(spark, old_wh, t, "day1")) for t in WRITTEN} == day1
    log = Path(old_wh) / "messages" / "_delta_log"
    newest = max(log.glob("*.json"), key=lambda p: int(p.stem))
    adds = [json.loads(x)["add"] for x in newest.read_text().splitlines() if '"add"' in x]
    assert adds and all(a["path"].startswith("dump_id=day2/") for a in adds)


def test_a_laid_out_warehouse_with_the_properties_as_a_map_gets_them_as_text(spark, tmp_path, capsys):
    """A warehouse written after the partitioning but before the text form: job 1 keeps writing the map there; the
    upgrade rewrites only messages, every dump's map as the text job 1 writes, and each dump's last run names the
    new version; job 1 then writes text there."""
    from pyspark.sql import functions as F

    wh = str(tmp_path / "wh")
    assert _job1(spark, wh, "day1") == 0
    written = _rows(spark, wh, "messages", "day1")
    path = table_path(wh, "messages")
    as_map = spark.read.format("delta").load(path).withColumn("properties", F.expr(SQL_MAP))
    as_map.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy("dump_id").save(path)
    assert _job1(spark, wh, "day2") == 0  # the same dump again, its properties written as the table's map
    assert isinstance(spark.read.format("delta").load(path).schema["properties"].dataType, MapType)
    mapped = {r.commit_log_offset: dict(r.properties) for r in row_forms.messages(spark, wh, "day2").collect()}
    assert mapped == {r["commit_log_offset"]: from_text(r["properties"]) for r in written} and any(mapped.values())
    pinned = {d: pinned_versions(spark, wh, d) for d in ("day1", "day2")}

    assert upgrade.main(["--warehouse", wh], spark=spark) == 0
    out = capsys.readouterr().out
    version = last_version(spark, path)
    assert "every table is already partitioned by dump (" in out and "tables partitioned by dump:" not in out, out
    assert f"messages: the properties rewritten from a map to text (version {version})" in out, out
    for d in ("day1", "day2"):
        assert pinned_versions(spark, wh, d) == {**pinned[d], "messages": version}
        assert [{**r, "dump_id": "day1"} for r in _rows(spark, wh, "messages", d)] == written
    assert _job1(spark, wh, "day1") == 0  # job 1 writes text into it again: the same rows
    assert _rows(spark, wh, "messages", "day1") == written
    assert isinstance(spark.read.format("delta").load(path).schema["properties"].dataType, StringType)


def test_an_empty_directory_is_not_a_warehouse(spark, tmp_path, capsys):
    assert upgrade.main(["--warehouse", str(tmp_path)], spark=spark) == 2
    assert "no table of the jobs here" in capsys.readouterr().err
