"""Job 1 with --broker: copies of one store taken at three points of its life (a torn last record, a file cut at a
record boundary, the oldest file deleted by retention) appended one after another make the same tables as one run
over the whole store; a gap is recorded and said; another store, the same copy again and an older copy are refused
or add nothing, in words, with no table written; a run killed after its commits is re-run without a row twice.
The same holds for copies the reference harness takes of a real running DefaultMessageStore (PROTOCOL.md, store:
`copy`, `expire`), the store's own retention deleting its oldest files between two of them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import refharness
import scenarios
from support.job_runs import broker_conf

from demo.copies import record_starts as _starts
from jobs import build_queues
from jobs.delta_io import last_version, table_path
from jobs.runs import read_dump

pytestmark = [pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
MAPPED = 131072
KEYS = {"messages": ["commit_log_offset"], "consume_queue": ["topic", "queue_id", "queue_offset"],
        "dump_files": ["file_base"], "consumer_filters": ["consumer_group", "topic"]}
NOT_COMPARED = {"dump_files": {"splits", "whole_file_fallback"}}  # how a file was read, not what it holds


def _files() -> list[Path]:
    return sorted((DEMO / "dump" / "commitlog").iterdir())


def copy_of(dest: Path, files: dict[int, int | None], pad: bool = False) -> str:
    """A copy of the demo store holding the given files (index -> bytes kept, None: whole); `pad` refills a cut
    file with zeros up to the mapped size, as a preallocated file copied mid-write is."""
    shutil.copytree(DEMO / "dump" / "config", dest / "config")
    (dest / "commitlog").mkdir(parents=True)
    for i, keep in files.items():
        src = _files()[i]
        data = src.read_bytes() if keep is None else src.read_bytes()[:keep]
        if pad:
            data += bytes(MAPPED - len(data))
        (dest / "commitlog" / src.name).write_bytes(data)
    return str(dest)


def job1(spark, store: str, wh: str, *extra: str) -> int:
    return build_queues.main(["--store", store, "--warehouse", wh, "--broker-conf", str(DEMO / "broker.conf"),
                              "--subscriptions", str(DEMO / "subscriptions.json"), *extra], spark)


def table(spark, wh: str, name: str, dump_id: str) -> list[dict]:
    """A table's rows as the comparisons read them: without the partition and the copy that added each row (a
    history's rows name their copy, a whole run's none: test_each_row_names_the_copy_that_added_it)."""
    df = read_dump(spark, wh, name, dump_id).drop("dump_id", "copy", *NOT_COMPARED.get(name, ()))
    return df.orderBy(*KEYS[name]).toArrow().to_pylist()


@pytest.fixture(scope="module")
def whole(spark, tmp_path_factory) -> str:
    """One run over the whole demo store: what the history must equal."""
    wh = str(tmp_path_factory.mktemp("whole"))
    assert job1(spark, str(DEMO / "dump"), wh, "--dump-id", "b") == 0
    return wh


@pytest.fixture(scope="module")
def three_copies(spark, tmp_path_factory) -> dict:
    """The history of three copies: (1) file 0 whole and file 1 torn inside a record, zero-filled as a
    preallocated file; (2) files 0-2 whole and file 3 cut at a record boundary; (3) files 1-3, file 0 deleted."""
    tmp = tmp_path_factory.mktemp("copies")
    f1 = _starts(_files()[1])
    f3 = _starts(_files()[3])
    torn = f1[len(f1) // 2] + 40  # inside the middle record
    copies = [copy_of(tmp / "c1", {0: None, 1: torn}, pad=True),
              copy_of(tmp / "c2", {0: None, 1: None, 2: None, 3: f3[len(f3) // 2]}),
              copy_of(tmp / "c3", {1: None, 2: None, 3: None})]
    wh = str(tmp / "wh")
    codes = [job1(spark, c, wh, "--broker", "b") for c in copies]
    return {"wh": wh, "codes": codes, "copies": copies, "torn": MAPPED + f1[len(f1) // 2]}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_three_copies_make_the_tables_of_one_run_over_the_whole_store(spark, whole, three_copies, name) -> None:
    assert three_copies["codes"] == [0, 0, 0]
    mine, truth = table(spark, three_copies["wh"], name, "b"), table(spark, whole, name, "b")
    assert len(mine) == len(truth) and mine == truth


def test_the_history_counts_and_copies_rows_say_what_each_copy_added(spark, whole, three_copies) -> None:
    wh = three_copies["wh"]
    dumps, truth = (read_dump(spark, w, "dumps", "b").first() for w in (wh, whole))
    for col in ("files", "bytes", "records", "units", "queues"):
        assert dumps[col] == truth[col], col
    copies = read_dump(spark, wh, "copies", "b").orderBy("from_offset").collect()
    assert [c.from_offset for c in copies] == [0, three_copies["torn"], copies[2].from_offset]
    assert [c.to_offset for c in copies][:2] == [copies[1].from_offset, copies[2].from_offset]
    assert copies[2].to_offset > copies[1].to_offset
    assert [c.gap_bytes for c in copies] == [0, 0, 0]
    assert len({q for c in copies for q in c.queue_ids}) == truth["queues"]  # the history's queues, from these rows
    assert all(c.checked > 0 for c in copies[1:])
    offsets = [r.commit_log_offset for r in read_dump(spark, wh, "messages", "b").select("commit_log_offset")
               .collect()]
    added = [sum(c.from_offset <= o < c.to_offset for o in offsets) for c in copies]
    assert added == [c.records for c in copies] and sum(added) == truth["records"]


def added_by(copies: list) -> Callable[[int], str]:
    """The store of the copy whose [from_offset, to_offset) holds a commit log offset (copies rows)."""
    return lambda offset: next(c.store for c in copies if c.from_offset <= offset < c.to_offset)


def test_each_row_names_the_copy_that_added_it(spark, whole, three_copies) -> None:
    wh = three_copies["wh"]
    added = added_by(read_dump(spark, wh, "copies", "b").collect())
    for name in ("messages", "consume_queue"):
        rows = read_dump(spark, wh, name, "b").select("commit_log_offset", "copy").collect()
        assert [r.copy for r in rows] == [added(r.commit_log_offset) for r in rows], name
        assert {r.copy for r in rows} == set(three_copies["copies"]), name  # each copy added some
        assert read_dump(spark, whole, name, "b").where("copy IS NOT NULL").count() == 0, name  # no history


def test_delivered_bodies_of_a_history_come_from_the_newest_copy_that_held_them(spark, whole, three_copies
                                                                               ) -> None:
    from jobs import row_forms, simulate_pull

    bodies = {}
    for wh in (whole, three_copies["wh"]):
        assert simulate_pull.main(["--warehouse", wh, "--dump-id", "b", "--broker-conf", str(DEMO / "broker.conf"),
                                   "--subscriptions", str(DEMO / "subscriptions.json"), "--queues", "rebuilt"],
                                  spark) == 0
        rows = row_forms.delivered_messages(spark, wh, "b").select(
            "consumer_group", "commit_log_offset", "body").collect()
        bodies[wh] = {(r.consumer_group, r.commit_log_offset): r.body for r in rows}
    mine, truth = bodies[three_copies["wh"]], bodies[whole]
    first_file = [k for k in truth if k[1] < MAPPED]
    assert first_file and mine == truth  # c3, the newest copy, no longer holds the first file
    assert all(b is not None for b in mine.values())
    from jobs import explain

    group, offset = min(first_file, key=lambda k: k[1])
    m = read_dump(spark, three_copies["wh"], "messages", "b").where(f"commit_log_offset = {offset}").first()
    args = ["--warehouse", three_copies["wh"], "--broker", "b", "--group", group, "--msg-id", m.uniq_key]
    text = "\n".join(explain.answer(spark, explain.validate(explain.parser().parse_args(args))).lines())
    assert f"read from the store {three_copies['copies'][1]}" in text  # c2: the newest copy holding file 0


def test_a_gap_is_recorded_and_said_and_the_rest_is_whole(spark, whole, tmp_path, capsys) -> None:
    wh = str(tmp_path / "wh")
    assert job1(spark, copy_of(tmp_path / "c1", {0: None}), wh, "--broker", "g") == 0
    capsys.readouterr()
    assert job1(spark, copy_of(tmp_path / "c3", {3: None}), wh, "--broker", "g") == 0
    out = capsys.readouterr().out
    first = read_dump(spark, wh, "dump_files", "g").orderBy("file_base").first()
    gap_from = first.file_base + (first.size if first.end_kind == "blank" else first.valid_end)
    assert f"gap: offsets {gap_from} to {3 * MAPPED}" in out
    (copy,) = read_dump(spark, wh, "copies", "g").where("gap_from is not null").collect()
    assert (copy.gap_from, copy.gap_bytes) == (gap_from, 3 * MAPPED - gap_from)
    truth = [r for r in table(spark, whole, "messages", "b")
             if not gap_from <= r["commit_log_offset"] < 3 * MAPPED]
    assert table(spark, wh, "messages", "g") == truth


def _versions(spark, wh: str) -> dict[str, int]:
    return {t: last_version(spark, table_path(wh, t)) for t in ("messages", "consume_queue", "dump_files", "runs")}


def test_another_store_the_same_copy_and_an_older_copy_write_nothing(spark, tmp_path, capsys) -> None:
    wh = str(tmp_path / "wh")
    assert job1(spark, copy_of(tmp_path / "c2", {0: None, 1: None}), wh, "--broker", "r") == 0
    before = _versions(spark, wh)
    capsys.readouterr()
    # the same copy again, then an older one: nothing new, exit 0
    for c in (str(tmp_path / "c2"), copy_of(tmp_path / "c1", {0: None, 1: 5000}, pad=True)):
        assert job1(spark, c, wh, "--broker", "r") == 0
        assert "nothing new: the history of broker r ends at offset" in capsys.readouterr().out
    # a wiped store: same names, other records (file 1's bytes where file 0's were)
    wiped = tmp_path / "wiped" / "commitlog"
    copy_of(tmp_path / "wiped", {})
    (wiped / _files()[0].name).write_bytes(_files()[1].read_bytes())
    (wiped / _files()[1].name).write_bytes(_files()[2].read_bytes())
    (wiped / _files()[2].name).write_bytes(_files()[2].read_bytes())
    assert job1(spark, str(tmp_path / "wiped"), wh, "--broker", "r") == 2
    err = capsys.readouterr().err
    assert "is not a copy of broker r's history: at commit log offset 0 the history holds a record of" in err
    assert "--replace" in err
    assert _versions(spark, wh) == before


def test_a_rerun_after_a_run_killed_past_its_commits_holds_each_row_once(spark, whole, tmp_path, monkeypatch
                                                                        ) -> None:
    wh = str(tmp_path / "wh")
    assert job1(spark, copy_of(tmp_path / "c1", {0: None, 1: None}), wh, "--broker", "k") == 0
    full = str(DEMO / "dump")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed before the runs row")

    monkeypatch.setattr(build_queues, "record_run", killed)
    with pytest.raises(KeyboardInterrupt):
        job1(spark, full, wh, "--broker", "k")
    monkeypatch.undo()
    assert job1(spark, full, wh, "--broker", "k") == 0
    for name in ("messages", "consume_queue"):
        assert table(spark, wh, name, "k") == table(spark, whole, name, "b"), name


def test_broker_alone_is_named_by_the_broker_conf_else_by_the_store(tmp_path) -> None:
    def named(*extra: str) -> build_queues.Inputs:
        args = build_queues.parser().parse_args(["--store", str(DEMO / "dump"), "--warehouse", str(tmp_path),
                                                 "--broker", *extra])
        return build_queues.validate(args)

    given = named("--broker-conf", str(DEMO / "broker.conf"))
    assert (given.dump_id, given.history) == ("broker-a", True)  # demo/broker.conf: brokerName=broker-a
    assert named().dump_id == "dump"


def test_replace_and_verify_go_with_broker_as_said(spark, tmp_path, capsys) -> None:
    wh = str(tmp_path / "wh")
    assert job1(spark, str(DEMO / "dump"), wh, "--dump-id", "x", "--replace") == 2
    assert "--replace goes with --broker" in capsys.readouterr().err
    assert job1(spark, str(DEMO / "dump"), wh, "--broker", "x", "--verify") == 2
    assert "with --broker they need --replace" in capsys.readouterr().err


@pytest.fixture(scope="module")
def harness_copies(tmp_path_factory) -> dict:
    """The harness's live copies c1, c2, c3 of one real store (c2's last record torn here, zero-filled, as a copy
    taken mid-write can hold it), and the store that kept everything: every commit log file at its newest version
    (from the store as the harness left it, else from the newest copy holding it: the files retention deleted, and
    the next file the store had preallocated, which its shutdown removed)."""

    out = refharness.write_store(scenarios.history_scenario(3))
    report = json.loads((out / "report.json").read_text())
    tmp = tmp_path_factory.mktemp("harness-copies")
    conf = broker_conf(tmp / "broker.conf", report["broker"], report["store"])
    copies = {}
    for name in ("c1", "c2", "c3"):
        copies[name] = tmp / name
        shutil.copytree(out / "copies" / name, copies[name])
    c2_log = copies["c2"] / "commitlog"
    newest = max((f for f in c2_log.iterdir() if _starts(f)), key=lambda f: int(f.name))
    last = _starts(newest)[-1]
    size = newest.stat().st_size
    newest.write_bytes(newest.read_bytes()[:last + 30] + bytes(size - last - 30))
    whole = tmp / "whole"
    shutil.copytree(out / "store", whole)
    for name in ("c3", "c2", "c1"):  # the newest copy first: a file's newest version is the one kept
        for f in (out / "copies" / name / "commitlog").iterdir():
            if not (whole / "commitlog" / f.name).exists():
                shutil.copy(f, whole / "commitlog" / f.name)
    expired = [c for c in report["copies"] if c["name"] == "expire"]
    return {"copies": copies, "whole": str(whole), "conf": conf, "torn": int(newest.name) + last,
            "expired": expired[0]}


WINDOW_SUBS = [{"group": "G_TAG", "topic": scenarios.TOPIC, "type": "TAG", "expression": scenarios.TAG_EXPR},
               {"group": "G_SQL", "topic": scenarios.TOPIC, "type": "SQL92", "expression": scenarios.SQL_EXPR},
               {"group": "G_POSTED", "topic": scenarios.TOPIC, "type": "SQL92", "expression": scenarios.SQL_EXPR,
                "path": "posted"}]
"""The pulls held to the real ones window by window; at the third copy G_TAG's expression changes."""


