"""filterlib.replay.plans held to its docstrings and to 5.3.3's PullMessageProcessor / ConsumerOffsetManager rules."""

from __future__ import annotations

import json

import pytest

from filterlib import message_filter as mf
from filterlib.registry import ConsumerFilterManager
from filterlib.replay import plans
from filterlib.subscriptions import POSTED, REGISTERED, Subscription

NOW = 1_700_000_000_000


def _registry(*records):
    """A registry holding (topic, group, expression, client version) SQL92 registrations."""
    reg = ConsumerFilterManager(20, 32)
    for topic, group, expression, version in records:
        assert reg.register(topic, group, expression, "SQL92", version, now=NOW - 1000)
    return reg


# --- dump_subscriptions -------------------------------------------------------------------------------------------


def test_file_subscriptions_come_first_in_file_order_and_a_repeated_pair_is_kept_twice():
    a = Subscription("G1", "T", "TAG", "TagA")
    b = Subscription("G2", "T", "TAG", "*")
    a2 = Subscription("G1", "T", "TAG", "TagB")  # another member of G1 subscribing differently
    out = plans.dump_subscriptions([a, b, a2], _registry())
    assert out == [(a, plans.FROM_FILE), (b, plans.FROM_FILE), (a2, plans.FROM_FILE)]


def test_registry_records_are_added_only_for_pairs_the_file_does_not_name():
    reg = _registry(("T", "G1", "a > 1", 4), ("T", "G3", "b = 2", 7), ("A", "G9", "c IS NULL", 1))
    file_subs = [Subscription("G1", "T", "TAG", "TagA")]
    out = plans.dump_subscriptions(file_subs, reg)
    assert out[0] == (file_subs[0], plans.FROM_FILE)
    added = out[1:]
    assert all(src == plans.FROM_REGISTRY for _, src in added)
    # (G1, T) is named by the file: its registry record is not replayed a second time
    assert {(s.group, s.topic) for s, _ in added} == {("G3", "T"), ("G9", "A")}
    by_pair = {(s.group, s.topic): s for s, _ in added}
    g3 = by_pair[("G3", "T")]
    assert (g3.type, g3.expression, g3.path) == ("SQL92", "b = 2", REGISTERED)
    # its sub_version is left to the registered record: the pull checks against the record's clientVersion
    assert g3.sub_version is None
    assert plans.answer(reg, g3, enable_property_filter=True, now=NOW).sub_version == 7


def test_registry_records_without_group_or_topic_are_skipped():
    reg = ConsumerFilterManager(20, 32)
    bloom = reg.bloom_filter
    bits = {"bitNum": bloom.m, "bitPos": list(range(bloom.k))}
    text = json.dumps({"filterDataByTopic": {
        "T": {"topic": "T", "groupFilterData": {
            "G": {"consumerGroup": "G", "topic": "T", "expression": "a > 1", "expressionType": "SQL92",
                  "bornTime": 10, "deadTime": 0, "clientVersion": 1, "bloomFilterData": bits},
            "NoGroup": {"topic": "T", "expression": "a > 2", "expressionType": "SQL92", "bornTime": 10,
                        "clientVersion": 1, "bloomFilterData": bits}}},
        "U": {"topic": "U", "groupFilterData": {
            "NoTopic": {"consumerGroup": "NoTopic", "expression": "a > 3", "expressionType": "SQL92",
                        "bornTime": 10, "clientVersion": 1, "bloomFilterData": bits}}}}})
    assert reg.decode(text, now=NOW)
    assert len(reg.records()) == 3
    out = plans.dump_subscriptions([], reg)
    assert [(s.group, s.topic, src) for s, src in out] == [("G", "T", plans.FROM_REGISTRY)]


# --- not_replayed ---------------------------------------------------------------------------------------------------


def test_lite_topics_and_groups_bound_to_one_are_refused_naming_group_and_topic():
    subs = [(Subscription("G1", "Normal"), plans.FROM_FILE),
            (Subscription("G2", "LiteT"), plans.FROM_FILE),
            (Subscription("Bound", "Other"), plans.FROM_REGISTRY),
            (Subscription("G4", "Plain"), plans.FROM_FILE)]
    topics = {"topicConfigTable": {
        "Normal": {"topicName": "Normal", "attributes": {"message.type": "NORMAL"}},
        "LiteT": {"topicName": "LiteT", "attributes": {"message.type": "LITE"}},
        "Plain": {"topicName": "Plain"}}}
    groups = {"subscriptionGroupTable": {
        "G1": {"groupName": "G1", "attributes": {}},
        "Bound": {"groupName": "Bound", "attributes": {"lite.bind.topic": "LiteT"}}}}
    kept, refused = plans.not_replayed(subs, topics, groups)
    assert kept == [subs[0], subs[3]]
    assert len(refused) == 2
    lite, bound = refused
    assert "G2" in lite and "LiteT" in lite and "message.type=LITE" in lite
    assert "Bound" in bound and "Other" in bound and "LiteT" in bound
    assert all(r.startswith("not replayed:") for r in refused)


