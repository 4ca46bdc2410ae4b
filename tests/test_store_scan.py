"""Scanner behaviour on generated and damaged commitlog files: splits equal whole-file decodes, the verdict
equals a record-by-record walk of `commitlog.decode_record`, and the byte accounting always closes.

These are INTERNAL CONSISTENCY checks: the files are written by the project's own encoder and the walk uses the
project's own slow decoder, so they show that the fast split scanner agrees with that decoder, not that either
agrees with the broker (tests/test_store_reference.py compares both with real 5.3.3 stores). Seeded, so failures
reproduce."""

from __future__ import annotations

import os
import random
from itertools import pairwise

from filterlib.store import commitlog as cl
from filterlib.store.compression import compress, decompress_body, sys_flag_for
from filterlib.store.properties import encode_properties
from filterlib.store.properties_text import as_dict
from filterlib.store.scan import RangeScan, ScanOptions, decode_file, iter_ranges, merge_reports

FILE = 4096


def _records(rng: random.Random, base: int, n: int) -> bytes:
    """A commitlog file image: records from `base`, a BLANK when the next one does not fit, zeros after."""
    out = bytearray()
    for i in range(n):
        topic = rng.choice(["T", "TopicTest", "%RETRY%" + "g" * 130, "SCHEDULE_TOPIC_XXXX", "Tö"])
        props = {"TAGS": rng.choice(["TagA", "é", "\U0001F600"]), "UNIQ_KEY": f"U{i}"}
        if topic == "SCHEDULE_TOPIC_XXXX":
            props["DELAY"] = str(rng.randint(-1, 20))
        if rng.random() < 0.3:
            props["KEYS"] = "k1 k2"
        body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 120)))
        sf = 0
        if rng.random() < 0.2:
            ctype = rng.choice(["ZLIB", "LZ4", "ZSTD"])
            body, sf = compress(body, ctype), sys_flag_for(ctype)
        rec = cl.encode_record(topic=topic, body=body, properties=encode_properties(props),
                               commit_log_offset=base + len(out), queue_offset=i, sys_flag=sf,
                               born_host=rng.choice(["1.2.3.4:5", "[2001:db8::42]:7"]),
                               store_host=rng.choice(["10.0.0.1:10911", "[::1]:10911"]),
                               store_timestamp=1700000000000 + i)
        if len(rec) + 8 > FILE - len(out):
            out += cl.encode_blank(FILE - len(out))
            break
        out += rec
    return bytes(out + bytes(FILE - len(out)))


def _walk(data: bytes, check_crc: bool) -> tuple[list[int], int, str]:
    """Internal-consistency verdict from the project's own decode_record (not the broker): positions of records,
    where valid data ends, and how."""
    pos, seen = 0, []
    while True:
        if pos == len(data):
            return seen, pos, "eof"
        st, size, _ = cl.decode_record(data, pos, check_crc=check_crc)
        if st != cl.OK:
            return seen, pos, "fail"
        if size == 0:
            return seen, pos, "blank"
        seen.append(pos)
        pos += size


def _check(tmp_path, data: bytes, base: int, check_crc: bool) -> None:
    path = os.path.join(tmp_path, cl.file_name(base))
    with open(path, "wb") as f:
        f.write(data)
    opts = ScanOptions(check_crc=check_crc)
    whole, acc = decode_file(path, opts)
    assert acc.closes, acc
    assert not acc.desync
    rows = [r for b in whole for r in b.to_pylist()]
    seen, end, kind = _walk(data, check_crc)
    assert [r["position"] - base for r in rows] == seen
    assert acc.valid_end == end and acc.decoded_bytes == end
    if kind == "blank":
        assert acc.blank_bytes == len(data) - end
    elif kind == "fail":
        tail = data[end:]
        assert (acc.damaged_bytes > 0) == any(tail)
        assert bool(acc.damage) == any(tail)
    for split in (97, 700, 1500):
        parts, acc2 = decode_file(path, opts, split_bytes=split)
        assert [r for b in parts for r in b.to_pylist()] == rows
        assert (acc2.valid_end, acc2.damaged_bytes, acc2.blank_bytes, acc2.zero_tail_bytes) == \
            (acc.valid_end, acc.damaged_bytes, acc.blank_bytes, acc.zero_tail_bytes)


