"""CommitLog record layout (RocketMQ 5.3.x): constants, single-record encode/decode, host and message-id text.

This is the slow, obvious reference codec: the writer, tests and the damage reports use it; bulk decoding goes
through `filterlib.store.scan`, which must agree with `decode_record` on every input.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from filterlib.javalang import java_parse_int, java_string_hash, java_utf8_decode
from filterlib.store.properties import parse_properties

MESSAGE_MAGIC_CODE = -626843481
MESSAGE_MAGIC_CODE_V2 = -626843477
BLANK_MAGIC_CODE = -875286124
END_FILE_MIN_BLANK_LENGTH = 8

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700

QUEUE_OFFSET_POSITION = 20
PHY_POS_POSITION = 28
SYSFLAG_POSITION = 36
BORN_HOST_POSITION = 48

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DEFAULT_COMMITLOG_FILE_SIZE = 1 << 30

# Reasons a record fails the broker's scanner (checkMessageAndReturnSize); codes are shared with the scanner.
OK = 0
TRUNCATED_HEADER = 1
SIZE_EXCEEDS_FILE = 2
BAD_MAGIC = 3
CRC_MISMATCH = 4
LENGTH_MISMATCH = 5
FIELD_OUT_OF_BOUNDS = 6
NEGATIVE_TOPIC_LENGTH = 7
BAD_DELAY_LEVEL = 8
NEGATIVE_TOTAL_SIZE = 9
OFFSET_OUTSIDE_FILE = 10
REASONS = {
    TRUNCATED_HEADER: "fewer than 5 bytes left for a record header",
    SIZE_EXCEEDS_FILE: "TOTALSIZE runs past the end of the file",
    BAD_MAGIC: "illegal magic code",
    CRC_MISMATCH: "body CRC mismatch",
    LENGTH_MISMATCH: "TOTALSIZE differs from the length computed from the fields (torn record)",
    FIELD_OUT_OF_BOUNDS: "a field runs past the end of the file or of the record",
    NEGATIVE_TOPIC_LENGTH: "negative topic length",
    BAD_DELAY_LEVEL: "DELAY property of a SCHEDULE_TOPIC_XXXX record is not a Java int",
    NEGATIVE_TOTAL_SIZE: "negative TOTALSIZE (5.5.1 fails it before reading the magic code, a BLANK's included)",
    OFFSET_OUTSIDE_FILE: "PHYSICALOFFSET outside the file (recovery after a crash with checkCommitLogOffsetOnRecover, "
                         "5.5.0 on)",
}


def parse_delay_levels(text: str = DEFAULT_DELAY_LEVELS) -> list[int]:
    """Delay milliseconds per level (index 0 = level 1) from `messageDelayLevel`, as DefaultMessageStore parses it."""
    units = {"s": 1000, "m": 60000, "h": 3600000, "d": 86400000}
    out = []
    for item in text.split(" "):
        out.append(int(item[:-1]) * units[item[-1]])
    return out


def cal_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, v2: bool = False) -> int:
    """TOTALSIZE for the given field lengths (MessageExtEncoder.calMsgLength)."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    return 74 + born + store + max(body_len, 0) + (2 if v2 else 1) + topic_len + max(props_len, 0)


def body_crc(body: bytes) -> int:
    """BODYCRC as the broker stores it: CRC-32 with the top bit cleared (UtilAll.crc32)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def file_name(offset: int) -> str:
    """Mapped-file name for a start offset: 20-digit zero-padded decimal (UtilAll.offset2FileName)."""
    return f"{offset:020d}"


def is_mapped_file_name(name: str) -> bool:
    """True for a mapped-file name as `file_name` writes it (commitlog, consume queue and ext files alike)."""
    return len(name) == 20 and name.isascii() and name.isdigit()


def parse_host(text: str) -> tuple[bytes, int]:
    """'ip:port' or '[ipv6]:port' → (address bytes, port)."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") else host
    return ipaddress.ip_address(host).packed, int(port)


def format_host(addr: bytes, port: int) -> str:
    """Host text as Java prints `getHostAddress() + ":" + port`, IPv6 in brackets and uncompressed."""
    if len(addr) == 16 and addr[:12] == b"\0" * 10 + b"\xff\xff":
        addr = addr[12:]
    if len(addr) == 4:
        return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"
    groups = struct.unpack(">8H", addr)
    return "[" + ":".join(f"{g:x}" for g in groups) + f"]:{port}"


