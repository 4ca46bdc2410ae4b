"""Progress of a long Spark step in the job's log (issue 28 item 6): the words of one line, the lines a running
step logs every period, read from Spark's own status tracker, and what both jobs' steps count so far."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

from jobs.progress import EVERY, duration, period, progress, progress_line

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"


def test_a_line_says_done_of_total_the_rate_and_the_time_left() -> None:
    assert progress_line("replay", "stage 3", 10, 40, 0, 0.0) == "replay: stage 3: 10 of 40 tasks done (25 %)"
    assert progress_line("replay", "stage 3", 10, 40, 12, 30.0) == \
        "replay: stage 3: 10 of 40 tasks done (25 %), 0.40 tasks/s, about 75 s left"
    assert progress_line("replay", "stage 3", 10, 40, 1, 30.0).endswith("0.03 tasks/s, about 15 min left")
    assert progress_line("replay", "stage 3", 10, 40, 0, 30.0) == \
        "replay: stage 3: 10 of 40 tasks done (25 %), none finished in the last 30 s"
    assert progress_line("r", "s", 1_000, 1_000, 5, 30.0) == "r: s: 1,000 of 1,000 tasks done (100 %)"
    assert [duration(s) for s in (0.4, 119, 121, 7140, 7260, 12_000)] == \
        ["0 s", "119 s", "2 min", "119 min", "2 h 1 min", "3 h 20 min"]
    assert progress_line("decode", "stage 2", 3, 8, 3, 30.0, {"records": 1_234_567}) == \
        "decode: stage 2: 3 of 8 tasks done (37 %), 0.10 tasks/s, about 50 s left; so far 1,234,567 records"
    assert progress_line("r", "s", 8, 8, 0, 0.0, {"decisions": 0, "delivered": 12}) == \
        "r: s: 8 of 8 tasks done (100 %); so far 0 decisions, 12 delivered"


def test_the_period_is_30_s_unless_the_environment_says_otherwise(monkeypatch) -> None:
    monkeypatch.delenv("RMQ_REPLAY_PROGRESS_EVERY", raising=False)
    assert period() == EVERY == 30.0
    for given, want in (("5", 5.0), ("0.25", 0.25), ("0", EVERY), ("-3", EVERY), ("soon", EVERY)):
        monkeypatch.setenv("RMQ_REPLAY_PROGRESS_EVERY", given)
        assert period() == want, given


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))


@pytest.mark.spark
def test_a_running_step_logs_its_stage_every_period(spark) -> None:
    """Twelve tasks of 0.4 s on two cores (2.4 s at least) under a 0.5 s period: several lines, each naming the
    stage and its tasks done of 12, never fewer than the line before; once tasks finish between two looks, the rate
    and the time left; nothing after the block ends."""
    log = logging.getLogger("test_progress")
    log.setLevel(logging.INFO)
    handler = _Lines()
    log.addHandler(handler)
    try:
        with progress(spark, log, "sleepy", every=0.5):
            spark.sparkContext.parallelize(range(12), 12).map(lambda x: time.sleep(0.4) or x).collect()
        end = time.monotonic()
        time.sleep(1.2)
    finally:
        log.removeHandler(handler)
    lines = [text for _, text in handler.lines]
    assert len(lines) >= 3 and all(t <= end + 0.1 for t, _ in handler.lines), lines
    pattern = re.compile(r"sleepy: stage \d+ \(collect\): (\d+) of 12 tasks done \(\d+ %\)")
    done = [int(m.group(1)) for line in lines if (m := pattern.match(line))]
    assert len(done) == len(lines) and done == sorted(done), lines
    assert any(re.search(r"tasks/s, about \d+ s left$", line) for line in lines), lines


@pytest.mark.spark
def test_a_step_says_what_its_finished_tasks_counted(spark) -> None:
    """Twelve tasks each adding 10 to an accumulator: every line's count so far is a multiple of 10 that never
    goes down and never passes what the finished tasks added; some line counts more than nothing."""
    log = logging.getLogger("test_progress_counted")
    log.setLevel(logging.INFO)
    handler = _Lines()
    log.addHandler(handler)
    items = spark.sparkContext.accumulator(0)

    def work(x):
        time.sleep(0.4)
        items.add(10)
        return x

    try:
        with progress(spark, log, "counted", every=0.5, counted={"items": items}):
            spark.sparkContext.parallelize(range(12), 12).map(work).collect()
    finally:
        log.removeHandler(handler)
    pattern = re.compile(r"counted: .*: (\d+) of 12 tasks done .*; so far ([\d,]+) items$")
    seen = [(int(m.group(1)), int(m.group(2).replace(",", ""))) for _, t in handler.lines if (m := pattern.match(t))]
    assert len(seen) == len(handler.lines) >= 3, handler.lines
    counts = [n for _, n in seen]
    assert counts == sorted(counts) and all(n % 10 == 0 and n <= 120 for n in counts) and counts[-1] > 0, seen
    assert items.value == 120


@pytest.mark.spark
def test_both_jobs_say_records_and_decisions_so_far(spark, tmp_path, monkeypatch) -> None:
    """Job 1 on the demo dump in 32 KiB ranges and job 2 on it, with a line every 0.1 s: job 1's decode lines count
    the records of its finished ranges, job 2's replay lines the decisions of its finished queue pieces, never more
    than the run's own totals."""
    from jobs import build_queues, simulate_pull

    monkeypatch.setenv("RMQ_REPLAY_PROGRESS_EVERY", "0.1")
    wh = str(tmp_path / "wh")
    common = ["--store", str(DEMO / "dump"), "--broker-conf", str(DEMO / "broker.conf"), "--warehouse", wh,
              "--dump-id", "demo"]
    lines = {}
    for job, args in ((build_queues, ["--split-bytes", str(32 << 10)]),
                      (simulate_pull, ["--subscriptions", str(DEMO / "subscriptions.json")])):
        handler = _Lines()
        job.log.addHandler(handler)
        try:
            summary = job.run(spark, job.validate(job.parser().parse_args(common + args)))
        finally:
            job.log.removeHandler(handler)
        lines[job.PROG] = ([t for _, t in handler.lines], summary)
    decode, s1 = lines[build_queues.PROG]
    found = [int(m.group(1).replace(",", "")) for t in decode
             if (m := re.match(r"decode and dispatch 16 ranges in 16 tasks: stage \d+ .*; so far ([\d,]+) "
                               r"records$", t))]
    assert found and found == sorted(found) and found[-1] <= s1.records, decode
    replay, s2 = lines[simulate_pull.PROG]
    found = [int(m.group(1).replace(",", "")) for t in replay
             if (m := re.match(r"replay \d+ queues: stage \d+ .*; so far ([\d,]+) decisions$", t))]
    assert found and found == sorted(found) and found[-1] <= s2.decisions, replay