def test_generated_files_round_trip(tmp_path) -> None:
    """Internal consistency: encode_record → scanner rows == decode_record fields (the project's own codec)."""
    rng = random.Random(7)
    for k in range(4):
        base = k * FILE
        data = _records(rng, base, 60)
        _check(tmp_path, data, base, True)
        path = os.path.join(tmp_path, cl.file_name(base))
        rows = [r for b in decode_file(path)[0] for r in b.to_pylist()]
        for r in rows:
            st, _, ref = cl.decode_record(data, r["position"] - base)
            assert cl.record_fields(ref) == {k2: (as_dict(v) if k2 == "properties" else v)
                                             for k2, v in r.items() if k2 != "position"}
            decompress_body(r["body"], r["sys_flag"])


def test_fuzz_truncated_flipped_zeroed(tmp_path) -> None:
    """Internal consistency on damaged files: the split scanner's verdict equals the decode_record walk."""
    rng = random.Random(11)
    trials = int(os.environ.get("FUZZ_TRIALS", "60"))
    assert trials > 0, "FUZZ_TRIALS must be positive, or this test checks nothing"
    done = 0
    for trial in range(trials):
        base = FILE * rng.randrange(4)
        data = bytearray(_records(rng, base, 40))
        how = trial % 3
        if how == 0:
            data = data[: rng.randrange(len(data))]
        elif how == 1:
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(data) // 2)
                data[i] ^= 1 << rng.randrange(8)
        else:
            i = rng.randrange(len(data) // 2)
            data[i: i + rng.randint(1, 300)] = bytes(min(len(data) - i, 300))[: len(data[i: i + 300])]
        sub = os.path.join(tmp_path, str(trial))
        os.mkdir(sub)
        _check(sub, bytes(data), base, trial % 2 == 0)
        done += 1
    assert done == trials


def test_split_resyncing_inside_a_body_sets_desync(tmp_path) -> None:
    """A split that starts inside a record whose body embeds a complete, CRC-valid record carrying its own
    global offset re-synchronises on that fake record; merge_reports must flag desync, and decode_file must then
    decode the file as one range, yielding only the real records."""
    base = 3 * FILE
    real = []
    fake_at = 200  # file position of the embedded record: inside the first record's body
    head = cl.encode_record(topic="T", body=b"", properties=encode_properties({"UNIQ_KEY": "A"}),
                            commit_log_offset=base)
    body_at = len(head) - len(b"T") - 1 - 2 - len(encode_properties({"UNIQ_KEY": "A"}))
    fake = cl.encode_record(topic="T", body=b"fake", properties=encode_properties({"UNIQ_KEY": "F"}),
                            commit_log_offset=base + fake_at, queue_offset=99)
    body = bytes(fake_at - body_at) + fake + bytes(300)
    first = cl.encode_record(topic="T", body=body, properties=encode_properties({"UNIQ_KEY": "A"}),
                             commit_log_offset=base)
    assert first[fake_at:fake_at + len(fake)] == fake
    data = bytearray(first)
    real.append(0)
    for i in range(3):
        real.append(len(data))
        data += cl.encode_record(topic="T", body=b"x" * i, properties=encode_properties({"UNIQ_KEY": f"B{i}"}),
                                 commit_log_offset=base + len(data), queue_offset=i + 1)
    end = len(data)
    data += cl.encode_blank(FILE - len(data))
    data += bytes(FILE - len(data))
    path = os.path.join(tmp_path, cl.file_name(base))
    with open(path, "wb") as f:
        f.write(data)
    opts = ScanOptions(check_crc=True)
    split = 150  # the second range starts at 150, before the fake record at 200 and the real one at len(first)
    assert split < fake_at < len(first)
    scans = [RangeScan(path, s, e, opts) for s, e in iter_ranges(FILE, split)]
    for sc in scans:
        sc.batches()
    assert scans[1].report.sync == fake_at, "the split scanner re-synchronised on the embedded record"
    assert merge_reports([sc.report for sc in scans]).desync
    batches, acc = decode_file(path, opts, split_bytes=split)
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["position"] - base for r in rows] == real
    assert [r["uniq_key"] for r in rows] == ["A", "B0", "B1", "B2"]
    assert rows[0]["body"] == body
    assert not acc.desync and acc.closes
    assert (acc.records, acc.valid_end, acc.end_kind, acc.blank_bytes) == (4, end, "blank", FILE - end)
    assert [r["position"] - base for r in rows] == _walk(bytes(data), True)[0]


def test_iter_ranges_tiles_file() -> None:
    for size, target in [(0, 10), (1, 10), (4096, 1000), (1 << 30, 256 << 20), (100, 1)]:
        rs = iter_ranges(size, target)
        assert rs[0][0] == 0 and rs[-1][1] == size
        assert all(a[1] == b[0] for a, b in pairwise(rs))
