"""A throwaway Spark standalone cluster (one master, one worker) from the pyspark this venv installed, and
spark-submit runs against it: what tests/test_cluster.py and `make cluster-test` use.

pip's pyspark ships `bin/spark-class` but not `sbin/start-master.sh`, so the master and the worker are
`spark-class org.apache.spark.deploy.{master.Master,worker.Worker}` child processes, each in its own process group
(start_new_session) so stop() can kill the JVM and anything it forked. Ports are chosen free, every directory
(work, logs, local) lives under one scratch directory, and the web UIs listen on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
from support.job_process import SHORT_LIVED_JVM, driver_opts

SPARK_HOME = Path(pyspark.__file__).parent
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Standalone:
    """start() brings up master + worker and waits until the worker registered; stop() always cleans up."""

    scratch: Path
    cores: int = 2
    memory: str = "2g"
    master_port: int = field(default_factory=free_port)
    master_ui: int = field(default_factory=free_port)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def work_dir(self) -> Path:
        return self.scratch / "work"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(self.scratch / "logs"),
                   SPARK_WORKER_DIR=str(self.work_dir), SPARK_LOCAL_DIRS=str(self.scratch / "local"),
                   SPARK_DAEMON_MEMORY="512m", SPARK_WORKER_CORES=str(self.cores),
                   SPARK_WORKER_MEMORY=self.memory, SPARK_NO_DAEMONIZE="1",
                   SPARK_DAEMON_JAVA_OPTS=SHORT_LIVED_JVM)  # the master and worker schedule, they compute nothing
        for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
            env.pop(k, None)  # a pytest run under a live SparkContext must not leak its gateway into the daemons
        return env

    def _daemon(self, name: str, *args: str) -> None:
        log = open(self.scratch / "logs" / f"{name}.out", "wb")  # noqa: SIM115 (closed when the process ends)
        self.procs.append(subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=self.env(),
                                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True))

    def master_state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui}/json/", timeout=5) as r:
            return json.load(r)

    def start(self, timeout: float = 120) -> Standalone:
        for d in ("logs", "work", "local"):
            (self.scratch / d).mkdir(parents=True, exist_ok=True)
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.master_port), "--webui-port", str(self.master_ui))
        self._daemon("worker", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                     "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(self.cores),
                     "--memory", self.memory, "--work-dir", str(self.work_dir))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a standalone daemon exited ({p.returncode}): {self.logs()}")
            try:
                if self.master_state().get("aliveworkers", 0) >= 1:
                    return self
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the standalone worker did not register within {timeout:.0f} s: {self.logs()}")

    def logs(self) -> str:
        return " | ".join(f"{p.name}: {p.read_text(errors='replace')[-1500:]}"
                          for p in sorted((self.scratch / "logs").glob("*.out")))

    def stop(self) -> None:
        """SIGTERM each daemon's process group, SIGKILL what is left after 10 s. Safe to call twice."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        self.procs.clear()


def submit(args: list[str], *, cwd: Path, driver_python: str, executor_python: str | None = "./environment/bin/python",
           timeout: float = 900) -> subprocess.CompletedProcess:
    """`spark-submit ARGS` the way the README tells a cluster user, in its own process group (killed on timeout)."""
    env = dict(os.environ)
    for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
              "SPARK_HOME", "PYTHONPATH"):
        env.pop(k, None)
    if executor_python:
        env["PYSPARK_PYTHON"] = executor_python
    env["PYSPARK_DRIVER_PYTHON"] = driver_python
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_SUBMIT_OPTS"] = driver_opts()  # the client-mode driver lives seconds: C1 only
    proc = subprocess.Popen([str(VENV_BIN / "spark-submit"), *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise RuntimeError(f"spark-submit timed out after {timeout:.0f} s: {err[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
