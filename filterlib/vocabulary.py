"""The replay's one vocabulary: every outcome, layer and deciding branch, named and described once.

The row filter (`filterlib.message_filter`), the set-at-a-time engine (`filterlib.engine.decide`, whose integer
codes are positions in OUTCOMES / LAYERS / REASONS), job 2's group_stats columns, the report's legend and colours
and `filterlib.replay.explain`'s plain words all read these tables; a new outcome or branch is added here only.
"""

from __future__ import annotations

from dataclasses import dataclass

REBALANCE = "rebalance"
CONSUME_QUEUE = "consume_queue"
COMMIT_LOG = "commit_log"
CLIENT = "client"
LAYERS: tuple[str, ...] = (REBALANCE, CONSUME_QUEUE, COMMIT_LOG, CLIENT)
"""The layers in the order a unit meets them: the group's queue allocation (which member pulls the queue, if any),
the broker's two filter layers, then the consumer's client."""

DELIVERED = "DELIVERED"
TAG_HASH_MISS = "TAG_HASH_MISS"
TAG_CLIENT_MISMATCH = "TAG_CLIENT_MISMATCH"
BLOOM_MISS = "BLOOM_MISS"
SQL_FALSE = "SQL_FALSE"
SQL_NULL = "SQL_NULL"
SQL_ERROR = "SQL_ERROR"
CLIENT_DECODE_FAILED = "CLIENT_DECODE_FAILED"
FILTERED_BY_OTHER_MEMBER = "FILTERED_BY_OTHER_MEMBER"
MEMBER_RECHECK_DROP = "MEMBER_RECHECK_DROP"
NEVER_PULLED = "NEVER_PULLED"


@dataclass(frozen=True)
class Outcome:
    """A unit's end result: its name, the layer that gives it (None: whichever ran last), its group_stats count
    column, what it means in plain words and its colour in the report (colour-blind-safe palette)."""

    name: str
    layer: str | None
    column: str
    words: str
    colour: str


OUTCOMES: tuple[Outcome, ...] = (
    Outcome(DELIVERED, None, "delivered", "the consumer received it", "#1b9e77"),
    Outcome(TAG_HASH_MISS, CONSUME_QUEUE, "tag_hash_miss",
            "the broker's tag hash check on the consume queue dropped it", "#7570b3"),
    Outcome(TAG_CLIENT_MISMATCH, CLIENT, "tag_client_mismatch",
            "passed the hash, dropped by the client's exact tag check (hash collision or no tag)", "#e7298a"),
    Outcome(BLOOM_MISS, CONSUME_QUEUE, "bloom_miss", "the ext unit's bloom bitmap said no: no SQL evaluation",
            "#66a61e"),
    Outcome(SQL_FALSE, COMMIT_LOG, "sql_false", "the SQL92 selector evaluated to false", "#a6761d"),
    Outcome(SQL_NULL, COMMIT_LOG, "sql_null",
            "the SQL92 selector evaluated to null (a property missing) or not a boolean", "#e6ab02"),
    Outcome(SQL_ERROR, COMMIT_LOG, "sql_error", "the SQL92 evaluation threw", "#d95f02"),
    Outcome(CLIENT_DECODE_FAILED, CLIENT, "client_decode_failed",
            "returned by the broker, lost in the client's decode: its body, or an earlier one of the same pull, "
            "does not inflate", "#666666"),
    Outcome(FILTERED_BY_OTHER_MEMBER, None, "filtered_by_other_member",
            "the member wanted it (its own subscription delivers it), but the broker filtered the member's pull with "
            "another member's subscription, the one it keeps for the group, and dropped it", "#b2182b"),
    Outcome(MEMBER_RECHECK_DROP, CLIENT, "member_recheck_drop",
            "the broker passed it under another member's subscription; the member's own tag re-check dropped it: "
            "consumed, lost", "#f4a582"),
    Outcome(NEVER_PULLED, REBALANCE, "never_pulled",
            "its queue is allocated to a member that does not subscribe the topic: nobody pulls it", "#4d4d4d"),
)
"""Every outcome, in the engine's code order (also group_stats' column order)."""
OUTCOME_NAMES: tuple[str, ...] = tuple(o.name for o in OUTCOMES)
BY_NAME: dict[str, Outcome] = {o.name: o for o in OUTCOMES}
PIPELINE_ORDER: tuple[Outcome, ...] = tuple(BY_NAME[n] for n in (
    DELIVERED, TAG_HASH_MISS, TAG_CLIENT_MISMATCH, CLIENT_DECODE_FAILED, BLOOM_MISS, SQL_FALSE, SQL_NULL, SQL_ERROR,
    FILTERED_BY_OTHER_MEMBER, MEMBER_RECHECK_DROP, NEVER_PULLED))
