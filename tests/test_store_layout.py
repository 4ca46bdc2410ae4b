"""Layout unit tests for filterlib.store: expected bytes and values come from the RocketMQ facts (field tables,
worked examples) or from OpenJDK 17 itself, never from this package's own encoder."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from filterlib.javalang import java_string_hash, java_utf8_decode
from filterlib.store import brokerconf, fastjson
from filterlib.store import commitlog as cl
from filterlib.store import consumequeue as cq
from filterlib.store import consumequeue_ext as ext
from filterlib.store.properties import encode_properties, parse_properties, parse_properties_legacy
from filterlib.store.properties_text import as_dict
from filterlib.store.scan import ScanOptions, decode_file

# (input bytes hex, UTF-16 units of `new String(bytes, UTF_8)` hex, String.hashCode) printed by OpenJDK 17.0.15
JAVA_UTF8 = [
    ("80c2bfa0", "fffd00bffffd", 63048667),
    ("9fc280", "fffd0080", 2031651),
    ("9f9f26c29f", "fffdfffd0026009f", 2015272153),
    ("01efedff3a01a0", "0001fffdfffdfffd003a0001fffd", -1810045030),
    ("ff36e0", "fffd0036fffd", 63044420),
    ("9f068fff80", "fffd0006fffdfffdfffd", 456812564),
    ("9fed9ff4ed", "fffdfffdfffdfffd", 2017367872),
    ("f5a1c0", "fffdfffdfffd", 65074269),
    ("f4f0bf80bf9090", "fffdd8bcdc3ffffdfffd", 2100764512),
    ("90a0a0e09f", "fffdfffdfffdfffdfffd", -1886039875),
    ("dfc29f", "fffd009f", 2031682),
    ("e0a0011d803778", "fffd0001001dfffd00370078", -681789371),
    ("a0ff01a0", "fffdfffd0001fffd", 2015336380),
    ("c0c241ed", "fffdfffd0041fffd", 2015338364),
    ("f0e080ff76ffbf", "fffdfffdfffdfffd0076fffdfffd", -68887722),
    ("dfa0809f", "07e0fffdfffd", 4034432),
    ("edffc2a05780f5", "fffdfffd00a00057fffdfffd", -348049097),
    ("bf01a3e0f5ef", "fffd0001fffdfffdfffdfffd", 1271735524),
    ("c5a09f90a0ed", "0160fffdfffdfffdfffd", -1952520032),
    ("bfc2df9f", "fffdfffd07df", 65010751),
    ("90e0df", "fffdfffdfffd", 65074269),
    ("f5ed01018fedf4", "fffdfffd00010001fffdfffdfffd", 1946043549),
    ("e0f5e0f0c0c0", "fffdfffdfffdfffdfffdfffd", 1662371552),
    ("019fc09f", "0001fffdfffdfffd", 65104060),
    ("ed71e0c2", "fffd0071fffdfffd", 1954499252),
    ("ffffdff0f5", "fffdfffdfffdfffdfffd", -1886039875),
    ("01ffa0", "0001fffdfffd", 2098017),
    ("41a0dff5", "0041fffdfffdfffd", 67010684),
    ("a0c0419f01", "fffdfffd0041fffd0001", -1949020155),
    ("41a09fbf41bf0c", "0041fffdfffdfffd0041fffd000c", -842411596),
]


@pytest.mark.parametrize("hexin,units,h", JAVA_UTF8)
def test_java_utf8_decode_matches_openjdk(hexin: str, units: str, h: int) -> None:
    s = java_utf8_decode(bytes.fromhex(hexin))
    assert s.encode("utf-16-be", "surrogatepass").hex() == units
    assert java_string_hash(s) == h


def test_string_hash_examples_from_facts() -> None:
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("tagA") == 3552231
    assert java_string_hash("*") == 42
    assert java_string_hash("Hello World") == -862545276
    assert java_string_hash("\U0001F600") == 1772899
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("") == 0
    assert java_utf8_decode(bytes.fromhex("eda080")) == "\ufffd"


def _hand_record(*, born: bytes, born_port: int, store: bytes, store_port: int, sysflag: int, body: bytes,
                 topic: bytes, props: bytes, phys: int, v2: bool = False, crc: int | None = None) -> bytes:
    """A record laid out field by field from the facts' table 1.3 (independent of cl.encode_record)."""
    tl = struct.pack(">h", len(topic)) if v2 else bytes([len(topic) & 0xFF])
    fields = [
        struct.pack(">i", -626843477 if v2 else -626843481),                 # MAGICCODE
        struct.pack(">i", (crc if crc is not None else 0x68B7BE43)),         # BODYCRC
        struct.pack(">i", 3),                                                # QUEUEID
        struct.pack(">i", 7),                                                # FLAG
        struct.pack(">q", 42),                                               # QUEUEOFFSET
        struct.pack(">q", phys),                                             # PHYSICALOFFSET
        struct.pack(">i", sysflag),                                          # SYSFLAG
        struct.pack(">q", 1700000000000),                                    # BORNTIMESTAMP
        born + struct.pack(">i", born_port),                                 # BORNHOST
        struct.pack(">q", 1700000000123),                                    # STORETIMESTAMP
        store + struct.pack(">i", store_port),                               # STOREHOST
        struct.pack(">i", 2),                                                # RECONSUMETIMES
        struct.pack(">q", 99),                                               # PREPAREDTRANSACTIONOFFSET
        struct.pack(">i", len(body)), body,                                  # BODY
        tl, topic,                                                           # TOPIC
        struct.pack(">h", len(props)), props,                                # PROPERTIES
    ]
    payload = b"".join(fields)
    return struct.pack(">i", 4 + len(payload)) + payload


