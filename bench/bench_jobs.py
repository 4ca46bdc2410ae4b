"""Both jobs end to end (Spark, dispatch, Delta writes) beside the broker's own rebuild, measured in the same run.

Each job runs at two sizes of the same generated real-format dump (bench/jobs_dump.py: one topic, 8 queues, ~50
tags, region 8 values, level 4, amount 0-10000, a unique orderId), BENCH_JOBS_BYTES (1 GiB) and
BENCH_JOBS_LARGE_BYTES (4 GiB), and the figure that matters is the **marginal** cost: the difference between the two
runs' times over the difference in messages (job 1) or decisions (job 2), which leaves out what a run costs
whatever its size. That fixed cost is printed as the **floor**: both jobs on the 4 MiB warm-up dump once the session
is warm. Job 1 runs with K = 32 and 256 SQL92 filters registered in config/consumerFilter.json (bench_engine's
selectors; ext and CalcBitMap on) beside the real 5.3.3 broker rebuilding the 1 GiB commitlog (the harness's
`rebuild` mode: DefaultMessageStore.load() pinned to one core, best of BENCH_JOBS_REBUILD_REPEATS); and once more at
K = 32 with `--bodies`. Job 2 (`--queues rebuilt`) runs on job 1's K = 32 warehouses with 64 subscriptions (32 TAG,
32 registered SQL92). Spark runs local[2] on this 2-core machine: a rate per core is the whole machine's / 2.
Aims (issue 28): job 1 marginal >= 1.5x the broker per core at K = 32, >= 4x at K = 256; job 2 marginal >= 8 M
decisions/s per core; floors <= 2 s (job 1) and <= 4 s (job 2). Each run prints where its time went (the job's own
log lines as stage marks; Spark's REST API per stage description) and the CPU the rest of the machine used.

Knobs: BENCH_JOBS_BYTES (1G), BENCH_JOBS_LARGE_BYTES (4G), BENCH_JOBS_FILTERS ("32,256"),
BENCH_JOBS_REBUILD_REPEATS (3), BENCH_JOBS_PULL (1; 0 skips job 2), BENCH_JOBS_BODIES (1; 0 skips the --bodies
runs), BENCH_JOBS_HISTORY (1; 0 skips the history increment: the large dump's last file appended with --broker to a
history of its other files, against the fresh mid run, and the same copy again against the floor),
BENCH_JOBS_READERS (1; 0 skips the report over job 2's large warehouse and explain from a cold start),
BENCH_JOBS_MASTER (local[2]), BENCH_JOBS_DRIVER_MEMORY (4g), BENCH_JOBS_PROFILE (0; 1 runs cProfile in every
Python task and prints the top functions per run: slower figures), BENCH_CACHE_DIR (.cache/bench: dumps are
generated once and reused; warehouses are scratch, removed at the end).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from bench import jobs_dump
from bench.spark_profile import CpuMeter, LogMarks, last_job_id, spark_jobs
from filterlib.store.scan import hop_file

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("BENCH_CACHE_DIR", ROOT / ".cache" / "bench"))
PULL_GROUPS = 64


def _env_size(name: str, default: int) -> int:
    text = os.environ.get(name)
    return jobs_dump.parse_size(text) if text else default


def _dump(total: int) -> tuple[str, list[str], int, float]:
    root = str(CACHE / f"jobs-dump-{total}")
    t = time.perf_counter()
    paths = jobs_dump.generate(root, total)
    return root, paths, jobs_dump.records(root), time.perf_counter() - t


def _session(master: str, memory: str):
    from jobs.spark import build_session

    spark = build_session("bench_jobs", master=master, conf={
        "spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "true", "spark.ui.port": "4140",
        "spark.driver.memory": memory, "spark.sql.warehouse.dir": str(CACHE / "spark-warehouse")})
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _apply_defaults(spark, path: Path) -> None:
    """The job's defaults-file spark_conf, as far as a running session takes it (SQL settings)."""
    conf = json.loads(path.read_text()).get("spark_conf") or {}
    for k, v in conf.items():
        with contextlib.suppress(Exception):
            spark.conf.set(k, str(v))


