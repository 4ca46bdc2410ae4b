"""The run report: one self-contained HTML page per dump, read from the Delta tables of jobs 1 and 2.

    python -m jobs.report --warehouse DIR --dump-id ID [--out FILE] [--top N] [--defaults FILE] [--master URL]

Spark aggregates the tables of one dump_id (group_stats; the decision matrix exploded only for the subscriptions
whose group_stats counts hold tag mismatches or SQL92 errors, and only into those decisions
(`jobs.row_forms.decided`), joined to messages; consumer_filters, dump_files, consume_queue); only small results
reach the driver (a row per subscription, per file, per topic, the top collisions and error classes).
`jobs.report_html.render` turns them into the page: per-subscription stacked bars of outcomes, the bloom
false-positive rate measured against the configured one, the top tag-hash collisions, SQL92 errors by class and
group, the seeds' bitmap question per topic, the dump's damaged ranges and file accounting. The page is written to
<warehouse>/reports/<dump_id>.html (a local warehouse) or to --out (required when the warehouse is a URI such as
s3a:// or hdfs://).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from filterlib import brokerversion, sql92
from filterlib import tags as tagmod
from filterlib import vocabulary as vocab
from filterlib.members import inconsistencies
from filterlib.replay.plans import NOT_SUBSCRIBED
from jobs import row_forms
from jobs.cli import ROOT, InputError, add_session_args, job_logger, load_defaults, run_main, writable_dir
from jobs.delta_files import dump_records
from jobs.delta_io import check_dump_id, table_path
from jobs.report_html import OUTCOMES, render
from jobs.runs import read_dump, read_rows, read_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULTS = ROOT / "conf" / "report.json"
PROG = "report"
log = job_logger(PROG)
TABLES = {"group_stats": "jobs.simulate_pull", "pull_decisions": "jobs.simulate_pull",
          "messages": "jobs.build_queues", "consume_queue": "jobs.build_queues",
          "consumer_filters": "jobs.build_queues", "dump_files": "jobs.build_queues", "dumps": "jobs.build_queues"}
STATS_FIELDS = ["consumer_group", "topic", "subscription_index", "subscription_type", "expression", "path", "source",
                "answer", "answer_remark", "answer_cause", "units_scanned", *(o.column for o in vocab.PIPELINE_ORDER),
                "tag_collisions", "bloom_tested", "bloom_false_positives", "bloom_fp_rate", "configured_fp_rate",
                "pulls", "empty_pulls", "bytes_delivered", "bytes_filtered_on_broker", "member", "kept_by", "kept_type",
                "kept_expression", "owned_queues", "since_copy", "until_copy"]
FILE_FIELDS = ["path", "kind", "file_base", "size", "records", "decoded_bytes", "blank_bytes", "zero_tail_bytes",
               "damaged_bytes", "valid_end", "end_kind", "damage_offset", "damage_global_offset", "damage_length",
               "damage_reason", "splits", "whole_file_fallback"]
# "JavaClass: message", the message itself often starting with the cause's class ("java.lang.X: ...").
ERROR_CLASS = r"^([A-Za-z_$][\w$.]*)(?::|$)"
CAUSE_CLASS = r"^[A-Za-z_$][\w$.]*: ([A-Za-z_$][\w$.]*(?:Exception|Error|Throwable))\b"


@dataclass
class Inputs:
    """Validated before Spark starts."""

    warehouse: str
    dump_id: str
    out: str
    top: int
    defaults: dict[str, Any]
    cluster: tuple[str, ...] = ()
    """The dumps of a cluster's brokers (`--cluster`): one page over all of them."""


@dataclass
class Summary:
    """What the run wrote, for the console and for tests."""

    dump_id: str
    out: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    bytes: int = 0

    def lines(self) -> list[str]:
        t = self.data.get("totals", {})
        return [f"report of dump {self.dump_id}: {self.out} ({self.bytes:,} bytes)",
                f"  {t.get('subscriptions', 0)} subscriptions ({t.get('pulled', 0)} pulled), "
                f"{t.get('decisions', 0):,} decisions, {t.get('delivered', 0):,} delivered, "
                f"{t.get('messages', 0):,} messages in {t.get('commitlog_files', 0)} commitlog files, "
                f"{t.get('damaged_files', 0)} with damage"]