def offset_msg_id(store_addr: bytes, store_port: int, phys_offset: int) -> str:
    """offsetMsgId as MessageDecoder.decode builds it (uppercase hex of store address, port, offset)."""
    width = len(store_addr) + 12
    if len(store_addr) == 16 and store_addr[:12] == b"\0" * 10 + b"\xff\xff":
        store_addr = store_addr[12:]
    raw = store_addr + struct.pack(">iq", store_port, phys_offset)
    return (raw + b"\0" * (width - len(raw))).hex().upper()


@dataclass
class Record:
    """One CommitLog message record with every stored field (strings already decoded the Java way)."""

    store_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)
    tags_code: int = 0
    offset_msg_id: str = ""

    @property
    def tags(self) -> str | None:
        """The TAGS property or None."""
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        """The KEYS property or None."""
        return self.properties.get("KEYS")

    @property
    def uniq_key(self) -> str | None:
        """The UNIQ_KEY property or None."""
        return self.properties.get("UNIQ_KEY")


def decode_record(buf: bytes | memoryview, pos: int, *, check_crc: bool = False,
                  delay_levels: list[int] | None = None, negative_size_fails: bool = False,
                  size_before_magic: bool = True, v2_magic: bool = True) -> tuple[int, int, Record | None]:
    """Validate and decode the record at `pos` like checkMessageAndReturnSize (5.5.1's with negative_size_fails:
    a negative TOTALSIZE fails before the magic code is read; before 5.3.3, without size_before_magic, the
    remaining-bytes check waits for the magic, so a BLANK ends the file whatever its size; 4.x, without v2_magic,
    takes the v2 magic for an illegal one).

    Returns (status, size, record): status OK with the record; OK with size 0 and None for a BLANK filler;
    otherwise a reason code (REASONS) with size -1.
    """
    n = len(buf)
    rem = n - pos
    if rem <= 4:
        return TRUNCATED_HEADER, -1, None
    (total,) = struct.unpack_from(">i", buf, pos)
    if negative_size_fails and total < 0:
        return NEGATIVE_TOTAL_SIZE, -1, None
    size_left = total - 4 if total - 4 >= -(1 << 31) else total - 4 + (1 << 32)  # Java int: totalSize - 4 wraps
    exceeds = rem - 4 < size_left
    if exceeds and size_before_magic:
        return SIZE_EXCEEDS_FILE, -1, None
    if rem < 8:
        return FIELD_OUT_OF_BOUNDS, -1, None
    (magic,) = struct.unpack_from(">i", buf, pos + 4)
    if magic == BLANK_MAGIC_CODE:
        return OK, 0, None
    if magic != MESSAGE_MAGIC_CODE and (magic != MESSAGE_MAGIC_CODE_V2 or not v2_magic):
        return BAD_MAGIC, -1, None
    if exceeds:
        return SIZE_EXCEEDS_FILE, -1, None
    if total < 0:
        return LENGTH_MISMATCH, -1, None
    try:
        (crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = struct.unpack_from(">iiiqqiq", buf, pos + 8)
        p = pos + 48
        alen = 16 if sys_flag & BORNHOST_V6_FLAG else 4
        born_addr = bytes(buf[p:p + alen])
        (born_port, store_ts) = struct.unpack_from(">iq", buf, p + alen)
        p += alen + 12
        slen = 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4
        store_addr = bytes(buf[p:p + slen])
        (store_port, reconsume, prep_off, body_len) = struct.unpack_from(">iiqi", buf, p + slen)
        p += slen + 20
        body = b""
        if body_len > 0:
            if body_len > total or p + body_len > n:
                return FIELD_OUT_OF_BOUNDS, -1, None
            body = bytes(buf[p:p + body_len])
            if check_crc and body_crc(body) != crc:
                return CRC_MISMATCH, -1, None
            p += body_len
        v2 = magic == MESSAGE_MAGIC_CODE_V2
        if v2:
            (topic_len,) = struct.unpack_from(">h", buf, p)
            p += 2
        else:
            (topic_len,) = struct.unpack_from(">b", buf, p)
            p += 1
        if topic_len < 0:
            return NEGATIVE_TOPIC_LENGTH, -1, None
        if topic_len > total or p + topic_len > n:
            return FIELD_OUT_OF_BOUNDS, -1, None
        topic = java_utf8_decode(bytes(buf[p:p + topic_len]))
        p += topic_len
        (props_len,) = struct.unpack_from(">h", buf, p)
        p += 2
        props: dict[str, str] = {}
        tags_code = 0
        if props_len > 0:
            if props_len > total or p + props_len > n:
                return FIELD_OUT_OF_BOUNDS, -1, None
            props = parse_properties(bytes(buf[p:p + props_len]))
            tags = props.get("TAGS")
            if tags:
                tags_code = java_string_hash(tags)
            delay = props.get("DELAY")
            if topic == SCHEDULE_TOPIC and delay is not None:
                level = java_parse_int(delay)
                if level is None:
                    return BAD_DELAY_LEVEL, -1, None
                table = delay_levels if delay_levels is not None else parse_delay_levels()
                level = min(level, len(table))
                if level > 0:
                    tags_code = store_ts + table[level - 1]
    except struct.error:
        return FIELD_OUT_OF_BOUNDS, -1, None
    if cal_msg_length(sys_flag, body_len, topic_len, props_len, v2) != total:
        return LENGTH_MISMATCH, -1, None
    rec = Record(total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
                 format_host(born_addr, born_port), store_ts, format_host(store_addr, store_port), reconsume,
                 prep_off, body, topic, props, tags_code, offset_msg_id(store_addr, store_port, phys))
    return OK, total, rec


def encode_record(*, topic: str | bytes, body: bytes = b"", properties: bytes | str = b"", queue_id: int = 0,
                  flag: int = 0, queue_offset: int = 0, commit_log_offset: int = 0, sys_flag: int = 0,
                  born_timestamp: int = 0, born_host: str = "127.0.0.1:0", store_timestamp: int = 0,
                  store_host: str = "127.0.0.1:10911", reconsume_times: int = 0,
                  prepared_transaction_offset: int = 0, crc: int | None = None, v2: bool | None = None) -> bytes:
    """Encode one record as MessageExtEncoder + doAppend lay it out; IPv6 host bits are set like the broker does."""
    topic_b = topic.encode() if isinstance(topic, str) else topic
    props_b = properties.encode() if isinstance(properties, str) else properties
    born_addr, born_port = parse_host(born_host)
    store_addr, store_port = parse_host(store_host)
    if len(born_addr) == 16:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store_addr) == 16:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    if v2 is None:
        v2 = len(topic_b) > 127
    total = cal_msg_length(sys_flag, len(body), len(topic_b), len(props_b), v2)
    parts = [
        struct.pack(">iiiiiqqiq", total, MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE,
                    body_crc(body) if crc is None else crc, queue_id, flag, queue_offset, commit_log_offset,
                    sys_flag, born_timestamp),
        born_addr, struct.pack(">iq", born_port, store_timestamp), store_addr,
        struct.pack(">iiqi", store_port, reconsume_times, prepared_transaction_offset, len(body)), body,
        struct.pack(">h", len(topic_b)) if v2 else struct.pack(">B", len(topic_b)), topic_b,
        struct.pack(">h", len(props_b)), props_b,
    ]
    out = b"".join(parts)
    assert len(out) == total
    return out


def encode_blank(remaining: int) -> bytes:
    """The 8-byte BLANK filler header the broker writes when a record does not fit the rest of a file."""
    return struct.pack(">ii", remaining, BLANK_MAGIC_CODE)


def record_fields(rec: Record) -> dict[str, Any]:
    """A record as a plain dict keyed by the Arrow column names (for comparisons in tests and tools)."""
    return {
        "store_size": rec.store_size, "magic_code": rec.magic_code, "body_crc": rec.body_crc,
        "queue_id": rec.queue_id, "flag": rec.flag, "queue_offset": rec.queue_offset,
        "commit_log_offset": rec.commit_log_offset, "sys_flag": rec.sys_flag,
        "born_timestamp": rec.born_timestamp, "born_host": rec.born_host, "store_timestamp": rec.store_timestamp,
        "store_host": rec.store_host, "reconsume_times": rec.reconsume_times,
        "prepared_transaction_offset": rec.prepared_transaction_offset, "body": rec.body,
        "body_size": len(rec.body), "topic": rec.topic,
        "properties": rec.properties, "tags": rec.tags, "keys": rec.keys, "uniq_key": rec.uniq_key,
        "tags_code": rec.tags_code, "offset_msg_id": rec.offset_msg_id,
    }