def _scratch(name: str) -> str:
    path = CACHE / "jobs-wh" / name
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def _job1(spark, marks: LogMarks, store: str, warehouse: str, dump_id: str, bodies: bool = False,
          name: str = "--dump-id") -> dict:
    from jobs import build_queues

    _apply_defaults(spark, build_queues.DEFAULTS)
    args = build_queues.parser().parse_args(["--store", store, "--warehouse", warehouse, name, dump_id,
                                             "--broker-conf", os.path.join(store, "broker.conf")]
                                            + (["--bodies"] if bodies else []))
    inputs = build_queues.validate(args)
    _read_once(store)
    after = last_job_id(spark.sparkContext)
    cpu = CpuMeter().start()
    t0 = marks.start()
    summary = build_queues.run(spark, inputs)
    seconds = time.monotonic() - t0
    cpu.stop()
    if summary.nothing_new is not None:
        return {"seconds": seconds, "records": 0, "nothing_new": True, "cpu": cpu}
    assert not summary.issues and not summary.damaged and summary.units == summary.records, summary.lines()
    stages, _ = spark_jobs(spark.sparkContext, after)
    return {"seconds": seconds, "records": summary.records, "bitmaps": summary.bitmaps_written,
            "filters": summary.filters, "steps": marks.steps(t0 + seconds), "stages": stages, "cpu": cpu}


def _read_once(store: str) -> None:
    """Read the store's commitlog files once before a timed job 1, so that it reads them from the page cache as the
    broker's best repeat does (the bench writes gigabytes of tables between runs, which evict them: a profiled run
    at 4 GiB spent 16 of its 42 task-seconds in the files' reads)."""
    buf = bytearray(16 << 20)
    directory = os.path.join(store, "commitlog")
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def _job2(spark, marks: LogMarks, store: str, warehouse: str, dump_id: str, subs: str) -> dict:
    from jobs import simulate_pull

    _apply_defaults(spark, simulate_pull.DEFAULTS)
    args = simulate_pull.parser().parse_args(["--store", store, "--warehouse", warehouse, "--dump-id", dump_id,
                                              "--broker-conf", os.path.join(store, "broker.conf"),
                                              "--subscriptions", subs, "--queues", "rebuilt"])
    inputs = simulate_pull.validate(args)
    after = last_job_id(spark.sparkContext)
    cpu = CpuMeter().start()
    t0 = marks.start()
    summary = simulate_pull.run(spark, inputs)
    seconds = time.monotonic() - t0
    cpu.stop()
    ok = [p for p in summary.plans if p.ok]
    assert len(ok) == len(summary.plans) == PULL_GROUPS, [(p.group, p.answer) for p in summary.plans]
    if any(n.startswith("nothing new since job 2's last run") for n in summary.notes):
        return {"seconds": seconds, "decisions": 0, "nothing_new": True, "cpu": cpu}
    stages, _ = spark_jobs(spark.sparkContext, after)
    return {"seconds": seconds, "decisions": summary.decisions, "delivered": summary.delivered,
            "pulls": summary.pulls, "steps": marks.steps(t0 + seconds), "stages": stages, "cpu": cpu}


def _subscriptions(path: str, k: int) -> str:
    """64 subscriptions: 32 TAG (three of the ~50 tags each) and the K=32 store's 32 registered SQL92 groups."""
    import random

    from bench.bench_engine import TAGS

    rows = [{"group": f"TAG{g:02d}", "topic": jobs_dump.TOPIC, "type": "TAG",
             "expression": " || ".join(random.Random(g).sample(TAGS, 3))} for g in range(PULL_GROUPS - k)]
    rows += [{"group": s["group"], "topic": s["topic"], "type": "SQL92", "expression": s["expression"],
              "path": "registered", "sub_version": s["clientVersion"]} for s in jobs_dump.filter_specs(k)]
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)
    return path


def _rebuild(store: str, k: int, repeats: int) -> dict:
    tests_dir = str(ROOT / "tests")
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    import refharness

    payload = {"store": store, "repeats": repeats, "ext": True, "bloom": {"f": jobs_dump.BLOOM_F,
                                                                          "n": jobs_dump.bloom_n(k)},
               "filters": jobs_dump.filter_specs(k), "cpu": 0}
    cpu = CpuMeter().start()
    out = refharness.run("rebuild", payload, fresh=True, timeout=3600)
    cpu.stop()
    data = json.loads((out / "output.json").read_text(encoding="utf-8"))
    best = max(data["results"], key=lambda r: r["per_second"])
    return {"per_second": data["best_per_second"], "seconds": best["seconds"], "messages": best["messages"],
            "spread": [round(r["seconds"], 2) for r in data["results"]], "pinned": data.get("pinned"), "cpu": cpu}


