"""A Delta table's files at a version, read from its `_delta_log` on the driver with pyarrow: no Spark job.

Why: delta-spark lists a snapshot's files by state reconstruction, a Spark job over the log (tens of tasks, about
0.3-1 s even for a table of three files), and a run needs the file list of a dozen small snapshots: the runs row,
the dumps row, each table a commit replaces. Those jobs were most of a run's fixed cost (docs/performance.md,
"Floors"). The log is small and its replay simple (the Delta protocol's "Action Reconciliation"): the newest
checkpoint at or below the version, then the commits after it, each file's last `add` or `remove` wins, keyed by
path and deletion vector. (The version checksums, `<version>.crc`, list the files of a small table too, but the log
is the record: Delta itself reads them only to check itself.)

`live_files` answers only what it can answer exactly, and None otherwise, so the caller goes through delta-spark:
a warehouse neither local nor s3a://, a protocol with reader features it does not know, commits kept outside the
log (coordinated or catalog-managed commits), v2 checkpoints, a log whose commits since the checkpoint are gone.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import pyarrow.fs as pafs
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

READER_FEATURES = frozenset({"timestampNtz", "vacuumProtocolCheck"})
"""Reader features under which a file's rows are read as written (anything else: delta-spark reads the table)."""
LOG_ELSEWHERE = frozenset({"coordinatedCommits-preview", "catalogOwned-preview", "catalogManaged", "v2Checkpoint"})
"""Writer features that keep commits or checkpoints where this reader does not look."""
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


@dataclass(frozen=True)
class Location:
    """Where a table lives for pyarrow: a local directory, or bucket/key on S3 with the session's s3a settings."""

    root: str
    kind: str = "local"
    s3: dict[str, Any] = field(default_factory=dict, repr=False)

    def filesystem(self) -> pafs.FileSystem:
        """The pyarrow file system under `root`."""
        return pafs.LocalFileSystem() if self.kind == "local" else pafs.S3FileSystem(**self.s3)

    def join(self, *parts: str) -> str:
        """A path under the table."""
        return posixpath.join(self.root, *parts)


def local_dir(uri: str) -> str | None:
    """The local directory of a path or file: URI; None for any other URI."""
    if "://" not in uri and not uri.startswith("file:"):
        return os.path.abspath(uri)
    u = urlsplit(uri)
    return unquote(u.path) if u.scheme == "file" else None


def s3_options(spark: SparkSession, bucket: str) -> dict[str, Any]:
    """pyarrow S3FileSystem arguments from the session's fs.s3a settings (per-bucket ones first)."""
    hconf = spark._jsparkSession.sessionState().newHadoopConf()

    def get(key: str) -> str | None:
        value = hconf.get(f"fs.s3a.bucket.{bucket}.{key}") or hconf.get(f"fs.s3a.{key}")
        return str(value) if value is not None else None

    opts: dict[str, Any] = {}
    endpoint = get("endpoint")
    ssl = (get("connection.ssl.enabled") or "true").lower() != "false"
    if endpoint:
        u = urlsplit(endpoint if "://" in endpoint else ("https://" if ssl else "http://") + endpoint)
        opts["endpoint_override"] = u.netloc
        opts["scheme"] = u.scheme
    region = get("endpoint.region") or get("region")
    if region:
        opts["region"] = region
    if get("access.key") and get("secret.key"):
        opts["access_key"], opts["secret_key"] = get("access.key"), get("secret.key")
        if get("session.token"):
            opts["session_token"] = get("session.token")
    if (get("path.style.access") or "false").lower() != "true" and not endpoint:
        opts["force_virtual_addressing"] = True
    return opts


def location(spark: SparkSession, uri: str) -> Location | None:
    """The Location of a table URI: local, or s3a:// reached with the session's fs.s3a settings; None otherwise."""
    local = local_dir(uri)
    if local is not None:
        return Location(local)
    u = urlsplit(uri)
    if u.scheme == "s3a":
        return Location(f"{u.netloc}{unquote(u.path)}".rstrip("/"), "s3", s3_options(spark, u.netloc))
    return None


@dataclass(frozen=True)
class TableFiles:
    """A table's live data files at one version: each an `add` action as the log holds it (path relative to the
    table and URI-encoded, partitionValues, size, stats, ...), with the table's protocol and metadata."""

    version: int
    adds: tuple[dict, ...]
    protocol: dict
    metadata: dict

    @property
    def plain(self) -> bool:
        """True when a data file's rows are the table's rows by its own column names (no deletion vectors, no
        column mapping)."""
        mode = (self.metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none")
        return mode == "none" and not any(a.get("deletionVector") for a in self.adds)

    def partition(self, column: str, value: str) -> list[dict] | None:
        """The adds of one partition (column = value); None when the table is not partitioned by that column alone
        (an older layout: the value's rows are then not a set of files)."""
        if list(self.metadata.get("partitionColumns") or ()) != [column]:
            return None
        return [a for a in self.adds if (a.get("partitionValues") or {}).get(column) == value]


def _key(action: dict) -> tuple[str, str | None]:
    """Delta's reconciliation key of an add or remove: its path and its deletion vector's id."""
    dv = action.get("deletionVector")
    dv_id = None if not dv else f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}@{dv.get('offset')}"
    return action["path"], dv_id


