"""Pull decisions per core: 64 groups (32 tag subscriptions, 32 SQL92 with bloom bitmaps) over one queue's units.

The filterlib core job 2 runs per (subscription, queue): `engine.decide.decide_units` (tag hash, bloom branches,
SQL92 through the engine, client re-check) and `pull.replay_pulls` (getMessage's paging). Units carry the same
realistic properties as bench_engine's batch and bitmaps CalcBitMap would have written. Prints decisions/s
(groups × units / time) on one core, beside the same decisions made by the row functions
(`message_filter.decide`) over a sample, measured in the same run.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pyarrow as pa

from bench.bench_engine import TAGS, batch_of, filters, messages
from filterlib import tags
from filterlib.engine import Engine
from filterlib.engine.decide import Units, decide_units
from filterlib.engine.queue_layer import ext_bitmaps
from filterlib.message_filter import ExpressionMessageFilter, ExtUnit, decide
from filterlib.registry import ConsumerFilterManager
from filterlib.replay.paging import replay_pulls

UNITS = 65536
GROUPS = 64
ROW_SAMPLE = 2000


def main() -> None:
    """Measure and print the decision rates."""
    pa.set_cpu_count(1)
    maps = messages(UNITS)
    batch = batch_of(maps)
    props = batch.column("properties")
    tag_col = pa.array([m["TAGS"] for m in maps], pa.string())
    codes = np.array([tags.tags_code(m["TAGS"]) for m in maps], dtype=np.int64)
    manager = ConsumerFilterManager(20, GROUPS)
    texts = filters(GROUPS // 2)
    for g, text in enumerate(texts):
        manager.register("T", f"S{g}", text, "SQL92", 1, now=0)
    datas = [manager.get("T", f"S{g}") for g in range(len(texts))]
    results = Engine([d.compiled for d in datas]).evaluate(batch)
    bitmaps, _ = ext_bitmaps([r.matches for r in results], [d.bloom_filter_data for d in datas],
                             manager.bloom_filter, UNITS)
    units = Units(codes, np.ones(UNITS, bool), np.ones(UNITS, bool), np.full(UNITS, 10, np.int64), bitmaps,
                  np.full(UNITS, bitmaps.shape[1], np.int64), props, tag_col)
    flts = [ExpressionMessageFilter(tags.build_subscription(" || ".join(random.Random(g).sample(TAGS, 3)), "TAG",
                                                            "T"), None, None) for g in range(GROUPS // 2)]
    flts += [ExpressionMessageFilter(tags.build_subscription(d.expression, "SQL92", "T"), d, manager.bloom_filter)
             for d in datas]
    sizes = np.full(UNITS, 736, dtype=np.int64)

    def run() -> None:
        cache: dict = {}
        for f in flts:
            d = decide_units(f, units, cache)
            ok = d.outcome == 0
            replay_pulls(0, 0, sizes, ok, ok, 300_000)

    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    rate = GROUPS * UNITS / best
    sample = [(codes[i], ExtUnit(int(codes[i]), 10, bitmaps[i].tobytes()), maps[i]) for i in range(ROW_SAMPLE)]
    start = time.perf_counter()
    for f in flts:
        for code, ext, m in sample:
            decide(f, int(code), ext, m)
    row_rate = GROUPS * ROW_SAMPLE / (time.perf_counter() - start)
    print(f"{GROUPS} groups x {UNITS} units, one core: {rate / 1e6:6.2f} M decisions/s set-at-a-time (pull paging "
          f"included)   row functions {row_rate / 1e6:5.2f} M/s   ratio {rate / row_rate:5.1f}x")


if __name__ == "__main__":
    main()
