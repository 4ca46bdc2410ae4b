"""Job 1 end to end with Spark (the session `spark` fixture) on real 5.3.3 stores written by the reference harness:
the Delta tables equal the harness truth row for row (messages vs listing.json, consume_queue re-encoded vs the
broker's consumequeue/ext files, consumer_filters vs the broker's registry, dump_files vs its commit log walk), a
second run leaves them identical, a damaged commitlog file is reported with its offset and reason while the others
still load, a split that loses sync falls back to a whole-file decode, and bad input is one line and exit 2.
--export-cq writes the broker's consumequeue/ext files byte for byte; --verify finds no difference on an untouched
dump, names every tampered unit and field, and explains the bitmap differences of registrations changed
mid-stream by the rule."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import refharness
import scenarios
from support.job_process import start_job
from support.job_runs import broker_conf, rows, subscriptions_file
from support.registry_replay import hidden_at_dispatch, load_registry

from filterlib.rebuild.dispatch import bit_set
from filterlib.rebuild.export import encode_queue
from filterlib.store import commitlog as cl
from filterlib.store import consumequeue_ext as ext_mod
from filterlib.store.bodies import read_bodies
from filterlib.store.properties import encode_properties
from filterlib.store.properties_text import as_dict
from filterlib.store.storedir import StoreDir
from jobs import build_queues
from jobs.delta_io import table_path
from jobs.runs import read_dump

pytestmark = [pytest.mark.reference, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent
TABLES = ("messages", "consume_queue", "consumer_filters", "dump_files")


@pytest.fixture(scope="module")
def tag_run(tmp_path_factory) -> dict:
    out = refharness.write_store(scenarios.tag_and_sql_scenario(1))
    report = json.loads((out / "report.json").read_text())
    conf = broker_conf(tmp_path_factory.mktemp("conf") / "broker.conf", report["broker"], report["store"])
    return {"out": out, "store": str(out / "store"), "report": report, "conf": conf,
            "listing": json.loads((out / "listing.json").read_text())}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("warehouse"))


def run_job(spark, store: str, warehouse: str, *extra: str) -> build_queues.Summary:
    args = build_queues.parser().parse_args(["--store", store, "--warehouse", warehouse, *extra])
    return build_queues.run(spark, build_queues.validate(args))


def check_messages(msgs: list[dict], records: list[dict], store: str | None = None) -> None:
    """Table rows against the harness listing (MessageDecoder's reading), field by field. The bodies: with `store`
    (job 1 without --bodies) the column is null and each body read back from the store by its commit log offset
    equals the client's decoded body; without it (--bodies) the column holds the stored bytes."""
    assert len(msgs) == len(records) > 50
    for r, e in zip(msgs, records, strict=True):
        assert (r["position"], r["store_size"], r["magic_code"], r["body_crc"], r["queue_id"], r["flag"]) == \
            (e["commitLogOffset"], e["size"], e["magic"], e["bodyCRC"], e["queueId"], e["flag"])
        assert (r["queue_offset"], r["commit_log_offset"], r["sys_flag"], r["born_timestamp"]) == \
            (e["queueOffset"], e["physicalOffset"], e["sysFlag"], e["bornTimestamp"])
        assert (r["store_timestamp"], r["born_host"], r["store_host"], r["reconsume_times"]) == \
            (e["storeTimestamp"], e["bornHost"], e["storeHost"], e["reconsumeTimes"])
        assert r["prepared_transaction_offset"] == e["preparedTransactionOffset"]
        stored = base64.b64decode(e["body"] or "")
        assert r["body"] == (None if store else stored) and r["body_size"] == len(stored)
        assert (r["body_error"] is None) == (e["bodyDecompressed"] is not None)
        assert r["topic"] == e["topic"] and as_dict(r["properties"]) == e["properties"]
        assert (r["tags"], r["keys"], r["uniq_key"], r["offset_msg_id"]) == \
            (e["tags"], e["keys"], e["uniqKey"], e["offsetMsgId"])
        if e["cq"] is not None and e["cq"]["tagsCode"] is not None:
            assert r["tags_code"] == int(e["cq"]["tagsCode"])
    if store:
        got = read_bodies(StoreDir(store), [r["commit_log_offset"] for r in msgs])
        assert got == [None if e["bodyDecompressed"] is None else base64.b64decode(e["bodyDecompressed"])
                       for e in records]


def check_queues(units: list[dict], store: str, st: dict, ext: bool) -> int:
    """consume_queue rows re-encoded per queue equal the broker's consumequeue (and ext) files byte for byte."""
    queues: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for u in units:
        queues[(u["topic"], u["queue_id"])].append(u)
    on_disk = {(t, int(q)) for t in os.listdir(os.path.join(store, "consumequeue"))
               for q in os.listdir(os.path.join(store, "consumequeue", t))}
    assert set(queues) == on_disk
    compared = 0
    for (topic, qid), us in queues.items():
        files = encode_queue([u["queue_offset"] for u in us], [u["commit_log_offset"] for u in us],
                             [u["size"] for u in us], [u["tags_code"] for u in us],
                             [u["msg_store_time"] for u in us], [u["filter_bitmap"] for u in us],
                             st["mappedFileSizeConsumeQueue"], st["mappedFileSizeConsumeQueueExt"], ext)
        for sub, mine in (("consumequeue", files.cq), ("consumequeue_ext", files.ext)):
            d = os.path.join(store, sub, topic, str(qid))
            broker = {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))} if ext or \
                sub == "consumequeue" else {}
            assert mine == broker, (sub, topic, qid)
            compared += len(mine)
    return compared


def table_versions(spark, warehouse: str) -> dict[str, int]:
    return {t: spark.sql(f"DESCRIBE HISTORY delta.`{table_path(warehouse, t)}`").count() for t in TABLES}


