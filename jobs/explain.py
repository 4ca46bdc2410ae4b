"""Explain one message for one consumer group: each filter layer's decision in plain words.

    python -m jobs.explain --warehouse DIR --group G [--dump-id ID]
                           (--msg-id ID | --offset-msg-id ID | --key K | --queue TOPIC:QID:OFFSET)

Reads job 1's and job 2's Delta tables with the lookups pushed down (messages by id or key, the decision matrix by
commit log offset, exploded to the group's decision rows by `jobs.row_forms`) and prints, per matching message,
what the consume-queue layer, the commit-log layer and the client did (`filterlib.replay.explain`); a message the group
never scanned, or that does not exist, says so and why (no subscription to its topic, a subscription the broker
refused, no consume-queue unit, a start offset past it).
Each message's body is shown as the client sees it: from `messages` when job 1 wrote it (`--bodies`), else read
back from the store the `dumps` table names (`filterlib.store.bodies`) when that store can be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from filterlib import brokerversion
from filterlib.errors import StoreFormatError
from filterlib.rebuild.history import store_of
from filterlib.replay.explain import evaluated_filter, explain
from filterlib.store.bodies import StoredBody, read_stored
from filterlib.store.compression import DecompressError, compression_type, decompress_body
from filterlib.store.storedir import StoreDir
from jobs import history, row_forms
from jobs.cli import ROOT, InputError, add_session_args, job_logger, load_defaults, run_main
from jobs.delta_io import check_dump_id, table_path
from jobs.runs import read_dump, read_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULTS = ROOT / "conf" / "simulate_pull.json"
PROG = "explain"
log = job_logger(PROG)
MAX_MESSAGES = 20
BODY_PREVIEW = 200
"""Characters of a body shown (its text as UTF-8, invalid bytes replaced)."""


@dataclass
class Inputs:
    """The question: which group, which message (one kind of key), where the tables are."""

    warehouse: str
    group: str
    dump_id: str | None
    by: str
    value: str
    defaults: dict
    cluster: tuple[str, ...] = ()
    """The dumps of a cluster's brokers (`--cluster`): the message is looked for on each."""


@dataclass
class Answer:
    """The printed lines, and per message found its outcome (None: never scanned by the group)."""

    text: list[str] = field(default_factory=list)
    outcomes: dict[int, list[str] | None] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """What is printed."""
        return self.text


def parser() -> argparse.ArgumentParser:
    """The command line (every flag explained in --help)."""
    p = argparse.ArgumentParser(
        prog="python -m jobs.explain",
        description="Explain, for one consumer group and one message, each filter layer's decision in plain words: "
                    "the tag hash or the bloom bits tested, the SQL92 value and the property values behind it, the "
                    "client's tag re-check. Reads the tables job 1 and job 2 wrote.")
    p.add_argument("--warehouse", required=True, metavar="DIR", help="the Delta warehouse of the two jobs")
    p.add_argument("--group", required=True, metavar="G", help="the consumer group")
    p.add_argument("--dump-id", "--broker", metavar="ID",
                   help="the dump, or the broker's history (default: the only one in the warehouse; required when "
                        "it holds several)")
    p.add_argument("--cluster", metavar="DUMP[,DUMP...]",
                   help="the dumps of a cluster's brokers (as job 2's --cluster): the message is found on whichever "
                        "broker holds it, and each answer names the broker's dump")
    key = p.add_mutually_exclusive_group(required=True)
    key.add_argument("--msg-id", metavar="ID",
                     help="the client's msgId (MessageExt.getMsgId(): the UNIQ_KEY, else the offset msg id)")
    key.add_argument("--offset-msg-id", metavar="ID",
                     help="the broker's offset msg id (store host, port and commit log offset, hex)")
    key.add_argument("--key", metavar="K", help="a message key (the KEYS property, one of its space-separated keys)")
    key.add_argument("--queue", metavar="TOPIC:QID:OFFSET",
                     help="a consume-queue unit: topic, queue id and queue offset")
    add_session_args(p, DEFAULTS)
    return p