"""The outcomes as the report shows them: delivered, then the TAG path's drops, then the SQL92 path's, then the
losses of a group whose members subscribe differently."""
MEMBER_OUTCOMES: tuple[str, ...] = (FILTERED_BY_OTHER_MEMBER, MEMBER_RECHECK_DROP, NEVER_PULLED)
"""The outcomes only a group replayed as its members gives (`filterlib.members`)."""
OUTCOME_COLUMNS: dict[str, str] = {o.name: o.column for o in OUTCOMES}
"""Outcome name → its count column in group_stats."""


@dataclass(frozen=True)
class Branch:
    """A branch that decides a layer's answer: its name (a decision's reason), its layer, and its plain words
    (None where `filterlib.replay.explain` builds them from the row: hashes, bits, times, SQL values)."""

    name: str
    layer: str
    words: str | None = None


BRANCHES: tuple[Branch, ...] = (
    Branch("queue_owner_not_subscribed", REBALANCE, "the group's allocation gives the queue to a member that does not "
                                                    "subscribe the topic: that member never pulls it, and no other "
                                                    "member does"),
    Branch("no_subscription", CONSUME_QUEUE, "no subscription: the broker lets every unit through"),
    Branch("class_filter", CONSUME_QUEUE, "a class-filter subscription: the broker lets every unit through (the "
                                          "client filters; not replayed)"),
    Branch("tag_code_null", CONSUME_QUEUE, "the unit's tagsCode could not be read (null): the broker lets it through"),
    Branch("sub_all", CONSUME_QUEUE, "the subscription is `*`: every tag passes"),
    Branch("tag_hash_hit", CONSUME_QUEUE),
    Branch("tag_hash_miss", CONSUME_QUEUE),
    Branch("no_filter_data", CONSUME_QUEUE, "no compiled filter data for the subscription: the consume-queue layer "
                                            "passes everything"),
    Branch("no_bloom_data", CONSUME_QUEUE, "the filter data has no bloom bits (a posted subscription, or bloom off): "
                                           "no bitmap test"),
    Branch("ext_null", CONSUME_QUEUE, "the unit has no ext unit (ConsumeQueueExt off or unreadable): no bitmap test"),
    Branch("not_in_live", CONSUME_QUEUE),
    Branch("bitmap_null", CONSUME_QUEUE, "the ext unit carries no bitmap (CalcBitMap off or no filter on the topic "
                                         "then): no bitmap test"),
    Branch("bloom_data_invalid", CONSUME_QUEUE, "the filter's bloom data does not fit the broker's bloom filter: no "
                                                "bitmap test"),
    Branch("bitmap_length_mismatch", CONSUME_QUEUE, "the bitmap's length differs from the filter's bit count: no "
                                                    "bitmap test"),
    Branch("bloom_error", CONSUME_QUEUE, "testing the bitmap failed (bit positions out of range): the unit passes"),
    Branch("bloom_hit", CONSUME_QUEUE),
    Branch("bloom_miss", CONSUME_QUEUE),
    Branch("no_subscription", COMMIT_LOG, "no subscription: nothing to evaluate"),
    Branch("class_filter", COMMIT_LOG, "a class-filter subscription: the broker does not evaluate it"),
    Branch("tag_type", COMMIT_LOG, "a TAG subscription: the commit-log layer has nothing to check"),
    Branch("no_filter_data", COMMIT_LOG, "no compiled filter data: the commit-log layer passes everything"),
    Branch("sql_false", COMMIT_LOG),
    Branch("sql_true", COMMIT_LOG),
    Branch("sql_null", COMMIT_LOG),
    Branch("sql_error", COMMIT_LOG),
    Branch("client_keep_all", CLIENT, "the subscription names no tag set (`*`, or SQL92): the client keeps the "
                                      "message"),
    Branch("client_no_tags", CLIENT, "the message has no TAGS property: the client drops it (its tagsCode only "
                                     "matched the subscription's hash set by coincidence, e.g. a tag whose hash is "
                                     "0)"),
    Branch("client_tag_match", CLIENT, "the message's tag is one of the subscribed tags exactly: the client keeps "
                                       "it"),
    Branch("client_tag_mismatch", CLIENT, "the message's tag is not among the subscribed tags, although its hash "
                                          "matched one: a String.hashCode collision; the client drops it"),
    Branch("client_not_own_tag", CLIENT, "the broker passed it under the subscription it keeps for the group "
                                         "(another member's); the message's tag (or its lack of one) is not among "
                                         "this member's own subscribed tags: the client drops it, and the offset "
                                         "moves on"),
    Branch("client_decode_failed", CLIENT, "the client's decode of the pull's response fails on this message's body "
                                           "({detail}): MessageDecoder.decodesBatch stops there, so the consumer "
                                           "never sees it or any later message of this pull (CLIENT_DECODE_FAILED, "
                                           "before the tag re-check)"),
    Branch("client_decode_lost", CLIENT, "{detail}: MessageDecoder.decodesBatch stopped there, so the consumer never "
                                         "sees this message either (CLIENT_DECODE_FAILED, before the tag re-check)"),
)
"""Every branch of every layer, in the broker's and client's order within a layer."""
SQL_NON_BOOLEAN = "sql_non_boolean"
"""The row filter's branch for a selector whose value is not a boolean (the engine records it as sql_null)."""
REASONS: tuple[str, ...] = tuple(dict.fromkeys(b.name for b in BRANCHES))
"""The distinct branch names, in BRANCHES order: the engine's reason codes."""
DECODE_BRANCHES = ("client_decode_failed", "client_decode_lost")
"""The client branches whose words take the decode error as {detail}."""
COMMIT_LOG_OUTCOMES: dict[str, str] = {"sql_false": SQL_FALSE, "sql_null": SQL_NULL, SQL_NON_BOOLEAN: SQL_NULL,
                                       "sql_error": SQL_ERROR}