def test_tables_equal_the_harness_and_a_rerun_changes_nothing(spark, tag_run, warehouse) -> None:
    """tag_and_sql_scenario (ext and bitmaps on, filters registered before the messages), read through 1500-byte
    splits: every table equals the harness truth; a second run (one range per file this time) replaces the
    dump's rows in one commit per table and leaves every table identical but for the split counts."""
    report, listing = tag_run["report"], tag_run["listing"]
    s = run_job(spark, tag_run["store"], warehouse, "--broker-conf", tag_run["conf"], "--split-bytes", "1500",
                "--dump-id", "tag")
    assert s.ranges > s.files >= 3 and not s.damaged and not s.fallbacks
    assert "message bodies: not written" in "\n".join(s.lines())
    msgs = rows(spark, warehouse, "messages", "tag", ["commit_log_offset"])
    check_messages(msgs, listing["records"], tag_run["store"])
    units = rows(spark, warehouse, "consume_queue", "tag", ["topic", "queue_id", "queue_offset"])
    assert len(units) == sum(r["cq"] is not None for r in listing["records"]) == s.units
    assert check_queues(units, tag_run["store"], report["store"], True) > 10
    assert sum(u["filter_bitmap"] is not None and any(u["filter_bitmap"]) for u in units) > 5
    filters = rows(spark, warehouse, "consumer_filters", "tag", ["topic", "consumer_group"])
    assert [(f["topic"], f["consumer_group"], f["expression"], f["born_time"], f["dead_time"], f["client_version"],
             tuple(f["bloom_bit_pos"]), f["bloom_bit_num"], f["compiled"], f["source"]) for f in filters] == \
        [(f["topic"], f["group"], f["expression"], f["bornTime"], f["deadTime"], f["clientVersion"],
          tuple(f["bloom"]["bitPos"]), f["bloom"]["bitNum"], f["compiled"], "consumerFilter.json")
         for f in sorted(report["filters"], key=lambda f: (f["topic"], f["group"]))]
    files = rows(spark, warehouse, "dump_files", "tag", ["file_base"])
    walked = {f["name"]: f for f in report["commitlog"]["files"]}
    assert [f["path"] for f in files] == [f"commitlog/{n}" for n in sorted(walked)]
    for f in files:
        w = walked[f["path"].split("/")[1]]
        assert (f["records"], f["valid_end"], f["size"]) == (w["records"], w["dataEnd"], w["size"])
        assert (f["end_kind"] == "blank") == (w["blankAt"] is not None) and f["damage_offset"] is None
        assert f["decoded_bytes"] + f["blank_bytes"] + f["zero_tail_bytes"] + f["damaged_bytes"] == f["size"]

    before = {t: rows(spark, warehouse, t, "tag", ["dump_id"] + _key(t)) for t in TABLES}
    versions = table_versions(spark, warehouse)
    run_job(spark, tag_run["store"], warehouse, "--broker-conf", tag_run["conf"], "--dump-id", "tag")
    after = {t: rows(spark, warehouse, t, "tag", ["dump_id"] + _key(t)) for t in TABLES}
    assert [f.pop("splits") for f in before["dump_files"]] != [f.pop("splits") for f in after["dump_files"]]
    assert after == before
    assert table_versions(spark, warehouse) == {t: v + 1 for t, v in versions.items()}


def _scan_rows(df) -> tuple[list, int]:
    """A query's rows, and how many rows its Parquet scan handed on: a row group its reader skipped hands on none."""
    got = df.collect()
    plan, found = df._jdf.queryExecution().executedPlan(), []

    def walk(node) -> None:
        if node.nodeName().startswith("Scan parquet") or "FileSourceScan" in node.getClass().getName():
            found.append(int(node.metrics().apply("numOutputRows").value()))
        for i in range(node.children().size()):
            walk(node.children().apply(i))

    walk(plan)
    assert len(found) == 1, plan.toString()
    return got, found[0]


