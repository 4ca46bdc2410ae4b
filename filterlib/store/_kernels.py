"""numba kernels for CommitLog scanning: record validation, record hop, split sync, and field gathers.

Every function works on a uint8 buffer holding file bytes [buf_off, buf_off + len(buf)); positions passed in and
out are buffer-relative. `at_eof` says whether the buffer ends at the end of the file: when it does not and a
record reaches past the buffer, the kernels answer NEED_MORE and the caller re-reads from that record.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from filterlib.kernel_cache import njit
from filterlib.store import commitlog as _cl

MAGIC_V1 = _cl.MESSAGE_MAGIC_CODE
MAGIC_V2 = _cl.MESSAGE_MAGIC_CODE_V2
BLANK = _cl.BLANK_MAGIC_CODE

# Failure reasons are the reference codec's codes (REASONS); the rest are the scanner's own stop statuses.
ST_OK = _cl.OK
ST_TRUNCATED_HEADER = _cl.TRUNCATED_HEADER
ST_SIZE_EXCEEDS_FILE = _cl.SIZE_EXCEEDS_FILE
ST_BAD_MAGIC = _cl.BAD_MAGIC
ST_CRC_MISMATCH = _cl.CRC_MISMATCH
ST_LENGTH_MISMATCH = _cl.LENGTH_MISMATCH
ST_FIELD_OUT_OF_BOUNDS = _cl.FIELD_OUT_OF_BOUNDS
ST_NEGATIVE_TOPIC_LENGTH = _cl.NEGATIVE_TOPIC_LENGTH
ST_BAD_DELAY_LEVEL = _cl.BAD_DELAY_LEVEL
ST_NEGATIVE_TOTAL_SIZE = _cl.NEGATIVE_TOTAL_SIZE
ST_OFFSET_OUTSIDE_FILE = _cl.OFFSET_OUTSIDE_FILE
ST_BLANK = 100
ST_NEED_MORE = 101
ST_RANGE_END = 102
ST_BATCH_FULL = 103
ST_EOF = 104
ST_NOT_FOUND = 105

# The `checks` bits the kernels take (`ScanOptions.checks`): what the release's recovery walk checks per record.
CHECK_CRC = 1  # checkCRCOnRecover: the body CRC
NEGATIVE_SIZE_FAILS = 2  # 5.5.1: TOTALSIZE < 0 fails before the magic code is read
OFFSET_IN_FILE = 4  # 5.5.0 on, recovery after a crash with checkCommitLogOffsetOnRecover: PHYSICALOFFSET in the file
NO_SIZE_BEFORE_MAGIC = 8  # before 5.3.3: no remaining-bytes checks before the magic (a BLANK ends the file whatever
#                           its TOTALSIZE; a message running past the file still fails, when its fields run out)
V1_MAGIC_ONLY = 16  # 4.x: only MESSAGE_MAGIC_CODE is a message (the v2 magic is illegal)

SCHEDULE_TOPIC = np.frombuffer(_cl.SCHEDULE_TOPIC.encode(), dtype=np.uint8).copy()
HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8).copy()
HEXL = np.frombuffer(b"0123456789abcdef", dtype=np.uint8).copy()
_U1 = np.uint64(1)


def make_crc_table() -> np.ndarray:
    """Slicing-by-8 tables for the reflected CRC-32 (IEEE) polynomial."""
    t = np.zeros((8, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for i in range(256):
        c = int(t[0, i])
        for k in range(1, 8):
            c = int(t[0, c & 0xFF]) ^ (c >> 8)
            t[k, i] = c
    return t


CRC_TABLE = make_crc_table()


@njit(cache=True, inline="always")
def be16(b, p):
    v = (np.int64(b[p]) << 8) | np.int64(b[p + 1])
    return v - 65536 if v >= 32768 else v


@njit(cache=True, inline="always")
def be32(b, p):
    v = (np.int64(b[p]) << 24) | (np.int64(b[p + 1]) << 16) | (np.int64(b[p + 2]) << 8) | np.int64(b[p + 3])
    return v - 4294967296 if v >= 2147483648 else v


@njit(cache=True, inline="always")
def be64(b, p):
    hi = be32(b, p)
    lo = be32(b, p + 4)
    if lo < 0:
        lo += 4294967296
    return (hi << 32) | lo


@njit(cache=True)
def crc32(b, p, n, tab):
    """CRC-32 of b[p:p+n] with the top bit cleared (UtilAll.crc32)."""
    c = np.uint32(0xFFFFFFFF)
    i = p
    end = p + n
    while i + 8 <= end:
        c ^= (np.uint32(b[i]) | (np.uint32(b[i + 1]) << 8) | (np.uint32(b[i + 2]) << 16)
              | (np.uint32(b[i + 3]) << 24))
        c = (tab[7, c & 0xFF] ^ tab[6, (c >> 8) & 0xFF] ^ tab[5, (c >> 16) & 0xFF] ^ tab[4, c >> 24]
             ^ tab[3, b[i + 4]] ^ tab[2, b[i + 5]] ^ tab[1, b[i + 6]] ^ tab[0, b[i + 7]])
        i += 8
    while i < end:
        c = tab[0, (c ^ b[i]) & 0xFF] ^ (c >> 8)
        i += 1
    return np.int64(c ^ np.uint32(0xFFFFFFFF)) & 0x7FFFFFFF


@njit(cache=True)
def check_record(b, p, at_eof, file_rem, checks, tab):
    """Validate the record at p like checkMessageAndReturnSize (`checks`: CHECK_CRC, NEGATIVE_SIZE_FAILS,
    NO_SIZE_BEFORE_MAGIC and V1_MAGIC_ONLY bits).

    Returns (status, total, sysflag, body_off, body_len, topic_off, topic_len, props_off, props_len);
    status ST_OK, ST_BLANK, ST_NEED_MORE or a failure reason. file_rem = file bytes from p to the file's end.
    """
    checks = np.int64(checks)
    n = len(b)
    if file_rem <= 4:
        return ST_TRUNCATED_HEADER, -1, 0, 0, 0, 0, 0, 0, 0
    if p + 4 > n:
        return ST_NEED_MORE, 8, 0, 0, 0, 0, 0, 0, 0
    total = be32(b, p)
    if checks & NEGATIVE_SIZE_FAILS and total < 0:
        return ST_NEGATIVE_TOTAL_SIZE, -1, 0, 0, 0, 0, 0, 0, 0
    t4 = total - 4
    if t4 < -2147483648:
        t4 += 4294967296
    exceeds = file_rem - 4 < t4
    if exceeds and not checks & NO_SIZE_BEFORE_MAGIC:
        return ST_SIZE_EXCEEDS_FILE, -1, 0, 0, 0, 0, 0, 0, 0
    if file_rem < 8:
        return ST_FIELD_OUT_OF_BOUNDS, -1, 0, 0, 0, 0, 0, 0, 0
    if p + 8 > n:
        return ST_NEED_MORE, 8, 0, 0, 0, 0, 0, 0, 0
    magic = be32(b, p + 4)
    if magic == BLANK:
        return ST_BLANK, 0, 0, 0, 0, 0, 0, 0, 0
    if magic != MAGIC_V1 and (magic != MAGIC_V2 or checks & V1_MAGIC_ONLY):
        return ST_BAD_MAGIC, -1, 0, 0, 0, 0, 0, 0, 0
    if exceeds:
        return ST_SIZE_EXCEEDS_FILE, -1, 0, 0, 0, 0, 0, 0, 0
    if total < 0:
        return ST_LENGTH_MISMATCH, -1, 0, 0, 0, 0, 0, 0, 0
    # Everything below reads inside [p, p + limit): the file's end, or the buffer's (then NEED_MORE).
    limit = file_rem
    need_more = False
    if p + limit > n:
        limit = n - p
        need_more = not at_eof
    if 52 > limit:
        return (ST_NEED_MORE, max(total, 128), 0, 0, 0, 0, 0, 0, 0) if need_more else (
            ST_FIELD_OUT_OF_BOUNDS, -1, 0, 0, 0, 0, 0, 0, 0)
    sysflag = be32(b, p + 36)
    born = 20 if sysflag & 0x10 else 8
    store = 20 if sysflag & 0x20 else 8
    q = 48 + born + 8 + store + 12
    if q + 4 > limit:
        return (ST_NEED_MORE, max(total, 128), 0, 0, 0, 0, 0, 0, 0) if need_more else (
            ST_FIELD_OUT_OF_BOUNDS, -1, 0, 0, 0, 0, 0, 0, 0)
    body_len = be32(b, p + q)
    q += 4
    body_off = q
    if body_len > 0:
        if body_len > total or q + body_len > limit:
            if body_len <= total and need_more:
                return ST_NEED_MORE, total, 0, 0, 0, 0, 0, 0, 0
            return ST_FIELD_OUT_OF_BOUNDS, -1, 0, 0, 0, 0, 0, 0, 0
        if checks & CHECK_CRC:
            if crc32(b, p + q, body_len, tab) != be32(b, p + 8):
                return ST_CRC_MISMATCH, -1, 0, 0, 0, 0, 0, 0, 0
        q += body_len
    v2 = magic == MAGIC_V2
    tl_size = 2 if v2 else 1
    if q + tl_size > limit:
        return (ST_NEED_MORE, total, 0, 0, 0, 0, 0, 0, 0) if need_more else (
            ST_FIELD_OUT_OF_BOUNDS, -1, 0, 0, 0, 0, 0, 0, 0)
    if v2:
        topic_len = be16(b, p + q)
    else:
        topic_len = np.int64(b[p + q])
        if topic_len >= 128:
            topic_len -= 256
    q += tl_size
    if topic_len < 0:
        return ST_NEGATIVE_TOPIC_LENGTH, -1, 0, 0, 0, 0, 0, 0, 0
    topic_off = q
    if topic_len > total or q + topic_len + 2 > limit:
        if topic_len <= total and need_more:
            return ST_NEED_MORE, total, 0, 0, 0, 0, 0, 0, 0
        return ST_FIELD_OUT_OF_BOUNDS, -1, 0, 0, 0, 0, 0, 0, 0
    q += topic_len
    props_len = be16(b, p + q)
    q += 2
    props_off = q
    if props_len > 0:
        if props_len > total or q + props_len > limit:
            if props_len <= total and need_more:
                return ST_NEED_MORE, total, 0, 0, 0, 0, 0, 0, 0
            return ST_FIELD_OUT_OF_BOUNDS, -1, 0, 0, 0, 0, 0, 0, 0
    calc = 74 + born + store + max(body_len, 0) + tl_size + topic_len + max(props_len, 0)
    if calc != total:
        return ST_LENGTH_MISMATCH, -1, 0, 0, 0, 0, 0, 0, 0
    return ST_OK, total, sysflag, body_off, max(body_len, 0), topic_off, topic_len, props_off, max(props_len, 0)


@njit(cache=True, inline="always")
def is_schedule_topic(b, p, n):
    if n != 19:
        return False
    for i in range(19):
        if b[p + i] != SCHEDULE_TOPIC[i]:
            return False
    return True


@njit(cache=True, inline="always")
def parse_java_int(b, p, n):
    """Integer.parseInt over ASCII bytes: (status, value); status 0 ok, 1 invalid, 2 non-ASCII (decide in Python)."""
    for i in range(n):
        if b[p + i] >= 128:
            return 2, 0
    if n == 0:
        return 1, 0
    i = 0
    neg = False
    if b[p] == 43 or b[p] == 45:
        neg = b[p] == 45
        i = 1
        if n == 1:
            return 1, 0
    v = np.int64(0)
    while i < n:
        c = b[p + i]
        if c < 48 or c > 57:
            return 1, 0
        v = v * 10 + (c - 48)
        if v > 2147483648:
            return 1, 0
        i += 1
    if neg:
        v = -v
    if v > 2147483647:
        return 1, 0
    return 0, v


@njit(cache=True)
def find_delay(b, p, n):
    """Position and length of the last DELAY value in a properties region (the 5.x parse rules), or (-1, 0)."""
    vs = np.int64(-1)
    vl = np.int64(0)
    i = p
    lim = p + n
    while i < lim:
        e = i
        while e < lim and b[e] != 2:
            e += 1
        if e - i >= 7 and b[i] == 68 and b[i + 1] == 69 and b[i + 2] == 76 and b[i + 3] == 65 \
                and b[i + 4] == 89 and b[i + 5] == 1:
            vs = i + 6
            vl = e - vs
        i = e + 1
    return vs, vl


@njit(cache=True, inline="always")
def utf8_valid(b, p, n):
    """Strict UTF-8 validity (what Java decodes without replacement characters)."""
    i = p
    end = p + n
    while i < end:
        c = b[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2:
            return False
        if c < 0xE0:
            if i + 1 >= end or (b[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
            continue
        if c < 0xF0:
            if i + 2 >= end or (b[i + 1] & 0xC0) != 0x80 or (b[i + 2] & 0xC0) != 0x80:
                return False
            if c == 0xE0 and b[i + 1] < 0xA0:
                return False
            if c == 0xED and b[i + 1] >= 0xA0:
                return False
            i += 3
            continue
        if c < 0xF5:
            if i + 3 >= end or (b[i + 1] & 0xC0) != 0x80 or (b[i + 2] & 0xC0) != 0x80 \
                    or (b[i + 3] & 0xC0) != 0x80:
                return False
            if c == 0xF0 and b[i + 1] < 0x90:
                return False
            if c == 0xF4 and b[i + 1] >= 0x90:
                return False
            i += 4
            continue
        return False
    return True


@njit(cache=True, inline="always")
def all_ascii(b, p, n):
    for i in range(p, p + n):
        if b[i] >= 0x80:
            return False
    return True


@njit(cache=True, inline="always")
def java_hash_utf8(b, p, n):
    """String.hashCode of valid UTF-8 bytes, over UTF-16 code units, sign-extended to int64."""
    h = np.int64(0)
    i = p
    end = p + n
    while i < end:
        c = np.int64(b[i])
        if c < 0x80:
            i += 1
        elif c < 0xE0:
            c = ((c & 0x1F) << 6) | (b[i + 1] & 0x3F)
            i += 2
        elif c < 0xF0:
            c = ((c & 0x0F) << 12) | ((b[i + 1] & 0x3F) << 6) | (b[i + 2] & 0x3F)
            i += 3
        else:
            c = ((c & 0x07) << 18) | ((b[i + 1] & 0x3F) << 12) | ((b[i + 2] & 0x3F) << 6) | (b[i + 3] & 0x3F)
            i += 4
            c -= 0x10000
            h = (31 * h + (0xD800 | (c >> 10))) & 0xFFFFFFFF
            c = 0xDC00 | (c & 0x3FF)
        h = (31 * h + c) & 0xFFFFFFFF
    return h - 4294967296 if h >= 2147483648 else h


@njit(cache=True, inline="always")
def write_int(out, q, v):
    if v < 0:
        out[q] = 45
        q += 1
        v = -v
    if v == 0:
        out[q] = 48
        return q + 1
    digits = 0
    t = v
    while t > 0:
        digits += 1
        t //= 10
    for k in range(digits - 1, -1, -1):
        out[q + k] = 48 + v % 10
        v //= 10
    return q + digits


@njit(cache=True, inline="always")
def _write_u8(out, q, v):
    """Append the decimal digits of a byte value."""
    if v >= 100:
        out[q] = 48 + v // 100
        out[q + 1] = 48 + (v // 10) % 10
        out[q + 2] = 48 + v % 10
        return q + 3
    if v >= 10:
        out[q] = 48 + v // 10
        out[q + 1] = 48 + v % 10
        return q + 2
    out[q] = 48 + v
    return q + 1


@njit(cache=True, inline="always")
def write_host(b, p, v6, out, q):
    """Append 'a.b.c.d:port' or '[x:x:x:x:x:x:x:x]:port' (Java getHostAddress, IPv4-mapped shown as IPv4)."""
    if v6:
        mapped = True
        for k in range(10):
            if b[p + k] != 0:
                mapped = False
        if b[p + 10] != 0xFF or b[p + 11] != 0xFF:
            mapped = False
        if mapped:
            for k in range(4):
                if k:
                    out[q] = 46
                    q += 1
                q = write_int(out, q, np.int64(b[p + 12 + k]))
        else:
            out[q] = 91
            q += 1
            for g in range(8):
                if g:
                    out[q] = 58
                    q += 1
                v = (np.int64(b[p + 2 * g]) << 8) | b[p + 2 * g + 1]
                started = False
                for s in range(12, -1, -4):
                    d = (v >> s) & 0xF
                    if d or started or s == 0:
                        out[q] = HEXL[d]
                        q += 1
                        started = True
            out[q] = 93
            q += 1
        port = be32(b, p + 16)
    else:
        for k in range(4):
            if k:
                out[q] = 46
                q += 1
            q = _write_u8(out, q, b[p + k])
        port = be32(b, p + 4)
    out[q] = 58
    q += 1
    return write_int(out, q, port)


@njit(cache=True)
def hop(b, pos, at_eof):
    """Size-only record hop (the scan ceiling): follow TOTALSIZE while the magic is a message magic."""
    n = len(b)
    count = 0
    nbytes = np.int64(0)
    while pos + 8 <= n:
        total = be32(b, pos)
        magic = be32(b, pos + 4)
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or total <= 0:
            break
        if pos + total > n and not at_eof:
            break
        count += 1
        nbytes += total
        pos += total
    return count, nbytes, pos


@njit(cache=True)
def last_nonzero(b, lo, hi):
    """Index of the last non-zero byte in b[lo:hi], or -1."""
    i = hi - 1
    while i >= lo:
        if b[i] != 0:
            return i
        i -= 1
    return -1


@njit(cache=True)
def offset_outside(b, p, file_base, file_size):
    """True when the PHYSICALOFFSET of the record at p lies outside [file_base, file_base + file_size], the range
    5.5.0's recoverAbnormally accepts with checkCommitLogOffsetOnRecover."""
    phys = be64(b, p + 28)
    return phys < file_base or phys > file_base + file_size


