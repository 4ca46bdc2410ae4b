"""`make demo`'s runner (demo/run.py) on the bundled dump: both jobs' summaries, three explain answers of the
kinds it promises, the report written, and the paths it prints exist."""

from __future__ import annotations

import re

import pytest

from demo import run as demo_run

pytestmark = pytest.mark.spark


def test_demo_prints_summaries_explains_and_the_report(spark, tmp_path, capsys) -> None:
    report = demo_run.run(spark, tmp_path)
    out = capsys.readouterr().out
    # the counts of demo/README.md: the harness listing (968 records) and the real pull over the dump (5,399 units
    # scanned, 1,356 delivered in all)
    assert "records 968; consume-queue units 968" in out
    assert "decisions 5,399, delivered 1,356" in out
    assert out.count("python -m jobs.explain ") == 3
    assert "TAG_CLIENT_MISMATCH, decided by the client layer" in out and "String.hashCode collision" in out
    assert "SQL_ERROR, decided by the commit_log layer" in out and "NumberFormatException" in out
    assert "a bloom false positive" in out
    assert re.search(r"HTML report: (\S+)", out).group(1) == report
    assert open(report, encoding="utf-8").read().startswith("<!DOCTYPE html>")
    assert (tmp_path / "warehouse" / "group_stats" / "_delta_log").is_dir()
    # broker-a's history: day1 (torn inside its second file), day2 (the rest), day1 again (nothing new)
    assert "broker broker-a: this copy began the history: offsets 0 to " in out
    assert "the copy ends inside a record at offset" in out
    assert "broker broker-a: this copy continues the history: offsets " in out
    end = int(re.search(r"nothing new: the history of broker broker-a ends at offset (\d+)", out).group(1))
    messages = spark.read.format("delta").load(str(tmp_path / "warehouse" / "messages"))
    for dump in ("demo", "broker-a"):  # the history ends where the dump's last record does
        last = messages.where(f"dump_id = '{dump}'").orderBy("commit_log_offset", ascending=False).first()
        assert last.commit_log_offset + last.store_size == end, dump