def test_messages_are_found_by_either_id_through_the_row_groups_bloom_filters(spark, tag_run, tmp_path) -> None:
    """Each messages row group carries bloom filters of uniq_key and offset_msg_id (explain's --msg-id and
    --offset-msg-id): Spark's reader finds every message by each id, and skips the row groups that cannot hold it."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from jobs.decode_tasks import ID_BLOOM_COLUMNS

    wh = str(tmp_path / "wh")
    run_job(spark, tag_run["store"], wh, "--broker-conf", tag_run["conf"], "--dump-id", "tag")
    files = sorted(Path(table_path(wh, "messages")).rglob("*.parquet"))
    groups = 0
    for f in files:
        meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        for g in range(meta.num_row_groups):
            groups += 1
            for c in ID_BLOOM_COLUMNS:
                assert meta.row_group(g).column(names.index(c)).bloom_filter_offset is not None, (f, c)
    assert groups >= 3
    msgs = read_dump(spark, wh, "messages", "tag")
    total = msgs.count()
    ids = msgs.select("commit_log_offset", *ID_BLOOM_COLUMNS).collect()
    assert len(ids) == len(tag_run["listing"]["records"]) and all(r.offset_msg_id for r in ids)
    skipped = 0
    for column in ID_BLOOM_COLUMNS:
        for r in [r for r in ids if r[column] is not None][::30]:  # a spread of rows over the files
            got, read = _scan_rows(msgs.where(F.col(column) == r[column]).select("commit_log_offset"))
            want = sorted(x.commit_log_offset for x in ids if x[column] == r[column])  # an id may repeat
            assert sorted(x.commit_log_offset for x in got) == want, (column, r)
            skipped += read < total
    assert skipped > 0


@pytest.mark.parametrize("make", [lambda: scenarios.tag_and_sql_scenario(1),
                                  lambda: scenarios.client_decode_scenario(3)], ids=["tag_sql", "client_decode"])
def test_tables_equal_a_551_brokers_store(spark, warehouse, tmp_path, make) -> None:
    """Stores the real 5.5.1 broker wrote: with --broker-version 5.5.1 and --bodies the messages (bodies included)
    equal its listing, the rebuilt
    queues its consumequeue/ and consumequeue_ext/ files byte for byte (re-encoded, and exported), --verify finds no
    difference, and the dumps table records the release."""
    sc = make()
    out = refharness.write_store(sc, "5.5.1")
    report = json.loads((out / "report.json").read_text())
    assert report["rocketmqVersion"] == "V5_5_1"
    listing = json.loads((out / "listing.json").read_text())
    conf = broker_conf(tmp_path / "broker.conf", report["broker"], report["store"])
    store, export = str(out / "store"), tmp_path / "export"
    dump_id = f"v551_{id(sc) % 1000}"
    s = run_job(spark, store, warehouse, "--broker-conf", conf, "--dump-id", dump_id, "--broker-version", "5.5.1",
                "--split-bytes", "3000", "--export-cq", str(export), "--verify", "--bodies")
    assert "(broker 5.5.1)" in "\n".join(s.lines()) and "written to messages (--bodies)" in "\n".join(s.lines())
    check_messages(rows(spark, warehouse, "messages", dump_id, ["commit_log_offset"]), listing["records"])
    units = rows(spark, warehouse, "consume_queue", dump_id, ["topic", "queue_id", "queue_offset"])
    ext = report["broker"]["enableConsumeQueueExt"]
    assert check_queues(units, store, report["store"], ext) >= 4
    for sub in ("consumequeue", "consumequeue_ext") if ext else ("consumequeue",):
        mine = {p.relative_to(export / sub): p.read_bytes() for p in (export / sub).rglob("*") if p.is_file()}
        theirs = {p.relative_to(out / "store" / sub): p.read_bytes()
                  for p in (out / "store" / sub).rglob("*") if p.is_file()}
        assert mine == theirs, sub
    assert s.verify.differences == 0 and s.verify.total("dump_units") == s.units
    (row,) = read_dump(spark, warehouse, "dumps", dump_id).collect()
    assert row.broker_version == "5.5.1"


def _codecs(table_dir: Path) -> set[str]:
    """The compression codec of every column chunk of every data file of a Delta table."""
    import pyarrow.parquet as pq

    found = set()
    for f in table_dir.rglob("*.parquet"):
        meta = pq.ParquetFile(f).metadata
        found |= {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
                  for c in range(meta.num_columns)}
    return found


def test_the_defaults_file_parquet_conf_reaches_the_writers(spark, tag_run, tmp_path) -> None:
    """conf/build_queues.json writes zstd (half snappy's size for the messages table, no slower); a defaults
    file of one's own sets its own codec, in a session the job did not start."""
    defaults = json.loads((build_queues.DEFAULTS).read_text())
    run_job(spark, tag_run["store"], str(tmp_path / "a"), "--broker-conf", tag_run["conf"], "--dump-id", "tag")
    assert defaults["parquet_conf"]["spark.sql.parquet.compression.codec"] == "zstd"
    assert _codecs(tmp_path / "a" / "messages") == _codecs(tmp_path / "a" / "consume_queue") == {"ZSTD"}
    mine = tmp_path / "mine.json"
    defaults["parquet_conf"]["spark.sql.parquet.compression.codec"] = "gzip"
    mine.write_text(json.dumps(defaults))
    try:
        run_job(spark, tag_run["store"], str(tmp_path / "b"), "--broker-conf", tag_run["conf"], "--dump-id", "tag",
                "--defaults", str(mine))
    finally:
        spark.conf.unset("spark.sql.parquet.compression.codec")
    assert _codecs(tmp_path / "b" / "messages") == {"GZIP"}


def _key(table: str) -> list[str]:
    return {"messages": ["commit_log_offset"], "consume_queue": ["topic", "queue_id", "queue_offset"],
            "consumer_filters": ["topic", "consumer_group"], "dump_files": ["path"]}[table]


def test_damaged_file_is_reported_and_the_others_load(spark, tag_run, warehouse, tmp_path) -> None:
    """A copy of the store with one record's body flipped in a middle file (CRC check on): dump_files names that
    file, the record's offset and the CRC mismatch; the file's earlier records and every other file's still load;
    the first dump's rows in the same warehouse are untouched."""
    store = tmp_path / "damaged"
    shutil.copytree(tag_run["store"], store)
    records = tag_run["listing"]["records"]
    names = sorted({r["file"] for r in records})
    middle = names[len(names) // 2]
    in_file = [r for r in records if r["file"] == middle]
    victim = next(r for r in in_file[1:] if r["bodyLength"] > 0)
    path = store / "commitlog" / middle
    data = bytearray(path.read_bytes())
    data[victim["filePos"] + victim["size"] - 1 - len(victim["propertiesString"] or "") - 2 - len(victim["topic"])
         - 1 - 1] ^= 0x5A
    path.write_bytes(bytes(data))
    other = len(rows(spark, warehouse, "messages", "tag", ["commit_log_offset"]))

    s = run_job(spark, str(store), warehouse, "--broker-conf", tag_run["conf"], "--split-bytes", "1500")
    (bad,) = s.damaged
    files = {f["path"]: f for f in rows(spark, warehouse, "dump_files", "damaged", ["path"])}
    f = files[f"commitlog/{middle}"]
    assert (f["damage_offset"], f["damage_global_offset"]) == (victim["filePos"], victim["commitLogOffset"])
    assert f["damage_reason"] == "body CRC mismatch" and f["valid_end"] == victim["filePos"] == bad["damage_offset"]
    assert f["decoded_bytes"] + f["blank_bytes"] + f["zero_tail_bytes"] + f["damaged_bytes"] == f["size"]
    assert all(g["damage_offset"] is None for p, g in files.items() if p != f"commitlog/{middle}")
    kept = [r for r in records if r["file"] != middle or r["filePos"] < victim["filePos"]]
    check_messages(rows(spark, warehouse, "messages", "damaged", ["commit_log_offset"]), kept, str(store))
    units = rows(spark, warehouse, "consume_queue", "damaged", ["commit_log_offset"])
    assert [u["commit_log_offset"] for u in units] == [r["commitLogOffset"] for r in kept if r["cq"] is not None]
    assert len(rows(spark, warehouse, "messages", "tag", ["commit_log_offset"])) == other


def _desync_store(root: Path) -> tuple[list[str], int]:
    """A store whose one commitlog file has a record whose body embeds a complete, CRC-valid record carrying its
    own global offset: a split starting inside that body resynchronises on the fake record."""
    size = 4096
    props = encode_properties({"UNIQ_KEY": "A", "TAGS": "TagA"})
    head = cl.encode_record(topic="T", body=b"", properties=props, commit_log_offset=0)
    body_at = len(head) - len(b"T") - 1 - 2 - len(props)
    fake_at = 200
    fake = cl.encode_record(topic="T", body=b"fake", properties=encode_properties({"UNIQ_KEY": "F"}),
                            commit_log_offset=fake_at, queue_offset=99)
    first = cl.encode_record(topic="T", body=bytes(fake_at - body_at) + fake + bytes(300), properties=props,
                             commit_log_offset=0)
    data = bytearray(first)
    keys = ["A"]
    for i in range(3):
        keys.append(f"B{i}")
        data += cl.encode_record(topic="T", body=b"x" * i, properties=encode_properties({"UNIQ_KEY": f"B{i}"}),
                                 commit_log_offset=len(data), queue_offset=i + 1)
    data += cl.encode_blank(size - len(data))
    data += bytes(size - len(data))
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / cl.file_name(0)).write_bytes(bytes(data))
    return keys, 150


@pytest.mark.parametrize("writer", ["tasks", "spark"])
def test_split_that_loses_sync_falls_back_to_a_whole_file_decode(spark, tmp_path, monkeypatch, writer) -> None:
    """(Internal consistency: the file is the project's own encoding.) With 150-byte splits the second split
    resynchronises on a fake record inside the first record's body; the job re-decodes the file as one range and
    loads only the real records, whether the tasks write the messages files (the first pass's files are deleted,
    never committed) or Spark's writer takes the rows (a warehouse pyarrow cannot write to)."""
    if writer == "spark":
        monkeypatch.setattr(build_queues, "_messages_target", lambda spark, inputs: None)
    warehouse = str(tmp_path / "wh")  # its own: no other run's replaced files beside this one's
    keys, split = _desync_store(tmp_path / "desync")
    s = run_job(spark, str(tmp_path / "desync"), warehouse, "--split-bytes", str(split))
    assert s.fallbacks == [cl.file_name(0)]
    msgs = rows(spark, warehouse, "messages", "desync", ["commit_log_offset"])
    assert [m["uniq_key"] for m in msgs] == keys
    units = rows(spark, warehouse, "consume_queue", "desync", ["queue_offset"])
    assert [u["queue_offset"] for u in units] == [0, 1, 2, 3]
    assert all(u["msg_store_time"] is None for u in units)
    (f,) = rows(spark, warehouse, "dump_files", "desync", ["path"])
    assert f["whole_file_fallback"] and f["records"] == 4 and f["end_kind"] == "blank"
    committed = {os.path.basename(p) for p in spark.read.format("delta").load(table_path(warehouse, "messages"))
                 .inputFiles()}
    on_disk = {p.name for p in (Path(warehouse) / "messages").rglob("*.parquet")}
    assert on_disk == committed or writer == "spark"  # no file of the first pass is left behind


def test_spark_writer_path_writes_the_same_messages(spark, tag_run, tmp_path, monkeypatch) -> None:
    """A warehouse the tasks cannot write to (neither local nor s3a) takes the messages rows through Spark's writer
    from the same single decode: the same tables, row for row, as the task-written files (several splits per file,
    --bodies)."""
    args = ("--broker-conf", tag_run["conf"], "--split-bytes", "1500", "--dump-id", "tag", "--bodies")
    run_job(spark, tag_run["store"], str(tmp_path / "a"), *args)
    monkeypatch.setattr(build_queues, "_messages_target", lambda spark, inputs: None)
    s = run_job(spark, tag_run["store"], str(tmp_path / "b"), *args)
    assert not s.issues
    for t in ("messages", "consume_queue"):
        a, b = (rows(spark, str(tmp_path / w), t, "tag", _key(t)) for w in "ab")
        assert a == b
    check_messages(rows(spark, str(tmp_path / "b"), "messages", "tag", ["commit_log_offset"]),
                   tag_run["listing"]["records"])


def test_bad_input_is_one_line_and_exit_2(tmp_path, tag_run, capsys) -> None:
    wh = str(tmp_path / "wh")
    bad_json = tmp_path / "subs.json"
    bad_json.write_text('[{"group": "G", "topic": "T", "typo": 1}]')
    bad_conf = tmp_path / "broker.conf"
    bad_conf.write_text("messageDelayLevel=1s \\u12\n")
    bare = tmp_path / "bare"
    shutil.copytree(os.path.join(tag_run["store"], "commitlog"), bare / "commitlog")
    cases = [
        (["--store", str(tmp_path / "nowhere"), "--warehouse", wh], "store directory not found"),
        (["--store", tag_run["store"], "--warehouse", wh, "--broker-conf", str(tmp_path / "missing.conf")],
         "broker.conf not found"),
        (["--store", tag_run["store"], "--warehouse", wh, "--broker-conf", str(bad_conf)], "malformed broker.conf"),
        (["--store", tag_run["store"], "--warehouse", wh, "--subscriptions", str(bad_json)],
         "entry 0 (group 'G', topic 'T'): unknown key(s) 'typo'"),
        (["--store", str(tmp_path), "--warehouse", wh], "no commitlog files"),
        (["--store", tag_run["store"], "--warehouse", wh, "--dump-id", "a'b"], "dump id \"a'b\""),
        (["--store", str(bare), "--warehouse", wh, "--verify"], "--verify needs the dump's consumequeue/"),
        (["--store", tag_run["store"], "--warehouse", wh, "--export-cq", tag_run["store"]],
         "must not write into the dump itself"),
        (["--store", tag_run["store"], "--warehouse", wh, "--export-cq",
          os.path.join(tag_run["store"], "consumequeue", "x")], "must not write into the dump itself"),
    ]
    for argv, message in cases:
        assert build_queues.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("build_queues: error: ") and message in err and err.count("\n") == 1, err


def test_command_line_help_and_exit_code() -> None:
    """As a process: --help explains every flag; a missing store exits 2 with one line and no Java output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    help_text = subprocess.run([sys.executable, "-m", "jobs.build_queues", "--help"], capture_output=True,
                               text=True, cwd=ROOT, env=env, check=True).stdout
    for flag in ("--store", "--warehouse", "--dump-id", "--broker-conf", "--subscriptions", "--split-bytes",
                 "--check-crc", "--no-check-crc", "--defaults", "--master", "--export-cq", "--verify", "--bodies"):
        assert flag in help_text
    proc = subprocess.run([sys.executable, "-m", "jobs.build_queues", "--store", "/nonexistent/store",
                           "--warehouse", "/tmp/unused-warehouse"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("build_queues: error: store directory not found") and proc.stderr.count("\n") == 1


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root: {relative path: bytes}."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _broker_queue_files(store: str, ext: bool) -> dict[str, bytes]:
    subs = ("consumequeue", "consumequeue_ext") if ext else ("consumequeue",)
    return {k: v for k, v in _tree(Path(store)).items() if k.split("/")[0] in subs}


def diff_rows(spark, warehouse: str, dump_id: str) -> list[dict]:
    return rows(spark, warehouse, "queue_diff", dump_id, ["topic", "queue_id", "queue_offset"])


def test_export_and_verify_on_an_untouched_dump(spark, tag_run, warehouse, tmp_path) -> None:
    """--export-cq writes consumequeue/ and consumequeue_ext/ equal to the broker's files byte for byte (every
    file, every name), replacing what the directory held; --verify on the same untouched dump reports no
    difference, counts every unit of every queue directory on both sides, and writes no queue_diff row."""
    export = tmp_path / "export"
    (export / "consumequeue" / "STALE" / "0").mkdir(parents=True)
    (export / "consumequeue" / "STALE" / "0" / "00000000000000000000").write_bytes(b"old")
    s = run_job(spark, tag_run["store"], warehouse, "--broker-conf", tag_run["conf"], "--split-bytes", "1500",
                "--dump-id", "tagv", "--export-cq", str(export), "--verify")
    broker = _broker_queue_files(tag_run["store"], ext=True)
    assert len(broker) > 20 and any(k.startswith("consumequeue_ext/") for k in broker)
    assert _tree(export) == broker
    with_cq = [r for r in tag_run["listing"]["records"] if r["cq"] is not None]
    queues = {(r["topic"], r["queueId"]) for r in with_cq}
    assert {(q["topic"], q["queue_id"]) for q in s.export.queues} == queues and not s.export.failed
    assert sum(q["units"] for q in s.export.queues) == len(with_cq)

    v = s.verify
    assert v.differences == 0 and diff_rows(spark, warehouse, "tagv") == []
    assert {(q["topic"], q["queue_id"]) for q in v.queues} == queues
    assert v.total("dump_units") == v.total("rebuild_units") == len(with_cq)
    assert any(line.endswith(": no difference") for line in s.lines())


def _unit_at(store: Path, topic: str, qid: int, offset: int, cq_size: int) -> tuple[Path, int]:
    """The consumequeue file and byte position of a queue offset's unit."""
    byte = offset * 20
    start = byte - byte % cq_size
    return store / "consumequeue" / topic / str(qid) / cl.file_name(start), byte - start


