"""A job run as its own process by a test (`python -m jobs.<name> ... --master local[2]`), as a user starts it.

Its driver JVM compiles with C1 only (SPARK_SUBMIT_OPTS, which Spark's launcher adds to a local or client-mode
driver's java command): such a run lives seconds on the small test dumps, and the JIT's C2 threads were about
half of a short-lived driver's CPU (test_history alone, its session's JVM: 133 CPU-s, 55 of them C2's). The
suite's own long-lived session keeps the default tiers, where C2's code pays for itself (C1 there: the suite
slower by a third). The job's code and its results are the same either way: only how the JVM compiles it differs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1"


def driver_opts() -> str:
    """SPARK_SUBMIT_OPTS for a job's driver: any already set, then C1 only."""
    return " ".join(o for o in (os.environ.get("SPARK_SUBMIT_OPTS", ""), SHORT_LIVED_JVM) if o)


def job_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a job process: the checkout on PYTHONPATH, the driver's JVM C1-only, then
    `extra`."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_SUBMIT_OPTS": driver_opts(), **(extra or {})}


def start_job(module: str, *args: str, env: Mapping[str, str] | None = None, **popen: object) -> subprocess.Popen:
    """`python -m <module> ARGS --master local[2]` in its own process group (a test can kill it and the JVM it
    started at once), stdout and stderr piped as text unless `popen` says otherwise."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen([sys.executable, "-m", module, *args, "--master", "local[2]"], cwd=ROOT,
                            env=job_env(env), start_new_session=True, **popen)