def _one_file(tmp_path, data: bytes, size: int = 1024, base: int = 0) -> str:
    p = os.path.join(tmp_path, f"{base:020d}")
    with open(p, "wb") as f:
        f.write(data + b"\0" * (size - len(data)))
    return p


def test_ipv4_v1_record_layout_and_decode(tmp_path) -> None:
    props = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02a\x011\x02"
    rec = _hand_record(born=bytes([10, 0, 0, 1]), born_port=5000, store=bytes([127, 0, 0, 1]), store_port=10911,
                       sysflag=0, body=b"a", topic=b"TopicTest", props=props, phys=0)
    assert len(rec) == 91 + 1 + 9 + len(props)
    assert cl.cal_msg_length(0, 1, 9, len(props)) == len(rec)
    st, size, r = cl.decode_record(rec, 0, check_crc=True)
    assert (st, size) == (cl.OK, len(rec))
    path = _one_file(tmp_path, rec + struct.pack(">ii", 1024 - len(rec), -875286124))
    batches, acc = decode_file(path, ScanOptions(check_crc=True))
    row = batches[0].to_pylist()[0]
    assert row["queue_id"] == 3 and row["flag"] == 7 and row["queue_offset"] == 42
    assert row["born_host"] == "10.0.0.1:5000" and row["store_host"] == "127.0.0.1:10911"
    assert row["born_timestamp"] == 1700000000000 and row["store_timestamp"] == 1700000000123
    assert row["reconsume_times"] == 2 and row["prepared_transaction_offset"] == 99
    assert row["body"] == b"a" and row["body_crc"] == 1756872259 and row["topic"] == "TopicTest"
    assert as_dict(row["properties"]) == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1", "a": "1"}
    assert (row["tags"], row["keys"], row["uniq_key"]) == ("TagA", "k1 k2", "U1")
    assert row["tags_code"] == 2598919
    assert row["offset_msg_id"] == "7F00000100002A9F" + f"{0:016X}"
    assert (acc.records, acc.decoded_bytes, acc.blank_bytes, acc.end_kind) == (1, len(rec), 1024 - len(rec), "blank")
    assert acc.closes