def test_verify_names_each_tampered_unit_and_field(spark, tag_run, warehouse, tmp_path) -> None:
    """A copy of the dump with its queues tampered with, five ways: a unit's size, a unit's tagsCode field (an ext
    address replaced by a plain code), a set bit of an ext bitmap cleared, the last unit of a queue zeroed, and a
    unit appended after a queue's end. queue_diff holds exactly those five units, each with its kind and fields,
    the dump's tampered value and the rebuild's, which is the harness listing's (MessageDecoder and the broker's
    own queue entry); the bitmap difference is not explained by the rule. Nothing else differs."""
    store = tmp_path / "tampered"
    shutil.copytree(tag_run["store"], store)
    st = tag_run["report"]["store"]
    cq_size, ext_size = st["mappedFileSizeConsumeQueue"], st["mappedFileSizeConsumeQueueExt"]
    truth = {(r["topic"], r["queueId"], r["queueOffset"]): r for r in tag_run["listing"]["records"]
             if r["cq"] is not None}

    def patch(path: Path, pos: int, data: bytes) -> None:
        b = bytearray(path.read_bytes())
        b[pos:pos + len(data)] = data
        path.write_bytes(bytes(b))

    topic = scenarios.TOPIC
    size_key = (topic, 0, 5)
    path, pos = _unit_at(store, *size_key, cq_size)
    patch(path, pos + 8, (truth[size_key]["size"] + 1).to_bytes(4, "big"))

    tags_key = (topic, 1, 7)
    path, pos = _unit_at(store, *tags_key, cq_size)
    patch(path, pos + 12, (12345).to_bytes(8, "big", signed=True))

    bitmap_key = next(k for k, r in sorted(truth.items()) if k[:2] == (topic, 0) and k != size_key
                      and r["cq"]["ext"]["bitmapHex"] and int(r["cq"]["ext"]["bitmapHex"], 16))
    bitmap = bytes.fromhex(truth[bitmap_key]["cq"]["ext"]["bitmapHex"])
    byte = next(i for i, b in enumerate(bitmap) if b)
    flipped = bitmap[:byte] + bytes([bitmap[byte] & (bitmap[byte] - 1)]) + bitmap[byte + 1:]  # lowest set bit off
    real = ext_mod.undecorate(int(truth[bitmap_key]["cq"]["tagsCodeRaw"]))
    ext_file = store / "consumequeue_ext" / topic / "0" / cl.file_name(real - real % ext_size)
    patch(ext_file, real % ext_size + 20, flipped)

    half = "RMQ_SYS_TRANS_HALF_TOPIC"
    last_key = max(k for k in truth if k[:2] == (half, 0))
    path, pos = _unit_at(store, *last_key, cq_size)
    patch(path, pos, bytes(20))

    copy_of = max(k for k in truth if k[:2] == (topic, 0))
    extra_key = (topic, 0, copy_of[2] + 1)
    src, src_pos = _unit_at(store, *copy_of, cq_size)
    path, pos = _unit_at(store, *extra_key, cq_size)
    assert path == src  # room in the queue's last file
    patch(path, pos, src.read_bytes()[src_pos:src_pos + 20])

    s = run_job(spark, str(store), warehouse, "--broker-conf", tag_run["conf"], "--dump-id", "tampered",
                "--verify")
    got = {(d["topic"], d["queue_id"], d["queue_offset"]): d for d in diff_rows(spark, warehouse, "tampered")}
    tags_truth = truth[tags_key]["cq"]
    tags_fields = [f for f, differs in (("tags_code", int(tags_truth["tagsCode"]) != 12345),
                                        ("msg_store_time", True),
                                        ("filter_bitmap", tags_truth["ext"]["bitmapHex"] is not None)) if differs]
    assert {k: (d["kind"], d["fields"]) for k, d in got.items()} == {
        size_key: ("differs", ["size"]), tags_key: ("differs", tags_fields),
        bitmap_key: ("differs", ["filter_bitmap"]), last_key: ("missing", []), extra_key: ("extra", [])}
    assert not any(d["explained"] for d in got.values())

    d = got[size_key]
    assert (d["dump_size"], d["rebuild_size"]) == (truth[size_key]["size"] + 1, truth[size_key]["size"])
    assert "size" in d["reason"]
    d = got[tags_key]
    assert (d["dump_cq_tags_field"], d["dump_tags_code"], d["dump_msg_store_time"]) == (12345, 12345, None)
    assert (d["rebuild_tags_code"], d["rebuild_msg_store_time"]) == \
        (int(tags_truth["tagsCode"]), tags_truth["ext"]["msgStoreTime"])
    d = got[bitmap_key]
    assert (d["dump_filter_bitmap"], d["rebuild_filter_bitmap"]) == (flipped, bitmap)
    assert "NOT explained by the rule" in d["reason"]
    d = got[last_key]
    assert d["dump_commit_log_offset"] is None and d["rebuild_commit_log_offset"] == truth[last_key]["physicalOffset"]
    d = got[extra_key]
    assert d["rebuild_commit_log_offset"] is None and d["dump_commit_log_offset"] == truth[copy_of]["physicalOffset"]

    v = s.verify
    assert (v.total("missing"), v.total("extra"), v.total("differs"), v.total("explained")) == (1, 1, 3, 0)
    text = "\n".join(s.lines())
    for (t, q, o), d in got.items():
        assert f"({t}, {q}) offset {o}: {d['kind']}" in text
    assert "5 differences in 3 queues" in text and "5 unexplained" in text