def _hop(paths: list[str], repeat: int = 3) -> tuple[float, int]:
    best, n = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        n = sum(hop_file(p)[0] for p in paths)
        best = min(best, time.perf_counter() - t)
    return n / best, n


def _bench_pull() -> tuple[float | None, str]:
    """bench_pull's figure (M decisions/s, one core) in this run; pyarrow's thread count restored afterwards."""
    import pyarrow as pa

    from bench import bench_pull

    threads = pa.cpu_count()
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            bench_pull.main()
    finally:
        pa.set_cpu_count(threads)
    text = buf.getvalue().strip()
    m = re.search(r"([\d.]+) M decisions/s", text)
    return (float(m.group(1)) * 1e6 if m else None), text


def _print_profile(spark, on: bool, what: str, top: int = 14) -> None:
    """With BENCH_JOBS_PROFILE=1: per Python UDF of the last run, its cProfile total and top functions."""
    if not on:
        return
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        spark.profile.show(type="perf")
    spark.profile.clear()
    print(f"      Python task profile, {what} (cProfile in the workers, ordered by own time):")
    for block in buf.getvalue().split("Profile of ")[1:]:
        lines = block.splitlines()
        head = next((x.strip() for x in lines if "function calls" in x), "")
        rows = [x for x in lines if re.match(r"\s+[\d/]+\s+[\d.]+\s+[\d.]+", x)][:top]
        print(f"        {lines[0].strip()}: {head}")
        for x in rows:
            print(f"          {x.strip()}")


def _fmt_rate(r: float) -> str:
    return f"{r / 1e6:.2f} M" if r >= 1e6 else f"{r / 1e3:.0f} k"


def _steps_line(steps: list[tuple[str, float]], top: int = 6) -> str:
    total = sum(s for _, s in steps) or 1.0
    big = sorted(steps, key=lambda s: -s[1])[:top]
    return ", ".join(f"{what} {s:.1f} s ({s / total:.0%})" for what, s in big)


def _stages_lines(stages: list[dict], top: int = 6) -> list[str]:
    out = []
    for g in sorted(stages, key=lambda g: -g["wall_s"])[:top]:
        out.append(f"      {g['what'][:60]:<60} {g['wall_s']:6.1f} s wall  {g['task_s']:6.1f} s in tasks  "
                   f"{g['cpu_s']:6.1f} s JVM CPU  ({g['jobs']} Spark jobs)")
    return out


def _older_copy(store: str, keep: int) -> str:
    """A copy of a bench store holding only its first `keep` commitlog files (hard links, configs copied): the
    store as an earlier daily copy held it."""
    dest = CACHE / "jobs-wh" / f"older-{keep}"
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "commitlog").mkdir(parents=True)
    for f in sorted(os.listdir(os.path.join(store, "commitlog")))[:keep]:
        os.link(os.path.join(store, "commitlog", f), dest / "commitlog" / f)
    shutil.copytree(os.path.join(store, "config"), dest / "config")
    shutil.copy(os.path.join(store, "broker.conf"), dest / "broker.conf")
    return str(dest)