@njit(cache=True)
def find_first(b, pos, end, buf_off, file_base, at_eof, file_size, checks, tab):
    """First position in [pos, end) holding a valid record whose PHYSICALOFFSET equals its own global offset.

    buf_off = file offset of b[0]. Returns (status, position): ST_OK, ST_NOT_FOUND, or ST_NEED_MORE with the
    position to re-read from.
    """
    n = len(b)
    stop = min(end, n - 36)
    p = pos
    while p < stop:
        if b[p + 4] == 0xDA and b[p + 5] == 0xA3 and b[p + 6] == 0x20 and (b[p + 7] == 0xA7 or b[p + 7] == 0xAB):
            if be64(b, p + 28) == file_base + buf_off + p:
                st, total, sf, bo, bl, to, tl, po, pl = check_record(b, p, at_eof, file_size - buf_off - p,
                                                                     checks, tab)
                if st == ST_NEED_MORE:
                    return ST_NEED_MORE, p
                if st == ST_OK:
                    bad = False
                    if pl > 0 and is_schedule_topic(b, p + to, tl):
                        vs, vl = find_delay(b, p + po, pl)
                        if vs >= 0:
                            ds, _ = parse_java_int(b, vs, vl)
                            bad = ds == 1
                    if not bad:
                        return ST_OK, p
        p += 1
    if p < end and not at_eof:
        return ST_NEED_MORE, p
    return ST_NOT_FOUND, end


