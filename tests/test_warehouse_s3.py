"""A Delta warehouse on S3 through Hadoop's S3A connector, against moto's S3 server on 127.0.0.1.

The bundled demo dump uploaded to a bucket: job 1 and job 2 with the store read in place (s3://, pyarrow.fs) AND
the warehouse on s3a:// give the same tables, read back from s3a, as the same jobs on local disk, row for row;
explain and report read the s3a warehouse; `python -m jobs.build_queues` itself, with the server named only by
AWS_ENDPOINT_URL (jobs.spark turns it into the fs.s3a settings), writes the same tables; a warehouse in a
missing bucket, behind a refused connection, with rejected credentials or with the s3:// scheme is one line
naming the URI, exit code 2.

Marked s3a: the session needs the S3A jars (hadoop-aws 3.5.0 and the AWS SDK v2 bundle, ~650 MB), so only
`make s3-warehouse-test` (which runs `make s3-jars` first) collects this file; `make test` deselects it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.fs as pafs
import pytest
import s3server
from s3server import KEY_ID, REGION, SECRET, free_port, start_moto, stop, upload

from filterlib.store import fs as sfs
from jobs import build_queues, explain, report, row_forms, simulate_pull
from jobs.runs import read_dump
from jobs.spark import s3a_env_conf, s3a_jars

pytestmark = pytest.mark.s3a

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
DUMPS, PREFIX, LAKE = "dumps", "rocketmq/demo", "lake"
TABLES = ("messages", "consume_queue", "consumer_filters", "dump_files", "dumps", "queue_diff",
          "pull_decisions", "decision_details", "decision_codes", "pulls", "group_stats")


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server with the demo dump under s3://dumps/rocketmq/demo and an empty bucket `lake`."""
    with s3server.aws_env():
        proc, endpoint = start_moto()
        try:
            upload(endpoint, str(DEMO / "dump"), DUMPS, PREFIX)
            s3server.s3fs(endpoint).create_dir(LAKE)
            yield endpoint
        finally:
            stop(proc)


def s3a_conf(endpoint: str) -> dict[str, str]:
    """Every fs.s3a setting an S3-compatible server needs (the README's worked example)."""
    return {"spark.hadoop.fs.s3a.endpoint": f"http://{endpoint}",
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "spark.hadoop.fs.s3a.access.key": KEY_ID,
            "spark.hadoop.fs.s3a.secret.key": SECRET}


@pytest.fixture(scope="module")
def spark(s3, tmp_path_factory):
    """This module's own session: the S3A connector from `make s3-jars`, the fs.s3a settings of the server."""
    from jobs.spark import build_session

    assert s3a_jars(), "no S3A jars in .cache/jars-s3: run make s3-jars (make s3-warehouse-test does)"
    session = build_session("rocketmq-filter-replay-s3a-tests", master="local[2]", conf={
        "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", "spark.ui.enabled": "false",
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")), "spark.driver.memory": "2g",
        "spark.databricks.delta.snapshotPartitions": "2", **s3a_conf(s3)}, locations=[f"s3a://{LAKE}/wh"])
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def store_uri(endpoint: str) -> str:
    return f"s3://{DUMPS}/{PREFIX}?endpoint_override={endpoint}&scheme=http"


def _rows(spark, wh: str, table: str, dump_id: str) -> list[dict]:
    df = read_dump(spark, wh, table, dump_id).drop("dump_id")
    if table == "dumps":  # where the dump was and when it was built differ by design
        df = df.drop("store", "built_at")
    if table == "group_stats":  # the store each run read, named (compared on their own)
        df = df.drop("since_copy", "until_copy")
    return sorted(df.toArrow().to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=repr))


def _both_jobs(spark, store: str, wh: str) -> None:
    args = ["--store", store, "--warehouse", wh, "--broker-conf", str(DEMO / "broker.conf"), "--dump-id", "demo"]
    build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(
        args + ["--verify", "--split-bytes", "40000"])))
    simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
        args + ["--subscriptions", str(DEMO / "subscriptions.json")])))


