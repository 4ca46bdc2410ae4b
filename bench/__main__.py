"""`make bench`: run every bench/bench_*.py module's main() in turn, each printing ratios measured in one run."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench


def main() -> int:
    """Run the benchmarks named on the command line (default: all), return non-zero if one failed."""
    wanted = set(sys.argv[1:])
    failed = 0
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if not info.name.startswith("bench_") or (wanted and info.name not in wanted):
            continue
        print(f"== {info.name}", flush=True)
        start = time.perf_counter()
        try:
            importlib.import_module(f"bench.{info.name}").main()
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            failed += 1
            print(f"   FAILED: {type(exc).__name__}: {exc}", flush=True)
        print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
