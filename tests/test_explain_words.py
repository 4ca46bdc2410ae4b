"""filterlib.replay.explain: each layer's words for vocabulary decision rows carry the facts its docstrings promise."""

from __future__ import annotations

import pytest

from filterlib import vocabulary as vocab
from filterlib.replay import explain as ex

BORN = 1_700_000_000_000  # 2023-11-14 22:13:20.000 UTC
BLOOM_BITS = 112  # BloomFilter.createByFn(20, 32): m = 8 * ceil(ceil(32 * log2(5) * log2(e)) / 8) = 112


def java_hash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, as a signed int."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >> 31 else h


def code(**want) -> vocab.DecisionCode:
    """The one decision code with these fields."""
    found = [c for c in vocab.DECISION_CODES if c.code and all(getattr(c, k) == v for k, v in want.items())]
    assert len(found) == 1, (want, found)
    return found[0]


def row(c: vocab.DecisionCode, **extra) -> dict:
    """A pull_decisions row (its row form's columns) for a decision code."""
    d = {"consumer_group": "G", "topic": "T", "subscription_index": 0, "queue_id": 2, "queue_offset": 9,
         "commit_log_offset": 1234, "size": 200, "tags_code": None, "outcome": c.outcome, "layer": c.layer,
         "reason": c.reason, "cq_reason": c.cq_reason, "sql_value": c.sql_value,
         "detail": c.sql_value if c.layer == vocab.COMMIT_LOG and c.sql_value in ("TRUE", "FALSE", "NULL") else None,
         "bloom_false_positive": c.bloom_false_positive, "bloom_tested": c.bloom_tested, "bloom_bitmap": None,
         "pull_index": 3}
    d.update(extra)
    return d


def sub(type_="SQL92", expression="a > 5", path="registered", source="subscriptions") -> dict:
    return {"consumer_group": "G", "topic": "T", "subscription_index": 0, "subscription_type": type_,
            "expression": expression, "path": path, "source": source}


def message(tags=None, properties=None, stored=BORN + 5000) -> dict:
    return {"commit_log_offset": 1234, "topic": "T", "queue_id": 2, "queue_offset": 9, "tags": tags,
            "properties": properties, "store_timestamp": stored}


