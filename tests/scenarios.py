"""Seeded scenario generators for the reference harness's `store` mode (schema: tests/reference/PROTOCOL.md).

Every function is a pure function of its arguments: the same seed gives the same scenario dict, so the
refharness cache (keyed by the scenario's hash) answers repeated runs without re-running Java.
"""

from __future__ import annotations

import base64
import random

TOPIC = "TopicTest"
TAG_EXPR = "TagA || TagC"
SQL_EXPR = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"
BORN_BASE = 1_700_000_000_000

# "Aa"/"BB" collide with each other; "UBgA" collides with "TagA" (the broker passes it, the client drops it).
TAGS = ["TagA", "TagB", "TagC", "TagD", "tagA", "Aa", "BB", "UBgA", "TagA ", "", None]
# Values of property `a` that stress SQL92 numeric coercion; None = property absent.
A_VALUES = ["0", "1", "2", "3", "4", "-1", "+2", "03", " 5", " 2", "5.5", "3.0", "1e3", "NaN", "",
            "99999999999999999999", "2147483648", "-2147483649", "abc", None]
IPV4 = ["10.0.0.1", "192.168.1.20", "127.0.0.1", "::ffff:10.1.2.3"]
IPV6 = ["1050::5:600:300c:326b", "::1", "fe80::1", "2001:db8::42"]
COMPRESS = [None, None, None, {"type": "zlib", "level": 5}, {"type": "lz4"}, {"type": "zstd", "level": 3},
            {"type": "legacy-zlib"}]


def _host(rng: random.Random, v6: bool) -> str:
    ip = rng.choice(IPV6 if v6 else IPV4)
    port = rng.randint(1, 65535)
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _body(rng: random.Random, i: int) -> dict:
    if rng.random() < 0.3:
        return {"bodyBase64": base64.b64encode(bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))).decode()}
    return {"body": f"message {i} " + "x" * rng.randint(0, 300)}


def _message(rng: random.Random, i: int, topic: str, queues: int, *, v6_share: float = 0.4) -> dict:
    m = {"kind": "message", "id": f"m{i}", "topic": topic, "queueId": rng.randrange(queues),
         "bornTimestamp": BORN_BASE + 7 * i, "flag": rng.choice([0, 0, 1, 255]),
         "bornHost": _host(rng, rng.random() < v6_share), **_body(rng, i)}
    if rng.random() < v6_share:
        m["storeHost"] = _host(rng, True)
    tag = rng.choice(TAGS)
    if tag is not None:
        m["tags"] = tag
    if rng.random() < 0.5:
        m["keys"] = [f"k{i}", f"order-{rng.randrange(1000)}"] if rng.random() < 0.5 else f"key-{i}"
    props = {}
    a = rng.choice(A_VALUES)
    if a is not None:
        props["a"] = a
    if rng.random() < 0.3:
        props["b"] = rng.choice(["x", "y", "1", "true", "false", ""])
    if rng.random() < 0.05:
        props["TRACE_ON"] = "true"
    if props:
        m["props"] = props
    c = rng.choice(COMPRESS)
    if c is not None:
        m["compress"] = c
    return m


def tag_and_sql_scenario(seed: int, n_messages: int = 120) -> dict:
    """One topic over several 4 KiB commit log files, IPv4 and IPv6 hosts, tags with hash collisions, SQL coercion
    stress values, a few delayed / transactional / retry records, and the subscriptions `TagA || TagC` (G_TAG)
    and the issue's SQL92 expression (G_SQL, registered before the first message so the bloom layer is live; G_POSTED
    posts it with the pull, so no bloom data and every unit reaches the commit log layer)."""
    rng = random.Random(seed)
    queues = 2
    events: list[dict] = [{"kind": "register", "group": "G_SQL", "topic": TOPIC, "expression": SQL_EXPR,
                           "clientVersion": 1}]
    pending_tx: list[str] = []
    for i in range(n_messages):
        m = _message(rng, i, TOPIC, queues)
        r = rng.random()
        if r < 0.05:
            m["delayLevel"] = rng.randint(1, 20)
        elif r < 0.12:
            m["tx"] = "prepared"
            pending_tx.append(m["id"])
        elif r < 0.15:
            m["retry"] = {"group": "G_TAG", "originalTopic": TOPIC}
        events.append(m)
        if pending_tx and rng.random() < 0.3:
            events.append({"kind": rng.choice(["commit", "commit", "rollback"]), "ref": pending_tx.pop(0)})
    return {
        "broker": {"enableConsumeQueueExt": True, "enableCalcFilterBitMap": True, "enablePropertyFilter": True},
        "store": {"mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 200,
                  "mappedFileSizeConsumeQueueExt": 512},
        "transactionMode": "broker5",
        "topics": [{"name": TOPIC, "readQueueNums": queues, "writeQueueNums": queues}],
        "groups": ["G_TAG", "G_SQL", "G_POSTED"],
        "events": events,
        "subscriptions": [
            {"group": "G_TAG", "topic": TOPIC, "type": "TAG", "expression": TAG_EXPR},
            {"group": "G_SQL", "topic": TOPIC, "type": "SQL92", "expression": SQL_EXPR},
            {"group": "G_POSTED", "topic": TOPIC, "type": "SQL92", "expression": SQL_EXPR, "path": "posted"},
        ],
    }