def _history(spark, marks: LogMarks, store: str, fresh: dict, per_msg: float, floor: dict, cores: int,
             subs: str | None) -> dict:
    """Issue 26's cost: the large store's last file appended (--broker) to a history of its other files, against a
    fresh run of the mid store (the same size as the increment); then the same copy again (nothing new) against
    the floor. With `subs`, job 2 after each job 1 run, continuing: its runs are returned, to be set against job 2's
    fresh runs."""
    files = len(os.listdir(os.path.join(store, "commitlog")))
    if files < 2:
        print("history: the large dump has one file; no increment to measure", flush=True)
        return {}
    wh = _scratch("history")
    older = _older_copy(store, files - 1)
    pulls = {}
    base = _job1(spark, marks, older, wh, "bench-history", name="--broker")
    if subs:
        pulls["base"] = _job2(spark, marks, older, wh, "bench-history", subs)
    inc = _job1(spark, marks, store, wh, "bench-history", name="--broker")
    if subs:  # twice from the same state: the first continued run in the session warms its plans' shapes, as the
        kept = f"{wh}-before"  # fresh replay it is set against had the fresh runs before it
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(wh, kept)
        pulls["cold"] = _job2(spark, marks, store, wh, "bench-history", subs)
        shutil.rmtree(wh)
        os.rename(kept, wh)
        pulls["inc"] = _job2(spark, marks, store, wh, "bench-history", subs)
    again = _job1(spark, marks, store, wh, "bench-history", name="--broker")
    assert again.get("nothing_new"), again
    if subs:
        pulls["again"] = _job2(spark, marks, store, wh, "bench-history", subs)
        assert pulls["again"].get("nothing_new"), pulls["again"]
    inc_marginal = (inc["seconds"] - floor["seconds"]) / max(1, inc["records"])
    print(f"history (K=32): a {files - 1}-file history ({base['records']:,} records, {base['seconds']:.1f} s), "
          f"then a copy adding its last file: {inc['records']:,} records in {inc['seconds']:.1f} s, against a fresh "
          f"run of the same size {fresh['seconds']:.1f} s ({inc['seconds'] / fresh['seconds']:.2f}x; aim <= 1.10x); "
          f"the increment's cost above the floor {inc_marginal * 1e6 * cores:.2f} us per message per core against "
          f"the marginal {per_msg * 1e6 * cores:.2f} ({inc_marginal / per_msg:.2f}x); the same copy again "
          f"(nothing new): {again['seconds']:.1f} s against the floor {floor['seconds']:.1f} s (aim <= 1x)",
          flush=True)
    _report_run(f"history increment ({inc['records']:,} records)", inc)
    shutil.rmtree(wh, ignore_errors=True)
    shutil.rmtree(older, ignore_errors=True)
    return pulls


def _history_pull(pulls: dict, fresh: dict, per_decision: float, floor: dict, cores: int) -> None:
    """Job 2's continued run over the history's increment against a fresh replay of the same size, and the run
    with nothing new against job 2's floor."""
    base, inc, again, cold = pulls["base"], pulls["inc"], pulls["again"], pulls["cold"]
    inc_marginal = (inc["seconds"] - floor["seconds"]) / max(1, inc["decisions"])
    print(f"history job 2: the history's first run {base['decisions']:,} decisions in {base['seconds']:.1f} s; "
          f"continued over the increment (the second of two runs from the same state; the first, the session's "
          f"first continued run: {cold['seconds']:.1f} s): {inc['decisions']:,} decisions in {inc['seconds']:.1f} s "
          f"against a fresh "
          f"replay of the same size {fresh['seconds']:.1f} s ({fresh['decisions']:,} decisions; "
          f"{inc['seconds'] / fresh['seconds']:.2f}x); above the floor {1 / inc_marginal / cores / 1e6:.2f} M "
          f"decisions/s per core against the marginal {1 / per_decision / cores / 1e6:.2f} M "
          f"({per_decision / inc_marginal:.2f}x); again with nothing new {again['seconds']:.1f} s against the floor "
          f"{floor['seconds']:.1f} s", flush=True)
    _report_run(f"history job 2 increment ({inc['decisions']:,} decisions)", inc)


def _readers(spark, warehouse: str, dump_id: str, job2: dict, master: str) -> None:
    """Issue 28 item 7: the report over job 2's large warehouse in the warm session against job 2's own time there
    (aim <= 10 %), and `explain` of one message from a cold start (a new process, as a user runs it; aim <= 15 s on
    a 16 GiB dump, measured here on the 4 GiB one)."""
    import subprocess

    from jobs import report

    t0 = time.monotonic()
    data = report.collect(spark, warehouse, dump_id)
    seconds = time.monotonic() - t0
    assert data, "the report collected nothing"
    print(f"readers: the report over {job2['decisions']:,} decisions {seconds:.1f} s, "
          f"{seconds / job2['seconds']:.0%} of job 2's {job2['seconds']:.1f} s (aim <= 10 %)", flush=True)
    queue = 3
    argv = [sys.executable, "-m", "jobs.explain", "--warehouse", warehouse, "--dump-id", dump_id, "--group", "G000",
            "--queue", f"{jobs_dump.TOPIC}:{queue}:{job2['decisions'] // PULL_GROUPS // 16}", "--master", master]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    print(f"readers: explain of one message from a cold start (a new process) {seconds:.1f} s (aim <= 15 s)",
          flush=True)


def _marginal(small: dict, large: dict, what: str) -> float:
    """Seconds per unit of `what` between two runs of one job: (t_large - t_small) / (n_large - n_small)."""
    return (large["seconds"] - small["seconds"]) / max(1, large[what] - small[what])


