"""Progress of a long Spark step in the job's log: while the step runs, every `every` seconds a line says how many of
each running stage's tasks are done, the rate and the time left, so a terminal, spark-submit's output and Airflow's
task log never go silent for the hours a large dump's replay takes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EVERY = 30.0
"""Seconds between two progress lines of a step."""


def duration(seconds: float) -> str:
    """'45 s', '12 min', '3 h 20 min': a time left in words."""
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def progress_line(what: str, stage: str, done: int, total: int, finished: int, seconds: float) -> str:
    """One stage's progress in words: done of total tasks and, from the `finished` tasks of the last `seconds`
    (since the stage was first seen; 0 seconds on that first look), the rate and the time left."""
    pct = 100 * done // total if total else 100
    head = f"{what}: {stage}: {done:,} of {total:,} tasks done ({pct} %)"
    if seconds <= 0 or done >= total:
        return head
    if finished <= 0:
        return f"{head}, none finished in the last {duration(seconds)}"
    rate = finished / seconds
    return f"{head}, {rate:.2f} tasks/s, about {duration((total - done) / rate)} left"


@contextmanager
def progress(spark: SparkSession, log: logging.Logger, what: str, every: float = EVERY) -> Iterator[None]:
    """Log the progress of the Spark stages the block runs, every `every` seconds, from a daemon thread that reads
    the status tracker (nothing is logged for a block that ends sooner). The rate is the tasks finished since the
    stage was first seen, over the time since."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    first: dict[int, tuple[float, int]] = {}

    def report() -> None:
        while not stop.wait(every):
            now = time.monotonic()
            for sid in sorted(tracker.getActiveStageIds()):
                info = tracker.getStageInfo(sid)
                if info is None or info.numTasks <= 0:
                    continue
                t0, done0 = first.setdefault(sid, (now, info.numCompletedTasks))
                log.info("%s", progress_line(what, f"stage {sid} ({info.name.split(' at ')[0]})",
                                             info.numCompletedTasks, info.numTasks,
                                             info.numCompletedTasks - done0, now - t0))

    thread = threading.Thread(target=report, name=f"progress-{what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