def test_ipv6_hosts_shift_offsets(tmp_path) -> None:
    v6 = bytes.fromhex("105000000000000000050600300c326b")
    rec = _hand_record(born=v6, born_port=1, store=bytes(15) + b"\x01", store_port=2, sysflag=0x30, body=b"",
                       topic=b"T", props=b"", phys=0, crc=0)
    assert len(rec) == 91 + 24 + 1
    path = _one_file(tmp_path, rec)
    batches, acc = decode_file(path)
    row = batches[0].to_pylist()[0]
    assert row["born_host"] == "[1050:0:0:0:5:600:300c:326b]:1"
    assert row["store_host"] == "[0:0:0:0:0:0:0:1]:2"
    assert row["store_timestamp"] == 1700000000123
    assert row["offset_msg_id"] == ("00" * 15 + "01" + "00000002" + f"{0:016X}")
    assert len(row["offset_msg_id"]) == 56
    assert (acc.end_kind, acc.zero_tail_bytes) == ("zero_tail", 1024 - len(rec))


def test_v2_magic_two_byte_topic_length(tmp_path) -> None:
    topic = b"%RETRY%" + b"G" * 150
    rec = _hand_record(born=bytes(4), born_port=0, store=bytes(4), store_port=0, sysflag=0, body=b"",
                       topic=topic, props=b"", phys=0, v2=True, crc=0)
    assert len(rec) == 92 + len(topic)
    row = decode_file(_one_file(tmp_path, rec))[0][0].to_pylist()[0]
    assert row["topic"] == topic.decode() and row["magic_code"] == -626843477


def test_v1_topic_length_is_signed_byte() -> None:
    topic = b"T" * 130
    rec = _hand_record(born=bytes(4), born_port=0, store=bytes(4), store_port=0, sysflag=0, body=b"",
                       topic=topic, props=b"", phys=0, crc=0)
    st, _, _ = cl.decode_record(rec + bytes(16), 0)
    assert st == cl.NEGATIVE_TOPIC_LENGTH


def test_crc_and_blank_constants() -> None:
    assert cl.body_crc(b"a") == 0x68B7BE43 == 1756872259
    assert cl.body_crc(b"") == 0
    assert struct.unpack(">I", struct.pack(">i", cl.BLANK_MAGIC_CODE))[0] == 0xCBD43194
    assert struct.unpack(">I", struct.pack(">i", cl.MESSAGE_MAGIC_CODE))[0] == 0xDAA320A7
    assert struct.unpack(">I", struct.pack(">i", cl.MESSAGE_MAGIC_CODE_V2))[0] == 0xDAA320AB
    assert cl.file_name(1073741824) == "00000000001073741824"


def test_schedule_topic_tags_code_and_bad_delay(tmp_path) -> None:
    props = b"TAGS\x01TagA\x02DELAY\x013\x02"
    rec = _hand_record(born=bytes(4), born_port=0, store=bytes(4), store_port=0, sysflag=0, body=b"",
                       topic=b"SCHEDULE_TOPIC_XXXX", props=props, phys=0, crc=0)
    row = decode_file(_one_file(tmp_path, rec))[0][0].to_pylist()[0]
    assert row["tags_code"] == 1700000000123 + 10000
    bad = _hand_record(born=bytes(4), born_port=0, store=bytes(4), store_port=0, sysflag=0, body=b"",
                       topic=b"SCHEDULE_TOPIC_XXXX", props=b"DELAY\x01x1\x02", phys=0, crc=0)
    batches, acc = decode_file(_one_file(tmp_path, bad))
    assert sum(b.num_rows for b in batches) == 0
    assert acc.damage and acc.damage[0].offset == 0 and "DELAY" in acc.damage[0].reason and acc.closes
    clamp = _hand_record(born=bytes(4), born_port=0, store=bytes(4), store_port=0, sysflag=0, body=b"",
                         topic=b"SCHEDULE_TOPIC_XXXX", props=b"DELAY\x0199\x02", phys=0, crc=0)
    row = decode_file(_one_file(tmp_path, clamp))[0][0].to_pylist()[0]
    assert row["tags_code"] == 1700000000123 + 7200000


