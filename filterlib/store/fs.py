"""Where a store lives: a local path (plain `os` calls, the fast path) or a URI read in place through `pyarrow.fs`.

`--store` may be a path, `file://...`, `s3://`, `gs://`, `hdfs://` or `abfs://` URI. `open_store_fs` resolves a
URI with `FileSystem.from_uri` (credentials from the standard chains; for S3 `?endpoint_override=` or the
`AWS_ENDPOINT_URL` environment variable name an S3-compatible server, addressed path-style) and registers the file
system under the URI's canonical root: the URI without its query and user info, e.g. `s3://bucket/dump`. Every
reader then names remote files by canonical URI strings (`s3://bucket/dump/commitlog/000...`), so
`os.path.join`/`basename` keep working, and calls the helpers here (`isdir`, `listdir`, `getsize`, `read_bytes`,
`open_random`), which use `os` for local paths and the registered file system for URIs. Spark tasks run in other
processes: the driver hands them `snapshot()` and they `install` it before reading.

A remote read is a ranged GET of exactly the bytes asked for (`read_at`), never a download of the whole object.
Each `RemoteFile` counts what it fetched; with $RMQ_REPLAY_READ_LEDGER naming a directory, closing one appends a
JSON line (file, bytes fetched, ranged reads, lowest offset, highest end) to <dir>/reads-<pid>.jsonl, which is
how `make bench` measures a task's bytes read against its range (read amplification) without touching the tasks.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import pyarrow.fs as pafs

from filterlib.errors import StoreFormatError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
REMOTE_READ_CHUNK = 8 << 20  # bytes per ranged GET when filling a scan window
READ_LEDGER_ENV = "RMQ_REPLAY_READ_LEDGER"  # a directory: every RemoteFile appends its read totals there on close
ATTEMPTS_ENV = "RMQ_REPLAY_STORE_ATTEMPTS"  # attempts per S3 request (default 4)

_lock = threading.Lock()
_roots: list[tuple[str, str, pafs.FileSystem]] = []  # (canonical root URI, its path in the file system, fs)
_listings: dict[str, dict[str, pafs.FileInfo]] = {}  # remote directory -> {entry name: info}
_installed: set[str] = set()  # roots a task got from its driver's snapshot (kept, never rebuilt from the URI)


class StoreAccessError(StoreFormatError):
    """A remote store that cannot be reached or read: one line naming the URI and the file system's reason."""

    def __init__(self, message: str, path: str | None = None, offset: int | None = None, reason: str = ""):
        super().__init__(message, path=path, offset=offset)
        self.reason = reason or message


def scheme_of(path: str) -> str | None:
    """The URI scheme of `path` in lower case, None for a plain path."""
    m = _SCHEME.match(path)
    return m.group(1).lower() if m else None


def is_remote(path: str) -> bool:
    """True for a URI read through pyarrow.fs (anything but a plain path or file://)."""
    return scheme_of(path) not in (None, "file")


def display(uri: str) -> str:
    """The URI without user info (credentials a user may have put in it) and without its query."""
    if not is_remote(uri):
        return uri
    u = urlsplit(uri)
    return urlunsplit((u.scheme, _netloc(u), u.path, "", ""))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 400 else text[:397] + "..."


def _netloc(u: Any) -> str:
    """The URI's authority without credentials (s3://KEY:SECRET@bucket); abfs keeps its container@account."""
    if u.scheme.lower() == "s3" or ":" in u.netloc.rsplit("@", 1)[0] and "@" in u.netloc:
        return u.netloc.rsplit("@", 1)[-1]
    return u.netloc


def _canonical(uri: str) -> str:
    u = urlsplit(uri)
    netloc = _netloc(u)
    path = u.path.rstrip("/")
    return urlunsplit((u.scheme.lower(), netloc, path, "", ""))


def _with_endpoint_from_env(uri: str) -> str:
    """An s3:// URI with endpoint_override (and scheme) from AWS_ENDPOINT_URL[_S3] when the query names none."""
    u = urlsplit(uri)
    if u.scheme.lower() != "s3":
        return uri
    query = dict(parse_qsl(u.query, keep_blank_values=True))
    env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if "endpoint_override" not in query and env:
        e = urlsplit(env if "://" in env else "https://" + env)
        query["endpoint_override"] = e.netloc + e.path.rstrip("/")
        query.setdefault("scheme", e.scheme or "https")
    return urlunsplit((u.scheme, u.netloc, u.path, urlencode(query), ""))


def attempts() -> int:
    """Attempts per S3 request before a read fails ($RMQ_REPLAY_STORE_ATTEMPTS, default 4)."""
    return max(1, int(os.environ.get(ATTEMPTS_ENV, "4")))