def varied_scenario(seed: int, n_messages: int = 200) -> dict:
    """Several topics, filter registrations/unregistrations interleaved with messages (bloom bits change mid-stream,
    some messages predate a filter's bornTime), both transaction modes by seed, every compression, delays, retry
    records including a >127-byte retry topic (magic v2), and TAG, SQL92, posted and retry subscriptions."""
    rng = random.Random(seed)
    broker = {"enableConsumeQueueExt": rng.random() < 0.8, "enableCalcFilterBitMap": True,
              "expectConsumerNumUseFilter": rng.choice([4, 32, 64]), "maxErrorRateOfBloomFilter": rng.choice([5, 20]),
              "enablePropertyFilter": True, "filterSupportRetry": rng.random() < 0.5}
    tx_mode = "store" if seed % 2 else "broker5"
    topics = [{"name": "TopicA", "readQueueNums": 3, "writeQueueNums": 3},
              {"name": "TopicB", "readQueueNums": 1, "writeQueueNums": 1, "topicFilterType": "MULTI_TAG"},
              {"name": "Topic_" + "c" * 100, "readQueueNums": 2, "writeQueueNums": 2}]
    long_group = "G" + "L" * 124
    sql_exprs = ["a is not null and a between 0 and 3", "b = 'x' or b = 'true'", "TAGS in ('TagA', 'BB')",
                 "a > 1.5", "a = 'x' or", "a <> 5"]
    groups = ["G1", "G2", "G3", long_group]
    events: list[dict] = []
    versions: dict[str, int] = {}
    pending_tx: list[str] = []
    for i in range(n_messages):
        if rng.random() < 0.06:
            g = rng.choice(groups[:3])
            if rng.random() < 0.25 and g in versions:
                events.append({"kind": "unregister", "group": g})
            else:
                versions[g] = versions.get(g, 0) + rng.choice([0, 1, 1, 2])
                events.append({"kind": "register", "group": g, "topic": rng.choice(topics[:2])["name"],
                               "expression": rng.choice(sql_exprs), "clientVersion": versions[g]})
        t = rng.choice(topics)
        m = _message(rng, i, t["name"], t["writeQueueNums"], v6_share=0.5)
        r = rng.random()
        if r < 0.06:
            m["delayLevel"] = rng.randint(1, 18)
        elif r < 0.14:
            m["tx"] = "prepared"
            pending_tx.append(m["id"])
        elif r < 0.2:
            g = rng.choice(groups)
            m["retry"] = {"group": g, "originalTopic": t["name"]}
            m["reconsumeTimes"] = rng.randint(1, 5)
        events.append(m)
        if pending_tx and rng.random() < 0.3:
            events.append({"kind": rng.choice(["commit", "rollback"]), "ref": pending_tx.pop(0)})
        if rng.random() < 0.02:
            events.append({"kind": "sleep", "ms": rng.randint(1, 5)})
    subs = [{"group": "G1", "topic": "TopicA", "expression": "TagA || TagC"},
            {"group": "G2", "topic": "TopicB", "expression": "Aa"},
            {"group": "G3", "topic": "TopicA", "type": "SQL92", "expression": "a is not null and a between 0 and 3",
             "path": "posted"}]
    for g in groups:
        subs.append({"group": g, "topic": f"%RETRY%{g}", "expression": "*"})
    for g, v in versions.items():
        for t in topics[:2]:
            subs.append({"group": g, "topic": t["name"], "type": "SQL92", "expression": "a between 0 and 3",
                         "subVersion": v})
    return {
        "broker": broker,
        "store": {"mappedFileSizeCommitLog": 8192, "mappedFileSizeConsumeQueue": 200,
                  "mappedFileSizeConsumeQueueExt": 512},
        "transactionMode": tx_mode,
        "topics": topics,
        "groups": groups,
        "events": events,
        "subscriptions": subs,
        "offsets": [{"topic": "TopicA", "group": "G1", "queueId": 0, "offset": 1}],
    }


