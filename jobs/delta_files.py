"""Job output written as Parquet by the tasks themselves (pyarrow) and committed to Delta by the driver.

Why: a table produced in Python tasks as Arrow costs 2.9-8 us per row through Spark's JVM writer (Arrow -> JVM rows
-> Parquet) and 0.3-2 us through pyarrow's own writer (docs: /work/shared/performance-notes.md). So a task calls
`write_part` (one snappy Parquet file under the table's directory, named uniquely, its Delta statistics computed
from the Arrow data) and returns the plain dict it gives; the driver gathers the dicts and `commit_dump` makes ONE
Delta commit per table that removes every file of the dump's partition and adds the new ones.

Mechanism: delta-spark's own transaction (`DeltaLog.startTransaction` / `OptimisticTransaction.commit`) through
py4j, the jar the sessions already load (pinned: io.delta:delta-spark_4.2_2.13:4.4.0, jobs.spark.DELTA_PACKAGE and
jars/pom.xml). Chosen over Delta Kernel's transaction API (4.4.0 jars on the class path: it appends but has no
public way to remove files by a predicate, and no schema merge) and over delta-rs (`deltalake`: another package
to pin, another writer with its own protocol support, and no s3a:// URIs or Hadoop settings). The transaction is
the one replaceWhere uses: the same log store for every Hadoop file system (s3a included), conflict detection
(the transaction reads the dump's partition, `dump_id = '<id>'`; Delta checks other writers' added and removed
files against that partition only, so runs of other dumps never conflict, and another writer of the same dump is
a conflict: jobs.faults makes it exit 3), checkpoints, protocol and metadata checks, and `DESCRIBE HISTORY`
showing a WRITE with that predicate. The classes used (DeltaLog, OptimisticTransaction, Action.fromJson,
AddFile.remove, DeltaOperations.Write and CreateTable) are delta-spark internals, not a public API:
tests/test_delta_files.py holds them to the pinned release.

Which files hold the dump: the tables are partitioned by dump_id (jobs.delta_io.PARTITION), so the dump's files
are the files of its partition directory, whichever writer (this module or replaceWhere) wrote them; the Parquet
files themselves do not hold the column.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from filterlib.tables import COPY
from jobs.delta_io import (
    PARTITION,
    STATS_PROPERTY,
    check_dump_id,
    creation_metadata,
    last_version,
    outdated,
    partition_columns,
    partition_dir,
    scala_list,
    stats_of,
    table_path,
)
from jobs.delta_log import (
    Location,
    TableFiles,
    file_path,
    live_files,
    local_dir,
    location,
    partition_files,
    s3_options,
)
from jobs.faults import LayoutOutdated, task_writes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from filterlib.tables import Table

STRING_PREFIX = 32  # Delta's dataSkippingStringPrefixLength: a longer string keeps a 32-character min and max bound


@dataclass(frozen=True)
class FileTarget:
    """Where a task writes one table's Parquet files for one dump, and how it reaches that file system (picklable)."""

    table_uri: str  # <warehouse>/<table> as Spark names it
    dump_id: str
    root: str  # the table directory inside the file system below (a local path, or bucket/key for s3)
    kind: str = "local"  # "local" or "s3"
    s3: dict[str, Any] = field(default_factory=dict, repr=False)  # pyarrow S3FileSystem arguments (keys hidden)
    copy: str | None = None  # the `copy` column of the rows written (tables.COPY): the history's copy, or null

    def filesystem(self) -> pafs.FileSystem:
        """The pyarrow file system the task writes through."""
        if self.kind == "local":
            return pafs.LocalFileSystem()
        return pafs.S3FileSystem(**self.s3)


def file_target(spark: SparkSession, warehouse: str, table: str, dump_id: str, copy: str | None = None
                ) -> FileTarget:
    """The FileTarget of one table and dump (its rows' `copy`: the history's copy, None outside a history): a local
    (or file:) warehouse, or an s3a:// one reached with the session's fs.s3a settings; ValueError for any other
    scheme (write those tables through delta_io)."""
    check_dump_id(dump_id)
    uri = table_path(warehouse, table)
    local = local_dir(uri)
    if local is not None:
        return FileTarget(uri, dump_id, local, copy=copy)
    u = urlsplit(uri)
    if u.scheme == "s3a":
        return FileTarget(uri, dump_id, f"{u.netloc}{u.path}".rstrip("/"), "s3", s3_options(spark, u.netloc), copy)
    raise ValueError(f"{uri}: tasks write Parquet directly only to a local or s3a:// warehouse")


@dataclass(frozen=True)
class FileSource:
    """One dump's data files of a table at the version a run reads, as tasks read them with pyarrow (picklable):
    `paths` inside the file system (local paths, or bucket/key for s3); `sizes`, each path's bytes where the
    table's log gave them (empty where the files came from a listing)."""

    paths: tuple[str, ...]
    kind: str = "local"
    s3: dict[str, Any] = field(default_factory=dict, repr=False)
    sizes: tuple[int, ...] = ()

    def filesystem(self) -> pafs.FileSystem:
        """The pyarrow file system the task reads through."""
        return pafs.LocalFileSystem() if self.kind == "local" else pafs.S3FileSystem(**self.s3)

    def only(self, paths: Collection[str]) -> FileSource:
        """The same source with only those of its files (their sizes kept)."""
        keep = set(paths)
        sized = dict(zip(self.paths, self.sizes, strict=True)) if self.sizes else {}
        mine = tuple(p for p in self.paths if p in keep)
        return FileSource(mine, self.kind, self.s3, tuple(sized[p] for p in mine) if sized else ())