def _bounded(fs: pafs.FileSystem) -> pafs.FileSystem:
    """An S3 file system with the AWS SDK's standard retry strategy held to attempts() per request.

    `from_uri` (and unpickling in a task) leaves the SDK's default strategy, which retries an erroring or stalling
    GET about 30 times (a stall is cut after the SDK's 3 s without a byte): minutes before a read fails. Other
    file systems are returned as they are."""
    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    kwargs = fs.__reduce__()[1][0]
    return pafs.S3FileSystem(**kwargs, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts()))


def _from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    try:
        fs, path = pafs.FileSystem.from_uri(_with_endpoint_from_env(uri))
        return _bounded(fs), path
    except (OSError, ValueError, TypeError) as e:
        why = _one_line(e)
        raise StoreAccessError(f"cannot open the file system: {why}", path=display(uri), reason=why) from None


def open_store_fs(uri: str) -> tuple[pafs.FileSystem, str]:
    """(FileSystem, root path in it) of a store path or URI; a remote one is registered for the readers here.

    A plain path or file:// URI gives the local file system and an absolute local path."""
    scheme = scheme_of(uri)
    if scheme is None:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if scheme == "file":
        return pafs.LocalFileSystem(), unquote(urlsplit(uri).path)
    fs, root = _from_uri(uri)
    root = root.rstrip("/")
    canon = _canonical(uri)
    # Register the whole bucket (or host): its listing holds the store root itself, and sibling dumps share it.
    u = urlsplit(canon)
    rel = u.path.strip("/")
    if root.endswith(rel):
        key, base = urlunsplit((u.scheme, u.netloc, "", "", "")), root[: len(root) - len(rel)].rstrip("/")
    else:
        key, base = canon, root
    with _lock:
        _installed.discard(key)
        _roots[:] = [r for r in _roots if r[0] != key]
        _roots.append((key, base, fs))
        _roots.sort(key=lambda r: -len(r[0]))
        _listings.clear()
    return fs, root


def store_root(uri: str) -> str:
    """The string the readers use for a store: a local path as given (file:// turned into its path), or the
    canonical URI of a remote store, its file system registered."""
    scheme = scheme_of(uri)
    if scheme is None:
        return uri
    if scheme == "file":
        return open_store_fs(uri)[1]
    canon = _canonical(uri)
    with _lock:
        known = any(canon == k or canon.startswith(k + "/") for k in _installed)
    if not (known and uri.rstrip("/") == canon):  # a task's canonical root keeps the driver's file system
        open_store_fs(uri)
    return canon


def snapshot() -> list[tuple[str, str, pafs.FileSystem]]:
    """The registered remote file systems, picklable, for Spark tasks (`install` them in the task)."""
    with _lock:
        return list(_roots)


def install(snap: list[tuple[str, str, pafs.FileSystem]]) -> None:
    """Register file systems a driver's `snapshot` carried (a no-op for local stores)."""
    if not snap:
        return
    keys = {r[0] for r in snap}
    with _lock:
        # a reused worker may hold an earlier run's file system or listings for the same bucket: replace them.
        # Unpickling lost the retry strategy: bound it again.
        _roots[:] = [r for r in _roots if r[0] not in keys] + [(k, root, _bounded(fs)) for k, root, fs in snap]
        _roots.sort(key=lambda r: -len(r[0]))
        _installed.update(keys)
        _listings.clear()


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(FileSystem, path in it) of a remote file or directory named by its canonical URI."""
    with _lock:
        for canon, root, fs in _roots:
            if uri == canon or uri.startswith(canon + "/"):
                return fs, root + uri[len(canon):]
    fs, path = _from_uri(uri)
    return fs, path.rstrip("/")


def _remote_listing(d: str) -> dict[str, pafs.FileInfo] | None:
    """{name: info} of a remote directory's entries (cached per process), None when it is not a directory."""
    d = d.rstrip("/")
    with _lock:
        got = _listings.get(d)
    if got is not None:
        return got
    fs, path = resolve(d)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        if not infos and fs.get_file_info(path).type != pafs.FileType.Directory:
            return None
    except (OSError, ValueError) as e:
        why = _one_line(e)
        raise StoreAccessError(f"cannot list {display(d)}: {why}", path=display(d), reason=why) from None
    out = {posixpath.basename(i.path.rstrip("/")): i for i in infos}
    with _lock:
        _listings[d] = out
    return out


def _remote_info(p: str) -> pafs.FileInfo | None:
    parent, name = posixpath.split(p.rstrip("/"))
    if "/" not in p.split("://", 1)[1].rstrip("/"):  # a bucket (or host root) itself: ask for it directly
        fs, path = resolve(p)
        try:
            info = fs.get_file_info(path)
        except (OSError, ValueError) as e:
            why = _one_line(e)
            raise StoreAccessError(f"cannot read {display(p)}: {why}", path=display(p), reason=why) from None
        return None if info.type == pafs.FileType.NotFound else info
    listing = _remote_listing(parent)
    return None if listing is None else listing.get(name)


