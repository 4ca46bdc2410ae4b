"""Driver for the Java reference harness (tests/reference): build once, run a mode, cache the output.

The harness runs the published Apache RocketMQ jars of one release (`VERSIONS`: 5.3.3 by default, 5.5.1 and 4.9.7
through the pom's profiles; 4.9.7 compiles the 4.9 source line, see PROTOCOL.md "RocketMQ 4.9.7"); its JSON
protocol is in tests/reference/PROTOCOL.md. Outputs are cached under
.cache/refharness/<key>/ where key hashes the release, the mode, the input and the harness sources, so a test suite
re-run costs nothing and a harness change invalidates every cached answer.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import select
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REF_DIR = ROOT / "tests" / "reference"
CACHE_DIR = Path(os.environ.get("RMQREF_CACHE", ROOT / ".cache" / "refharness"))
DEFAULT_VERSION = "5.3.3"
# release -> (Maven profile, build directory under tests/reference)
VERSIONS = {"5.3.3": (None, "target"), "5.5.1": ("rocketmq-5.5.1", "target-5.5.1"),
            "4.9.7": ("rocketmq-4.9.7", "target-4.9.7")}
JAVA_OPTS = ["-Xmx1g", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=false", "-Duser.home=/tmp/rmqref-home"]
# release -> extra JVM options. 4.9.7 on Java 17: its MappedFile.clean reaches DirectByteBuffer.attachment() /
# cleaner() by reflection (without the opens, DefaultMessageStore.shutdown() throws InaccessibleObjectException and
# the run fails); sun.security.x509 is what netty 4.1.65's self-signed certificate (4.9's TLS set-up) needs, not
# reached by the harness's dormant controller, passed so a 4.9 broker can start and stop whole.
EXTRA_JAVA_OPTS = {
    "4.9.7": ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
              "--add-exports", "java.base/sun.security.x509=ALL-UNNAMED"],
}


TIMED_MODES = ("bench", "rebuild")
"""Modes that time the broker's own code (the benchmarks' baselines): they run with the JVM's full JIT. Every other
mode runs its few seconds of class loading and one-off work with the client compiler alone
(-XX:TieredStopAtLevel=1): a pull run 1.54 -> 1.33 s and 2.1 -> 1.4 s of CPU, measured alone; the answers are
the same classes' answers."""
QUICK_JIT = "-XX:TieredStopAtLevel=1"

SERVED_MODES = ("eval", "store", "pull", "scan", "recover")
"""Modes run by one long-lived harness JVM per release and process (`java rmqref.Main serve`, PROTOCOL.md) rather
than a JVM each: a store or pull run alone costs ~1.4 CPU-s, most of it starting the JVM and loading the broker's
classes, served ~0.2 (the suite's ~110 such runs in a fresh clone). Each mode reads all its state from its input;
a served run that fails is run again alone, whose answer (or error) is the one kept. Not served: `group` (brokers,
clients and ports of its own) and the timed modes. RMQREF_SERVE=0 runs every mode in a JVM of its own."""

# modes whose output is a directory (OUTDIR, `out/` in the cached run) rather than one OUT.json (`output.json`)
OUTDIR_MODES = ("store", "group")


class HarnessError(RuntimeError):
    """The reference harness failed to build or to run; the message carries its output."""