@pytest.fixture(scope="module")
def local_wh(spark, tmp_path_factory) -> str:
    """Both jobs on the demo dump, store and warehouse on local disk: the reference tables."""
    wh = str(tmp_path_factory.mktemp("local-wh"))
    _both_jobs(spark, str(DEMO / "dump"), wh)
    return wh


@pytest.fixture(scope="module")
def s3a_wh(spark, s3) -> str:
    """Both jobs with the store read in place from s3:// and the warehouse on s3a://lake/wh."""
    wh = f"s3a://{LAKE}/wh"
    _both_jobs(spark, store_uri(s3), wh)
    return wh


def test_both_jobs_write_the_same_tables_to_s3a_as_to_local_disk(spark, s3, local_wh, s3a_wh) -> None:
    for t in TABLES:
        local, remote = _rows(spark, local_wh, t, "demo"), _rows(spark, s3a_wh, t, "demo")
        assert remote == local, t
        if t != "queue_diff":  # an untouched dump: the verify finds nothing to report
            assert local, t
    assert len(_rows(spark, s3a_wh, "messages", "demo")) > 900
    for wh, store in ((local_wh, os.path.abspath(DEMO / "dump")), (s3a_wh, sfs.display(store_uri(s3)))):
        named = {(r.since_copy, r.until_copy) for r in read_dump(spark, wh, "group_stats", "demo").collect()}
        assert named == {(store, None)}, wh
    # the tables are objects in the bucket, each with its Delta log (written by the default S3 LogStore)
    bucket = s3server.s3fs(s3)
    for t in TABLES:
        log = bucket.get_file_info(pafs.FileSelector(f"{LAKE}/wh/{t}/_delta_log"))
        assert any(i.path.endswith("00000000000000000000.json") for i in log), t
    assert read_dump(spark, s3a_wh, "dumps", "demo").first().store == f"s3://{DUMPS}/{PREFIX}"


def test_a_rerun_replaces_the_dump_in_the_s3a_tables(spark, s3, s3a_wh) -> None:
    before = _rows(spark, s3a_wh, "consume_queue", "demo")
    build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(
        ["--store", store_uri(s3), "--warehouse", s3a_wh, "--broker-conf", str(DEMO / "broker.conf"),
         "--dump-id", "demo"])))
    assert _rows(spark, s3a_wh, "consume_queue", "demo") == before


def test_explain_and_report_read_the_s3a_warehouse(spark, s3a_wh, tmp_path, capsys) -> None:
    msg = row_forms.delivered_messages(spark, s3a_wh, "demo").where("consumer_group = 'billing-paid'").first()
    assert msg is not None
    assert explain.main(["--warehouse", s3a_wh, "--group", "billing-paid", "--dump-id", "demo",
                         "--offset-msg-id", msg.offset_msg_id], spark=spark) == 0
    out = capsys.readouterr().out
    assert "billing-paid" in out and msg.offset_msg_id in out
    page = tmp_path / "demo.html"
    assert report.main(["--warehouse", s3a_wh, "--dump-id", "demo", "--out", str(page)], spark=spark) == 0
    assert "billing-paid" in page.read_text(encoding="utf-8")


