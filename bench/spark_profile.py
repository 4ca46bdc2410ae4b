"""Where a Spark job's time goes: its own log lines as stage marks, Spark's REST API per job description, and the
CPU the rest of the machine used meanwhile (the noise figure)."""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

HZ = os.sysconf("SC_CLK_TCK")


class LogMarks(logging.Handler):
    """Records (monotonic time, message) of a job logger's lines; `lines()` gives the time since the previous mark."""

    def __init__(self, *names: str):
        super().__init__(logging.INFO)
        self.marks: list[tuple[float, str]] = []
        for name in names:
            lg = logging.getLogger(name)
            lg.addHandler(self)
            lg.setLevel(logging.INFO)
            lg.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        self.marks.append((time.monotonic(), record.getMessage()))

    def start(self) -> float:
        self.marks.clear()
        t = time.monotonic()
        self.marks.append((t, "start"))
        return t

    def steps(self, end: float) -> list[tuple[str, float]]:
        """(what ended at the mark, seconds since the previous mark), plus the tail to `end`."""
        out = []
        for (t0, _), (t1, msg) in zip(self.marks, self.marks[1:], strict=False):
            out.append((msg.split(":")[0], t1 - t0))
        if self.marks:
            out.append(("after the last log line", end - self.marks[-1][0]))
        return out


def _tree_ticks(root: int) -> int:
    """utime + stime (clock ticks) of `root` and every live descendant."""
    children: dict[int, list[int]] = defaultdict(list)
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        rest = text[text.rindex(")") + 2:].split()
        pid = int(name)
        children[int(rest[1])].append(pid)
        ticks[pid] = int(rest[11]) + int(rest[12])
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack += children.get(pid, [])
    return total


def _machine_busy() -> int:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]  # minus idle and iowait


def _own_ticks() -> int:
    r = os.times()
    return _tree_ticks(os.getpid()) + round((r.children_user + r.children_system) * HZ)


@dataclass
class CpuMeter:
    """CPU used by this process tree and by everything else on the machine between start and stop."""

    t0: float = 0.0
    busy0: int = 0
    own0: int = 0
    seconds: float = 0.0
    own_cores: float = 0.0
    other_cores: float = 0.0
    load: list[float] = field(default_factory=list)

    def start(self) -> CpuMeter:
        self.t0, self.busy0, self.own0 = time.monotonic(), _machine_busy(), _own_ticks()
        return self

    def stop(self) -> CpuMeter:
        self.seconds = time.monotonic() - self.t0
        busy, own = _machine_busy() - self.busy0, _own_ticks() - self.own0
        self.own_cores = own / HZ / self.seconds
        self.other_cores = max(0.0, (busy - own) / HZ / self.seconds)
        self.load = list(os.getloadavg())
        return self

    def text(self) -> str:
        return f"ours {self.own_cores:.2f} cores, others {self.other_cores:.2f} cores"


def _get(url: str) -> list[dict]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def spark_jobs(sc, after_job: int) -> tuple[list[dict], int]:
    """Per job description (the jobs set one per stage): wall seconds (union of its jobs' spans), task seconds and
    task CPU seconds summed over its stages, for the jobs with id > after_job; and the last job id seen."""
    url = sc.uiWebUrl
    if not url:
        return [], after_job
    base = f"{url}/api/v1/applications/{sc.applicationId}"
    try:
        jobs = [j for j in _get(f"{base}/jobs") if j["jobId"] > after_job]
        stages = {(s["stageId"], s["attemptId"]): s for s in _get(f"{base}/stages")}
    except OSError:
        return [], after_job
    by_stage: dict[int, list[dict]] = defaultdict(list)
    for (sid, _), s in stages.items():
        by_stage[sid].append(s)
    groups: dict[str, dict] = {}
    seen_stages: set[int] = set()
    for j in sorted(jobs, key=lambda j: j["jobId"]):
        desc = (j.get("description") or j.get("name") or "?").split(": ", 1)[-1]
        g = groups.setdefault(desc, {"what": desc, "spans": [], "task_s": 0.0, "cpu_s": 0.0, "jobs": 0})
        g["jobs"] += 1
        a, b = _ts(j.get("submissionTime")), _ts(j.get("completionTime"))
        if a is not None and b is not None:
            g["spans"].append((a, b))
        for sid in j.get("stageIds", []):
            if sid in seen_stages:
                continue
            seen_stages.add(sid)
            for s in by_stage.get(sid, []):
                g["task_s"] += s.get("executorRunTime", 0) / 1e3
                g["cpu_s"] += s.get("executorCpuTime", 0) / 1e9
    out = []
    for g in groups.values():
        spans, wall, end = sorted(g.pop("spans")), 0.0, float("-inf")
        for a, b in spans:
            if b > end:
                wall += b - max(a, end)
                end = b
        out.append({**g, "wall_s": wall})
    last = max([after_job] + [j["jobId"] for j in jobs])
    return out, last


def last_job_id(sc) -> int:
    _, last = spark_jobs(sc, -1)
    return last
