"""A store read in place from an S3-protocol server (moto's, started here on 127.0.0.1) through pyarrow.fs.

The bundled demo dump uploaded to a bucket gives job 1 (with --verify and several splits per commitlog file) and
job 2 the same tables row for row as the same dump read from local disk; a range scan of a remote commitlog file
reads only its own range plus the overlap that finishes its last record, in bounded ranged reads, and decodes the
same batches as the local file; a missing bucket, a missing prefix, a connection refused and wrong credentials
are each one line naming the URI and exit code 2 before any Spark work. The warehouse stays local.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import s3server
from s3server import KEY_ID, SECRET, free_port, start_moto, stop, upload

from filterlib.errors import StoreFormatError
from filterlib.store import fs as sfs
from filterlib.store import scan
from filterlib.store.scan import RangeScan, ScanOptions, iter_ranges, merge_reports
from filterlib.store.storedir import StoreDir
from jobs import build_queues, row_forms, simulate_pull
from jobs.cli import dump_id_of
from jobs.runs import read_dump

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
BUCKET = "dumps"
PREFIX = "rocketmq/demo"


def _upload(endpoint: str, key: str, secret: str) -> None:
    upload(endpoint, str(DEMO / "dump"), BUCKET, PREFIX, key, secret)


@pytest.fixture(scope="module")
def aws_env():
    """Credentials in the environment the standard way (and no instance-metadata lookups), restored afterwards."""
    with s3server.aws_env():
        yield


@pytest.fixture(scope="module")
def s3(aws_env):
    """A moto S3 server holding the demo dump under s3://dumps/rocketmq/demo; yields its endpoint."""
    proc, endpoint = start_moto({})
    try:
        _upload(endpoint, KEY_ID, SECRET)
        yield endpoint
    finally:
        stop(proc)


def uri(endpoint: str, prefix: str = PREFIX, bucket: str = BUCKET) -> str:
    return f"s3://{bucket}/{prefix}?endpoint_override={endpoint}&scheme=http"


def test_store_listing_and_small_files_match_local(s3) -> None:
    local, remote = StoreDir(str(DEMO / "dump")), StoreDir(uri(s3))
    assert remote.root == f"s3://{BUCKET}/{PREFIX}"
    assert [(os.path.basename(f.path), f.base, f.size) for f in remote.commitlog.files] == \
        [(os.path.basename(f.path), f.base, f.size) for f in local.commitlog.files]
    assert remote.commitlog.mapped_file_size == local.commitlog.mapped_file_size == 131072
    assert remote.queue_ids() == local.queue_ids() and remote.queue_ids(ext=True) == local.queue_ids(ext=True)
    assert len(remote.queue_ids()) > 5
    for name in ("consumerFilter", "subscriptionGroup", "consumerOffset", "topics"):
        assert remote.config(name) == local.config(name) is not None
    assert remote.checkpoint() == local.checkpoint() is not None
    for topic, qid in local.queue_ids():
        assert remote.read_queue(topic, qid) == local.read_queue(topic, qid)
        assert remote.read_ext(topic, qid) == local.read_ext(topic, qid)


