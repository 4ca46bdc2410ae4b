"""filterlib.store.bodies against real stores the reference harness writes with the 5.3.3 jars: every record's
body read back by its commit log offset equals the harness listing (the stored bytes, and MessageDecoder's
decompressed body, or a decode error exactly where the real decode failed); offsets that hold no record say so."""

from __future__ import annotations

import base64
import json
import os
import random

import pytest
import refharness
import scenarios

from filterlib.store import bodies
from filterlib.store.bodies import read_bodies, read_stored
from filterlib.store.scan import COMPRESSED_ONLY, ScanOptions
from filterlib.store.storedir import StoreDir

pytestmark = pytest.mark.reference

SCENARIOS = {"varied": lambda: _no_subs(scenarios.varied_scenario(2)),
             "client_decode": lambda: scenarios.client_decode_scenario(3)}


def _no_subs(sc: dict) -> dict:
    sc["subscriptions"] = []
    return sc


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def store(request) -> tuple[StoreDir, list[dict], list[dict]]:
    """A real store, its listing's records and its BLANK fillers."""
    out = refharness.write_store(SCENARIOS[request.param]())
    listing = json.loads((out / "listing.json").read_text(encoding="utf-8"))
    return StoreDir(str(out / "store")), listing["records"], listing["blanks"]


def test_every_body_equals_the_listing(store) -> None:
    sd, records, _ = store
    records = [r for r in records if not r.get("decodeError")]
    offsets = [r["commitLogOffset"] for r in records]
    got = read_stored(sd, offsets)
    assert len(got) == len(records) > 50
    compressed = failed = 0
    for g, r in zip(got, records, strict=True):
        assert g.offset == r["commitLogOffset"] and g.sys_flag == r["sysFlag"]
        assert g.stored == base64.b64decode(r["body"] or "")
        assert len(g.stored) == r["bodyLength"]
        if r["bodyDecompressed"] is None:
            failed += 1
            assert g.body is None and g.error and ": " in g.error
        else:
            assert g.body == base64.b64decode(r["bodyDecompressed"]) and g.error is None
        compressed += bool(r["sysFlag"] & 1)
    assert compressed
    assert read_bodies(sd, offsets) == [g.body for g in got]
    if any(r["sysFlag"] & 0x30 for r in records):  # IPv6 hosts move the body: bodies.body_start follows them
        assert {bodies.body_start(r["sysFlag"]) for r in records} != {88}
    assert failed or all(g.error is None for g in got)


def test_order_repeats_and_windows_do_not_matter(store, monkeypatch) -> None:
    sd, records, _ = store
    by_offset = {r["commitLogOffset"]: r for r in records if not r.get("decodeError")}
    offsets = list(by_offset) * 2
    random.Random(5).shuffle(offsets)
    wide = read_bodies(sd, offsets)
    monkeypatch.setattr(bodies, "WINDOW_BYTES", 1)  # every offset its own read
    monkeypatch.setattr(bodies, "HEAD_BYTES", 16)  # and every record read again at its size
    assert read_bodies(sd, offsets) == wide
    for off, body in zip(offsets, wide, strict=True):
        want = by_offset[off]["bodyDecompressed"]
        assert body == (None if want is None else base64.b64decode(want))


def test_offsets_without_a_record_are_none_with_a_reason(store) -> None:
    sd, records, blanks = store
    first = records[0]["commitLogOffset"]
    last = sd.commitlog.files[-1]
    asked = {first + 1: "no message magic code", first + records[0]["size"] - 8: "",
             last.base + last.size + 10: "no commitlog file", -5: "no commitlog file"}
    if blanks:
        asked[blanks[0]["commitLogOffset"]] = "BLANK filler"
    got = read_stored(sd, list(asked))
    for g, (off, why) in zip(got, asked.items(), strict=True):
        assert g.body is None and g.stored is None and g.offset == off
        assert g.error.startswith(f"no message record at commit log offset {off}") and why in g.error
    assert read_bodies(sd, [first + 1, first]) == [None, read_bodies(sd, [first])[0]]
    assert os.path.isdir(sd.root)


def test_scan_without_bodies_keeps_sizes_and_the_compressed_ones(store) -> None:
    """The decode job 1 runs without --bodies: body_size on every row, body only where sysflag says compressed
    (what body_error needs), and the other columns as the full decode gives them."""
    sd, records, _ = store
    listing = {r["commitLogOffset"]: r for r in records if not r.get("decodeError")}
    modes = {}
    for mode in (True, False, COMPRESSED_ONLY):
        modes[mode] = [r for _, batches, _ in sd.decode_commitlog(ScanOptions(want_body=mode), split_bytes=4096)
                       for b in batches for r in b.to_pylist()]
    assert len(modes[True]) == len(listing)
    for full, none, some in zip(modes[True], modes[False], modes[COMPRESSED_ONLY], strict=True):
        e = listing[full["commit_log_offset"]]
        assert full["body_size"] == none["body_size"] == some["body_size"] == e["bodyLength"] == len(full["body"])
        assert none["body"] is None
        assert some["body"] == (full["body"] if full["sys_flag"] & 1 else None)
        assert {**full, "body": None} == {**none, "body": None} == {**some, "body": None}
    assert any(r["sys_flag"] & 1 for r in modes[True])
