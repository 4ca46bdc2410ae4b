"""Job 2's packed pieces (jobs.piece_tasks): rows packed per piece come back whole and under their own piece, both
sides place a queue's rows in the same pieces, and a piece joins its units to its messages by commit log offset."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from jobs.piece_tasks import KEYS, MESSAGES, UNITS, geometry, join_side, pack, unpack


def _rows(rng: np.random.Generator, n: int) -> pa.Table:
    return pa.table({"topic": pa.array(rng.choice(["TopicA", "TopicB", "%RETRY%g"], n)),
                     "queue_id": pa.array(rng.integers(0, 3, n), pa.int32()),
                     "piece": pa.array(rng.integers(0, 4, n), pa.int64()),
                     "commit_log_offset": pa.array(rng.permutation(n) * 7, pa.int64()),
                     "bitmap": pa.array([bytes(rng.integers(0, 256, k).astype(np.uint8)) if k else None
                                         for k in rng.integers(0, 5, n)], pa.binary())})


def test_packed_rows_come_back_whole_under_their_own_piece() -> None:
    rng = np.random.default_rng(7)
    t = _rows(rng, 500)
    packed = pa.Table.from_batches([pack(t.slice(0, 200), UNITS), pack(t.slice(200), MESSAGES)])
    keys = list(zip(*(packed.column(k).to_pylist() for k in KEYS), strict=True))
    assert len(packed) == len(set(zip(keys, packed.column("side").to_pylist(), strict=True)))
    body = pa.schema([f for f in t.schema if f.name not in KEYS])
    got = []
    for key in set(keys):
        mine = packed.filter(pa.array([k == key for k in keys]))
        for side in (UNITS, MESSAGES):
            rows = unpack(mine, side, body)
            assert rows.schema == body
            got += [(*key, *r.values()) for r in rows.to_pylist()]
    want = [tuple(r.values()) for r in t.to_pylist()]
    assert sorted(got, key=repr) == sorted(want, key=repr)


def test_a_queues_rows_fall_in_the_pieces_its_geometry_counts() -> None:
    """Pieces of 10 units counted from offset 20; rows before the queue's first offset, before where a continued
    history replays from, at or past its end, and of queues not pulled are dropped."""
    where = geometry([("TopicA", 0, 20, 10, 25, 57, 10, None), ("TopicA", 1, 0, 0, None, None, 0, None),
                      ("TopicB", 0, 0, 10, None, None, 10, 33)])
    qo = [19, 24, 25, 29, 30, 56, 57, 5, 500, 32, 33, 47, 3]
    t = pa.table({"topic": ["TopicA"] * 9 + ["TopicB"] * 3 + ["TopicC"],
                  "queue_id": pa.array([0] * 7 + [1, 1] + [0, 0, 0] + [0], pa.int32()),
                  "queue_offset": pa.array(qo, pa.int64())})
    placed = where.place(t)
    got = sorted(zip(placed.column("topic").to_pylist(), placed.column("queue_id").to_pylist(),
                     placed.column("queue_offset").to_pylist(), placed.column("piece").to_pylist(), strict=True))
    assert got == [("TopicA", 0, 25, 0), ("TopicA", 0, 29, 0), ("TopicA", 0, 30, 1), ("TopicA", 0, 56, 3),
                   ("TopicA", 1, 5, 0), ("TopicA", 1, 500, 0), ("TopicB", 0, 33, 3), ("TopicB", 0, 47, 4)]


def test_a_piece_joins_each_unit_to_the_message_at_its_offset_and_names_those_without() -> None:
    rng = np.random.default_rng(3)
    offsets = rng.choice(10_000, 300, replace=False).astype(np.int64)
    side = pa.table({"commit_log_offset": pa.array(offsets[:200]), "verdicts": [bytes([i % 256]) for i in range(200)],
                     "verdict_topic": pa.array(np.zeros(200, np.int32))})
    clo = np.concatenate([offsets[:150], offsets[250:]])
    rng.shuffle(clo)
    units = pa.table({"queue_offset": pa.array(np.arange(len(clo) + 1), pa.int64()),
                      "commit_log_offset": pa.array([*clo.tolist(), None], pa.int64())})  # the last: an end row
    joined, missing = join_side(units, side)
    at = dict(zip(offsets[:200].tolist(), range(200), strict=True))
    assert joined.column("queue_offset").to_pylist() == units.column("queue_offset").to_pylist()
    for c, v in zip(joined.column("commit_log_offset").to_pylist(), joined.column("verdicts").to_pylist(),
                    strict=True):
        assert v == (bytes([at[c] % 256]) if c in at else None)
    assert sorted(missing.tolist()) == sorted(offsets[250:].tolist())
    empty, lost = join_side(units, side.slice(0, 0))
    assert empty.column("verdicts").null_count == units.num_rows and len(lost) == units.num_rows - 1