def _local_dir(warehouse: str) -> str | None:
    """The local directory of a warehouse given as a path or a file: URI; None for any other URI."""
    if "://" not in warehouse and not warehouse.startswith("file:"):
        return warehouse
    u = urlparse(warehouse)
    return u.path if u.scheme == "file" else None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jobs.report",
        description="Write the run report of one dump: a single self-contained HTML file (inline CSS and SVG "
                    "charts, no network needed to view it) read from the Delta tables jobs.build_queues and "
                    "jobs.simulate_pull wrote for that dump: outcomes per subscription, bloom false-positive "
                    "rates, tag-hash collisions, SQL92 errors, evaluations saved and added by bloom bitmaps per "
                    "topic, damaged ranges and file accounting.")
    p.add_argument("--warehouse", required=True, metavar="DIR",
                   help="the Delta warehouse both jobs wrote (a local directory or a URI)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--dump-id", "--broker", metavar="ID",
                       help="the dump's name in the tables, or the broker's history (job 1's --broker)")
    which.add_argument("--cluster", metavar="DUMP[,DUMP...]",
                       help="the dumps of a cluster's brokers (as job 2's --cluster): one page over all of them, "
                            "each row labelled with its broker's dump, a group's members summed over the brokers "
                            "(default page: <warehouse>/reports/cluster__<dump>__<dump>.html)")
    p.add_argument("--out", metavar="FILE",
                   help="where to write the page (a local file; default <warehouse>/reports/<dump_id>.html, "
                        "required when the warehouse is not local)")
    p.add_argument("--top", type=int, default=20, metavar="N",
                   help="rows kept in the top lists (tag-hash collisions, SQL error classes × groups); default 20")
    add_session_args(p, DEFAULTS)
    return p


def validate(args: argparse.Namespace) -> Inputs:
    """Check the arguments before Spark starts; InputError with one line naming what is wrong."""
    defaults = load_defaults(args.defaults)
    cluster = tuple(dict.fromkeys(d.strip() for d in (args.cluster or "").split(",") if d.strip()))
    try:
        for d in cluster or (args.dump_id,):
            check_dump_id(d)
    except ValueError as e:
        raise InputError(str(e)) from None
    if args.cluster is not None and not cluster:
        raise InputError("--cluster names no dump: give the dump ids of the cluster's brokers, comma-separated")
    dump_id = args.dump_id if not cluster else "cluster__" + "__".join(cluster)
    if args.top < 1:
        raise InputError(f"--top {args.top}: must be at least 1")
    local = _local_dir(args.warehouse)
    if local is not None:
        for table, job in TABLES.items():
            if not os.path.isdir(os.path.join(local, table, "_delta_log")):
                raise InputError(f"{args.warehouse}: no Delta table {table}/ in it; run python -m {job} on the dump "
                                 f"first")
    out = args.out
    if out is None:
        if local is None:
            raise InputError(f"{args.warehouse}: the warehouse is not a local directory; pass --out FILE for the "
                             f"report")
        out = os.path.join(local, "reports", f"{dump_id}.html")
    out = os.path.abspath(out)
    if os.path.isdir(out):
        raise InputError(f"{out}: --out is a directory; give the file to write")
    writable_dir(os.path.dirname(out), "the report's directory")
    return Inputs(args.warehouse, dump_id, out, args.top, defaults, cluster)


