"""Seeded scenario generators for the reference harness's `store` mode (schema: tests/reference/PROTOCOL.md).

Every function is a pure function of its arguments: the same seed gives the same scenario dict, so the
refharness cache (keyed by the scenario's hash) answers repeated runs without re-running Java.
"""

from __future__ import annotations

import base64
import json
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


def history_scenario(seed: int, n_messages: int = 180) -> dict:
    """`tag_and_sql_scenario` with copies of the running store taken on the way (PROTOCOL.md, store: `copy`): c1 at
    a third of the events, c2 at two thirds, then the store's own retention deletes its two oldest commit log files
    (`expire`) and c3 is taken at the end. The copies overlap as daily copies of a live broker do."""
    sc = tag_and_sql_scenario(seed, n_messages)
    events = sc["events"]
    third = len(events) // 3
    sc["events"] = [*events[:third], {"kind": "copy", "name": "c1"}, *events[third:2 * third],
                    {"kind": "copy", "name": "c2"}, {"kind": "expire", "files": 2}, *events[2 * third:],
                    {"kind": "copy", "name": "c3"}]
    del sc["subscriptions"]
    return sc


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


UNREGISTERED_TOPIC = "TopicPlain"


def unregistered_filters_scenario(seed: int, n_messages: int = 90) -> dict:
    """SQL92 subscriptions the subscriptions file names but the dump's final registry does not hold. G_REG is
    registered before every message (the rule is exact for it); G_CLEAN is registered after the first third of the
    messages (ids `pre*`), unregistered and removed by `clean()` after the second (`mid*`), so only the `mid*`
    messages carry its bits; G_NEVER (on TOPIC) and G_PLAIN (on UNREGISTERED_TOPIC, a topic without any filter
    data, where the broker writes no bitmap) never reach the broker. The file names all four."""
    rng = random.Random(seed)
    k = n_messages // 3
    events: list[dict] = [{"kind": "register", "group": "G_REG", "topic": TOPIC, "type": "SQL92",
                           "expression": "a is not null and a between 0 and 3", "clientVersion": 1}]

    def msgs(prefix: str, start: int) -> list[dict]:
        out = []
        for i in range(start, start + k):
            m = _message(rng, i, UNREGISTERED_TOPIC if rng.random() < 0.25 else TOPIC, 2)
            m["id"] = f"{prefix}{i}"
            m.pop("compress", None)
            out.append(m)
        return out

    events += msgs("pre", 0)
    events.append({"kind": "register", "group": "G_CLEAN", "topic": TOPIC, "type": "SQL92",
                   "expression": "b = 'x' or b = 'true' or a = '1'", "clientVersion": 1})
    events += msgs("mid", k)
    events += [{"kind": "unregister", "group": "G_CLEAN"}, {"kind": "sleep", "ms": 20},
               {"kind": "clean", "spanMs": 0}]
    events += msgs("post", 2 * k)

    def sub(group: str, topic: str, expression: str) -> dict:
        return {"group": group, "topic": topic, "type": "SQL92", "expression": expression, "subVersion": 1}

    subscriptions = [sub("G_REG", TOPIC, "a is not null and a between 0 and 3"),
                     sub("G_CLEAN", TOPIC, "b = 'x' or b = 'true' or a = '1'"),
                     sub("G_NEVER", TOPIC, "a > 1"),
                     sub("G_PLAIN", UNREGISTERED_TOPIC, "a > 0"),
                     {"group": "G_TAG", "topic": UNREGISTERED_TOPIC, "expression": TAG_EXPR}]
    return {
        "broker": {"enableConsumeQueueExt": True, "enableCalcFilterBitMap": True, "enablePropertyFilter": True,
                   "expectConsumerNumUseFilter": 32, "maxErrorRateOfBloomFilter": 20},
        "store": {"mappedFileSizeCommitLog": 8192},
        "topics": [{"name": t, "readQueueNums": 2, "writeQueueNums": 2} for t in (TOPIC, UNREGISTERED_TOPIC)],
        "groups": sorted({s["group"] for s in subscriptions}),
        "events": events,
        "subscriptions": subscriptions,
    }