def _window(spark, wh: str, subs: list[dict], before: dict, stops: dict) -> tuple[dict, dict]:
    """What job 2's last run over the history decided and pulled, per (group, queue): its units (offset, message,
    outcome, bloom false positive, its pull counted from the run's first) and its pulls; `before`: the pulls each
    (subscription, queue) had before the run, `stops`: where each group's pulls stood."""
    from jobs import row_forms

    current = {r.consumer_group: r.subscription_index for r in read_dump(spark, wh, "group_stats", "b")
               .where("until_copy IS NULL").collect()}
    units, calls = {}, {}
    for s in subs:
        i = current[s["group"]]
        for d in (row_forms.pull_decisions(spark, wh, "b").where(f"subscription_index = {i}")
                  .orderBy("queue_id", "queue_offset").collect()):
            if d.queue_offset >= stops.get((s["group"], d.queue_id), 0):
                units.setdefault((s["group"], d.queue_id), []).append(
                    (d.queue_offset, d.commit_log_offset, d.outcome, d.bloom_false_positive,
                     d.pull_index - before.get((i, d.queue_id), 0)))
        for p in (read_dump(spark, wh, "pulls", "b").where(f"subscription_index = {i}")
                  .orderBy("queue_id", "pull_index").collect()):
            if p.pull_index >= before.get((i, p.queue_id), 0):
                calls.setdefault((s["group"], p.queue_id), []).append(
                    (p.request_offset, p.status, p.next_begin_offset, p.message_count, p.filter_message_count))
    return units, calls


