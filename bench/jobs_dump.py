"""A synthetic broker store for the job benchmarks: real-format CommitLog files with realistic properties, and
per filter count a store root (hard links to the same commitlog files) with its consumerFilter.json and broker.conf.

One topic, 8 queues (round robin, per-queue QUEUEOFFSET), ~740 B per record: ~50 tags, region (8 values, missing
on 5% of the records), level (4 values), an integer amount 0–10000, a unique orderId, KEYS and UNIQ_KEY unique per
record, a text body of 285–685 bytes (64-symbol alphabet: compressible like text, not like a constant). Every
record goes through `filterlib.store.commitlog.encode_record` (CRC included); a file ends with a BLANK filler when
the next record does not fit, the last file with its zero tail as a live broker leaves it. Generated once per size
and reused (`.complete` marker), like bench_decode's dump.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from bench.bench_engine import LEVELS, REGIONS, TAGS, filters
from filterlib.registry import ConsumerFilterManager
from filterlib.store import commitlog as cl
from filterlib.store.properties import encode_properties

TOPIC = "TopicTest"
QUEUES = 8
FILE_SIZE = 1 << 30
BLOOM_F = 20
STORE_TIME0 = 1_700_000_000_000
_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,:", dtype=np.uint8)


def parse_size(text: str) -> int:
    """'1G', '100M', '64K' or a byte count."""
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * mult)


def _write_file(path: str, base: int, size: int, seq0: int, last: bool, rng: np.random.Generator) -> int:
    """One commitlog file from global record number seq0; returns the records written."""
    pool = _ALPHABET[rng.integers(0, len(_ALPHABET), 1 << 20)].tobytes()
    chunk = 1 << 16
    seq = seq0
    pos = 0
    out = bytearray()
    with open(path + ".tmp", "wb") as f:
        while True:
            tag = rng.integers(0, len(TAGS), chunk).tolist()
            region = rng.integers(0, len(REGIONS), chunk).tolist()
            no_region = (rng.random(chunk) < 0.05).tolist()
            level = rng.integers(0, len(LEVELS), chunk).tolist()
            amount = rng.integers(0, 10001, chunk).tolist()
            blen = rng.integers(285, 686, chunk).tolist()
            boff = rng.integers(0, len(pool) - 640, chunk).tolist()
            v6 = (rng.random(chunk) < 0.1).tolist()
            for j in range(chunk):
                props = {"TAGS": TAGS[tag[j]], "KEYS": f"k{seq} order-{seq}",
                         "UNIQ_KEY": f"7F0000010C3B18B4AAC2{seq:012X}", "CLUSTER": "DefaultCluster", "WAIT": "true",
                         "region": None if no_region[j] else REGIONS[region[j]], "level": LEVELS[level[j]],
                         "amount": str(amount[j]), "orderId": f"o-{seq}"}
                rec = cl.encode_record(
                    topic=TOPIC, body=pool[boff[j]:boff[j] + blen[j]], properties=encode_properties(props),
                    queue_id=seq % QUEUES, queue_offset=seq // QUEUES, commit_log_offset=base + pos,
                    born_timestamp=STORE_TIME0 + seq - 3, store_timestamp=STORE_TIME0 + seq,
                    born_host="[2001:db8::42]:51234" if v6[j] else "10.0.0.7:51234", store_host="10.0.0.1:10911")
                if len(rec) + (0 if last else 8) > size - pos:
                    if not last:
                        out += cl.encode_blank(size - pos)
                    f.write(out)
                    f.truncate(size)  # the rest of the mapped file: zeros
                    os.replace(path + ".tmp", path)
                    return seq - seq0
                out += rec
                pos += len(rec)
                seq += 1
                if len(out) >= 64 << 20:
                    f.write(out)
                    out.clear()


def generate(root: str, total: int) -> list[str]:
    """ceil(total / 1 GiB) commitlog files under root/commitlog (reused when complete); returns their paths."""
    nfiles = max(1, -(-total // FILE_SIZE))
    size = min(FILE_SIZE, total)
    cdir = os.path.join(root, "commitlog")
    done = os.path.join(root, ".complete")
    paths = [os.path.join(cdir, cl.file_name(i * size)) for i in range(nfiles)]
    if os.path.exists(done) and all(os.path.isfile(p) and os.path.getsize(p) == size for p in paths):
        return paths
    os.makedirs(cdir, exist_ok=True)
    rng = np.random.default_rng(17)
    seq = 0
    for i, p in enumerate(paths):
        seq += _write_file(p, i * size, size, seq, i == nfiles - 1, rng)
    with open(done, "w") as f:
        json.dump({"records": seq, "files": nfiles, "file_size": size}, f)
    return paths


def records(root: str) -> int:
    """Records the generator wrote (from the .complete marker)."""
    with open(os.path.join(root, ".complete")) as f:
        return int(json.load(f)["records"])


def filter_specs(k: int) -> list[dict]:
    """K SQL92 registrations on the topic (bench_engine's seeded selectors; K=32 is a prefix of K=256)."""
    return [{"group": f"G{i:03d}", "topic": TOPIC, "expression": e, "type": "SQL92", "clientVersion": 1}
            for i, e in enumerate(filters(k) if k else [])]


def bloom_n(k: int) -> int:
    """expectConsumerNumUseFilter for K filters (the broker's default 32, or K when more)."""
    return max(32, k)


def store_root(root: str, k: int) -> str:
    """root/stores/k<K>: hard links to the commitlog files, config/consumerFilter.json written with filterlib's
    registry (bornTime 1, so every message counts under job 1's rule, as the harness's rebuild registers them)
    and a broker.conf (ext, CalcBitMap and the property filter on; bloom f=20, n=max(32, K))."""
    dest = os.path.join(root, "stores", f"k{k}")
    cdir = os.path.join(dest, "commitlog")
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(cdir)
    names = sorted(os.listdir(os.path.join(root, "commitlog")))
    for name in names:
        os.link(os.path.join(root, "commitlog", name), os.path.join(cdir, name))
    n = bloom_n(k)
    manager = ConsumerFilterManager(BLOOM_F, n)
    for s in filter_specs(k):
        assert manager.register(s["topic"], s["group"], s["expression"], s["type"], s["clientVersion"], now=1)
    os.makedirs(os.path.join(dest, "config"))
    manager.persist(os.path.join(dest, "config", "consumerFilter.json"), now=2)
    size = os.path.getsize(os.path.join(cdir, names[0]))
    with open(os.path.join(dest, "broker.conf"), "w") as f:
        f.write(f"brokerClusterName=DefaultCluster\nbrokerName=broker-a\nenablePropertyFilter=true\n"
                f"enableCalcFilterBitMap=true\nenableConsumeQueueExt=true\nexpectConsumerNumUseFilter={n}\n"
                f"maxErrorRateOfBloomFilter={BLOOM_F}\nfilterSupportRetry=false\nmappedFileSizeCommitLog={size}\n")
    return dest