def test_endpoint_from_aws_endpoint_url(s3, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{s3}")
    store = StoreDir(f"s3://{BUCKET}/{PREFIX}")
    assert len(store.commitlog.files) == 4 and store.config("consumerFilter") is not None


def test_range_scan_reads_only_its_range_in_bounded_reads(s3, monkeypatch) -> None:
    """Splits of a remote commitlog file decode what the local splits decode, and each split's ranged reads stay
    within its range plus the bounded overlap (chunk + the 64 KiB boundary peek), each at most the read chunk."""
    local = StoreDir(str(DEMO / "dump"))
    remote = StoreDir(uri(s3))
    reads: list[tuple[int, int]] = []
    orig = sfs.RemoteFile.readinto_at

    def counting(self, mv, off, chunk=sfs.REMOTE_READ_CHUNK):
        got = orig(self, mv, off, chunk=4096)
        reads.append((off, got))
        return got

    monkeypatch.setattr(sfs.RemoteFile, "readinto_at", counting)
    opts = ScanOptions(chunk_bytes=8192, batch_rows=64)
    for lf, rf in zip(local.commitlog.files, remote.commitlog.files, strict=True):
        lreports, rreports = [], []
        for s, e in iter_ranges(lf.size, 32768):
            reads.clear()
            ls = RangeScan(lf.path, s, e, opts, file_base=lf.base, file_size=lf.size)
            rs = RangeScan(rf.path, s, e, opts, file_base=rf.base, file_size=rf.size)
            lb, rb = ls.batches(), rs.batches()
            assert [b.to_pylist() for b in rb] == [b.to_pylist() for b in lb]
            assert {**vars(rs.report), "path": None} == {**vars(ls.report), "path": None}
            assert reads and all(s <= off and off + n <= e + 8192 + 65536 + 4096 for off, n in reads), (s, e, reads)
            lreports.append(ls.report)
            rreports.append(rs.report)
        la, ra = merge_reports(lreports), merge_reports(rreports)
        assert ra.closes and (ra.records, ra.valid_end, ra.end_kind) == (la.records, la.valid_end, la.end_kind)
        assert ra.records > 100


def _record_opened(monkeypatch) -> list[sfs.RemoteFile]:
    """Every remote file opened from here on, in order (to count its reads and bytes)."""
    opened: list[sfs.RemoteFile] = []
    orig = sfs.open_random

    def keep(p):
        f = orig(p)
        opened.append(f)
        return f

    monkeypatch.setattr(sfs, "open_random", keep)
    return opened


def test_remote_windows_stop_near_the_range_end_and_grow_for_long_records(s3, monkeypatch) -> None:
    """With whole-file chunks a remote window still stops REMOTE_TAIL past its range end; a tail shorter than the
    record crossing the end doubles until it fits, and the rows and reports equal the local scan's."""
    monkeypatch.setattr(scan, "REMOTE_TAIL", 64)  # far shorter than the demo's records: the doubling must kick in
    local, remote = StoreDir(str(DEMO / "dump")), StoreDir(uri(s3))
    opened = _record_opened(monkeypatch)
    opts = ScanOptions(batch_rows=64)  # the default 64 MiB chunk: a whole demo file per window, were it not clipped
    for lf, rf in zip(local.commitlog.files, remote.commitlog.files, strict=True):
        for s, e in iter_ranges(lf.size, 40000):
            opened.clear()
            ls = RangeScan(lf.path, s, e, opts, file_base=lf.base, file_size=lf.size)
            rs = RangeScan(rf.path, s, e, opts, file_base=rf.base, file_size=rf.size)
            assert [r for b in rs.batches() for r in b.to_pylist()] == [r for b in ls.batches() for r in b.to_pylist()]
            assert {**vars(rs.report), "path": None} == {**vars(ls.report), "path": None}
            (f,) = opened
            assert f.lo == s and f.hi <= e + 65536 + 16384, (s, e, f.lo, f.hi)


def test_bodies_read_back_ranged_from_s3_equal_the_local_ones(s3, monkeypatch) -> None:
    """read_bodies of a remote store gives the local store's bodies; a few offsets far apart cost a ranged read
    each, of HEAD_BYTES at most, never the whole file."""
    from filterlib.store import bodies

    local, remote = StoreDir(str(DEMO / "dump")), StoreDir(uri(s3))
    offsets = [r["commit_log_offset"] for f in local.commitlog.files
               for b in RangeScan(f.path, 0, f.size, ScanOptions(want_body=False)) for r in b.to_pylist()]
    want = bodies.read_bodies(local, offsets)
    assert len(offsets) > 500 and all(b is not None for b in want)
    assert bodies.read_bodies(remote, offsets) == want
    opened = _record_opened(monkeypatch)
    monkeypatch.setattr(bodies, "WINDOW_BYTES", 4096)  # the sparse offsets below lie further apart than this
    sparse = offsets[::200]
    assert bodies.read_bodies(remote, sparse) == want[::200]
    assert sum(f.reads for f in opened) == len(sparse)
    assert sum(f.fetched for f in opened) <= len(sparse) * bodies.HEAD_BYTES


def _sorted_rows(spark, wh: str, table: str, dump_id: str) -> list[dict]:
    forms = {"pull_decisions_rows": row_forms.pull_decisions, "delivered_messages_rows": row_forms.delivered_messages}
    df = forms[table](spark, wh, dump_id) if table in forms else read_dump(spark, wh, table, dump_id)
    rows = df.drop("dump_id", *COPY_NAMED).toArrow().to_pylist()
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=repr))


COPY_NAMED = ("since_copy", "until_copy")
"""group_stats' columns that name the store a run read (compared on their own)."""


