"""Throughput of the Python SQL92 evaluator beside the real Java SqlFilter, measured in the same run.

Prints evaluations per second (one core) for a typical broker selector and for `a > 5`, each over a varied set
of property maps, for filterlib's `evaluate` and `matches`, then the Java rate from the reference harness's
`bench` mode and the Python/Java ratio.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from filterlib import sql92

TYPICAL = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"
SIMPLE = "a > 5"

TYPICAL_PROPS = [
    {"TAGS": "TagA", "a": "1", "KEYS": "k1", "UNIQ_KEY": "u1"},
    {"TAGS": "TagB", "a": "3"},
    {"TAGS": "TagC", "a": "2"},
    {"TAGS": "TagA", "a": "7"},
    {"TAGS": "TagB"},
    {"a": "0"},
    {"TAGS": "TagA", "a": "-1"},
    {"TAGS": "TagB", "a": "2", "b": "x"},
]
SIMPLE_PROPS = [{"a": "10"}, {"a": "5"}, {"a": "-3"}, {"a": "6"}, {}, {"a": "100", "b": "y"}, {"a": "0"},
                {"a": "42"}]

SECONDS = 2.0


def _python_rate(fn, maps: list[dict], seconds: float) -> float:
    """Evaluations per second of fn over the maps, round-robin, best of three timed runs."""
    batch = maps * (4096 // len(maps))
    best = 0.0
    for _ in range(3):
        n = 0
        start = time.perf_counter()
        deadline = start + seconds / 3
        while True:
            for props in batch:
                fn(props)
            n += len(batch)
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n / (now - start))
    return best


def _java_rates(cases: list[dict]) -> list[float | None] | str:
    """Java SqlFilter rates from the harness bench mode, or the reason they are unavailable."""
    tests_dir = Path(__file__).resolve().parent.parent / "tests"
    if str(tests_dir) not in sys.path:
        sys.path.insert(0, str(tests_dir))
    try:
        import json

        import refharness

        out = refharness.run("bench", {"cases": cases}, fresh=True)
        results = json.loads((out / "output.json").read_text(encoding="utf-8"))["results"]
    except Exception as exc:  # the harness needs Maven and a JDK; the Python figures stand alone without them
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return [r.get("per_second") for r in results]


def main() -> None:
    """Measure and print the Python and Java rates and their ratio."""
    rows = [("typical", TYPICAL, TYPICAL_PROPS), ("a > 5", SIMPLE, SIMPLE_PROPS)]
    java = _java_rates([{"kind": "sql", "id": label, "expr": text, "props": maps, "seconds": SECONDS,
                         "warmup_seconds": 1.0} for label, text, maps in rows])
    for i, (label, text, maps) in enumerate(rows):
        expr = sql92.compile(text)
        ev = _python_rate(expr.evaluate, maps, SECONDS)
        mt = _python_rate(expr.matches, maps, SECONDS)
        print(f"sql92 {label:8s} python evaluate {ev / 1e6:6.2f} M/s   matches {mt / 1e6:6.2f} M/s   [{text}]")
        if isinstance(java, str):
            print(f"         java: unavailable ({java})")
        elif java[i]:
            print(f"         java SqlFilter {java[i] / 1e6:6.2f} M/s   python/java = {mt / java[i]:.3f} "
                  f"(java is {java[i] / mt:.1f}x faster)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