def bitmap_off_restart_scenario(seed: int, n_messages: int = 60) -> dict:
    """SQL92 filters registered on a broker with ConsumeQueueExt on but enableCalcFilterBitMap off (the default),
    then a restart (the harness's pull mode loads config/consumerFilter.json): 5.3.3 persists bloom data anyway and
    keeps the filters; 5.5.1 persists them without bloom data, and its load discards the whole registry."""
    rng = random.Random(seed)
    events: list[dict] = [{"kind": "register", "group": g, "topic": TOPIC, "type": "SQL92", "expression": e,
                           "clientVersion": 1} for g, e in (("G_SQL", SQL_EXPR), ("G_GT", "a > 1"))]
    events += [_message(rng, i, TOPIC, 2) for i in range(n_messages)]
    subscriptions = [{"group": "G_SQL", "topic": TOPIC, "type": "SQL92", "expression": SQL_EXPR, "subVersion": 1},
                     {"group": "G_GT", "topic": TOPIC, "type": "SQL92", "expression": "a > 1", "subVersion": 1},
                     {"group": "G_POSTED", "topic": TOPIC, "type": "SQL92", "expression": "a > 1",
                      "path": "posted", "subVersion": 1},
                     {"group": "G_TAG", "topic": TOPIC, "expression": TAG_EXPR}]
    return {
        "broker": {"enableConsumeQueueExt": True, "enableCalcFilterBitMap": False, "enablePropertyFilter": True},
        "store": {"mappedFileSizeCommitLog": 8192},
        "topics": [{"name": TOPIC, "readQueueNums": 2, "writeQueueNums": 2}],
        "groups": sorted({s["group"] for s in subscriptions}),
        "events": events,
        "subscriptions": subscriptions,
    }


LITE_PARENT = "LiteParent"


