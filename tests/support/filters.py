"""Filters for tests: a fixed-result SQL92 filter; the filters, units and outcome names of a harness pull replay."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from filterlib.engine.decide import Units
from filterlib.message_filter import ExpressionMessageFilter, make_filter, pull_answer
from filterlib.registry import ConsumerFilterData, ConsumerFilterManager
from filterlib.tags import build_subscription

HARNESS_OUTCOMES = {"SQL_NON_BOOLEAN": "SQL_NULL"}
"""The harness's outcome names that filterlib names otherwise (any other name is the same in both)."""


class Const:
    """A compiled expression with a fixed result (or error)."""

    def __init__(self, value):
        self.value = value

    def evaluate(self, props):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


def sql_setup(value: object = True, born: int = 1000
              ) -> tuple[ConsumerFilterManager, ConsumerFilterData, ExpressionMessageFilter, bytes]:
    """A registry holding one SQL92 record (G, T) whose expression always gives `value`; the record, its filter
    and the bitmap its bloom data sets."""
    m = ConsumerFilterManager()
    data = ConsumerFilterData("G", "T", "a > 1", "SQL92", born_time=born,
                              bloom_filter_data=m.bloom_filter.generate("G#T"), client_version=1,
                              compiled=Const(value))
    f = ExpressionMessageFilter(build_subscription("a > 1", "SQL92", "T"), data, m.bloom_filter)
    hit = m.bloom_filter.bitmap_of([data.bloom_filter_data])
    return m, data, f, hit


MAP = pa.map_(pa.string(), pa.string())


def units_of(sub_row: dict, records: dict) -> tuple[Units, list[dict]]:
    """Every unit the real pull scanned for one subscription, as columns, and the harness rows."""
    rows = [u for q in sub_row["queues"] for u in q["units"]]
    n = len(rows)
    width = max([len(bytes.fromhex(u["bitmapHex"])) for u in rows if u.get("bitmapHex")] or [0])
    bitmaps = np.zeros((n, width), dtype=np.uint8)
    lengths = np.full(n, -1, dtype=np.int64)
    for i, u in enumerate(rows):
        if u["ext"] and u["bitmapHex"] is not None:
            b = bytes.fromhex(u["bitmapHex"])
            lengths[i] = len(b)
            bitmaps[i, :len(b)] = np.frombuffer(b, dtype=np.uint8)
    msgs = [records[u["commitLogOffset"]] for u in rows]
    props = pa.array([list((m["properties"] or {}).items()) for m in msgs], type=MAP)
    return Units(
        tags_code=np.array([0 if u["tagsCode"] is None else int(u["tagsCode"]) for u in rows], dtype=np.int64),
        tags_code_legal=np.array([u["tagsCode"] is not None for u in rows], dtype=bool),
        has_ext=np.array([bool(u["ext"]) for u in rows], dtype=bool),
        ext_store_time=np.array([u["extMsgStoreTime"] if u["ext"] else 0 for u in rows], dtype=np.int64),
        bitmaps=bitmaps, bitmap_length=lengths, properties=props,
        tags=pa.array([(m["properties"] or {}).get("TAGS") for m in msgs], pa.string())), rows


def pulling_filters(run: dict, manager: ConsumerFilterManager
                    ) -> Iterator[tuple[dict, ExpressionMessageFilter]]:
    """(harness subscription row, the filter the broker pulls it with) for every subscription answered OK."""
    broker = run["scenario"]["broker"]
    for sub_row, request in zip(run["pull"]["subscriptions"], run["scenario"]["subscriptions"], strict=True):
        answer = pull_answer(manager, sub_row["topic"], sub_row["group"], sub_row["expression"], sub_row["type"],
                             request.get("subVersion"), posted=sub_row["path"] != "registered",
                             enable_property_filter=broker.get("enablePropertyFilter", True))
        if answer.ok:
            yield sub_row, make_filter(answer.subscription, answer.filter_data, manager,
                                       filter_support_retry=broker.get("filterSupportRetry", False))


def verdict_units(units: pa.Table, slots: list) -> pa.Table:
    """A UNITS_SCHEMA table as job 2's replay takes it (`rows.VERDICT_UNITS_SCHEMA`): its messages' verdicts under
    `slots` in place of their properties and tags, null where the unit has no message (null properties)."""
    from filterlib.engine.decide import layout_of, message_verdicts
    from filterlib.engine.verdicts import to_arrow
    from filterlib.replay.rows import VERDICT_UNITS_SCHEMA

    props = units.column("properties").combine_chunks()
    cols = to_arrow(message_verdicts(slots, props, units.column("tags").combine_chunks()), layout_of(slots))
    cols[0] = pa.compute.if_else(props.is_valid(), cols[0], pa.nulls(len(props), pa.binary()))
    extra = dict(zip(("verdicts", "verdict_errors", "tags_missing"), cols, strict=True))
    return pa.Table.from_arrays([extra[f.name] if f.name in extra else units.column(f.name)
                                 for f in VERDICT_UNITS_SCHEMA], schema=VERDICT_UNITS_SCHEMA)