def test_crc_mismatch_only_when_checked(tmp_path) -> None:
    rec = _hand_record(born=bytes(4), born_port=0, store=bytes(4), store_port=0, sysflag=0, body=b"b",
                       topic=b"T", props=b"", phys=0)
    path = _one_file(tmp_path, rec + rec)
    assert decode_file(path)[1].records == 2   # the chain never checks PHYSICALOFFSET, like the broker
    batches, acc = decode_file(path, ScanOptions(check_crc=True))
    assert acc.records == 0 and acc.damage[0].reason == cl.REASONS[cl.CRC_MISMATCH]
    assert acc.closes


def test_properties_parse_rules() -> None:
    assert parse_properties(b"a\x011\x02b\x012") == {"a": "1", "b": "2"}
    assert parse_properties(b"a\x011\x02") == {"a": "1"}
    assert parse_properties(b"\x01v\x02k\x01\x02x\x01a\x01b\x02") == {"x": "a\x01b"}
    assert parse_properties(b"a\x011\x02a\x012\x02") == {"a": "2"}
    assert parse_properties_legacy(b"\x01v\x02x\x01a\x01b\x02k\x01v\x02") == {"": "v", "k": "v"}
    assert encode_properties({"a": "1", "b": None, "c": "3"}) == b"a\x011\x02c\x013\x02"
    assert encode_properties({"a": "1"}, trailing_separator=False) == b"a\x011"


def test_scanner_properties_agree_with_parse_rules(tmp_path) -> None:
    props = b"\x01v\x02k\x01\x02x\x01a\x01b\x02a\x011\x02a\x012\x02TAGS\x01T1\x02TAGS\x01T2"
    rec = _hand_record(born=bytes(4), born_port=0, store=bytes(4), store_port=0, sysflag=0, body=b"",
                       topic=b"T", props=props, phys=0, crc=0)
    row = decode_file(_one_file(tmp_path, rec))[0][0].to_pylist()[0]
    assert as_dict(row["properties"]) == {"x": "a\x01b", "a": "2", "TAGS": "T2"}
    assert len(as_dict(row["properties"])) == 3
    assert row["tags"] == "T2" and row["tags_code"] == java_string_hash("T2")


def test_malformed_utf8_topic_and_tags_decoded_like_java(tmp_path) -> None:
    rec = _hand_record(born=bytes(4), born_port=0, store=bytes(4), store_port=0, sysflag=0, body=b"",
                       topic=b"T\xed\xa0\x80", props=b"TAGS\x01\xc0\xc2A\x02", phys=0, crc=0)
    row = decode_file(_one_file(tmp_path, rec))[0][0].to_pylist()[0]
    assert row["topic"] == "T\ufffd"
    assert row["tags"] == "\ufffd\ufffdA"
    assert row["tags_code"] == java_string_hash("\ufffd\ufffdA")


def test_consume_queue_unit_and_pre_blank() -> None:
    unit = cq.encode_unit(65536, 212, 2598919)
    assert unit == bytes.fromhex("0000000000010000" "000000d4" "000000000027a807")
    files = cq.encode_queue_files([(0, 100, 5)], file_size=200, first_queue_offset=12)
    assert list(files) == ["00000000000000000200"]
    data = files["00000000000000000200"]
    assert data[:20] == bytes(8) + b"\x7f\xff\xff\xff" + bytes(8)
    assert data[20:40] == data[:20] and data[40:60] == cq.encode_unit(0, 100, 5)
    assert data[60:] == bytes(140)
    assert cq.cq_file_size(210) == 220 and cq.cq_file_size(6000000) == 6000000
    units = cq.decode_units(data)
    assert cq.valid_count(units) == 3


