"""Progress of a long Spark step in the job's log: while the step runs, every `every` seconds a line says how many of
each running stage's tasks are done (ranges, queue pieces), what the finished tasks did so far (records decoded,
decisions made: Spark accumulators the tasks add to as they end), the rate and the time left, so a terminal,
spark-submit's output and Airflow's task log never go silent for the hours a large dump's replay takes."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EVERY = 30.0
"""Seconds between two progress lines of a step, unless $RMQ_REPLAY_PROGRESS_EVERY says otherwise."""


def period() -> float:
    """The seconds between two progress lines: $RMQ_REPLAY_PROGRESS_EVERY when it is a positive number, else
    EVERY."""
    try:
        given = float(os.environ.get("RMQ_REPLAY_PROGRESS_EVERY", EVERY))
    except ValueError:
        return EVERY
    return given if given > 0 else EVERY


def duration(seconds: float) -> str:
    """'45 s', '12 min', '3 h 20 min': a time left in words."""
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def progress_line(what: str, stage: str, done: int, total: int, finished: int, seconds: float,
                  so_far: Mapping[str, int] | None = None) -> str:
    """One stage's progress in words: done of total tasks and, from the `finished` tasks of the last `seconds`
    (since the stage was first seen; 0 seconds on that first look), the rate and the time left; then what the
    finished tasks counted (`so_far`: name -> count, e.g. records, decisions)."""
    pct = 100 * done // total if total else 100
    line = f"{what}: {stage}: {done:,} of {total:,} tasks done ({pct} %)"
    if 0 < seconds and done < total:
        if finished <= 0:
            line = f"{line}, none finished in the last {duration(seconds)}"
        else:
            rate = finished / seconds
            line = f"{line}, {rate:.2f} tasks/s, about {duration((total - done) / rate)} left"
    if so_far:
        line = f"{line}; so far " + ", ".join(f"{n:,} {name}" for name, n in so_far.items())
    return line


@contextmanager
def progress(spark: SparkSession, log: logging.Logger, what: str, every: float | None = None,
             counted: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Log the progress of the Spark stages the block runs, every `every` seconds, from a daemon thread that reads
    the status tracker (nothing is logged for a block that ends sooner). The rate is the tasks finished since the
    stage was first seen, over the time since. `counted` names accumulators the block's tasks add to (their
    values reach the driver as each task ends): each line says their totals so far. `every` defaults to
    period()."""
    every = period() if every is None else every
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
                so_far = {name: int(acc.value) for name, acc in (counted or {}).items()}
                log.info("%s", progress_line(what, f"stage {sid} ({info.name.split(' at ')[0]})",
                                             info.numCompletedTasks, info.numTasks,
                                             info.numCompletedTasks - done0, now - t0, so_far))

    thread = threading.Thread(target=report, name=f"progress-{what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