def pull_answers_scenario(seed: int, enable_property_filter: bool, n_messages: int = 40) -> dict:
    """Every answer PullMessageProcessor gives before reading the store, for one broker setting.

    With `enable_property_filter` off (the broker's default) every SQL92 subscription that gets past the filter-data
    checks is refused with SYSTEM_ERROR; on, those pull normally. Either way: a registered filter asked for with a
    newer subVersion is FILTER_DATA_NOT_LATEST (checked before SYSTEM_ERROR), a group that never registered (or
    whose expression did not compile) is FILTER_DATA_NOT_EXIST, and a posted subscription FilterAPI cannot build
    (empty SQL92 expression, TAG `||`) is SUBSCRIPTION_PARSE_FAILED. TAG subscriptions are always OK."""
    rng = random.Random(seed)
    queues = 2
    def register(group: str, expression: str, version: int) -> dict:
        return {"kind": "register", "group": group, "topic": TOPIC, "type": "SQL92", "expression": expression,
                "clientVersion": version}

    events: list[dict] = [register("G_SQL", SQL_EXPR, 2), register("G_BAD", "a >> 1", 1),
                          register("G_DEAD", "a > 1", 1)]
    for i in range(n_messages):
        events.append(_message(rng, i, TOPIC, queues))
        if i == n_messages // 2:
            events.append({"kind": "unregister", "group": "G_DEAD"})

    def sub(group: str, expression: str, kind: str = "SQL92", **extra) -> dict:
        return {"group": group, "topic": TOPIC, "type": kind, "expression": expression, **extra}

    subscriptions = [
        sub("G_SQL", SQL_EXPR),                                   # OK / SYSTEM_ERROR
        sub("G_SQL", SQL_EXPR, subVersion=1),                     # older client: still OK / SYSTEM_ERROR
        sub("G_SQL", SQL_EXPR, subVersion=3),                     # FILTER_DATA_NOT_LATEST
        sub("G_NONE", "a > 1", subVersion=1),                     # FILTER_DATA_NOT_EXIST
        sub("G_BAD", "a >> 1", subVersion=1),                     # refused registration: FILTER_DATA_NOT_EXIST
        sub("G_DEAD", "a > 1"),                                   # dead record still filters: OK / SYSTEM_ERROR
        sub("G_POSTED", "a between 0 and 3", path="posted", subVersion=7),   # OK / SYSTEM_ERROR
        sub("G_POSTED_BAD", "a >> 1", path="posted"),             # no filter data: OK / SYSTEM_ERROR
        sub("G_POSTED_LOWER", "a > 1", "sql92", path="posted"),   # no SPI for "sql92": OK / SYSTEM_ERROR
        sub("G_EMPTY", "", path="posted"),                        # SUBSCRIPTION_PARSE_FAILED
        sub("G_SPLIT", "||", "TAG", path="posted"),               # SUBSCRIPTION_PARSE_FAILED
        sub("G_TAG", TAG_EXPR, "TAG"),                            # OK
    ]
    return {
        "broker": {"enableConsumeQueueExt": True, "enableCalcFilterBitMap": True,
                   "enablePropertyFilter": enable_property_filter},
        "store": {"mappedFileSizeCommitLog": 8192},
        "topics": [{"name": TOPIC, "readQueueNums": queues, "writeQueueNums": queues}],
        "groups": sorted({s["group"] for s in subscriptions}),
        "events": events,
        "subscriptions": subscriptions,
    }