def _sized(loc: Location, adds: Iterable[dict], only: Collection[str] | None = None
           ) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The adds' pyarrow paths, sorted, and their sizes (`only`: just those paths)."""
    pairs = sorted((file_path(loc, a), int(a["size"])) for a in adds)
    pairs = [(p, n) for p, n in pairs if only is None or p in only]
    return tuple(p for p, _ in pairs), tuple(n for _, n in pairs)


_PLAIN_FILES = {"delta.enableDeletionVectors": "false", "delta.columnMapping.mode": "none"}
"""Table settings under which a data file's rows are the table's rows, by the file's own column names."""


def _dump_part(spark: SparkSession, warehouse: str, table: str, dump_id: str, version: int
               ) -> tuple[Location, TableFiles, list[dict]] | None:
    """Where the table lives, its files at `version` and the dump's adds among them (`jobs.delta_log`); None where
    the log cannot answer exactly."""
    uri = table_path(warehouse, table)
    loc = location(spark, uri)
    part = partition_files(spark, uri, version, PARTITION, dump_id, loc) if loc is not None else None
    return None if part is None else (loc, *part)


def file_source(spark: SparkSession, df: Any, warehouse: str, table: str, dump_id: str,
                version: int) -> FileSource | None:
    """The Parquet files behind `df` (one dump's rows of `table` at `version`, as `jobs.runs.read_dump` reads them),
    for tasks that read them themselves; None where the files alone do not give the rows (deletion vectors, column
    mapping) or the warehouse is neither local nor s3a:// (read those through Spark). The files come from the
    table's log (`jobs.delta_log`), else from delta-spark's own listing of `df`."""
    part = _dump_part(spark, warehouse, table, dump_id, version)
    if part is not None:
        where, found, adds = part
        if not found.plain:
            return None
        paths, sizes = _sized(where, adds)
        return FileSource(paths, where.kind, where.s3, sizes)
    uri = table_path(warehouse, table)
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)
    conf = log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty()).metadata().configuration()
    for key, plain in _PLAIN_FILES.items():
        if conf.contains(key) and str(conf.apply(key)).lower() != plain:
            return None
    parts = [urlsplit(u) for u in sorted(df.inputFiles())]  # Hadoop paths: the names as on disk, not URI-escaped
    if all(p.scheme in ("", "file") for p in parts):
        return FileSource(tuple(p.path for p in parts))
    if parts and all(p.scheme == "s3a" and p.netloc == parts[0].netloc for p in parts):
        return FileSource(tuple(f"{p.netloc}{p.path}" for p in parts), "s3", s3_options(spark, parts[0].netloc))
    return None


_GLOB = set("*?[]{}\\")
"""Characters Spark's file reader would expand as a pattern in a path it is given."""


def column_type(spark: SparkSession, warehouse: str, table: str, column: str) -> Any:
    """The Delta schema type (JSON: a name, or a dict for a nested type) of `column` in the newest version of
    `table`; None when the table or the column does not exist."""
    path = table_path(warehouse, table)
    version = last_version(spark, path)
    if version < 0:
        return None
    found = live_files(spark, path, version)
    if found is not None:
        fields = json.loads(found.metadata["schemaString"])["fields"]
    else:
        from delta.tables import DeltaTable

        fields = json.loads(DeltaTable.forPath(spark, path).toDF().schema.json())["fields"]
    return next((f["type"] for f in fields if f["name"] == column), None)


def map_properties(spark: SparkSession, warehouse: str) -> bool:
    """Whether the warehouse's messages table holds the properties as a map (written before they were text; job 1
    keeps writing the map there until `jobs.upgrade` converts it)."""
    return isinstance(column_type(spark, warehouse, "messages", "properties"), dict)