def _report_run(label: str, r: dict) -> None:
    print(f"      {label}: {r['seconds']:.1f} s; noise: {r['cpu'].text()}; load {r['cpu'].load[0]:.1f}", flush=True)
    print(f"        steps (log lines): {_steps_line(r['steps'])}", flush=True)
    for line in _stages_lines(r["stages"]):
        print("  " + line, flush=True)


def main() -> None:
    """Generate (or reuse) the dumps, then measure and print both jobs at two sizes, the floor and the broker."""
    mid = _env_size("BENCH_JOBS_BYTES", 1 << 30)
    large = _env_size("BENCH_JOBS_LARGE_BYTES", 4 << 30)
    ks = [int(x) for x in os.environ.get("BENCH_JOBS_FILTERS", "32,256").split(",") if x.strip()]
    repeats = max(1, int(os.environ.get("BENCH_JOBS_REBUILD_REPEATS", "3")))
    master = os.environ.get("BENCH_JOBS_MASTER", "local[2]")
    memory = os.environ.get("BENCH_JOBS_DRIVER_MEMORY", "4g")
    do_pull = os.environ.get("BENCH_JOBS_PULL", "1") != "0"
    do_bodies = os.environ.get("BENCH_JOBS_BODIES", "1") != "0"
    do_history = os.environ.get("BENCH_JOBS_HISTORY", "1") != "0"
    do_readers = os.environ.get("BENCH_JOBS_READERS", "1") != "0"
    m = re.fullmatch(r"local\[(\d+)\]", master)
    cores = int(m.group(1)) if m else (os.cpu_count() or 1)
    k_pull = 32 if 32 in ks or not ks else ks[0]
    aims = {32: 1.5, 256: 4.0}

    dumps = {}
    t = time.perf_counter()
    for name, total in (("mid", mid), ("large", large), ("floor", 4 << 20)):
        dumps[name] = _dump(total)
    for name in ("mid", "large"):
        _, paths, n, _ = dumps[name]
        size = sum(os.path.getsize(p) for p in paths)
        print(f"dump {name}: {size / 2**30:.2f} GiB, {n:,} records ({size / n:.0f} B each; 1 topic, 8 queues, 50 "
              f"tags, region/level/amount/orderId)", flush=True)
    print(f"dumps in {CACHE} ({time.perf_counter() - t:.1f} s to generate or reuse)", flush=True)
    hop_rate, hop_n = _hop(dumps["mid"][1])
    assert hop_n == dumps["mid"][2], (hop_n, dumps["mid"][2])
    print(f"size-only record hop over the 1 GiB file: {_fmt_rate(hop_rate)} msgs/s (one core, best of 3)", flush=True)

    spark = _session(master, memory)
    profile = os.environ.get("BENCH_JOBS_PROFILE", "0") != "0"
    marks = LogMarks("build_queues", "simulate_pull")
    print(f"Spark {master} on {os.cpu_count()} cores, driver heap {memory}; per core = whole machine / {cores}; "
          f"broker: harness rebuild (DefaultMessageStore.load(), ext + CalcBitMap on, bloom f=20 n=max(32,K)), one "
          f"pinned core, best of {repeats}", flush=True)
    t = time.perf_counter()  # warm-up: Spark's first jobs, Delta's first writes, the Python workers' imports
    warm = jobs_dump.store_root(dumps["floor"][0], 32)
    warm_wh = _scratch("warm")
    subs_warm = _subscriptions(str(CACHE / "jobs-wh" / "warm-subs.json"), 32)
    _job1(spark, marks, warm, warm_wh, "warm")
    if do_pull:
        _job2(spark, marks, warm, warm_wh, "warm", subs_warm)
    print(f"warm-up on the 4 MiB dump: {time.perf_counter() - t:.1f} s", flush=True)
    floor_wh = _scratch("floor")
    floor1 = _job1(spark, marks, warm, floor_wh, "floor")
    floor2 = _job2(spark, marks, warm, floor_wh, "floor", subs_warm) if do_pull else None
    print(f"floor (the 4 MiB dump again, warm session): job 1 {floor1['seconds']:.1f} s (aim <= 2 s, "
          f"{floor1['records']:,} records)" + (f", job 2 {floor2['seconds']:.1f} s (aim <= 4 s, "
                                               f"{floor2['decisions']:,} decisions)" if floor2 else ""), flush=True)
    if profile:  # cProfile in every Python task from here on: slower figures, but where the Python time goes
        spark.conf.set("spark.sql.pyspark.udf.profiler", "perf")
        spark.profile.clear()

    pull_wh: dict[str, str] = {}
    history_pulls: dict = {}
    subs = _subscriptions(str(CACHE / "jobs-wh" / "subs.json"), k_pull) if do_pull else None
    for k in ks:  # interleaved, so a busy spell on the machine hits job and broker alike
        broker = _rebuild(jobs_dump.store_root(dumps["mid"][0], k), k, repeats)
        runs = {}
        for name in ("mid", "large"):
            store = jobs_dump.store_root(dumps[name][0], k)
            wh = _scratch(f"k{k}-{name}")
            runs[name] = _job1(spark, marks, store, wh, f"bench-k{k}")
            _print_profile(spark, profile, f"job 1 K={k} {name}")
            if k == k_pull and do_pull:
                pull_wh[name] = wh
            else:
                shutil.rmtree(wh, ignore_errors=True)
        per_msg = _marginal(runs["mid"], runs["large"], "records")
        per_core = 1 / per_msg / cores
        ratio = per_core / broker["per_second"]
        aim = f" (aim >= {aims[k]:g}x)" if k in aims else ""
        print(f"K={k:<3d} job 1 marginal {per_msg * 1e6 * cores:.2f} us per message per core = "
              f"{_fmt_rate(per_core)}/core; broker {_fmt_rate(broker['per_second'])}/core (repeats "
              f"{broker['spread']} s, {broker['cpu'].text()}); marginal job/broker per core {ratio:.2f}x{aim}; "
              f"whole runs {runs['mid']['seconds']:.1f} s / {runs['large']['seconds']:.1f} s", flush=True)
        for name in ("mid", "large"):
            _report_run(f"job 1 K={k} {name} ({runs[name]['records']:,} records, {runs[name]['bitmaps']:,} "
                        f"bitmaps)", runs[name])
        if k == k_pull and do_history:
            history_pulls = _history(spark, marks, jobs_dump.store_root(dumps["large"][0], k), runs["mid"], per_msg,
                                     floor1, cores, subs if do_pull else None)
    if do_bodies:
        runs = {}
        for name in ("mid", "large"):
            wh = _scratch(f"bodies-{name}")
            runs[name] = _job1(spark, marks, jobs_dump.store_root(dumps[name][0], 32), wh, "bench-bodies",
                               bodies=True)
            shutil.rmtree(wh, ignore_errors=True)
        per_msg = _marginal(runs["mid"], runs["large"], "records")
        print(f"K=32 job 1 --bodies marginal {per_msg * 1e6 * cores:.2f} us per message per core = "
              f"{_fmt_rate(1 / per_msg / cores)}/core; whole runs {runs['mid']['seconds']:.1f} s / "
              f"{runs['large']['seconds']:.1f} s", flush=True)

    if do_pull and pull_wh:
        runs = {}
        for name in ("mid", "large"):
            runs[name] = _job2(spark, marks, jobs_dump.store_root(dumps[name][0], k_pull), pull_wh[name],
                               f"bench-k{k_pull}", subs)
            _print_profile(spark, profile, f"job 2 {name}")
            if name == "large" and do_readers:
                _readers(spark, pull_wh[name], f"bench-k{k_pull}", runs[name], master)
            shutil.rmtree(pull_wh[name], ignore_errors=True)
        per_decision = _marginal(runs["mid"], runs["large"], "decisions")
        core_rate, core_text = _bench_pull()
        rate = 1 / per_decision / cores
        line = (f"job 2: {PULL_GROUPS} subscriptions ({PULL_GROUPS - k_pull} TAG, {k_pull} SQL92 registered), "
                f"marginal {rate / 1e6:.2f} M decisions/s per core (aim >= 8 M)")
        if core_rate:
            line += f"; bench_pull's filterlib core {core_rate / 1e6:.2f} M/core, job/core {rate / core_rate:.3f}"
        print(line, flush=True)
        for name in ("mid", "large"):
            r = runs[name]
            _report_run(f"job 2 {name} ({r['decisions']:,} decisions, {r['delivered']:,} delivered, "
                        f"{r['pulls']:,} pulls)", r)
        print(f"      bench_pull: {core_text}", flush=True)
        if history_pulls:
            _history_pull(history_pulls, runs["mid"], per_decision, floor2, cores)
    spark.stop()
    shutil.rmtree(CACHE / "jobs-wh", ignore_errors=True)


if __name__ == "__main__":
    main()