@pytest.mark.reference
def test_job2_continued_over_live_copies_equals_the_real_pull_of_each_window(spark, tmp_path, harness_copies
                                                                              ) -> None:
    """After each copy, job 2 continues: its new decisions and pulls are the real broker's pull over that copy
    started where the previous window's pulls stopped (PROTOCOL.md, pull: startOffsets), G_TAG's changed
    subscription from the third copy on included. Each queue is replayed in pieces of two 10-unit consumequeue files
    (`--piece-units 15`), counted from the file where the window's first pull starts."""
    from support.filters import HARNESS_OUTCOMES

    from jobs import simulate_pull

    h = harness_copies
    sc = scenarios.history_scenario(3)
    wh = str(tmp_path / "wh")
    stops: dict[tuple[str, int], int] = {}
    compared = 0
    for k, name in enumerate(("c1", "c2", "c3")):
        subs = [dict(s, expression="TagB || TagC") if k == 2 and s["group"] == "G_TAG" else s for s in WINDOW_SUBS]
        path = tmp_path / f"subs-{name}.json"
        path.write_text(json.dumps(subs))
        before = {}
        if k:
            before = {(r.subscription_index, r.queue_id): r.pulls
                      for r in read_dump(spark, wh, "pull_positions", "b").collect()}
        assert _harness_job1(spark, str(h["copies"][name]), wh, h["conf"], "--broker", "b") == 0, name
        assert simulate_pull.main(["--warehouse", wh, "--broker", "b", "--broker-conf", h["conf"],
                                   "--subscriptions", str(path), "--piece-units", "15"], spark) == 0, name
        truth = refharness.pull({"storeDir": str(h["copies"][name]), "broker": sc["broker"], "store": sc["store"],
                                 "subscriptions": [dict(s, startOffsets={str(q): o for (g, q), o in stops.items()
                                                                         if g == s["group"]}) for s in subs]})
        units, calls = _window(spark, wh, subs, before, stops)
        for s, t in zip(subs, truth["subscriptions"], strict=True):
            assert t["answer"] == "OK", (name, s["group"], t)
            for q in t["queues"]:
                key = (s["group"], q["queueId"])
                theirs = [(u["queueOffset"], u["commitLogOffset"], HARNESS_OUTCOMES.get(u["outcome"], u["outcome"]),
                           u["bloomFalsePositive"], u["call"]) for u in q["units"]]
                assert units.get(key, []) == theirs, (name, key)
                their_calls = [(c["requestOffset"], c["status"], c["nextBeginOffset"], c["messageCount"],
                                c["filterMessageCount"]) for c in q["calls"]]
                assert calls.get(key, []) == their_calls, (name, key)
                stops[key] = q["calls"][-1]["nextBeginOffset"]
                compared += len(theirs)
        mine = {(r.consumer_group, r.queue_id): r.next_offset for r in read_dump(spark, wh, "pull_positions", "b")
                .collect()}
        assert mine == stops, name
    assert compared > 100


