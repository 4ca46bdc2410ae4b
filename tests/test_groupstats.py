"""group_stats rows from the replay's per-piece counts (`filterlib.replay.stats`): sums over pieces and queues, the
bloom false positive rate, the queue counted once however many pieces it was replayed in."""

from __future__ import annotations

import numpy as np
import pytest

from filterlib import vocabulary as vocab
from filterlib.replay.matrix import CODES, COUNT_FIELDS, counts
from filterlib.replay.paging import FOUND, NO_MATCHED_MESSAGE, OFFSET_OVERFLOW_ONE
from filterlib.replay.plans import Plan
from filterlib.replay.stats import pull_firsts, pull_positions, stats_rows, sum_counts, totals


def code(outcome: str, fp: bool = False, tested: bool | None = None) -> int:
    """The first decision code with that outcome and bloom flags."""
    return next(c.code for c in CODES[1:] if c.outcome == outcome and c.bloom_false_positive == fp
                and (tested is None or c.bloom_tested == tested))


def plan(index: int, group: str = "G", answer: str = "OK") -> Plan:
    return Plan(index, group, "T", "SQL92", "a > 1", "registered", 1, 32, "consumerFilter.json", answer, None, None,
                "ExpressionMessageFilter" if answer == "OK" else None)


def piece(codes: list[int], sizes: list[int], messages: list[int], status: list[int], first: bool) -> np.ndarray:
    return counts(np.array(codes, dtype=np.uint8), np.array(sizes, dtype=np.int64), np.array(messages),
                  np.array(status), first)


def test_pieces_of_queues_add_up_and_the_queue_counts_once() -> None:
    delivered, miss = code(vocab.DELIVERED, tested=True), code(vocab.BLOOM_MISS)
    fp = code(vocab.SQL_FALSE, fp=True)
    q0a = piece([delivered, miss, fp], [100, 200, 300], [1, 0], [FOUND, NO_MATCHED_MESSAGE], True)
    q0b = piece([miss, delivered], [10, 20], [1, 0], [FOUND, OFFSET_OVERFLOW_ONE], False)  # a later piece
    q1 = piece([fp], [5], [0, 0], [NO_MATCHED_MESSAGE, OFFSET_OVERFLOW_ONE], True)
    summed = sum_counts([(0, q0a), (0, q0b), (0, q1), (1, q1)])
    a = summed[0]
    assert (a["units_scanned"], a["delivered"], a["bloom_miss"], a["bloom_false_positives"]) == (6, 2, 2, 2)
    assert a["queues"] == 2 and a["pulls"] == 6 and a["found_pulls"] == 2 and a["empty_pulls"] == 4
    assert a["bytes_delivered"] == 120
    assert a["bytes_filtered_on_broker"] == 200 + 300 + 10 + 5
    assert totals(summed) == (6 + 1, 2, 6 + 2)


def test_a_position_is_the_furthest_pull_of_the_queues_pieces_and_their_pulls() -> None:
    delivered = code(vocab.DELIVERED, tested=True)
    q0a = piece([delivered], [1], [1, 0], [FOUND, NO_MATCHED_MESSAGE], True)
    q0b = piece([delivered], [1], [1, 0, 0], [FOUND, FOUND, OFFSET_OVERFLOW_ONE], False)
    idle = piece([], [], [], [], True)  # a member's piece it never pulled
    positions = pull_positions([(0, 3, 800, q0a), (0, 3, 1200, q0b), (1, 3, 400, q0a), (2, 3, None, idle)])
    assert positions == {(0, 3): (1200, 5), (1, 3): (400, 2)}
    assert pull_positions([(0, 3, 1200, q0b), (0, 3, 800, q0a)]) == {(0, 3): (1200, 5)}  # in any order


def test_each_pieces_first_pull_is_numbered_after_the_pulls_of_the_queues_earlier_pieces() -> None:
    """Pieces come in any order; a subscription's pieces of one queue number on from each other in piece order, a
    continued subscription's from the pulls it made before, each queue and subscription on its own."""
    delivered = code(vocab.DELIVERED, tested=True)
    two = piece([delivered], [1], [1, 0], [FOUND, NO_MATCHED_MESSAGE], True)
    three = piece([delivered], [1], [1, 0, 0], [FOUND, FOUND, OFFSET_OVERFLOW_ONE], False)
    idle = piece([], [], [], [], True)
    rows = [(0, 3, 7, three), (0, 3, 5, two), (0, 3, 6, idle), (0, 3, 9, two), (1, 3, 5, three), (0, 4, 0, two)]
    assert pull_firsts(rows, {}) == {(0, 3, 5): 0, (0, 3, 6): 2, (0, 3, 7): 2, (0, 3, 9): 5, (1, 3, 5): 0,
                                     (0, 4, 0): 0}
    assert pull_firsts(rows, {(0, 3): 40, (1, 4): 9}) == {(0, 3, 5): 40, (0, 3, 6): 42, (0, 3, 7): 42, (0, 3, 9): 45,
                                                          (1, 3, 5): 0, (0, 4, 0): 0}


def test_rows_carry_the_plan_the_rates_and_zeros_for_a_plan_that_never_pulled() -> None:
    miss, fp = code(vocab.BLOOM_MISS), code(vocab.SQL_FALSE, fp=True)
    summed = sum_counts([(0, piece([miss, miss, miss, fp], [1, 1, 1, 1], [0], [OFFSET_OVERFLOW_ONE], True))])
    rows = stats_rows([plan(0), plan(1, "H", "FILTER_DATA_NOT_EXIST")], summed, {0: 0, 1: 1}, "d1", "earliest", 20)
    first, second = rows
    assert first["bloom_fp_rate"] == pytest.approx(0.25)  # 1 false positive among 4 units the bitmap could drop
    assert first["configured_fp_rate"] == pytest.approx(0.2)
    assert (first["dump_id"], first["consumer_group"], first["start"], first["subscription_position"]) == \
        ("d1", "G", "earliest", 0)
    assert second["answer"] == "FILTER_DATA_NOT_EXIST" and second["subscription_position"] == 1
    assert all(second[k] == 0 for k in COUNT_FIELDS)
    assert second["bloom_fp_rate"] is None


def test_a_count_vector_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="count vector"):
        sum_counts([(0, [1, 2, 3])])
