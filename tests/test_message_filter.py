"""filterlib.message_filter: the broker's two layers, the retry variant and the per-unit audit outcome.

Unit expectations follow rocketmq-facts.md §4.2/§4.3 (tags), §8.5 (SQL consume-queue and commit-log layers, retry
filter versions) and design.md's outcomes; the reference tests compare every scanned unit of a real pull replay
(harness store mode, pull.json) with the Python decisions, for the plain and the retry filter.
"""

from __future__ import annotations

import pytest
from refharness import pull as pull_replay
from support.filters import HARNESS_OUTCOMES, Const, sql_setup
from support.harness_runs import pull_answers_run, store_run
from support.registry_replay import oracle_compiler, replay_registrations, run_sql_table

from filterlib.bloom import BloomFilterData
from filterlib.errors import BrokerFilterError, FilterEvaluationError
from filterlib.message_filter import (
    ExpressionForRetryMessageFilter,
    ExpressionMessageFilter,
    ExtUnit,
    decide,
    make_filter,
    parse_retry_group,
    pull_answer,
)
from filterlib.registry import ConsumerFilterManager, compile_filter
from filterlib.tags import build_subscription, tags_code


def test_tag_layers():
    f = ExpressionMessageFilter(build_subscription("Aa || TagB", "TAG", "T"), None, None)
    assert f.check_consume_queue(None, None).reason == "tag_code_null"
    assert f.check_consume_queue(tags_code("BB"), None).reason == "tag_hash_hit"
    assert not f.is_matched_by_consume_queue(0, None)
    assert f.check_commit_log({}).reason == "tag_type"
    out = decide(f, tags_code("BB"), None, {"TAGS": "BB"})
    assert (out.outcome, out.layer, out.reason) == ("TAG_CLIENT_MISMATCH", "client", "client_tag_mismatch")
    assert decide(f, 0, None, {}).outcome == "TAG_HASH_MISS"
    assert decide(f, None, None, {}).reason == "client_no_tags"
    assert decide(f, tags_code("Aa"), None, {"TAGS": "Aa"}).delivered
    assert decide(ExpressionMessageFilter(None, None, None), 0, None, None).delivered


def test_sql_consume_queue_branches_in_java_order():
    m, data, f, hit = sql_setup()
    assert f.check_consume_queue(5, None).reason == "ext_null"
    assert f.check_consume_queue(5, ExtUnit(5, 1000, bytes(14))).reason == "not_in_live"
    assert f.check_consume_queue(5, ExtUnit(5, 1001, None)).reason == "bitmap_null"
    assert f.check_consume_queue(5, ExtUnit(5, 1001, bytes(13))).reason == "bitmap_length_mismatch"
    assert f.check_consume_queue(5, ExtUnit(5, 1001, bytes(14))).reason == "bloom_miss"
    assert f.check_consume_queue(5, ExtUnit(5, 1001, hit)).reason == "bloom_hit"
    data.bloom_filter_data = BloomFilterData((1, 2, 3), 216)
    assert ExpressionMessageFilter(f.subscription, data, m.bloom_filter).check_consume_queue(
        5, ExtUnit(5, 1001, bytes(27))).reason == "bloom_data_invalid"
    data.bloom_filter_data = None
    assert f.check_consume_queue(5, ExtUnit(5, 1001, bytes(14))).reason == "no_bloom_data"
    data.compiled = None
    assert f.check_consume_queue(5, ExtUnit(5, 1001, bytes(14))).reason == "no_filter_data"
    assert f.check_commit_log({}).reason == "no_filter_data"


def test_duck_typed_ext_unit():
    class Unit:
        tags_code = 5
        msg_store_time = 2000
        filter_bitmap = bytes(14)

    _, _, f, _ = sql_setup()
    assert f.check_consume_queue(5, Unit()).reason == "bloom_miss"


@pytest.mark.parametrize("value, reason, outcome", [
    (True, "sql_true", "DELIVERED"), (False, "sql_false", "SQL_FALSE"), (None, "sql_null", "SQL_NULL"),
    (7, "sql_non_boolean", "SQL_NULL"), (FilterEvaluationError("x", "ClassCastException"), "sql_error", "SQL_ERROR"),
])
def test_sql_commit_log_and_outcomes(value, reason, outcome):
    _, _, f, hit = sql_setup(value)
    assert f.check_commit_log({"a": "2"}).reason == reason
    out = decide(f, 5, ExtUnit(5, 2000, hit), {"a": "2"})
    assert (out.outcome, out.bloom_false_positive) == (outcome, outcome != "DELIVERED")
    assert decide(f, 5, ExtUnit(5, 10, None), {}).bloom_false_positive is False


