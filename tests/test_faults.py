"""Faults injected for real, each ending in one sentence on stderr, its exit code, and readers on whole tables.

The bundled demo dump (4 commitlog files of 128 KiB) is built once into a clean warehouse by job 1 run in this
process while two more runs of the same dump, `python -m jobs.build_queues` and `python -m jobs.simulate_pull`
as processes, are refused at once (exit 3) with a sentence naming the running one. Each fault below then runs
`python -m jobs.build_queues` on a copy of that warehouse and checks the sentence, the exit code and that the
tables read as before:

- another writer commits to the messages table (a Delta commit that deletes the dump's rows, written into the
  table's log as soon as the job's messages write has begun): the job loses the commit race, exit 3;
- the store on an S3 server (moto) behind a proxy that answers the commitlog's ranged GETs with 500s, or stalls
  them: retried a bounded number of times, then exit 4 naming the object and byte range;
- a commitlog file deleted after the driver listed the store (once the JVM starts, before any task): exit 4;
- the warehouse, a bind mount, remounted read-only once the job's first table is committed: exit 4;
- the warehouse on a tmpfs of 2 MiB with 64 KiB left: exit 4.

The mounts need root (mount --bind, mount -t tmpfs): without them these tests fail, they do not skip.
The run marker's own rules (stale markers, --break-lock) are checked on real files without Spark.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import s3server
from faultproxy import FaultProxy
from support.job_process import start_job

from filterlib.store import fs as sfs
from jobs import build_queues
from jobs.runlock import DumpBusy, Holder, RunLock, marker_path
from jobs.runs import read_dump

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
DUMP = "demo"
TABLES = ("messages", "consume_queue", "consumer_filters", "dump_files", "dumps")
KEYS = {"messages": ["commit_log_offset"], "consume_queue": ["topic", "queue_id", "queue_offset"],
        "consumer_filters": ["consumer_group", "topic"], "dump_files": ["path"], "dumps": ["dump_id"]}


def _job(*argv: str, env: dict | None = None) -> subprocess.Popen:
    """A job as a process (its own session, local[2]), output piped."""
    return start_job(*argv, env=env)


def _job1(wh: str, store: str = str(DEMO / "dump"), env: dict | None = None,
          conf: str = str(DEMO / "broker.conf")) -> subprocess.Popen:
    return _job("jobs.build_queues", "--store", store, "--warehouse", wh, "--broker-conf", conf, "--dump-id", DUMP,
                env=env)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    return proc.returncode, out, err


def _sentence(err: str, code: int, rc: int) -> str:
    """The last line of stderr is `build_queues: error: ...`, the only such line."""
    assert rc == code, err[-4000:]
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith("build_queues: error: ") and err.count("build_queues: error: ") == 1, err[-4000:]
    # no traceback through the project's code (pyspark's worker daemon may print a BrokenPipeError as it is shut
    # down: not the job's)
    assert not re.search(r'File "[^"]*/(jobs|filterlib)/', err), err[-4000:]
    return last


def _rows(spark, wh: str, table: str) -> list[dict]:
    df = read_dump(spark, wh, table, DUMP).drop("built_at") if table == "dumps" else read_dump(spark, wh, table, DUMP)
    return df.orderBy(*KEYS[table]).toArrow().to_pylist()


def _log(wh: str) -> dict[str, list[str]]:
    """Each table's commit files."""
    return {t: sorted(p.name for p in (Path(wh) / t / "_delta_log").glob("*.json")) for t in TABLES}


@pytest.fixture(scope="module")
def clean(spark, tmp_path_factory) -> dict:
    """Job 1 on the demo dump in this process, then again (the marker held by run_main), and while the second run
    goes, job 1 and job 2 as processes on the same warehouse and dump: each refused at once. Yields the warehouse
    and its tables."""
    wh = str(tmp_path_factory.mktemp("clean") / "wh")
    argv = ["--store", str(DEMO / "dump"), "--warehouse", wh, "--broker-conf", str(DEMO / "broker.conf"),
            "--dump-id", DUMP]
    build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(argv)))
    marker = Path(marker_path(wh, DUMP))
    done: dict = {}
    go = threading.Event()
    real_run = build_queues.run

    def held(*a, **kw):  # the second run waits, marker held, until the other two have come and gone
        assert go.wait(300)
        return real_run(*a, **kw)

    build_queues.run = held
    t = threading.Thread(target=lambda: done.update(rc=build_queues.main(argv, spark=spark)))
    t.start()
    refused = {}
    try:
        deadline = time.monotonic() + 120
        # the marker is created (O_EXCL) and then written: wait for its whole holder, not just the file
        while (holder := Holder.decode(marker.read_bytes()) if marker.exists() else None) is None:
            assert t.is_alive() and time.monotonic() < deadline, "the run took no marker"
            time.sleep(0.01)
        t0 = time.monotonic()
        job1 = _job1(wh)
        job2 = _job("jobs.simulate_pull", "--store", str(DEMO / "dump"), "--warehouse", wh, "--dump-id", DUMP,
                    "--broker-conf", str(DEMO / "broker.conf"))
        refused["job1"], refused["job2"] = _finish(job1, 120), _finish(job2, 120)
        refused["seconds"] = time.monotonic() - t0
    finally:
        go.set()
        t.join()
        build_queues.run = real_run
    assert done["rc"] == 0 and not marker.exists()
    return {"wh": wh, "holder": holder, "refused": refused,
            "tables": {name: _rows(spark, wh, name) for name in TABLES}, "log": _log(wh)}