def _harness_run(sc: dict, tmp_path_factory, version: str = refharness.DEFAULT_VERSION) -> dict:
    out = refharness.write_store(sc, version)
    report = json.loads((out / "report.json").read_text())
    conf = broker_conf(tmp_path_factory.mktemp("conf") / "broker.conf", report["broker"], report["store"])
    return {"out": out, "store": str(out / "store"), "report": report, "conf": conf, "scenario": sc,
            "listing": json.loads((out / "listing.json").read_text())}


def test_verify_explains_registrations_changed_mid_stream(spark, warehouse, tmp_path_factory) -> None:
    """varied_scenario(1) registers, changes and removes SQL92 filters between messages, so the dump's bitmaps hold
    bits the rule cannot know of. queue_diff holds exactly the units whose broker bitmap (the harness listing)
    differs from the rebuilt one, each a bitmap-only difference explained by the rule, and each explanation names
    a (group, topic) the broker really held at dispatch that the final registry hides (replayed from the harness
    report as in test_dispatch)."""
    run = _harness_run(scenarios.varied_scenario(1), tmp_path_factory)
    assert run["report"]["broker"]["enableConsumeQueueExt"]
    s = run_job(spark, run["store"], warehouse, "--broker-conf", run["conf"], "--dump-id", "varied1", "--verify")
    truth = {(r["topic"], r["queueId"], r["queueOffset"]): r for r in run["listing"]["records"] if r["cq"]}
    rebuilt = {(u["topic"], u["queue_id"], u["queue_offset"]): u["filter_bitmap"]
               for u in rows(spark, warehouse, "consume_queue", "varied1", ["topic"])}
    assert set(rebuilt) == set(truth)
    broker = {k: None if r["cq"]["ext"]["bitmapHex"] is None else bytes.fromhex(r["cq"]["ext"]["bitmapHex"])
              for k, r in truth.items()}
    differing = {k for k in truth if rebuilt[k] != broker[k]}
    diffs = diff_rows(spark, warehouse, "varied1")
    assert {(d["topic"], d["queue_id"], d["queue_offset"]) for d in diffs} == differing and len(differing) > 10
    hidden = hidden_at_dispatch(run, load_registry(run["store"], run["report"]["broker"]))
    for d in diffs:
        k = (d["topic"], d["queue_id"], d["queue_offset"])
        assert (d["kind"], d["fields"], d["explained"]) == ("differs", ["filter_bitmap"], True), d["reason"]
        assert (d["dump_filter_bitmap"], d["rebuild_filter_bitmap"]) == (broker[k], rebuilt[k])
        held, _ = hidden[truth[k]["physicalOffset"]]
        assert any(f"({g}, {t})" in d["reason"] for g, t in held), (d["reason"], held)
    assert s.verify.total("explained") == len(diffs) and s.verify.total("differs") == len(diffs)
    assert f"{len(diffs)} bitmap differences explained by the rule, 0 unexplained" in "\n".join(s.lines())