def test_ext_address_decoration() -> None:
    assert ext.MAX_ADDR == -2147483649
    assert ext.MAX_REAL_OFFSET == 9223372034707292159
    assert ext.decorate(0) == -9223372036854775808
    assert ext.undecorate(-9223372036854775808) == 0
    assert ext.decorate(34) == -9223372036854775808 + 34
    assert ext.is_ext_addr(-2147483649) and not ext.is_ext_addr(-2147483648)
    assert ext.decorate(ext.decorate(5)) == ext.decorate(5)
    assert ext.undecorate(2598919) == 2598919


def test_ext_unit_layout_and_end_marker() -> None:
    u = ext.CqExtUnit(2598919, 1700000000001, bytes(range(14)))
    assert u.encode() == (struct.pack(">h", 34) + bytes.fromhex("000000000027a807")
                          + struct.pack(">q", 1700000000001) + struct.pack(">h", 14) + bytes(range(14)))
    files, addrs = ext.encode_ext_files([u] * 3, file_size=80)
    # 80 - 0 - 4 >= 34, 80 - 34 - 4 = 42 >= 34, 80 - 68 - 4 = 8 < 34: end marker -1 at 68, unit 3 in file 2
    assert list(files) == ["00000000000000000000", "00000000000000000080"]
    assert files["00000000000000000000"][68:70] == b"\xff\xff"
    assert addrs == [ext.decorate(0), ext.decorate(34), ext.decorate(80)]
    got = list(ext.iter_file_units(files["00000000000000000000"]))
    assert [o for o, _ in got] == [0, 34] and got[0][1] == u
    nobm = ext.CqExtUnit(7, 8, None)
    assert nobm.encode() == struct.pack(">hqqh", 20, 7, 8, 0)
    assert ext.read_unit(nobm.encode(), 0).filter_bitmap is None


def test_fastjson_unquoted_integer_keys() -> None:
    text = '{\n\t"offsetTable":{\n\t\t"T@G":{0:12,1:-3,17:4}\n\t},"s":"0","x":[1,2.5,null,true]\n}'
    v = fastjson.loads(text)
    assert v == {"offsetTable": {"T@G": {0: 12, 1: -3, 17: 4}}, "s": "0", "x": [1, 2.5, None, True]}
    assert fastjson.loads(fastjson.dumps(v)) == v
    with pytest.raises(ValueError):
        fastjson.loads("{1.5:2}")


def test_broker_conf_java_properties_syntax() -> None:
    text = ("# comment\n! also comment\n  enablePropertyFilter = true\nenableCalcFilterBitMap:TRUE\n"
            "enableConsumeQueueExt  yes\nbrokerName=broker\\\n    -a\nmaxErrorRateOfBloomFilter=1x\n"
            "expectConsumerNumUseFilter=64\nkey\\ with\\=sep=v\\u0041\\t\nfilterSupportRetry= true\n"
            "messageDelayLevel=1s 2s\r\nempty\n")
    props = brokerconf.parse_properties_text(text)
    assert props["enablePropertyFilter"] == "true"
    assert props["enableConsumeQueueExt"] == "yes"
    assert props["brokerName"] == "broker-a"
    assert props["key with=sep"] == "vA\t"
    assert props["empty"] == "" and props["filterSupportRetry"] == "true"
    conf = brokerconf.BrokerFilterConf.from_properties(props)
    assert conf.enablePropertyFilter and conf.enableCalcFilterBitMap and not conf.enableConsumeQueueExt
    assert conf.maxErrorRateOfBloomFilter == 20 and conf.expectConsumerNumUseFilter == 64
    assert conf.messageDelayLevel == "1s 2s"
    assert cl.parse_delay_levels("1s 2m 1h 1d") == [1000, 120000, 3600000, 86400000]


def test_numpy_units_view_is_big_endian() -> None:
    data = cq.encode_unit(1, 2, -3) + bytes(20)
    u = cq.decode_units(data)
    assert (int(u["offset"][0]), int(u["size"][0]), int(u["tags_code"][0])) == (1, 2, -3)
    assert cq.valid_count(u) == 1 and u.dtype == np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