def test_without_topics_or_groups_nothing_is_refused():
    subs = [(Subscription("G", "T"), plans.FROM_FILE), (Subscription("H", "U", "SQL92", "a=1"), plans.FROM_REGISTRY)]
    assert plans.not_replayed(subs, None, None) == (subs, [])
    assert plans.not_replayed(subs, {}, {"subscriptionGroupTable": None}) == (subs, [])


# --- plan_all -------------------------------------------------------------------------------------------------------


def test_plans_are_numbered_from_start_and_keep_source_and_subscription():
    reg = _registry(("T", "G", "a > 1", 2))
    subs = [(Subscription("G", "T", "SQL92", "a > 1", REGISTERED, 2, 16), plans.FROM_FILE),
            (Subscription("H", "T"), plans.FROM_FILE),
            (Subscription("J", "T", "TAG", "X || Y"), plans.FROM_REGISTRY)]
    out = plans.plan_all(subs, reg, enable_property_filter=True, filter_support_retry=False, now=NOW, start=5)
    assert [p.index for p in out] == [5, 6, 7]
    assert [p.source for p in out] == [plans.FROM_FILE, plans.FROM_FILE, plans.FROM_REGISTRY]
    assert [p.subscription() for p in out] == [s for s, _ in subs]
    assert out[0].batch_size == 16 and out[0].sub_version == 2
    assert all(p.ok for p in out)
    assert out[0].to_json()["index"] == 5 and out[0].to_json()["group"] == "G"


@pytest.mark.parametrize(("support_retry", "cls"), [(False, "ExpressionMessageFilter"),
                                                      (True, "ExpressionForRetryMessageFilter")])
def test_filter_class_follows_filter_support_retry_and_refused_plans_have_none(support_retry, cls):
    subs = [(Subscription("G", "T", "TAG", "A"), plans.FROM_FILE),
            (Subscription("Nobody", "T", "SQL92", "a > 1"), plans.FROM_FILE)]  # no registry record
    ok, refused = plans.plan_all(subs, _registry(), True, support_retry, now=NOW)
    assert ok.ok and ok.filter_class == cls
    assert not refused.ok and refused.filter_class is None


def test_sql92_is_refused_when_enable_property_filter_is_off_but_tags_are_not():
    """PullMessageProcessor: a non-TAG subscription with enablePropertyFilter off (the default) is SYSTEM_ERROR,
    remark "The broker does not support consumer to filter message by " + type; TAG subscriptions pull."""
    reg = _registry(("T", "G", "a > 1", 1))
    subs = [(Subscription("G", "T", "SQL92", "a > 1"), plans.FROM_FILE),
            (Subscription("G", "T", "SQL92", "a > 1", POSTED, 1), plans.FROM_FILE),
            (Subscription("G2", "T", "TAG", "A || B"), plans.FROM_FILE),
            (Subscription("G3", "T", "", "A"), plans.FROM_FILE)]  # an empty type is a tag type
    sql, posted, tag, empty_type = plans.plan_all(subs, reg, False, False, now=NOW)
    for p in (sql, posted):
        assert p.answer == mf.SYSTEM_ERROR and not p.ok and p.filter_class is None
        assert p.remark == "The broker does not support consumer to filter message by SQL92"
    assert tag.answer == mf.OK and empty_type.answer == mf.OK


def test_registered_sql92_answers_follow_the_brokers_order():
    """No record: FILTER_DATA_NOT_EXIST, checked before enablePropertyFilter; a record whose clientVersion is below
    the pull's subVersion: FILTER_DATA_NOT_LATEST; otherwise OK once property filtering is on."""
    reg = _registry(("T", "Old", "a > 1", 3), ("T", "Same", "a > 1", 5))
    subs = [(Subscription("Missing", "T", "SQL92", "a > 1"), plans.FROM_FILE),
            (Subscription("Old", "T", "SQL92", "a > 1", REGISTERED, 5), plans.FROM_FILE),
            (Subscription("Same", "T", "SQL92", "a > 1", REGISTERED, 5), plans.FROM_FILE)]
    on = plans.plan_all(subs, reg, True, False, now=NOW)
    assert [p.answer for p in on] == [mf.FILTER_DATA_NOT_EXIST, mf.FILTER_DATA_NOT_LATEST, mf.OK]
    assert on[0].remark == "The broker's consumer filter data is not exist!Your expression may be wrong!"
    assert on[1].remark == "the consumer's consumer filter data not latest"
    off = plans.plan_all(subs, reg, False, False, now=NOW)
    assert [p.answer for p in off] == [mf.FILTER_DATA_NOT_EXIST, mf.FILTER_DATA_NOT_LATEST, mf.SYSTEM_ERROR]