def test_filters_the_dump_registry_does_not_hold_set_no_bits(spark, warehouse, tmp_path_factory) -> None:
    """unregistered_filters_scenario: the subscriptions file names G_NEVER and G_PLAIN (never registered) and
    G_CLEAN (registered for the `mid*` messages, then unregistered and cleaned). With the dump's registry, job 1's
    bitmaps hold no bit of them: every unit's rebuilt bitmap equals the real broker's outside the `mid*` messages
    (a null one on the topic without filter data), and on `mid*` it lacks only bits --verify explains by the
    removed (G_CLEAN, topic), with none unexplained. The summary names the rule and the filters left out."""
    sc = scenarios.unregistered_filters_scenario(1)
    run = _harness_run(sc, tmp_path_factory)
    assert [(f["group"], f["topic"]) for f in run["report"]["filters"]] == [("G_REG", scenarios.TOPIC)]
    subs = subscriptions_file(tmp_path_factory.mktemp("subs") / "subs.json", sc["subscriptions"])
    s = run_job(spark, run["store"], warehouse, "--broker-conf", run["conf"], "--subscriptions", subs,
                "--dump-id", "unreg", "--verify")
    truth = {(r["topic"], r["queueId"], r["queueOffset"]): r for r in run["listing"]["records"] if r["cq"]}
    rebuilt = {(u["topic"], u["queue_id"], u["queue_offset"]): u["filter_bitmap"]
               for u in rows(spark, warehouse, "consume_queue", "unreg", ["topic"])}
    assert set(rebuilt) == set(truth)
    clean_bits = {p for r in run["report"]["registrations"] if r.get("group") == "G_CLEAN" and r.get("bloom")
                  for p in r["bloom"]["bitPos"]}
    differing = set()
    for k, r in truth.items():
        hexmap = r["cq"]["ext"]["bitmapHex"]
        broker = None if hexmap is None else bytes.fromhex(hexmap)
        if k[0] == scenarios.UNREGISTERED_TOPIC:
            assert broker is None and rebuilt[k] is None, k
        elif not r["scenarioId"].startswith("mid"):
            assert rebuilt[k] == broker, k
        else:
            assert broker is not None and rebuilt[k] is not None
            mine, theirs = bit_set(rebuilt[k]), bit_set(broker)
            assert mine <= theirs and theirs - mine <= clean_bits, k
            if mine != theirs:
                differing.add(k)
    diffs = diff_rows(spark, warehouse, "unreg")
    assert {(d["topic"], d["queue_id"], d["queue_offset"]) for d in diffs} == differing and len(differing) >= 5
    for d in diffs:
        assert (d["kind"], d["explained"]) == ("differs", True) and f"(G_CLEAN, {scenarios.TOPIC})" in d["reason"]
    assert s.verify.total("explained") == len(diffs)
    text = "\n".join(s.lines())
    assert "the dump's registry" in text and "(G_NEVER, TopicTest)" in text and "(G_PLAIN, TopicPlain)" in text
    assert f"{len(diffs)} bitmap differences explained by the rule, 0 unexplained" in text