def _rows(df) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def collect(spark: SparkSession, warehouse: str, dump_id: str, top: int = 20,
            generated_at: str | None = None) -> dict[str, Any]:
    """The report's data for one dump, aggregated by Spark: plain dicts and lists (`jobs.report_html.render`)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    sc = spark.sparkContext

    def table(name: str):
        try:
            df = read_dump(spark, warehouse, name, dump_id)
            df.schema  # noqa: B018 - resolves the table now, so a missing one fails here with its name
            return df
        except AnalysisException as e:
            raise InputError(f"{table_path(warehouse, name)}: cannot read the table ({str(e).splitlines()[0]}); run "
                             f"python -m {TABLES[name]} on the dump first") from None

    def small(name: str, columns: list[str]) -> list[dict[str, Any]]:
        """A small table's rows (of `columns` it holds), read on the driver: no Spark job where its log answers."""
        try:
            return read_rows(spark, warehouse, name, dump_id, columns=columns)
        except AnalysisException as e:
            raise InputError(f"{table_path(warehouse, name)}: cannot read the table ({str(e).splitlines()[0]}); run "
                             f"python -m {TABLES[name]} on the dump first") from None

    # the small tables are read on the driver from the files their logs name (no Spark job)
    stats = small("group_stats", STATS_FIELDS)  # a column added since the table was written reads as null (0)
    groups = sorted(({c: r.get(c) for c in STATS_FIELDS} for r in stats), key=lambda g: g["subscription_index"])
    if not groups:
        raise InputError(f"{table_path(warehouse, 'group_stats')}: no rows for dump {dump_id!r}; run "
                         f"python -m jobs.simulate_pull on it first (or pass its --dump-id)")
    log.info("%d subscriptions", len(groups))

    table("pull_decisions")  # the matrix: a missing one fails here with its name
    messages = table("messages")

    def holding(outcome: str) -> list[int]:
        """The subscriptions whose group_stats count of `outcome` is not 0 (a count the table lacks cannot tell:
        those too): only their topics' matrix rows are exploded, only for them; none, no Spark job."""
        column = vocab.OUTCOME_COLUMNS[outcome]
        return [g["subscription_index"] for g in groups if g[column] != 0]

    collisions, untagged = [], []
    mismatching = holding(vocab.TAG_CLIENT_MISMATCH)
    if mismatching:
        sc.setJobDescription(f"{PROG} {dump_id}: tag-hash collisions")
        mismatch = row_forms.decided(spark, warehouse, dump_id,
                                     subscriptions=mismatching,
                                     codes=F.col("outcome") == vocab.TAG_CLIENT_MISMATCH, details=False)
        coll = (mismatch.where(F.col("reason") == "client_tag_mismatch")
                .select("consumer_group", "topic", "subscription_index", "expression", "commit_log_offset",
                        "tags_code")
                .join(messages.select("commit_log_offset", F.col("tags").alias("message_tag")), "commit_log_offset",
                      "left")
                .groupBy("consumer_group", "topic", "subscription_index", "expression", "message_tag", "tags_code")
                .agg(F.count(F.lit(1)).alias("count"))
                .orderBy(F.desc("count"), "consumer_group", "topic", "message_tag").limit(top))
        for r in _rows(coll):
            try:
                sub = tagmod.parse_subscription(r["expression"] or "*")
                subscribed = sorted(t for t in sub.tags if tagmod.tags_code(t) == r["tags_code"])
            except Exception:  # an expression the parser refuses cannot have pulled; show no tag rather than fail
                subscribed = []
            collisions.append({"consumer_group": r["consumer_group"], "topic": r["topic"],
                               "expression": r["expression"], "subscribed_tags": subscribed,
                               "message_tag": r["message_tag"], "hash_code": r["tags_code"], "count": r["count"]})
        untagged = _rows(mismatch.where(F.col("reason") == "client_no_tags")
                         .groupBy("consumer_group", "topic", "expression").agg(F.count(F.lit(1)).alias("count"))
                         .orderBy(F.desc("count"), "consumer_group").limit(top))

    sql_errors = []
    erring = holding(vocab.SQL_ERROR)
    if erring:
        sc.setJobDescription(f"{PROG} {dump_id}: SQL92 errors")
        detail = F.coalesce(F.col("detail"), F.lit(""))
        err_class = F.regexp_extract(detail, ERROR_CLASS, 1)
        cause = F.regexp_extract(detail, CAUSE_CLASS, 1)
        sql_errors = _rows(
            row_forms.decided(spark, warehouse, dump_id, subscriptions=erring,
                              codes=F.col("outcome") == vocab.SQL_ERROR)
            .select(F.when(err_class == "", F.lit("(no class)")).otherwise(err_class).alias("error_class"),
                    F.when(cause == "", F.lit(None)).otherwise(cause).alias("cause_class"),
                    "consumer_group", "topic", F.col("detail"))
            .groupBy("error_class", "cause_class", "consumer_group", "topic")
            .agg(F.count(F.lit(1)).alias("count"), F.min("detail").alias("example"))
            .orderBy(F.desc("count"), "error_class", "consumer_group", "topic").limit(top))

    sc.setJobDescription(f"{PROG} {dump_id}: what the members of groups lost")
    members = _members(spark, warehouse, dump_id, groups)

    sc.setJobDescription(f"{PROG} {dump_id}: messages per topic")
    per_topic = {r["topic"]: int(r["count"]) for r in _rows(messages.groupBy("topic").count())}
    sc.setJobDescription(None)
    units = dump_records(spark, warehouse, "consume_queue", dump_id, read_version(spark, warehouse, "consume_queue",
                                                                                  dump_id))
    if units is None:  # a log or a file that cannot say: count the rows
        units = table("consume_queue").count()
    files = sorted(({c: r.get(c) for c in FILE_FIELDS} for r in small("dump_files", FILE_FIELDS)),
                   key=lambda f: (f["file_base"] is not None, f["file_base"] or 0, f["path"] or ""))  # nulls first
    filters: dict[str, list[str]] = {}  # topic -> the groups of its registered filters with a bloom bit
    for r in small("consumer_filters", ["topic", "consumer_group", "registered", "compiled", "bloom_bit_pos"]):
        if r["registered"] and r["compiled"] and r["bloom_bit_pos"] is not None:
            filters.setdefault(r["topic"], []).append(r["consumer_group"])
    filters_by_topic = {t: {"n": len(g), "groups": sorted(g)} for t, g in filters.items()}

    avoided: dict[str, dict[str, int]] = {}
    for g in groups:
        if g["answer"] == "OK" and (g["bloom_tested"] or 0) > 0:
            avoided.setdefault(g["topic"], {})
            avoided[g["topic"]][g["consumer_group"]] = avoided[g["topic"]].get(g["consumer_group"], 0) + \
                int(g["bloom_miss"] or 0)
    bitmap = []
    for topic in sorted(set(filters_by_topic) | set(avoided)):
        f = filters_by_topic.get(topic)
        n_filters = int(f["n"]) if f else 0
        msgs = per_topic.get(topic, 0)
        by_group = avoided.get(topic, {})
        bitmap.append({"topic": topic, "messages": msgs, "sql_filters": n_filters,
                       "filter_groups": list(f["groups"]) if f else [], "evaluations_added": msgs * n_filters,
                       "evaluations_avoided": sum(by_group.values()), "avoided_by_group": by_group})

    totals = {"messages": sum(per_topic.values()), "units": units, "commitlog_files": len(files),
              "commitlog_bytes": sum(int(f["size"] or 0) for f in files),
              "damaged_files": sum(f["damage_offset"] is not None for f in files),
              "damaged_bytes": sum(int(f["damaged_bytes"] or 0) for f in files),
              "subscriptions": len(groups), "pulled": sum(g["answer"] == "OK" for g in groups),
              "decisions": sum(int(g["units_scanned"] or 0) for g in groups),
              "delivered": sum(int(g["delivered"] or 0) for g in groups),
              "pulls": sum(int(g["pulls"] or 0) for g in groups)}
    version = next((r["broker_version"] for r in small("dumps", ["broker_version"])), None)
    version = version or brokerversion.DEFAULT
    grammar = [{"consumer_group": g["consumer_group"], "topic": g["topic"], "expression": g["expression"],
                "note": note} for g in groups
               if not tagmod.is_tag_type(g["subscription_type"]) and g["expression"] is not None
               and (note := sql92.grammar_note(g["expression"], version)) is not None]
    return {"dump_id": dump_id, "warehouse": warehouse, "broker_version": version, "grammar": grammar,
            "generated_at": generated_at or datetime.now(UTC).isoformat(timespec="seconds"),
            "totals": totals, "groups": groups, "collisions": collisions, "untagged": untagged,
            "sql_errors": sql_errors, "files": files, "bitmap": bitmap, "outcomes": [o for o, _, _ in OUTCOMES],
            "members": members}


