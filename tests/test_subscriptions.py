"""The subscriptions file (design.md, "Subscriptions file"): defaults, pass-through types, one-line errors that
name the entry, and job 1's registration of SQL92 subscriptions the dump's registry lacks (bornTime 0)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import refharness
import scenarios

from filterlib import sql92
from filterlib.rebuild.dispatch import Dispatcher, bit_set, dispatch
from filterlib.registry import ConsumerFilterManager
from filterlib.store.scan import ScanOptions
from filterlib.store.storedir import StoreDir
from filterlib.subscriptions import (
    Subscription,
    SubscriptionsError,
    load_subscriptions,
    parse_subscriptions,
    register_missing,
)

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_and_pass_through() -> None:
    subs = parse_subscriptions([
        {"group": "G1", "topic": "T"},
        {"group": "G2", "topic": "T", "type": "SQL92", "expression": "a > 5", "sub_version": 3,
         "path": "posted", "batch_size": 7},
        {"group": "G3", "topic": "T", "type": "sql92", "expression": ""},
    ])
    assert subs[0] == Subscription("G1", "T", "TAG", "*", "registered", None, 32)
    assert subs[0].is_tag and not subs[1].is_tag
    assert subs[1] == Subscription("G2", "T", "SQL92", "a > 5", "posted", 3, 7)
    assert (subs[2].type, subs[2].expression, subs[2].is_tag) == ("sql92", "", False)


@pytest.mark.parametrize(("entry", "message"), [
    ({"topic": "T"}, "entry 0: 'group' is required"),
    ({"group": "G", "topic": ""}, "'topic' must be a non-empty string"),
    ({"group": "G", "topic": "T", "subVersion": 1}, "entry 0 (group 'G', topic 'T'): unknown key(s) 'subVersion'"),
    ({"group": "G", "topic": "T", "type": 1}, "'type' must be a string, got int"),
    ({"group": "G", "topic": "T", "expression": None}, "'expression' must be a string, got NoneType"),
    ({"group": "G", "topic": "T", "path": "pull"}, "'path' must be one of registered, posted, got 'pull'"),
    ({"group": "G", "topic": "T", "sub_version": "3"}, "'sub_version' must be an integer"),
    ({"group": "G", "topic": "T", "sub_version": True}, "'sub_version' must be an integer"),
    ({"group": "G", "topic": "T", "sub_version": 1 << 63}, "'sub_version' must be an integer (a Java long)"),
    ({"group": "G", "topic": "T", "batch_size": 0}, "'batch_size' must be a positive integer"),
    ({"group": "G", "topic": "T", "batch_size": 2.5}, "'batch_size' must be a positive integer"),
    ("G", "entry 0: expected an object, got str"),
])
def test_entry_errors_name_the_entry(entry, message) -> None:
    with pytest.raises(SubscriptionsError) as e:
        parse_subscriptions([entry])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_error_names_the_failing_entry_among_good_ones() -> None:
    with pytest.raises(SubscriptionsError, match=r"^entry 2 \(group 'G3', topic 'T'\): 'batch_size'"):
        parse_subscriptions([{"group": "G1", "topic": "T"}, {"group": "G2", "topic": "T"},
                             {"group": "G3", "topic": "T", "batch_size": -1}])


def test_file_errors(tmp_path) -> None:
    with pytest.raises(SubscriptionsError, match="cannot read the subscriptions file"):
        load_subscriptions(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('[{"group": "G", "topic": "T"},\n {"group": }]')
    with pytest.raises(SubscriptionsError, match=r"bad.json: not valid JSON \(.* at line 2, column 12\)"):
        load_subscriptions(str(bad))
    obj = tmp_path / "obj.json"
    obj.write_text('{"group": "G", "topic": "T"}')
    with pytest.raises(SubscriptionsError, match="obj.json: expected a JSON list of subscriptions, got dict"):
        load_subscriptions(str(obj))
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'[{"group": "G\xe9", "topic": "T"}]')
    with pytest.raises(SubscriptionsError, match="not UTF-8"):
        load_subscriptions(str(latin))


def test_example_file_parses() -> None:
    subs = load_subscriptions(str(ROOT / "conf" / "subscriptions.example.json"))
    assert {s.path for s in subs} == {"registered", "posted"} and {s.type for s in subs} == {"TAG", "SQL92"}


@pytest.mark.reference
def test_missing_registered_sql92_subscriptions_join_the_dump_registry() -> None:
    """tag_and_sql_scenario's dump registers G_SQL only. The file adds G_NEW (registered SQL92: taken with bornTime
    0, so it counts for every message), G_SQL again (already held: the dump's record stays), a posted, a TAG and a
    non-compiling one (not taken; the last is a compile failure). The rebuilt bitmaps then carry G_NEW's bits
    exactly on the messages its selector matches, and the broker's own G_SQL bits are unchanged."""
    out = refharness.write_store(scenarios.tag_and_sql_scenario(1))
    store = str(out / "store")
    report = json.loads((out / "report.json").read_text())
    reg = ConsumerFilterManager(report["bloom"]["f"], report["bloom"]["n"])
    assert reg.load(os.path.join(store, "config", "consumerFilter.json"))
    before = reg.get(scenarios.TOPIC, "G_SQL")
    subs = parse_subscriptions([
        {"group": "G_NEW", "topic": scenarios.TOPIC, "type": "SQL92", "expression": "a > 1", "sub_version": 4},
        {"group": "G_SQL", "topic": scenarios.TOPIC, "type": "SQL92", "expression": "a < 0", "sub_version": 9},
        {"group": "G_POST", "topic": scenarios.TOPIC, "type": "SQL92", "expression": "a > 2", "path": "posted"},
        {"group": "G_TAG", "topic": scenarios.TOPIC, "expression": "TagA"},
        {"group": "G_BAD", "topic": scenarios.TOPIC, "type": "SQL92", "expression": "a >> 1"},
    ])
    taken = register_missing(reg, subs)
    assert [s.group for s in taken] == ["G_NEW"]
    new = reg.get(scenarios.TOPIC, "G_NEW")
    assert (new.born_time, new.client_version, new.expression) == (0, 4, "a > 1")
    assert reg.get(scenarios.TOPIC, "G_SQL") is before and before.expression != "a < 0"
    assert reg.get(scenarios.TOPIC, "G_POST") is None and reg.get(scenarios.TOPIC, "G_BAD") is None
    assert (scenarios.TOPIC, "G_BAD") in reg.compile_failures

    sd = StoreDir(store)
    batches = [b for _, bs, _ in sd.decode_commitlog(ScanOptions()) for b in bs]
    units = dispatch(batches, Dispatcher(reg, True, True)).to_pylist()
    listing = {r["physicalOffset"]: r for r in json.loads((out / "listing.json").read_text())["records"]}
    mine = set(new.bloom_filter_data.bit_pos)
    selector = sql92.compile("a > 1")
    checked = hits = 0
    for u in units:
        if u["topic"] != scenarios.TOPIC:
            continue
        broker = listing[u["commit_log_offset"]]["cq"]["ext"]["bitmapHex"]
        bits = bit_set(u["filter_bitmap"])
        hit = selector.matches(listing[u["commit_log_offset"]]["properties"] or {})
        assert (mine <= bits) == hit or (not hit and mine <= bit_set(bytes.fromhex(broker)))
        assert bits - mine == bit_set(bytes.fromhex(broker)) - mine
        checked += 1
        hits += hit
    assert checked > 50 and 5 < hits < checked