@njit(cache=True, inline="always")
def _same(b, p1, n1, p2, n2):
    if n1 != n2:
        return False
    for i in range(n1):
        if b[p1 + i] != b[p2 + i]:
            return False
    return True


@njit(cache=True, inline="always")
def _same2(x, px, y, py, n):
    for i in range(n):
        if x[px + i] != y[py + i]:
            return False
    return True


@njit(cache=True, inline="always")
def _is_key(b, p, n, k0, k1, k2, k3):
    return n == 4 and b[p] == k0 and b[p + 1] == k1 and b[p + 2] == k2 and b[p + 3] == k3


@njit(cache=True, inline="always")
def _is_uniq(b, p, n):
    return (n == 8 and b[p] == 85 and b[p + 1] == 78 and b[p + 2] == 73 and b[p + 3] == 81 and b[p + 4] == 95
            and b[p + 5] == 75 and b[p + 6] == 69 and b[p + 7] == 89)


@njit(cache=True, inline="always")
def _is_delay(b, p, n):
    return n == 5 and b[p] == 68 and b[p + 1] == 69 and b[p + 2] == 76 and b[p + 3] == 65 and b[p + 4] == 89


@njit(cache=True, inline="always")
def _copy(src, p, n, dst, q):
    """dst[q:q+n] = src[p:p+n]; returns q + n. Unsigned indices: no wraparound checks, so LLVM vectorises it."""
    up = np.uint64(p)
    uq = np.uint64(q)
    for i in range(np.uint64(n)):
        dst[uq + i] = src[up + i]
    return q + n