def test_a_posted_selector_that_fails_filter_api_build_is_subscription_parse_failed():
    """FilterAPI.build: a non-TAG type with an empty expression throws "Expression can't be null! <type>"; a TAG
    expression that splits to nothing throws "subString split error"."""
    subs = [(Subscription("G", "T", "SQL92", "", POSTED), plans.FROM_FILE),
            (Subscription("G", "T", "TAG", "||", POSTED), plans.FROM_FILE)]
    sql, tag = plans.plan_all(subs, _registry(), True, False, now=NOW)
    for p in (sql, tag):
        assert p.answer == mf.SUBSCRIPTION_PARSE_FAILED and p.filter_class is None
        assert p.remark == "parse the consumer's subscription failed"
    assert "Expression can't be null" in sql.cause and "SQL92" in sql.cause
    assert "split" in tag.cause


def test_a_posted_sql92_subscription_needs_no_registry_record():
    """The posted path builds its own filter data (ConsumerFilterManager.build), so an empty registry is no refusal."""
    p, = plans.plan_all([(Subscription("G", "T", "SQL92", "a > 1", POSTED, 9), plans.FROM_FILE)], _registry(),
                        True, False, now=NOW)
    assert p.ok and p.filter_class == "ExpressionMessageFilter"


# --- build_filter ---------------------------------------------------------------------------------------------------


def test_build_filter_refuses_a_plan_the_broker_does_not_pull():
    reg = _registry(("T", "G", "a > 1", 1))
    p, = plans.plan_all([(Subscription("G", "T", "SQL92", "a > 1"), plans.FROM_FILE)], reg, False, False, now=NOW)
    with pytest.raises(ValueError) as e:
        plans.build_filter(p, reg, False, False, now=NOW)
    assert "G" in str(e.value) and "T" in str(e.value) and mf.SYSTEM_ERROR in str(e.value)


def test_build_filter_uses_the_registered_record_and_the_retry_variant_when_asked():
    reg = _registry(("T", "G", "a > 1", 1))
    p, = plans.plan_all([(Subscription("G", "T", "SQL92", "a > 1"), plans.FROM_FILE)], reg, True, True, now=NOW)
    f = plans.build_filter(p, reg, True, True, now=NOW)
    assert type(f) is mf.ExpressionForRetryMessageFilter
    assert f.filter_data is reg.get("T", "G")
    assert f.filter_data.bloom_filter_data is not None and f.bloom_data_valid
    plain = plans.build_filter(p, reg, True, False, now=NOW)
    assert type(plain) is mf.ExpressionMessageFilter
    # the filter decides by the registered expression: a > 1 is TRUE for a=2, FALSE for a=0
    assert plain.check_commit_log({"a": "2"}).matched
    assert not plain.check_commit_log({"a": "0"}).matched


def test_build_filter_for_a_posted_plan_has_no_bloom_data():
    """ConsumerFilterManager.build (the posted path) sets no bloomFilterData: the consume-queue layer cannot test a
    bitmap and passes the unit on."""
    reg = _registry()
    p, = plans.plan_all([(Subscription("G", "T", "SQL92", "a > 1", POSTED), plans.FROM_FILE)], reg, True, False,
                        now=NOW)
    f = plans.build_filter(p, reg, True, False, now=NOW)
    assert f.filter_data is not None and f.filter_data.bloom_filter_data is None
    assert f.check_consume_queue(0, mf.ExtUnit(0, NOW + 1, b"\0" * 14)).reason == "no_bloom_data"


def test_build_filter_for_a_tag_plan_filters_by_tag_hash():
    reg = _registry()
    p, = plans.plan_all([(Subscription("G", "T", "TAG", "TagA || TagB"), plans.FROM_FILE)], reg, False, False)
    f = plans.build_filter(p, reg, False, False)
    assert f.filter_data is None
    # Java String.hashCode: "TagA" = 84*31^3 + 97*31^2 + 103*31 + 65 = 2598919, "TagC" = 2598921
    assert f.is_matched_by_consume_queue(2598919, None)
    assert not f.is_matched_by_consume_queue(2598921, None)


# --- committed_offsets ----------------------------------------------------------------------------------------------


def test_committed_offsets_split_topic_at_group_keys():
    table = {"offsetTable": {"T@G": {0: 5, 1: 7}, "%RETRY%G@G": {"0": "3"}, "U@H": {}}}
    assert plans.committed_offsets(table) == {("G", "T", 0): 5, ("G", "T", 1): 7, ("G", "%RETRY%G", 0): 3}


def test_a_key_without_at_is_skipped_and_the_last_at_separates_the_group():
    """ConsumerOffsetManager keys are topic + "@" + group; group names cannot hold '@' (TopicValidator allows only
    [%|a-zA-Z0-9_-]), so the group is what follows the last '@' (the key queryOffset builds for such a topic)."""
    table = {"offsetTable": {"NoSeparator": {0: 1}, "odd@topic@G": {2: 9}, "T@G": None}}
    assert plans.committed_offsets(table) == {("G", "odd@topic", 2): 9}


def test_committed_offsets_of_nothing():
    assert plans.committed_offsets(None) == {}
    assert plans.committed_offsets({}) == {}
    assert plans.committed_offsets({"offsetTable": None}) == {}
