"""Job 1 reading its dump in place from a local S3-protocol server against reading it from local disk, same run.

The bench dump (bench/jobs_dump.py: the 1 GiB one bench_jobs uses, cached in .cache/bench) with no SQL92 filters
(K=0: the least work per byte, so the read path weighs most), served on 127.0.0.1 by
- S3Proxy (org.gaul:s3proxy, a Java S3 server from Maven Central, fetched once into .cache/s3proxy with `mvn`) over
  its filesystem backend: the bucket is a directory of hard links to the dump, so nothing is uploaded, and a
  ranged GET reads just its range, as S3 or MinIO serve it;
- moto's server (the tests' server; `moto[server]` is a dev extra), the dump uploaded to it. moto answers every
  ranged GET by reading the whole object and slicing it, so a GET's cost grows with the object (printed: an 8 MiB
  GET from the 1 GiB file against one from a 64 MiB object): its figure is moto's ceiling, not the read path's.
`jobs.build_queues.run` runs on one session from local disk and with `--store s3://bench/k0?endpoint_override=
127.0.0.1:PORT&scheme=http` (pyarrow's S3 file system: ranged GETs of at most 8 MiB into each task's scan window);
the warehouse is local every time. Printed: wall times and the S3 / disk ratio per server, and the read
amplification: every remote file a task opened records the bytes it fetched (filterlib.store.fs's
RMQ_REPLAY_READ_LEDGER, handed to the Python workers with spark.executorEnv), each matched to its task by the range
it starts at; per task fetched / range bytes, max and total (the aim is <= 1.1). Both passes of job 1 read each
range (units with bodies skipped, then the messages with bodies): two task scans per range. The servers run on the
same two cores as Spark, so their CPU is in the S3 figures, as for a MinIO beside the executors.

Knobs: BENCH_S3_BYTES (1G; e.g. 64M for a quick run), BENCH_S3_SPLIT (job 1's default split_bytes, 256 MiB),
BENCH_S3_SERVERS ("s3proxy,moto"), BENCH_S3_REPEATS (1: runs of each, disk and servers alternating, best kept),
BENCH_S3_MASTER (local[2]), BENCH_S3_DRIVER_MEMORY (4g), BENCH_CACHE_DIR (.cache/bench).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench import jobs_dump
from bench.spark_profile import CpuMeter
from filterlib.store import fs as sfs
from filterlib.store.commitlog import file_name as cl_name
from filterlib.store.scan import iter_ranges

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("BENCH_CACHE_DIR", ROOT / ".cache" / "bench"))
SCRATCH = CACHE / "s3-bench"
BUCKET = "bench"
S3PROXY_VERSION = "4.1.0"
S3PROXY_DIR = CACHE.parent / "s3proxy"
SERVERS = {"s3proxy": "S3Proxy (filesystem)", "moto": "moto"}
KEY_ID, SECRET, REGION = "AKIABENCHS3000000001", "bench-secret", "us-east-1"  # moto accepts any credentials


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(argv: list[str], port: int, what: str) -> subprocess.Popen:
    """Start a server process and wait (90 s at most) until it accepts connections on 127.0.0.1:port."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.2)
    _stop(proc)
    raise RuntimeError(f"{what} did not start in 90 s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _s3proxy_jar() -> Path | None:
    """S3Proxy's self-contained jar, fetched once with Maven into .cache/s3proxy; None without mvn or java."""
    jar = S3PROXY_DIR / f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"
    if jar.is_file():
        return jar
    if not (shutil.which("mvn") and shutil.which("java")):
        return None
    subprocess.run(["mvn", "-q", "-B", "dependency:copy",
                    f"-Dartifact=org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies",
                    f"-DoutputDirectory={S3PROXY_DIR}"], check=True, cwd=S3PROXY_DIR.parent, stdout=subprocess.DEVNULL)
    return jar if jar.is_file() else None


def _link_tree(src: str, dest: Path) -> None:
    """dest mirrors src with hard links (a bucket directory of S3Proxy's filesystem backend)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, copy_function=os.link)


def _start_s3proxy(stores: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """S3Proxy over a directory holding bucket `bench` with the stores (prefix -> store root) as hard links."""
    jar = _s3proxy_jar()
    if jar is None:
        raise RuntimeError("S3Proxy needs java and mvn on PATH")
    data = SCRATCH / "s3proxy-data"
    for prefix, root in stores.items():
        _link_tree(root, data / BUCKET / prefix)
    port = _free_port()
    props = SCRATCH / "s3proxy.conf"
    props.write_text(f"s3proxy.endpoint=http://127.0.0.1:{port}\ns3proxy.authorization=none\n"
                     f"jclouds.provider=filesystem\njclouds.filesystem.basedir={data}\n"
                     f"jclouds.identity={KEY_ID}\njclouds.credential={SECRET}\n")
    return _serve(["java", "-Xmx512m", "-jar", str(jar), "--properties", str(props)], port, "S3Proxy"), \
        f"127.0.0.1:{port}"


def _start_moto(stores: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """moto's server with the stores uploaded to bucket `bench` (prefix -> store root)."""
    port = _free_port()
    proc = _serve([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port, "moto server")
    endpoint = f"127.0.0.1:{port}"
    try:
        for prefix, root in stores.items():
            _upload(endpoint, root, prefix)
    except BaseException:
        _stop(proc)
        raise
    return proc, endpoint


def _get_cost(endpoint: str, key: str, n: int = 5) -> float:
    """Seconds per 8 MiB ranged GET of an object (its first n 8 MiB blocks, one stream)."""
    f = _s3fs(endpoint).open_input_file(f"{BUCKET}/{key}")
    t = time.perf_counter()
    for i in range(n):
        f.read_at(sfs.REMOTE_READ_CHUNK, i * sfs.REMOTE_READ_CHUNK)
    f.close()
    return (time.perf_counter() - t) / n


def _store(total: int) -> tuple[str, int]:
    """A K=0 store root over the cached bench dump of `total` bytes (hard links, in a directory of this bench's
    own so bench_jobs' store roots are never rebuilt under it); its record count."""
    dump = CACHE / f"jobs-dump-{total}"
    paths = jobs_dump.generate(str(dump), total)
    mine = SCRATCH / f"dump-{total}"
    cdir = mine / "commitlog"
    cdir.mkdir(parents=True, exist_ok=True)
    for p in paths:
        link = cdir / os.path.basename(p)
        if not (link.exists() and os.path.samefile(link, p)):
            link.unlink(missing_ok=True)
            os.link(p, link)
    return jobs_dump.store_root(str(mine), 0), jobs_dump.records(str(dump))


def _s3fs(endpoint: str):
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key=KEY_ID, secret_key=SECRET,
                             region=REGION, allow_bucket_creation=True)


def _upload(endpoint: str, local: str, prefix: str) -> None:
    import pyarrow.fs as pafs

    s3 = _s3fs(endpoint)
    s3.create_dir(BUCKET)
    pafs.copy_files(local, f"{BUCKET}/{prefix}", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)


def _session(master: str, memory: str, ledger: Path):
    from jobs.spark import build_session

    spark = build_session("bench_store_s3", master=master, conf={
        "spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "false", "spark.driver.memory": memory,
        "spark.sql.warehouse.dir": str(SCRATCH / "spark-warehouse"),
        f"spark.executorEnv.{sfs.READ_LEDGER_ENV}": str(ledger),
        **{f"spark.executorEnv.{k}": os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                             "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED")}})
    spark.sparkContext.setLogLevel("ERROR")
    conf = json.loads((ROOT / "conf" / "build_queues.json").read_text()).get("spark_conf") or {}
    for k, v in conf.items():  # the job's defaults file, as far as a running session takes it (SQL settings)
        with contextlib.suppress(Exception):
            spark.conf.set(k, str(v))
    return spark


