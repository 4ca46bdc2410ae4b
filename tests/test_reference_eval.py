"""The reference harness's eval mode really runs the RocketMQ 5.3.3 classes.

Every expected value here comes from the facts document (rocketmq-facts.md §4-§7) or from Python's own
computation, never from a previous harness run, so a broken harness cannot agree with itself.
"""

from __future__ import annotations

import json

import pytest
import refharness

pytestmark = pytest.mark.reference


def java_string_hash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    units = s.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "little")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.fixture(scope="module")
def results() -> dict:
    cases = [
        {"id": "hash_taga", "kind": "tag_hash", "tag": "TagA"},
        {"id": "hash_surrogates", "kind": "tag_hash", "tag": "\ud800x\U0001f600\udfff"},
        {"id": "bloom_default", "kind": "bloom", "f": 20, "n": 32,
         "keys": ["group#topic"], "probes": ["group#topic"]},
        {"id": "bloom_f0", "kind": "bloom", "f": 0, "n": 32},
        {"id": "gt5", "kind": "sql", "expr": "a > 5", "props": [{"a": "6"}, {}, {"a": "5.5"}]},
        {"id": "syntax", "kind": "sql", "expr": "a >> 5", "props": [{"a": "6"}]},
        {"id": "asym", "kind": "sql", "expr": "'x' <> a", "props": [{}]},
        {"id": "lone", "kind": "sql", "expr": "a = 'x\udc00'",
         "props": [{"a": "x\udc00"}, {"a": "x?"}, {"a": "x\ufffd"}]},
        {"id": "lone_msg", "kind": "sql", "expr": "a > 5", "props": [{"a": "\ud800"}]},
        {"id": "sub", "kind": "subscription", "topic": "t", "expr": " * "},
    ]
    return {r["id"]: r for r in refharness.eval_cases(cases)}


def test_tag_hash_is_java_string_hashcode(results):
    assert results["hash_taga"]["hash"] == java_string_hash("TagA")
    assert results["hash_surrogates"]["hash"] == java_string_hash("\ud800x\U0001f600\udfff")


def test_bloom_create_by_fn(results):
    r = results["bloom_default"]
    assert (r["k"], r["m"]) == (3, 112)
    assert r["generate"] == [{"bit_pos": [79, 21, 21], "bit_num": 112}]
    assert r["bits_hex"] == "00 00 20 00 00 00 00 00 00 80 00 00 00 00".replace(" ", "")
    assert r["hits"] == [True]
    assert results["bloom_f0"]["error"] == "IllegalArgumentException"


def test_sql_values_and_decision(results):
    true_, missing, bad_int = results["gt5"]["evals"]
    assert results["gt5"]["compile"] == "ok"
    assert true_ == {"type": "Boolean", "value": True, "match": True}
    assert missing == {"type": "null", "value": None, "match": False}
    assert bad_int["error"] == "RuntimeException" and bad_int["match"] is False
    assert results["asym"]["evals"] == [{"type": "Boolean", "value": True, "match": True}]


def test_sql_syntax_error_is_mqfilterexception(results):
    c = results["syntax"]["compile"]
    assert c["error"] == "MQFilterException"
    assert c["message"].startswith("Invalid MessageSelector.")
    assert "ParseException" in c["message"] and "column 4" in c["message"]
    assert "evals" not in results["syntax"]


def test_lone_surrogate_property_survives(results):
    assert [e["value"] for e in results["lone"]["evals"]] == [True, False, False]
    (err,) = results["lone_msg"]["evals"]
    assert err["causes"][0] == {"error": "NumberFormatException", "message": 'For input string: "\ud800"'}


def test_blank_star_subscription_is_not_sub_all(results):
    r = results["sub"]
    assert r["sub_string"] == " * " and r["sub_all"] is False
    assert r["tags"] == ["*"] and r["codes"] == [42]


def test_bench_runs_the_real_loop():
    out = refharness.run("bench", {"cases": [
        {"id": "sql", "expr": "a > 5", "props": [{"a": "6"}, {"a": "7"}], "seconds": 0.2, "warmup_seconds": 0.1},
        {"id": "bloom", "kind": "bloom_is_hit", "f": 20, "n": 32, "keys": ["g#t"], "probes": ["g#t"],
         "seconds": 0.2, "warmup_seconds": 0.1},
    ]}, fresh=True)
    sql, bloom = json.loads((out / "output.json").read_text(encoding="utf-8"))["results"]
    assert sql["evaluations"] > 0 and sql["matches"] == sql["evaluations"] and sql["errors"] == 0
    assert bloom["evaluations"] > 0 and bloom["matches"] == bloom["evaluations"]
    assert sql["seconds"] >= 0.2 and sql["per_second"] > 0