@njit(cache=True)
def props_pairs(b, a, n, pairs):
    """(key, value) spans of a properties region, 5.x rules, a later duplicate key replacing the value in place."""
    rp = 0
    i = a
    lim = a + n
    while i < lim:
        e = i
        while e < lim and b[e] != 2:
            e += 1
        s = i
        while s < e and b[s] != 1:
            s += 1
        if s > i and s < e - 1:
            dup = -1
            for k in range(rp):
                if _same(b, pairs[k, 0], pairs[k, 1], i, s - i):
                    dup = k
                    break
            if dup >= 0:
                pairs[dup, 2] = s + 1
                pairs[dup, 3] = e - s - 1
            else:
                pairs[rp, 0] = i
                pairs[rp, 1] = s - i
                pairs[rp, 2] = s + 1
                pairs[rp, 3] = e - s - 1
                rp += 1
        i = e + 1
    return rp


# decode_batch's output buffers, passed as one argument (the Python side: scan._Columns.args()). Row r of a batch
# is element r of slow and of each row of fixed_i64 / fixed_i32; a string column is an (offsets, data) pair, row r
# being data[offsets[r]:offsets[r + 1]], and host_*, spec_* hold one such pair per row of the 2-D arrays.
DecodeOut = namedtuple("DecodeOut", [
    "fixed_i64",  # (7, rows): global offset, QUEUEOFFSET, PHYSICALOFFSET, BORNTIMESTAMP, STORETIMESTAMP,
                  # PREPAREDTRANSACTIONOFFSET, tags code
    "fixed_i32",  # (8, rows): TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, SYSFLAG, RECONSUMETIMES, body length
    "slow",  # 1 where Python must decode the row's strings (not valid UTF-8, or a non-ASCII DELAY)
    "body_off", "body_data",
    "topic_off", "topic_data",
    "host_off", "host_data",  # row 0 BORNHOST, row 1 STOREHOST, as text
    "msgid_off", "msgid_data",  # offsetMsgId
    "prop_off", "prop_data",  # the properties as text (`filterlib.store.properties_text`)
    "spec_off", "spec_valid", "spec_data",  # rows 0, 1, 2: the TAGS, KEYS, UNIQ_KEY values (spec_valid 0: none)
])