def validate(args: argparse.Namespace) -> Inputs:
    """Check the arguments before Spark starts."""
    defaults = load_defaults(args.defaults)
    if args.dump_id is not None:
        try:
            check_dump_id(args.dump_id)
        except ValueError as e:
            raise InputError(str(e)) from None
    for by in ("msg_id", "offset_msg_id", "key", "queue"):
        value = getattr(args, by)
        if value is not None:
            break
    if by == "queue":
        topic, _, rest = value.rpartition(":")
        topic, _, qid = topic.rpartition(":")
        if not topic or not qid.isdigit() or not rest.isdigit():
            raise InputError(f"--queue {value!r}: expected TOPIC:QID:OFFSET, e.g. TradeOrder:0:42")
    if "://" not in args.warehouse and not os.path.isdir(os.path.join(table_path(args.warehouse, "group_stats"),
                                                                        "_delta_log")):
        raise InputError(f"{args.warehouse}: no group_stats Delta table: run python -m jobs.simulate_pull on this "
                         f"warehouse first")
    cluster = tuple(dict.fromkeys(d.strip() for d in (args.cluster or "").split(",") if d.strip()))
    if args.cluster is not None and (not cluster or args.dump_id is not None):
        raise InputError("--cluster takes the dump ids of the cluster's brokers, comma-separated, instead of "
                         "--dump-id")
    return Inputs(args.warehouse, args.group, args.dump_id, by, value, defaults, cluster)


def _table(spark: SparkSession, inputs: Inputs, name: str, dump_id: str) -> DataFrame:
    return read_dump(spark, inputs.warehouse, name, dump_id)  # the last complete run's version


def _small(spark: SparkSession, inputs: Inputs, name: str, dump_id: str, columns: list[str] | None = None,
           where: tuple[str, str, Any] | None = None) -> list[dict]:
    """A small table's rows (the same version), read on the driver: no Spark job where its log answers."""
    return read_rows(spark, inputs.warehouse, name, dump_id, columns=columns, where=where)


def _dump_id(spark: SparkSession, inputs: Inputs) -> str:
    if inputs.dump_id is not None:
        return inputs.dump_id
    ids = [r.dump_id for r in spark.read.format("delta").load(table_path(inputs.warehouse, "group_stats"))
           .select("dump_id").distinct().collect()]
    if len(ids) != 1:
        raise InputError(f"{inputs.warehouse} holds {len(ids)} dumps ({', '.join(sorted(ids))}): pass --dump-id")
    return ids[0]


def _broker_version(spark: SparkSession, inputs: Inputs, dump_id: str) -> str:
    """The release job 1 replayed the dump as (its `dumps` row), whose SQL92 grammar explain reads selectors in."""
    rows = _small(spark, inputs, "dumps", dump_id, ["broker_version"])
    return (rows[0].get("broker_version") if rows else None) or brokerversion.DEFAULT


def answer(spark: SparkSession, inputs: Inputs) -> Answer:
    """Look the message and the group's decisions up and put them in words (on each broker of `--cluster`)."""
    if not inputs.cluster:
        return _answer(spark, inputs, _dump_id(spark, inputs))
    out = Answer()
    for dump_id in inputs.cluster:
        try:
            one = _answer(spark, inputs, dump_id)
        except InputError as e:  # the group has no subscription there: it cannot hold the group's answer
            log.info("dump %s: %s", dump_id, e)
            continue
        if one.outcomes:
            out.text += [f"on the broker of dump {dump_id}:"] + ["  " + line for line in one.text]
            out.outcomes.update(one.outcomes)
    if not out.outcomes:
        out.text.append(f"no message with --{inputs.by.replace('_', '-')} {inputs.value} on any broker of the "
                        f"cluster ({', '.join(inputs.cluster)})")
    return out