"""The commit-log layer's dropping branches → the outcome each gives."""


def words(layer: str) -> dict[str, str]:
    """One layer's fixed plain words by branch name (branches whose words depend on the row left out)."""
    return {b.name: b.words for b in BRANCHES if b.layer == layer and b.words is not None}


@dataclass(frozen=True)
class DecisionCode:
    """One byte of job 2's decision matrix: every field of a decision that the engine fixes by its branch codes
    (the detail text and the pull aside). Code 0 is NOT_SCANNED: the subscription's pulls never reached the unit."""

    code: int
    outcome: str | None
    layer: str | None
    reason: str | None
    cq_reason: str | None
    sql_value: str | None
    bloom_tested: bool
    bloom_false_positive: bool


SQL_VALUES: tuple[str, ...] = ("FALSE", "TRUE", "NULL", "ERROR")
"""The commit-log layer's SQL92 values, in the engine's state order (results.FALSE / TRUE / NULL / ERROR)."""
BLOOM_TESTED = ("bloom_hit", "bloom_miss")
"""The consume-queue branches that read the unit's bitmap."""
CLIENT_OUTCOMES: dict[str, str] = {"client_keep_all": DELIVERED, "client_tag_match": DELIVERED,
                                   "client_no_tags": TAG_CLIENT_MISMATCH, "client_tag_mismatch": TAG_CLIENT_MISMATCH,
                                   "client_not_own_tag": MEMBER_RECHECK_DROP,
                                   "client_decode_failed": CLIENT_DECODE_FAILED,
                                   "client_decode_lost": CLIENT_DECODE_FAILED}
