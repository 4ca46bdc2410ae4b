"""Job 2's row forms, one call away: one row per decision (`pull_decisions`) and one row per delivered message
(`delivered_messages`), with exactly the columns of `filterlib.tables.PULL_DECISIONS` / `DELIVERED_MESSAGES`,
made from the stored compact tables (the decision matrix, decision_details, decision_codes, pulls, group_stats);
and job 1's messages with their properties as a map (`messages`: `properties['region']`).

The matrix is exploded with Spark SQL functions only: each row meets the subscriptions of its topic (group_stats,
broadcast), the subscription's byte is `substring(decisions, subscription_position + 1, 1)`, its code joins
decision_codes (broadcast). The pull that scanned a unit is the last FOUND / NO_MATCHED_MESSAGE pull of its
subscription and queue that starts at or before it (getMessage scans [request_offset, next_begin_offset), once).
docs/simulate_pull.md gives the same as one SQL statement.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from filterlib import brokerversion, tables
from filterlib import vocabulary as vocab
from filterlib.replay.paging import FOUND, NO_MATCHED_MESSAGE, STATUS_NAMES
from filterlib.store.commitlog import COMPRESSED_FLAG
from filterlib.store.properties_text import SQL_MAP
from jobs import history
from jobs.delta_io import table_path
from jobs.runs import read_dump, read_rows

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("row_forms")
SCANNING = [STATUS_NAMES[FOUND], STATUS_NAMES[NO_MATCHED_MESSAGE]]
"""The statuses of the pulls that scan units."""
SUBSCRIPTION_COLUMNS = ["dump_id", "subscription_index", "consumer_group", "topic", "subscription_type", "expression",
                        "subscription_position", "member", "kept_by"]
"""group_stats' columns every decision row carries (member and kept_by null in a warehouse written before
groups were replayed as their members)."""


PULL_DECISIONS_SQL = """\
WITH m AS (SELECT * FROM delta.`{warehouse}/pull_decisions` WHERE dump_id = '{dump_id}'),
     s AS (SELECT * FROM delta.`{warehouse}/group_stats` WHERE dump_id = '{dump_id}'),
     c AS (SELECT * FROM delta.`{warehouse}/decision_codes` WHERE dump_id = '{dump_id}' AND code > 0),
     d AS (SELECT * FROM delta.`{warehouse}/decision_details` WHERE dump_id = '{dump_id}'),
     p AS (SELECT * FROM delta.`{warehouse}/pulls`
           WHERE dump_id = '{dump_id}' AND status IN ('FOUND', 'NO_MATCHED_MESSAGE'))
SELECT m.dump_id, s.consumer_group, m.topic, s.subscription_index, m.queue_id, m.queue_offset,
       m.commit_log_offset, m.size, m.tags_code, c.outcome, c.layer, c.reason, c.cq_reason,
       coalesce(d.detail, CASE WHEN c.layer = 'commit_log' AND c.sql_value IN ('TRUE', 'FALSE', 'NULL')
                               THEN c.sql_value END) AS detail,
       c.sql_value, c.bloom_false_positive, c.bloom_tested,
       CASE WHEN c.bloom_tested THEN m.bloom_bitmap END AS bloom_bitmap,
       p.pull_index, s.subscription_type, s.expression, s.member, s.kept_by, m.copy
FROM m
JOIN s ON s.topic = m.topic
JOIN c ON c.code = CAST(conv(hex(substring(m.decisions, s.subscription_position + 1, 1)), 16, 10) AS INT)
LEFT JOIN p ON p.subscription_index = s.subscription_index AND p.queue_id = m.queue_id
      AND m.queue_offset >= p.request_offset AND m.queue_offset < p.next_begin_offset
LEFT JOIN d ON d.subscription_index = s.subscription_index AND d.topic = m.topic AND d.queue_id = m.queue_id
           AND d.queue_offset = m.queue_offset