def _job1(spark, store: str, broker_conf: str, split: int, name: str) -> tuple[float, int, CpuMeter]:
    from jobs import build_queues

    wh = SCRATCH / "wh" / name
    shutil.rmtree(wh, ignore_errors=True)
    args = build_queues.parser().parse_args(["--store", store, "--warehouse", str(wh), "--dump-id", name,
                                             "--broker-conf", broker_conf, "--split-bytes", str(split)])
    inputs = build_queues.validate(args)
    cpu = CpuMeter().start()
    t = time.perf_counter()
    summary = build_queues.run(spark, inputs)
    seconds = time.perf_counter() - t
    cpu.stop()
    assert not summary.issues and not summary.damaged and summary.units == summary.records, summary.lines()
    shutil.rmtree(wh, ignore_errors=True)
    return seconds, summary.records, cpu


def _amplification(ledger: Path, files: dict[str, int], split: int) -> dict:
    """Per task (one remote file opened per scan of a range): bytes fetched against the range's bytes."""
    starts = {(name, s): e - s for name, size in files.items() for s, e in iter_ranges(size, split)}
    per_task, other, reads, biggest = [], 0, 0, 0
    for f in ledger.glob("reads-*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            span = starts.get((os.path.basename(r["path"]), r["lo"]))
            reads += r["reads"]
            biggest = max(biggest, -(-r["fetched"] // r["reads"]))
            if span is None:  # not a task's range (a driver-side read): reported apart
                other += r["fetched"]
            else:
                per_task.append((r["fetched"], span))
    fetched = sum(f for f, _ in per_task)
    spans = sum(s for _, s in per_task)
    return {"tasks": len(per_task), "max": max((f / s for f, s in per_task), default=0.0),
            "total": fetched / spans if spans else 0.0, "fetched": fetched, "ranges": spans, "other": other,
            "reads": reads, "mean_read": fetched / max(1, reads)}


def main() -> None:
    """Serve the bench dump from each server, run job 1 from disk and from S3, print the ratios and the read
    amplification."""
    total = jobs_dump.parse_size(os.environ.get("BENCH_S3_BYTES", "1G"))
    split = jobs_dump.parse_size(os.environ.get("BENCH_S3_SPLIT", str(256 << 20)))
    servers = [x.strip() for x in os.environ.get("BENCH_S3_SERVERS", "s3proxy,moto").split(",") if x.strip()]
    unknown = set(servers) - set(SERVERS)
    if unknown:
        raise ValueError(f"BENCH_S3_SERVERS: unknown {sorted(unknown)} (known: {', '.join(SERVERS)})")
    repeats = max(1, int(os.environ.get("BENCH_S3_REPEATS", "1")))
    master = os.environ.get("BENCH_S3_MASTER", "local[2]")
    memory = os.environ.get("BENCH_S3_DRIVER_MEMORY", "4g")
    t = time.perf_counter()
    store, records = _store(total)
    warm, _ = _store(4 << 20)
    small, _ = _store(64 << 20)
    cdir = os.path.join(store, "commitlog")
    files = {n: os.path.getsize(os.path.join(cdir, n)) for n in os.listdir(cdir)}
    size = sum(files.values())
    big_key = f"k0/commitlog/{sorted(files)[0]}"
    print(f"dump: {size / 2**20:.0f} MiB, {records:,} records, K=0 filters, split {split / 2**20:.0f} MiB "
          f"({sum(len(iter_ranges(s, split)) for s in files.values())} ranges), from {CACHE} "
          f"({time.perf_counter() - t:.1f} s to generate or reuse)", flush=True)

    keep = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                                           "AWS_EC2_METADATA_DISABLED")}
    os.environ.update({"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": REGION,
                       "AWS_EC2_METADATA_DISABLED": "true"})
    ledger = SCRATCH / "ledger"
    conf = os.path.join(store, "broker.conf")
    spark = None
    procs: list[subprocess.Popen] = []
    try:
        endpoints = {}
        for name in servers:
            t = time.perf_counter()
            proc, endpoints[name] = (_start_s3proxy if name == "s3proxy" else _start_moto)(
                {"k0": store, "warm": warm, "small": small})
            procs.append(proc)
            cost_big = _get_cost(endpoints[name], big_key)
            cost_small = _get_cost(endpoints[name], f"small/commitlog/{cl_name(0)}")
            print(f"{SERVERS[name]} on {endpoints[name]}: ready in {time.perf_counter() - t:.1f} s; one 8 MiB ranged "
                  f"GET {cost_big * 1e3:.0f} ms ({8 / cost_big:.0f} MiB/s) from the {size / 2**20:.0f} MiB file, "
                  f"{cost_small * 1e3:.0f} ms from a 64 MiB one", flush=True)
        spark = _session(master, memory, ledger)
        t = time.perf_counter()  # warm-up: the JVM's first jobs, Delta's first writes, the workers' imports
        wconf = os.path.join(warm, "broker.conf")
        _job1(spark, warm, wconf, split, "warm-disk")
        for name in servers:
            _job1(spark, f"s3://{BUCKET}/warm?endpoint_override={endpoints[name]}&scheme=http", wconf, split,
                  f"warm-{name}")
        print(f"Spark {master}; warm-up on a 4 MiB dump (disk and each server): {time.perf_counter() - t:.1f} s",
              flush=True)
        runs: dict[str, list] = {"disk": [], **{name: [] for name in servers}}
        amp: dict[str, dict] = {}
        for i in range(repeats):  # alternating, so a busy spell on the machine hits all of them
            runs["disk"].append(_job1(spark, store, conf, split, f"disk-{i}"))
            for name in servers:
                shutil.rmtree(ledger, ignore_errors=True)
                ledger.mkdir(parents=True)
                uri = f"s3://{BUCKET}/k0?endpoint_override={endpoints[name]}&scheme=http"
                runs[name].append(_job1(spark, uri, conf, split, f"{name}-{i}"))
                amp[name] = _amplification(ledger, files, split)
        best = {k: min(v, key=lambda r: r[0]) for k, v in runs.items()}
        assert all(r[1] == records for r in best.values()), {k: r[1] for k, r in best.items()}
        d = best["disk"]
        print(f"job 1 from local disk            {d[0]:6.1f} s  {size / 2**20 / d[0]:5.0f} MiB/s  ({d[2].text()}; load "
              f"{d[2].load[0]:.1f})", flush=True)
        for name in servers:
            r, a = best[name], amp[name]
            print(f"job 1 from {SERVERS[name]:<22s}{r[0]:6.1f} s  {size / 2**20 / r[0]:5.0f} MiB/s  ({r[2].text()}, "
                  f"the server's included; load {r[2].load[0]:.1f})   S3 / disk {r[0] / d[0]:.2f}x", flush=True)
            print(f"      read amplification (bytes fetched / bytes of the task's range; {a['tasks']} task scans, "
                  f"{a['reads']} ranged GETs of {a['mean_read'] / 2**20:.1f} MiB on average): max {a['max']:.4f}, "
                  f"total {a['total']:.4f} ({a['fetched']:,} B for {a['ranges']:,} B of ranges; {a['other']:,} B "
                  f"outside task ranges)   aim <= 1.1", flush=True)
        print(f"(best of {repeats} each; job 1 reads every range twice, so S3 moves 2x the dump)", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        for proc in procs:
            _stop(proc)
        for k, v in keep.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for d in ("wh", "s3proxy-data", "ledger"):
            shutil.rmtree(SCRATCH / d, ignore_errors=True)


if __name__ == "__main__":
    main()
