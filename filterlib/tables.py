"""Every Delta table the jobs write, column by column: name, Arrow type and a one-line meaning, defined once.

The jobs take their Arrow schemas, Spark DDL (`jobs.schemas`) and column order from here, and the column tables of
docs/build_queues.md and docs/simulate_pull.md are made from here (`python -m filterlib.tables` rewrites them;
tests/test_tables.py fails when they differ). Where a producer in filterlib owns a table's Arrow types
(consume_queue: `filterlib.rebuild.dispatch.CQ_SCHEMA`; queue_diff: `filterlib.rebuild.verify.DIFF_SCHEMA`; messages:
`filterlib.store.scan.SCHEMA`), this module adds only `dump_id` and the meanings, and refuses a column without one.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from filterlib import vocabulary as vocab
from filterlib.rebuild.dispatch import CQ_SCHEMA
from filterlib.rebuild.verify import DIFF_SCHEMA
from filterlib.store.scan import SCHEMA as SCAN_SCHEMA


@dataclass(frozen=True)
class Column:
    """One column: its name, Arrow type and what it holds, in one line."""

    name: str
    type: pa.DataType
    doc: str


@dataclass(frozen=True)
class Table:
    """One Delta table: its name, what a row is, its key (empty: none stated) and its columns in written order."""

    name: str
    grain: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        """The column names in order."""
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        """The column called `name`."""
        return next(c for c in self.columns if c.name == name)

    def arrow(self, drop: Sequence[str] = ()) -> pa.Schema:
        """The table's Arrow schema, without the columns in `drop`."""
        return pa.schema([pa.field(c.name, c.type) for c in self.columns if c.name not in drop])

    def markdown(self) -> str:
        """The table's column table for docs/: a row per column with its SQL type and meaning."""
        rows = [f"| {c.name} | {sql_type(c.type)} | {c.doc} |" for c in self.columns]
        return "\n".join(["| column | type | meaning |", "| --- | --- | --- |", *rows])


_SQL_TYPES = {pa.int64(): "long", pa.int32(): "int", pa.string(): "string", pa.binary(): "binary",
              pa.bool_(): "boolean", pa.float64(): "double", pa.map_(pa.string(), pa.string()): "map<string,string>",
              pa.list_(pa.string()): "array<string>", pa.list_(pa.int32()): "array<int>",
              pa.list_(pa.int64()): "array<bigint>", pa.map_(pa.string(), pa.int64()): "map<string,long>"}


def sql_type(t: pa.DataType) -> str:
    """The Spark / Delta SQL name of an Arrow type the tables use."""
    return _SQL_TYPES[t]


def described(schema: pa.Schema, docs: Mapping[str, str]) -> tuple[Column, ...]:
    """A producer's Arrow schema as columns with meanings; ValueError when a column lacks one or a meaning lacks
    its column."""
    if list(docs) != schema.names:
        raise ValueError(f"meanings {list(docs)} do not match the schema's columns {schema.names}")
    return tuple(Column(f.name, f.type, docs[f.name]) for f in schema)


