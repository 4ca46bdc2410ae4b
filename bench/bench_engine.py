"""The set-at-a-time engine beside the real Java SqlFilter, per core, measured in the same run.

A realistic batch (~50 tags, region with 8 values, level with 4, an integer amount 0–10000, a unique order id,
plus the system properties a broker stores) and K = 1, 32, 256 seeded filters over all of them (some naming the
unique id). Prints evaluations/s (messages × filters / time, property extraction included) for the engine and
for the Java SqlFilter on the same expressions and messages (harness `bench` mode, kind `sql_multi`), their
ratio, which path the engine chose, then ext bitmaps/s at K = 256 (engine + assembly vs Java's evaluate +
hashTo per message) and the engine's memory per 1 M rows.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import tracemalloc
from pathlib import Path

import pyarrow as pa

from filterlib import sql92
from filterlib.bloom import BloomFilter
from filterlib.engine import Engine
from filterlib.engine.queue_layer import ext_bitmaps

ROWS = int(os.environ.get("BENCH_ENGINE_ROWS", "65536"))
JAVA_MESSAGES = 4096
JAVA_SECONDS = 2.0
KS = (1, 32, 256)
TAGS = [f"Tag{i:02d}" for i in range(50)]
REGIONS = ["eu", "us", "ap", "sa", "af", "me", "cn", "in"]
LEVELS = ["1", "2", "3", "4"]
MAP = pa.map_(pa.string(), pa.string())


def messages(n: int, seed: int = 5) -> list[dict[str, str]]:
    """Property maps shaped like a busy topic's: user properties beside the broker's own."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        m = {"TAGS": rng.choice(TAGS), "KEYS": f"k{i}", "UNIQ_KEY": f"7F0000010C3B18B4AAC2{i:012X}",
             "WAIT": "true", "region": rng.choice(REGIONS), "level": rng.choice(LEVELS),
             "amount": str(rng.randint(0, 10000)), "orderId": f"o-{i}"}
        if rng.random() < 0.05:
            del m["region"]
        out.append(m)
    return out


def filters(k: int, seed: int = 9) -> list[str]:
    """K seeded selectors over tags, region, level, amount and (about one in eight) the unique order id."""
    rng = random.Random(seed)

    def tags(c: int) -> str:
        return ", ".join(f"'{t}'" for t in rng.sample(TAGS, c))

    shapes = [
        lambda: f"TAGS IN ({tags(2)}) AND region = '{rng.choice(REGIONS)}'",
        lambda: f"region IN ('{rng.choice(REGIONS)}', '{rng.choice(REGIONS)}') AND level >= {rng.randint(1, 4)}",
        lambda: f"amount > {rng.randint(0, 10000)} AND TAGS = '{rng.choice(TAGS)}'",
        lambda: f"amount BETWEEN {rng.randint(0, 5000)} AND {rng.randint(5000, 10000)} OR level = {rng.randint(1, 4)}",
        lambda: f"(TAGS IS NOT NULL AND TAGS IN ({tags(3)})) AND (level IS NOT NULL AND level BETWEEN 1 AND 3)",
        lambda: f"region = '{rng.choice(REGIONS)}' AND level IS NOT NULL AND amount >= {rng.randint(0, 10000)}",
        lambda: f"level > {rng.randint(1, 3)} AND NOT (region = '{rng.choice(REGIONS)}')",
        lambda: f"orderId = 'o-{rng.randrange(ROWS)}' OR (TAGS = '{rng.choice(TAGS)}' AND amount < 500)",
    ]
    return [shapes[i % len(shapes)]() if k > 1 else shapes[4]() for i in range(k)]


def batch_of(maps: list[dict[str, str]]) -> pa.RecordBatch:
    return pa.record_batch({"properties": pa.array([list(m.items()) for m in maps], type=MAP)})


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _java(cases: list[dict]) -> list[dict] | str:
    tests_dir = Path(__file__).resolve().parent.parent / "tests"
    if str(tests_dir) not in sys.path:
        sys.path.insert(0, str(tests_dir))
    try:
        import refharness

        out = refharness.run("bench", {"cases": cases}, fresh=True)
        return json.loads((out / "output.json").read_text(encoding="utf-8"))["results"]
    except Exception as exc:  # the harness needs Maven and a JDK; the Python figures stand alone without them
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def main() -> None:
    """Measure and print the engine and Java rates, bitmaps/s and memory."""
    pa.set_cpu_count(1)
    maps = messages(ROWS)
    batch = batch_of(maps)
    texts = {k: filters(k) for k in KS}
    bloom = BloomFilter.create_by_fn(20, 256)
    keys = [f"G{i}#TopicTest" for i in range(256)]
    datas = [bloom.generate(key) for key in keys]
    java_maps = maps[:JAVA_MESSAGES]
    cases = [{"kind": "sql_multi", "id": f"K={k}", "exprs": texts[k], "props": java_maps, "seconds": JAVA_SECONDS,
              "warmup_seconds": 1.0} for k in KS]
    cases.append({"kind": "sql_multi", "id": "bitmaps", "exprs": texts[256], "props": java_maps,
                  "seconds": JAVA_SECONDS, "warmup_seconds": 1.0, "bloom": {"f": 20, "n": 256, "keys": keys}})
    java = _java(cases)
    print(f"engine over {ROWS} messages per batch (one core; extraction included), Java SqlFilter over "
          f"{JAVA_MESSAGES} of them, same expressions")
    for i, k in enumerate(KS):
        engine = Engine([sql92.compile(t) for t in texts[k]])
        paths = [r.path for r in engine.evaluate(batch)]
        seconds = _best(lambda e=engine: e.evaluate(batch))
        rate = ROWS * k / seconds
        line = (f"K={k:<4d} engine {rate / 1e6:8.1f} M evals/s ({ROWS / seconds / 1e6:6.2f} M msgs/s; "
                f"{paths.count('table')} table, {paths.count('kernel')} kernel)")
        if isinstance(java, str):
            line += f"   java: unavailable ({java})"
        elif "per_second" in java[i]:
            jr = java[i]["per_second"]
            line += f"   java {jr / 1e6:6.1f} M evals/s   engine/java = {rate / jr:5.2f}"
        else:
            line += f"   java error: {java[i]}"
        print(line, flush=True)
    engine = Engine([sql92.compile(t) for t in texts[256]])

    def bitmaps() -> None:
        results = engine.evaluate(batch)
        ext_bitmaps([r.matches for r in results], datas, bloom, ROWS)

    seconds = _best(bitmaps)
    line = f"bitmaps K=256 engine {ROWS / seconds / 1e6:6.2f} M bitmaps/s"
    if not isinstance(java, str) and "bitmaps_per_second" in java[-1]:
        jr = java[-1]["bitmaps_per_second"]
        line += f"   java {jr / 1e6:6.3f} M bitmaps/s   engine/java = {ROWS / seconds / jr:5.2f}"
    print(line)
    tracemalloc.start()
    bitmaps()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_m = peak / ROWS * 1e6 / 2**20
    print(f"memory K=256: peak {peak / 2**20:6.1f} MiB of numpy/Python for one {ROWS}-message batch "
          f"({per_m:6.1f} MiB per 1 M rows; the batch itself {batch.nbytes / ROWS * 1e6 / 2**20:6.1f} MiB per 1 M)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
