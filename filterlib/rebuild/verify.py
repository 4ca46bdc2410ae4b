"""Job 1's `--verify`: a dump's own consume queues (consumequeue/ and consumequeue_ext/) against the rebuild, unit
by unit, with a reason for every difference.

`read_dump_queue` reads one queue as the broker's pull reads it (`filterlib.store.dumpqueue`, the reader job 2's
replay uses too), as Arrow batches.
`diff_batch` turns joined (rebuild, dump) unit pairs into `queue_diff` rows:

- `missing`: the rebuild has a unit at this queue offset, the dump's consume queue has none;
- `extra`: the dump's consume queue has a unit here, the rebuild (the commit log) has none;
- `differs`: both have one and `fields` name the columns that disagree (commit_log_offset, size, tags_code,
  msg_store_time, filter_bitmap).

A bitmap difference between two ext units is accounted for by the rule (`dispatch.explain_bitmap`): the row is
`explained` when the bitmap is the only difference and the rule's blind spots (a registration changed or removed
mid-stream) account for it; any other difference is unexplained.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from filterlib.rebuild.dispatch import explain_bitmap
from filterlib.registry import ConsumerFilterManager
from filterlib.store.consumequeue_ext import is_ext_addr, undecorate
from filterlib.store.dumpqueue import read_chunks
from filterlib.store.storedir import StoreDir

DUMP_UNITS_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commit_log_offset", pa.int64()),
    ("size", pa.int32()),
    ("cq_tags_field", pa.int64()),
    ("tags_code", pa.int64()),
    ("msg_store_time", pa.int64()),
    ("filter_bitmap", pa.binary()),
])

FIELDS = ("commit_log_offset", "size", "tags_code", "msg_store_time", "filter_bitmap")

DIFF_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("kind", pa.string()),
    ("fields", pa.list_(pa.string())),
    ("dump_commit_log_offset", pa.int64()),
    ("rebuild_commit_log_offset", pa.int64()),
    ("dump_size", pa.int32()),
    ("rebuild_size", pa.int32()),
    ("dump_cq_tags_field", pa.int64()),
    ("dump_tags_code", pa.int64()),
    ("rebuild_tags_code", pa.int64()),
    ("dump_msg_store_time", pa.int64()),
    ("rebuild_msg_store_time", pa.int64()),
    ("dump_filter_bitmap", pa.binary()),
    ("rebuild_filter_bitmap", pa.binary()),
    ("explained", pa.bool_()),
    ("reason", pa.string()),
])

MISSING, EXTRA, DIFFERS = "missing", "extra", "differs"


def read_dump_queue(store: StoreDir, topic: str, queue_id: int) -> Iterator[pa.RecordBatch]:
    """One queue of the dump as the pull reads it (`dumpqueue.read_chunks`), a batch per chunk (DUMP_UNITS_SCHEMA).

    tags_code is the tagsCode the filter gets (the ext unit's when the field is an ext address; null when an
    address resolves to no unit), cq_tags_field the CQ unit's own field; msg_store_time and filter_bitmap come
    from the ext unit (null without one; always null on a RocksDB queue, which has no ext units).
    """
    for c in read_chunks(store, topic, queue_id):
        n = len(c)
        if not n:
            continue
        cols = c.ext
        bitmaps = [bytes(cols.bitmaps[i, :cols.bitmap_length[i]]) if cols.has_ext[i] and cols.bitmap_length[i] > 0
                   else None for i in range(n)]
        yield pa.RecordBatch.from_arrays([
            pa.array([topic] * n, pa.string()), pa.array(np.full(n, queue_id, dtype=np.int32)),
            pa.array(c.queue_offset), pa.array(c.commit_log_offset), pa.array(c.size.astype(np.int32)),
            pa.array(c.tags_field), pa.array(cols.tags_code, mask=~cols.tags_code_legal),
            pa.array(cols.store_time, mask=~cols.has_ext), pa.array(bitmaps, pa.binary())],
            schema=DUMP_UNITS_SCHEMA)


def _describe_field(field: str, r: dict, d: dict) -> str:
    """Why one field differs, in words."""
    if field == "commit_log_offset":
        return (f"commit_log_offset: the dump's unit points at {d['commit_log_offset']}, the record with this "
                f"queue offset is at {r['commit_log_offset']}")
    if field == "size":
        return f"size: the dump's unit says {d['size']}, the record's TOTALSIZE is {r['size']}"
    if field == "tags_code":
        if d["tags_code"] is None:
            return (f"tags_code: the dump's tagsCode field {d['cq_tags_field']} is an ext address (offset "
                    f"{undecorate(d['cq_tags_field'])}) that resolves to no ext unit")
        return f"tags_code: the dump has {d['tags_code']}, the record's tagsCode is {r['tags_code']}"
    if field == "msg_store_time":
        if d["msg_store_time"] is None:
            why = ("its tagsCode field is not an ext address" if not is_ext_addr(d["cq_tags_field"])
                   else "its ext address resolves to no unit")
            return f"msg_store_time: the dump's unit has no ext unit ({why}); the rebuild has one"
        if r["msg_store_time"] is None:
            return ("msg_store_time: the dump's unit has an ext unit, the rebuild none (enableConsumeQueueExt off "
                    "in the broker settings given, or the unit is over 32767 bytes)")
        return f"msg_store_time: the dump's ext unit says {d['msg_store_time']}, the record's store time is " \
               f"{r['msg_store_time']}"
    return "filter_bitmap: differs"


def diff_row(r: dict | None, d: dict | None, registry: ConsumerFilterManager, groups: Iterable[str]) -> dict | None:
    """The queue_diff row of one queue offset from the rebuild's unit r and the dump's unit d (None: absent);
    None when they agree."""
    base = r if r is not None else d
    row = {"topic": base["topic"], "queue_id": base["queue_id"], "queue_offset": base["queue_offset"],
           "fields": [], "explained": False}
    for k in ("commit_log_offset", "size", "tags_code", "msg_store_time", "filter_bitmap"):
        row[f"dump_{k}"] = None if d is None else d[k]
        row[f"rebuild_{k}"] = None if r is None else r[k]
    row["dump_cq_tags_field"] = None if d is None else d["cq_tags_field"]
    if d is None:
        row["kind"] = MISSING
        row["reason"] = (f"the commit log record at {r['commit_log_offset']} has this queue offset; the dump's "
                         f"consume queue has no (valid) unit here")
        return row
    if r is None:
        row["kind"] = EXTRA
        row["reason"] = (f"the dump's unit points at commit log offset {d['commit_log_offset']}; no record of the "
                         f"commit log (up to its valid end) gets a unit at this queue offset")
        return row
    fields = [k for k in FIELDS if r[k] != d[k]]
    if not fields:
        return None
    row["kind"] = DIFFERS
    row["fields"] = fields
    reasons = [_describe_field(k, r, d) for k in fields if k != "filter_bitmap"]
    if "filter_bitmap" in fields:
        if r["msg_store_time"] is None or d["msg_store_time"] is None:
            reasons.append("filter_bitmap: only one side has an ext unit")
        else:
            why = explain_bitmap(r["topic"], r["msg_store_time"], r["filter_bitmap"], d["filter_bitmap"], registry,
                                 groups)
            verdict = "explained by the rule" if why.explained else "NOT explained by the rule"
            reasons.append(f"filter_bitmap: {verdict}: " + "; ".join(why.reasons))
            row["explained"] = why.explained and fields == ["filter_bitmap"]
    row["reason"] = " | ".join(reasons)
    return row


def diff_batch(batch: pa.RecordBatch, registry: ConsumerFilterManager, groups: Iterable[str]) -> pa.RecordBatch:
    """queue_diff rows of a batch of joined pairs: topic, queue_id, queue_offset, then r_<column> for the rebuild's
    unit (r_present false: none) and d_<column> for the dump's (d_present false: none)."""
    groups = list(groups)
    out = []
    for row in batch.to_pylist():
        key = {k: row[k] for k in ("topic", "queue_id", "queue_offset")}
        r = {**key, **{k: row[f"r_{k}"] for k in FIELDS}} if row["r_present"] else None
        d = {**key, **{k: row[f"d_{k}"] for k in (*FIELDS, "cq_tags_field")}} if row["d_present"] else None
        diff = diff_row(r, d, registry, groups)
        if diff is not None:
            out.append(diff)
    return pa.RecordBatch.from_pylist(out, schema=DIFF_SCHEMA)