@njit(cache=True, inline="always")
def _start_columns(out):
    """Zero the first offset of every string column: each row appends at offsets[row] and sets offsets[row + 1]."""
    out.body_off[0] = 0
    out.topic_off[0] = 0
    out.host_off[0, 0] = 0
    out.host_off[1, 0] = 0
    out.msgid_off[0] = 0
    out.prop_off[0] = 0
    out.spec_off[0, 0] = 0
    out.spec_off[1, 0] = 0
    out.spec_off[2, 0] = 0


@njit(cache=True, inline="always")
def _check_at(b, pos, buf_off, file_base, at_eof, file_size, checks, tab):
    """check_record for the record at pos, and with OFFSET_IN_FILE its PHYSICALOFFSET inside the file."""
    st, total, sysflag, bo, bl, to, tl, po, pl = check_record(b, pos, at_eof, file_size - buf_off - pos, checks, tab)
    if st == ST_OK and np.int64(checks) & OFFSET_IN_FILE and offset_outside(b, pos, file_base, file_size):
        st = ST_OFFSET_OUTSIDE_FILE
    return st, total, sysflag, bo, bl, to, tl, po, pl


@njit(cache=True, inline="always")
def _note_special(b, k, kl, vs, vl, tags, keys, delay, uniq):
    """The value spans (start, length) of TAGS, KEYS, DELAY and UNIQ_KEY after the pair key b[k:k+kl], value (vs,
    vl)."""
    span = (np.int64(vs), np.int64(vl))
    if kl == 4:
        if _is_key(b, k, kl, 84, 65, 71, 83):
            tags = span
        elif _is_key(b, k, kl, 75, 69, 89, 83):
            keys = span
    elif kl == 5:
        if _is_delay(b, k, kl):
            delay = span
    elif kl == 8:
        if _is_uniq(b, k, kl):
            uniq = span
    return tags, keys, delay, uniq


