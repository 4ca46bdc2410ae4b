"""One run per dump and warehouse at a time: a marker `<warehouse>/_runs/<dump_id>.lock`, created if absent.

Job 1 and job 2 both take it before any work (job 2 reads what job 1 writes, so they exclude each other too) and
remove it when they end, however they end short of SIGKILL. The marker is a small JSON object: which job, the
dump, host, pid, when it started, a heartbeat the holder refreshes every HEARTBEAT seconds, and a token only
the holder knows. A second run that finds it refuses at once with one sentence naming the holder (DumpBusy).

Creation is create-if-absent:
- local disk (a path or file: URI): os.open with O_CREAT | O_EXCL, atomic on any POSIX file system (NFS v3+ too);
- any other URI: Hadoop's FileSystem of the session, `create(path, overwrite=false)`. HDFS makes that atomic
  (the namenode). On s3a the marker is created with the builder option `fs.option.create.conditional.overwrite`:
  the PUT carries `If-None-Match: *`, which AWS S3 (since 2024) and servers that support it refuse with 412 when
  the object exists, so exactly one of two racing runs wins; on a server that ignores the header, S3A's check
  before the write still refuses a run that starts after the marker exists, and two runs starting within the
  same fraction of a second could both proceed (the read-back of the token afterwards narrows, but does not
  close, that window). Other object stores (gs, abfs) get `create(overwrite=false)`, which is a check then a write.

A marker never blocks for ever. It is stale, and the next run replaces it with a note, when its heartbeat is
older than STALE seconds (the holder died: SIGKILL, a lost machine), or at once when it was written on this
host by a pid that is no longer running. `--break-lock` removes any marker first (for a holder you know is dead
on another host before it goes stale). STALE and HEARTBEAT come from $RMQ_REPLAY_LOCK_STALE and
$RMQ_REPLAY_LOCK_HEARTBEAT (seconds; 600 and 30 by default).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RUNS_DIR = "_runs"
CONDITIONAL = "fs.option.create.conditional.overwrite"


def stale_after() -> float:
    """Seconds without a heartbeat after which a marker is stale ($RMQ_REPLAY_LOCK_STALE, default 600)."""
    return float(os.environ.get("RMQ_REPLAY_LOCK_STALE", "600"))


def heartbeat_every() -> float:
    """Seconds between the holder's heartbeats ($RMQ_REPLAY_LOCK_HEARTBEAT, default 30)."""
    return float(os.environ.get("RMQ_REPLAY_LOCK_HEARTBEAT", "30"))


class DumpBusy(Exception):
    """Another run holds the dump's marker: one sentence naming the dump and that run."""


class MarkerError(Exception):
    """The marker could not be written or read (a full or read-only warehouse, no permission)."""


