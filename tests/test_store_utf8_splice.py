"""Rows with malformed UTF-8 among many good ones: the scanner re-decodes only those rows the Java way and
splices them into its Arrow columns; every column must equal a batch built record by record from
`commitlog.decode_record`, and the bad rows' strings must be what `new String(bytes, UTF_8)` makes of the raw
bytes (java_utf8_decode, checked against OpenJDK in test_store_layout.py), properties split on 0x02 then 0x01.

Seeded; the files are written by the project's own encoder (internal consistency plus the Java decoding rule)."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pytest

from filterlib.javalang import java_string_hash, java_utf8_decode
from filterlib.store import commitlog as cl
from filterlib.store.properties import encode_properties
from filterlib.store.properties_text import to_text
from filterlib.store.scan import SCHEMA, ScanOptions, decode_file

BASE = 1 << 30

# (topic bytes, raw properties bytes) of the malformed rows, cycled
BAD = [
    (b"T\xffopic", b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U\x02"),
    (b"TopicTest", b"TAGS\x01caf\xe9\x02UNIQ_KEY\x01U-\xc3\x02"),
    (b"TopicTest", b"city\x01Z\xfcrich\x02KEYS\x01\xe2\x82 k\x02a\x01b\x02"),
    (b"TopicTest", b"k\xff\x01first\x02other\x01x\x02k\xfe\x01second\x02"),  # both keys decode to "k\ufffd"
    (b"\xed\xa0\x80surrogate", b"a\xc3\x01v\x02\xf0\x9f\x98\x01w\x02TAGS\x01\xf4\x90\x80\x80\x02"),
    (b"caf\xe9", b"\x80\x01\xbf\x02KEYS\x01ok\x02TAGS\x01\xe0\x80\x80x\x02"),
    ("Tö".encode(), b"TAGS\x01\xc0\xaf\x02x\x01\xc3\xa9\xc3\x02\x01\x02\x01v\x02k\x01\x02"),
]


def _expected_props(raw: bytes) -> dict[str, str]:
    """The broker's map: split on 0x02, then at the first 0x01, decode each piece the Java way, drop items
    with an empty key or value, a later duplicate key wins (0x01/0x02 never belong to a malformed unit)."""
    out: dict[str, str] = {}
    for item in raw.split(b"\x02"):
        key, sep, val = item.partition(b"\x01")
        k, v = java_utf8_decode(key), java_utf8_decode(val)
        if sep and k and v:
            out[k] = v
    return out


def _good(rng: random.Random, i: int) -> tuple[bytes, bytes]:
    topic = rng.choice(["TopicTest", "orders", "Tö", "%RETRY%g"]).encode()
    props = {"TAGS": rng.choice(["TagA", "é", "\U0001F600"]), "UNIQ_KEY": f"U{i}", "region": "eu"}
    if rng.random() < 0.5:
        props["KEYS"] = f"k{i} order-{i}"
    return topic, encode_properties(props)


def _file(tmp_path, rows: list[tuple[bytes, bytes]]) -> tuple[str, bytes, list[int]]:
    out = bytearray()
    starts = []
    for i, (topic, props) in enumerate(rows):
        starts.append(len(out))
        out += cl.encode_record(topic=topic, body=bytes([i % 251]) * (i % 40), properties=props,
                                commit_log_offset=BASE + len(out), queue_offset=i, queue_id=i % 4,
                                store_timestamp=1700000000000 + i)
    path = os.path.join(tmp_path, cl.file_name(BASE))
    with open(path, "wb") as f:
        f.write(out)
    return path, bytes(out), starts


def _reference(data: bytes, starts: list[int]) -> pa.Table:
    """The rows decode_record gives, one record at a time, up to the first record it rejects."""
    rows = []
    for s in starts:
        st, _, rec = cl.decode_record(data, s)
        if st != cl.OK:
            break
        f = cl.record_fields(rec)
        f["properties"] = to_text(f["properties"])
        rows.append({"position": BASE + s, **f})
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _scan(path: str, batch_rows: int) -> pa.Table:
    batches, acc = decode_file(path, ScanOptions(batch_rows=batch_rows))
    assert acc.closes and not acc.desync
    assert all(b.schema == SCHEMA for b in batches)
    return pa.Table.from_batches(batches, schema=SCHEMA)


def _assert_columns_equal(got: pa.Table, exp: pa.Table) -> None:
    assert got.schema == exp.schema == SCHEMA
    assert got.num_rows == exp.num_rows
    for name in SCHEMA.names:
        g, e = got.column(name).combine_chunks(), exp.column(name).combine_chunks()
        g.validate(full=True)
        assert g.equals(e), name


def _assert_bad_rows(got: pa.Table, bad_at: dict[int, tuple[bytes, bytes]]) -> None:
    topic = got.column("topic").to_pylist()
    props = got.column("properties").to_pylist()
    tags = got.column("tags").to_pylist()
    keys = got.column("keys").to_pylist()
    uniq = got.column("uniq_key").to_pylist()
    codes = got.column("tags_code").to_pylist()
    for i, (t, p) in bad_at.items():
        exp = _expected_props(p)
        assert topic[i] == java_utf8_decode(t)
        assert props[i] == to_text(exp)
        assert (tags[i], keys[i], uniq[i]) == (exp.get("TAGS"), exp.get("KEYS"), exp.get("UNIQ_KEY"))
        assert codes[i] == (java_string_hash(exp["TAGS"]) if exp.get("TAGS") else 0)


def test_expected_props_rule_examples() -> None:
    """The split rule on a few rows by hand: U+FFFD per malformed unit, keys colliding after decoding merge."""
    assert _expected_props(BAD[3][1]) == {"k\ufffd": "second", "other": "x"}
    assert _expected_props(BAD[4][1]) == {"a\ufffd": "v", "\ufffd": "w", "TAGS": "\ufffd" * 4}
    assert _expected_props(BAD[6][1]) == {"TAGS": "\ufffd\ufffd", "x": "é\ufffd"}
    assert java_utf8_decode(BAD[0][0]) == "T\ufffdopic"


@pytest.mark.parametrize("batch_rows", [65536, 500])
def test_few_malformed_rows_among_many_good(tmp_path, batch_rows) -> None:
    """0.3% malformed rows (first row, last row, adjacent pairs, batch edges): spliced into the fast columns."""
    rng = random.Random(11)
    n = 3000
    bad_idx = sorted({0, 1, 499, 500, 1234, 2000, 2001, n - 1})
    rows = [_good(rng, i) for i in range(n)]
    bad_at = {}
    for j, i in enumerate(bad_idx):
        rows[i] = bad_at[i] = BAD[j % len(BAD)]
    path, data, starts = _file(tmp_path, rows)
    got = _scan(path, batch_rows)
    _assert_columns_equal(got, _reference(data, starts))
    assert got.num_rows == n
    _assert_bad_rows(got, bad_at)


def test_mostly_malformed_rows(tmp_path) -> None:
    """Many flagged rows per batch (the take path): same columns as the record-by-record decode."""
    rng = random.Random(12)
    rows = [BAD[i % len(BAD)] if rng.random() < 0.4 else _good(rng, i) for i in range(1200)]
    bad_at = {i: r for i, r in enumerate(rows) if r in BAD}
    path, data, starts = _file(tmp_path, rows)
    for batch_rows in (65536, 100):
        got = _scan(path, batch_rows)
        _assert_columns_equal(got, _reference(data, starts))
        _assert_bad_rows(got, bad_at)


def test_failing_record_after_malformed_rows_cuts_the_batch(tmp_path) -> None:
    """A SCHEDULE_TOPIC_XXXX record whose non-ASCII DELAY is no Java int stops the scan (BAD_DELAY_LEVEL) after
    malformed rows of the same batch were spliced; valid data ends at that record."""
    rng = random.Random(13)
    rows = [_good(rng, i) for i in range(800)]
    for i in (3, 100, 398):
        rows[i] = BAD[i % len(BAD)]
    rows[400] = (b"SCHEDULE_TOPIC_XXXX", encode_properties({"DELAY": "1é", "TAGS": "x"}))
    rows[401] = BAD[0]
    path, data, starts = _file(tmp_path, rows)
    assert cl.decode_record(data, starts[400])[0] == cl.BAD_DELAY_LEVEL
    batches, acc = decode_file(path, ScanOptions())
    assert acc.valid_end == starts[400] and acc.end_kind != "eof"
    got = pa.Table.from_batches(batches, schema=SCHEMA)
    _assert_columns_equal(got, _reference(data, starts))
    assert got.num_rows == 400
    _assert_bad_rows(got, {i: rows[i] for i in (3, 100, 398)})