@njit(cache=True, inline="always")
def _props_one_pass(b, a, n, txt, q, pairs):
    """Write the pairs of the properties region b[a:a+n] to the properties text txt from q on (key 0x01 value,
    joined by 0x02: `filterlib.store.properties_text`), in one pass that finds 0x01/0x02, copies keys and values and
    ORs the bytes to spot non-ASCII.

    Returns (q, dup, hi, tags, keys, delay, uniq): the text's end; dup when a key repeats (found through bloom bits
    of the region's keys, compared with the earlier keys' spans in txt kept in pairs; the row is then half written
    and the caller redoes it with _props_general); hi, the OR of the bytes; the special keys' value spans, (-1, 0)
    when absent.
    """
    tags = keys = delay = uniq = (np.int64(-1), np.int64(0))
    npairs = 0
    lim = np.uint64(a + n)
    q = np.uint64(q)
    hi = 0
    seen = np.uint64(0)  # bloom bits of this region's keys: only a possible repeat is compared
    dup = False
    i = np.uint64(a)
    while i < lim:
        ks = i
        q_item = q
        if npairs > 0:
            txt[q] = 2
            q += _U1
        kq = q
        c = b[i]
        while i < lim:
            c = b[i]
            if c == 1 or c == 2:
                break
            hi |= c
            txt[q] = c
            q += _U1
            i += _U1
        if i == lim:
            q = q_item
            break
        if c == 2 or i == ks:
            q = q_item
            while i < lim and b[i] != 2:
                hi |= b[i]
                i += _U1
            i += _U1
            continue
        kl = np.int64(i - ks)
        txt[q] = 1
        q += _U1
        i += _U1
        vs = i
        while i < lim:
            c = b[i]
            if c == 2:
                break
            hi |= c
            txt[q] = c
            q += _U1
            i += _U1
        vl = np.int64(i - vs)
        i += _U1
        if vl == 0:
            q = q_item
            continue
        ksi = np.int64(ks)
        bit = np.uint64(1) << np.uint64((kl * 7 + b[ksi] + 3 * b[ksi + kl - 1]) & 63)
        if seen & bit:
            for k in range(npairs):
                if pairs[k, 1] == kl and _same2(txt, pairs[k, 0], b, ksi, kl):
                    dup = True
                    break
            if dup:
                break
        seen |= bit
        pairs[npairs, 0] = np.int64(kq)
        pairs[npairs, 1] = kl
        npairs += 1
        tags, keys, delay, uniq = _note_special(b, ksi, kl, vs, vl, tags, keys, delay, uniq)
    return np.int64(q), dup, hi, tags, keys, delay, uniq


@njit(cache=True, inline="always")
def _props_general(b, a, n, pairs, txt, q):
    """Write the pairs props_pairs finds in b[a:a+n] (a repeated key's later value replacing the first in place)
    to the properties text from q on. Returns (q, tags, keys, delay, uniq) as _props_one_pass."""
    tags = keys = delay = uniq = (np.int64(-1), np.int64(0))
    rp = props_pairs(b, a, n, pairs)
    for k in range(rp):
        ks = pairs[k, 0]
        kl = pairs[k, 1]
        vs = pairs[k, 2]
        vl = pairs[k, 3]
        if k > 0:
            txt[q] = 2
            q += 1
        q = _copy(b, ks, kl, txt, q)
        txt[q] = 1
        q = _copy(b, vs, vl, txt, q + 1)
        tags, keys, delay, uniq = _note_special(b, ks, kl, vs, vl, tags, keys, delay, uniq)
    return q, tags, keys, delay, uniq


@njit(cache=True, inline="always")
def _gather_props(b, a, n, pairs, prop_off, prop_data, row):
    """Row `row` of the properties text column from the region b[a:a+n] (5.x parse rules).

    Returns (slow, tags, keys, delay, uniq): slow when the region is not valid UTF-8 (Python decodes the row), and
    the value spans (start, length) of TAGS, KEYS, DELAY and UNIQ_KEY, (-1, 0) when absent.
    """
    tags = keys = delay = uniq = (np.int64(-1), np.int64(0))
    q = np.int64(prop_off[row])
    slow = False
    if n > 0:
        first = q
        q, dup, hi, tags, keys, delay, uniq = _props_one_pass(b, a, n, prop_data, q, pairs)
        if dup:  # a repeated key (rare): redo the row the general way
            q, tags, keys, delay, uniq = _props_general(b, a, n, pairs, prop_data, first)
            slow = not all_ascii(b, a, n) and not utf8_valid(b, a, n)
        elif hi >= 0x80:
            slow = not utf8_valid(b, a, n)
    prop_off[row + 1] = q
    return slow, tags, keys, delay, uniq