"""
"""The row form of one dump's decisions in plain Spark SQL (docs/simulate_pull.md shows it): what
`pull_decisions` gives. The pull is joined by range here, simple to read; the function pairs each unit with its
pull by a window instead, which stays linear on long queues."""


def _read(spark: SparkSession, warehouse: str, table: str, dump_id: str | None) -> DataFrame:
    """One dump's rows as its last complete run left them (`runs.read_dump`); every dump's, latest, for None."""
    if dump_id is not None:
        return read_dump(spark, warehouse, table, dump_id)
    return spark.read.format("delta").load(table_path(warehouse, table))


def properties_as_map(messages: DataFrame) -> DataFrame:
    """`messages` rows with `properties` as map<string,string>: the stored text turned back into its map
    (`filterlib.store.properties_text.SQL_MAP`), or the map an older table holds, as it is."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    if isinstance(messages.schema["properties"].dataType, MapType):
        return messages
    return messages.withColumn("properties", F.expr(SQL_MAP))


def messages(spark: SparkSession, warehouse: str, dump_id: str | None = None) -> DataFrame:
    """Job 1's messages of one dump (every dump's for None), their properties as a map: `properties['region']`
    reads a property, whichever form the table stores."""
    return properties_as_map(_read(spark, warehouse, "messages", dump_id))


def explode(matrix: DataFrame, subscriptions: DataFrame, codes: DataFrame) -> DataFrame:
    """Each matrix row × each subscription of its topic that scanned it (dump_id, topic, subscription_index,
    subscription_position in `subscriptions`), with the decision code's columns (`codes`: decision_codes)."""
    from pyspark.sql import functions as F

    byte = F.expr("substring(decisions, subscription_position + 1, 1)")
    rows = matrix.join(F.broadcast(subscriptions), ["dump_id", "topic"])
    rows = rows.withColumn("code", F.conv(F.hex(byte), 16, 10).cast("int")).where(F.col("code") > 0)
    return rows.join(F.broadcast(codes), ["dump_id", "code"])