def bitmap(*bits: int, nbits: int = BLOOM_BITS) -> bytes:
    """A BitsArray bitmap: bit p is byte p/8, mask 1 << p%8."""
    out = bytearray(nbits // 8)
    for p in bits:
        out[p >> 3] |= 1 << (p & 7)
    return bytes(out)


FILT = {"consumer_group": "G", "topic": "T", "born_time": BORN, "bloom_bit_pos": [3, 17, 40],
        "bloom_bit_num": BLOOM_BITS}


# --- consume-queue layer --------------------------------------------------------------------------------------------


def test_tag_hash_miss_names_the_tag_its_code_and_the_subscribed_codes():
    d = row(code(outcome=vocab.TAG_HASH_MISS), tags_code=java_hash("TagC"))
    s = sub("TAG", "TagA || TagB")
    words = ex.consume_queue_words(d, s, None, message(tags="TagC"))
    assert "'TagC'" in words
    assert f"tagsCode {java_hash('TagC')}" in words
    assert f"TagA → {java_hash('TagA')}" in words and f"TagB → {java_hash('TagB')}" in words
    assert vocab.TAG_HASH_MISS in words and "dropped" in words
    assert ex.commit_log_words(d, s, message(tags="TagC")).startswith("not reached")
    assert ex.client_words(d).startswith("not reached")


def test_tag_hash_hit_compares_the_int_value_of_the_tags_code():
    """The broker tests `codeSet.contains(tagsCode.intValue())`: a tag whose hashCode is negative is told as the
    signed int, and a hit passes."""
    tag = "ZZZZZZZZ"
    h = java_hash(tag)
    assert h < 0
    d = row(code(cq_reason="tag_hash_hit", reason="client_tag_match", sql_value=None), tags_code=h)
    words = ex.consume_queue_words(d, sub("TAG", f" {tag} || Other "), None, message(tags=tag))
    assert f"tagsCode {h}" in words and f"{tag} → {h}" in words and f"Other → {java_hash('Other')}" in words
    assert "passes" in words and vocab.TAG_HASH_MISS not in words


def test_tag_hash_words_without_a_message_say_no_tag():
    d = row(code(outcome=vocab.TAG_HASH_MISS), tags_code=0)
    words = ex.consume_queue_words(d, sub("TAG", "TagA"), None, None)
    assert "no tag" in words and "tagsCode 0" in words


def test_bloom_miss_names_each_bit_of_the_filter_and_whether_it_is_set():
    d = row(code(outcome=vocab.BLOOM_MISS), bloom_bitmap=bitmap(3, 40, 60))
    words = ex.consume_queue_words(d, sub(), FILT, message(properties={"a": "7"}))
    assert f"{BLOOM_BITS} bits" in words
    assert "3 set by the filters" in words  # bits 3, 40 and 60: three set in all
    assert "3 set, 17 not set, 40 set" in words  # the filter's own positions, each with its state
    assert vocab.BLOOM_MISS in words and "never evaluated" in words
    assert ex.commit_log_words(d, sub(), message(properties={"a": "7"})).startswith("not reached")


def test_bloom_hit_then_sql_false_is_a_bloom_false_positive():
    c = code(outcome=vocab.SQL_FALSE, cq_reason="bloom_hit")
    assert c.bloom_false_positive and c.bloom_tested
    d = row(c, bloom_bitmap=bitmap(3, 17, 40))
    lines = ex.explain(d, sub(), FILT, message(properties={"a": "3"}))
    assert "bloom false positive" in lines[0]
    assert "3 set, 17 set, 40 set" in lines[2] and "not set" not in lines[2]
    assert "all set" in lines[2]


def test_not_in_live_names_the_store_time_and_the_born_time():
    """isMsgInLive: a message stored at or before the filter's bornTime has a bitmap that cannot know the filter."""
    c = code(outcome=vocab.DELIVERED, cq_reason="not_in_live", reason="client_keep_all", sql_value="TRUE")
    d = row(c)
    words = ex.consume_queue_words(d, sub(), FILT, message(properties={"a": "9"}, stored=BORN - 1000))
    assert "2023-11-14 22:13:20.000 UTC (1700000000000)" in words
    assert "2023-11-14 22:13:19.000 UTC (1699999999000)" in words
    assert "isMsgInLive" in words


def test_consume_queue_branches_with_fixed_words_use_the_vocabulary():
    fixed = vocab.words(vocab.CONSUME_QUEUE)
    for c in vocab.DECISION_CODES[1:]:
        if c.cq_reason in fixed:
            assert ex.consume_queue_words(row(c), sub(), FILT, message()) == fixed[c.cq_reason]


# --- commit-log layer -----------------------------------------------------------------------------------------------


def test_sql_false_names_the_expression_the_value_and_the_property_values():
    d = row(code(outcome=vocab.SQL_FALSE, cq_reason="no_bloom_data"))
    words = ex.commit_log_words(d, sub(expression="a > 5"), message(properties={"a": "3", "other": "x"}))
    assert "`a > 5`" in words and "FALSE" in words and "a = '3'" in words
    assert "other" not in words  # only the properties the expression names
    assert vocab.SQL_FALSE in words and "dropped" in words


def test_sql_null_names_the_missing_property():
    d = row(code(outcome=vocab.SQL_NULL, cq_reason="ext_null"))
    words = ex.commit_log_words(d, sub(expression="a > 5 AND b = 'x'"), message(properties={"a": "7"}))
    assert "NULL" in words and "a = '7'" in words and "b missing" in words
    assert vocab.SQL_NULL in words and "only TRUE" in words


def test_sql_error_names_the_java_exception_and_its_message():
    detail = 'java.lang.NumberFormatException: For input string: "abc"'
    d = row(code(outcome=vocab.SQL_ERROR, cq_reason="bitmap_null"), detail=detail)
    words = ex.commit_log_words(d, sub(), message(properties={"a": "abc"}))
    assert "java.lang.NumberFormatException" in words and 'For input string: "abc"' in words
    assert "`a > 5`" in words and "a = 'abc'" in words and vocab.SQL_ERROR in words


def test_sql_true_passes_with_the_values():
    d = row(code(outcome=vocab.DELIVERED, cq_reason="no_bloom_data", reason="client_keep_all", sql_value="TRUE"))
    words = ex.commit_log_words(d, sub(), message(properties=[("a", "9")]))  # Spark hands a map as pairs too
    assert "TRUE" in words and "a = '9'" in words and "passes" in words


def test_commit_log_words_without_a_sql_value():
    cl = vocab.words(vocab.COMMIT_LOG)
    tag_delivered = row(code(cq_reason="tag_hash_hit", reason="client_tag_match", sql_value=None))
    assert ex.commit_log_words(tag_delivered, sub("TAG", "TagA"), message()) == cl["tag_type"]
    sql_unfiltered = row(code(cq_reason="no_filter_data", reason="client_keep_all", sql_value=None))
    assert ex.commit_log_words(sql_unfiltered, sub(), message()) == cl["no_filter_data"]
    no_sub = row(code(outcome=vocab.DELIVERED, layer=vocab.COMMIT_LOG))
    assert no_sub["reason"] == "no_subscription"
    assert ex.commit_log_words(no_sub, sub(), message()) == cl["no_subscription"]


def test_sql_words_for_an_expression_naming_no_property():
    d = row(code(outcome=vocab.SQL_FALSE, cq_reason="no_bloom_data"))
    assert "names no property" in ex.commit_log_words(d, sub(expression="1 = 2"), message(properties={"a": "1"}))


# --- client ---------------------------------------------------------------------------------------------------------


def test_client_decode_failed_carries_the_decode_error():
    d = row(code(reason="client_decode_failed", cq_reason="tag_hash_hit", sql_value=None),
            detail="zlib: incorrect header check")
    words = ex.client_words(d)
    assert "zlib: incorrect header check" in words and vocab.CLIENT_DECODE_FAILED in words
    lost = row(code(reason="client_decode_lost", cq_reason="tag_hash_hit", sql_value=None),
               detail="the message at commit log offset 1000 of this pull failed to decode")
    assert ex.client_words(lost).startswith("the message at commit log offset 1000 of this pull failed to decode")
    no_detail = row(code(reason="client_decode_lost", cq_reason="sub_all", sql_value=None))
    assert "no detail" in ex.client_words(no_detail)


@pytest.mark.parametrize("reason", ["client_keep_all", "client_no_tags", "client_tag_match", "client_tag_mismatch"])
def test_client_reasons_use_the_vocabulary(reason):
    d = row(code(reason=reason, cq_reason="tag_hash_hit", sql_value=None))
    assert ex.client_words(d) == vocab.words(vocab.CLIENT)[reason]


# --- the whole explanation ------------------------------------------------------------------------------------------


def test_head_and_subscription_lines_name_the_unit_and_the_pull():
    d = row(code(outcome=vocab.SQL_FALSE, cq_reason="no_bloom_data"))
    lines = ex.explain(d, sub(path="posted", source="consumerFilter.json"), None, message(properties={"a": "1"}))
    assert len(lines) == 5
    head, subline = lines[0], lines[1]
    assert head.startswith("G on T queue 2 offset 9 (commit log offset 1234): SQL_FALSE")
    assert "commit_log layer" in head and "false positive" not in head
    assert "SQL92 `a > 5`" in subline and "posted" in subline and "consumerFilter.json" in subline
    assert "pull #3" in subline
    assert [line.split(":")[0].strip() for line in lines[2:]] == ["1. consume queue", "2. commit log", "3. client"]


def test_every_decision_code_is_put_in_words_and_no_bare_branch_name_is_left():
    """Every combination job 2 can record: three layer lines, each a sentence (never the bare branch name); a member
    outcome's also name the member and whose subscription the broker kept (the broker's layers read the kept one:
    member m1 subscribes TagC while the broker keeps m2's)."""
    for c in vocab.DECISION_CODES[1:]:
        tag = c.cq_reason in ("tag_hash_hit", "tag_hash_miss")
        s = sub("TAG", "TagA || TagB") if tag else sub()
        member = c.outcome in vocab.MEMBER_OUTCOMES
        if member:
            s = {**s, "subscription_type": "TAG", "expression": "TagC", "member": "m1", "kept_by": "m2",
                 "kept_type": s["subscription_type"], "kept_expression": s["expression"]}
        extra = {"tags_code": java_hash("TagA") if c.cq_reason == "tag_hash_hit" else java_hash("TagC")}
        if c.bloom_tested:
            extra["bloom_bitmap"] = bitmap(3, 17, 40) if c.cq_reason == "bloom_hit" else bitmap(3)
        if c.sql_value == "ERROR" or c.reason in vocab.DECODE_BRANCHES:
            extra["detail"] = "java.lang.RuntimeException: boom"
        d = row(c, **extra)
        lines = ex.explain(d, s, FILT, message(tags="TagA", properties={"a": "7"}))
        assert c.outcome in lines[0] and f"decided by the {c.layer} layer" in lines[0]
        if c.outcome == vocab.NEVER_PULLED:
            assert len(lines) == 2 and "member m1 owns queue 2" in lines[1] and "never pulls the queue" in lines[1]
            continue
        assert len(lines) == 5 + (c.outcome == vocab.FILTERED_BY_OTHER_MEMBER) + member
        if member:
            assert "member m1 owns queue 2; the broker filtered its pulls with m2's" in lines[2]
            assert "(if m2's subscription is the one the broker keeps)" in lines[0]
        cq, cl, client = (line.split(": ", 1)[1] for line in lines[-3:])
        assert cq not in vocab.REASONS and cl not in vocab.REASONS and client not in vocab.REASONS, c
        assert cl.startswith("not reached") == (c.layer == vocab.CONSUME_QUEUE)
        assert client.startswith("not reached") == (c.layer != vocab.CLIENT)
        if c.sql_value is not None and not tag:  # (a TAG subscription reaches SQL92 only on a pre-5.1.4 retry topic)
            assert "`a > 5`" in cl
            assert ("threw" in cl) if c.sql_value == "ERROR" else (f"is {c.sql_value}" in cl)


def test_a_retry_topic_unit_names_the_original_topics_filter_it_was_evaluated_with():
    """ExpressionForRetryMessageFilter evaluates a retry topic's unit with the registered filter of the message's
    RETRY_TOPIC and the group (a TAG subscription too, before 5.1.4): the words name that expression and the
    properties it reads, not the subscription's own."""
    retry_topic = "%RETRY%G"
    original = {**FILT, "topic": "Orders", "expression": "amount > 100"}
    filters = {("Orders", "G"): original, ("Other", "G"): {**FILT, "topic": "Other", "expression": "b = 1"}}
    d = row(code(outcome=vocab.SQL_FALSE, cq_reason="tag_hash_hit"), topic=retry_topic, tags_code=java_hash("*"))
    m = {**message(properties={"RETRY_TOPIC": "Orders", "amount": "7", "a": "9"}), "topic": retry_topic}
    assert ex.evaluated_filter(d, m, filters) is original
    cl = ex.explain(d, {**sub("TAG", "*"), "topic": retry_topic}, None, m, ex.evaluated_filter(d, m, filters))[3]
    assert "SQL92 `amount > 100` is FALSE with amount = '7'" in cl and "`*`" not in cl and "a =" not in cl
    # not a retry topic, no RETRY_TOPIC, or no filter of that topic: the subscription's own expression
    assert ex.evaluated_filter(row(code(outcome=vocab.SQL_FALSE, cq_reason="no_bloom_data")), m, filters) is None
    assert ex.evaluated_filter(d, {**m, "properties": {"amount": "7"}}, filters) is None
    assert ex.evaluated_filter(d, {**m, "properties": {"RETRY_TOPIC": "Nope"}}, filters) is None