def _answer(spark: SparkSession, inputs: Inputs, dump_id: str) -> Answer:
    """One dump's answer."""
    from pyspark.sql import functions as F

    out = Answer()
    subs = _small(spark, inputs, "group_stats", dump_id, where=("consumer_group", "in", [inputs.group]))
    if not subs:
        known = sorted({r["consumer_group"] for r in _small(spark, inputs, "group_stats", dump_id,
                                                           ["consumer_group"])})
        raise InputError(f"group {inputs.group!r} has no subscription in dump {dump_id!r}; groups: "
                         f"{', '.join(known)}")
    messages = _table(spark, inputs, "messages", dump_id)
    cols = ["commit_log_offset", "topic", "queue_id", "queue_offset", "tags", "keys", "uniq_key", "offset_msg_id",
            "properties", "store_timestamp", "sys_flag"]
    if inputs.by == "queue":
        topic, qid, offset = inputs.value.rsplit(":", 2)
        cq = _table(spark, inputs, "consume_queue", dump_id).where(
            (F.col("topic") == topic) & (F.col("queue_id") == int(qid)) & (F.col("queue_offset") == int(offset)))
        offsets = [r.commit_log_offset for r in cq.select("commit_log_offset").collect()]
        found = messages.where(F.col("commit_log_offset").isin(offsets)) if offsets else None
        if found is None:
            found = messages.where((F.col("topic") == topic) & (F.col("queue_id") == int(qid)) &
                                   (F.col("queue_offset") == int(offset)))
    else:
        if inputs.by == "msg_id":
            match = ((F.col("uniq_key") == inputs.value) |
                     (F.col("uniq_key").isNull() & (F.col("offset_msg_id") == inputs.value)))
        elif inputs.by == "offset_msg_id":
            match = F.col("offset_msg_id") == inputs.value
        else:
            match = F.array_contains(F.split(F.col("keys"), " "), inputs.value)
        # Ids and keys keep no file statistics: find the offsets reading those narrow columns alone, then the rows
        # by offset, which the files' statistics narrow to the files holding them.
        offsets = [r.commit_log_offset for r in messages.where(match).select("commit_log_offset")
                   .orderBy("commit_log_offset").limit(MAX_MESSAGES + 1).collect()]
        found = messages.where(F.col("commit_log_offset").isin(offsets))
    cols += [c for c in ("body", "body_size", "body_error") if c in messages.columns]
    rows = [r.asDict() for r in found.select(*cols).orderBy("commit_log_offset").limit(MAX_MESSAGES + 1).collect()]
    label = f"--{inputs.by.replace('_', '-')} {inputs.value}"
    if not rows:
        out.text.append(f"no message with {label} in dump {dump_id!r}")
        return out
    if len(rows) > MAX_MESSAGES:
        out.text.append(f"more than {MAX_MESSAGES} messages have {label}; the first {MAX_MESSAGES}:")
        rows = rows[:MAX_MESSAGES]
    filters = {(r["topic"], r["consumer_group"]): r for r in _small(spark, inputs, "consumer_filters", dump_id,
                                                                    where=("consumer_group", "in", [inputs.group]))}
    version = _broker_version(spark, inputs, dump_id)
    copies = _copies(spark, inputs, dump_id) if any(s.get("until_copy") for s in subs) else []
    by_offset = {r["commit_log_offset"]: r for r in rows}
    bodies = _body_lines(spark, inputs, dump_id, rows)
    keys = ["topic", "queue_id", "queue_offset", "commit_log_offset"]
    found_units = _table(spark, inputs, "consume_queue", dump_id).where(
        F.col("commit_log_offset").isin(list(by_offset))).select(*keys).collect()
    units = {r.commit_log_offset for r in found_units}
    decisions = [r.asDict() for r in row_forms.pull_decisions(
        spark, inputs.warehouse, dump_id, _unit_condition(list(by_offset), found_units),
        [s["subscription_index"] for s in subs])
                 .where(F.col("consumer_group") == inputs.group)
                 .orderBy("commit_log_offset", "subscription_index").collect()]
    for m in rows:
        mine = [d for d in decisions if d["commit_log_offset"] == m["commit_log_offset"]]
        out.text.append(f"message at commit log offset {m['commit_log_offset']}: topic {m['topic']}, queue "
                         f"{m['queue_id']} offset {m['queue_offset']}, tag {m['tags']!r}, keys {m['keys']!r}, "
                         f"msgId {m['uniq_key'] or m['offset_msg_id']}, offsetMsgId {m['offset_msg_id']}")
        out.text.append("  " + bodies[m["commit_log_offset"]])
        out.outcomes[m["commit_log_offset"]] = [d["outcome"] for d in mine] or None
        if not mine:
            out.text += ["  " + line for line in _never_scanned(m, subs, m["commit_log_offset"] in units)]
        for d in mine:
            sub = next(s for s in subs if s["subscription_index"] == d["subscription_index"])
            retry = evaluated_filter(d, m, filters)
            out.text += ["  " + line for line in explain(d, sub, filters.get((d["topic"], inputs.group)), m, retry,
                                                         version, subs, copies)]
    return out


