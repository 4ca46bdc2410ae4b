"""The jobs' input files written from a harness run, and job 2's tables compared with the harness's pull replay."""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from filterlib.store.bodies import read_bodies
from filterlib.store.storedir import StoreDir
from jobs import row_forms
from jobs.runs import read_dump

from .filters import HARNESS_OUTCOMES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def broker_conf(path: Path, broker: dict, store: dict) -> str:
    """A broker.conf with the harness run's effective settings."""
    keys = ["enableConsumeQueueExt", "enableCalcFilterBitMap", "enablePropertyFilter", "expectConsumerNumUseFilter",
            "maxErrorRateOfBloomFilter", "filterSupportRetry"]
    lines = [f"{k}={str(broker[k]).lower()}" for k in keys]
    lines += [f"{k}={store[k]}" for k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue",
                                          "mappedFileSizeConsumeQueueExt")]
    lines += [f"{k}={str(store[k]).lower()}" for k in ("enableMultiDispatch", "enableLmq") if k in store]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def subscriptions_file(path: Path, subs: list[dict]) -> str:
    """The harness's SUBSCRIPTION rows in the project's subscriptions file format."""
    keys = {"group": "group", "topic": "topic", "type": "type", "expression": "expression", "path": "path",
            "subVersion": "sub_version", "batchSize": "batch_size"}
    path.write_text(json.dumps([{keys[k]: v for k, v in s.items()} for s in subs]))
    return str(path)


ROW_FORMS = {"pull_decisions": row_forms.pull_decisions, "delivered_messages": row_forms.delivered_messages}
"""The row forms the comparisons read, through the public functions (the stored tables are compact)."""


def rows(spark: SparkSession, warehouse: str, table: str, dump_id: str, order: list[str]) -> list[dict]:
    """One dump's rows of a table (row forms through their public functions), in `order`."""
    df = ROW_FORMS[table](spark, warehouse, dump_id) if table in ROW_FORMS else read_dump(spark, warehouse, table,
                                                                                            dump_id)
    return df.orderBy(*order).toArrow().to_pylist()


def compare(spark: SparkSession, wh: str, name: str, truth: dict) -> tuple[int, int, int, list]:
    """(units, pulls, delivered messages compared, problems) of one dump against the harness's pull replay."""
    decisions = defaultdict(list)
    for d in rows(spark, wh, "pull_decisions", name, ["subscription_index", "queue_id", "queue_offset"]):
        decisions[(d["subscription_index"], d["queue_id"])].append(d)
    pulls = defaultdict(list)
    for p in rows(spark, wh, "pulls", name, ["subscription_index", "queue_id", "pull_index"]):
        pulls[(p["subscription_index"], p["queue_id"])].append(p)
    delivered = defaultdict(list)
    for m in rows(spark, wh, "delivered_messages", name, ["subscription_index", "queue_id", "queue_offset"]):
        delivered[(m["subscription_index"], m["queue_id"])].append(m)
    stats = {s["subscription_index"]: s for s in rows(spark, wh, "group_stats", name, ["subscription_index"])}
    # a body job 1 left in the dump (no --bodies) is read back from it, as delivered_messages(..., store=) does
    offsets = sorted({m["commit_log_offset"] for ms in delivered.values() for m in ms if m["body"] is None})
    store = read_dump(spark, wh, "dumps", name).first().store
    from_store = dict(zip(offsets, read_bodies(StoreDir(store), offsets), strict=True))
    units = calls = msgs = 0
    problems: list = []
    for i, sub in enumerate(truth["subscriptions"]):
        st = stats[i]
        if (st["consumer_group"], st["topic"], st["answer"]) != (sub["group"], sub["topic"], sub["answer"]):
            problems.append((i, "answer", (st["consumer_group"], st["topic"], st["answer"]), sub["answer"]))
        if sub["answer"] != "OK":
            if any(k[0] == i for k in decisions):
                problems.append((i, "decisions for a subscription that does not pull"))
            continue
        for q in sub["queues"]:
            key = (i, q["queueId"])
            mine = [(d["queue_offset"], d["commit_log_offset"], d["outcome"], d["bloom_false_positive"],
                     d["pull_index"]) for d in decisions[key]]
            theirs = [(u["queueOffset"], u["commitLogOffset"], HARNESS_OUTCOMES.get(u["outcome"], u["outcome"]),
                       u["bloomFalsePositive"], u["call"]) for u in q["units"]]
            if mine != theirs:
                problems.append((i, q["queueId"], "units", theirs, mine))
            # 4.9.7's GetMessageResult has no filterMessageCount (null): the other fields are compared there
            counted = all(c["filterMessageCount"] is not None for c in q["calls"])
            mine_calls = [(p["request_offset"], p["status"], p["next_begin_offset"], p["message_count"],
                           p["filter_message_count"] if counted else None) for p in pulls[key]]
            their_calls = [(c["requestOffset"], c["status"], c["nextBeginOffset"], c["messageCount"],
                            c["filterMessageCount"]) for c in q["calls"]]
            if mine_calls != their_calls:
                problems.append((i, q["queueId"], "calls", their_calls, mine_calls))
            kept = [m for m in q["messages"] if m["clientKept"]]
            got = delivered[key]
            if [m["commitLogOffset"] for m in kept] != [m["commit_log_offset"] for m in got]:
                problems.append((i, q["queueId"], "delivered", [m["commitLogOffset"] for m in kept],
                                 [m["commit_log_offset"] for m in got]))
                continue
            for m, g in zip(kept, got, strict=True):
                body = base64.b64decode(m["bodyDecompressed"] or m["body"] or "")
                want = (m["msgId"], m["offsetMsgId"], m["uniqKey"], m["tags"], m["keys"], m["properties"], body,
                        m["clientSysFlag"], m["queueOffset"], m["call"])
                have = (g["msg_id"], g["offset_msg_id"], g["uniq_key"], g["tags"], g["keys"], dict(g["properties"]),
                        from_store.get(g["commit_log_offset"], g["body"]), g["client_sys_flag"], g["queue_offset"],
                        g["pull_index"])
                if want != have:
                    problems.append((i, q["queueId"], "message", want, have))
            units += len(theirs)
            calls += len(their_calls)
            msgs += len(kept)
        n_pulls = sum(len(q["calls"]) for q in sub["queues"])
        n_delivered = sum(m["clientKept"] is True for q in sub["queues"] for m in q["messages"])
        if (st["pulls"], st["delivered"], st["units_scanned"]) != \
                (n_pulls, n_delivered, sum(len(q["units"]) for q in sub["queues"])):
            problems.append((i, "stats", st))
    return units, calls, msgs, problems