@njit(cache=True, inline="always")
def _copy_topic(b, p, n, topic_off, topic_data, row):
    """Row `row` of the topic column from b[p:p+n]; True when it is not valid UTF-8 (copy and ASCII test in one
    loop)."""
    q = np.int64(topic_off[row])
    hi = 0
    for k in range(n):
        c = b[p + k]
        hi |= c
        topic_data[q + k] = c
    topic_off[row + 1] = q + n
    return hi >= 0x80 and not utf8_valid(b, p, n)


@njit(cache=True, inline="always")
def _tags_code(b, pos, sysflag, topic_at, topic_len, tags, delay, props_slow, delay_ms):
    """The tags code of the record at pos: String.hashCode of TAGS (0 without, or when the properties are not
    valid UTF-8: Python computes it), or for a SCHEDULE_TOPIC_XXXX record with a DELAY level > 0 the delivery time,
    STORETIMESTAMP + delay_ms[level] (the level capped at maxDelayLevel).

    Returns (status, code, slow): ST_BAD_DELAY_LEVEL when DELAY is not an int; slow when it is not ASCII.
    """
    code = np.int64(0)
    if tags[0] >= 0 and not props_slow:
        code = java_hash_utf8(b, tags[0], tags[1])
    if delay[0] >= 0 and is_schedule_topic(b, topic_at, topic_len):
        ds, level = parse_java_int(b, delay[0], delay[1])
        if ds == 1:
            return ST_BAD_DELAY_LEVEL, code, False
        if ds == 2:
            return ST_OK, code, True
        level = min(level, len(delay_ms) - 1)
        if level > 0:
            code = be64(b, pos + 56 + (12 if sysflag & 0x10 else 0)) + delay_ms[level]
    return ST_OK, code, False


@njit(cache=True, inline="always")
def _copy_special(b, span, off, valid, data, row):
    """Row `row` of a TAGS / KEYS / UNIQ_KEY column: the value at span (start, length), null when start < 0."""
    q = np.int64(off[row])
    if span[0] >= 0:
        q = _copy(b, span[0], span[1], data, q)
    valid[row] = span[0] >= 0
    off[row + 1] = q


@njit(cache=True, inline="always")
def _store_host_at(sysflag):
    """Where STOREHOSTADDRESS starts in a record: after BORNHOST (address + port, 8 bytes or IPv6 20) at 48 and
    STORETIMESTAMP."""
    return 76 if sysflag & 0x10 else 64


@njit(cache=True, inline="always")
def _fixed_fields(b, pos, offset, total, sysflag, body_len, tags_code, fixed_i64, fixed_i32, row):
    """Row `row` of the fixed-width columns (DecodeOut.fixed_i64, fixed_i32) of the record at pos, global offset
    `offset`."""
    born_len = 20 if sysflag & 0x10 else 8
    store_at = _store_host_at(sysflag)
    store_len = 20 if sysflag & 0x20 else 8
    fixed_i64[0, row] = offset
    fixed_i64[1, row] = be64(b, pos + 20)
    fixed_i64[2, row] = be64(b, pos + 28)
    fixed_i64[3, row] = be64(b, pos + 40)
    fixed_i64[4, row] = be64(b, pos + 48 + born_len)
    fixed_i64[5, row] = be64(b, pos + store_at + store_len + 4)
    fixed_i64[6, row] = tags_code
    fixed_i32[0, row] = total
    fixed_i32[1, row] = be32(b, pos + 4)
    fixed_i32[2, row] = be32(b, pos + 8)
    fixed_i32[3, row] = be32(b, pos + 12)
    fixed_i32[4, row] = be32(b, pos + 16)
    fixed_i32[5, row] = sysflag
    fixed_i32[6, row] = be32(b, pos + store_at + store_len)
    fixed_i32[7, row] = body_len


@njit(cache=True, inline="always")
def _host_text(b, p, v6, prev_p, prev_v6, off, data, row):
    """Row `row` of a host column: the text of the address + port at p (write_host), copied from the previous row
    when that row's address and port bytes (at prev_p) are the same, as the store host's nearly always are."""
    q = np.int64(off[row])
    if row > 0 and v6 == prev_v6 and _same2(b, prev_p, b, p, 20 if v6 else 8):
        q = _copy(data, off[row - 1], off[row] - off[row - 1], data, q)
    else:
        q = write_host(b, p, v6, data, q)
    off[row + 1] = q


