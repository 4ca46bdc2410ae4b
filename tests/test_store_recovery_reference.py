"""Job 1's damage accounting follows the recovery the dump's broker runs (issue 18 item 4), held to the real
`DefaultMessageStore.load()` of each release (PROTOCOL.md, recover).

From 5.5.0, recoverAbnormally (the abort file a crash leaves) with checkCommitLogOffsetOnRecover (default false)
ends the valid data at a record whose PHYSICALOFFSET field lies outside [file start, file start + file size];
recoverNormally never checks the field, 5.3.3 has no such setting, and no release compares the field with the
record's position. The store is a real one (one 64 KiB commit log file, written by each release's broker) with one
record's PHYSICALOFFSET rewritten (its body CRC still holds): just past the file, exactly at its end, or a few bytes
off its own position inside the file."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest
import refharness
import scenarios
from support.job_runs import broker_conf

from filterlib.brokerversion import recovery_rules
from filterlib.store import commitlog as cl
from filterlib.store.scan import ScanOptions, decode_file
from jobs import build_queues
from jobs.runs import read_dump

pytestmark = pytest.mark.reference
VERSIONS = list(refharness.VERSIONS)
FILE = 1 << 16
CASES = [("outside", False, False), ("outside", False, True), ("outside", True, False), ("outside", True, True),
         ("at_end", True, True), ("inside", True, True)]


def _damaged(version: str, where: str) -> tuple[Path, dict, dict]:
    """A copy of the release's store with the middle record's PHYSICALOFFSET rewritten (content-addressed under the
    harness cache, so the recover run's cache key is stable); with the write report and the record."""
    sc = scenarios.tag_and_sql_scenario(1)
    sc["store"] = {**sc["store"], "mappedFileSizeCommitLog": FILE}
    out = refharness.write_store(sc, version)
    report = json.loads((out / "report.json").read_text())
    records = json.loads((out / "listing.json").read_text())["records"]
    assert [f["name"] for f in report["commitlog"]["files"]] == ["0" * 20]
    rec = records[len(records) // 2]
    phys = {"outside": FILE + 1, "at_end": FILE, "inside": rec["commitLogOffset"] + 8}[where]
    data = bytearray((out / "store" / "commitlog" / rec["file"]).read_bytes())
    struct.pack_into(">q", data, rec["filePos"] + 28, phys)
    root = refharness.CACHE_DIR / "recover-inputs" / hashlib.sha256(bytes(data)).hexdigest()[:24]
    if not (root / "commitlog" / rec["file"]).exists():
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(out / "store", root)
        (root / "commitlog" / rec["file"]).write_bytes(bytes(data))
    end = records[-1]["commitLogOffset"] + records[-1]["size"]
    return root, report, {**rec, "end": end, "index": len(records) // 2}


def _recovered(version: str, root: Path, report: dict, crashed: bool, check: bool) -> dict:
    """The real broker's recovery of the store: its max physical offset after load()."""
    out = refharness.run("recover", {"storeDir": str(root), "abort": crashed, "checkCommitLogOffsetOnRecover": check,
                                     "broker": report["broker"], "store": report["store"],
                                     "storeDigest": refharness.store_digest(root)}, version=version)
    return json.loads((out / "output.json").read_text())


@pytest.mark.parametrize("version", VERSIONS)
def test_damage_accounting_follows_each_releases_recovery(version) -> None:
    """Per case, job 1's scan with the release's recovery rules keeps exactly what the real load() keeps; only 5.5.x
    after a crash with the setting on truncates, and only at a PHYSICALOFFSET outside the file."""
    truncated = []
    for where, crashed, check in CASES:
        root, report, rec = _damaged(version, where)
        real = _recovered(version, root, report, crashed, check)
        assert real["loaded"] and real["abort"] == crashed
        # the setting exists from 5.5.0 on
        assert real["checkCommitLogOffsetOnRecover"] == ("absent" if version in ("4.9.7", "5.3.3")
                                                         else str(check).lower())
        rules = recovery_rules(version, crashed, check)
        _, acc = decode_file(str(root / "commitlog" / rec["file"]),
                             ScanOptions.of(rules, check_crc=True), 3000)
        case = (version, where, crashed, check, real["maxPhyOffset"], acc.valid_end, acc.damage)
        if real["maxPhyOffset"] < rec["end"]:
            truncated.append((where, crashed, check))
            assert real["maxPhyOffset"] == rec["commitLogOffset"], case
            assert [(d.global_offset, d.reason) for d in acc.damage][:1] == [
                (rec["commitLogOffset"], cl.REASONS[cl.OFFSET_OUTSIDE_FILE])], case
        else:
            assert real["maxPhyOffset"] == rec["end"] and acc.valid_end == rec["end"] and not acc.damage, case
    assert truncated == ([] if version in ("4.9.7", "5.3.3") else [("outside", True, True)])


@pytest.mark.spark
def test_job_1_says_which_recovery_ran_and_reports_the_record_it_ends_at(spark, tmp_path) -> None:
    """A 5.5.1 dump with an abort file, broker.conf checkCommitLogOffsetOnRecover=true: the dump_files row's damage
    is the record the real recovery truncates at, and the summary names recoverAbnormally and the check."""
    root, report, rec = _damaged("5.5.1", "outside")
    real = _recovered("5.5.1", root, report, True, True)
    store = tmp_path / "store"
    shutil.copytree(root, store)
    (store / "abort").write_bytes(b"")
    conf = broker_conf(tmp_path / "broker.conf", report["broker"], report["store"])
    with open(conf, "a") as f:
        f.write("checkCommitLogOffsetOnRecover=true\n")
    wh = str(tmp_path / "wh")
    args = ["--store", str(store), "--warehouse", wh, "--broker-conf", conf, "--dump-id", "crashed",
            "--broker-version", "5.5.1", "--split-bytes", "5000"]
    s = build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args)))
    text = "\n".join(s.lines())
    assert "recoverAbnormally" in text and "checkCommitLogOffsetOnRecover" in text, text
    (row,) = read_dump(spark, wh, "dump_files", "crashed").collect()
    assert row.damage_global_offset == real["maxPhyOffset"] == rec["commitLogOffset"]
    assert row.damage_reason == cl.REASONS[cl.OFFSET_OUTSIDE_FILE]
    assert s.records == rec["index"]  # the records before it: the real recovery keeps exactly those