def with_pull_index(rows: DataFrame, pulls: DataFrame) -> DataFrame:
    """`rows` (decisions: dump_id, subscription_index, queue_id, queue_offset) with the pull that scanned each."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = ["dump_id", "subscription_index", "queue_id"]
    starts = pulls.where(F.col("status").isin(SCANNING)).select(
        *keys, F.col("request_offset").alias("queue_offset"), "pull_index", F.lit(0).alias("_ord"))
    units = rows.withColumn("pull_index", F.lit(None).cast("int")).withColumn("_ord", F.lit(1))
    w = Window.partitionBy(*keys).orderBy("queue_offset", "_ord").rowsBetween(Window.unboundedPreceding,
                                                                              Window.currentRow)
    both = units.unionByName(starts, allowMissingColumns=True)
    return both.withColumn("pull_index", F.last("pull_index", ignorenulls=True).over(w)).where(
        F.col("_ord") == 1).drop("_ord")


def decided(spark: SparkSession, warehouse: str, dump_id: str | None = None, units: Column | None = None,
            subscriptions: Collection[int] | None = None, codes: Column | None = None,
            details: bool = True) -> DataFrame:
    """The matrix exploded: one row per (subscription, unit it scanned) with the subscription's and the code's
    columns and, with `details`, decision_details' detail (null where none). Each condition narrows the work
    before the explode: `units` on the matrix's unit columns (topic, queue_id, queue_offset, commit_log_offset),
    `subscriptions` the subscription indexes to explode for (e.g. only those whose counts say they hold an
    outcome; only their topics' units are read), `codes` on decision_codes (e.g. one outcome)."""
    from pyspark.sql import functions as F

    matrix = _read(spark, warehouse, "pull_decisions", dump_id)
    if tables.COPY.name not in matrix.columns:  # a table written before the column existed
        matrix = matrix.withColumn(tables.COPY.name, F.lit(None).cast("string"))
    if units is not None:
        matrix = matrix.where(units)
    subs = _read(spark, warehouse, "group_stats", dump_id)
    if subscriptions is not None:  # their topics from group_stats' rows read on the driver (no Spark job)
        wanted = set(subscriptions)
        subs = subs.where(F.col("subscription_index").isin(sorted(wanted)))
        found = (read_rows(spark, warehouse, "group_stats", dump_id, columns=["subscription_index", "topic"])
                 if dump_id is not None else subs.select("subscription_index", "topic").collect())
        topics = sorted({r["topic"] for r in found if r["subscription_index"] in wanted})
        matrix = matrix.where(F.col("topic").isin(topics))
    code_rows = _read(spark, warehouse, "decision_codes", dump_id)
    if codes is not None:
        code_rows = code_rows.where(codes)
    rows = explode(matrix, subs.select(*(F.col(c) if c in subs.columns else F.lit(None).cast("string").alias(c)
                                         for c in SUBSCRIPTION_COLUMNS)), code_rows)
    if details:
        keys = ["dump_id", "subscription_index", "topic", "queue_id", "queue_offset"]
        rows = rows.join(_read(spark, warehouse, "decision_details", dump_id).select(*keys, "detail"), keys, "left")
    return rows


def pull_decisions(spark: SparkSession, warehouse: str, dump_id: str | None = None,
                   units: Column | None = None, subscriptions: Collection[int] | None = None) -> DataFrame:
    """One row per (subscription, unit it scanned), every column of `tables.PULL_DECISIONS`, for one dump (or
    all); `units`, a condition on the matrix's unit columns (topic, queue_id, queue_offset, commit_log_offset),
    keeps only those units before the explode (a lookup, as explain's, reads only its units' rows);
    `subscriptions`, subscription indexes, only their rows (a group's, as explain's: only their pulls are read)."""
    from pyspark.sql import functions as F

    rows = decided(spark, warehouse, dump_id, units, subscriptions)
    pulls = _read(spark, warehouse, "pulls", dump_id)
    if units is not None:  # a lookup: only the pulls of the queues and subscriptions its few rows have
        keys = rows.select("subscription_index", "queue_id", "queue_offset").distinct().collect()
        pulls = pulls.where(F.col("subscription_index").isin(sorted({k.subscription_index for k in keys}))
                            & F.col("queue_id").isin(sorted({k.queue_id for k in keys})))
        if keys:  # no pull starting after the last unit can have scanned one (the files' statistics skip them)
            pulls = pulls.where(F.col("request_offset") <= max(k.queue_offset for k in keys))
    sql_text = (F.col("layer") == vocab.COMMIT_LOG) & F.col("sql_value").isin("TRUE", "FALSE", "NULL")
    rows = rows.withColumn("detail", F.coalesce(F.col("detail"), F.when(sql_text, F.col("sql_value")))).withColumn(
        "bloom_bitmap", F.when(F.col("bloom_tested"), F.col("bloom_bitmap")))
    rows = with_pull_index(rows, pulls)
    return rows.select(*tables.PULL_DECISIONS.names)


def _dumps(spark: SparkSession, warehouse: str, dump_id: str | None,
           store: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """{dump_id: store root} to read bodies from (`store` for the dump asked for, else job 1's dumps table) and
    {dump_id: broker release} (job 1's dumps table; the default release where it has none)."""
    from pyspark.errors import AnalysisException

    try:
        rows = _read(spark, warehouse, "dumps", dump_id).select("dump_id", "store", "broker_version").collect()
    except AnalysisException:
        rows = []
    versions = {r.dump_id: r.broker_version or brokerversion.DEFAULT for r in rows}
    if dump_id is not None:
        versions.setdefault(dump_id, brokerversion.DEFAULT)
    if store is not None and dump_id is not None:
        return {dump_id: store}, versions
    return {r.dump_id: store or r.store for r in rows}, versions


def delivered_messages(spark: SparkSession, warehouse: str, dump_id: str | None = None,
                       store: str | None = None) -> DataFrame:
    """One row per message a subscription received, every column of `tables.DELIVERED_MESSAGES`: the DELIVERED
    decisions joined to job 1's messages; the body decompressed as the client does, from `messages.body` where
    job 1 wrote it, else read from the dump (`store`, else the store job 1 recorded in the dumps table), else null
    (logged)."""
    from pyspark.sql import functions as F

    decided = pull_decisions(spark, warehouse, dump_id).where(F.col("outcome") == vocab.DELIVERED).select(
        "dump_id", "consumer_group", "topic", "subscription_index", "queue_id", "queue_offset", "commit_log_offset",
        "pull_index", "member", "kept_by", tables.COPY.name)
    stored_messages = messages(spark, warehouse, dump_id)
    stored = F.col("body") if "body" in stored_messages.columns else F.lit(None).cast("binary")
    length = F.length(stored).cast("int")
    if "body_size" in stored_messages.columns:  # job 1 without --bodies: the size stays, the bytes stay in the dump
        length = F.coalesce(length, F.col("body_size").cast("int"))
    m = stored_messages.select(
        "dump_id", "commit_log_offset", F.col("topic").alias("message_topic"), "tags", "keys", "uniq_key",
        "offset_msg_id", "properties", stored.alias("stored_body"), length.alias("stored_body_size"),
        "store_size", "sys_flag", "flag", "born_timestamp", "born_host", "store_timestamp", "store_host",
        "reconsume_times")
    rows = decided.join(m, ["dump_id", "commit_log_offset"]).withColumn(
        "msg_id", F.coalesce("uniq_key", "offset_msg_id"))
    stores, versions = _dumps(spark, warehouse, dump_id, store)
    spans = {} if store is not None else history.spans_of(spark, warehouse, dump_id)
    keeps = {d for d, v in versions.items() if brokerversion.client_keeps_compressed_flag(v)}
    ddl = (", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in rows.schema)
           + ", body binary, client_sys_flag int")
    out = rows.mapInArrow(_with_bodies(stores, store, keeps, spans), ddl)
    return out.select(*tables.DELIVERED_MESSAGES.names)


def _with_bodies(stores: dict[str, str], store: str | None, keeps: set[str], spans: dict[str, list] | None = None):
    """mapInArrow: each delivered message's body and sysFlag as the consumer gets them (stored bodies inflated where
    compressed, missing ones read from the dump, for a broker's history from the newest copy that held the record:
    `spans`; `keeps`: the dumps whose client keeps the compressed flag)."""
    from filterlib.store import fs as sfs

    remote = sfs.snapshot()

    def run(batches):
        from filterlib.rebuild.history import store_of
        from filterlib.store.bodies import read_bodies
        from filterlib.store.compression import client_sys_flags, decompress_body
        from filterlib.store.storedir import StoreDir

        sfs.install(remote)
        opened: dict[str, StoreDir | None] = {}
        for b in batches:
            bodies = b.column("stored_body")
            flags = np.asarray(b.column("sys_flag").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
            missing = np.asarray(bodies.is_null(), dtype=bool)
            need = missing | ((flags & COMPRESSED_FLAG) != 0)
            if need.any():
                values = bodies.to_pylist()
                dumps = b.column("dump_id").to_pylist()
                offsets = b.column("commit_log_offset").to_pylist()
                for i in np.flatnonzero(need & ~missing).tolist():
                    values[i] = decompress_body(values[i], int(flags[i]))
                by_root: dict[str | None, list[int]] = {}
                for i in np.flatnonzero(missing).tolist():
                    root = store_of(offsets[i], (spans or {}).get(dumps[i], ()), stores.get(dumps[i]) or store)
                    by_root.setdefault(root, []).append(i)
                for root, rows in by_root.items():  # one read_bodies call per store: nearby records share reads
                    if root not in opened:
                        opened[root] = _open(root)
                    s = opened[root]
                    got = read_bodies(s, [offsets[i] for i in rows]) if s is not None else [None] * len(rows)
                    for i, body in zip(rows, got, strict=True):
                        values[i] = body
                bodies = pa.array(values, pa.binary())
            cols = {n: b.column(n) for n in b.schema.names}
            cols["body"] = bodies
            kept = np.isin(np.asarray(b.column("dump_id").to_pylist(), dtype=object), list(keeps))
            sizes = np.asarray(b.column("stored_body_size").fill_null(0).to_numpy(zero_copy_only=False))
            cols["client_sys_flag"] = pa.array(client_sys_flags(flags, sizes, kept).astype(np.int32))
            yield pa.RecordBatch.from_pydict(cols)

    return run


def _open(root: str | None):
    """The dump at root, None (logged: bodies stay null) where it cannot be opened."""
    from filterlib.errors import StoreFormatError
    from filterlib.store.storedir import StoreDir

    if root is None:
        log.warning("no body copies in the warehouse and no store to read them from: bodies are null")
        return None
    try:
        return StoreDir(root)
    except StoreFormatError as e:
        log.warning("bodies are null: the dump cannot be read (%s)", e)
        return None