def test_job1_command_line_with_the_server_from_aws_endpoint_url(spark, s3, local_wh) -> None:
    """The entry point builds its own session: the S3A jars from the cache because the warehouse is s3a://, the
    endpoint, path-style and plain-HTTP settings from AWS_ENDPOINT_URL, credentials from the AWS variables."""
    assert s3a_env_conf({"AWS_ENDPOINT_URL": f"http://{s3}", "AWS_DEFAULT_REGION": REGION}) == {
        "spark.hadoop.fs.s3a.endpoint": f"http://{s3}", "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false", "spark.hadoop.fs.s3a.endpoint.region": REGION}
    wh = f"s3a://{LAKE}/cli"
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://{s3}", "PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"}
    done = subprocess.run([sys.executable, "-m", "jobs.build_queues", "--store", f"s3://{DUMPS}/{PREFIX}",
                           "--warehouse", wh, "--broker-conf", str(DEMO / "broker.conf"), "--dump-id", "demo",
                           "--split-bytes", "40000"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "messages" in done.stdout
    for t in ("messages", "consume_queue", "dump_files"):
        assert _rows(spark, wh, t, "demo") == _rows(spark, local_wh, t, "demo"), t


@pytest.fixture(scope="module")
def locked():
    """A second moto server that checks credentials from its first call on (and knows none)."""
    proc, endpoint = start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        yield endpoint
    finally:
        stop(proc)


def _one_line_error(capsys, main, argv: list[str], spark) -> str:
    assert main(argv, spark=spark) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("job", ["job1", "job2"])
def test_bad_warehouse_uris_are_one_line(spark, s3, locked, capsys, job) -> None:
    main = build_queues.main if job == "job1" else simulate_pull.main
    args = ["--store", store_uri(s3), "--broker-conf", str(DEMO / "broker.conf")]
    err = _one_line_error(capsys, main, args + ["--warehouse", "s3a://no-such-bucket/wh"], spark)
    assert "s3a://no-such-bucket/wh: cannot use the warehouse" in err and "does not exist" in err
    # a bucket whose endpoint (a per-bucket fs.s3a setting) refuses connections
    spark.conf.set("fs.s3a.bucket.unreachable.endpoint", f"http://127.0.0.1:{free_port()}")
    try:
        err = _one_line_error(capsys, main, args + ["--warehouse", "s3a://unreachable/wh"], spark)
    finally:
        spark.conf.unset("fs.s3a.bucket.unreachable.endpoint")
    assert "s3a://unreachable/wh: cannot use the warehouse" in err and "refused" in err.lower()
    # a bucket on a server that rejects the credentials
    spark.conf.set("fs.s3a.bucket.locked.endpoint", f"http://{locked}")
    try:
        err = _one_line_error(capsys, main, args + ["--warehouse", "s3a://locked/wh"], spark)
    finally:
        spark.conf.unset("fs.s3a.bucket.locked.endpoint")
    assert "s3a://locked/wh: cannot use the warehouse" in err and "403" in err, err
    err = _one_line_error(capsys, main, args + ["--warehouse", "s3://lake/wh"], spark)
    assert "s3://lake/wh: cannot use the warehouse" in err and "s3a://" in err


def test_a_second_run_on_the_s3a_warehouse_refuses_naming_the_first(spark, s3) -> None:
    """Job 1 holds s3a://lake/wh/_runs/demo.lock (run here, held before its work); `python -m jobs.build_queues`
    on the same warehouse and dump is one sentence naming it, exit 3, and leaves the marker alone."""
    import threading
    import time

    from jobs.runlock import Holder, marker_path

    s3a_wh = f"s3a://{LAKE}/locked-run"
    argv = ["--store", store_uri(s3), "--warehouse", s3a_wh, "--broker-conf", str(DEMO / "broker.conf"),
            "--dump-id", "demo"]
    bucket = s3server.s3fs(s3)
    key = marker_path(s3a_wh, "demo").split("://", 1)[1]
    go, done = threading.Event(), {}
    real_run = build_queues.run

    def held(*a, **kw):
        assert go.wait(300)
        return real_run(*a, **kw)

    build_queues.run = held
    t = threading.Thread(target=lambda: done.update(rc=build_queues.main(argv, spark=spark)))
    t.start()
    try:
        deadline = time.monotonic() + 120
        while bucket.get_file_info(key).type == pafs.FileType.NotFound:
            assert t.is_alive() and time.monotonic() < deadline, "no marker"
            time.sleep(0.1)
        with bucket.open_input_stream(key) as f:
            holder = Holder.decode(f.read())
        env = {**os.environ, "AWS_ENDPOINT_URL": f"http://{s3}",
               "PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"}
        done2 = subprocess.run([sys.executable, "-m", "jobs.build_queues", *argv], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=600)
    finally:
        go.set()
        t.join()
        build_queues.run = real_run
    assert done2.returncode == 3, done2.stderr[-3000:]
    last = done2.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("build_queues: error: dump 'demo' is being processed by another run (build_queues, "
                           "started ") and f"(pid {holder.pid})" in last and f"host {holder.host}" in last, last
    assert f"marker {s3a_wh}/_runs/demo.lock" in last
    assert done["rc"] == 0 and bucket.get_file_info(key).type == pafs.FileType.NotFound


def test_the_s3a_marker_is_created_with_if_none_match(spark, s3) -> None:
    """The race create-if-absent must win: S3A's existence check passes, another writer puts the marker, and our
    PUT (If-None-Match: *) is refused with 412 as FileAlreadyExistsException, its object left as it was."""
    from py4j.protocol import Py4JJavaError

    from jobs.runlock import CONDITIONAL

    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"s3a://{LAKE}/race/_runs/x.lock")
    fs = path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
    out = fs.createFile(path).overwrite(False).must(CONDITIONAL, True).build()  # checked: absent
    out.write(bytearray(b"ours"))
    with s3server.s3fs(s3).open_output_stream(f"{LAKE}/race/_runs/x.lock") as f:
        f.write(b"theirs")
    with pytest.raises(Py4JJavaError) as e:
        out.close()
    assert "FileAlreadyExistsException" in str(e.value.java_exception.toString()) or "412" in str(e.value)
    with s3server.s3fs(s3).open_input_stream(f"{LAKE}/race/_runs/x.lock") as f:
        assert f.read() == b"theirs"


def test_task_parquet_parts_committed_to_an_s3a_table(spark, s3) -> None:
    """jobs.delta_files on s3a: Spark tasks write Parquet parts with pyarrow to the bucket (the endpoint and keys
    taken from the session's fs.s3a settings), the driver commits them; a re-commit replaces, another dump stays,
    and plain delta-spark reads the rows back."""
    import pyarrow as pa

    from jobs.delta_files import commit_dump, file_target, frame_parts
    from jobs.delta_io import last_version

    wh, schema = f"s3a://{LAKE}/direct", pa.schema([("dump_id", pa.string()), ("unit", pa.int64())])

    def commit(dump_id: str, n: int, start: int) -> int:
        target = file_target(spark, wh, "t", dump_id)
        assert target.kind == "s3" and "secret_key" not in repr(target)

        df = spark.createDataFrame([(dump_id, i) for i in range(start, start + n)], "dump_id string, unit long")
        parts = frame_parts(df.repartition(2), target, schema, ["dump_id", "unit"])
        return commit_dump(spark, wh, "t", dump_id, parts, schema, ["dump_id", "unit"])

    # the first commit made the table (partitioned by dump_id, as test_delta_files holds on local disk)
    assert [commit("a", 30, 0), commit("b", 4, 0), commit("a", 10, 100)] == [0, 1, 2]
    assert last_version(spark, f"{wh}/t") == 2
    assert sorted(r.unit for r in read_dump(spark, wh, "t", "a").collect()) == list(range(100, 110))
    assert read_dump(spark, wh, "t", "b").count() == 4
    names = [i.path for i in s3server.s3fs(s3).get_file_info(pafs.FileSelector(f"{LAKE}/direct/t", recursive=True))]
    assert sum(n.endswith(".snappy.parquet") for n in names) == 6  # removed files stay until VACUUM
    assert {n.split("/")[-2] for n in names if n.endswith(".parquet")} == {"dump_id=a", "dump_id=b"}