def dump_frame(spark: SparkSession, warehouse: str, table: str, dump_id: str, version: int,
               only: Collection[str] | None = None) -> tuple[DataFrame, FileSource] | None:
    """One dump's rows of `table` at `version` (the rows `jobs.runs.read_dump` reads), read by Spark's Parquet
    reader from the files the table's log names, and those files for pyarrow: no Delta state reconstruction (a
    Spark job per table and version, most of a small run's cost). None where the log or the files cannot answer
    exactly, or a path would be read as a pattern: read those through delta-spark. `only`: just those of the files
    (their pyarrow paths, as the FileSource names them), for a reader whose statistics show the others hold none
    of the rows it wants."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    part = _dump_part(spark, warehouse, table, dump_id, version)
    if part is None or not part[1].plain:
        return None
    loc, found, adds = part
    paths, sizes = _sized(loc, adds, only)
    uris = [f"file://{p}" if loc.kind == "local" else f"s3a://{p}" for p in paths]
    if any(_GLOB & set(u) for u in uris):
        return None
    schema = StructType.fromJson(json.loads(found.metadata["schemaString"]))
    data = StructType([f for f in schema.fields if f.name != PARTITION])
    df = (spark.read.schema(data).parquet(*uris) if uris else spark.createDataFrame([], data))
    # the partition column as delta-spark gives it: the dump's value, nullable (a bare literal is not)
    part_col = F.when(F.lit(False), F.lit(None)).otherwise(F.lit(dump_id))
    if PARTITION in schema.names:  # appended; then the table's order,
        df = df.withColumn(PARTITION, part_col.cast(schema[PARTITION].dataType))
    names = [f.name for f in schema.fields]  # by names in one call (a Column per field cost ~4 ms of py4j each)
    if df.columns != names:
        df = df.selectExpr(*["`" + n.replace("`", "``") + "`" for n in names])
    return df, FileSource(paths, loc.kind, loc.s3, sizes)


KEY_SUMMARY = b"rmq.key_summary"
"""The footer metadata key of a file's key summary (`key_summary`)."""


def key_summary(table: pa.Table, keys: Sequence[str], columns: Sequence[str]) -> dict[bytes, bytes]:
    """Footer metadata for a file of `table`'s rows: per key (the values of `keys`), its row count and each of
    `columns`' min, max and non-null count. Readers of bounds per key (`key_ranges`, `least_since`) answer from it
    without reading a row group, where rows of several keys share row groups (job 1 writes units in commit log
    order: a sort would cost more than it saves)."""
    agg = table.group_by(list(keys)).aggregate(
        [([], "count_all"), *[(c, f) for c in columns for f in ("min", "max", "count")]])
    rows = [[*(r[k] for k in keys), r["count_all"], *(r[f"{c}_{f}"] for c in columns for f in ("min", "max", "count"))]
            for r in agg.to_pylist()]
    return {KEY_SUMMARY: json.dumps({"keys": list(keys), "columns": list(columns), "rows": rows}).encode()}


def _summary(pf: pq.ParquetFile, keys: Sequence[str], columns: Sequence[str]
             ) -> dict[tuple, tuple[int, list[tuple[Any, Any, int]]]] | None:
    """A file's key summary as {key: (rows, [(min, max, non-null count) of each of `columns`])}; None where the
    file has none for these keys and columns."""
    raw = (pf.metadata.metadata or {}).get(KEY_SUMMARY)
    if raw is None:
        return None
    doc = json.loads(raw)
    if doc["keys"] != list(keys) or not set(columns) <= set(doc["columns"]):
        return None
    at = [3 * doc["columns"].index(c) for c in columns]
    n = len(keys)
    return {tuple(r[:n]): (r[n], [tuple(r[n + 1 + i:n + 4 + i]) for i in at]) for r in doc["rows"]}


def _files(source: FileSource) -> Iterable[pq.ParquetFile]:
    """Each of the source's files, open while the caller reads it."""
    fs = source.filesystem()
    for path in source.paths:
        with fs.open_input_file(path) as f:
            yield pq.ParquetFile(f)


def _row_groups(pf: pq.ParquetFile, columns: Sequence[str], keys: int
                ) -> Iterable[tuple[tuple | None, list, Callable[[], pa.Table]]]:
    """Each non-empty row group of a file: (its one key, the first `keys` columns' value, where its statistics
    show it holds one; else None), the statistics of `columns`, and a reader of those columns' rows. A row group's
    string statistics equal at min and max are exact (a truncated max is never its min)."""
    meta = pf.metadata
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if not group.num_rows:
            continue
        stats = [group.column(index[c]).statistics if c in index else None for c in columns]
        known = all(st is not None and st.has_min_max and st.has_null_count and st.null_count == 0 for st in stats)
        one = tuple(st.min for st in stats[:keys]) if known and all(
            st.min == st.max for st in stats[:keys]) else None
        yield one, stats if known else [], lambda pf=pf, g=g: pf.read_row_group(g, columns=list(columns))


def key_ranges(source: FileSource, keys: Sequence[str], value: str) -> dict[tuple, tuple[Any, Any]]:
    """{key (the values of `keys`): (min, max) of `value`} over the source's rows (nulls ignored, as SQL's min and
    max): from a file's key summary where it has one, else from a row group's statistics where they show it holds
    one key, else from its rows, those columns read alone."""
    out: dict[tuple, tuple[Any, Any]] = {}

    def fold(key: tuple, lo: Any, hi: Any) -> None:
        if lo is not None:
            had = out.get(key)
            out[key] = (lo, hi) if had is None else (min(had[0], lo), max(had[1], hi))

    for pf in _files(source):
        summary = _summary(pf, keys, [value])
        if summary is not None:
            for key, (_, [(lo, hi, _)]) in summary.items():
                fold(key, lo, hi)
            continue
        for one, stats, rows in _row_groups(pf, [*keys, value], len(keys)):
            if one is not None:
                fold(one, stats[-1].min, stats[-1].max)
                continue
            for r in rows().group_by(list(keys)).aggregate([(value, "min"), (value, "max")]).to_pylist():
                fold(tuple(r[k] for k in keys), r[f"{value}_min"], r[f"{value}_max"])
    return out


