"""Job 2 over a broker's history continues run after run (issue 26, item 3): after each copy job 1 appends, job 2
replays only what is new, each subscription from where its pulls stopped, and the history's decisions equal one
replay over the store that kept everything; a subscription changed between two copies keeps its decisions before the
change and the new one decides from that copy on, its pulls continuing the group's; a re-run with nothing new writes
nothing; a new group starts by --from over the units the history holds."""

from __future__ import annotations

import json
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


def job2(spark, wh: str, subs: str | None = None, *extra: str) -> int:
    return simulate_pull.main(["--warehouse", wh, "--broker", "b", "--broker-conf", str(DEMO / "broker.conf"),
                               "--subscriptions", subs or str(DEMO / "subscriptions.json"), *extra], spark)


def decisions(spark, wh: str) -> list[tuple]:
    rows = row_forms.pull_decisions(spark, wh, "b").select(*DECISION).collect()
    return sorted(tuple(r) for r in rows)


def copies(tmp: Path) -> list[str]:
    """Three copies of the demo store, as test_history's: a torn record, a cut file, the first file deleted."""
    f1, f3 = record_starts(_files()[1]), record_starts(_files()[3])
    return [copy_of(tmp / "c1", {0: None, 1: f1[len(f1) // 2] + 40}, pad=True),
            copy_of(tmp / "c2", {0: None, 1: None, 2: None, 3: f3[len(f3) // 2]}),
            copy_of(tmp / "c3", {1: None, 2: None, 3: None})]


@pytest.fixture(scope="module")
def whole(spark, tmp_path_factory) -> str:
    """Job 1 and job 2 once over the whole demo store, replayed as job 2 replays a history (job 1's queues)."""
    wh = str(tmp_path_factory.mktemp("whole-pull"))
    assert job1(spark, str(DEMO / "dump"), wh, "--dump-id", "b") == 0
    assert job2(spark, wh, None, "--queues", "rebuilt") == 0
    return wh


@pytest.fixture(scope="module")
def run_by_run(spark, tmp_path_factory) -> dict:
    """Job 1 then job 2 after each of the three copies, job 2 continuing; what each job 2 run said and wrote."""
    tmp = tmp_path_factory.mktemp("history-pull")
    wh = str(tmp / "wh")
    said, versions = [], []
    for c in copies(tmp):
        assert job1(spark, c, wh, "--broker", "b") == 0
        assert job2(spark, wh) == 0
        versions.append(last_version(spark, table_path(wh, "pull_decisions")))
    return {"wh": wh, "said": said, "versions": versions}


def test_three_runs_decide_every_unit_once_as_one_replay_of_the_whole_store(spark, whole, run_by_run) -> None:
    mine, truth = decisions(spark, run_by_run["wh"]), decisions(spark, whole)
    assert len(mine) == len(truth) and mine == truth
    keys = [r[:5] for r in mine]
    assert len(keys) == len(set(keys))  # one decision per (subscription, unit): no unit decided twice


def test_the_history_counts_add_up_and_its_pulls_continue(spark, whole, run_by_run) -> None:
    wh = run_by_run["wh"]
    stats = {r.subscription_index: r.asDict() for r in read_dump(spark, wh, "group_stats", "b").collect()}
    truth = {r.subscription_index: r.asDict() for r in read_dump(spark, whole, "group_stats", "b").collect()}
    assert stats.keys() == truth.keys()
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


CHANGED = "order-tag-consumer"
OLD_EXPR = next(s["expression"] for s in SUBS if s["group"] == CHANGED and s["topic"] == "TradeOrder")
NEW_EXPR = "OrderPaid || OrderCancelled"


def _subs(path: Path, rows: list[dict]) -> str:
    path.write_text(json.dumps(rows))
    return str(path)


@pytest.fixture(scope="module")
def changed(spark, tmp_path_factory) -> dict:
    """The same three copies; at the third, order-tag-consumer's TradeOrder subscription changes, refund-tracker is
    gone and late-joiner subscribes PaymentEvents; and the truth: both order-tag-consumer subscriptions, and
    late-joiner, replayed once over the whole store."""
    tmp = tmp_path_factory.mktemp("history-changed")
    third = [dict(s, expression=NEW_EXPR) if (s["group"], s["topic"]) == (CHANGED, "TradeOrder") else s
             for s in SUBS if s["group"] != "refund-tracker"]
    third.append({"group": "late-joiner", "topic": "PaymentEvents", "type": "TAG", "expression": "*"})
    files = [None, None, _subs(tmp / "third.json", third)]
    wh = str(tmp / "wh")
    stops = None
    made = copies(tmp)
    for i, c in enumerate(made):
        assert job1(spark, c, wh, "--broker", "b") == 0
        assert job2(spark, wh, files[i]) == 0
        if i == 1:
            stops = {(r.topic, r.queue_id): r.next_offset for r in read_dump(spark, wh, "pull_positions", "b")
                     .where(f"consumer_group = '{CHANGED}'").collect()}
    truth = str(tmp / "truth")
    both = SUBS + [dict(s, expression=NEW_EXPR) for s in SUBS if (s["group"], s["topic"]) == (CHANGED, "TradeOrder")]
    both.append(third[-1])
    assert job1(spark, str(DEMO / "dump"), truth, "--dump-id", "b") == 0
    assert job2(spark, truth, _subs(tmp / "both.json", both), "--queues", "rebuilt") == 0
    return {"wh": wh, "truth": truth, "stops": stops, "copies": made}


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


def test_a_new_group_on_a_history_starts_from_the_earliest_unit_it_holds(spark, changed) -> None:
    mine = _by_expression(spark, changed["wh"], "late-joiner")["*"]
    truth = _by_expression(spark, changed["truth"], "late-joiner")["*"]
    assert mine == truth and len(mine) > 0