def _unit_condition(offsets: list[int], units: list) -> Any:
    """The decision matrix's rows of these commit log offsets, narrowed to the consume-queue units found pointing
    at them (topic, queue and queue offset: the matrix files' statistics then skip every other queue's and
    piece's file, where offsets alone, interleaved across queues, skip few)."""
    from functools import reduce

    from pyspark.sql import functions as F

    by_offset = F.col("commit_log_offset").isin(offsets)
    if not units:  # no unit points at them: the offsets alone (the matrix has no row unless written from others)
        return by_offset
    queues: dict[tuple[str, int], set[int]] = {}
    for u in units:
        queues.setdefault((u.topic, u.queue_id), set()).add(u.queue_offset)
    return by_offset & reduce(lambda a, b: a | b, [
        (F.col("topic") == t) & (F.col("queue_id") == q) & F.col("queue_offset").isin(sorted(o))
        for (t, q), o in sorted(queues.items())])


def _preview(body: bytes) -> str:
    """A body's first BODY_PREVIEW characters as text, quoted."""
    text = body.decode("utf-8", errors="replace")
    return repr(text[:BODY_PREVIEW]) + (f" ... ({len(text):,} characters)" if len(text) > BODY_PREVIEW else "")


def _body_line(stored: StoredBody, where: str) -> str:
    """One line on a message's body: its size as stored, the codec, and what the client gets."""
    try:
        codec = compression_type(stored.sys_flag or 0) if stored.stored else None
    except DecompressError:
        codec = "unknown codec"
    head = f"body {len(stored.stored):,} bytes as stored{f', {codec}-compressed' if codec else ''} ({where})"
    if stored.body is None:
        return f"{head}: the client cannot decode it: {stored.error}"
    return f"{head}: {_preview(stored.body)}"


def _body_lines(spark: SparkSession, inputs: Inputs, dump_id: str, rows: list[dict]) -> dict[int, str]:
    """Per message, its body line: from the warehouse when job 1 wrote the body, else read from the dump's store
    (the dumps table's store and broker.conf), else why it cannot be shown."""
    out: dict[int, str] = {}
    need = []
    for m in rows:
        off = m["commit_log_offset"]
        if m.get("body") is None:
            need.append(off)
            continue
        flag = m["sys_flag"] or 0
        try:
            stored = StoredBody(off, flag, m["body"], decompress_body(m["body"], flag), None)
        except DecompressError as e:
            stored = StoredBody(off, flag, m["body"], None, str(e))
        out[off] = _body_line(stored, "from the warehouse")
    if not need:
        return out
    dump = next(iter(_small(spark, inputs, "dumps", dump_id, ["store", "broker_conf"])), None)
    spans = history.spans_of(spark, inputs.warehouse, dump_id).get(dump_id, [])
    by_store: dict[str | None, list[int]] = {}
    for off in need:  # a broker's history: the newest copy that held the record, else the dump's store
        by_store.setdefault(store_of(off, spans, dump["store"] if dump is not None else None), []).append(off)
    for where, offsets in by_store.items():
        out.update(_read_back(dump, where, offsets))
    return out