def isdir(p: str) -> bool:
    if not is_remote(p):
        return os.path.isdir(p)
    info = _remote_info(p)
    return info is not None and info.type == pafs.FileType.Directory


def isfile(p: str) -> bool:
    if not is_remote(p):
        return os.path.isfile(p)
    info = _remote_info(p)
    return info is not None and info.type == pafs.FileType.File


def listdir(p: str) -> list[str]:
    if not is_remote(p):
        return os.listdir(p)
    listing = _remote_listing(p)
    if listing is None:
        raise FileNotFoundError(f"{display(p)}: no such directory")
    return list(listing)


def getsize(p: str) -> int:
    if not is_remote(p):
        return os.path.getsize(p)
    info = _remote_info(p)
    if info is None or info.type != pafs.FileType.File:
        raise StoreAccessError("no such file", path=display(p))
    return int(info.size)


def read_bytes(p: str) -> bytes:
    """A whole (small: queue, ext, config) file's bytes."""
    if not is_remote(p):
        with open(p, "rb") as f:
            return f.read()
    fs, path = resolve(p)
    try:
        with fs.open_input_file(path) as f:
            return f.read()
    except (OSError, ValueError) as e:
        raise StoreAccessError(f"cannot read: {_one_line(e)}", path=display(p), reason=_one_line(e)) from None


def read_head(p: str, n: int) -> bytes:
    """The first n bytes of a file (one ranged read for a remote one)."""
    if not is_remote(p):
        with open(p, "rb") as f:
            return f.read(n)
    with open_random(p) as f:
        return f.read_at(n, 0)


class RemoteFile:
    """Random access to one remote file: `read_at`/`readinto_at` are ranged reads of just the bytes asked for.

    `fetched` (bytes), `reads` (ranged reads), `lo`/`hi` (the span they covered) count what it read."""

    def __init__(self, p: str):
        self.uri = p
        self.fetched = self.reads = self.hi = 0
        self.lo: int | None = None
        fs, path = resolve(p)
        try:
            self.f: Any = fs.open_input_file(path)
        except (OSError, ValueError) as e:
            raise StoreAccessError(f"cannot open: {_one_line(e)}", path=display(p), reason=_one_line(e)) from None

    def __enter__(self) -> RemoteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.f.close()
        ledger = os.environ.get(READ_LEDGER_ENV)
        if ledger and self.reads:
            _append_ledger(ledger, {"path": display(self.uri), "fetched": self.fetched, "reads": self.reads,
                                    "lo": self.lo, "hi": self.hi})

    def _get(self, n: int, off: int) -> bytes:
        b = self.f.read_at(n, off)
        self.fetched += len(b)
        self.reads += 1
        self.lo = off if self.lo is None else min(self.lo, off)
        self.hi = max(self.hi, off + len(b))
        return b

    def _error(self, n: int, off: int, e: BaseException) -> StoreAccessError:
        """A failed ranged read: the object, the byte range and the attempts in the message."""
        tries = f" after {attempts()} attempts" if self.uri.lower().startswith("s3://") else ""
        return StoreAccessError(f"{display(self.uri)}: cannot read bytes {off}-{off + n - 1}{tries}: {_one_line(e)}",
                                offset=off, reason=_one_line(e))

    def read_at(self, n: int, off: int) -> bytes:
        try:
            return self._get(n, off)
        except (OSError, ValueError) as e:
            raise self._error(n, off, e) from None

    def readinto_at(self, mv: memoryview, off: int, chunk: int = REMOTE_READ_CHUNK) -> int:
        """Fill mv from file offset off in ranged reads of at most `chunk` bytes; the count read (short at EOF)."""
        got = 0
        while got < len(mv):
            n = min(chunk, len(mv) - got)
            try:
                b = self._get(n, off + got)
            except (OSError, ValueError) as e:
                raise self._error(n, off + got, e) from None
            k = len(b)
            if not k:
                break
            mv[got: got + k] = memoryview(b).cast("B")
            got += k
            if k < n:
                break
        return got


def _append_ledger(directory: str, entry: dict) -> None:
    """One JSON line per closed remote file (a measurement aid: a failure to write it never fails a read)."""
    try:
        with open(os.path.join(directory, f"reads-{os.getpid()}.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
    except OSError:
        pass


def open_random(p: str) -> RemoteFile:
    """A remote file for ranged reads (local files are read with plain `open`)."""
    return RemoteFile(p)


def missing_reason(uri: str) -> str:
    """Why a remote store root is not a directory: no bucket (host root), a file, or no such key or prefix."""
    u = urlsplit(_canonical(uri))
    top = urlunsplit((u.scheme, u.netloc, "", "", ""))
    if u.path.strip("/") and not isdir(top):
        return f"no such bucket or container {u.netloc!r}"
    if isfile(_canonical(uri)):
        return "a file, not a store directory"
    return "no such key or prefix" if u.path.strip("/") else f"no such bucket or container {u.netloc!r}"
