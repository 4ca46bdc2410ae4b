"""What every job entry point shares: the one-line input error, the defaults file, logging, the job's session."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent


class InputError(Exception):
    """Bad input found before any Spark work: one line for the user, exit code 2."""


def load_defaults(path: str) -> dict[str, Any]:
    """A job's defaults file (a JSON object); InputError naming the file when it is missing or malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read the defaults file ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object of defaults")
    return data


def check_file(path: str | None, what: str) -> None:
    """InputError when an optional input file is given but missing or unreadable."""
    if path is None:
        return
    if not os.path.isfile(path):
        raise InputError(f"{path}: {what} not found or not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: {what} is not readable")


def job_logger(prog: str) -> logging.Logger:
    """The job's logger: one timestamped line per stage on stderr."""
    log = logging.getLogger(prog)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s " + prog + ": %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def job_session(app_name: str, defaults: dict[str, Any], master: str | None) -> SparkSession:
    """The job's own SparkSession (jobs.spark's builder) with the defaults file's settings."""
    from jobs.spark import build_session

    spark = build_session(app_name, master=master or defaults.get("master"),
                          conf={k: str(v) for k, v in (defaults.get("spark_conf") or {}).items()})
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run_main(prog: str, prepare: Callable[[], Any], app_name: Callable[[Any], str], defaults: Callable[[Any], dict],
             master: str | None, work: Callable[[SparkSession, Any], Any], spark: SparkSession | None) -> int:
    """Validate (InputError → one line, exit 2), start Spark if no session is given (failure → one line, exit 1),
    run, print the summary's lines; an InputError raised by the run (e.g. a warehouse without the dump) is exit 2."""
    try:
        inputs = prepare()
    except InputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    own = spark is None
    if own:
        try:
            spark = job_session(app_name(inputs), defaults(inputs), master)
        except Exception as e:  # the session builder's own errors (no Delta jars, no Java) are one line too
            print(f"{prog}: error: cannot start Spark: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                  file=sys.stderr)
            return 1
    try:
        summary = work(spark, inputs)
    except InputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    finally:
        if own:
            spark.stop()
    for line in summary.lines():
        print(line)
    return 0
