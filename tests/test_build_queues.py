"""Job 1 end to end with Spark (the session `spark` fixture) on real 5.3.3 stores written by the reference harness:
the Delta tables equal the harness truth row for row (messages vs listing.json, consume_queue re-encoded vs the
broker's consumequeue/ext files, consumer_filters vs the broker's registry, dump_files vs its commit log walk), a
second run leaves them identical, a damaged commitlog file is reported with its offset and reason while the others
still load, a split that loses sync falls back to a whole-file decode, and bad input is one line and exit 2."""

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

from filterlib.cqexport import encode_queue
from filterlib.store import commitlog as cl
from filterlib.store.properties import encode_properties
from jobs import build_queues
from jobs.delta_io import read_dump, table_path

pytestmark = [pytest.mark.reference, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent
TABLES = ("messages", "consume_queue", "consumer_filters", "dump_files")


def broker_conf(path: Path, broker: dict, store: dict) -> str:
    """A broker.conf with the harness run's effective settings."""
    keys = ["enableConsumeQueueExt", "enableCalcFilterBitMap", "enablePropertyFilter", "expectConsumerNumUseFilter",
            "maxErrorRateOfBloomFilter", "filterSupportRetry"]
    lines = [f"{k}={str(broker[k]).lower()}" for k in keys]
    lines += [f"{k}={store[k]}" for k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue",
                                          "mappedFileSizeConsumeQueueExt")]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


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


def rows(spark, warehouse: str, table: str, dump_id: str, order: list[str]) -> list[dict]:
    return read_dump(spark, warehouse, table, dump_id).orderBy(*order).toArrow().to_pylist()


def check_messages(msgs: list[dict], records: list[dict]) -> None:
    """Table rows against the harness listing (MessageDecoder's reading), field by field."""
    assert len(msgs) == len(records) > 50
    for r, e in zip(msgs, records, strict=True):
        assert (r["position"], r["store_size"], r["magic_code"], r["body_crc"], r["queue_id"], r["flag"]) == \
            (e["commitLogOffset"], e["size"], e["magic"], e["bodyCRC"], e["queueId"], e["flag"])
        assert (r["queue_offset"], r["commit_log_offset"], r["sys_flag"], r["born_timestamp"]) == \
            (e["queueOffset"], e["physicalOffset"], e["sysFlag"], e["bornTimestamp"])
        assert (r["store_timestamp"], r["born_host"], r["store_host"], r["reconsume_times"]) == \
            (e["storeTimestamp"], e["bornHost"], e["storeHost"], e["reconsumeTimes"])
        assert r["prepared_transaction_offset"] == e["preparedTransactionOffset"]
        assert r["body"] == base64.b64decode(e["body"] or "")
        assert r["topic"] == e["topic"] and dict(r["properties"]) == e["properties"]
        assert (r["tags"], r["keys"], r["uniq_key"], r["offset_msg_id"]) == \
            (e["tags"], e["keys"], e["uniqKey"], e["offsetMsgId"])
        if e["cq"] is not None and e["cq"]["tagsCode"] is not None:
            assert r["tags_code"] == int(e["cq"]["tagsCode"])


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
    msgs = rows(spark, warehouse, "messages", "tag", ["commit_log_offset"])
    check_messages(msgs, listing["records"])
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
    check_messages(rows(spark, warehouse, "messages", "damaged", ["commit_log_offset"]), kept)
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


def test_split_that_loses_sync_falls_back_to_a_whole_file_decode(spark, warehouse, tmp_path) -> None:
    """(Internal consistency: the file is the project's own encoding.) With 150-byte splits the second split
    resynchronises on a fake record inside the first record's body; the job re-decodes the file as one range and
    loads only the real records."""
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


def test_bad_input_is_one_line_and_exit_2(tmp_path, tag_run, capsys) -> None:
    wh = str(tmp_path / "wh")
    bad_json = tmp_path / "subs.json"
    bad_json.write_text('[{"group": "G", "topic": "T", "typo": 1}]')
    bad_conf = tmp_path / "broker.conf"
    bad_conf.write_text("messageDelayLevel=1s \\u12\n")
    cases = [
        (["--store", str(tmp_path / "nowhere"), "--warehouse", wh], "store directory not found"),
        (["--store", tag_run["store"], "--warehouse", wh, "--broker-conf", str(tmp_path / "missing.conf")],
         "broker.conf not found"),
        (["--store", tag_run["store"], "--warehouse", wh, "--broker-conf", str(bad_conf)], "malformed broker.conf"),
        (["--store", tag_run["store"], "--warehouse", wh, "--subscriptions", str(bad_json)],
         "entry 0 (group 'G', topic 'T'): unknown key(s) 'typo'"),
        (["--store", str(tmp_path), "--warehouse", wh], "no commitlog files"),
        (["--store", tag_run["store"], "--warehouse", wh, "--dump-id", "a'b"], "dump id \"a'b\""),
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
                 "--check-crc", "--no-check-crc", "--defaults", "--master"):
        assert flag in help_text
    proc = subprocess.run([sys.executable, "-m", "jobs.build_queues", "--store", "/nonexistent/store",
                           "--warehouse", "/tmp/unused-warehouse"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("build_queues: error: store directory not found") and proc.stderr.count("\n") == 1