"""The client's branches → the outcome each gives."""
CQ_DROPS: dict[str, str] = {"tag_hash_miss": TAG_HASH_MISS, "bloom_miss": BLOOM_MISS}
"""The consume-queue layer's dropping branches → the outcome each gives."""


TAG_PASSES = ("tag_code_null", "sub_all", "tag_hash_hit")
"""The consume-queue branches that pass a unit under a TAG subscription on an ordinary topic."""
SQL_EVALUATED = ("no_bloom_data", "ext_null", "not_in_live", "bitmap_null", "bloom_data_invalid",
                 "bitmap_length_mismatch", "bloom_error", "bloom_hit")
"""The consume-queue branches that pass a unit on to a SQL92 evaluation in the commit-log layer."""


def _decision_codes() -> tuple[DecisionCode, ...]:
    """Every combination the engine can give, from its branches: a consume-queue branch that drops decides alone;
    one that passes is followed by a commit-log drop (the bloom false positive where the bitmap said maybe) or by a
    client branch (SQL92 value TRUE where the commit-log layer evaluated, none where it had nothing to evaluate);
    a filter without subscription delivers from the commit-log layer. Then the member outcomes (appended, so the
    earlier codes keep their numbers), on ordinary topics only: a broker drop the member's own subscription would
    have delivered, the member's own re-check after the broker passed, and a queue nobody pulls."""
    sql_reason = {"sql_false": "FALSE", "sql_null": "NULL", "sql_error": "ERROR"}
    out: list[tuple] = [(None, None, None, None, None, False, False)]
    for b in BRANCHES:
        if b.layer != CONSUME_QUEUE:
            continue
        cq, tested = b.name, b.name in BLOOM_TESTED
        if cq in CQ_DROPS:
            out.append((CQ_DROPS[cq], CONSUME_QUEUE, cq, cq, None, tested, False))
            continue
        if cq == "no_subscription":
            out.append((DELIVERED, COMMIT_LOG, cq, cq, None, tested, False))
        for reason, value in sql_reason.items():
            out.append((COMMIT_LOG_OUTCOMES[reason], COMMIT_LOG, reason, cq, value, tested, cq == "bloom_hit"))
        for value in (None, "TRUE"):
            for reason, outcome in CLIENT_OUTCOMES.items():
                if outcome != MEMBER_RECHECK_DROP:
                    out.append((outcome, CLIENT, reason, cq, value, tested, False))
    for cq in CQ_DROPS:
        out.append((FILTERED_BY_OTHER_MEMBER, CONSUME_QUEUE, cq, cq, None, cq in BLOOM_TESTED, False))
    for cq in SQL_EVALUATED:
        for reason, value in sql_reason.items():
            out.append((FILTERED_BY_OTHER_MEMBER, COMMIT_LOG, reason, cq, value, cq in BLOOM_TESTED,
                        cq == "bloom_hit"))
    for cq, value in [(c, None) for c in (*TAG_PASSES, "no_filter_data")] + [(c, "TRUE") for c in SQL_EVALUATED]:
        out.append((MEMBER_RECHECK_DROP, CLIENT, "client_not_own_tag", cq, value, cq in BLOOM_TESTED, False))
    out.append((NEVER_PULLED, REBALANCE, "queue_owner_not_subscribed", None, None, False, False))
    return tuple(DecisionCode(i, *row) for i, row in enumerate(out))


DECISION_CODES: tuple[DecisionCode, ...] = _decision_codes()
"""job 2's decision codes: `pull_decisions.decisions` holds one of these per (unit, subscription) as a byte."""
NOT_SCANNED = 0
"""The code of a unit the subscription's pulls never reached (a zero byte)."""
NEVER_PULLED_CODE = len(DECISION_CODES) - 1
"""The code of a unit on a queue its owner does not pull (`NEVER_PULLED`)."""
assert len(DECISION_CODES) <= 256, "a decision code must fit in one byte"
