"""What every job entry point shares: the one-line input error, the defaults file, logging, the job's session."""

from __future__ import annotations

import json
import logging
import os
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The checkout, the site-packages of an install, or `make dist`'s --py-files zip (then ROOT is the .zip itself and
# the defaults files are its members conf/*.json: load_defaults reads them from the archive).
ROOT = Path(__file__).resolve().parent.parent


class InputError(Exception):
    """Bad input found before any Spark work: one line for the user, exit code 2."""


def _zip_member(path: Path) -> tuple[Path, str] | None:
    """(archive, member) when `path` lies inside a zip file (e.g. <dist>/rocketmq_filter_replay.zip/conf/x.json)."""
    for parent in path.parents:
        if parent.is_file():
            return (parent, path.relative_to(parent).as_posix()) if zipfile.is_zipfile(parent) else None
    return None


def _read_text(path: str) -> str:
    """A file's text, also when the path lies inside a zip on sys.path (how --py-files ships the code)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError) as e:
        inside = _zip_member(Path(path))
        if inside is None:
            raise OSError(e.errno, e.strerror) from None
        archive, member = inside
        try:
            with zipfile.ZipFile(archive) as z:
                return z.read(member).decode("utf-8")
        except KeyError:
            raise OSError(f"no member {member} in {archive}") from None


def load_defaults(path: str | os.PathLike) -> dict[str, Any]:
    """A job's defaults file (a JSON object); InputError naming the file when it is missing or malformed.

    The path may lie inside the --py-files zip (`make dist` packs conf/*.json beside filterlib/ and jobs/)."""
    path = str(path)
    try:
        data = json.loads(_read_text(path))
    except OSError as e:
        raise InputError(f"{path}: cannot read the defaults file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason})") from None
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
