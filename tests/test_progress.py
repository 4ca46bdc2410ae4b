"""Progress of a long Spark step in the job's log (issue 28 item 6): the words of one line, and the lines a running
step logs every period, read from Spark's own status tracker."""

from __future__ import annotations

import logging
import re
import time

import pytest

from jobs.progress import duration, progress, progress_line


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