def _least_of_summary(summary: dict, starts: Mapping[tuple, int | None]) -> tuple[bool, Any]:
    """least_since over one file from its key summary: (answered, the least or None). Not answered where a key's
    start falls inside its offsets there, or its `at` has nulls (their rows' order is not in the summary)."""
    least = None
    for key, (rows, [(at_lo, at_hi, at_n), (v_lo, _, _)]) in summary.items():
        if key not in starts:
            continue
        start = starts[key]
        if start is not None and (at_hi is None or at_hi < start) and at_n == rows:
            continue
        if start is not None and (at_n != rows or at_lo < start):
            return False, None
        if v_lo is not None:
            least = v_lo if least is None else min(least, v_lo)
    return True, least


def least_since(source: FileSource, keys: Sequence[str], at: str, starts: Mapping[tuple, int | None],
                value: str) -> Any:
    """The least `value` over the rows of the keys in `starts` whose `at` is at least the key's start (None: every
    row of the key); None when there is none. A file's key summary answers where it can; row groups are read only
    where their statistics leave it open."""
    least = None

    def fold(found: Any) -> None:
        nonlocal least
        if found is not None:
            least = found if least is None else min(least, found)

    for pf in _files(source):
        summary = _summary(pf, keys, [at, value])
        if summary is not None:
            answered, found = _least_of_summary(summary, starts)
            if answered:
                fold(found)
                continue
        for one, stats, rows in _row_groups(pf, [*keys, at, value], len(keys)):
            if one is not None:
                if one not in starts:
                    continue
                start = starts[one]
                if start is not None and stats[-2].max < start:
                    continue
                if start is None or stats[-2].min >= start:
                    fold(stats[-1].min)
                    continue
            t = rows()
            begins = pa.table({**{k: pa.array([key[i] for key in starts], t.schema.field(k).type)
                                  for i, k in enumerate(keys)},
                               "_start": pa.array(list(starts.values()), t.schema.field(at).type)})
            t = t.join(begins, list(keys), join_type="inner")
            held = pc.or_kleene(pc.is_null(t["_start"]), pc.greater_equal(t[at], t["_start"]))
            fold(pc.min(pc.filter(t[value], held)).as_py())
    return least


def reaching(source: FileSource, column: str, low: Any) -> FileSource:
    """The source's files that may hold a row whose `column` is at least `low`, by their row groups' statistics (a
    row group without them may): a reader of the rows from `low` on opens no task for the others."""
    keep = [path for path, pf in zip(source.paths, _files(source), strict=True)
            if any(not stats or stats[0].max >= low for _, stats, _ in _row_groups(pf, [column], 0))]
    return source.only(keep)


def _scalar(v: Any) -> Any:
    """A statistics value as JSON takes it."""
    return v.as_py() if hasattr(v, "as_py") else v


class _Stats:
    """Running min/max/nullCount of the statistics columns over a file's batches, as Delta writes them."""

    def __init__(self, schema: pa.Schema, columns: Sequence[str]):
        self.columns = [c for c in columns if c in schema.names]
        self.types = {c: schema.field(c).type for c in self.columns}
        self.min: dict[str, Any] = {}
        self.max: dict[str, Any] = {}
        self.nulls = dict.fromkeys(self.columns, 0)
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Fold one batch in."""
        self.rows += batch.num_rows
        for c in self.columns:
            col = batch.column(c)
            self.nulls[c] += col.null_count
            t = self.types[c]
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
                    or pa.types.is_large_string(t)):
                continue
            mm = pc.min_max(col)
            lo, hi = _scalar(mm["min"]), _scalar(mm["max"])
            if lo is None:
                continue
            if c not in self.min or lo < self.min[c]:
                self.min[c] = lo
            if c not in self.max or hi > self.max[c]:
                self.max[c] = hi

    def json(self) -> str:
        """Delta's stats JSON: numRecords, minValues, maxValues, nullCount."""
        lo: dict[str, Any] = {}
        hi: dict[str, Any] = {}
        for c in self.columns:
            a, b = self.min.get(c), self.max.get(c)
            if a is None or (isinstance(a, float) and (math.isnan(a) or math.isnan(b))):
                continue
            if isinstance(a, str):
                lo[c] = a[:STRING_PREFIX]
                top = _truncated_max(b)
                if top is not None:
                    hi[c] = top
                continue
            lo[c], hi[c] = a, b
        return json.dumps({"numRecords": self.rows, "minValues": lo, "maxValues": hi, "nullCount": self.nulls},
                          separators=(",", ":"))


ASCII_MAX, UTF8_MAX = "\x7f", "\U0010ffff"


def _truncated_max(s: str) -> str | None:
    """An upper bound of s as Delta keeps it: s when short, else a prefix of at least STRING_PREFIX characters and a
    tie-breaker greater than the character cut off (U+007F or U+10FFFF); None when no bound fits in twice that."""
    i = STRING_PREFIX
    while i <= 2 * STRING_PREFIX:
        if i >= len(s):
            return s
        if s[i] == UTF8_MAX:
            i += 1
        elif s[i] < ASCII_MAX:
            return s[:i] + ASCII_MAX
        else:
            return s[:i] + UTF8_MAX
    return None


