"""The messages table's properties text (filterlib.store.properties_text): the decode writes exactly the map the
broker's parse gives, as text; Arrow, Python and Spark SQL's documented expression read it back as that map, and
the filter engine reads it as it reads the map."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from filterlib.engine.columns import extract_properties
from filterlib.store import commitlog as cl
from filterlib.store.properties import parse_properties
from filterlib.store.properties_text import (
    MAP_TYPE,
    SQL_MAP,
    SQL_TEXT,
    as_dict,
    from_text,
    map_column,
    text_column,
    to_text,
)
from filterlib.store.scan import decode_file

# Keys and values as a client may send them: separators inside a value, non-ASCII, empty and repeated keys.
_CHARS = st.sampled_from(["a", "b", "TAGS", "é", "日", "\x01", "\x02", "=", " ", "k1", "\U0001f600"])
_TEXT = st.lists(_CHARS, max_size=5).map("".join)
_RAW = st.lists(st.tuples(_TEXT, _TEXT), max_size=8)


def _region(pairs: list[tuple[str, str]], trailing: bool) -> bytes:
    """A PROPERTIES region as a client or broker may write it: pairs as given, separators not escaped."""
    text = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
    return (text if trailing else text[:-1]).encode("utf-8")


def _maps() -> st.SearchStrategy:
    """Parsed maps: what the broker's parse can give (no empty or 0x01/0x02-holding key, no empty or 0x02 value)."""
    key = _TEXT.filter(lambda k: k and "\x01" not in k and "\x02" not in k)
    value = _TEXT.filter(lambda v: v and "\x02" not in v)
    return st.dictionaries(key, value, max_size=6)


@settings(deadline=None, max_examples=150)  # the first example compiles the decode kernel
@given(_RAW, st.booleans())
def test_the_decode_writes_the_broker_parse_as_text(tmp_path_factory, pairs, trailing) -> None:
    """The kernel's text is the 5.x parse of the region written back: empty keys/values and short pieces dropped,
    a repeated key's later value kept, values holding 0x01 intact; and it reads back as that map."""
    region = _region(pairs, trailing)
    path = os.path.join(tmp_path_factory.mktemp("cl"), cl.file_name(0))
    data = b""
    for i in range(3):
        data += cl.encode_record(topic="T", properties=region, queue_offset=i, commit_log_offset=len(data))
    with open(path, "wb") as f:
        f.write(data + b"\0" * 4096)
    batches, _ = decode_file(path)
    texts = pa.Table.from_batches(batches).column("properties").to_pylist()
    want = parse_properties(region)
    assert texts == [to_text(want)] * 3
    assert [as_dict(t) for t in texts] == [want] * 3
    assert map_column(pa.array(texts)).to_pylist() == [list(want.items())] * 3


@settings(deadline=None)  # first calls compile the kernels
@given(st.lists(st.one_of(st.none(), _maps()), max_size=20))
def test_map_and_text_columns_convert_both_ways(maps) -> None:
    arr = pa.array([None if m is None else list(m.items()) for m in maps], type=MAP_TYPE)
    text = text_column(arr)
    assert text.to_pylist() == [to_text(m) for m in maps]
    assert [from_text(t) for t in text.to_pylist()] == maps
    assert map_column(text).equals(arr)
    if len(maps) > 2:  # sliced arrays keep their rows
        assert map_column(text.slice(1)).to_pylist() == arr.slice(1).to_pylist()
        assert text_column(arr.slice(2)).to_pylist() == text.slice(2).to_pylist()


@settings(deadline=None)
@given(st.lists(_maps(), min_size=1, max_size=30), st.lists(st.sampled_from(["a", "b", "TAGS", "é", "zz"]),
                                                            min_size=1, max_size=3))
def test_the_engine_reads_the_text_as_the_map(maps, names) -> None:
    arr = pa.array([list(m.items()) for m in maps], type=MAP_TYPE)
    by_map, by_text = extract_properties(arr, names), extract_properties(text_column(arr), names)
    for name in set(names):
        a, b = by_map[name], by_text[name]
        assert a.pylist() == b.pylist()
        assert np.array_equal(a.codes, b.codes)
        assert [a.pylist()[c] if c >= 0 else None for c in a.codes] == [m.get(name) for m in maps]