def _harness_job1(spark, store: str, wh: str, conf: str, *extra: str) -> int:
    return build_queues.main(["--store", store, "--warehouse", wh, "--broker-conf", conf, *extra], spark)


@pytest.mark.reference
def test_live_copies_of_a_real_store_make_the_tables_of_the_store_that_kept_everything(spark, tmp_path,
                                                                                       harness_copies, capsys
                                                                                       ) -> None:
    h = harness_copies
    assert h["expired"]["deleted"] == 2 and h["expired"]["minPhyOffset"] > 0
    assert (h["copies"]["c2"] / "abort").exists()  # a running store's copy, not a clean one
    wh, truth = str(tmp_path / "history"), str(tmp_path / "whole")
    assert _harness_job1(spark, h["whole"], truth, h["conf"], "--dump-id", "b") == 0
    said = []
    for name in ("c1", "c2", "c3"):
        capsys.readouterr()
        assert _harness_job1(spark, str(h["copies"][name]), wh, h["conf"], "--broker", "b") == 0, name
        said.append(capsys.readouterr().out)
    assert f"the copy ends inside a record at offset {h['torn']}" in said[1]
    assert "continues the history" in said[2] and "gap" not in said[2]
    for name in sorted(KEYS):
        mine, want = table(spark, wh, name, "b"), table(spark, truth, name, "b")
        assert len(mine) == len(want) and mine == want, name
    copies = read_dump(spark, wh, "copies", "b").orderBy("from_offset").collect()
    assert copies[2].first_offset == h["expired"]["minPhyOffset"]  # c3 lacks the files retention deleted
    assert copies[1].to_offset == copies[2].from_offset == h["torn"]