def test_a_dump_without_a_registry_takes_the_files_sql92_subscriptions(spark, warehouse, tmp_path,
                                                                       tmp_path_factory) -> None:
    """The same dump without config/consumerFilter.json: the file's registered SQL92 subscriptions count as
    registered with bornTime 0, so every unit of their topics gets a bitmap, whose bits are exactly those of
    the subscriptions whose selector (the real broker's evaluation, from the harness's eval mode) is TRUE on the
    message; the summary says this rule ran."""
    sc = scenarios.unregistered_filters_scenario(1)
    run = _harness_run(sc, tmp_path_factory)
    store = tmp_path / "store"
    shutil.copytree(run["store"], store)
    for name in ("consumerFilter.json", "consumerFilter.json.bak"):
        (store / "config" / name).unlink(missing_ok=True)
    subs = subscriptions_file(tmp_path / "subs.json", sc["subscriptions"])
    s = run_job(spark, str(store), warehouse, "--broker-conf", run["conf"], "--subscriptions", subs,
                "--dump-id", "noreg")
    assert "no readable consumerFilter.json" in "\n".join(s.lines())
    assert "(G_NEVER, TopicTest)" in "\n".join(s.lines())
    filters = rows(spark, warehouse, "consumer_filters", "noreg", ["topic", "consumer_group"])
    assert {(f["consumer_group"], f["topic"], f["born_time"]) for f in filters} == {
        (s_["group"], s_["topic"], 0) for s_ in sc["subscriptions"] if s_.get("type") == "SQL92"}
    bits = {(f["consumer_group"], f["topic"]): set(f["bloom_bit_pos"]) for f in filters}
    records = [r for r in run["listing"]["records"] if r["cq"]]
    exprs = [(s_["group"], s_["topic"], s_["expression"]) for s_ in sc["subscriptions"] if s_.get("type") == "SQL92"]
    results = refharness.eval_cases([{"kind": "sql", "expr": e, "props": [r["properties"] or {} for r in records]}
                                     for _, _, e in exprs])
    want: dict[tuple, set] = {(r["topic"], r["queueId"], r["queueOffset"]): set() for r in records}
    for (g, t, _), res in zip(exprs, results, strict=True):
        for r, ev in zip(records, res["evals"], strict=True):
            if r["topic"] == t and ev["match"]:
                want[(r["topic"], r["queueId"], r["queueOffset"])] |= bits[(g, t)]
    rebuilt = {(u["topic"], u["queue_id"], u["queue_offset"]): u["filter_bitmap"]
               for u in rows(spark, warehouse, "consume_queue", "noreg", ["topic"])}
    assert set(rebuilt) == set(want)
    for k, b in rebuilt.items():
        assert b is not None and bit_set(b) == want[k], k


def test_export_and_verify_without_ext(spark, warehouse, tmp_path, tmp_path_factory) -> None:
    """varied_scenario(2) runs the broker with ConsumeQueueExt off (retry, delayed and transactional records, three
    topics): the export is the broker's consumequeue/ byte for byte and no consumequeue_ext/; verify finds no
    difference."""
    run = _harness_run(scenarios.varied_scenario(2), tmp_path_factory)
    assert not run["report"]["broker"]["enableConsumeQueueExt"]
    export = tmp_path / "export"
    s = run_job(spark, run["store"], warehouse, "--broker-conf", run["conf"], "--dump-id", "varied2",
                "--split-bytes", "3000", "--export-cq", str(export), "--verify")
    broker = _broker_queue_files(run["store"], ext=False)
    assert len(broker) > 10 and _tree(export) == broker and not (export / "consumequeue_ext").exists()
    assert s.verify.differences == 0 and s.verify.total("dump_units") == s.units > 100
    assert diff_rows(spark, warehouse, "varied2") == []


@pytest.mark.parametrize("version", ["5.3.3", "4.9.7"])
def test_multi_dispatch_units_equal_the_brokers_lmq_queues(spark, warehouse, tmp_path, tmp_path_factory,
                                                           version) -> None:
    """lmq_scenario runs the broker with enableMultiDispatch and enableLmq: every light message queue it wrote
    (consumequeue/%LMQ%.../0, plain tagsCodes, no ext units) is exported byte for byte beside the topics' own
    queues, verify finds no difference, and the consume_queue table holds each LMQ unit at its queue offset. Job 1
    detects the release: 5.3.3 skips retry, system and delayed records and names holding "/", while 4.9.7 dispatches
    every record to every queue named, plain names under the record's queue id. A name holding "/" nests its
    directories (consumequeue/%LMQ%orders/eu/0), which the broker's load skips (queue id "eu" is not a number): verify
    finds exactly those units missing from the dump's loadable queues."""
    run = _harness_run(scenarios.lmq_scenario(5), tmp_path_factory, version)
    export = tmp_path / "export"
    name = f"lmq_{version.replace('.', '_')}"
    s = run_job(spark, run["store"], warehouse, "--broker-conf", run["conf"], "--dump-id", name,
                "--split-bytes", "3000", "--export-cq", str(export), "--verify")
    assert any(line.startswith(f"broker version {version} (detected") for line in s.lines())
    broker = _broker_queue_files(run["store"], ext=True)
    lmq_files = [k for k in broker if k.startswith("consumequeue/%LMQ%")]
    assert len(lmq_files) >= 4 and _tree(export) == broker
    assert not [k for k in broker if k.startswith("consumequeue_ext/%LMQ%")]
    nested = {k: sum(int.from_bytes(v[i + 8:i + 12], "big") > 0 for i in range(0, len(v), 20))  # units of size > 0
              for k, v in broker.items() if k.count("/") > 3}  # consumequeue/<a>/<b>/<qid>/<file>
    diffs = diff_rows(spark, warehouse, name)
    assert s.verify.differences == len(diffs) == sum(nested.values())
    assert {(d["topic"], d["kind"]) for d in diffs} == \
        {(k.split("/", 1)[1].rsplit("/", 2)[0], "missing") for k in nested}
    assert (version == "4.9.7") == bool(nested)
    own = sum(r["cq"] is not None for r in run["listing"]["records"])
    units = read_dump(spark, warehouse, "consume_queue", name).where("topic like '%LMQ%%'").collect()
    assert len(units) > 40
    assert {u.queue_id for u in units} == {0} and all(u.msg_store_time is None for u in units)
    others = s.units - own - len(units)  # multi-dispatch units in queues that are not %LMQ%
    assert others == 0 if version == "5.3.3" else others > 0


