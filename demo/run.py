"""`make demo`: both jobs on the bundled dump in one local Spark session, three explain answers, the report, and a
broker's history of two copies.

    python -m demo.run [--out DIR] [--master local[*]]

Job 1 (build_queues) and job 2 (simulate_pull) run on demo/dump with demo/broker.conf and demo/subscriptions.json
into <out>/warehouse; their summaries are printed, then explain answers for three telling units (a tag-hash
collision, a SQL92 evaluation error, a bloom false positive), each with the command that prints it, and where
the tables and the HTML report are. Last, two copies of the dump as a running broker's daily copies
(`demo.copies`) are appended to the history of broker-a (job 1 --broker), job 2 continuing over each, and the
first is given again. The same
calls as the entry points, one JVM instead of five.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from demo.copies import make_copies
from filterlib import tables
from filterlib import vocabulary as vocab
from jobs import build_queues, explain, report, row_forms, simulate_pull, upgrade
from jobs.cli import ROOT, job_session, load_defaults
from jobs.delta_io import laid_out

DEMO = ROOT / "demo"
DUMP_ID = "demo"


def _rule(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 100 - len(title)))


def _examples(spark, warehouse: str) -> list[tuple[str, list[str]]]:
    """(why it is interesting, explain arguments) for a collision, a SQL92 error and a bloom false positive."""
    from pyspark.sql import functions as F

    decisions = row_forms.pull_decisions(spark, warehouse, DUMP_ID)
    picks = [("a tag-hash collision: the broker passed it, the client dropped it",
              (F.col("outcome") == vocab.TAG_CLIENT_MISMATCH) & (F.col("reason") == "client_tag_mismatch")),
             ("a SQL92 evaluation error the broker treats as no match", F.col("outcome") == vocab.SQL_ERROR),
             ("a bloom false positive: the bitmap said maybe, SQL92 said no", F.col("bloom_false_positive"))]
    messages = spark.read.format("delta").load(f"{warehouse}/messages").where(F.col("dump_id") == DUMP_ID)
    out = []
    for why, cond in picks:
        row = decisions.where(cond & ~F.col("topic").startswith("%")).orderBy(
            "subscription_index", "queue_id", "queue_offset").first()
        if row is None:
            continue
        m = messages.where(F.col("commit_log_offset") == row.commit_log_offset).select("uniq_key", "keys").first()
        key = ["--msg-id", m.uniq_key] if m.uniq_key else ["--queue", f"{row.topic}:{row.queue_id}:{row.queue_offset}"]
        out.append((why, ["--warehouse", warehouse, "--dump-id", DUMP_ID, "--group", row.consumer_group, *key]))
    return out


def run(spark, out: Path) -> str:
    """Both jobs, three explain answers and the report with an existing session; returns the report's path."""
    warehouse = str(out / "warehouse")
    common = ["--store", str(DEMO / "dump"), "--broker-conf", str(DEMO / "broker.conf"), "--subscriptions",
              str(DEMO / "subscriptions.json"), "--warehouse", warehouse, "--dump-id", DUMP_ID]
    if laid_out(spark, warehouse, tables.TABLES)[0]:  # a demo warehouse an earlier release wrote
        _rule(f"upgrade: python -m jobs.upgrade --warehouse {warehouse}")
        for line in upgrade.run(spark, upgrade.Inputs(warehouse, {})).lines():
            print(line)
    _rule("job 1: python -m jobs.build_queues " + " ".join(common))
    for line in build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(common))).lines():
        print(line)
    _rule("job 2: python -m jobs.simulate_pull " + " ".join(common))
    for line in simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(common))).lines():
        print(line)
    for why, ex in _examples(spark, warehouse):
        _rule(f"explain {why}")
        print("python -m jobs.explain " + " ".join(ex))
        for line in explain.answer(spark, explain.validate(explain.parser().parse_args(ex))).lines():
            print(line)
    _rule(f"report: python -m jobs.report --warehouse {warehouse} --dump-id {DUMP_ID}")
    written = report.run(spark, report.validate(report.parser().parse_args(
        ["--warehouse", warehouse, "--dump-id", DUMP_ID])))
    for line in written.lines():
        print(line)
    _history(spark, out, warehouse)
    _rule("where things are")
    print(f"Delta tables: {warehouse}/<table> (messages, consume_queue, consumer_filters, dump_files, "
          f"pull_decisions (the decision matrix), decision_details, decision_codes, pulls, group_stats); the row "
          f"forms: jobs.row_forms.pull_decisions() and delivered_messages(); docs/ describes every column")
    print(f"HTML report: {written.out} (one self-contained file: open it in a browser)")
    return written.out


def _history(spark, out: Path, warehouse: str) -> None:
    """Two copies of the dump appended to broker-a's history, job 2 continuing after each, then the older copy
    again (nothing new)."""
    copies = make_copies(DEMO / "dump", out / "copies")
    for i, store in enumerate((*copies, copies[0])):
        args = ["--store", str(store), "--broker-conf", str(DEMO / "broker.conf"), "--warehouse", warehouse,
                "--broker", "broker-a"]
        _rule("history: python -m jobs.build_queues " + " ".join(args))
        for line in build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args))).lines():
            if not line.startswith(("table ", "message bodies", "broker version", "SQL92 filters for")):
                print(line)
        if i == len(copies):
            break
        args = ["--warehouse", warehouse, "--broker", "broker-a", "--subscriptions", str(DEMO / "subscriptions.json")]
        _rule("history: python -m jobs.simulate_pull " + " ".join(args))
        for line in simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(args))).lines():
            if line.startswith(("note: history", "decisions ")):
                print(line)


def main(argv: list[str] | None = None) -> int:
    """Run the demo in a session of its own; prints everything a newcomer needs to see."""
    p = argparse.ArgumentParser(prog="python -m demo.run", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "demo-out"), metavar="DIR",
                   help="where the warehouse and the report go (default demo-out/)")
    p.add_argument("--master", default="local[*]", metavar="URL", help="Spark master (default local[*])")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    spark = job_session("rocketmq-filter-replay demo", load_defaults(str(build_queues.DEFAULTS)), args.master)
    try:
        run(spark, Path(args.out).resolve())
    finally:
        spark.stop()
    print(f"demo done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