def lite_topic_scenario(seed: int, n_messages: int = 50) -> dict:
    """A 5.5.0+ Lite Topic beside an ordinary one: topic LITE_PARENT with `message.type=LITE`, group G_LITE bound to
    it by `lite.bind.topic`, and ordinary TAG and SQL92 subscriptions on TOPIC. The first two are `lite` (job 2
    refuses them), the rest `replayable`."""
    rng = random.Random(seed)
    events: list[dict] = [{"kind": "register", "group": "G_SQL", "topic": TOPIC, "type": "SQL92",
                           "expression": "a > 1", "clientVersion": 1}]
    events += [_message(rng, i, TOPIC, 2) for i in range(n_messages)]
    replayable = [{"group": "G_TAG", "topic": TOPIC, "expression": TAG_EXPR},
                  {"group": "G_SQL", "topic": TOPIC, "type": "SQL92", "expression": "a > 1", "subVersion": 1}]
    lite = [{"group": "G_LITE", "topic": TOPIC, "expression": "*"},
            {"group": "G_ON_LITE", "topic": LITE_PARENT, "expression": "*"}]
    return {
        "broker": {"enableConsumeQueueExt": True, "enableCalcFilterBitMap": True, "enablePropertyFilter": True},
        "store": {"mappedFileSizeCommitLog": 8192},
        "topics": [{"name": TOPIC, "readQueueNums": 2, "writeQueueNums": 2},
                   {"name": LITE_PARENT, "readQueueNums": 1, "writeQueueNums": 1,
                    "attributes": {"+message.type": "LITE"}}],
        "groups": ["G_LITE", "G_ON_LITE", "G_TAG", "G_SQL"],
        "groupAttributes": {"G_LITE": {"+lite.bind.topic": LITE_PARENT}},
        "events": events,
        "replayable": replayable,
        "lite": lite,
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


def client_decode_scenario(seed: int, n_messages: int = 90) -> dict:
    """Compressed bodies the client cannot inflate among good ones: garbage under each codec's flags, truncated
    zlib and zstd frames, type bits that name no codec, and bodies that look broken but inflate (a compressed flag
    over an empty body, with a codec or with type bits that name none; zstd with stray trailing bytes). The
    client's decodesBatch loses the first such message of a pull and every later one of that pull; batch sizes of
    8 and 4 put several messages in each pull."""
    from filterlib.store.compression import compress

    rng = random.Random(seed)
    text = b'{"order": 1, "note": "' + b"compressible " * 30 + b'"}'

    def bad_body() -> dict:
        kind = rng.randrange(8)
        garbage = rng.randbytes(rng.randint(5, 40))
        if kind == 0:
            return {"bodyBase64": base64.b64encode(garbage).decode(), "compress": {"type": "zstd", "asIs": True}}
        if kind == 1:
            return {"bodyBase64": base64.b64encode(garbage).decode(), "compress": {"type": "lz4", "asIs": True}}
        if kind == 2:
            cut = compress(text, "ZLIB")[:-3]
            return {"bodyBase64": base64.b64encode(cut).decode(), "compress": {"type": "zlib", "asIs": True}}
        if kind == 3:
            cut = compress(text, "ZSTD")[:-2]
            return {"bodyBase64": base64.b64encode(cut).decode(), "compress": {"type": "zstd", "asIs": True}}
        if kind == 4:
            return {"body": "plain text", "compress": {"typeBits": rng.choice([4, 5, 6, 7])}}
        if kind == 5:  # inflates: MessageDecoder never inflates an empty body
            return {"body": "", "compress": {"type": "zstd", "asIs": True}}
        if kind == 6:  # decodes: nor reads an empty body's type bits, even ones that name no codec
            return {"body": "", "compress": {"typeBits": rng.choice([4, 5, 6, 7])}}
        stray = compress(text, "ZSTD") + b"\0\0\0"  # inflates: fewer than 5 stray bytes after the frame
        return {"bodyBase64": base64.b64encode(stray).decode(), "compress": {"type": "zstd", "asIs": True}}

    events: list[dict] = []
    for i in range(n_messages):
        m = {"kind": "message", "id": f"m{i}", "topic": TOPIC, "queueId": i % 2, "bornTimestamp": BORN_BASE + i,
             "bornHost": _host(rng, False), "tags": rng.choice(["TagA", "TagB", "TagC"]),
             "props": {"a": str(rng.randrange(5))}}
        r = rng.random()
        if r < 0.15:
            m.update(bad_body())
        elif r < 0.45:
            m["body"] = f"message {i} " + "y" * rng.randint(0, 200)
            m["compress"] = rng.choice(COMPRESS[3:])
        else:
            m["body"] = f"message {i}"
        events.append(m)
    return {
        "broker": {"enableConsumeQueueExt": False, "enablePropertyFilter": True},
        "store": {"mappedFileSizeCommitLog": 8192, "mappedFileSizeConsumeQueue": 400},
        "topics": [{"name": TOPIC, "readQueueNums": 2, "writeQueueNums": 2}],
        "groups": ["G_ALL", "G_TAG", "G_SQL"],
        "events": events,
        "subscriptions": [
            {"group": "G_ALL", "topic": TOPIC, "type": "TAG", "expression": "*", "batchSize": 8},
            {"group": "G_TAG", "topic": TOPIC, "type": "TAG", "expression": "TagA || TagB", "batchSize": 4},
            {"group": "G_SQL", "topic": TOPIC, "type": "SQL92", "expression": "a > 1", "path": "posted",
             "batchSize": 8},
        ],
    }


GRAMMAR_EXPRS = {"G_CONTAINS": "name CONTAINS 'ab'", "G_AFFIX": "name STARTSWITH 'ab' OR name ENDSWITH 'yz'",
                 "G_AND": "a > 1 AND name CONTAINS 'b'", "G_GT": "a > 2"}
"""Selectors a 4.9 broker reads otherwise than 5.x (CONTAINS, STARTSWITH, ENDSWITH from 5.1.3), and one alike."""


def grammar_scenario(seed: int, ext: bool, n_messages: int = 80) -> dict:
    """The selectors of GRAMMAR_EXPRS registered before the first message (the bloom layer live when `ext`: ext
    units and CalcBitMap on, else both off), `name` values that contain, start and end with the searched text,
    compressed bodies among plain ones, and with filterSupportRetry retry records of G_CONTAINS and a `*`
    subscription to its retry topic (4.9 filters that one with G_CONTAINS's selector, 5.x passes every TAG one)."""
    rng = random.Random(seed)
    names = ["abc", "xaby", "zzyz", "ab", "yz", "b", "", "abyz", "nothing", None]
    events: list[dict] = [{"kind": "register", "group": g, "topic": TOPIC, "expression": e, "clientVersion": 1}
                          for g, e in GRAMMAR_EXPRS.items()]
    for i in range(n_messages):
        m = {"kind": "message", "id": f"m{i}", "topic": TOPIC, "queueId": i % 2, "bornTimestamp": BORN_BASE + i,
             "bornHost": _host(rng, rng.random() < 0.3), "tags": rng.choice(["TagA", "TagB", "TagC"]),
             "body": f"message {i} " + "z" * rng.randint(0, 300)}
        props = {"a": str(rng.randrange(5))}
        name = rng.choice(names)
        if name is not None:
            props["name"] = name
        m["props"] = props
        c = rng.choice(COMPRESS)
        if c is not None:
            m["compress"] = c
        if rng.random() < 0.15:
            m["retry"] = {"group": "G_CONTAINS", "originalTopic": TOPIC}
            m["reconsumeTimes"] = 1
        events.append(m)
    subs = [{"group": g, "topic": TOPIC, "type": "SQL92", "expression": e} for g, e in GRAMMAR_EXPRS.items()]
    subs += [{"group": "G_POSTED", "topic": TOPIC, "type": "SQL92", "expression": GRAMMAR_EXPRS["G_AFFIX"],
              "path": "posted"},
             {"group": "G_TAG", "topic": TOPIC, "type": "TAG", "expression": "TagA || TagB", "batchSize": 8},
             {"group": "G_CONTAINS", "topic": "%RETRY%G_CONTAINS", "type": "TAG", "expression": "*"}]
    return {
        "broker": {"enableConsumeQueueExt": ext, "enableCalcFilterBitMap": ext, "enablePropertyFilter": True,
                   "filterSupportRetry": True},
        "store": {"mappedFileSizeCommitLog": 8192, "mappedFileSizeConsumeQueue": 400,
                  "mappedFileSizeConsumeQueueExt": 1024},
        "topics": [{"name": TOPIC, "readQueueNums": 2, "writeQueueNums": 2}],
        "groups": [*GRAMMAR_EXPRS, "G_POSTED", "G_TAG"],
        "events": events,
        "subscriptions": subs,
    }


def lmq_scenario(seed: int, n_messages: int = 80) -> dict:
    """enableMultiDispatch and enableLmq: messages whose INNER_MULTI_DISPATCH names light message queues
    (`%LMQ%...`, queue 0, offsets assigned by the broker) and a plain queue name (no offset: no dispatch), with
    names the dispatch skips (holding "/") and messages of topics it never multi-dispatches (%RETRY%, delayed
    SCHEDULE_TOPIC_XXXX records, rmq_sys_*). ConsumeQueueExt is on, so the record's own units get ext units and
    the multi-dispatch units show they never do. 10 units per consume-queue file."""
    rng = random.Random(seed)
    lmqs = ["%LMQ%orders/eu", "%LMQ%a", "%LMQ%b", "%LMQ%c"]
    events: list[dict] = []
    for i in range(n_messages):
        topic = rng.choice([TOPIC, TOPIC, TOPIC, "rmq_sys_custom"])
        m = {"kind": "message", "id": f"m{i}", "topic": topic, "queueId": i % 2, "bornTimestamp": BORN_BASE + i,
             "bornHost": _host(rng, False), "tags": rng.choice(["TagA", "TagB"]), "body": f"lmq message {i}"}
        if rng.random() < 0.8:
            # A plain name gets no offset from the broker ("" in the joined list): last, it makes the lists differ
            # in length, so the message gets no multi-dispatch unit; first or between, it would make the broker's
            # dispatch throw on "" for every later record, so the scenario never puts it there.
            names = rng.sample(lmqs, rng.randint(0, 3)) + (["plainQueue"] if rng.random() < 0.25 else [])
            names = names or ["%LMQ%a"]
            m["props"] = {"INNER_MULTI_DISPATCH": ",".join(names), "a": str(i % 5)}
        r = rng.random()
        if r < 0.05:
            m["delayLevel"] = 2
        elif r < 0.1 and topic == TOPIC:
            m["retry"] = {"group": "G1", "originalTopic": TOPIC}
        events.append(m)
    return {
        "broker": {"enableConsumeQueueExt": True, "enableCalcFilterBitMap": True, "enablePropertyFilter": True},
        "store": {"mappedFileSizeCommitLog": 8192, "mappedFileSizeConsumeQueue": 200,
                  "mappedFileSizeConsumeQueueExt": 512, "enableMultiDispatch": True, "enableLmq": True},
        "topics": [{"name": TOPIC, "readQueueNums": 2, "writeQueueNums": 2},
                   {"name": "rmq_sys_custom", "readQueueNums": 2, "writeQueueNums": 2}],
        "events": [{"kind": "register", "group": "G1", "topic": TOPIC, "expression": "a > 2", "clientVersion": 1}]
        + events,
    }


DEMO_BORN_BASE = 1_795_510_800_000    # 2026-11-24T09:00:00Z: the demo's producers' clock (bornTimestamp)
DEMO_ORDERS = "TradeOrder"
DEMO_PAYMENTS = "PaymentEvents"
# Bloom bits (f = 30, n = 32: m = 88, k = 2) of group#TradeOrder: big-orders-eu {9, 82}, vip-orders {39, 82},
# billing-paid {35, 39}, apac-fulfilment {9, 83}. So vip-orders is covered by big-orders-eu + billing-paid, and
# big-orders-eu by vip-orders + apac-fulfilment: real bloom false positives.
DEMO_SQL_GROUPS = {
    "billing-paid": "TAGS = 'OrderPaid'",
    "vip-orders": "level >= 4",
    "big-orders-eu": "region = 'eu' AND amount > 500",
    "apac-fulfilment": "region = 'apac' AND TAGS IN ('OrderPaid', 'OrderShipped')",
}
DEMO_FRAUD = "amount > 1000 AND currency <> 'EUR'"
DEMO_POSTED = "amount BETWEEN 100 AND 1000"


def demo_scenario(seed: int = 2026, n_orders: int = 720, n_payments: int = 240) -> dict:
    """The bundled `make demo` dump (demo/scenario.json is this function's output): an order topic (4 queues) and
    a payment topic (2 queues) written by a real broker with ConsumeQueueExt and CalcBitMap on and a small bloom
    filter, so the replayed pull shows every outcome. Realistic properties (region, level, amount — some decimal,
    which a long comparison rejects —, orderId, currency), JSON bodies (the few over 4 KiB compressed with zlib,
    LZ4 or zstd, each producer its own codec, as a client does), delayed order timeout checks, committed,
    rolled-back and pending transactions, consumer retries.

    Groups: order-tag-consumer (TAG with the Java hash collision Aa/BB), zero-hash-tag (tag `f5a5a608`, whose
    String.hashCode is 0, the code of a message without tag), refund-tracker (TAG), four SQL92 groups registered on
    TradeOrder (two from the start, two after a quarter of the orders: their earlier orders are not "in live" and go
    to the commit log layer), fraud-screening (SQL92 on PaymentEvents), order-audit (posted SQL92: no bloom data),
    and order-tag-consumer's retry topic. Every bornTimestamp is explicit; store times come from the clock."""
    rng = random.Random(seed)
    regions = ["eu", "eu", "eu", "us", "us", "apac", "apac", None]
    order_tags = (["OrderCreated"] * 5 + ["OrderPaid"] * 6 + ["OrderShipped"] * 4 + ["OrderCancelled"] * 2
                  + ["Aa", "BB", None])
    producers = [(f"10.12.{rng.randrange(1, 60)}.{rng.randrange(2, 250)}", rng.randrange(1, 0xFFFF),
                  rng.randrange(1 << 31)) for _ in range(6)]
    # Each producer's compressor for bodies over 4 KiB (the client's compressMsgBodyOverHowmuch).
    codecs = [{"type": "zlib", "level": 5}, {"type": "lz4"}, {"type": "zlib", "level": 5},
              {"type": "zstd", "level": 3}, {"type": "zlib", "level": 5}, {"type": "lz4"}]
    counters = [rng.randrange(1000) for _ in producers]
    born = DEMO_BORN_BASE
    events: list[dict] = []

    def register(group: str, topic: str, expression: str) -> dict:
        return {"kind": "register", "group": group, "topic": topic, "type": "SQL92", "expression": expression,
                "clientVersion": 1}

    def amount() -> str | None:
        r = rng.random()
        if r < 0.05:
            return None
        if r < 0.2:
            return f"{rng.randrange(5, 3000)}.{rng.randrange(100):02d}"     # decimal: `amount > 500` throws
        return str(int(rng.lognormvariate(5.5, 1.1)) + 1)

    def body(order_id: str, lines: int) -> str:
        items = [{"sku": f"SKU-{rng.randrange(10000):05d}", "qty": rng.randint(1, 5),
                  "price": f"{rng.randrange(1, 400)}.{rng.randrange(100):02d}"} for _ in range(lines)]
        return json.dumps({"orderId": order_id, "customer": f"C{rng.randrange(100000):06d}", "items": items},
                          separators=(",", ":"))

    def message(i: int, topic: str, queues: int, tag: str | None, props: dict, order_id: str) -> dict:
        nonlocal born
        born += rng.randint(20, 900)
        p = rng.randrange(len(producers))
        ip, pid, loader = producers[p]
        counters[p] += 1
        uniq = (bytes(int(x) for x in ip.split(".")).hex().upper() + f"{pid:04X}{loader:08X}"
                + f"{(born - DEMO_BORN_BASE + 3_600_000) & 0xFFFFFFFF:08X}{counters[p] & 0xFFFF:04X}")
        big = rng.random() < 0.035
        m = {"kind": "message", "id": f"{'o' if topic == DEMO_ORDERS else 'p'}{i}", "topic": topic,
             "queueId": rng.randrange(queues), "bornTimestamp": born, "bornHost": f"{ip}:{rng.randint(32768, 60999)}",
             "uniqKey": uniq, "keys": order_id, "props": {k: v for k, v in props.items() if v is not None},
             "body": body(order_id, rng.randint(90, 160) if big else rng.randint(1, 4))}
        if tag is not None:
            m["tags"] = tag
        if len(m["body"].encode()) > 4096:
            m["compress"] = codecs[p]
        return m

    events += [register("billing-paid", DEMO_ORDERS, DEMO_SQL_GROUPS["billing-paid"]),
               register("vip-orders", DEMO_ORDERS, DEMO_SQL_GROUPS["vip-orders"]),
               register("fraud-screening", DEMO_PAYMENTS, DEMO_FRAUD)]
    pending_tx: list[str] = []
    tx_plan = iter(["commit", "rollback", "commit", "commit", "rollback", None])   # None: left pending
    n_payment = 0
    for i in range(n_orders):
        if i == n_orders // 4:
            events += [register("big-orders-eu", DEMO_ORDERS, DEMO_SQL_GROUPS["big-orders-eu"]),
                       register("apac-fulfilment", DEMO_ORDERS, DEMO_SQL_GROUPS["apac-fulfilment"])]
        order_id = f"ORD-{20261124000000 + 17 * i + rng.randrange(17)}"
        props = {"region": rng.choice(regions), "level": rng.choice(["1", "1", "2", "2", "3", "4", "5", None]),
                 "amount": amount(), "orderId": order_id}
        m = message(i, DEMO_ORDERS, 4, rng.choice(order_tags), props, order_id)
        if i % 97 == 40:
            m["tx"] = "prepared"
            m["tags"] = "OrderCreated"
            pending_tx.append(m["id"])
        elif i % 89 == 30:
            m["tags"] = "OrderTimeoutCheck"
            m["delayLevel"] = rng.choice([4, 16])          # 30 s, 30 min: SCHEDULE_TOPIC_XXXX
        elif i % 131 == 70:
            m["retry"] = {"group": "order-tag-consumer", "originalTopic": DEMO_ORDERS}
            m["reconsumeTimes"] = rng.randint(1, 3)
            m["tags"] = "OrderPaid"
        events.append(m)
        if pending_tx and i % 97 == 52:
            kind = next(tx_plan, None)
            ref = pending_tx.pop(0)
            if kind is not None:
                events.append({"kind": kind, "ref": ref})
        while n_payment < n_payments * (i + 1) // n_orders:
            pay_id = f"ORD-{20261124000000 + 17 * rng.randrange(i + 1)}"
            tag = rng.choice(["PaySucceeded"] * 6 + ["PayFailed", "Refunded"])
            props = {"orderId": pay_id, "amount": amount(), "currency": rng.choice(["EUR", "EUR", "USD", "SGD"]),
                     "region": rng.choice(regions)}
            events.append(message(n_payment, DEMO_PAYMENTS, 2, tag, props, pay_id))
            n_payment += 1
    subscriptions = [
        {"group": "order-tag-consumer", "topic": DEMO_ORDERS, "type": "TAG",
         "expression": "OrderPaid || OrderShipped || Aa"},
        {"group": "order-tag-consumer", "topic": "%RETRY%order-tag-consumer", "type": "TAG", "expression": "*"},
        {"group": "zero-hash-tag", "topic": DEMO_ORDERS, "type": "TAG", "expression": "f5a5a608"},
        *({"group": g, "topic": DEMO_ORDERS, "type": "SQL92", "expression": e} for g, e in DEMO_SQL_GROUPS.items()),
        {"group": "order-audit", "topic": DEMO_ORDERS, "type": "SQL92", "expression": DEMO_POSTED, "path": "posted"},
        {"group": "refund-tracker", "topic": DEMO_PAYMENTS, "type": "TAG", "expression": "Refunded || PayFailed"},
        {"group": "fraud-screening", "topic": DEMO_PAYMENTS, "type": "SQL92", "expression": DEMO_FRAUD},
    ]
    return {
        "broker": {"brokerName": "broker-a", "brokerIP": "10.0.1.15", "enableConsumeQueueExt": True,
                   "enableCalcFilterBitMap": True, "enablePropertyFilter": True, "expectConsumerNumUseFilter": 32,
                   "maxErrorRateOfBloomFilter": 30, "filterSupportRetry": False},
        "store": {"mappedFileSizeCommitLog": 131072, "mappedFileSizeConsumeQueue": 2000,
                  "mappedFileSizeConsumeQueueExt": 4096},
        "transactionMode": "broker5",
        "topics": [{"name": DEMO_ORDERS, "readQueueNums": 4, "writeQueueNums": 4},
                   {"name": DEMO_PAYMENTS, "readQueueNums": 2, "writeQueueNums": 2}],
        "groups": sorted({s["group"] for s in subscriptions}),
        "events": events,
        "subscriptions": subscriptions,
        "offsets": [*({"topic": DEMO_ORDERS, "group": "order-tag-consumer", "queueId": q, "offset": 60 + 7 * q}
                      for q in range(4)),
                    {"topic": DEMO_PAYMENTS, "group": "refund-tracker", "queueId": 0, "offset": 100},
                    {"topic": DEMO_PAYMENTS, "group": "refund-tracker", "queueId": 1, "offset": 90}],
    }


TWO_GROUPS_QUEUES = [("T1", 0), ("T1", 1), ("T1", 2), ("T1", 3), ("T2", 0), ("T2", 1)]


def two_groups_scenario() -> dict:
    """The `group` mode with two groups on one broker: G1's three members subscribe differently (two tag orders, a
    topic only one of them names, SQL92), G2's one member takes T1 whole, allocated by circle. 40 messages
    round-robin over every queue of T1 (4) and T2 (2); each queue sees every tag and a = 0..3."""
    tags = ["TagA", "TagB", "TagC"]
    queues = TWO_GROUPS_QUEUES
    messages = [{"topic": queues[i % len(queues)][0], "broker": "broker-a", "queue": queues[i % len(queues)][1],
                 "tags": tags[(i // len(queues) + i) % 3], "keys": f"k{i}",
                 "properties": {"a": str((i // len(queues)) % 4)}, "body": f"message {i}"} for i in range(40)]
    return {
        "brokers": ["broker-a"],
        "broker_config": {"enablePropertyFilter": True},
        "topics": [{"name": "T1", "queues": 4}, {"name": "T2", "queues": 2}],
        "groups": [
            {"group": "G1", "allocate": "AVG", "members": [
                {"client_id": "127.0.0.1@m1", "subscriptions": [
                    {"topic": "T1", "type": "TAG", "expression": "TagA || TagB"},
                    {"topic": "T2", "type": "TAG", "expression": "TagA || TagB"}]},
                {"client_id": "127.0.0.1@m2", "subscriptions": [
                    {"topic": "T1", "type": "TAG", "expression": "TagB || TagA"}]},
                {"client_id": "127.0.0.1@m3", "subscriptions": [
                    {"topic": "T1", "type": "SQL92", "expression": "a > 1"}]}]},
            {"group": "G2", "allocate": "AVG_BY_CIRCLE", "members": [
                {"client_id": "127.0.0.1@m1", "subscriptions": [{"topic": "T1", "type": "TAG", "expression": "*"}]}]},
        ],
        "messages": messages,
    }


def group_scenario(seed: int = 27, n_t1: int = 64, n_t2: int = 16) -> dict:
    """The harness's `group` mode input (real name server, broker and push consumers): groups whose members
    subscribe differently — different tags, tag order swapped, TAG beside SQL92, a topic only one member
    subscribes, three members allocated by circle — over T1 (4 queues) and T2 (2 queues); tags TagA / TagB /
    TagC / none, property `a` 0..3."""
    rng = random.Random(seed)
    messages = []
    for topic, n, queues in (("T1", n_t1, 4), ("T2", n_t2, 2)):
        for i in range(n):
            m = {"topic": topic, "broker": "broker-a", "queue": i % queues, "keys": f"{topic}-{i}",
                 "properties": {"a": str(rng.randrange(4))}, "body": f"{topic} message {i}"}
            tag = rng.choice(["TagA", "TagB", "TagC", None])
            if tag is not None:
                m["tags"] = tag
            messages.append(m)

    def member(group: str, name: str, *subs: tuple) -> dict:
        return {"client_id": f"127.0.0.1@{group.lower()}-{name}",
                "subscriptions": [{"topic": t, "type": kind, "expression": e} for t, kind, e in subs]}

    groups = [
        {"group": "G_TAGS", "members": [member("G_TAGS", "m1", ("T1", "TAG", "TagA || TagB")),
                                        member("G_TAGS", "m2", ("T1", "TAG", "TagB || TagC"))]},
        {"group": "G_ORDER", "members": [member("G_ORDER", "m1", ("T1", "TAG", "TagA || TagB")),
                                         member("G_ORDER", "m2", ("T1", "TAG", "TagB || TagA"))]},
        {"group": "G_MIXED", "members": [member("G_MIXED", "m1", ("T1", "SQL92", "a > 1")),
                                         member("G_MIXED", "m2", ("T1", "TAG", "TagA"))]},
        {"group": "G_TOPICS", "members": [member("G_TOPICS", "m1", ("T1", "TAG", "TagA"), ("T2", "TAG", "*")),
                                          member("G_TOPICS", "m2", ("T1", "TAG", "TagA"))]},
        {"group": "G_CIRCLE", "allocate": "AVG_BY_CIRCLE",
         "members": [member("G_CIRCLE", "m1", ("T1", "TAG", "*")), member("G_CIRCLE", "m2", ("T1", "TAG", "TagC")),
                     member("G_CIRCLE", "m3", ("T1", "TAG", "TagA || TagB"))]},
    ]
    return {"brokers": ["broker-a"], "broker_config": {"enablePropertyFilter": True},
            "topics": [{"name": "T1", "queues": 4}, {"name": "T2", "queues": 2}], "groups": groups,
            "messages": messages}


def cluster_group_scenario(seed: int = 28, n_messages: int = 72) -> dict:
    """The `group` mode over two brokers of one cluster: T1 has 3 queues on each of broker-a and broker-b, and two
    groups (four members allocated averagely, three by circle) whose members subscribe differently pull from both."""
    rng = random.Random(seed)
    messages = []
    for i in range(n_messages):
        m = {"topic": "T1", "broker": rng.choice(["broker-a", "broker-b"]), "queue": rng.randrange(3),
             "keys": f"C-{i}", "properties": {"a": str(rng.randrange(4))}, "body": f"cluster message {i}"}
        tag = rng.choice(["TagA", "TagB", "TagC", "TagD"])
        m["tags"] = tag
        messages.append(m)

    def member(group: str, name: str, expression: str, kind: str = "TAG") -> dict:
        return {"client_id": f"127.0.0.1@{group.lower()}-{name}",
                "subscriptions": [{"topic": "T1", "type": kind, "expression": expression}]}

    groups = [
        {"group": "C_AVG", "members": [member("C_AVG", "m1", "TagA || TagB"), member("C_AVG", "m2", "TagC"),
                                       member("C_AVG", "m3", "a > 1", "SQL92"), member("C_AVG", "m4", "*")]},
        {"group": "C_CIRCLE", "allocate": "AVG_BY_CIRCLE",
         "members": [member("C_CIRCLE", "m1", "TagD"), member("C_CIRCLE", "m2", "TagA || TagD"),
                     member("C_CIRCLE", "m3", "TagB")]},
    ]
    return {"brokers": ["broker-a", "broker-b"], "broker_config": {"enablePropertyFilter": True},
            "topics": [{"name": "T1", "queues": 3}], "groups": groups, "messages": messages}


KIND_QUEUES = 4
KIND_TAGS = ["TagA", "TagB", "TagC"]


def _kind_messages() -> list[dict]:
    """40 messages round-robin over T1's 4 queues; queue q's j-th message is KIND_TAGS[(j + q) % 3], so every queue
    sees every tag and the queues end on different tags."""
    return [{"topic": "T1", "broker": "broker-a", "queue": i % KIND_QUEUES,
             "tags": KIND_TAGS[(i // KIND_QUEUES + i % KIND_QUEUES) % 3], "keys": f"k{i}", "body": f"message {i}"}
            for i in range(40)]


def kinds_group_scenario() -> dict:
    """The `group` mode with one group of every client kind on one topic, each member with its own tags: push
    members (filtered with the subscription the broker keeps), a push member posting its expression and a lite-pull
    member (each filtered with its own). Members start in the listed order; their ids sort k1 < k2@STREAM < k3 <
    k4, so when the lite pull member (sorted second) joins last, AVG moves k1 from queues 0, 1 to 0 and leaves k3
    and k4 where they were: k1's is the last subVersion a push member sets before the sends."""
    def member(cid: str, kind: str, expression: str) -> dict:
        return {"client_id": cid, "consumer": kind,
                "subscriptions": [{"topic": "T1", "type": "TAG", "expression": expression}]}

    return {"brokers": ["broker-a"], "broker_config": {"enablePropertyFilter": True},
            "topics": [{"name": "T1", "queues": KIND_QUEUES}],
            "groups": [{"group": "GK", "allocate": "AVG", "members": [
                member("127.0.0.1@k1", "push", "TagA"), member("127.0.0.1@k3", "push_posted", "TagB"),
                member("127.0.0.1@k4", "push", "TagC"), member("127.0.0.1@k2@STREAM", "lite_pull", "TagA || TagC")]}],
            "messages": _kind_messages()}