def test_bloom_miss_outcome():
    _, _, f, _ = sql_setup()
    out = decide(f, 5, ExtUnit(5, 2000, bytes(14)), {})
    assert (out.outcome, out.layer, out.reason) == ("BLOOM_MISS", "consume_queue", "bloom_miss")


def retry_setup():
    m = ConsumerFilterManager(compiler=lambda t, e: Const(e == "a > 1"))
    m.register("T", "G", "a > 1", "SQL92", 1, now=100)
    return m


@pytest.mark.parametrize("version, tag_on_retry", [("4.9.8", "sql_true"), ("5.1.3", "sql_true"),
                                                     ("5.1.4", "tag_type"), ("5.3.3", "tag_type")])
def test_retry_filter_versions(version, tag_on_retry):
    m = retry_setup()
    tag_sub = build_subscription("*", "TAG", "%RETRY%G")
    f = ExpressionForRetryMessageFilter(tag_sub, None, m, version)
    assert f.check_commit_log({"RETRY_TOPIC": "T"}).reason == tag_on_retry
    plain_tag = ExpressionForRetryMessageFilter(build_subscription("*", "TAG", "T"), None, m, version)
    assert plain_tag.check_commit_log({}).reason == "tag_type"
    sql = ExpressionForRetryMessageFilter(build_subscription("x", "SQL92", "%RETRY%G"), None, m, version)
    assert sql.check_commit_log({"RETRY_TOPIC": "T"}).reason == "sql_true"
    assert sql.check_commit_log({"RETRY_TOPIC": "Other"}).reason == "no_filter_data"
    with pytest.raises(BrokerFilterError):
        sql.check_commit_log({})


def test_retry_group_parsing():
    assert parse_retry_group("%RETRY%G+T", (5, 3, 3)) == "G"
    assert parse_retry_group("%RETRY%G+T", (5, 1, 4)) == "G+T"
    assert parse_retry_group("%RETRY%G+", (5, 3, 3)) == "G+"
    assert parse_retry_group("%RETRY%G+T+U", (5, 3, 3)) == "G+T+U"
    assert parse_retry_group("%RETRY%G_T", (5, 3, 3)) == "G_T"


def test_make_filter_picks_the_class():
    m = ConsumerFilterManager()
    sub = build_subscription("*", "TAG", "T")
    assert type(make_filter(sub, None, m)) is ExpressionMessageFilter
    assert type(make_filter(sub, None, m, filter_support_retry=True)) is ExpressionForRetryMessageFilter


BRANCHES = {"NO_SUBSCRIPTION": "no_subscription", "CLASS_FILTER": "class_filter", "TAG_NULL_CODE": "tag_code_null",
            "TAG_ALL": "sub_all", "TAG_IN_SET": "tag_hash_hit", "TAG_NOT_IN_SET": "tag_hash_miss",
            "SQL_NO_FILTER_DATA": "no_filter_data", "SQL_NO_BLOOM_DATA": "no_bloom_data", "SQL_NO_EXT": "ext_null",
            "SQL_NOT_IN_LIVE": "not_in_live", "SQL_NO_BITMAP": "bitmap_null",
            "SQL_BLOOM_DATA_INVALID": "bloom_data_invalid", "SQL_BITMAP_LENGTH_MISMATCH": "bitmap_length_mismatch",
            "SQL_BLOOM_HIT": "bloom_hit", "SQL_BLOOM_MISS": "bloom_miss"}
SQL_VALUES = {"sql_true": "TRUE", "sql_false": "FALSE", "sql_null": "NULL"}


def _sql_value(reason: str, detail: str | None) -> str | None:
    if reason in SQL_VALUES:
        return SQL_VALUES[reason]
    if reason == "sql_non_boolean":
        return "NON_BOOLEAN"
    if reason == "no_filter_data":
        return "NO_FILTER_DATA"
    if reason == "sql_error":
        return "EXCEPTION:" + (detail or "").split(":")[0]
    return None