def test_a_second_run_of_the_same_dump_refuses_at_once_naming_the_first(clean) -> None:
    h = clean["holder"]
    assert (h.job, h.dump_id, h.host, h.pid) == ("build_queues", DUMP, socket.gethostname(), os.getpid())
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(h.started))
    for job in ("job1", "job2"):
        rc, out, err = clean["refused"][job]
        prog = "build_queues" if job == "job1" else "simulate_pull"
        assert rc == 3 and out == "" and err.count("\n") == 1, err
        assert err.startswith(f"{prog}: error: dump 'demo' is being processed by another run (build_queues, "
                              f"started {started} on host {h.host} (pid {h.pid}), last heartbeat "), err
        assert f"marker {marker_path(clean['wh'], DUMP)}" in err and "--break-lock" in err
    assert clean["refused"]["seconds"] < 60  # before Spark starts: no JVM, no table read


def _marker(wh: str, **kw) -> Path:
    now = time.time()
    h = Holder(**{"job": "simulate_pull", "dump_id": DUMP, "host": "elsewhere", "pid": 1, "started": now - 5,
                  "heartbeat": now - 5, "token": "t0", **kw})
    p = Path(marker_path(wh, DUMP))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(h.encode())
    return p


def test_stale_and_broken_markers_never_block_for_ever(tmp_path, monkeypatch) -> None:
    """A live holder elsewhere blocks; one on this host whose pid is gone, or silent for longer than the stale
    age, is replaced; --break-lock removes any; release removes only our own."""
    wh = str(tmp_path / "wh")
    p = _marker(wh)
    with pytest.raises(DumpBusy, match=r"host elsewhere \(pid 1\), last heartbeat 5 s ago"):
        RunLock("build_queues", wh, DUMP).acquire()
    gone = subprocess.Popen(["true"])
    gone.wait()
    _marker(wh, host=socket.gethostname(), pid=gone.pid)
    lock = RunLock("build_queues", wh, DUMP)
    lock.acquire()
    assert Holder.decode(p.read_bytes()).token == lock.me.token
    lock.release()
    assert not p.exists()
    monkeypatch.setenv("RMQ_REPLAY_LOCK_STALE", "60")
    _marker(wh, heartbeat=time.time() - 61)  # a holder whose clock lags: the marker's own time keeps it alive
    with pytest.raises(DumpBusy, match="last heartbeat 61 s ago"):
        RunLock("build_queues", wh, DUMP).acquire()
    os.utime(p, (time.time() - 61, time.time() - 61))
    lock = RunLock("build_queues", wh, DUMP)
    lock.acquire()
    lock.release()
    _marker(wh)
    lock = RunLock("build_queues", wh, DUMP)
    lock.acquire(break_lock=True)
    _marker(wh)  # taken over meanwhile (by hand): release leaves the other's marker
    lock.release()
    assert Holder.decode(p.read_bytes()).token == "t0"
    p.write_bytes(b'{"job": "build_qu')  # cut short while written: blocks until it is as old as a stale heartbeat
    with pytest.raises(DumpBusy, match="a run whose marker could not be read"):
        RunLock("build_queues", wh, DUMP).acquire()
    os.utime(p, (time.time() - 61, time.time() - 61))
    RunLock("build_queues", wh, DUMP).acquire()