def _members(spark: SparkSession, warehouse: str, dump_id: str, groups: list[dict]) -> list[dict[str, Any]]:
    """Per group replayed as its members: what makes its members inconsistent (`filterlib.members.inconsistencies`),
    its rows (one per possibility and member) and what each member lost per queue and outcome (the matrix exploded
    only for the member rows holding a member outcome, only into those decisions)."""
    from pyspark.sql import functions as F

    mine = [g for g in groups if g.get("member") is not None]
    if not mine:
        return []
    lossy = [g["subscription_index"] for g in mine
             if any(g.get(vocab.OUTCOME_COLUMNS[o]) for o in vocab.MEMBER_OUTCOMES)]
    per_queue = _rows(row_forms.decided(spark, warehouse, dump_id, subscriptions=lossy,
                                        codes=F.col("outcome").isin(list(vocab.MEMBER_OUTCOMES)),
                                        details=False)
                      .groupBy("consumer_group", "topic", "kept_by", "member", "queue_id", "outcome")
                      .agg(F.count(F.lit(1)).alias("count"))
                      .orderBy("consumer_group", "topic", "kept_by", "member", "queue_id", "outcome")) if lossy else []
    out = []
    for name in dict.fromkeys(g["consumer_group"] for g in mine):
        rows = [g for g in mine if g["consumer_group"] == name]
        first = {}
        for g in rows:  # a member's own subscriptions, from one possibility
            if g["answer"] != NOT_SUBSCRIBED:
                first.setdefault((g["member"], g["topic"]), (g["member"], g["topic"], g["subscription_type"],
                                                             g["expression"]))
        losses, harmless = inconsistencies(first.values())
        out.append({"group": name, "losses": losses, "harmless": harmless, "rows": rows,
                    "queues": [q for q in per_queue if q["consumer_group"] == name]})
    return out


