"""The numba kernels of filterlib shipped in a zip (spark-submit's --py-files) are compiled once per machine, not
once per application: a second process importing the same code from a zip at another path (as each application's
executors fetch it) loads the first one's compiled kernel, and a changed kernel is compiled again. Processes that
need the same kernel at the same moment compile it once: the others wait and load it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import json, numpy as np
import filterlib.engine.columns as c
table = c._rehash(np.arange(8, dtype=np.uint64), 8, 16)
print(json.dumps({"file": c.__file__, "hits": sum(c._rehash.stats.cache_hits.values()),
                  "misses": sum(c._rehash.stats.cache_misses.values()),
                  "table": table.tolist()}))
"""


def _zip(path: Path, change: bytes = b"") -> Path:
    """filterlib's sources in a zip at `path` (`change` appended to the module the probe calls)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for f in sorted((ROOT / "filterlib").rglob("*.py")):
            name = f.relative_to(ROOT).as_posix()
            z.writestr(name, f.read_bytes() + (change if name == "filterlib/engine/columns.py" else b""))
    return path


def _probe(zipped: Path, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=str(zipped), HOME=str(home))
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=zipped.parent, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_zipped_kernels_are_compiled_once_whatever_the_zips_path(tmp_path) -> None:
    home = tmp_path / "home"
    first = _probe(_zip(tmp_path / "app-1" / "code.zip"), home)
    assert ".zip" in first["file"] and first["misses"] and not first["hits"]  # from the zip, compiled
    again = _probe(_zip(tmp_path / "app-2" / "code.zip"), home)
    assert again["hits"] and not again["misses"], again  # the same code at another path: loaded
    assert again["table"] == first["table"]
    changed = _probe(_zip(tmp_path / "app-3" / "code.zip", b"\n# changed\n"), home)
    assert changed["misses"] and not changed["hits"], changed  # other source bytes: compiled again


RACE = """
import json, os, sys, time
import numpy as np
import pyarrow as pa
import filterlib.engine.columns as c
open(sys.argv[1] + ".ready", "w").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.005)
codes = c.extract_properties(pa.array(["a\x01x\x02b\x01y", "b\x01z"]), ["a"])["a"].codes
f = c._extract_text
print(json.dumps({"hits": sum(f.stats.cache_hits.values()), "misses": sum(f.stats.cache_misses.values()),
                  "codes": codes.tolist()}))
"""


def test_processes_needing_a_kernel_at_once_compile_it_once(tmp_path) -> None:
    """Two processes released together onto a kernel no one has compiled (an empty cache directory): one compiles
    it, the other waits for its lock and loads what the first saved (numba's own hit and miss counters)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path / f"p{i}"), str(go)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"p{i}.ready").exists() for i in range(2)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a process did not start"
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted((r["misses"], r["hits"]) for r in results) == [(0, 1), (1, 0)], results
    assert results[0]["codes"] == results[1]["codes"] == [0, -1]