def test_the_holder_refreshes_its_heartbeat(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RMQ_REPLAY_LOCK_HEARTBEAT", "0.2")
    wh = str(tmp_path / "wh")
    lock = RunLock("build_queues", wh, DUMP)
    lock.acquire()
    first = Holder.decode(Path(marker_path(wh, DUMP)).read_bytes()).heartbeat
    time.sleep(1)
    assert Holder.decode(Path(marker_path(wh, DUMP)).read_bytes()).heartbeat > first
    lock.release()


def _copy(clean: dict, dest: Path) -> str:
    shutil.copytree(clean["wh"], dest)
    return str(dest)


def _unchanged(spark, clean: dict, wh: str) -> None:
    """No table got a commit, and every table reads as the clean run left it."""
    assert _log(wh) == clean["log"]
    for t in TABLES:
        assert _rows(spark, wh, t) == clean["tables"][t], t


def test_a_run_that_loses_a_delta_commit_race_says_so(spark, clean, tmp_path) -> None:
    """Another writer (no marker: a notebook, an older release) commits a delete of the dump's consume_queue while
    the job writes it through Spark's writer (its transaction starts before its files; under enableMultiDispatch the
    units are placed in Spark and written so; the task-written tables start theirs at commit, and
    tests/test_delta_files.py races those): Delta refuses the job's commit, the job names the table and the dump,
    exit 3; the table holds the other writer's version, the version before it is still whole."""
    wh = _copy(clean, tmp_path / "wh")
    conf = tmp_path / "broker.conf"
    conf.write_text((DEMO / "broker.conf").read_text() + "\nenableMultiDispatch=true\n")
    log = Path(wh) / "consume_queue" / "_delta_log"
    version = max(int(p.stem) for p in log.glob("*.json"))
    files = {f.split("/consume_queue/", 1)[1] for f in spark.read.format("delta").load(f"{wh}/consume_queue")
             .inputFiles()}  # relative to the table, as the log names them
    now = int(time.time() * 1000)
    commit = "".join(json.dumps(a) + "\n" for a in [
        {"commitInfo": {"timestamp": now, "operation": "DELETE",
                        "operationParameters": {"predicate": json.dumps([f"(dump_id = '{DUMP}')"])},
                        "readVersion": version, "isolationLevel": "Serializable", "isBlindAppend": False}},
        *({"remove": {"path": f, "deletionTimestamp": now, "dataChange": True}} for f in sorted(files))])
    before = {p.name for p in (Path(wh) / "consume_queue").rglob("*.parquet")}
    proc = _job1(wh, conf=str(conf))
    try:
        deadline = time.monotonic() + 600
        while not {p.name for p in (Path(wh) / "consume_queue").rglob("*.parquet")} - before:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        fd = os.open(log / f"{version + 1:020d}.json", os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # as Delta commits
        os.write(fd, commit.encode())
        os.close(fd)
    finally:
        rc, out, err = _finish(proc)
    last = _sentence(err, 3, rc)
    assert "dump 'demo': another writer committed to table consume_queue" in last and "Concurrent" in last, last
    assert max(int(p.stem) for p in log.glob("*.json")) == version + 1  # nothing of the job's
    assert read_dump(spark, wh, "consume_queue", DUMP, latest=True).count() == 0  # the other writer's delete
    # readers stay on the last complete run's snapshot: the delete belongs to no run
    assert _rows(spark, wh, "consume_queue") == clean["tables"]["consume_queue"]
    old = spark.read.format("delta").option("versionAsOf", version).load(f"{wh}/consume_queue")
    assert old.where(f"dump_id = '{DUMP}'").orderBy(*KEYS["consume_queue"]).toArrow().to_pylist() == \
        clean["tables"]["consume_queue"]
    assert not Path(marker_path(wh, DUMP)).exists()


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server holding the demo dump under s3://dumps/demo."""
    with s3server.aws_env():
        proc, endpoint = s3server.start_moto()
        try:
            s3server.upload(endpoint, str(DEMO / "dump"), "dumps", DUMP)
            yield endpoint
        finally:
            s3server.stop(proc)


def test_s3_reads_retry_within_bounds(s3) -> None:
    """Two 500s on a ranged GET are retried away; a GET that always fails is tried exactly attempts() times."""
    with FaultProxy(s3, fault=("status", 500), times=2) as p:
        sfs.open_store_fs(f"s3://dumps/{DUMP}?endpoint_override={p.endpoint}&scheme=http")
        with sfs.open_random(f"s3://dumps/{DUMP}/commitlog/00000000000000000000") as f:
            got = f.read_at(4096, 8192)
        assert got == (DEMO / "dump" / "commitlog" / "00000000000000000000").read_bytes()[8192:12288]
        assert len(p.hits) == 2
    with FaultProxy(s3, fault=("status", 500)) as p:
        sfs.open_store_fs(f"s3://dumps/{DUMP}?endpoint_override={p.endpoint}&scheme=http")
        with sfs.open_random(f"s3://dumps/{DUMP}/commitlog/00000000000000000000") as f, \
                pytest.raises(sfs.StoreAccessError, match=r"s3://dumps/demo/commitlog/00000000000000000000: "
                                                         r"cannot read bytes 8192-12287 after 4 attempts"):
            f.read_at(4096, 8192)
        assert p.hits == [("GET", f"/dumps/{DUMP}/commitlog/00000000000000000000", "bytes=8192-12287")] * 4


@pytest.mark.parametrize("fault", [("status", 500), ("stall", 120)], ids=["500", "stall"])
def test_s3_store_errors_or_stalls_end_in_a_sentence(spark, clean, s3, tmp_path, fault) -> None:
    wh = _copy(clean, tmp_path / "wh")
    with FaultProxy(s3, fault=fault) as p:
        t0 = time.monotonic()
        rc, out, err = _finish(_job1(wh, f"s3://dumps/{DUMP}?endpoint_override={p.endpoint}&scheme=http"))
        seconds = time.monotonic() - t0
        hits = list(p.hits)
    last = _sentence(err, 4, rc)
    assert re.search(rf"dump 'demo': cannot read the store: s3://dumps/{DUMP}/commitlog/\d{{20}}: ", last), last
    assert "cannot read bytes " in last and " after 4 attempts: AWS Error " in last, last
    assert ("INTERNAL_FAILURE" if fault[0] == "status" else "Timeout was reached") in last, last
    per_range: dict[tuple[str, str], int] = {}
    for _, path, rng in hits:
        per_range[(path, rng)] = per_range.get((path, rng), 0) + 1
    assert max(per_range.values()) == 4, per_range  # the named range was tried 4 times, no range more often
    assert seconds < 300
    _unchanged(spark, clean, wh)


def test_a_commitlog_file_deleted_after_listing(spark, clean, tmp_path) -> None:
    """The driver lists the store before Spark starts; the file is deleted as soon as the JVM says anything."""
    store = tmp_path / "dump"
    shutil.copytree(DEMO / "dump", store)
    wh = _copy(clean, tmp_path / "wh")
    victim = store / "commitlog" / "00000000000000131072"
    proc = _job1(wh, str(store))
    lines = [proc.stderr.readline()]  # the JVM's first words: the listing is done, no task has started
    victim.unlink()
    rc, out, err = _finish(proc)
    last = _sentence(lines[0] + err, 4, rc)
    assert f"dump 'demo': cannot read the store: {victim}: the file is gone (it was listed when the run " \
           f"started)" in last, last
    _unchanged(spark, clean, wh)


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    assert done.returncode == 0, f"mount {' '.join(args)} failed (these tests need root): {done.stderr}"


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_warehouse_made_read_only_mid_run(spark, clean, tmp_path) -> None:
    """The warehouse is a bind mount, remounted read-only once job 1 has committed its first table."""
    real = Path(_copy(clean, tmp_path / "real"))
    wh = tmp_path / "wh"
    wh.mkdir()
    _mount("--bind", str(real), str(wh))
    try:
        log = wh / "dump_files" / "_delta_log"
        before = set(os.listdir(log))
        proc = _job1(str(wh))
        deadline = time.monotonic() + 600
        while not {n for n in os.listdir(log) if n.endswith(".json")} - before:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        _mount("-o", "remount,bind,ro", str(wh))
        rc, out, err = _finish(proc)
        last = _sentence(err, 4, rc)
        assert "dump 'demo': cannot write table " in last and "read-only file system" in last, last
        assert last.split("cannot write table ", 1)[1].split(" ", 1)[0] in TABLES
        for t in TABLES:  # committed by the job (the same dump: the same rows) or not: whole either way
            assert _rows(spark, str(wh), t) == clean["tables"][t], t
        assert Path(marker_path(str(wh), DUMP)).exists()  # it could not be removed ...
    finally:
        _umount(wh)
    lock = RunLock("build_queues", str(real), DUMP)  # ... and the next run replaces it: its pid is gone
    lock.acquire()
    lock.release()


def test_a_full_warehouse(spark, clean, tmp_path) -> None:
    """The warehouse on a 2 MiB tmpfs with 64 KiB left once the clean tables are in it."""
    wh = tmp_path / "wh"
    wh.mkdir()
    _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(wh))
    try:
        for t in TABLES:
            shutil.copytree(Path(clean["wh"]) / t, wh / t)
        st = os.statvfs(wh)
        with open(wh / "filler", "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - (64 << 10)))
        rc, out, err = _finish(_job1(str(wh)))
        last = _sentence(err, 4, rc)
        assert "dump 'demo': cannot write table " in last and "file system is full" in last, last
        for t in TABLES:
            assert _rows(spark, str(wh), t) == clean["tables"][t], t
    finally:
        _umount(wh)