def test_queue_writer_streams_the_bytes_encode_queue_makes(tmp_path) -> None:
    """(Internal consistency, no harness: encode_queue itself is held to the broker's files above and in
    test_dispatch.) QueueWriter fed in random slices writes the files encode_queue returns: pre-blank units before
    a first offset that is not 0, CQ and ext file rollover (tiny mapped sizes), units without an ext unit, bitmaps
    of several widths and none; a queue with a gap raises QueueGap and abort leaves no file."""
    import random

    import pyarrow as pa

    from filterlib.rebuild.export import QueueGap, QueueWriter

    rng = random.Random(7)
    for trial in range(150):
        n = rng.randint(1, 90)
        first = rng.choice([0, rng.randint(1, 40)])
        ext = rng.random() < 0.75
        width = rng.choice([0, 1, 4, 14])
        cols = ([first + i for i in range(n)], [rng.randint(0, 1 << 40) for _ in range(n)],
                [rng.randint(1, 5000) for _ in range(n)], [rng.randint(-(1 << 31), (1 << 31) - 1) for _ in range(n)],
                [rng.randint(0, 1 << 41) if rng.random() < 0.9 else None for _ in range(n)])
        bitmaps = [bytes(rng.randrange(256) for _ in range(width)) if t is not None and width and rng.random() < 0.7
                   else None for t in cols[4]]
        cq_size, ext_size = rng.choice([20, 100, 210, 6000]), rng.choice([64, 100, 512])
        want = encode_queue(*cols, bitmaps, cq_size, ext_size, ext)
        root = tmp_path / str(trial)
        w = QueueWriter(str(root), "T", 3, cq_size, ext_size, ext)
        i = 0
        while i < n:
            k = rng.randint(1, 25)
            w.add(*(pa.array(c[i:i + k], t) for c, t in zip((*cols, bitmaps), (
                pa.int64(), pa.int64(), pa.int32(), pa.int64(), pa.int64(), pa.binary()), strict=True)))
            i += k
        w.close()
        assert _tree(root / "consumequeue" / "T" / "3") == want.cq
        assert (_tree(root / "consumequeue_ext" / "T" / "3") if ext else {}) == want.ext
        assert not (root / "consumequeue_ext").exists() or ext

    w = QueueWriter(str(tmp_path / "gap"), "T", 0, 100, 512, True)
    w.add([0, 1, 2], [0, 10, 20], [10, 10, 10], [1, 2, 3], pa.array([5, 6, 7]), pa.array([None] * 3, pa.binary()))
    with pytest.raises(QueueGap, match="queue offset 4 where 3 was expected"):
        w.add([4], [30], [10], [4], pa.array([8]), pa.array([None], pa.binary()))
    w.abort()
    assert _tree(tmp_path / "gap") == {}


def test_a_run_killed_while_writing_leaves_each_table_whole_and_the_next_run_completes(spark, tag_run, tmp_path
                                                                                      ) -> None:
    """A clean run, then `python -m jobs.build_queues` on a smaller copy of the dump (its last commitlog file
    removed) under the same dump id, killed with SIGKILL as soon as the first data file of its messages write
    appears: messages still holds the clean run's rows (the write's files are there, its commit is not), every
    other table holds either the clean run's rows or the smaller dump's, never a mix or a duplicate; the next
    run, `main` itself, replaces the run marker the killed run left and leaves every table equal to the clean
    run's."""
    import signal
    import time

    wh = str(tmp_path / "wh")
    clean_args = ("--broker-conf", tag_run["conf"], "--dump-id", "kill")
    run_job(spark, tag_run["store"], wh, *clean_args)
    clean = {t: rows(spark, wh, t, "kill", ["dump_id"] + _key(t)) for t in TABLES}
    smaller = tmp_path / "smaller"
    shutil.copytree(tag_run["store"], smaller)
    last = sorted((smaller / "commitlog").iterdir())[-1]
    last.unlink()
    msg_dir = Path(wh) / "messages"
    before = {p.name for p in msg_dir.rglob("*.parquet")}
    proc = start_job("jobs.build_queues", "--store", str(smaller), "--warehouse", wh, *clean_args,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not {p.name for p in msg_dir.rglob("*.parquet")} - before:
            assert proc.poll() is None, "the run ended before writing messages"
            assert time.monotonic() < deadline, "no messages data file within 5 minutes"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # the job and the JVM it started, nothing else
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    after = {t: rows(spark, wh, t, "kill", ["dump_id"] + _key(t)) for t in TABLES}
    assert after["messages"] == clean["messages"]
    small = [r for r in clean["messages"] if r["position"] < int(last.name)]
    assert len(small) < len(clean["messages"])
    for t in ("consume_queue", "consumer_filters", "dump_files"):
        if after[t] != clean[t]:  # the killed run committed this table: all of the smaller dump's rows
            assert len(after[t]) == len({tuple(r[k] for k in _key(t)) for r in after[t]})
            if t == "consume_queue":
                assert after[t] == [u for u in clean[t] if u["commit_log_offset"] < int(last.name)]
            if t == "dump_files":
                assert [f["path"] for f in after[t]] == [f["path"] for f in clean[t]][:-1]

    # the killed run's marker stays behind; the next run (the entry point itself) replaces it, its pid being gone
    from jobs.runlock import Holder, marker_path

    assert Holder.decode(Path(marker_path(wh, "kill")).read_bytes()).pid == proc.pid
    assert build_queues.main(["--store", tag_run["store"], "--warehouse", wh, *clean_args], spark=spark) == 0
    assert not Path(marker_path(wh, "kill")).exists()
    assert {t: rows(spark, wh, t, "kill", ["dump_id"] + _key(t)) for t in TABLES} == clean