def _read_back(dump: Any, where: str | None, need: list[int]) -> dict[int, str]:
    """Body lines of records read back from one store (the dumps row's broker.conf applies to every copy)."""
    out: dict[int, str] = {}
    try:
        if where is None:
            raise StoreFormatError("the dumps table has no row for this dump")
        conf = dump["broker_conf"] if dump["broker_conf"] and os.path.isfile(dump["broker_conf"]) else None
        found = read_stored(StoreDir(where, broker_conf=conf), need)
    except (StoreFormatError, OSError, ValueError) as e:
        why = f"not in the warehouse (job 1 ran without --bodies) and the store {where or '(unknown)'} cannot be " \
              f"read: {e}"
        return {off: f"body: {why}" for off in need}
    for stored in found:
        if stored.stored is None:
            out[stored.offset] = f"body: not in the warehouse, and the store {where} holds no record there: " \
                                 f"{stored.error} (is it the dump job 1 read?)"
        else:
            out[stored.offset] = _body_line(stored, f"read from the store {where}")
    return out


def _copies(spark: SparkSession, inputs: Inputs, dump_id: str) -> list[dict]:
    """The history's copies rows (store, from_offset, to_offset, built_at): which copy's run decided a unit."""
    return _small(spark, inputs, "copies", dump_id, ["store", "from_offset", "to_offset", "built_at"])


def _never_scanned(m: dict, subs: list[dict], has_unit: bool) -> list[str]:
    """Why a group has no decision for an existing message."""
    if not has_unit:
        return ["the group never scanned it: the record has no consume-queue unit (a prepared or rolled-back "
                "transaction half, or a record past a damaged range), so no consumer can pull it"]
    on_topic = [s for s in subs if s["topic"] == m["topic"]]
    if not on_topic:
        topics = ", ".join(sorted({s["topic"] for s in subs}))
        return [f"the group never scanned it: it does not subscribe to topic {m['topic']} (it subscribes to "
                f"{topics})"]
    out = []
    for s in on_topic:
        if s["answer"] != "OK":
            out.append(f"the group never scanned it: the broker answers its subscription `{s['expression']}` with "
                       f"{s['answer']} ({s['answer_remark'] or s['answer_cause']}), before reading the store")
        else:
            out.append(f"the group's pulls (from the {s['start']} offset) never reached this unit: its offset is "
                       f"before where the pulls started")
    return out


QUICK_JIT = "-XX:TieredStopAtLevel=1"
"""The driver Java option of explain's own session: a lookup is a dozen small queries in a fresh JVM, where the
optimising compiler costs more CPU than it wins back (the 4 GiB bench warehouse, from a cold start: 16.0-18.0 s ->
12.4-13.1 s by queue unit or msgId). A defaults file that gives driver Java options keeps its own."""


def _session_defaults(inputs: Inputs) -> dict:
    """The defaults file's settings, with QUICK_JIT unless they name driver Java options."""
    conf = dict(inputs.defaults.get("spark_conf") or {})
    conf.setdefault("spark.driver.extraJavaOptions", QUICK_JIT)
    return {**inputs.defaults, "spark_conf": conf}


def main(argv: list[str] | None = None, spark: SparkSession | None = None) -> int:
    """Parse, look up, print; bad input is one line on stderr and exit code 2."""
    args = parser().parse_args(argv)
    return run_main(PROG, lambda: validate(args), lambda i: PROG, _session_defaults, args.master, answer, spark)


if __name__ == "__main__":
    sys.exit(main())
