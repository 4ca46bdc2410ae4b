"""Two copies of the bundled dump as an operator's daily copies of a running broker would be: `day1`, taken while
the broker wrote its second commitlog file (that file cut inside a record and zero-filled, as a preallocated file
copied mid-write is), and `day2`, the whole store. `make demo` appends both to one broker's history
(docs/history.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

from filterlib.store.scan import RangeScan


def record_starts(path: Path) -> list[int]:
    """File offsets of the records in a commitlog file."""
    base = int(path.name)
    return [p - base for b in RangeScan(str(path), 0, path.stat().st_size)
            for p in b.column("commit_log_offset").to_pylist()]


def make_copies(dump: Path, dest: Path) -> list[Path]:
    """Write day1 and day2 under dest (replacing any there); returns their paths, oldest first."""
    logs = sorted((dump / "commitlog").iterdir())
    day1, day2 = dest / "day1", dest / "day2"
    for d in (day1, day2):
        if d.exists():
            shutil.rmtree(d)
        shutil.copytree(dump / "config", d / "config")
        (d / "commitlog").mkdir(parents=True)
    for f in logs:
        shutil.copy(f, day2 / "commitlog" / f.name)
    shutil.copy(logs[0], day1 / "commitlog" / logs[0].name)
    starts = record_starts(logs[1])
    cut = starts[len(starts) // 2] + 40  # inside the middle record
    data = logs[1].read_bytes()
    (day1 / "commitlog" / logs[1].name).write_bytes(data[:cut] + bytes(len(data) - cut))
    return [day1, day2]


def main(argv: list[str] | None = None) -> int:
    """Write day1 and day2 of the bundled dump under DEST."""
    import argparse

    root = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(prog="python -m demo.copies", description=__doc__.splitlines()[0])
    p.add_argument("dest", metavar="DEST", help="where day1/ and day2/ are written (replaced when there)")
    p.add_argument("--dump", default=str(root / "dump"), metavar="DIR", help="the dump copied (default demo/dump)")
    args = p.parse_args(argv)
    for path in make_copies(Path(args.dump), Path(args.dest)):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