def test_spark_sql_reads_the_text_as_the_map(spark) -> None:
    """The documented expression (SQL_MAP; `str_to_map(...)['k']` for one key) gives each row's exact map."""
    from pyspark.sql import functions as F

    maps = [{}, {"a": "1"}, {"TAGS": "TagA", "x": "v\x01w", "é": "日本"}, {"k": "=", "a": "b c"}, None]
    df = spark.createDataFrame([(to_text(m),) for m in maps], "properties string")
    rows = df.select(F.expr(SQL_MAP).alias("m"),
                     F.expr("str_to_map(properties, '\\u0002', '\\u0001')['a']").alias("a")).collect()
    assert [None if r.m is None else dict(r.m) for r in rows] == maps
    assert [r.a for r in rows] == [None, "1", None, "b c", None]
    # and back: an older table's map as the text (SQL_TEXT, what jobs.upgrade writes) is to_text of it, in order
    as_map = df.select(F.expr(SQL_MAP).alias("properties"))
    assert [r.t for r in as_map.select(F.expr(SQL_TEXT).alias("t")).collect()] == [to_text(m) for m in maps]
    nulls = spark.createDataFrame([({"a": "1", "n": None, "z": "2"},)], "properties map<string,string>")
    assert nulls.select(F.expr(SQL_TEXT).alias("t")).first().t == to_text({"a": "1", "n": None, "z": "2"}) == (
        "a\x011\x02z\x012")


def test_job1_stores_text_that_row_forms_and_sql_read_as_the_map(spark, tmp_path) -> None:
    """Job 1 on the demo dump: `messages.properties` is text; `row_forms.messages` gives each row's map, whose
    TAGS and KEYS are the table's own tags and keys columns, and Spark SQL's one-key expression over the Delta table
    reads the same values."""
    from pathlib import Path

    from jobs import build_queues, row_forms
    from jobs.delta_io import table_path

    demo = Path(__file__).resolve().parent.parent / "demo"
    wh = str(tmp_path / "wh")
    assert build_queues.main(["--store", str(demo / "dump"), "--broker-conf", str(demo / "broker.conf"),
                              "--warehouse", wh, "--dump-id", "d1"], spark=spark) == 0
    stored = spark.read.format("delta").load(table_path(wh, "messages"))
    assert stored.schema["properties"].dataType.simpleString() == "string"
    texts = {r.commit_log_offset: r.properties for r in stored.select("commit_log_offset", "properties").collect()}
    rows = row_forms.messages(spark, wh, "d1").select("commit_log_offset", "properties", "tags", "keys").collect()
    assert len(rows) == len(texts) > 100
    for r in rows:
        want = as_dict(texts[r.commit_log_offset])
        assert dict(r.properties) == want
        assert (want.get("TAGS"), want.get("KEYS")) == (r.tags, r.keys)
    by_sql = spark.sql(f"SELECT commit_log_offset, str_to_map(properties, '\\u0002', '\\u0001')['TAGS'] AS t "
                       f"FROM delta.`{table_path(wh, 'messages')}`").collect()
    assert {r.commit_log_offset: r.t for r in by_sql} == {r.commit_log_offset: r.tags for r in rows}
    assert any(r.tags for r in rows)


def test_a_nearly_unique_property_keeps_every_rows_value_and_answer() -> None:
    """Past its first few thousand occurrences an order id stops being looked up (each value its own code): every
    row still reads its own value, and a filter on it answers as the row interpreter does, repeats included."""
    from filterlib import sql92
    from filterlib.engine import Engine

    ids = [f"o-{i}" for i in range(6000)] + [f"o-{i}" for i in range(0, 3000, 3)]
    maps = [{"orderId": v, "region": "eu" if i % 3 else "us"} for i, v in enumerate(ids)]
    for arr in (pa.array([list(m.items()) for m in maps], type=MAP_TYPE), pa.array([to_text(m) for m in maps])):
        cols = extract_properties(arr, ["orderId", "region"])
        order, region = cols["orderId"], cols["region"]
        assert [order.pylist()[c] for c in order.codes] == ids
        assert region.cardinality == 2 and [region.pylist()[c] for c in region.codes] == [m["region"] for m in maps]
        exprs = ["orderId = 'o-9'", "orderId IN ('o-3', 'o-5999') AND region = 'eu'", "orderId <> 'o-1'"]
        results = Engine([sql92.compile(e) for e in exprs]).evaluate(pa.record_batch({"properties": arr}))
        for e, r in zip(exprs, results, strict=True):
            want = [sql92.compile(e).evaluate(m) is True for m in maps]
            assert r.matches.tolist() == want, e
