"""Job 2's packed pieces (jobs.piece_tasks): rows packed per piece come back whole and under their own piece, both
sides place a queue's rows in the same pieces, and a piece joins its units to its messages by commit log offset."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.piece_tasks import KEYS, MESSAGES, UNITS, geometry, join_side, pack, unpack

DEMO = Path(__file__).resolve().parent.parent / "demo"


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


JOB2_TABLES = ("pull_decisions", "decision_details", "pulls", "group_stats")


def _tables(spark, wh: str, dump: str) -> dict[str, list]:
    from jobs.runs import read_dump

    return {t: sorted(map(repr, (tuple(r) for r in read_dump(spark, wh, t, dump).collect()))) for t in JOB2_TABLES}


@pytest.mark.spark
def test_a_unit_pointing_at_no_message_is_decided_as_the_joined_replay_decides_it(spark, tmp_path, monkeypatch) -> None:
    """The demo dump with one PaymentEvents unit pointing inside a record (no message starts there): the packed
    replay names the unit, finds no message at its offset anywhere, and keeps its decisions; they equal, table for
    table, those of the replay that joins every unit to the messages through Spark."""
    from jobs import build_queues, simulate_pull

    store = tmp_path / "dump"
    shutil.copytree(DEMO / "dump", store)
    cq = store / "consumequeue" / "PaymentEvents" / "0" / "00000000000000000000"
    data = bytearray(cq.read_bytes())
    at, size, tags = struct.unpack_from(">qiq", data, 20)
    assert size > 8
    struct.pack_into(">q", data, 20, at + 4)
    cq.write_bytes(bytes(data))
    wh = str(tmp_path / "wh")
    args = ["--store", str(store), "--warehouse", wh, "--broker-conf", str(DEMO / "broker.conf"), "--dump-id", "d"]
    build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args)))
    pull = simulate_pull.validate(simulate_pull.parser().parse_args(
        args + ["--subscriptions", str(DEMO / "subscriptions.json")]))
    packed = simulate_pull.run(spark, pull)
    assert packed.packed and packed.unresolved == [at + 4]
    assert not any("another queue" in line for line in packed.lines())
    got = _tables(spark, wh, "d")
    units = simulate_pull._queue_units
    monkeypatch.setattr(simulate_pull, "_queue_units", lambda *a, **k: (*units(*a, **k)[:2], None))
    joined = simulate_pull.run(spark, pull)
    assert not joined.packed and joined.decisions == packed.decisions > 0
    assert _tables(spark, wh, "d") == got