def _harness_sql_value(value: str | None) -> str | None:
    if value is None or value in ("TRUE", "FALSE", "NULL"):
        return value
    kind, _, rest = value.partition(":")
    if kind in ("NON_BOOLEAN", "NO_FILTER_DATA"):
        return kind
    return f"{kind}:{rest.split(':')[0]}"


def compare_pull(run: dict, pull: dict | None = None, manager: ConsumerFilterManager | None = None
                 ) -> tuple[int, list]:
    """Every scanned unit of a real pull replay against the Python filter; returns (units, mismatches)."""
    if manager is None:
        manager, _ = replay_registrations(run, run_sql_table(run))
    pull = run["pull"] if pull is None else pull
    records = {r["commitLogOffset"]: r for r in run["listing"]["records"]}
    broker = run["scenario"]["broker"]
    retry = broker.get("filterSupportRetry", False)
    compared, mismatches = 0, []
    for sub_row, request in zip(pull["subscriptions"], run["scenario"]["subscriptions"], strict=True):
        kind = sub_row["type"]
        registered = sub_row["path"] == "registered"
        answer = pull_answer(manager, sub_row["topic"], sub_row["group"], sub_row["expression"], kind,
                             request.get("subVersion"), posted=not registered,
                             enable_property_filter=broker.get("enablePropertyFilter", True))
        data = answer.filter_data
        mine = {"answer": answer.answer, "subVersion": answer.sub_version, "answerMessage": answer.cause,
                "filterData": data is not None and (registered or data.compiled is not None)}
        theirs = {"answer": sub_row["answer"], "subVersion": sub_row["subVersion"],
                  "answerMessage": sub_row.get("answerMessage"), "filterData": sub_row["filterData"] is not None}
        if mine != theirs:
            mismatches.append((sub_row["group"], sub_row["topic"], "answer", theirs, mine))
            continue
        if not answer.ok:
            continue
        sub = answer.subscription
        f = make_filter(sub, data, manager, filter_support_retry=retry)
        if f.bloom_data_valid != bool((sub_row["filterData"] or {}).get("bloomDataValid")):
            mismatches.append((sub_row["group"], sub_row["topic"], "bloomDataValid"))
        for queue in sub_row["queues"]:
            for unit in queue["units"]:
                compared += 1
                record = records[unit["commitLogOffset"]]
                tags_code_value = None if unit["tagsCode"] is None else int(unit["tagsCode"])
                ext = None
                if unit["ext"]:
                    bitmap = unit["bitmapHex"]
                    ext = ExtUnit(tags_code_value, unit["extMsgStoreTime"],
                                  None if bitmap is None else bytes.fromhex(bitmap))
                props = record["properties"] or {}
                cq = f.check_consume_queue(tags_code_value, ext)
                mine = {"cqResult": cq.matched, "cqBranch": cq.reason}
                theirs = {"cqResult": unit["cqResult"], "cqBranch": BRANCHES.get(unit["cqBranch"])}
                if unit["clCalled"]:
                    cl = f.check_commit_log(props)
                    mine.update(clResult=cl.matched, sqlValue=_sql_value(cl.reason, cl.detail))
                    theirs.update(clResult=unit["clResult"], sqlValue=_harness_sql_value(unit["sqlValue"]))
                out = decide(f, tags_code_value, ext, props)
                mine.update(outcome=out.outcome, bloomFalsePositive=out.bloom_false_positive)
                theirs.update(outcome=HARNESS_OUTCOMES.get(unit["outcome"], unit["outcome"]),
                              bloomFalsePositive=unit["bloomFalsePositive"])
                if unit["brokerReturned"]:
                    mine["clientKept"] = out.outcome != "TAG_CLIENT_MISMATCH"
                    theirs["clientKept"] = unit["clientKept"]
                if mine != theirs:
                    mismatches.append((sub_row["group"], sub_row["topic"], unit["queueOffset"], theirs, mine))
    return compared, mismatches


