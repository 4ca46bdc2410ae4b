"""Job 2's per-subscription statistics (the `group_stats` rows): what each subscription's replay counted, summed
over the pieces of every queue it pulled, beside the subscription's plan and pre-read answer.

The counts come from the replay tasks (`matrix.counts`, one COUNT_FIELDS vector per piece of a queue and
subscription); this module adds them up and derives the rates, so the Spark layer only carries numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filterlib.replay.matrix import COUNT_FIELDS
from filterlib.replay.plans import Plan


def sum_counts(pieces: Iterable[tuple[int, Sequence[int]]]) -> dict[int, dict[str, int]]:
    """{subscription index: {count field: total}} from (subscription index, COUNT_FIELDS vector) per piece."""
    totals: dict[int, np.ndarray] = {}
    for index, vector in pieces:
        v = np.asarray(vector, dtype=np.int64)
        if len(v) != len(COUNT_FIELDS):
            raise ValueError(f"a count vector of {len(v)} fields, not {len(COUNT_FIELDS)}")
        totals[index] = totals[index] + v if index in totals else v
    return {i: dict(zip(COUNT_FIELDS, (int(x) for x in v), strict=True)) for i, v in totals.items()}


def pull_positions(pieces: Iterable[tuple[int, int, int | None, Sequence[int]]]
                   ) -> dict[tuple[int, int], tuple[int, int]]:
    """{(subscription index, queue id): (furthest next_begin_offset, pulls)} over the (subscription index, queue id,
    the piece's furthest next_begin_offset or None, COUNT_FIELDS vector) of each piece: where each subscription's
    pulls left each queue it pulled (pull_positions), a piece without a pull adding nothing."""
    pulls = COUNT_FIELDS.index("pulls")
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for index, queue_id, furthest, vector in pieces:
        if furthest is None or not vector[pulls]:
            continue
        key = (index, queue_id)
        before = out.get(key, (furthest, 0))
        out[key] = (max(before[0], furthest), before[1] + int(vector[pulls]))
    return out


def pull_firsts(pieces: Iterable[tuple[int, int, int, Sequence[int]]], bases: Mapping[tuple[int, int], int]
                ) -> dict[tuple[int, int, int], int]:
    """{(subscription index, queue id, piece): the number of the piece's first pull over the queue} from the
    (subscription index, queue id, piece, COUNT_FIELDS vector) of each piece: a queue's pieces follow each other in
    queue offset, each numbering its own pulls from 0, a continued subscription's from the pulls it made before
    (`bases`, by subscription index and queue id)."""
    pulls = COUNT_FIELDS.index("pulls")
    by_queue: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for index, queue_id, piece, vector in pieces:
        by_queue.setdefault((index, queue_id), []).append((piece, int(vector[pulls])))
    out: dict[tuple[int, int, int], int] = {}
    for (index, queue_id), counted in by_queue.items():
        at = bases.get((index, queue_id), 0)
        for piece, n in sorted(counted):
            out[(index, queue_id, piece)] = at
            at += n
    return out


def pull_numbering(firsts: Mapping[tuple[int, int, int], int], plans: Sequence[Plan]
                   ) -> Callable[[pa.RecordBatch], pa.Table]:
    """A function from a batch of pulls as a piece numbered them (subscription_index, queue_id, piece, pull_index
    from 0, ...) to the same pulls numbered over their queue (`firsts`, `pull_firsts`) with their subscription's
    consumer_group; a pull of a piece `firsts` does not hold is dropped. Runs where the pulls are written, in
    place of two broadcast joins."""
    keys = ["subscription_index", "queue_id", "piece"]
    ordered = sorted(firsts.items())
    first = pa.table([pa.array([k[i] for k, _ in ordered], pa.int64()) for i in range(3)]
                     + [pa.array([n for _, n in ordered], pa.int64())], names=[*keys, "first"])
    group = pa.table({"subscription_index": pa.array([p.index for p in plans], pa.int64()),
                      "consumer_group": pa.array([p.group for p in plans], pa.string())})

    def number(batch: pa.RecordBatch) -> pa.Table:
        t = pa.Table.from_batches([batch])
        for k in keys:
            t = t.set_column(t.schema.get_field_index(k), k, t[k].cast(pa.int64()))
        t = t.join(first, keys, join_type="inner").join(group, "subscription_index", join_type="inner")
        index = pc.add(t["pull_index"].cast(pa.int64()), t["first"]).cast(pa.int32())
        return t.set_column(t.schema.get_field_index("pull_index"), "pull_index", index).drop(["first", "piece"])

    return number


def stats_rows(plans: Sequence[Plan], counts: Mapping[int, Mapping[str, int]], positions: Mapping[int, int],
               dump_id: str, start: str, error_rate_percent: int) -> list[dict]:
    """One group_stats row per plan: the plan's words, its counts (0 where it pulled nothing), the bloom false
    positive rate among the units the bitmap could have dropped (None when it tested none that did not match), the
    configured rate (maxErrorRateOfBloomFilter) and the plan's byte in its topic's matrix rows."""
    rows = []
    for p in plans:
        a = counts.get(p.index, {})
        row = {"dump_id": dump_id, "consumer_group": p.group, "topic": p.topic, "subscription_index": p.index,
               "subscription_type": p.type, "expression": p.expression, "path": p.path,
               "sub_version": p.sub_version, "batch_size": p.batch_size, "source": p.source, "answer": p.answer,
               "answer_remark": p.remark, "answer_cause": p.cause, "filter_class": p.filter_class, "start": start}
        for k in COUNT_FIELDS:
            row[k] = int(a.get(k) or 0)
        _rate(row)
        row["configured_fp_rate"] = error_rate_percent / 100.0
        row["subscription_position"] = positions[p.index]
        row.update(member=p.member, kept_by=p.kept_by, kept_type=p.kept_type, kept_expression=p.kept_expression,
                   owned_queues=None if p.queues is None else ",".join(map(str, p.queues)))
        rows.append(row)
    return rows


def _rate(row: dict) -> None:
    """The bloom false positive rate from the row's counts (None when no unit the bitmap could drop was tested)."""
    negatives = row["bloom_miss"] + row["bloom_false_positives"]
    row["bloom_fp_rate"] = row["bloom_false_positives"] / negatives if negatives else None


def continued(previous: Mapping, row: dict) -> dict:
    """A subscription's group_stats row after a run that continued it over a broker's history: this run's row
    with the previous run's counts added (`queues`: each queue counted by the run that first pulled it), the rate
    derived again, and where it came in force and from which start rule kept."""
    out = dict(row)
    for k in COUNT_FIELDS:
        out[k] = int(previous.get(k) or 0) + int(row.get(k) or 0)
    _rate(out)
    out["since_copy"], out["start"] = previous.get("since_copy"), previous.get("start") or row.get("start")
    return out


def totals(counts: Mapping[int, Mapping[str, int]]) -> tuple[int, int, int]:
    """(decisions, delivered, pulls) over every subscription counted."""
    return (sum(a["units_scanned"] for a in counts.values()), sum(a["delivered"] for a in counts.values()),
            sum(a["pulls"] for a in counts.values()))