def _readable(protocol: dict, metadata: dict) -> bool:
    """True when this reader answers the table exactly (see the module's docstring)."""
    if not protocol or not metadata:
        return False
    reader = int(protocol.get("minReaderVersion", 1))
    if reader >= 3 and not set(protocol.get("readerFeatures") or ()) <= READER_FEATURES:
        return False
    if reader == 2 and (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none") != "none":
        return False
    if reader > 3:
        return False
    return not set(protocol.get("writerFeatures") or ()) & LOG_ELSEWHERE


def _checkpoint_adds(fs: pafs.FileSystem, paths: Iterable[str]) -> tuple[list[dict], dict, dict]:
    """The adds, protocol and metadata of a (possibly multi-part) classic checkpoint."""
    adds: list[dict] = []
    protocol: dict = {}
    metadata: dict = {}
    for path in paths:
        with fs.open_input_file(path) as f:
            names = pq.ParquetFile(f).schema_arrow.names
            wanted = [c for c in ("add", "protocol", "metaData") if c in names]
            table = pq.read_table(f, columns=wanted)
        for row in table.to_pylist():
            if row.get("add"):
                add = dict(row["add"])
                add["partitionValues"] = dict(add.get("partitionValues") or [])
                add["tags"] = dict(add["tags"]) if add.get("tags") else None
                adds.append({k: v for k, v in add.items() if v is not None and not k.endswith("_parsed")})
            if row.get("protocol"):
                protocol = {k: v for k, v in row["protocol"].items() if v is not None}
            if row.get("metaData"):
                md = dict(row["metaData"])
                md["configuration"] = dict(md.get("configuration") or [])
                metadata = md
    return adds, protocol, metadata


def latest_version(spark: SparkSession | None, uri: str, where: Location | None = None) -> int | None:
    """The newest committed version of the Delta table at `uri` from a listing of its log (-1: no table there);
    None when the listing cannot say exactly (the caller asks delta-spark then, a JVM round of ~70 ms from a cold
    start): a location neither local nor s3a, staged commits, or a newest commit whose checksum file is missing or
    names a protocol whose commits may live elsewhere (coordinated or catalog-managed)."""
    where = where if where is not None else location(spark, uri)
    if where is None:
        return None
    fs = where.filesystem()
    log = where.join("_delta_log")
    try:
        infos = fs.get_file_info(pafs.FileSelector(log, allow_not_found=True))
    except OSError:
        return None
    names = {posixpath.basename(i.path): i for i in infos}
    commits = [int(m.group(1)) for n in names if (m := _COMMIT.match(n))]
    if not commits:
        return -1 if not names else None  # no log, or a log of checkpoints alone: delta-spark says what it is
    for staged in ("_staged_commits", "_commits"):
        if staged in names and names[staged].type == pafs.FileType.Directory and \
                fs.get_file_info(pafs.FileSelector(where.join("_delta_log", staged), recursive=True)):
            return None
    newest = max(commits)
    crc = f"{newest:020d}.crc"
    if crc not in names:
        return None
    try:
        with fs.open_input_stream(where.join("_delta_log", crc)) as f:
            checksum = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return newest if _readable(checksum.get("protocol") or {}, checksum.get("metadata") or {}) else None


def live_files(spark: SparkSession | None, uri: str, version: int, where: Location | None = None) -> TableFiles | None:
    """The live files of the Delta table at `uri` at `version` (≥ 0), replayed from its log; None when this reader
    cannot answer exactly (see the module's docstring): the caller asks delta-spark then."""
    where = where if where is not None else location(spark, uri)
    if where is None or version < 0:
        return None
    fs = where.filesystem()
    log = where.join("_delta_log")
    try:
        names = [posixpath.basename(i.path) for i in fs.get_file_info(pafs.FileSelector(log))]
    except (FileNotFoundError, OSError):
        return None
    commits = {int(m.group(1)) for n in names if (m := _COMMIT.match(n))}
    parts: dict[int, dict[int, list[str]]] = {}
    for n in names:
        m = _CHECKPOINT.match(n)
        if m and int(m.group(1)) <= version:
            total = int(m.group(3) or 1)
            parts.setdefault(int(m.group(1)), {}).setdefault(total, []).append(posixpath.join(log, n))
    complete = {v: paths for v, by_total in parts.items() for total, paths in by_total.items()
                if len(paths) == total}
    start = max(complete, default=-1)
    if any(v not in commits for v in range(start + 1, version + 1)):
        return None
    files: dict[tuple[str, str | None], dict] = {}
    protocol: dict = {}
    metadata: dict = {}
    if start >= 0:
        adds, protocol, metadata = _checkpoint_adds(fs, sorted(complete[start]))
        files = {_key(a): a for a in adds}
    for v in range(start + 1, version + 1):
        with fs.open_input_stream(posixpath.join(log, f"{v:020d}.json")) as f:
            lines = f.read().decode("utf-8").splitlines()
        for line in lines:
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                files[_key(action["add"])] = action["add"]
            elif "remove" in action:
                files.pop(_key(action["remove"]), None)
            elif "protocol" in action:
                protocol = action["protocol"]
            elif "metaData" in action:
                metadata = action["metaData"]
    if not _readable(protocol, metadata):
        return None
    return TableFiles(version, tuple(files.values()), protocol, metadata)


def partition_files(spark: SparkSession | None, uri: str, version: int, column: str, value: str,
                    where: Location | None = None) -> tuple[TableFiles, list[dict]] | None:
    """`live_files` narrowed to one partition: (the table's files, the adds of column = value); None where
    live_files cannot answer or the table is not partitioned by that column alone."""
    found = live_files(spark, uri, version, where)
    adds = found.partition(column, value) if found is not None else None
    return None if adds is None else (found, adds)


def file_path(where: Location, add: dict) -> str:
    """The path of an add's data file inside `where`'s file system: its log path is a URI, relative to the table
    unless it names a scheme (a file of another table, as a shallow clone keeps)."""
    u = urlsplit(add["path"])
    if not u.scheme:
        return where.join(unquote(add["path"]))
    return unquote(u.path) if where.kind == "local" else f"{u.netloc}{unquote(u.path)}"
