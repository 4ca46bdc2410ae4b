"""filterlib.tags: Java String.hashCode, FilterAPI subscription parsing, the broker's and the client's tag checks.

Unit expectations come from rocketmq-facts.md (§2.3 hash examples, §4.1 parsing examples, §4.2/§4.3 matching,
trap 1/2); the reference tests compare with the real RocketMQ 5.3.3 classes through the harness's eval mode.
"""

from __future__ import annotations

import random

import pytest
from refharness import eval_cases

from filterlib import tags
from filterlib.errors import FilterSyntaxError, SubscriptionParseError


@pytest.mark.parametrize("tag, expected", [
    ("TagA", 2598919), ("tagA", 3552231), ("*", 42), ("Hello World", -862545276), ("", 0),
    ("\U0001f600", 1772899), ("Aa", 2112), ("BB", 2112),
])
def test_tags_code_facts_examples(tag, expected):
    assert tags.tags_code(tag) == expected


def test_tags_code_counts_utf16_units_and_joins_split_surrogates():
    assert tags.tags_code("\ud83d\ude00") == tags.tags_code("\U0001f600")
    assert tags.tags_code("\U0001f600") != 0x1F600
    assert tags.tags_code("\ud800") == 0xD800


@pytest.mark.parametrize("expr, sub_all, tag_set", [
    (None, True, set()), ("", True, set()), ("*", True, set()),
    ("a|||b", False, {"a", "|b"}), ("||a", False, {"a"}), ("a | b", False, {"a | b"}),
    ("  ", False, set()), (" * ", False, {"*"}), ("a || b ||", False, {"a", "b"}),
    ("\x01a\x1f|| b\x00", False, {"a", "b"}), ("\u3000a\u00a0", False, {"\u3000a\u00a0"}),
])
def test_parse_subscription_facts_examples(expr, sub_all, tag_set):
    sub = tags.parse_subscription(expr)
    assert sub.sub_all is sub_all
    assert sub.tags == frozenset(tag_set)
    assert sub.codes == frozenset(tags.tags_code(t) for t in tag_set)
    assert sub.sub_string == ("*" if expr in (None, "") else expr)


@pytest.mark.parametrize("expr", ["||", "||||", "||||||"])
def test_parse_subscription_split_error(expr):
    with pytest.raises(SubscriptionParseError, match="subString split error") as info:
        tags.parse_subscription(expr)
    assert isinstance(info.value, FilterSyntaxError)


def test_build_subscription_sql_and_empty_type():
    sql = tags.build_subscription("a > 1", "SQL92", topic="T")
    assert (sql.sub_all, sql.tags, sql.is_tag_type, sql.topic) == (False, frozenset(), False, "T")
    with pytest.raises(SubscriptionParseError):
        tags.build_subscription("", "SQL92")
    odd = tags.build_subscription("TagA", "")
    assert odd.is_tag_type and odd.codes == frozenset()
    assert not tags.matches_consume_queue(odd, tags.tags_code("TagA"))
    assert tags.matches_consume_queue(tags.build_subscription("*", ""), 12345)


def test_consume_queue_check_is_by_low_32_bits_and_null_passes():
    sub = tags.parse_subscription("Aa || TagB")
    assert tags.check_consume_queue(sub, None) == (True, "tag_code_null")
    assert tags.check_consume_queue(sub, tags.tags_code("BB")) == (True, "tag_hash_hit")
    assert tags.check_consume_queue(sub, tags.tags_code("TagB") + (7 << 32)) == (True, "tag_hash_hit")
    assert tags.check_consume_queue(sub, 0) == (False, "tag_hash_miss")
    assert tags.check_consume_queue(tags.parse_subscription("*"), 0) == (True, "sub_all")
    assert not tags.matches_consume_queue(tags.parse_subscription(" * "), 99)
    assert not tags.matches_consume_queue(tags.parse_subscription("  "), 0)


def test_client_recheck_is_exact_and_drops_untagged():
    sub = tags.parse_subscription("Aa || TagB")
    assert tags.check_client(sub, "BB") == (False, "client_tag_mismatch")
    assert tags.check_client(sub, None) == (False, "client_no_tags")
    assert tags.check_client(sub, "Aa") == (True, "client_tag_match")
    assert tags.matches_client(tags.parse_subscription("*"), None)
    assert tags.matches_client(tags.parse_subscription("  "), None)