def _batches(data: pa.Table | Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """The record batches of a table or an iterable of batches."""
    return data.to_batches() if isinstance(data, pa.Table) else data


def _without_partition(options: dict[str, Any] | None) -> dict[str, Any]:
    """pyarrow writer settings with the partition column taken out of their column lists (it is not in the file)."""
    return {k: [c for c in v if c != PARTITION] if isinstance(v, list) else v for k, v in (options or {}).items()}


def constant(value: str | None, n: int) -> pa.Array:
    """A string column holding `value` (or null) on n rows, built as two numpy buffers: 0.014 us a row where
    `pa.repeat` takes 0.5 us (measured on 1 M rows)."""
    if value is None:
        return pa.nulls(n, pa.string())
    raw = value.encode()
    if n * len(raw) >= 2**31:  # past 32-bit offsets: two halves
        return pa.concat_arrays([constant(value, n // 2), constant(value, n - n // 2)])
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    data = np.tile(np.frombuffer(raw, dtype=np.uint8), n)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def with_copy(batch: pa.RecordBatch, copy: str | None) -> pa.RecordBatch:
    """`batch` with the `copy` column (tables.COPY) added: `copy` on every row, or null."""
    return batch.append_column(pa.field(COPY.name, COPY.type), constant(copy, batch.num_rows))


def write_part(target: FileTarget, batches: pa.Table | Iterable[pa.RecordBatch], schema: pa.Schema,
               stats_columns: Sequence[str] = (), compression: str = "snappy",
               options: dict[str, Any] | None = None, metadata: dict[bytes, bytes] | None = None) -> dict | None:
    """In a task: write one Parquet file (pyarrow, `compression`: snappy unless told; `options`: more
    pq.ParquetWriter arguments, e.g. which columns get dictionaries and statistics; `metadata`: the footer's
    key-value metadata, e.g. a `key_summary`) under the dump's partition
    directory with a unique name; return a plain dict describing it (path relative to the table, size,
    modification time, row count, Delta stats JSON with min/max/nullCount of stats_columns), or None when there
    were no rows. `schema` is the table's; the partition column (dump_id) is not written (the batches need not
    carry it): its directory holds it. A `copy` column the schema has and the batches lack is the target's."""
    fs = target.filesystem()
    rel = f"{partition_dir(target.dump_id)}/part-{uuid.uuid4()}-c000.{compression}.parquet"
    path = posixpath.join(target.root, rel) if target.kind != "local" else os.path.join(target.root, rel)
    file_schema = pa.schema([f for f in schema if f.name != PARTITION])
    stats = _Stats(file_schema, stats_of(stats_columns))
    writer: pq.ParquetWriter | None = None
    try:
        for batch in _batches(batches):
            if batch.num_rows == 0:
                continue
            if COPY.name in file_schema.names and COPY.name not in batch.schema.names:
                batch = with_copy(batch, target.copy)
            if batch.schema.names != file_schema.names:
                batch = batch.select(file_schema.names)
            if batch.schema != file_schema:
                batch = batch.cast(file_schema)
            if writer is None:
                if target.kind == "local":
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                writer = pq.ParquetWriter(path, file_schema.with_metadata(metadata) if metadata else file_schema,
                                          filesystem=fs,  # the writer closes its stream
                                          compression=compression, **_without_partition(options))
            writer.write_batch(batch)
            stats.add(batch)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return None
    info = fs.get_file_info(path)
    mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else int(time.time() * 1000)
    return {"table_uri": target.table_uri, "dump_id": target.dump_id, "path": rel, "size": int(info.size),
            "modification_time": mtime, "num_records": stats.rows, "stats": stats.json()}


SPARK_CODECS = {"none": "none", "uncompressed": "none", "snappy": "snappy", "gzip": "gzip", "zstd": "zstd",
                "lz4": "lz4", "lz4_raw": "lz4", "brotli": "brotli"}
"""spark.sql.parquet.compression.codec values pyarrow writes too (Spark's name -> pyarrow's); lzo is not one."""


def parquet_codec(spark: SparkSession) -> str:
    """The session's Parquet codec in pyarrow's words, so task-written files match Spark-written ones (snappy when
    the session names one pyarrow cannot write)."""
    return SPARK_CODECS.get(str(spark.conf.get("spark.sql.parquet.compression.codec", "snappy")).lower(), "snappy")


def _spark_schema(schema: pa.Schema) -> dict:
    """The Delta schemaString (Spark StructType JSON) of an Arrow schema, through the one DDL mapping."""
    from pyspark.sql.types import _parse_datatype_string

    from jobs.schemas import spark_ddl

    return json.loads(_parse_datatype_string(spark_ddl(schema)).json())


def _merged(current: dict, new: dict, table: str) -> dict:
    """mergeSchema: the current fields in order, then the new schema's fields the table lacks; a field both have
    must keep its type (ValueError otherwise)."""
    have = {f["name"].lower(): f for f in current["fields"]}
    fields = list(current["fields"])
    for f in new["fields"]:
        old = have.get(f["name"].lower())
        if old is None:
            fields.append({**f, "nullable": True})
        elif old["type"] != f["type"]:
            raise ValueError(f"table {table}: column {f['name']} is {json.dumps(old['type'])} in the table and "
                             f"{json.dumps(f['type'])} in the files written")
    return {**current, "fields": fields}


def _jvm_list(jvm: Any, items: Iterable[Any]) -> Any:
    """A Scala immutable List of JVM objects."""
    jl = jvm.java.util.ArrayList()
    for x in items:
        jl.add(x)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(jl).toList()


def _some(jvm: Any, value: Any) -> Any:
    return jvm.scala.Option.apply(value)


def _none(jvm: Any) -> Any:
    return jvm.scala.Option.empty()


def _add_action(d: dict, dump_id: str) -> str:
    """The `add` action JSON of one written file (its path a URI relative to the table, as Delta writes it)."""
    return json.dumps({"add": {"path": d["path"].replace("%", "%25"), "partitionValues": {PARTITION: dump_id},
                               "size": d["size"], "modificationTime": d["modification_time"], "dataChange": True,
                               "stats": d["stats"]}})


def _files_to_remove(spark: SparkSession, txn: Any, path: str, dump_id: str) -> list[Any]:
    """The JVM AddFiles of the read snapshot in dump_id's partition, the transaction recording that it read the
    partition (Delta checks other writers' files against that partition only). The files come from the table's log
    (`jobs.delta_log`, no Spark job), else from delta-spark's own listing (`filterFiles`)."""
    from pyspark.sql import functions as F

    jvm = spark._jvm
    version = int(txn.readVersion())
    df = spark.read.format("delta").option("versionAsOf", version).load(path)
    cond = _jvm_list(jvm, [df.where(F.col(PARTITION) == dump_id)._jdf.queryExecution().analyzed().condition()])
    part = partition_files(spark, path, version, PARTITION, dump_id)
    if part is None:
        return scala_list(txn.filterFiles(cond, False))
    action = jvm.org.apache.spark.sql.delta.actions.Action
    files = [action.fromJson(json.dumps({"add": a})) for a in part[1]]
    txn.trackReadPredicates(cond, False, True)  # what filterFiles records
    txn.trackFilesRead(_jvm_list(jvm, files))
    return files


def _file_names(spark: SparkSession, path: str, dump_id: str, version: int) -> set[str]:
    """The names of the data files of dump_id's partition at a version (file names are unique: a uuid each)."""
    from pyspark.sql import functions as F

    part = partition_files(spark, path, version, PARTITION, dump_id)
    if part is not None:
        return {posixpath.basename(unquote(a["path"])) for a in part[1]}
    df = spark.read.format("delta").option("versionAsOf", version).load(path).where(F.col(PARTITION) == dump_id)
    return {posixpath.basename(unquote(f)) for f in df.inputFiles()}


def _metadata_json(txn: Any, schema: pa.Schema, stats_columns: Sequence[str], table: str) -> str | None:
    """The metaData action the commit needs (a merged schema, a changed statistics property), else None."""
    md = json.loads(txn.metadata().json())["metaData"]
    current = json.loads(md["schemaString"])
    merged = _merged(current, _spark_schema(schema), table)
    conf = dict(md.get("configuration") or {})
    changed = merged != current
    wanted = ",".join(stats_columns)
    if stats_columns and conf.get(STATS_PROPERTY) != wanted:
        conf[STATS_PROPERTY] = wanted
        changed = True
    if not changed:
        return None
    return json.dumps({"metaData": {**md, "schemaString": json.dumps(merged), "configuration": conf}})


def _commit(spark: SparkSession, path: str, table: str, dump_id: str, files: Sequence[dict], schema: pa.Schema,
            stats_columns: Sequence[str], on_top_of: int | None = None, blind: bool = False) -> int:
    """commit_dump's transaction itself."""
    for d in files:
        if d.get("dump_id") != dump_id or d.get("table_uri") != path:
            raise ValueError(f"file {d.get('path')} was written for {d.get('table_uri')} / dump "
                             f"{d.get('dump_id')!r}, not {path} / {dump_id!r}")
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    log = delta.DeltaLog.forTable(spark._jsparkSession, path)
    txn = log.startTransaction()
    creating = txn.readVersion() < 0  # a new table: this commit makes it (version 0), partitioned by dump
    if creating:
        md = creation_metadata(_spark_schema(schema), stats_columns)
        current = []
    else:
        if scala_list(txn.metadata().partitionColumns()) != [PARTITION]:
            raise outdated(path, table)
        md = _metadata_json(txn, schema, stats_columns, table)
        current = [] if blind else _files_to_remove(spark, txn, path, dump_id)
        if on_top_of is not None and not blind:  # keep what that version held: only files committed since go
            held = _file_names(spark, path, dump_id, on_top_of)
            current = [f for f in current if posixpath.basename(str(f.path())) not in held]
    if md is not None:
        txn.updateMetadata(delta.actions.Action.fromJson(md), False)
    removes = [f.remove() for f in current]
    adds = [delta.actions.Action.fromJson(_add_action(d, dump_id)) for d in files]
    modes = jvm.org.apache.spark.sql.SaveMode
    overwrite = on_top_of is None and not blind
    op = getattr(delta, "DeltaOperations$Write")(
        modes.Overwrite if overwrite else modes.Append, _none(jvm),
        _some(jvm, f"dump_id = '{dump_id}'") if overwrite else _none(jvm), _none(jvm),
        _none(jvm), _none(jvm), _some(jvm, md is not None), _none(jvm), _none(jvm))
    try:
        return int(txn.commit(_jvm_list(jvm, [*removes, *adds]), op))
    except Exception:
        if creating and partition_columns(spark, path) == [PARTITION]:  # another run made the table meanwhile:
            return _commit(spark, path, table, dump_id, files, schema, stats_columns, on_top_of, blind)  # on it
        raise


def commit_dump(spark: SparkSession, warehouse: str, table: str, dump_id: str, files: Sequence[dict],
                schema: pa.Schema, stats_columns: Sequence[str] = (), on_top_of: int | None = None,
                blind: bool = False) -> int:
    """On the driver: ONE Delta commit that removes every file in dump_id's partition and adds `files`; creates the
    table when missing, in the same commit (schema from the Arrow schema via jobs.schemas / filterlib.tables,
    partitioned by dump; another run making it meanwhile is no failure: the commit goes on top of that table);
    merges a newer schema as replace_dump does (mergeSchema semantics); returns the committed version. Runs of
    other dumps committing meanwhile are no conflict (delta_io.PARTITION). Failures raise
    jobs.faults.TableWriteError like replace_dump; a table not partitioned by dump is delta_io.LayoutOutdated.
    `on_top_of` appends instead: the partition's files at that version stay (a history's last complete run), any
    committed since (by a run killed before its runs row) go, so a re-run never holds a row twice. `blind` appends
    without reading the partition (nothing removed, no conflict with any writer: the runs table's rows)."""
    path = table_path(warehouse, table)
    check_dump_id(dump_id)
    files = [d for d in files if d is not None]
    stats = stats_of(stats_columns)
    try:
        return _commit(spark, path, table, dump_id, files, schema, stats, on_top_of, blind)
    except LayoutOutdated:
        raise
    except Exception as e:  # Py4JJavaError, ValueError: the cause stays chained
        from jobs.faults import TableWriteError

        raise TableWriteError(table, path, dump_id) from e



def _driver_target(spark: SparkSession, warehouse: str, table: str, dump_id: str) -> FileTarget | None:
    """file_target for the driver's own writes; None where it cannot write the files (write through Spark)."""
    try:
        return file_target(spark, warehouse, table, dump_id)
    except ValueError:
        return None


def replace_rows(spark: SparkSession, warehouse: str, table: Table, dump_id: str, rows: Sequence[dict],
                 stats_columns: Sequence[str] = (), on_top_of: int | None = None) -> str:
    """delta_io.replace_dump (or, with `on_top_of`, append_dump) of a small table's rows the driver holds: one
    Parquet file written by the driver and committed by `commit_dump`, no Spark job, where a DataFrame of them
    cost a state reconstruction and a write job. A warehouse neither local nor s3a goes through Spark. Returns the
    table's path."""
    from jobs.delta_io import append_dump, replace_dump
    from jobs.schemas import table_ddl

    target = _driver_target(spark, warehouse, table.name, dump_id)
    if target is None:
        df = spark.createDataFrame([{**r, PARTITION: dump_id} for r in rows], table_ddl(table))
        if on_top_of is not None:
            return append_dump(df, warehouse, table.name, dump_id, on_top_of, stats_columns)
        return replace_dump(df, warehouse, table.name, dump_id, stats_columns)
    _write_rows(spark, warehouse, target, table, rows, stats_columns, on_top_of, False)
    return table_path(warehouse, table.name)


def append_rows(spark: SparkSession, warehouse: str, table: Table, dump_id: str, rows: Sequence[dict]) -> int:
    """Rows added to a dump's partition in a blind append (one file, one commit that reads nothing, so it conflicts
    with no writer): the runs table's rows. Returns the committed version."""
    from jobs.delta_io import check_layout, last_version
    from jobs.schemas import table_ddl

    target = _driver_target(spark, warehouse, table.name, dump_id)
    if target is not None:
        return _write_rows(spark, warehouse, target, table, rows, (), None, True)
    path = table_path(warehouse, table.name)
    check_layout(spark, path, table.name)
    (spark.createDataFrame([{**r, PARTITION: dump_id} for r in rows], table_ddl(table)).coalesce(1).write
     .format("delta").mode("append").option("mergeSchema", "true").partitionBy(PARTITION).save(path))
    return last_version(spark, path)


def _write_rows(spark: SparkSession, warehouse: str, target: FileTarget, table: Table, rows: Sequence[dict],
                stats_columns: Sequence[str], on_top_of: int | None, blind: bool) -> int:
    """The driver's own file of `rows` and its commit."""
    schema = table.arrow()
    data = pa.Table.from_pylist([{**r, PARTITION: target.dump_id} for r in rows], schema)
    with task_writes(table.name, table_path(warehouse, table.name), target.dump_id):  # full, read-only: named
        part = write_part(target, data, schema, stats_columns, compression=parquet_codec(spark))
    return commit_dump(spark, warehouse, table.name, target.dump_id, [part], schema, stats_columns, on_top_of,
                       blind)


Where = tuple[str, str, Any]
"""A row condition both readers take: (column, ">=" or "in", value); pyarrow prunes row groups by it."""


def dump_rows(spark: SparkSession, warehouse: str, table: str, dump_id: str, version: int,
              columns: Sequence[str] | None = None, where: Where | None = None) -> list[dict] | None:
    """One dump's rows of a table at a version, read by the driver with pyarrow from the files its log names (each
    row a dict of the table's columns, or of `columns`, maps as dicts), only those meeting `where`; None where the
    log or the files cannot answer exactly (`jobs.delta_log`): read those through Spark."""
    part = _dump_part(spark, warehouse, table, dump_id, version)
    if part is None or not part[1].plain:
        return None
    loc, found, adds = part
    names = [f["name"] for f in json.loads(found.metadata["schemaString"])["fields"]]
    if columns is not None:
        names = [n for n in names if n in columns]
    stored = [n for n in names if n != PARTITION]
    fs = loc.filesystem()
    rows = []
    for add in adds:
        path = file_path(loc, add)
        present = set(pq.read_schema(path, filesystem=fs).names)
        if where is not None and where[0] not in present:
            continue  # a file written before the column was: its rows hold null there, which meets no condition
        data = pq.read_table(path, filesystem=fs, columns=[n for n in stored if n in present],
                             filters=None if where is None else [where])
        for r in data.to_pylist(maps_as_pydicts="strict"):
            rows.append({n: dump_id if n == PARTITION else r.get(n) for n in names})
    return rows


def _file_stats(spark: SparkSession, warehouse: str, table: str, dump_id: str, version: int) -> list[dict] | None:
    """The Delta statistics (numRecords, minValues, maxValues, nullCount) of each of one dump's files at a version,
    from the log; None where the log cannot answer exactly."""
    part = partition_files(spark, table_path(warehouse, table), version, PARTITION, dump_id)
    if part is None or not part[0].plain:
        return None
    return [json.loads(add.get("stats") or "{}") for add in part[1]]


def dump_records(spark: SparkSession, warehouse: str, table: str, dump_id: str, version: int) -> int | None:
    """One dump's row count at a version from its files' statistics (numRecords, which every writer here records),
    no Spark job; None where the log cannot answer exactly or a file has no count."""
    files = _file_stats(spark, warehouse, table, dump_id, version)
    counts = None if files is None else [f.get("numRecords") for f in files]
    return None if counts is None or None in counts else sum(int(n) for n in counts)


def stats_max(spark: SparkSession, warehouse: str, table: str, dump_id: str, version: int, column: str
              ) -> tuple[bool, Any]:
    """(known, the largest value of a numeric `column`) over one dump's rows at a version, from the file statistics
    the log holds (maxValues; a number's is exact), no file read: None when it holds no value. Not known where the
    log cannot answer exactly or a file's statistics do not give it: read the rows then."""
    files = _file_stats(spark, warehouse, table, dump_id, version)
    if files is None:
        return False, None
    top = None
    for stats in files:
        rows = stats.get("numRecords")
        value = (stats.get("maxValues") or {}).get(column)
        if value is None:
            if rows is not None and rows == (stats.get("nullCount") or {}).get(column, -1):
                continue  # no value in the file (or no row)
            return False, None
        top = value if top is None else max(top, value)
    return True, top


def all_null(source: FileSource, column: str) -> bool:
    """True when `column` holds no value in any of the source's files, by their Parquet footers' statistics (a file
    without the column holds none); False when some row group may hold one or says nothing."""
    fs = source.filesystem()
    for path in source.paths:
        with fs.open_input_file(path) as f:
            meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if column not in names:
            continue
        i = names.index(column)
        for g in range(meta.num_row_groups):
            chunk = meta.row_group(g).column(i)
            stats = chunk.statistics
            if stats is None or not stats.has_null_count or stats.null_count != meta.row_group(g).num_rows:
                return False
    return True


def frame_parts(df: Any, target: FileTarget, schema: pa.Schema, stats_columns: Sequence[str] = (),
                compression: str = "snappy",
                prepare: Callable[[pa.RecordBatch], pa.Table] | None = None) -> list[dict]:
    """A DataFrame's rows written by its own tasks, one Parquet file a partition (`write_part`), for `commit_dump`:
    the rows never pass Spark's JVM writer, and the commit lists the files without a Spark job. `prepare` turns
    each batch into the table's rows in the task (a join with small driver-side tables, say)."""
    def write(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        if prepare is not None:
            batches = (b for batch in batches for b in prepare(batch).to_batches())
        d = write_part(target, batches, schema, stats_columns, compression)
        yield pa.RecordBatch.from_pydict({"file": [None if d is None else json.dumps(d)]},
                                         pa.schema([("file", pa.string())]))

    return [json.loads(r.file) for r in df.mapInArrow(write, "file string").collect() if r.file is not None]