@pytest.mark.spark
def test_both_jobs_give_the_same_tables_from_s3_as_from_disk(spark, s3, tmp_path) -> None:
    wh = str(tmp_path / "warehouse")
    conf, subs = str(DEMO / "broker.conf"), str(DEMO / "subscriptions.json")
    summaries = {}
    for dump_id, store in (("local", str(DEMO / "dump")), ("remote", uri(s3))):
        args = ["--store", store, "--warehouse", wh, "--broker-conf", conf, "--dump-id", dump_id]
        s1 = build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(
            args + ["--verify", "--split-bytes", "40000"])))
        s2 = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
            args + ["--subscriptions", subs])))
        summaries[dump_id] = (s1, s2)
    tables = ("messages", "consume_queue", "consumer_filters", "dump_files", "queue_diff",
              "pull_decisions", "decision_details", "decision_codes", "pulls", "group_stats",
              "pull_decisions_rows", "delivered_messages_rows")
    for t in tables:
        local, remote = _sorted_rows(spark, wh, t, "local"), _sorted_rows(spark, wh, t, "remote")
        assert remote == local, t
        if t != "queue_diff":  # an untouched dump: the verify finds nothing to report
            assert local, t
    for dump_id, store in (("local", os.path.abspath(DEMO / "dump")), ("remote", sfs.display(uri(s3)))):
        named = {(r.since_copy, r.until_copy) for r in read_dump(spark, wh, "group_stats", dump_id).collect()}
        assert named == {(store, None)}, dump_id
    assert len(_sorted_rows(spark, wh, "messages", "remote")) == summaries["remote"][0].records > 900
    files = sorted(_sorted_rows(spark, wh, "dump_files", "remote"), key=lambda f: f["file_base"])
    assert [f["path"] for f in files] == [f"commitlog/{b:020d}" for b in (0, 131072, 262144, 393216)]
    assert all(f["splits"] == 4 for f in files)


def _one_line_error(capsys, main, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("main", [build_queues.main, simulate_pull.main], ids=["job1", "job2"])
def test_missing_bucket_prefix_and_refused_connection_are_one_line(s3, tmp_path, capsys, main) -> None:
    wh = str(tmp_path / "wh")
    err = _one_line_error(capsys, main, ["--store", uri(s3, bucket="no-such-bucket"), "--warehouse", wh])
    assert "s3://no-such-bucket/rocketmq/demo" in err and "no such bucket" in err
    err = _one_line_error(capsys, main, ["--store", uri(s3, prefix="rocketmq/nope"), "--warehouse", wh])
    assert f"s3://{BUCKET}/rocketmq/nope" in err and "no such key or prefix" in err
    err = _one_line_error(capsys, main, ["--store", uri(s3, prefix=PREFIX + "/commitlog/00000000000000000000"),
                                         "--warehouse", wh])
    assert "a file, not a store directory" in err
    closed = f"127.0.0.1:{free_port()}"
    err = _one_line_error(capsys, main, ["--store", uri(closed), "--warehouse", wh])
    assert f"s3://{BUCKET}/{PREFIX}" in err and "cannot read the store" in err and "connect" in err.lower()
    assert "endpoint_override" not in err


@pytest.fixture(scope="module")
def s3_auth(aws_env):
    """A moto S3 server checking credentials: an IAM user with S3 rights created in the first (unchecked) calls."""
    boto3 = pytest.importorskip("boto3")
    proc, endpoint = start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    try:
        iam = boto3.client("iam", endpoint_url=f"http://{endpoint}", region_name="us-east-1",
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        _upload(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
        yield endpoint, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        stop(proc)


def test_wrong_credentials_are_one_line(s3_auth, tmp_path, capsys, monkeypatch) -> None:
    endpoint, key_id, secret = s3_auth
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    assert len(StoreDir(uri(endpoint)).commitlog.files) == 4  # the right credentials from the environment
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret + "-wrong")
    with pytest.raises(StoreFormatError, match="cannot read the store"):
        StoreDir(uri(endpoint))
    err = _one_line_error(capsys, build_queues.main, ["--store", uri(endpoint), "--warehouse", str(tmp_path)])
    assert f"s3://{BUCKET}/{PREFIX}" in err and "cannot read the store" in err
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")
    err = _one_line_error(capsys, build_queues.main, ["--store", uri(endpoint), "--warehouse", str(tmp_path)])
    assert f"s3://{BUCKET}/{PREFIX}" in err and "cannot read the store" in err


def test_file_uri_is_the_local_store_and_names_never_show_credentials() -> None:
    local, via_uri = StoreDir(str(DEMO / "dump")), StoreDir((DEMO / "dump").as_uri())
    assert via_uri.root == str(DEMO / "dump") and not sfs.is_remote(via_uri.root)
    assert [f.path for f in via_uri.commitlog.files] == [f.path for f in local.commitlog.files]
    assert sfs.display("s3://AKIAX:s3cr3t@bucket/a/b?endpoint_override=h:9000") == "s3://bucket/a/b"
    assert dump_id_of(None, "s3://bucket/dumps/2026-11-24/?endpoint_override=h:9000&scheme=http") == "2026-11-24"
    assert dump_id_of(None, "s3://bucket?endpoint_override=h:9000") == "bucket"
    assert dump_id_of(None, (DEMO / "dump").as_uri()) == "dump"