_SUMMED = ("units_scanned", *vocab.OUTCOME_COLUMNS.values(), "tag_collisions", "bloom_tested",
           "bloom_false_positives", "pulls", "empty_pulls", "bytes_delivered", "bytes_filtered_on_broker")
"""The group_stats counts a cluster's page sums over the brokers."""


def merge_cluster(parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One page's data over a cluster's dumps ({dump id: `collect`'s data}): every row labelled with its broker's
    dump; a group's member rows summed over the brokers per (topic, kept subscription, member), their queues named
    with the broker's dump."""
    first = next(iter(parts.values()))
    label = {d: f"{d}: " for d in parts}

    def each(key: str, field: str | None = None) -> list[dict]:
        return [{**r, field: label[d] + str(r[field])} if field else r for d, p in parts.items()
                for r in p.get(key) or []]

    totals: dict[str, Any] = {}
    for p in parts.values():
        for k, v in (p.get("totals") or {}).items():
            totals[k] = totals.get(k, 0) + (v or 0)
    members: dict[str, dict[str, Any]] = {}
    for d, p in parts.items():
        for m in p.get("members") or []:
            into = members.setdefault(m["group"], {"group": m["group"], "losses": [], "harmless": [], "rows": [],
                                                   "queues": []})
            into["losses"] += [x for x in m["losses"] if x not in into["losses"]]
            into["harmless"] += [x for x in m["harmless"] if x not in into["harmless"]]
            into["queues"] += [{**q, "queue_id": f"{d}:{q['queue_id']}"} for q in m["queues"]]
            for r in m["rows"]:
                key = (r["topic"], r.get("kept_by"), r["member"])
                same = next((x for x in into["rows"] if (x["topic"], x.get("kept_by"), x["member"]) == key), None)
                queues = f"{d}:{r.get('owned_queues') or ''}"
                if same is None:
                    into["rows"].append({**r, "owned_queues": queues})
                    continue
                for k in _SUMMED:
                    same[k] = (same.get(k) or 0) + (r.get(k) or 0)
                same["owned_queues"] += f"; {queues}"
                if same["answer"] != r["answer"] and r["answer"] == "OK":
                    same["answer"] = "OK"
    return {**first, "dump_id": "cluster " + ", ".join(parts), "totals": totals, "groups": each("groups", "topic"),
            "collisions": each("collisions", "consumer_group"), "untagged": each("untagged", "consumer_group"),
            "sql_errors": each("sql_errors", "consumer_group"), "files": each("files"),
            "bitmap": each("bitmap", "topic"), "grammar": each("grammar"), "members": list(members.values())}


def write_atomically(path: str, text: str) -> int:
    """Write the page through a temporary file in the same directory and rename it over `path`."""
    data = text.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(data)


def run(spark: SparkSession, inputs: Inputs) -> Summary:
    """Aggregate the dump's tables and write its report; returns the summary."""
    summary = Summary(inputs.dump_id, inputs.out)
    if inputs.cluster:
        summary.data = merge_cluster({d: collect(spark, inputs.warehouse, d, inputs.top) for d in inputs.cluster})
    else:
        summary.data = collect(spark, inputs.warehouse, inputs.dump_id, inputs.top)
    summary.bytes = write_atomically(inputs.out, render(summary.data))
    log.info("wrote %s", inputs.out)
    return summary


def main(argv: list[str] | None = None, spark: SparkSession | None = None) -> int:
    """Parse, validate, run, print where the report is; bad input is one line on stderr and exit code 2."""
    args = parser().parse_args(argv)
    return run_main(PROG, lambda: validate(args), lambda i: f"{PROG} {i.dump_id}", lambda i: i.defaults,
                    args.master, run, spark)


if __name__ == "__main__":
    sys.exit(main())
