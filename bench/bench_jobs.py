"""Both jobs end to end (Spark, dispatch, Delta writes) beside the broker's own rebuild, measured in the same run.

Job 1 (`jobs.build_queues.run`) on a generated ≥ 1 GiB real-format dump (bench/jobs_dump.py: one topic, 8 queues,
~50 tags, region 8 values, level 4, amount 0–10000, a unique orderId) with K = 0, 32, 256 SQL92 filters
registered in its config/consumerFilter.json (bench_engine's selectors, some naming orderId; ext and CalcBitMap on),
beside the real 5.3.3 broker rebuilding the same commitlog (the harness's `rebuild` mode: DefaultMessageStore.load()
pinned to one core, best of BENCH_JOBS_REBUILD_REPEATS). Spark runs local[2] on this 2-core machine: job 1's rate
per core is records / run() wall time / 2 (the Spark threads; Delta's commits and the driver count in the wall time).
Also: the whole-machine rate against the size-only record hop (one core) over the same file, how the time grows
with 10× the messages (the BENCH_JOBS_SMALL_BYTES dump, default a tenth) and with 8× the filters (32 → 256).
Job 2 (`jobs.simulate_pull.run`, `--queues rebuilt`) on the K=32 small-dump run's warehouse with 64 subscriptions
(32 TAG, 32 registered SQL92): decisions (scanned units × subscriptions) per core beside bench_pull's
filterlib-core figure. The floor: both jobs again on the 4 MiB warm-up dump once the session is warm, the time a run
costs whatever the dump's size, printed beside each aim turned into a whole-run time for the big dump (records /
(aim x the broker's per-core rate x cores)): an aim shorter than the floor cannot be met by a faster inner loop.
Each run prints where its time went (the job's own log lines as stage marks; Spark's REST
API per stage description) and the CPU the rest of the machine used meanwhile.

Knobs: BENCH_JOBS_BYTES (1G), BENCH_JOBS_SMALL_BYTES (a tenth), BENCH_JOBS_FILTERS ("0,32,256"),
BENCH_JOBS_REBUILD_REPEATS (3), BENCH_JOBS_PULL (1; 0 skips job 2), BENCH_JOBS_PULL_BYTES (job 2's dump: the small
one by default, as job 2 writes a row per decision and runs ~10 min on 1 GiB; the big size uses the big dump's
warehouse, another size a dump of its own), BENCH_JOBS_MASTER (local[2]), BENCH_JOBS_DRIVER_MEMORY (4g),
BENCH_JOBS_PROFILE (0; 1 runs cProfile in every Python task and prints the top functions per run: slower figures),
BENCH_CACHE_DIR (.cache/bench: dumps are generated once and reused; warehouses are scratch, removed at the end).
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
BROKER_NOTE = {0: 395e3, 32: 230e3, 256: 63e3}  # performance-notes.md, for reference only (not used in ratios)
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


def _job1(spark, marks: LogMarks, store: str, warehouse: str, dump_id: str) -> dict:
    from jobs import build_queues

    _apply_defaults(spark, build_queues.DEFAULTS)
    args = build_queues.parser().parse_args(["--store", store, "--warehouse", warehouse, "--dump-id", dump_id,
                                             "--broker-conf", os.path.join(store, "broker.conf")])
    inputs = build_queues.validate(args)
    after = last_job_id(spark.sparkContext)
    cpu = CpuMeter().start()
    t0 = marks.start()
    summary = build_queues.run(spark, inputs)
    seconds = time.monotonic() - t0
    cpu.stop()
    assert not summary.issues and not summary.damaged and summary.units == summary.records, summary.lines()
    stages, _ = spark_jobs(spark.sparkContext, after)
    return {"seconds": seconds, "records": summary.records, "bitmaps": summary.bitmaps_written,
            "filters": summary.filters, "steps": marks.steps(t0 + seconds), "stages": stages, "cpu": cpu}


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


def main() -> None:
    """Generate (or reuse) the dumps, then measure and print job 1, the broker rebuild, job 2 and bench_pull."""
    big = _env_size("BENCH_JOBS_BYTES", 1 << 30)
    small = _env_size("BENCH_JOBS_SMALL_BYTES", max(1 << 20, big // 10))
    ks = [int(x) for x in os.environ.get("BENCH_JOBS_FILTERS", "0,32,256").split(",") if x.strip()]
    repeats = max(1, int(os.environ.get("BENCH_JOBS_REBUILD_REPEATS", "3")))
    master = os.environ.get("BENCH_JOBS_MASTER", "local[2]")
    memory = os.environ.get("BENCH_JOBS_DRIVER_MEMORY", "4g")
    do_pull = os.environ.get("BENCH_JOBS_PULL", "1") != "0"
    pull_bytes = _env_size("BENCH_JOBS_PULL_BYTES", small)
    m = re.fullmatch(r"local\[(\d+)\]", master)
    cores = int(m.group(1)) if m else (os.cpu_count() or 1)
    k_pull = 32 if 32 in ks or not ks else ks[0]

    root, paths, n_big, t_gen = _dump(big)
    sroot, spaths, n_small, t_gen2 = _dump(small)
    wroot, _, _, _ = _dump(4 << 20)
    size = sum(os.path.getsize(p) for p in paths)
    print(f"dump: {size / 2**30:.2f} GiB, {n_big:,} records ({size / n_big:.0f} B each; 1 topic, 8 queues, 50 tags, "
          f"region/level/amount/orderId) and {small / 2**20:.0f} MiB, {n_small:,} records, in {CACHE} "
          f"({t_gen + t_gen2:.1f} s to generate or reuse)", flush=True)
    hop_rate, hop_n = _hop(paths)
    assert hop_n == n_big, (hop_n, n_big)
    print(f"size-only record hop over the same file: {_fmt_rate(hop_rate)} msgs/s (one core, best of 3)", flush=True)

    spark = _session(master, memory)
    profile = os.environ.get("BENCH_JOBS_PROFILE", "0") != "0"
    marks = LogMarks("build_queues", "simulate_pull")
    print(f"Spark {master} on {os.cpu_count()} cores, driver heap {memory}; job rate per core = records / run() wall "
          f"time / {cores}; broker: harness rebuild (DefaultMessageStore.load(), ext + CalcBitMap on, bloom f=20 "
          f"n=max(32,K)), one pinned core, best of {repeats}", flush=True)
    t = time.perf_counter()  # warm-up: Spark's first jobs, Delta's first writes, the Python workers' imports
    warm = jobs_dump.store_root(wroot, 32)
    warm_wh = _scratch("warm")
    _job1(spark, marks, warm, warm_wh, "warm")
    if do_pull:
        _job2(spark, marks, warm, warm_wh, "warm",
              _subscriptions(str(CACHE / "jobs-wh" / "warm-subs.json"), 32))
    print(f"warm-up on a 4 MiB dump: {time.perf_counter() - t:.1f} s", flush=True)
    floor_wh = _scratch("floor")
    floor1 = _job1(spark, marks, warm, floor_wh, "floor")  # warm now: what a run costs whatever its size
    floor2 = None
    if do_pull:
        floor2 = _job2(spark, marks, warm, floor_wh, "floor",
                       str(CACHE / "jobs-wh" / "warm-subs.json"))
    print(f"floor, the same 4 MiB dump again on the warm session: job 1 {floor1['seconds']:.1f} s "
          f"({floor1['records']:,} records)" + (f", job 2 {floor2['seconds']:.1f} s ({floor2['decisions']:,} "
                                                 f"decisions)" if floor2 else ""), flush=True)
    if profile:  # cProfile in every Python task from here on: slower figures, but where the Python time goes
        spark.conf.set("spark.sql.pyspark.udf.profiler", "perf")
        spark.profile.clear()

    job1: dict[int, dict] = {}
    job1_small: dict[int, dict] = {}
    broker: dict[int, dict] = {}
    pull_store = pull_wh = None
    for k in ks:  # interleaved, so a busy spell on the machine hits job and broker alike
        store = jobs_dump.store_root(root, k)
        broker[k] = _rebuild(store, k, repeats)
        wh = _scratch(f"k{k}")
        job1[k] = r = _job1(spark, marks, store, wh, f"bench-k{k}")
        _print_profile(spark, profile, f"job 1 K={k}")
        sstore = jobs_dump.store_root(sroot, k)
        swh = _scratch(f"small-k{k}")
        job1_small[k] = _job1(spark, marks, sstore, swh, f"bench-k{k}")
        keep = k == k_pull and do_pull
        if keep and pull_bytes == big:
            pull_store, pull_wh = store, wh
        elif keep and pull_bytes == small:
            pull_store, pull_wh = sstore, swh
        for w in (wh, swh):
            if w != pull_wh:
                shutil.rmtree(w, ignore_errors=True)
        b = broker[k]
        rate = r["records"] / r["seconds"]
        per_core = rate / cores
        grow = r["seconds"] / job1_small[k]["seconds"]
        print(f"K={k:<3d} job 1 {r['seconds']:6.1f} s  {_fmt_rate(rate)} msgs/s whole machine, {_fmt_rate(per_core)}"
              f"/core ({r['bitmaps']:,} bitmaps)   broker {b['seconds']:5.1f} s  {_fmt_rate(b['per_second'])}/core "
              f"(repeats {b['spread']} s; notes: {_fmt_rate(BROKER_NOTE.get(k, 0))})   job/broker per core "
              f"{per_core / b['per_second']:5.2f}x   {n_big / n_small:.0f}x messages: time x{grow:.1f} "
              f"({job1_small[k]['seconds']:.1f} s)", flush=True)
        print(f"      noise: job run {r['cpu'].text()}; broker run {b['cpu'].text()}; load {r['cpu'].load[0]:.1f}",
              flush=True)
        print(f"      job 1 steps (log lines): {_steps_line(r['steps'])}", flush=True)
        for line in _stages_lines(r["stages"]):
            print(line, flush=True)

    if job1:
        k_hi = max(job1)
        print("whole machine / size-only hop (one core): " + ", ".join(
            f"K={k} {job1[k]['records'] / job1[k]['seconds'] / hop_rate:.3f}" for k in ks), flush=True)
        if 32 in job1 and 256 in job1:
            print(f"8x filters (32 -> 256): job 1 time x{job1[256]['seconds'] / job1[32]['seconds']:.2f}, broker "
                  f"x{broker[256]['seconds'] / broker[32]['seconds']:.2f}", flush=True)
        print("aims: job/broker per core >= 2x at K=32, >= 5x at K=256: " + ", ".join(
            f"K={k} {job1[k]['records'] / job1[k]['seconds'] / cores / broker[k]['per_second']:.2f}x"
            for k in ks) + f" (K={k_hi} is the hardest)", flush=True)
        aim = {32: 2.0, 256: 5.0}
        print("      each aim as a whole-run time for this dump (records / (aim x broker per core x cores)) against "
              "the floor, job 1 on 4 MiB: " + ", ".join(
                  f"K={k} {n_big / (aim[k] * broker[k]['per_second'] * cores):.2f} s" for k in ks if k in aim)
              + f" vs {floor1['seconds']:.1f} s", flush=True)

    if do_pull:
        if pull_store is None:  # job 2 on a dump of its own size: job 1 first (not timed here)
            proot, _, _, _ = _dump(pull_bytes)
            pull_store = jobs_dump.store_root(proot, k_pull)
            pull_wh = _scratch(f"pull-k{k_pull}")
            _job1(spark, marks, pull_store, pull_wh, f"bench-k{k_pull}")
        subs = _subscriptions(str(CACHE / "jobs-wh" / "subs.json"), k_pull)
        r = _job2(spark, marks, pull_store, pull_wh, f"bench-k{k_pull}", subs)
        _print_profile(spark, profile, "job 2")
        shutil.rmtree(pull_wh, ignore_errors=True)
        rate = r["decisions"] / r["seconds"]
        core_rate, core_text = _bench_pull()
        print(f"job 2: {PULL_GROUPS} subscriptions ({PULL_GROUPS - k_pull} TAG, {k_pull} SQL92 registered) over the "
              f"{pull_bytes / 2**20:.0f} MiB dump's rebuilt queues: {r['decisions']:,} decisions, "
              f"{r['delivered']:,} delivered, {r['pulls']:,} pulls in {r['seconds']:.1f} s", flush=True)
        line = f"      {rate / 1e6:.2f} M decisions/s whole machine, {rate / cores / 1e6:.2f} M/core (aim >= 5 M/core)"
        if floor2:
            line += (f"   the aim as a whole-run time: {r['decisions'] / (5e6 * cores):.2f} s vs the floor, job 2 on "
                     f"4 MiB: {floor2['seconds']:.1f} s")
        if core_rate:
            line += f"   bench_pull core {core_rate / 1e6:.2f} M/core   job/core {rate / cores / core_rate:.3f}"
        print(line, flush=True)
        print(f"      noise: {r['cpu'].text()}; load {r['cpu'].load[0]:.1f}", flush=True)
        print(f"      job 2 steps (log lines): {_steps_line(r['steps'])}", flush=True)
        for line in _stages_lines(r["stages"]):
            print(line, flush=True)
        print(f"      bench_pull: {core_text}", flush=True)
    spark.stop()
    shutil.rmtree(CACHE / "jobs-wh", ignore_errors=True)


if __name__ == "__main__":
    main()