def test_find_collisions():
    found = tags.find_collisions(["Aa", "BB", "TagA", "AaAa", "BBBB", "AaBB", "C"])
    assert found == {2112: frozenset({"Aa", "BB"}),
                     tags.tags_code("AaAa"): frozenset({"AaAa", "BBBB", "AaBB"})}
    assert tags.subscription_collisions(tags.parse_subscription("Aa"), ["BB", "Aa", "x"]) == {"BB": 2112}


def _random_string(rng: random.Random) -> str:
    kind = rng.randrange(6)
    length = rng.randrange(0, 24)
    if kind == 0:
        return "".join(chr(rng.randrange(0x20, 0x7F)) for _ in range(length))
    if kind == 1:
        return "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(length))
    if kind == 2:
        return "".join(chr(rng.randrange(0x1F300, 0x1FAFF)) for _ in range(length))
    if kind == 3:
        return "".join(chr(rng.choice([rng.randrange(0xD800, 0xE000), rng.randrange(0x61, 0x7B)]))
                       for _ in range(length))
    if kind == 4:
        return "".join(chr(rng.randrange(0, 0x20)) for _ in range(length))
    return "".join(chr(rng.randrange(0, 0x110000)) for _ in range(length))


TAG_SAMPLES = (["", "TagA", "Aa", "BB", "AaAa", "BBBB", "\U0001f600", "\ud83d\ude00", "\ud800", "\udfff\ud800",
                "x" * 5000, "\u00e9" * 3000, "polygenelubricants", "GydZG_", "DESIGNING WORKHOUSES"]
               + [_random_string(random.Random(seed)) for seed in range(4000)])


@pytest.mark.reference
def test_tags_code_matches_java():
    results = eval_cases([{"kind": "tag_hash", "tag": t} for t in TAG_SAMPLES])
    mismatches = [(t, r, tags.tags_code(t)) for t, r in zip(TAG_SAMPLES, results, strict=True)
                  if r.get("hash") != tags.tags_code(t)]
    assert mismatches == []
    assert len(results) >= 4000


def _subscription_samples() -> list[tuple[str, str | None]]:
    rng = random.Random(7)
    pieces = ["a", "b", "TagA", " ", "\t", "*", "", "|", "||", "\x00", "\x1f", "\u3000", "\u00a0", "\U0001f600",
              "\ud800", " x ", "Aa", "BB", "a b", "\n"]
    fixed = ["*", " * ", "**", "* ", "\t*", "||", "||||", "| |", "a||", "||a", "a|||b", "a||||b", "a || b", " ",
             "  ", "\x00", "\x00||\x00", "\u3000", "a|b", "x" * 10000, "||".join(f"t{i}" for i in range(2000)),
             "Aa||BB", "TagA||TagA", "||*||"]
    samples = [(e, "TAG") for e in fixed]
    samples += [("".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12))), "TAG") for _ in range(1500)]
    samples += [(e, t) for e in ["*", " * ", "a > 1", "TagA"] for t in ["SQL92", "", "sql92", "Tag"]]
    return [(e, t) for e, t in samples if e != ""] + [("", "TAG"), ("", "SQL92")]


def _java_subscription_error(exc: SubscriptionParseError) -> str:
    """The Java exception class behind one of our refusals: FilterAPI.buildSubscriptionData throws a plain
    Exception("subString split error"); FilterAPI.build throws IllegalArgumentException for an empty expression."""
    return "Exception" if str(exc) == "subString split error" else "IllegalArgumentException"


@pytest.mark.reference
def test_subscriptions_match_java():
    samples = _subscription_samples()
    results = eval_cases([{"kind": "subscription", "topic": "T", "expr": e, "type": t} for e, t in samples])
    mismatches = []
    for (expr, expression_type), ref in zip(samples, results, strict=True):
        try:
            sub = tags.build_subscription(expr, expression_type, topic="T")
        except SubscriptionParseError as exc:
            if "error" not in ref:
                mismatches.append((expr, expression_type, ref, f"python raised {exc}"))
            elif (ref["error"], ref.get("message")) != (_java_subscription_error(exc), str(exc)):
                mismatches.append((expr, expression_type, ref, f"python raised {exc}"))
            continue
        mine = {"sub_string": sub.sub_string, "expression_type": sub.expression_type, "tags": sorted(sub.tags),
                "codes": sorted(sub.codes), "sub_all": sub.sub_all}
        theirs = {k: sorted(ref[k]) if k in ("tags", "codes") else ref.get(k) for k in mine}
        if mine != theirs:
            mismatches.append((expr, expression_type, theirs, mine))
    assert mismatches == []
    assert len(results) > 1500