@pytest.mark.reference
@pytest.mark.parametrize("filter_support_retry", [False, True])
def test_decisions_match_real_pull(filter_support_retry):
    run = store_run(filter_support_retry)
    compared, mismatches = compare_pull(run)
    assert mismatches == []
    assert compared > 500
    outcomes = {u["outcome"] for s in run["pull"]["subscriptions"] for q in s["queues"] for u in q["units"]}
    assert {"DELIVERED", "TAG_HASH_MISS", "TAG_CLIENT_MISMATCH", "BLOOM_MISS", "SQL_FALSE", "SQL_NULL",
            "SQL_ERROR"} <= outcomes
    assert any(u["bloomFalsePositive"] for s in run["pull"]["subscriptions"] for q in s["queues"]
               for u in q["units"])



@pytest.mark.reference
def test_decisions_match_real_pull_after_broker_restart():
    run = store_run(False)
    scenario = run["scenario"]
    pull = pull_replay({"storeDir": str(run["out"] / "store"), "broker": scenario["broker"],
                        "subscriptions": scenario["subscriptions"]})
    bloom = run["report"]["bloom"]
    manager = ConsumerFilterManager(bloom["f"], bloom["n"], compiler=oracle_compiler(run_sql_table(run)))
    assert manager.load(run["out"] / "store" / "config" / "consumerFilter.json")
    assert all(d.is_dead() for d in manager.records())
    compared, mismatches = compare_pull(run, pull, manager)
    assert mismatches == []
    assert compared > 2000


@pytest.mark.reference
def test_end_to_end_with_filterlib_sql92():
    run = store_run(True)
    manager, bitmaps = replay_registrations(run, {}, compiler=compile_filter)
    assert [b for b in bitmaps if b[1] != b[2]] == []
    compared, mismatches = compare_pull(run, None, manager)
    assert mismatches == []
    assert compared > 2000


def test_pull_answers_in_the_brokers_order():
    """PullMessageProcessor's order (reference-harness-notes §4.1): filter-data checks before enablePropertyFilter."""
    m = ConsumerFilterManager(compiler=lambda t, e: Const(True))
    m.register("T", "G", "a > 1", "SQL92", 2, now=100)
    on, off = {"enable_property_filter": True}, {"enable_property_filter": False}
    assert pull_answer(m, "T", "G", "a > 1", "SQL92", **on).answer == "OK"
    assert pull_answer(m, "T", "G", "a > 1", "SQL92", **off).answer == "SYSTEM_ERROR"
    assert pull_answer(m, "T", "G", "a > 1", "SQL92", 3, **off).answer == "FILTER_DATA_NOT_LATEST"
    assert pull_answer(m, "T", "H", "a > 1", "SQL92", **off).answer == "FILTER_DATA_NOT_EXIST"
    assert pull_answer(m, "T", "H", "a > 1", "SQL92", posted=True, **off).answer == "SYSTEM_ERROR"
    assert pull_answer(m, "T", "H", "a > 1", "SQL92", posted=True, now=5, **on).filter_data.born_time == 5
    assert pull_answer(m, "T", "H", "TagA", "TAG", **off).answer == "OK"
    failed = pull_answer(m, "T", "H", "", "SQL92", posted=True, **on)
    assert (failed.answer, failed.cause) == ("SUBSCRIPTION_PARSE_FAILED", "Expression can't be null! SQL92")


@pytest.mark.reference
@pytest.mark.parametrize("enable_property_filter", [False, True])
def test_pull_answers_match_real_broker(enable_property_filter):
    """SYSTEM_ERROR (enablePropertyFilter off), FILTER_DATA_NOT_LATEST / NOT_EXIST and SUBSCRIPTION_PARSE_FAILED
    as the real PullMessageProcessor checks decide them, and the units of the subscriptions that do pull."""
    run = pull_answers_run(enable_property_filter)
    answers = {s["answer"] for s in run["pull"]["subscriptions"]}
    expected = {"OK", "FILTER_DATA_NOT_LATEST", "FILTER_DATA_NOT_EXIST", "SUBSCRIPTION_PARSE_FAILED"}
    assert answers == (expected if enable_property_filter else expected | {"SYSTEM_ERROR"})
    for compiler in (None, compile_filter):
        manager = None
        if compiler is not None:
            manager, _ = replay_registrations(run, {}, compiler=compiler)
        compared, mismatches = compare_pull(run, None, manager)
        assert mismatches == []
        assert compared >= (200 if enable_property_filter else 40)