@dataclass
class Holder:
    """What a marker says about the run that holds it."""

    job: str
    dump_id: str
    host: str
    pid: int
    started: float
    heartbeat: float
    token: str

    def encode(self) -> bytes:
        """The marker's bytes (one JSON line)."""
        return (json.dumps(asdict(self), sort_keys=True) + "\n").encode()

    @staticmethod
    def decode(data: bytes) -> Holder | None:
        """The holder a marker's bytes name, None when they are not a whole marker (cut short while written)."""
        try:
            d = json.loads(data.decode())
            return Holder(str(d["job"]), str(d["dump_id"]), str(d["host"]), int(d["pid"]), float(d["started"]),
                          float(d["heartbeat"]), str(d["token"]))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None

    def describe(self, now: float) -> str:
        """`simulate_pull, started 2026-11-25 17:40:12 UTC on host h (pid 1234), last heartbeat 12 s ago`."""
        started = datetime.fromtimestamp(self.started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (f"{self.job}, started {started} on host {self.host} (pid {self.pid}), last heartbeat "
                f"{max(0, round(now - self.heartbeat))} s ago")

    def dead(self, now: float, mtime: float = 0.0) -> str | None:
        """Why the holder is known to be gone (None: it may be running). The last heartbeat is the later of the
        holder's own clock and the marker's modification time (the file system's or object store's clock), so a
        holder whose clock lags is not taken for dead."""
        last = max(self.heartbeat, mtime)
        if now - last > stale_after():
            return f"no heartbeat for {round(now - last)} s"
        if self.host == socket.gethostname():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return f"pid {self.pid} is no longer running on this host"
            except PermissionError:
                pass
        return None


class _LocalMarker:
    """The marker on local disk: O_EXCL create, atomic replace for heartbeats."""

    def __init__(self, path: str):
        self.path = path
        self.shown = path

    def create(self, data: bytes) -> bool:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
            os.fsync(fd)
        except OSError:
            os.close(fd)
            os.unlink(self.path)
            raise
        os.close(fd)
        return True

    def read(self) -> tuple[bytes, float] | None:
        try:
            with open(self.path, "rb") as f:
                return f.read(), os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None

    def replace(self, data: bytes) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class _HadoopMarker:
    """The marker through the session's Hadoop FileSystem (s3a, hdfs, gs, abfs ...)."""

    def __init__(self, spark: SparkSession, uri: str, shown: str):
        jvm = spark.sparkContext._jvm
        self.jvm = jvm
        self.path = jvm.org.apache.hadoop.fs.Path(uri)
        self.fs = self.path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
        self.s3a = uri.lower().startswith("s3a://")
        self.shown = shown

    def create(self, data: bytes) -> bool:
        from py4j.protocol import Py4JJavaError

        try:
            if self.s3a:  # If-None-Match: * on the PUT (see the module's docstring)
                out = self.fs.createFile(self.path).overwrite(False).must(CONDITIONAL, True).build()
            else:
                out = self.fs.create(self.path, False)
            out.write(bytearray(data))
            out.close()
        except Py4JJavaError as e:
            if _java_class(e).endswith("FileAlreadyExistsException") or "412" in str(e.java_exception.toString()):
                return False
            raise
        return True

    def read(self) -> tuple[bytes, float] | None:
        from py4j.protocol import Py4JJavaError

        try:
            status = self.fs.getFileStatus(self.path)
            stream = self.fs.open(self.path)
            try:
                data = bytes(stream.readAllBytes())
            finally:
                stream.close()
        except Py4JJavaError as e:
            if _java_class(e).endswith("FileNotFoundException"):
                return None
            raise
        return data, status.getModificationTime() / 1000.0

    def replace(self, data: bytes) -> None:
        out = self.fs.create(self.path, True)
        out.write(bytearray(data))
        out.close()

    def delete(self) -> None:
        self.fs.delete(self.path, False)


def _java_class(e: Any) -> str:
    java = getattr(e, "java_exception", None)
    return str(java.getClass().getName()) if java is not None else type(e).__name__


def marker_path(warehouse: str, dump_id: str) -> str:
    """<warehouse>/_runs/<dump_id>.lock."""
    return f"{warehouse.rstrip('/')}/{RUNS_DIR}/{dump_id}.lock"


class RunLock:
    """The dump's marker held by this run: `acquire`, a heartbeat thread while it runs, `release` at the end."""

    def __init__(self, job: str, warehouse: str, dump_id: str, spark: SparkSession | None = None,
                 log: logging.Logger | None = None):
        self.job, self.dump_id, self.log = job, dump_id, log or logging.getLogger(job)
        uri = marker_path(warehouse, dump_id)
        if "://" not in warehouse:
            self.marker: Any = _LocalMarker(os.path.abspath(uri))
        elif warehouse.lower().startswith("file:"):
            self.marker = _LocalMarker(unquote(urlsplit(uri).path))
        else:
            if spark is None:
                raise ValueError("a marker on a Hadoop URI needs the session")
            from filterlib.store import fs as sfs

            self.marker = _HadoopMarker(spark, uri, sfs.display(uri))
        now = time.time()
        self.me = Holder(job, dump_id, socket.gethostname(), os.getpid(), now, now, secrets.token_hex(8))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def _io(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # OSError locally, Py4JJavaError through Hadoop
            from jobs.faults import java_reason

            why = e.strerror if isinstance(e, OSError) and e.strerror else java_reason(e)
            raise MarkerError(f"cannot {what} the run marker {self.marker.shown}: {why}") from None

    def acquire(self, break_lock: bool = False) -> None:
        """Create the marker or raise DumpBusy; a stale marker (or any, with break_lock) is replaced first."""
        if break_lock:
            got = self._io("read", self.marker.read)
            if got is not None:
                old = Holder.decode(got[0])
                self.log.warning("--break-lock: removing the run marker %s (%s)", self.marker.shown,
                                 old.describe(time.time()) if old else "unreadable")
                self._io("remove", self.marker.delete)
        for _ in range(3):
            self.me.heartbeat = time.time()
            if self._io("write", self.marker.create, self.me.encode()):
                got = self._io("read", self.marker.read)
                if got is None or Holder.decode(got[0]) != self.me:  # replaced at once: a racing run won
                    raise DumpBusy(self._busy(Holder.decode(got[0]) if got else None))
                self._start_heartbeat()
                return
            got = self._io("read", self.marker.read)
            if got is None:
                continue  # removed between our create and our read: try again
            data, mtime = got
            other = Holder.decode(data)
            now = time.time()
            why = other.dead(now, mtime) if other else ("an unreadable marker" if now - mtime > stale_after() else None)
            if why is None:
                raise DumpBusy(self._busy(other))
            self.log.warning("replacing a stale run marker %s (%s): %s", self.marker.shown,
                             other.describe(now) if other else "unreadable", why)
            again = self._io("read", self.marker.read)
            if again is not None and again[0] == data:  # still the stale one: nobody took over meanwhile
                self._io("remove", self.marker.delete)
        raise DumpBusy(self._busy(None))

    def _busy(self, other: Holder | None) -> str:
        who = other.describe(time.time()) if other else "a run whose marker could not be read"
        return (f"dump {self.dump_id!r} is being processed by another run ({who}; marker {self.marker.shown}): "
                f"wait for it to end, or if it is dead pass --break-lock")

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(heartbeat_every()):
                try:
                    got = self.marker.read()
                    if got is None or Holder.decode(got[0]) is None or Holder.decode(got[0]).token != self.me.token:
                        self.lost = True
                        self.log.warning("the run marker %s was removed or taken by another run", self.marker.shown)
                        return
                    self.me.heartbeat = time.time()
                    self.marker.replace(self.me.encode())
                except Exception:  # a read-only or full warehouse: the run itself will say so
                    continue

        self._thread = threading.Thread(target=beat, name=f"{self.job}-run-marker", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and remove the marker if it is still ours (errors ignored: it then goes stale)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            got = self.marker.read()
            if got is not None and (h := Holder.decode(got[0])) is not None and h.token == self.me.token:
                self.marker.delete()
        except Exception:
            pass
