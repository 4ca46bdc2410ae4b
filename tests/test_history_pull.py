"""Job 2 over a broker's history continues run after run (issue 26, item 3): after each copy job 1 appends, job 2
replays only what is new, each subscription from where its pulls stopped, and the history's decisions equal one
replay over the store that kept everything; a subscription changed between two copies keeps its decisions before the
change and the new one decides from that copy on, its pulls continuing the group's; a re-run with nothing new writes
nothing; a new group starts by --from over the units the history holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_history import DEMO, _files, copy_of, job1
from test_history import _starts as record_starts

from filterlib import vocabulary as vocab
from jobs import row_forms, simulate_pull
from jobs.delta_io import last_version, table_path
from jobs.runs import read_dump

pytestmark = [pytest.mark.spark]
SUBS = json.loads((DEMO / "subscriptions.json").read_text())
DECISION = ["consumer_group", "topic", "subscription_index", "queue_id", "queue_offset", "commit_log_offset",
            "outcome", "layer", "reason", "cq_reason", "detail", "sql_value", "bloom_tested", "bloom_false_positive"]


CHANGED = "order-tag-consumer"
OLD_EXPR = next(s["expression"] for s in SUBS if s["group"] == CHANGED and s["topic"] == "TradeOrder")
NEW_EXPR = "OrderPaid || OrderCancelled"
THIRD = [dict(s, expression=NEW_EXPR) if (s["group"], s["topic"]) == (CHANGED, "TradeOrder") else s
         for s in SUBS if s["group"] != "refund-tracker"] + [
    {"group": "late-joiner", "topic": "PaymentEvents", "type": "TAG", "expression": "*"}]
"""The subscriptions at the third copy: order-tag-consumer's TradeOrder one changed, refund-tracker gone,
late-joiner new."""


def _subs(path: Path, rows: list[dict]) -> str:
    path.write_text(json.dumps(rows))
    return str(path)


def job2(spark, wh: str, subs: str | None = None, *extra: str) -> int:
    return simulate_pull.main(["--warehouse", wh, "--broker", "b", "--broker-conf", str(DEMO / "broker.conf"),
                               "--subscriptions", subs or str(DEMO / "subscriptions.json"), *extra], spark)


def decisions(spark, wh: str, below: int | None = None) -> list[tuple]:
    """The decisions of the history (of its subscriptions below index `below`), sorted."""
    rows = row_forms.pull_decisions(spark, wh, "b").select(*DECISION).collect()
    return sorted(tuple(r) for r in rows if below is None or r.subscription_index < below)


def copies(tmp: Path) -> list[str]:
    """Three copies of the demo store, as test_history's: a torn record, a cut file, the first file deleted."""
    f1, f3 = record_starts(_files()[1]), record_starts(_files()[3])
    return [copy_of(tmp / "c1", {0: None, 1: f1[len(f1) // 2] + 40}, pad=True),
            copy_of(tmp / "c2", {0: None, 1: None, 2: None, 3: f3[len(f3) // 2]}),
            copy_of(tmp / "c3", {1: None, 2: None, 3: None})]


@pytest.fixture(scope="module")
def whole(spark, tmp_path_factory) -> str:
    """Job 1 and job 2 once over the whole demo store, replayed as job 2 replays a history (job 1's queues): the
    demo's subscriptions (indices 0-9, as in the history), then THIRD's changed and new ones."""
    tmp = tmp_path_factory.mktemp("whole-pull")
    wh = str(tmp / "wh")
    assert job1(spark, str(DEMO / "dump"), wh, "--dump-id", "b") == 0
    both = SUBS + [s for s in THIRD if s not in SUBS]
    assert job2(spark, wh, _subs(tmp / "both.json", both), "--queues", "rebuilt") == 0
    return wh


@pytest.fixture(scope="module")
def run_by_run(spark, tmp_path_factory) -> dict:
    """Job 1 then job 2 after each of the three copies, job 2 continuing; the warehouse as the second copy's runs
    left it is kept aside (`after_c2`) for the changed subscriptions."""
    tmp = tmp_path_factory.mktemp("history-pull")
    wh = str(tmp / "wh")
    versions = []
    made = copies(tmp)
    for i, c in enumerate(made):
        assert job1(spark, c, wh, "--broker", "b") == 0
        assert job2(spark, wh) == 0
        versions.append(last_version(spark, table_path(wh, "pull_decisions")))
        if i == 1:
            shutil.copytree(wh, tmp / "after_c2")
    return {"wh": wh, "versions": versions, "copies": made, "after_c2": str(tmp / "after_c2")}


def test_three_runs_decide_every_unit_once_as_one_replay_of_the_whole_store(spark, whole, run_by_run) -> None:
    mine, truth = decisions(spark, run_by_run["wh"]), decisions(spark, whole, len(SUBS))
    assert len(mine) == len(truth) and mine == truth
    keys = [r[:5] for r in mine]
    assert len(keys) == len(set(keys))  # one decision per (subscription, unit): no unit decided twice


def test_the_history_counts_add_up_and_its_pulls_continue(spark, whole, run_by_run) -> None:
    wh = run_by_run["wh"]
    stats = {r.subscription_index: r.asDict() for r in read_dump(spark, wh, "group_stats", "b").collect()}
    truth = {r.subscription_index: r.asDict() for r in read_dump(spark, whole, "group_stats", "b").collect()}
    assert set(stats) == set(range(len(SUBS)))
    for i, row in stats.items():
        for col in ("units_scanned", "bytes_delivered", "queues", *vocab.OUTCOME_COLUMNS.values()):
            assert row[col] == truth[i][col], (row["consumer_group"], col)
        assert row["until_copy"] is None and row["since_copy"].endswith("c1")
    pulls = read_dump(spark, wh, "pulls", "b").orderBy("subscription_index", "queue_id", "pull_index").collect()
    by_queue: dict[tuple, list] = {}
    for p in pulls:
        by_queue.setdefault((p.subscription_index, p.queue_id), []).append(p)
    for key, ps in by_queue.items():
        assert [p.pull_index for p in ps] == list(range(len(ps))), key  # numbered on across the runs
        assert ps[0].request_offset == 0
        for a, b in zip(ps, ps[1:], strict=False):  # each pull starts where the one before left the consumer
            assert b.request_offset == a.next_begin_offset, key
    positions = read_dump(spark, wh, "pull_positions", "b").collect()
    assert {(p.subscription_index, p.queue_id) for p in positions} == set(by_queue)
    for p in positions:
        assert p.pulls == len(by_queue[(p.subscription_index, p.queue_id)])
        assert p.next_offset == by_queue[(p.subscription_index, p.queue_id)][-1].next_begin_offset


def test_a_rerun_with_nothing_new_writes_nothing(spark, run_by_run, capsys) -> None:
    wh = run_by_run["wh"]
    before = {t: last_version(spark, table_path(wh, t)) for t in ("pull_decisions", "pulls", "group_stats", "runs")}
    capsys.readouterr()
    assert job2(spark, wh) == 0
    assert "nothing new since job 2's last run over the history of b" in capsys.readouterr().out
    assert {t: last_version(spark, table_path(wh, t)) for t in before} == before


def test_each_run_appends_only_its_new_decisions(spark, whole, run_by_run) -> None:
    from delta.tables import DeltaTable

    wh = run_by_run["wh"]
    modes = {r.version: r.operationParameters.get("mode") for r in
             DeltaTable.forPath(spark, table_path(wh, "pull_decisions")).history().collect()}
    assert [modes[v] for v in run_by_run["versions"][1:]] == ["Append", "Append"]
    overflow = (read_dump(spark, wh, "pulls", "b").where("status = 'OFFSET_OVERFLOW_ONE'")
                .groupBy("subscription_index", "queue_id").count().collect())
    assert max(r["count"] for r in overflow) == 3  # each window's pulls end at its queue's end, the next go on
    assert read_dump(spark, whole, "pulls", "b").where("status = 'OFFSET_OVERFLOW_ONE'").groupBy(
        "subscription_index", "queue_id").count().agg({"count": "max"}).first()[0] == 1


def test_each_decision_and_pull_names_the_run_that_made_it(spark, run_by_run) -> None:
    from test_history import added_by

    wh, made = run_by_run["wh"], run_by_run["copies"]
    added = added_by(read_dump(spark, wh, "copies", "b").collect())
    units = read_dump(spark, wh, "pull_decisions", "b").select("topic", "queue_id", "queue_offset",
                                                                "commit_log_offset", "copy").collect()
    assert [u.copy for u in units] == [added(u.commit_log_offset) for u in units]  # each run decides its copy's units
    assert {u.copy for u in units} == set(made)
    for form in (row_forms.pull_decisions(spark, wh, "b"), row_forms.delivered_messages(spark, wh, "b")):
        rows = form.select("commit_log_offset", "copy").collect()
        assert rows and [r.copy for r in rows] == [added(r.commit_log_offset) for r in rows]
    by_unit = {(u.topic, u.queue_id, u.queue_offset): u.copy for u in units}
    details = read_dump(spark, wh, "decision_details", "b").collect()
    assert details and all(d.copy == by_unit[(d.topic, d.queue_id, d.queue_offset)] for d in details)
    pulls = read_dump(spark, wh, "pulls", "b").orderBy("subscription_index", "queue_id", "pull_index").collect()
    assert {p.copy for p in pulls} == set(made)
    runs: dict[tuple, list] = {}
    for p in pulls:
        runs.setdefault((p.subscription_index, p.queue_id), []).append(made.index(p.copy))
    assert all(r == sorted(r) for r in runs.values())  # a queue's pulls, run after run


@pytest.fixture(scope="module")
def changed(spark, tmp_path_factory, whole, run_by_run) -> dict:
    """The history as the second copy's runs left it, then the third copy with THIRD's subscriptions; the truth is
    `whole`, which replayed every one of them over the whole store."""
    tmp = tmp_path_factory.mktemp("history-changed")
    wh = str(tmp / "wh")
    shutil.copytree(run_by_run["after_c2"], wh)
    stops = {(r.topic, r.queue_id): r.next_offset for r in read_dump(spark, wh, "pull_positions", "b")
             .where(f"consumer_group = '{CHANGED}'").collect()}
    assert job1(spark, run_by_run["copies"][2], wh, "--broker", "b") == 0
    assert job2(spark, wh, _subs(tmp / "third.json", THIRD)) == 0
    return {"wh": wh, "truth": whole, "stops": stops, "copies": run_by_run["copies"]}


def _by_expression(spark, wh: str, group: str) -> dict[str, set]:
    rows = row_forms.pull_decisions(spark, wh, "b").where(f"consumer_group = '{group}'").select(
        "expression", "topic", "queue_id", "queue_offset", "outcome", "reason").collect()
    out: dict[str, set] = {}
    for r in rows:
        out.setdefault(r.expression, set()).add((r.topic, r.queue_id, r.queue_offset, r.outcome, r.reason))
    return out


def test_a_changed_subscription_decides_from_the_copy_it_changed_at(spark, changed) -> None:
    mine, truth = _by_expression(spark, changed["wh"], CHANGED), _by_expression(spark, changed["truth"], CHANGED)
    stops = changed["stops"]
    assert stops and all(v > 0 for v in stops.values())

    def before(d):
        return d[0] == "TradeOrder" and d[2] < stops[(d[0], d[1])]

    assert mine[OLD_EXPR] == {d for d in truth[OLD_EXPR] if before(d)} | {
        d for d in truth[OLD_EXPR] if d[0] != "TradeOrder"}
    assert mine[NEW_EXPR] == {d for d in truth[NEW_EXPR] if not before(d)}
    assert mine[NEW_EXPR] and any(before(d) for d in truth[NEW_EXPR])  # the change mattered on both sides
    made = {r.copy for r in row_forms.pull_decisions(spark, changed["wh"], "b").where(
        f"consumer_group = '{CHANGED}' AND expression = '{NEW_EXPR}'").select("copy").collect()}
    assert made == {changed["copies"][2]}  # the new subscription's decisions, older units' too: the third run's
    stats = {(r.consumer_group, r.topic, r.expression): r for r in read_dump(spark, changed["wh"], "group_stats", "b")
             .collect()}
    old, new = stats[(CHANGED, "TradeOrder", OLD_EXPR)], stats[(CHANGED, "TradeOrder", NEW_EXPR)]
    c1, _c2, c3 = changed["copies"]
    assert (old.since_copy, old.until_copy) == (c1, c3) and (new.since_copy, new.until_copy) == (c3, None)
    others = [r.subscription_index for r in stats.values() if r.consumer_group != "late-joiner"]
    assert new.subscription_index == max(others)  # a new index, after every one the history had
    gone = stats[("refund-tracker", "PaymentEvents", "Refunded || PayFailed")]
    assert gone.until_copy == c3 and gone.units_scanned > 0
    pulls = read_dump(spark, changed["wh"], "pulls", "b").where(
        f"subscription_index = {new.subscription_index}").where("pull_index = 0").collect()
    assert {(p.topic, p.queue_id): p.request_offset for p in pulls} == {k: v for k, v in stops.items()
                                                                      if k[0] == "TradeOrder"}


def test_the_report_reads_the_whole_history_and_says_when_each_subscription_was_in_force(spark, changed) -> None:
    from jobs import report
    from jobs.report_html import render

    data = report.collect(spark, changed["wh"], "b")
    old = next(g for g in data["groups"] if g["consumer_group"] == CHANGED and g["expression"] == OLD_EXPR)
    c1, _c2, c3 = changed["copies"]
    assert (old["since_copy"], old["until_copy"]) == (c1, c3)
    page = render(data)
    assert f"in force from the copy {c1} until the copy {c3}" in page
    assert f"{CHANGED} on TradeOrder: TAG {OLD_EXPR} (registered, subscriptions; in force from the copy {c1} until " \
           f"the copy {c3})" in page  # the outcome bars' label


def test_a_new_group_on_a_history_starts_from_the_earliest_unit_it_holds(spark, changed) -> None:
    mine = _by_expression(spark, changed["wh"], "late-joiner")["*"]
    truth = _by_expression(spark, changed["truth"], "late-joiner")["*"]
    assert mine == truth and len(mine) > 0


def test_explain_says_which_subscription_and_copies_decided(spark, changed) -> None:
    from jobs import explain

    wh, stops = changed["wh"], changed["stops"]
    (topic, qid), stop = min((k, v) for k, v in stops.items() if k[0] == "TradeOrder")
    old = (row_forms.pull_decisions(spark, wh, "b").where(f"consumer_group = '{CHANGED}'")
           .where(f"topic = '{topic}' AND queue_id = {qid} AND queue_offset < {stop}").orderBy("queue_offset").first())
    args = ["--warehouse", wh, "--broker", "b", "--group", CHANGED, "--queue", f"{topic}:{qid}:{old.queue_offset}"]
    text = "\n".join(explain.answer(spark, explain.validate(explain.parser().parse_args(args))).lines())
    c1, _c2, c3 = changed["copies"]
    by = next(c.store for c in read_dump(spark, wh, "copies", "b").collect()
              if c.from_offset <= old.commit_log_offset < c.to_offset)  # the copy that added the unit
    assert (f"decided under TAG `{OLD_EXPR}` by the run of the copy {by} (in force from the copy {c1} until the copy "
            f"{c3}); the group subscribes TAG `{NEW_EXPR}` since the copy {c3}") in text
    args[-1] = f"{topic}:{qid}:{stop}"
    text = "\n".join(explain.answer(spark, explain.validate(explain.parser().parse_args(args))).lines())
    assert f"decided under TAG `{NEW_EXPR}` by the run of the copy {c3} (in force from the copy {c3} on)" in text


def test_what_if_on_a_continued_history_is_refused_and_restart_replays_it_whole(spark, changed, capsys) -> None:
    wh = changed["wh"]
    before = last_version(spark, table_path(wh, "pull_decisions"))
    assert job2(spark, wh, None, "--what-if", "vip-orders=SQL92:level >= 3") == 2
    assert "on a broker's history that continues, run it with --restart" in capsys.readouterr().err
    assert last_version(spark, table_path(wh, "pull_decisions")) == before
    assert job2(spark, wh, None, "--restart") == 0
    stats = read_dump(spark, wh, "group_stats", "b").collect()
    assert all(r.until_copy is None for r in stats) and len(stats) == len(SUBS)
    keys = [r[:5] for r in decisions(spark, wh)]
    assert len(keys) == len(set(keys))


def test_a_history_begun_again_by_job1_is_replayed_whole(spark, tmp_path, capsys) -> None:
    c1, c2, _c3 = copies(tmp_path)
    wh = str(tmp_path / "wh")
    assert job1(spark, c1, wh, "--broker", "b") == 0
    assert job2(spark, wh) == 0
    assert job1(spark, c2, wh, "--broker", "b", "--replace") == 0
    capsys.readouterr()
    assert job2(spark, wh) == 0
    assert "job 1 began the history of b again (--replace) after job 2's last run" in capsys.readouterr().out
    stats = read_dump(spark, wh, "group_stats", "b").collect()
    assert {r.since_copy for r in stats} == {c2} and all(r.until_copy is None for r in stats)
    pulls = read_dump(spark, wh, "pulls", "b").where("pull_index = 0").collect()
    assert pulls and all(p.request_offset == 0 for p in pulls)