def _cols(*specs: tuple[str, pa.DataType, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in specs)


STR, INT, LONG, BOOL, BIN, DBL = pa.string(), pa.int32(), pa.int64(), pa.bool_(), pa.binary(), pa.float64()
PROPS = pa.map_(pa.string(), pa.string())
DUMP_ID = Column("dump_id", STR, "the dump's name; in a broker's history (`--broker`), the broker's")
COPY = Column("copy", STR, "the store (the history's copy, `copies.store`) whose run added the row; null outside a "
                           "broker's history, and in rows written before the column existed (`copies`' offset ranges "
                           "say it there)")

MESSAGES = Table("messages", "one row per CommitLog record (blank fillers excluded)",
                 ("dump_id", "commit_log_offset"), (
    DUMP_ID, *described(SCAN_SCHEMA, {
        "position": "global offset where the record was found (file base + position in the file)",
        "store_size": "TOTALSIZE",
        "magic_code": "MAGICCODE (v1 or v2)",
        "body_crc": "BODYCRC",
        "queue_id": "QUEUEID",
        "flag": "FLAG",
        "queue_offset": "QUEUEOFFSET",
        "commit_log_offset": "PHYSICALOFFSET",
        "sys_flag": "SYSFLAG",
        "born_timestamp": "BORNTIMESTAMP (ms)",
        "born_host": "BORNHOST as `ip:port` (`[v6]:port`)",
        "store_timestamp": "STORETIMESTAMP (ms)",
        "store_host": "STOREHOSTADDRESS",
        "reconsume_times": "RECONSUMETIMES",
        "prepared_transaction_offset": "PREPARED TRANSACTION OFFSET",
        "body": "the body as stored (compressed when sys_flag bit 0 says so), written only by a run with `--bodies`; "
                "null otherwise: the dump keeps it and `filterlib.store.bodies.read_bodies` reads it back by "
                "commit_log_offset",
        "body_size": "BODYLENGTH, the stored body's bytes (written with or without `--bodies`); the body starts "
                     "72 + 8 + 8 bytes into the record, 12 more per IPv6 host (sys_flag bits 0x10, 0x20)",
        "topic": "TOPIC",
        "properties": "PROPERTIES as the broker parses them (empty keys and values dropped, a repeated key's last "
                      "value kept), as text: the pairs `key`\\u0001`value` in the record's order joined by "
                      "\\u0002 (a map: `str_to_map(properties, '\\u0002', '\\u0001')`; tables written before "
                      "this form hold the map itself; `filterlib.store.properties_text`)",
        "tags": "TAGS property",
        "keys": "KEYS property",
        "uniq_key": "UNIQ_KEY property",
        "tags_code": "the tagsCode the dispatch computes (TAGS hash, or delivery time in SCHEDULE_TOPIC_XXXX)",
        "offset_msg_id": "the offset message id (store host + offset, hex)",
    }),
    Column("body_error", STR, "why the consumer's client cannot decode this record's body, as `JavaClass: message` (a "
                            "compressed body that does not inflate with the client's Compressor, or type bits that "
                            "name no codec); null when it decodes. A pull that returns such a message loses it and "
                            f"every later message of that pull (job 2's `{vocab.CLIENT_DECODE_FAILED}`)"), COPY))

CONSUME_QUEUE = Table("consume_queue", "one row per consume-queue unit", ("dump_id", "topic", "queue_id",
                                                                        "queue_offset"), (
    DUMP_ID, *described(CQ_SCHEMA, {
        "topic": "the unit's topic",
        "queue_id": "the unit's queue",
        "queue_offset": "the unit's offset in its queue",
        "commit_log_offset": "the record's commit log offset",
        "size": "the record's TOTALSIZE",
        "tags_code": "the real tagsCode (the CQ file holds the ext address instead when ext is on)",
        "msg_store_time": "the ext unit's store time; null without an ext unit",
        "filter_bitmap": "the ext unit's bitmap (ceil(m/8) bytes); null without one (see the rule above)",
    }), COPY))

CONSUMER_FILTERS = Table("consumer_filters", "one row per (group, topic) SQL92 registration",
                         ("dump_id", "consumer_group", "topic"), (DUMP_ID, *_cols(
    ("consumer_group", STR, "the registration's group"),
    ("topic", STR, "the registration's topic"),
    ("expression", STR, "the selector as registered"),
    ("expression_type", STR, "the selector's type as registered"),
    ("client_version", LONG, "the registered client version"),
    ("born_time", LONG, "bornTime as in the dump's file; 0 for registrations taken from the subscriptions file "
                        "(only when the dump has no registry)"),
    ("dead_time", LONG, "deadTime as in the dump's file"),
    ("dead", BOOL, "as in the dump's file (the broker's load marks every record dead; dead records still filter)"),
    ("source", STR, "`consumerFilter.json` or `subscriptions`"),
    ("registered", BOOL, "in the registry the bitmaps use (false: a subscriptions-file selector the broker would "
                      "refuse)"),
    ("compiled", BOOL, "whether the selector compiles"),
    ("compile_error", STR, "the first line of the compile error, else null"),
    ("bloom_bit_pos", pa.list_(INT), "the bloom data: bit positions of `group#topic`"),
    ("bloom_bit_num", INT, "the bloom data: m, the bitmap's bit count"))))

DUMP_FILES = Table("dump_files", "one row per commitlog file read", ("dump_id", "path"), (DUMP_ID, *_cols(
    ("path", STR, "the file relative to the store root (`commitlog/<20 digits>`)"),
    ("kind", STR, "`commitlog`"),
    ("file_base", LONG, "the file's global start offset (its name)"),
    ("size", LONG, "bytes; size = decoded_bytes + blank_bytes + zero_tail_bytes + damaged_bytes"),
    ("records", LONG, "records decoded (before the valid end)"),
    ("decoded_bytes", LONG, "bytes of the decoded records"),
    ("blank_bytes", LONG, "bytes of the BLANK filler"),
    ("zero_tail_bytes", LONG, "bytes of unwritten zeros at the end"),
    ("damaged_bytes", LONG, "bytes from the first damage up to the last non-zero byte"),
    ("valid_end", LONG, "file offset where valid data ends"),
    ("end_kind", STR, "`blank` (BLANK filler), `eof`, `zero_tail` (unwritten zeros) or `fail` (damage)"),
    ("damage_offset", LONG, "the first damage's file offset (null: no damage)"),
    ("damage_global_offset", LONG, "the first damage's global offset"),
    ("damage_length", LONG, "the first damage's bytes up to the last non-zero byte"),
    ("damage_reason", STR, "why the first damage is damage"),
    ("splits", INT, "byte ranges the file was read in"),
    ("whole_file_fallback", BOOL, "the splits lost sync and the file was decoded again as one range"))))

DUMPS = Table("dumps", "one row per dump", ("dump_id",), (DUMP_ID, *_cols(
    ("store", STR, "the store: the absolute path, or the URI without its query and credentials"),
    ("broker_conf", STR, "the broker.conf's absolute path, or null"),
    ("subscriptions", STR, "the subscriptions file's absolute path, or null"),
    ("built_at", LONG, "when job 1 finished (epoch ms)"),
    ("files", INT, "commitlog files read"),
    ("bytes", LONG, "their bytes"),
    ("records", LONG, "records decoded"),
    ("units", LONG, "consume-queue units rebuilt"),
    ("queues", INT, "queues rebuilt"),
    ("broker_version", STR, "the release the dump was replayed as (`--broker-version`, else detected, else 5.3.3; "
                            "job 2's default); null in rows written before the column existed"))))

COPIES = Table("copies", "one row per store copy job 1 appended to a broker's history (`--broker`)",
               ("dump_id", "from_offset"), (Column("dump_id", STR, "the broker's history (`--broker`)"), *_cols(
    ("store", STR, "the copy: the absolute path, or the URI without its query and credentials"),
    ("built_at", LONG, "when job 1 finished appending it (epoch ms)"),
    ("first_offset", LONG, "the global offset of the copy's first commitlog file"),
    ("from_offset", LONG, "where the copy's new records begin: the history's end before it (its first file's "
                          "offset for the first copy, the gap's end after a gap)"),
    ("to_offset", LONG, "the history's end after it: the rows with from_offset <= commit_log_offset < to_offset "
                        "are the ones this copy added"),
    ("gap_from", LONG, "the start of the offsets no copy held (deleted by retention before this copy), or null"),
    ("gap_bytes", LONG, "bytes of that gap (0 without one)"),
    ("files", INT, "commitlog files the copy added to or began"),
    ("records", LONG, "records it added"),
    ("units", LONG, "consume-queue units it added"),
    ("checked", INT, "records of the copy compared with the history's before appending (all equal)"),
    ("broker_version", STR, "the release the copy was replayed as"),
    ("queue_ids", pa.list_(STR),
     "the queues it added units to, each `<queue id>:<topic>`: the history's queues are the union over its copies "
     "(null in rows written "
     "before the column existed, or where job 1 counted the units in Spark: then the history's queues are "
     "counted over consume_queue)"))))

QUEUE_DIFF = Table("queue_diff", "one row per unit where the rebuild and the dump's own queues differ (`--verify`)",
                   ("dump_id", "topic", "queue_id", "queue_offset"), (DUMP_ID, *described(DIFF_SCHEMA, {
    "topic": "the unit's topic",
    "queue_id": "the unit's queue",
    "queue_offset": "the unit's offset",
    "kind": "`missing` (only the rebuild has it), `extra` (only the dump's queue has it) or `differs`",
    "fields": "for `differs`, the columns that disagree (commit_log_offset, size, tags_code, msg_store_time, "
              "filter_bitmap); empty otherwise",
    "dump_commit_log_offset": "the dump's unit's commit log offset (null where it has no unit)",
    "rebuild_commit_log_offset": "the rebuilt unit's commit log offset (null where it has no unit)",
    "dump_size": "the dump's unit's size",
    "rebuild_size": "the rebuilt unit's size",
    "dump_cq_tags_field": "the dump's consume-queue unit's own tagsCode field (an ext address when ext is on)",
    "dump_tags_code": "the tagsCode the dump gives the filter (null when its ext address resolves to no unit)",
    "rebuild_tags_code": "the tagsCode the rebuild gives the filter",
    "dump_msg_store_time": "the dump's ext unit's store time (null without an ext unit)",
    "rebuild_msg_store_time": "the rebuilt ext unit's store time (null without an ext unit)",
    "dump_filter_bitmap": "the dump's ext unit's bitmap (null without one)",
    "rebuild_filter_bitmap": "the rebuilt ext unit's bitmap (null without one)",
    "explained": "true only for a bitmap-only difference the rule accounts for",
    "reason": "why, one clause per differing field (separated by a vertical bar); for a bitmap, the rule's verdict "
              "and the records it cites",
})))

_SUB = _cols(("consumer_group", STR, "the subscription's group"),
             ("topic", STR, "the subscription's topic"),
             ("subscription_index", INT, "the subscription's number in the dump (kept across the runs over a broker's "
                                          "history)"))
_SUB_TYPE = _cols(("subscription_type", STR, "the subscription's type"),
                  ("expression", STR, "the subscription's expression"))
_outcomes = ", ".join(vocab.OUTCOME_NAMES)
_layers = ", ".join(vocab.LAYERS)

_MEMBER = _cols(("member", STR, "the group member (client id) whose queue it is and whose pull scanned it; null for "
                                "a group not replayed as its members"),
                ("kept_by", STR, "the possibility the row belongs to: the member whose subscription the broker "
                                 "keeps for (group, topic)"))

PULL_DECISIONS = Table("pull_decisions_rows", "one row per (subscription, unit it scanned): the row form of "
                       "`pull_decisions`, `jobs.row_forms.pull_decisions()` (not stored)",
                       ("dump_id", "consumer_group", "topic", "subscription_index", "queue_id", "queue_offset"), (
    DUMP_ID, *_SUB, *_cols(
        ("queue_id", INT, "the consume-queue unit's queue"),
        ("queue_offset", LONG, "the consume-queue unit's offset"),
        ("commit_log_offset", LONG, "the unit's message"),
        ("size", INT, "the unit's message size (CQ unit)"),
        ("tags_code", LONG, "the tagsCode the filter got (null: the broker's null, an ext unit that could not be "
                            "read)"),
        ("outcome", STR, f"{_outcomes} (`filterlib.vocabulary`; {vocab.CLIENT_DECODE_FAILED}: the broker returned "
                         "it, the client's decode of the pull lost it, see below)"),
        ("layer", STR, f"the layer that decided: {_layers}"),
        ("reason", STR, "the branch that decided (e.g. tag_hash_miss, bloom_miss, sql_error, client_tag_mismatch, "
                      "client_decode_failed, client_decode_lost)"),
        ("cq_reason", STR, "the consume-queue layer's branch (tag_hash_hit, bloom_hit, not_in_live, no_bloom_data, "
                           "...)"),
        ("detail", STR, "where the commit-log layer decided: TRUE / FALSE / NULL, or `JavaClass: message` of an "
                      f"evaluation error; for {vocab.CLIENT_DECODE_FAILED}, the body's decode error, or which earlier "
                      "message of the pull failed"),
        ("sql_value", STR, "TRUE, FALSE, NULL or ERROR wherever SQL92 was evaluated, null elsewhere"),
        ("bloom_false_positive", BOOL, "the bloom test passed and SQL92 then dropped the message"),
        ("bloom_tested", BOOL, "the consume-queue layer read the unit's bitmap"),
        ("bloom_bitmap", BIN, "that bitmap (only where bloom_tested)"),
        ("pull_index", INT, "the pull of this queue that scanned the unit (0-based; null: NEVER_PULLED)")),
    *_SUB_TYPE, *_MEMBER, COPY))

PULLS = Table("pulls", "one row per pull",
              ("dump_id", "consumer_group", "topic", "subscription_index", "queue_id", "pull_index"), (
    DUMP_ID, *_SUB, *_cols(
        ("queue_id", INT, "the queue pulled"),
        ("pull_index", INT, "the pull's number in this queue (0-based)"),
        ("request_offset", LONG, "the offset the pull asked for"),
        ("status", STR, "FOUND, NO_MATCHED_MESSAGE, NO_MESSAGE_IN_QUEUE, OFFSET_TOO_SMALL, OFFSET_OVERFLOW_ONE or "
                      "OFFSET_OVERFLOW_BADLY, as getMessage returns it"),
        ("next_begin_offset", LONG, "where the next pull starts"),
        ("message_count", INT, "messages returned by the broker"),
        ("filter_message_count", INT, "messages dropped by the commit-log layer")), COPY))

DELIVERED_MESSAGES = Table("delivered_messages_rows", "one row per message a group received: "
                           "`jobs.row_forms.delivered_messages()` (not stored)",
                           ("dump_id", "consumer_group", "subscription_index", "commit_log_offset"), (
    DUMP_ID, *_SUB, *_cols(
        ("queue_id", INT, "the unit's queue"),
        ("queue_offset", LONG, "the unit's offset"),
        ("commit_log_offset", LONG, "the message's commit log offset"),
        ("pull_index", INT, "the pull that returned it"),
        ("member", STR, "the group member (client id) that received it; null for a group not replayed as its "
                        "members"),
        ("kept_by", STR, "the possibility it was received in: the member whose subscription the broker kept"),
        ("msg_id", STR, "`getMsgId()`: the UNIQ_KEY, else the offset msg id"),
        ("offset_msg_id", STR, "store host, port and commit log offset"),
        ("uniq_key", STR, "UNIQ_KEY property"),
        ("message_topic", STR, "the record's topic")),
    *(MESSAGES.column(n) for n in ("tags", "keys")), *_cols(
        ("properties", PROPS, "PROPERTIES as the broker parses them, as a map"),
        ("body", BIN, "the body, decompressed as the client does"),
        ("stored_body_size", INT, "the body's size as stored")),
    *(MESSAGES.column(n) for n in ("store_size", "sys_flag")), *_cols(
        ("client_sys_flag", INT, "the sysFlag the consumer's message holds: `sys_flag` with the compressed bit "
                                 "cleared by a 5.x client's decode, kept by a 4.9 client's (the dump's broker "
                                 "release)")),
    *(MESSAGES.column(n) for n in ("flag", "born_timestamp", "born_host", "store_timestamp", "store_host",
                                   "reconsume_times")), COPY))

GROUP_STATS = Table("group_stats", "one row per subscription", ("dump_id", "consumer_group", "topic",
                                                                "subscription_index"), (
    DUMP_ID, *_SUB, *_SUB_TYPE, *_cols(
        ("path", STR, "how the broker gets it: posted or registered"),
        ("sub_version", LONG, "the subscription version the pull carries"),
        ("batch_size", INT, "messages per pull"),
        ("source", STR, "where it came from (`subscriptions` file or `consumerFilter.json`)"),
        ("answer", STR, "the broker's pre-read answer"),
        ("answer_remark", STR, "the broker's response remark"),
        ("answer_cause", STR, "the FilterAPI error behind SUBSCRIPTION_PARSE_FAILED"),
        ("filter_class", STR, "when OK, the filter class the broker pulls with"),
        ("start", STR, "earliest or committed"),
        ("queues", INT, "queues pulled"),
        ("units_scanned", LONG, "units the pulls scanned")),
    *(Column(o.column, LONG, f"units {o.name}: {o.words}") for o in vocab.OUTCOMES), *_cols(
        ("tag_collisions", LONG, "messages that passed the tag hash with another tag (String.hashCode collisions)"),
        ("bloom_tested", LONG, "bitmaps read"),
        ("bloom_false_positives", LONG, "bloom tests passed that SQL92 then dropped"),
        ("bloom_fp_rate", DBL, "false positives / (false positives + bloom misses)"),
        ("configured_fp_rate", DBL, "maxErrorRateOfBloomFilter"),
        ("sql_evaluations", LONG, "SQL92 evaluations the commit-log layer made"),
        ("bytes_delivered", LONG, "sizes of the delivered units"),
        ("bytes_filtered_on_broker", LONG, "sizes of the units the broker's two layers dropped (never sent)"),
        ("pulls", LONG, "pulls made"),
        ("empty_pulls", LONG, "pulls that returned no message"),
        ("found_pulls", LONG, "pulls with status FOUND"),
        ("subscription_position", INT, "the subscription's byte in its topic's `pull_decisions.decisions` (0-based: "
                                       "its rank among the dump's subscriptions to the topic, kept across the runs "
                                       "over a broker's history; a row shorter than it holds no decision of it)"),
        ("member", STR, "the group member (client id) whose pulls the row counts; null for a group not replayed as "
                        "its members"),
        ("kept_by", STR, "the member whose subscription the broker keeps for (group, topic) in this row's "
                         "possibility (null: every subscriber posts its own)"),
        ("kept_type", STR, "the kept subscription's type"),
        ("kept_expression", STR, "the kept subscription's expression: the broker filters a registered member's "
                                 "pulls with it"),
        ("owned_queues", STR, "the queue ids the group's allocation gives the member on this broker, comma-separated "
                              "(null: every queue of the topic)"),
        ("since_copy", STR, "the store (the history's copy) whose run of job 2 first replayed the subscription: it is "
                            "in force for the units decided from that run on"),
        ("until_copy", STR, "the copy whose run no longer had it (the group's subscription changed, or it was "
                            "removed); null while it is in force. Its counts cover the runs before that copy"))))

PULL_POSITIONS = Table("pull_positions", "one row per (subscription, queue) a run of job 2 pulled or decided: where "
                       "the next run over a broker's history continues", ("dump_id", "subscription_index", "topic",
                                                                          "queue_id"), (
    DUMP_ID, *_SUB, *_cols(
        ("member", STR, "the group member owning the queue (null for a group not replayed as its members)"),
        ("kept_by", STR, "the possibility: the member whose subscription the broker keeps"),
        ("queue_id", INT, "the queue"),
        ("next_offset", LONG, "where the subscription's next pull on the queue starts: its last pull's "
                              "next_begin_offset (the queue's end for a member that never pulls it)"),
        ("pulls", LONG, "pulls of the queue made so far (the next run numbers its pulls on from here)"),
        ("copy", STR, "the store (the history's copy) of the run that left the position"))))

DECISION_MATRIX = Table("pull_decisions", "one row per consume-queue unit that at least one subscription scanned "
                        "(over a broker's history, a second row holds the decisions of a subscription new to "
                        "the history over units an earlier run decided)",
                        ("dump_id", "topic", "queue_id", "queue_offset"), (DUMP_ID, *_cols(
    ("topic", STR, "the unit's topic"),
    ("queue_id", INT, "the unit's queue"),
    ("queue_offset", LONG, "the unit's offset"),
    ("commit_log_offset", LONG, "the unit's message"),
    ("size", INT, "the unit's message size (CQ unit)"),
    ("tags_code", LONG, "the tagsCode the filters got (null: the broker's null, an ext unit that could not be read)"),
    ("bloom_bitmap", BIN, "the unit's ext bitmap, where at least one subscription's bloom layer read it"),
    ("decisions", BIN, "one byte per subscription to the topic, at its group_stats.subscription_position: the "
                       "decision's code in `decision_codes` (0: that subscription's pulls never reached the unit)")),
    COPY))

DECISION_DETAILS = Table("decision_details", "one row per decision whose detail its code does not give",
                         ("dump_id", "subscription_index", "topic", "queue_id", "queue_offset"), (DUMP_ID, *_cols(
    ("subscription_index", INT, "the subscription's number in this run"),
    ("topic", STR, "the unit's topic"),
    ("queue_id", INT, "the unit's queue"),
    ("queue_offset", LONG, "the unit's offset"),
    ("detail", STR, f"`JavaClass: message` of a SQL92 evaluation error ({vocab.SQL_ERROR}); for "
                    f"{vocab.CLIENT_DECODE_FAILED}, the body's decode error, or which earlier message of the pull "
                    "failed")), COPY))

DECISION_CODES = Table("decision_codes", "one row per decision code (`filterlib.vocabulary.DECISION_CODES`)",
                       ("dump_id", "code"), (DUMP_ID, *_cols(
    ("code", INT, "the byte in `pull_decisions.decisions` (0: not scanned, every other column null or false)"),
    ("outcome", STR, f"{_outcomes}"),
    ("layer", STR, f"the layer that decided: {_layers}"),
    ("reason", STR, "the branch that decided"),
    ("cq_reason", STR, "the consume-queue layer's branch"),
    ("sql_value", STR, "TRUE, FALSE, NULL or ERROR where SQL92 was evaluated, null elsewhere"),
    ("bloom_tested", BOOL, "the consume-queue layer read the unit's bitmap"),
    ("bloom_false_positive", BOOL, "the bloom test passed and SQL92 then dropped the message"))))

WHAT_IF = Table("what_if", "one row per unit a candidate gains or loses (only written by a run with `--what-if`)",
                (), (DUMP_ID, *_cols(
    ("consumer_group", STR, "the group whose subscription the candidate replaces"),
    ("topic", STR, "the unit's topic"),
    ("queue_id", INT, "the unit's queue"),
    ("queue_offset", LONG, "the unit's offset"),
    ("commit_log_offset", LONG, "the unit's message"),
    ("change", STR, "gained or lost"),
    ("current_expression", STR, "the group's current expression"),
    ("candidate_expression", STR, "the candidate expression"),
    ("current_outcome", STR, "the current subscription's outcome (null: it did not pull the unit)"),
    ("candidate_outcome", STR, "the candidate's outcome"),
    ("msg_id", STR, "the UNIQ_KEY, else the offset msg id"),
    ("tags", STR, "TAGS property"))))

RUNS = Table("runs", "one row per complete run of a job on a dump (written last, after every table of the run)",
             ("dump_id", "run_id"), (DUMP_ID, *_cols(
    ("run_id", STR, "the run's own id (random, unique)"),
    ("job", STR, "build_queues or simulate_pull"),
    ("finished_at", LONG, "when the run recorded itself, ms since the epoch"),
    ("tables", pa.map_(pa.string(), pa.int64()), "each table the run wrote, with the Delta version it committed"),
    ("inputs", pa.map_(pa.string(), pa.int64()), "each table of another job the run read, with the Delta version "
                                                 "it read (job 2: job 1's last complete run)"))))

JOB1 = (MESSAGES, CONSUME_QUEUE, CONSUMER_FILTERS, DUMP_FILES, DUMPS, COPIES, QUEUE_DIFF)
JOB2 = (DECISION_MATRIX, DECISION_DETAILS, DECISION_CODES, PULLS, GROUP_STATS, PULL_POSITIONS, WHAT_IF, PULL_DECISIONS,
        DELIVERED_MESSAGES)
"""Job 2's tables, then the two row forms (`jobs.row_forms`) that are documented beside them but not stored."""
ROW_FORMS = (PULL_DECISIONS, DELIVERED_MESSAGES)
TABLES: dict[str, Table] = {t.name: t for t in (*JOB1, *JOB2, RUNS)}
DOCS = {"docs/build_queues.md": JOB1, "docs/simulate_pull.md": JOB2, "docs/runs.md": (RUNS,)}
"""Which doc holds which tables' column tables."""

_BLOCK = re.compile(r"<!-- columns: (\w+) -->\n.*?<!-- end columns -->", re.S)


def render_docs(text: str) -> str:
    """A doc's text with every `<!-- columns: NAME -->` … `<!-- end columns -->` block made from TABLES."""
    return _BLOCK.sub(lambda m: f"<!-- columns: {m[1]} -->\n{TABLES[m[1]].markdown()}\n<!-- end columns -->", text)


def documented(text: str) -> list[str]:
    """The tables whose column blocks a doc holds, in order."""
    return _BLOCK.findall(text)


def main(root: str = ".") -> int:
    """Rewrite the docs' column tables from TABLES; prints the files that changed."""
    for rel in DOCS:
        path = Path(root) / rel
        old = path.read_text(encoding="utf-8")
        new = render_docs(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