def heartbeat_clean_scenario(seed: int, n_messages: int = 60) -> dict:
    """ConsumerFilterManager's heartbeat `register(group, subList)` and `clean()` on the real broker, between
    messages (so the bitmaps show which records were live): unchanged, new, changed-expression, TAG and
    non-compiling subscriptions in a heartbeat; topics missing from a heartbeat dying; a dead record revived by a
    heartbeat of the same version; then `clean()` under spans of 10^12 ms (nothing goes), 100 ms (only records dead
    for a while — whichever they are, the report's clock bounds decide), 0 (every dead record) and -1 (everything,
    live ones too: howLongAfterDeath is -1 for them)."""
    rng = random.Random(seed)
    topics = ["T1", "T2", "T3"]
    count = iter(range(10**6))

    def msgs(k: int) -> list[dict]:
        return [_message(rng, next(count), rng.choice(topics), 2) for _ in range(k)]

    def reg(group: str, topic: str, expression: str, version: int = 1) -> dict:
        return {"kind": "register", "group": group, "topic": topic, "type": "SQL92", "expression": expression,
                "clientVersion": version}

    def hb(group: str, *subs: tuple) -> dict:
        return {"kind": "heartbeat", "group": group,
                "subscriptions": [{"topic": t, "expression": e, "type": k, "subVersion": v} for t, e, k, v in subs]}

    k = n_messages // 6
    events = [reg("G1", "T1", "a > 1"), reg("G1", "T2", "b = 'x'"), reg("G2", "T1", "a < 5"),
              reg("G3", "T2", "a between 0 and 3")]
    events += msgs(k)
    events += [hb("G1", ("T1", "a > 1", "SQL92", 1), ("T3", "a > 2", "SQL92", 2)),
               hb("G2", ("T1", "a < 7", "SQL92", 2), ("T2", "TagA", "TAG", 1)),
               {"kind": "unregister", "group": "G3"}]
    events += msgs(k)
    events += [{"kind": "sleep", "ms": 300}, hb("G4", ("T1", "a >> 1", "SQL92", 1)),
               hb("G1", ("T1", "a > 1", "SQL92", 1), ("T2", "b = 'x'", "SQL92", 1)),
               {"kind": "unregister", "group": "G2"}]
    events += msgs(k)
    events += [{"kind": "clean", "spanMs": 10**12}, {"kind": "clean", "spanMs": 100}]
    events += msgs(k)
    events += [hb("G2"), {"kind": "clean", "spanMs": 0}]
    events += msgs(k)
    events += [reg("G5", "T3", "a > 0"), {"kind": "clean", "spanMs": -1}]
    events += msgs(k)
    return {
        "broker": {"enableConsumeQueueExt": True, "enableCalcFilterBitMap": True},
        "store": {"mappedFileSizeCommitLog": 16384},
        "topics": [{"name": t, "readQueueNums": 2, "writeQueueNums": 2} for t in topics],
        "groups": ["G1", "G2", "G3", "G4", "G5"],
        "events": events,
    }


def large_body_scenario(seed: int) -> dict:
    """Bodies from 64 KiB to 3 MiB (under the broker's 4 MiB maxMessageSize), compressed by every client codec at
    several levels, so zlib and zstd write many internal blocks (LZ4 still one block of its 4 MiB frame blocks);
    every codec gets a compressible JSON-ish body, every fourth body is random bytes. 8 MiB commit log files, so
    records straddle no file end and BLANK fillers appear."""
    rng = random.Random(seed)
    codecs = [None, {"type": "zlib", "level": 1}, {"type": "zlib", "level": 9}, {"type": "legacy-zlib"},
              {"type": "lz4"}, {"type": "zstd", "level": 1}, {"type": "zstd", "level": 3},
              {"type": "zstd", "level": 19}]
    sizes = [65_536, 131_072 + 17, 400_000, 1_048_576, 2_000_003, 3 * 1_048_576]
    events = []
    for i in range(16):
        size = sizes[i % len(sizes)]
        if i % 4 == 3:
            body = rng.randbytes(size)
        else:
            words = [f'{{"k{rng.randrange(50)}": {rng.randrange(10 ** rng.randrange(1, 9))}}} '
                     for _ in range(size // 8 + 1)]
            body = "".join(words).encode()[:size]
        m = {"kind": "message", "id": f"m{i}", "topic": "BigBodies", "queueId": i % 2,
             "bornTimestamp": BORN_BASE + i, "bornHost": _host(rng, False), "tags": "TagA",
             "bodyBase64": base64.b64encode(body).decode()}
        codec = codecs[(i // 2) % len(codecs)]
        if codec is not None:
            m["compress"] = codec
        events.append(m)
    return {"broker": {"enableConsumeQueueExt": False},
            "store": {"mappedFileSizeCommitLog": 8 * 1_048_576},
            "topics": [{"name": "BigBodies", "readQueueNums": 2, "writeQueueNums": 2}],
            "events": events}