def _sources_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(REF_DIR.rglob("*")):
        if p.is_file() and not any(part.startswith("target") for part in p.relative_to(REF_DIR).parts):
            h.update(str(p.relative_to(REF_DIR)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _lock(name: str):
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    f = open(CACHE_DIR / f".{name}.lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def build(version: str = DEFAULT_VERSION) -> list[str]:
    """Build the harness against one release's jars if its sources changed; return the java command prefix."""
    profile, directory = VERSIONS[version]
    digest = _sources_digest()
    target = REF_DIR / directory
    stamp = target / "sources.sha256"
    cp_file = target / "classpath.txt"
    with _lock(f"build-{version}"):
        if not (stamp.exists() and stamp.read_text() == digest and cp_file.exists()):
            cmd = ["mvn", "-q", "-B", "-f", str(REF_DIR / "pom.xml"), "package", "-DskipTests"]
            if profile is not None:
                cmd.append(f"-P{profile}")
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise HarnessError(f"harness build failed ({' '.join(cmd)}):\n{proc.stdout}\n{proc.stderr}")
            stamp.write_text(digest)
    classpath = f"{target / 'classes'}:{cp_file.read_text().strip()}"
    return ["java", *JAVA_OPTS, *EXTRA_JAVA_OPTS.get(version, []), "-cp", classpath, "rmqref.Main"]


UNTOUCHED_RCS = (2, 3)
"""Exit codes of a run refused before it started (a bad request, a mode the release cannot run): the server goes on."""


class _Server:
    """One `rmqref.Main serve` JVM of one release: runs sent one at a time (a lock), each answered by a line."""

    def __init__(self, java: list[str]) -> None:
        self.lock = threading.Lock()
        self.proc = subprocess.Popen([*java, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.pending = b""  # what stdout gave beyond the last line read

    def run(self, mode: str, in_path: Path, output: Path, log: Path, timeout: float) -> int | None:
        """The run's exit code, or None when the server is gone. A run that outlives `timeout` stops the server (a
        run still going must not write into a directory its caller reuses) and raises TimeoutExpired, as a run
        alone would."""
        if self.proc.poll() is not None:
            return None
        try:
            self.proc.stdin.write(f"{mode}\t{in_path}\t{output}\t{log}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            line, sep, rest = self.pending.partition(b"\n")
            if sep:
                self.pending = rest
                if line.startswith(b"SERVED "):
                    return int(line.split()[1])
                continue
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.stop()
                raise subprocess.TimeoutExpired([mode, str(in_path)], timeout)
            chunk = os.read(fd, 65536)
            if not chunk:  # the server ended
                self.stop()
                return None
            self.pending += chunk

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_SERVERS: dict[str, _Server] = {}
_SERVERS_LOCK = threading.Lock()


def _server(version: str, java: list[str]) -> _Server:
    with _SERVERS_LOCK:
        server = _SERVERS.get(version)
        if server is None or server.proc.poll() is not None:
            server = _SERVERS[version] = _Server(java)
        return server


@atexit.register
def _stop_servers() -> None:
    """Each server ends when its stdin closes; at exit it is closed and awaited, so no JVM outlives the process."""
    for server in _SERVERS.values():
        try:
            server.proc.stdin.close()
            server.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            server.stop()


def _served(mode: str, version: str, java: list[str], in_path: Path, output: Path, log: Path,
            timeout: float) -> bool:
    """Whether the release's server ran the mode to a successful end (False: run it alone)."""
    if mode not in SERVED_MODES or os.environ.get("RMQREF_SERVE", "1") == "0":
        return False
    server = _server(version, java)
    with server.lock:
        rc = server.run(mode, in_path, output, log, timeout)
    if rc == 0:
        return True
    if rc not in (None, *UNTOUCHED_RCS):  # a failed run may leave the JVM in any state: the next gets a new one
        with _SERVERS_LOCK:
            if _SERVERS.get(version) is server:
                del _SERVERS[version]
        server.stop()
    if output.is_dir():
        shutil.rmtree(output)
    elif output.exists():
        output.unlink()
    return False


def _key(mode: str, payload: Any, version: str) -> str:
    text = json.dumps(payload, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(f"{version}\n{mode}\n{_sources_digest()}\n{text}".encode()).hexdigest()[:32]


def run(mode: str, payload: Any, timeout: float = 1800, fresh: bool = False, version: str = DEFAULT_VERSION) -> Path:
    """Run one harness mode on a JSON payload with one release's jars; return the cached output directory
    (input.json, output…).

    fresh=True ignores and replaces any cached answer (benchmarks must measure in the same run).
    """
    key = _key(mode, payload, version)
    out_dir = CACHE_DIR / mode / key
    done = out_dir / ".done"
    if fresh and done.exists():
        done.unlink()
    if done.exists():
        return out_dir
    java = build(version)
    if mode not in TIMED_MODES:
        java = [java[0], QUICK_JIT, *java[1:]]
    with _lock(f"run-{key}"):
        if done.exists():
            return out_dir
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
        in_path = out_dir / "input.json"
        in_path.write_text(json.dumps(payload, ensure_ascii=True))
        output = out_dir / ("out" if mode in OUTDIR_MODES else "output.json")
        if not _served(mode, version, java, in_path, output, out_dir / "stderr.txt", timeout):
            proc = subprocess.run([*java, mode, str(in_path), str(output)], capture_output=True, text=True,
                                  timeout=timeout)
            (out_dir / "stderr.txt").write_text(proc.stderr)
            if proc.returncode != 0:
                raise HarnessError(f"harness {mode} failed (rc={proc.returncode}), see {out_dir}:\n"
                                   f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        done.write_text("ok")
    return out_dir


def eval_cases(cases: list[dict], version: str = DEFAULT_VERSION) -> list[dict]:
    """Evaluate `eval` cases (PROTOCOL.md) with the real RocketMQ classes; one result per case, in order."""
    out = run("eval", {"cases": cases}, version=version)
    return json.loads((out / "output.json").read_text(encoding="utf-8"))["results"]


def write_store(scenario: dict, version: str = DEFAULT_VERSION) -> Path:
    """Write a real store directory for a scenario (PROTOCOL.md, store) with one release's broker; return the
    harness output directory."""
    return run("store", scenario, version=version) / "out"


def run_group(spec: dict, version: str = DEFAULT_VERSION) -> dict:
    """Run consumer groups for real (PROTOCOL.md, group): a name server, brokers and push consumers of one release in
    one JVM. Returns OUTDIR/group.json parsed, every broker's `store` made an absolute path (a string). The run takes
    wall time (~30 s for a few members; brokers take ~10 s to shut down), so its answer is cached like every mode's:
    by the spec and the harness sources, never by what the run itself produced."""
    out = run("group", spec, version=version) / "out"
    result = json.loads((out / "group.json").read_text(encoding="utf-8"))
    for broker in result["brokers"].values():
        broker["store"] = str(out / broker["store"])
    return result


def store_digest(root: str | Path) -> str:
    """A digest of every file under a store directory (names and bytes)."""
    digest = hashlib.sha256()
    root = Path(root)
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        digest.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return digest.hexdigest()


def pull(request: dict, version: str = DEFAULT_VERSION) -> dict:
    """Replay the real pull over an existing store directory (PROTOCOL.md, pull) with one release's broker. The
    cache key includes the store's contents, so a store rewritten at the same path is pulled again (the harness
    ignores the extra key)."""
    out = run("pull", {**request, "storeDigest": store_digest(request["storeDir"])}, version=version)
    return json.loads((out / "output.json").read_text(encoding="utf-8"))