@njit(cache=True, inline="always")
def _offset_msg_id(b, pos, store_at, store_len, off, data, row):
    """Row `row` of the offsetMsgId column: hex of the store address (+ port) and PHYSICALOFFSET of the record at
    pos; an IPv4-mapped IPv6 address is written as IPv4 but zero-padded to the 28-byte width."""
    q = np.int64(off[row])
    start = q
    a = pos + store_at
    width = store_len + 8
    alen = store_len - 4
    if store_len == 20:
        mapped = b[a + 10] == 0xFF and b[a + 11] == 0xFF
        for k in range(10):
            if b[a + k] != 0:
                mapped = False
        if mapped:
            a += 12
            alen = 4
    for k in range(alen + 4):
        v = b[a + k]
        data[q] = HEX[v >> 4]
        data[q + 1] = HEX[v & 15]
        q += 2
    for k in range(8):
        v = b[pos + 28 + k]
        data[q] = HEX[v >> 4]
        data[q + 1] = HEX[v & 15]
        q += 2
    while q - start < 2 * width:
        data[q] = 48
        q += 1
    off[row + 1] = q


@njit(cache=True)
def decode_batch(b, pos, end, buf_off, file_base, at_eof, file_size, checks, tab, delay_ms, want_body, avail, out):
    """Decode records from pos while they start before end into the caller's column buffers `out` (DecodeOut).

    A batch holds at most len(out.slow) rows and `avail` record bytes (a bigger first record still counts); every
    string buffer holds `avail` bytes, host/msgid buffers 56 bytes a row.
    Returns (status, stop_pos, rows). status: ST_RANGE_END (pos >= end), ST_BATCH_FULL, ST_BLANK / failure reason
    at stop_pos, ST_EOF (pos == file end) or ST_NEED_MORE (re-read from stop_pos). delay_ms[level] is the delay
    for a level (index 0 unused); len(delay_ms) - 1 = maxDelayLevel. Properties follow the 5.x parse rules.
    want_body: 0 copies no body, 1 every body, 2 only compressed ones (sysflag bit 0); fixed_i32[7] holds every
    row's body length either way.
    """
    pairs = np.empty((10930, 4), dtype=np.int64)  # the properties stage's scratch, room for any region's pairs
    return _decode_rows(b, pos, end, buf_off, file_base, at_eof, file_size, checks, tab, delay_ms, want_body, avail,
                        out, pairs)


@njit(cache=True, _nrt=False)
def _decode_rows(b, pos, end, buf_off, file_base, at_eof, file_size, checks, tab, delay_ms, want_body, avail, out,
                 pairs):
    """decode_batch's loop, one record a turn through the stages above.

    Compiled without NRT (_nrt=False, as numba's own string helpers are): each array a stage takes would otherwise
    be increfed and decrefed per row (atomic ops, more than doubling the time), and nothing here allocates, which
    numba then refuses at compile time.
    """
    _start_columns(out)
    rows = 0
    consumed = np.int64(0)
    status = ST_RANGE_END
    prev_pos = np.int64(0)  # the previous row's position and SYSFLAG, for _host_text
    prev_flags = 0
    while True:
        if pos >= end:
            status = ST_RANGE_END
            break
        if buf_off + pos == file_size:
            status = ST_EOF
            break
        if rows == len(out.slow):
            status = ST_BATCH_FULL
            break
        st, total, sysflag, bo, bl, to, tl, po, pl = _check_at(b, pos, buf_off, file_base, at_eof, file_size, checks,
                                                               tab)
        if st != ST_OK:
            status = st
            break
        if rows > 0 and consumed + total > avail:
            status = ST_BATCH_FULL
            break
        consumed += total
        slow, tags, keys, delay, uniq = _gather_props(b, pos + po, pl, pairs, out.prop_off, out.prop_data, rows)
        topic_slow = _copy_topic(b, pos + to, tl, out.topic_off, out.topic_data, rows)
        st, tags_code, delay_slow = _tags_code(b, pos, sysflag, pos + to, tl, tags, delay, slow, delay_ms)
        if st != ST_OK:
            status = st
            break
        _copy_special(b, tags, out.spec_off[0], out.spec_valid[0], out.spec_data[0], rows)
        _copy_special(b, keys, out.spec_off[1], out.spec_valid[1], out.spec_data[1], rows)
        _copy_special(b, uniq, out.spec_off[2], out.spec_valid[2], out.spec_data[2], rows)
        _fixed_fields(b, pos, file_base + buf_off + pos, total, sysflag, bl, tags_code, out.fixed_i64, out.fixed_i32,
                      rows)
        out.slow[rows] = 1 if slow or topic_slow or delay_slow else 0
        body_q = np.int64(out.body_off[rows])
        if want_body == 1 or (want_body == 2 and (sysflag & 1) != 0):
            body_q = _copy(b, pos + bo, bl, out.body_data, body_q)
        out.body_off[rows + 1] = body_q
        store_at = _store_host_at(sysflag)
        _host_text(b, pos + 48, sysflag & 0x10, prev_pos + 48, prev_flags & 0x10, out.host_off[0], out.host_data[0],
                   rows)
        _host_text(b, pos + store_at, sysflag & 0x20, prev_pos + _store_host_at(prev_flags), prev_flags & 0x20,
                   out.host_off[1], out.host_data[1], rows)
        _offset_msg_id(b, pos, store_at, 20 if sysflag & 0x20 else 8, out.msgid_off, out.msgid_data, rows)
        prev_pos = pos
        prev_flags = sysflag
        rows += 1
        pos += total
    return status, pos, rows
