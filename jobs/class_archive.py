"""The driver JVM's class-data archive (AppCDS): a local session's JVM maps the classes it loads at start from one
file instead of reading and verifying them one by one.

    python -m jobs.class_archive [--force]      (`make setup` runs it)

Why: a local session and its first Spark job took ~9.5 s from a cold start on the 2-core reference machine, most of
it loading some 15,000 classes, and every command a user runs by hand (explain, report, a job) pays it; with the
archive ~5.8 s (docs/performance.md, "The readers"). The archive is written once by a short training run (a
session and one Spark job) in a JVM started with -XX:ArchiveClassesAtExit, then renamed into place whole.
`jobs.spark.build_session` passes -XX:SharedArchiveFile to a local session's driver, before any driver Java options
the caller gives, when the archive of this Java and these Spark jars exists; a JVM that cannot use it (other jars
on its class path) starts as it would without one, silently. Under spark-submit the JVM is already running:
nothing changes there.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""An archive the JVM cannot use, or classes it cannot archive, are not the user's concern: no JVM log lines."""


def archive_dir() -> Path:
    """Where the archive lives (override with $RMQ_REPLAY_JVM_DIR)."""
    return Path(os.environ.get("RMQ_REPLAY_JVM_DIR", _ROOT / ".cache" / "jvm"))


def _java() -> Path | None:
    """The java Spark's launcher runs: $JAVA_HOME/bin/java, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and os.path.exists(found) else None


def archive_path() -> Path | None:
    """The archive for this Java and this pyspark's jars (named by a digest of both); None without a java."""
    import pyspark

    java = _java()
    if java is None:
        return None
    h = hashlib.sha256()
    for f in [java, *sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))]:
        st = f.stat()
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return archive_dir() / f"driver-{h.hexdigest()[:16]}.jsa"


def driver_options() -> str | None:
    """The driver JVM options that map the archive, when it exists."""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path is not None and path.is_file() else None


_CDS_FLAGS = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")
"""Options by which a caller chose its own class-data sharing: then the archive is not added."""


def with_archive(conf: dict[str, str]) -> dict[str, str]:
    """`conf` with the archive's options before any driver Java options it gives (unchanged when the archive does
    not exist, or the options already choose their own class-data sharing)."""
    options = driver_options()
    given = conf.get("spark.driver.extraJavaOptions", "")
    if options is None or any(flag in given for flag in _CDS_FLAGS):
        return conf
    return {**conf, "spark.driver.extraJavaOptions": f"{options} {given}".strip()}


def _train(out: str) -> None:
    """The training run, in its own process: the JVM writes the classes it loaded to `out` when it exits. A session
    and one job with a shuffle: a longer run (both jobs over the demo dump, 50 s) archived more classes but started
    no faster (job 1's cold run 16.2-16.8 s either way; explain 0.4 s less)."""
    from jobs.spark import build_session

    spark = build_session("class-archive", master="local[2]",
                          conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={out} {QUIET}",
                                "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    proc = spark.sparkContext._gateway.proc
    spark.range(1000).selectExpr("id % 3 as k").groupBy("k").count().collect()
    spark.stop()
    proc.stdin.close()  # the gateway JVM exits when its stdin closes, writing the archive first
    proc.wait(timeout=300)


def build(force: bool = False) -> Path | None:
    """Write the archive unless it exists (or `force`); return its path (None: no java to archive for)."""
    path = archive_path()
    if path is None or (path.is_file() and not force):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "jobs.class_archive", "--train", str(tmp)], cwd=_ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(_ROOT)})
    if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"class archive: the training run failed (exit {proc.returncode}): "
                           f"{(proc.stdout + proc.stderr)[-2000:]}")
    os.replace(tmp, path)  # whole or not at all: a JVM never maps a half-written archive
    print(f"class archive: {path} ({path.stat().st_size >> 20} MiB) in {time.monotonic() - started:.0f} s")
    return path


def main(argv: list[str] | None = None) -> int:
    """Write the archive (`make setup`)."""
    p = argparse.ArgumentParser(prog="python -m jobs.class_archive",
                                description="Write the class-data archive local Spark sessions start from "
                                            "(about 4 s less per cold start); kept per Java and Spark jars.")
    p.add_argument("--force", action="store_true", help="write it again even if it exists")
    p.add_argument("--train", metavar="OUT", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.train:
        _train(args.train)
        return 0
    existing = archive_path()
    if existing is not None and existing.is_file() and not args.force:
        print(f"class archive: {existing} (up to date)")
    elif build(args.force) is None:
        print("class archive: no java found ($JAVA_HOME or PATH): nothing to write")
    return 0


if __name__ == "__main__":
    sys.exit(main())
