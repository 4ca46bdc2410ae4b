"""A group replayed as its members, held to real clients: the harness's `group` mode runs a real name server, a
real broker and real push consumers (5.3.3) whose members subscribe differently; what each member really received
is the truth. Both jobs then run over the broker's store, with each member's subscriptions (and the sub_version
the real client ended with) as the subscriptions file, and the replay must give every member exactly what it
received, in the possibility whose kept subscription is the one the real broker kept."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import refharness
from scenarios import cluster_group_scenario, group_scenario, kinds_group_scenario
from support.job_runs import rows

from filterlib import vocabulary as vocab
from filterlib.members import filtering_key
from filterlib.subscriptions import Subscription
from jobs import build_queues, explain, report, simulate_pull


@pytest.fixture(scope="module")
def run() -> dict:
    return refharness.run_group(group_scenario())


def _subscriptions(run: dict, versions: bool = True) -> list[dict]:
    """Each real member's subscriptions as the subscriptions file names them (with `versions`, the sub_version the
    real client ended with)."""
    out = []
    for g in run["groups"]:
        for m in g["members"]:
            for s in m["subscriptions"]:
                entry = {"group": g["group"], "client_id": m["client_id"], "topic": s["topic"], "type": s["type"],
                         "expression": s["expression"], "allocate": g.get("allocate", "AVG")}
                if m.get("consumer", "push") != "push":  # push_posted, lite_pull: each pull carries its expression
                    entry["path"] = "posted"
                if versions:
                    entry["sub_version"] = s["sub_version"]
                out.append(entry)
    return out


def _delivered(stats: list[dict], decisions: list[dict]) -> dict[tuple, set]:
    """{(group, topic, kept_by, member): {(queue, queue offset) delivered}}."""
    index = {s["subscription_index"]: s for s in stats}
    out = defaultdict(set)
    for d in decisions:
        s = index[d["subscription_index"]]
        if d["outcome"] == vocab.DELIVERED:
            out[(s["consumer_group"], s["topic"], s["kept_by"], s["member"])].add((d["queue_id"], d["queue_offset"]))
    return out


@pytest.fixture(scope="module")
def replayed(spark, run, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("group_replay")
    wh, broker = str(tmp / "wh"), run["brokers"]["broker-a"]
    conf = tmp / "broker.conf"
    conf.write_text("".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                            for k, v in broker["config"].items()))
    subs = tmp / "subscriptions.json"
    subs.write_text(json.dumps(_subscriptions(run)))
    assert build_queues.main(["--store", broker["store"], "--warehouse", wh, "--dump-id", "group",
                              "--broker-conf", str(conf)], spark=spark) == 0
    assert simulate_pull.main(["--warehouse", wh, "--dump-id", "group", "--broker-conf", str(conf),
                               "--subscriptions", str(subs)], spark=spark) == 0
    return {"warehouse": wh, "conf": str(conf), "tmp": tmp,
            "stats": rows(spark, wh, "group_stats", "group", ["subscription_index"]),
            "decisions": rows(spark, wh, "pull_decisions", "group", ["subscription_index", "queue_id",
                                                                      "queue_offset"])}


def _real_kept(run: dict, group: str, topic: str) -> tuple | None:
    g = next(g for g in run["groups"] if g["group"] == group)
    k = next((k for k in g["kept_before"] if k["topic"] == topic and k["expression"] is not None), None)
    return None if k is None else filtering_key(Subscription(group, topic, k["type"], k["expression"]))


def _possibility(replayed: dict, run: dict, group: str, topic: str) -> str | None:
    """The kept_by of the replayed possibility whose kept subscription filters as the real broker's did."""
    real = _real_kept(run, group, topic)
    stats = [s for s in replayed["stats"] if s["consumer_group"] == group and s["topic"] == topic]
    options = {s["kept_by"]: filtering_key(Subscription(group, topic, s["kept_type"], s["kept_expression"]))
               for s in stats}
    matching = [k for k, key in options.items() if key == real]
    assert real is None or matching, (group, topic, real, options)
    return matching[0] if matching else None


def test_the_real_run_is_stable_and_every_group_is_replayed_as_its_members(run, replayed):
    # a topic only some members subscribe comes and goes with each heartbeat (G_TOPICS' T2): only those are unstable
    assert [g["group"] for g in run["groups"] if not g["stable"]] == ["G_TOPICS"]
    members = {(s["consumer_group"], s["member"]) for s in replayed["stats"]}
    assert members == {(g["group"], m["client_id"]) for g in run["groups"] for m in g["members"]}


def test_the_allocation_equals_the_real_clients(run, replayed):
    for g in run["groups"]:
        for m in g["members"]:
            for topic in {s["topic"] for mm in g["members"] for s in mm["subscriptions"]}:
                real = sorted(a["queue"] for a in m["allocation"] if a["topic"] == topic)
                mine = {s["owned_queues"] for s in replayed["stats"] if (s["consumer_group"], s["member"],
                                                                          s["topic"]) == (g["group"],
                                                                                          m["client_id"], topic)}
                assert len(mine) == 1, (g["group"], m["client_id"], topic, mine)
                got = sorted(int(q) for q in (mine.pop() or "").split(",") if q)
                if any(s["topic"] == topic for s in m["subscriptions"]):
                    assert got == real, (g["group"], m["client_id"], topic)
                else:  # a member that does not subscribe a topic never takes its queues: they are nobody's
                    assert real == []


def test_each_member_receives_exactly_what_the_real_member_received(run, replayed):
    delivered = _delivered(replayed["stats"], replayed["decisions"])
    compared = 0
    for g in run["groups"]:
        for topic in {s["topic"] for m in g["members"] for s in m["subscriptions"]}:
            kept_by = _possibility(replayed, run, g["group"], topic)
            for m in g["members"]:
                real = {(r["queue"], r["queue_offset"]) for r in m["received"] if r["topic"] == topic}
                options = {k: v for (gg, t, k, mm), v in delivered.items()
                           if (gg, t, mm) == (g["group"], topic, m["client_id"])}
                if kept_by is not None:
                    assert options.get(kept_by, set()) == real, (g["group"], topic, m["client_id"], kept_by)
                else:  # a topic only some members subscribe: the broker held it only between heartbeats, so the
                    # member received part of what one possibility delivers (never anything else)
                    assert any(real <= got for got in options.values()) or (not real and not options), \
                        (g["group"], topic, m["client_id"])
                compared += len(real)
    assert compared > 100


def test_the_losses_are_named_never_pulled_filtered_by_another_member_and_the_members_own_recheck(run, replayed):
    index = {s["subscription_index"]: s for s in replayed["stats"]}
    outcomes = defaultdict(set)
    for d in replayed["decisions"]:
        outcomes[index[d["subscription_index"]]["consumer_group"]].add(d["outcome"])
    assert {vocab.FILTERED_BY_OTHER_MEMBER, vocab.MEMBER_RECHECK_DROP} <= outcomes["G_TAGS"]
    assert vocab.NEVER_PULLED in outcomes["G_TOPICS"]
    # tag order alone changes nothing: one possibility, no member loss
    assert not set(vocab.MEMBER_OUTCOMES) & outcomes["G_ORDER"]
    assert len({s["kept_by"] for s in replayed["stats"] if s["consumer_group"] == "G_ORDER"}) == 1
    # the never-pulled queues: no real member received a message there
    g = next(g for g in run["groups"] if g["group"] == "G_TOPICS")
    received = {(r["topic"], r["queue"]) for m in g["members"] for r in m["received"]}
    never = {(d["topic"], d["queue_id"]) for d in replayed["decisions"] if d["outcome"] == vocab.NEVER_PULLED
             and index[d["subscription_index"]]["consumer_group"] == "G_TOPICS"}
    assert never and not never & received


MEMBERS_SEEN = """(() => {
  const box = e => { const b = e.getBoundingClientRect(); return {w: b.width, h: b.height}; };
  return {
    section: !!document.getElementById('members'),
    charts: [...document.querySelectorAll('svg.members')].map(box),
    bars: [...document.querySelectorAll('svg.members g.bar')].map(g => ({
      group: g.dataset.group, member: g.dataset.member, keptBy: g.dataset.keptBy, topic: g.dataset.topic,
      segs: Object.fromEntries([...g.querySelectorAll('rect')].map(r => [r.dataset.outcome,
                                                                       Number(r.dataset.count)]))})),
    findings: Object.fromEntries([...document.querySelectorAll('h3.member-group')].map(h => [h.dataset.group,
      [...h.nextElementSibling.querySelectorAll('li')].map(li => li.className + ': ' + li.innerText)])),
    losses: [...document.querySelectorAll('table.member-loss-table tbody tr')].map(r =>
      [...r.cells].map(c => c.innerText.trim())),
  };
})()"""


def test_the_report_shows_each_groups_member_losses_in_a_real_browser(spark, replayed, tmp_path):
    from browser.cdp import BrowserError, Chromium

    out = tmp_path / "group.html"
    assert report.main(["--warehouse", replayed["warehouse"], "--dump-id", "group", "--out", str(out)],
                       spark=spark) == 0
    try:
        browser = Chromium.launch()
    except BrowserError as e:
        pytest.fail(f"the report test needs a real headless Chromium: {e}", pytrace=False)
    with browser:
        seen = browser.open(out.as_uri()).evaluate(MEMBERS_SEEN)
    assert seen["section"] and seen["charts"] and all(c["w"] > 0 and c["h"] > 0 for c in seen["charts"])
    stats = {(s["consumer_group"], s["topic"], s["kept_by"], s["member"]): s for s in replayed["stats"]}
    assert len(seen["bars"]) == len(stats)
    for bar in seen["bars"]:
        s = stats[(bar["group"], bar["topic"], bar["keptBy"], bar["member"])]
        want = {o: s[col] for o, col in vocab.OUTCOME_COLUMNS.items() if s[col]}
        assert bar["segs"] == want, bar
    findings = seen["findings"]
    assert any(f.startswith("loss: T1: different tag sets") for f in findings["G_TAGS"])
    assert any(f.startswith("loss: T1: different types") for f in findings["G_MIXED"])
    assert any(f.startswith("loss: 127.0.0.1@g_topics-m2 does not subscribe T2") for f in findings["G_TOPICS"])
    assert [f.split(":")[0] for f in findings["G_ORDER"]] == ["harmless"]
    lost = defaultdict(int)
    for topic, kept_by, member, _queue, outcome, count in seen["losses"]:
        lost[(topic, kept_by, member, outcome)] += int(count.replace(",", ""))
    for (group, topic, kept_by, member), s in stats.items():  # client ids are unique over the groups
        for o in vocab.MEMBER_OUTCOMES:
            assert lost.get((topic, kept_by, member, o), 0) == s[vocab.OUTCOME_COLUMNS[o]], (group, member, o)
    assert sum(lost.values()) > 0


WORDS = {vocab.FILTERED_BY_OTHER_MEMBER: "lost to another member's subscription",
         vocab.MEMBER_RECHECK_DROP: "is not among this member's own subscribed tags",
         vocab.NEVER_PULLED: "does not subscribe T2: it never pulls the queue and no other member does"}


def test_explain_says_each_member_loss_in_words(spark, replayed, capsys):
    """For one unit of each member outcome: explain names the member that owns the queue, whose subscription the
    broker filtered with, and the loss in words."""
    index = {s["subscription_index"]: s for s in replayed["stats"]}
    for outcome, words in WORDS.items():
        d = next(d for d in replayed["decisions"] if d["outcome"] == outcome)
        s = index[d["subscription_index"]]
        assert explain.main(["--warehouse", replayed["warehouse"], "--dump-id", "group", "--group",
                             s["consumer_group"], "--queue", f"{d['topic']}:{d['queue_id']}:{d['queue_offset']}"],
                            spark=spark) == 0
        out = capsys.readouterr().out
        block = next(b for b in out.split("\n  " + s["consumer_group"] + " on ")[1:]
                     if f"member {s['member']} (if {s['kept_by']}'s" in b.splitlines()[0])
        assert f": {outcome}" in block.splitlines()[0] and words in block, block
        assert f"member {s['member']} owns queue {d['queue_id']}" in block


def test_without_sub_versions_each_possibility_is_replayed_side_by_side_and_the_real_one_is_among_them(
        spark, run, replayed):
    """Run last: job 2 again over the same dump, the members' sub_versions left out. Which member's subscription the
    broker keeps is then not given: every subscriber's is replayed (subscriptions that filter alike once), and the
    possibility of the subscription the real broker kept gives every member exactly what it received."""
    subs = replayed["tmp"] / "subscriptions-no-versions.json"
    subs.write_text(json.dumps(_subscriptions(run, versions=False)))
    assert simulate_pull.main(["--warehouse", replayed["warehouse"], "--dump-id", "group", "--broker-conf",
                               replayed["conf"], "--subscriptions", str(subs)], spark=spark) == 0
    stats = rows(spark, replayed["warehouse"], "group_stats", "group", ["subscription_index"])
    decisions = rows(spark, replayed["warehouse"], "pull_decisions", "group",
                     ["subscription_index", "queue_id", "queue_offset"])
    delivered = _delivered(stats, decisions)
    for g in run["groups"]:
        subscribers = [m for m in g["members"] if any(s["topic"] == "T1" for s in m["subscriptions"])]
        keys = {filtering_key(Subscription(g["group"], "T1", s["type"], s["expression"]))
                for m in subscribers for s in m["subscriptions"] if s["topic"] == "T1"}
        kept = {s["kept_by"] for s in stats if (s["consumer_group"], s["topic"]) == (g["group"], "T1")}
        assert len(kept) == len(keys), (g["group"], kept)  # G_ORDER's swapped tag order is one possibility
        real_kept = _possibility({"stats": stats}, run, g["group"], "T1")
        for m in g["members"]:
            real = {(r["queue"], r["queue_offset"]) for r in m["received"] if r["topic"] == "T1"}
            assert delivered.get((g["group"], "T1", real_kept, m["client_id"]), set()) == real, (g["group"], m)


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory) -> dict:
    """Two real brokers of one cluster and their groups; job 1 on each broker's store, then job 2 on each with
    --cluster naming both."""
    real = refharness.run_group(cluster_group_scenario())
    tmp = tmp_path_factory.mktemp("cluster_replay")
    wh = str(tmp / "wh")
    subs = tmp / "subscriptions.json"
    subs.write_text(json.dumps(_subscriptions(real)))
    dumps = {name: f"cluster-{name}" for name in real["brokers"]}
    for name, broker in real["brokers"].items():
        conf = tmp / f"{name}.conf"
        conf.write_text("".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                                for k, v in broker["config"].items()))
        assert build_queues.main(["--store", broker["store"], "--warehouse", wh, "--dump-id", dumps[name],
                                  "--broker-conf", str(conf), "--subscriptions", str(subs)], spark=spark) == 0
    for name in real["brokers"]:
        assert simulate_pull.main(["--warehouse", wh, "--dump-id", dumps[name], "--cluster", ",".join(dumps.values())],
                                  spark=spark) == 0
    stats = {name: rows(spark, wh, "group_stats", d, ["subscription_index"]) for name, d in dumps.items()}
    decisions = {name: rows(spark, wh, "pull_decisions", d, ["subscription_index", "queue_id", "queue_offset"])
                 for name, d in dumps.items()}
    return {"real": real, "warehouse": wh, "dumps": dumps, "stats": stats, "decisions": decisions}


def test_a_cluster_allocates_over_every_brokers_queues_as_the_real_clients(cluster):
    real = cluster["real"]
    assert all(g["stable"] for g in real["groups"])
    for g in real["groups"]:
        for m in g["members"]:
            want = sorted((a["broker"], a["queue"]) for a in m["allocation"])
            got = sorted((broker, int(q)) for broker, stats in cluster["stats"].items() for s in stats
                         if (s["consumer_group"], s["member"]) == (g["group"], m["client_id"])
                         for q in (s["owned_queues"] or "").split(",") if q)
            assert got == want, (g["group"], m["client_id"])
        assert len({(a["broker"], a["queue"]) for m in g["members"] for a in m["allocation"]}) == 6


def test_a_cluster_delivers_to_each_member_what_it_received_on_every_broker(cluster):
    real = cluster["real"]
    compared = 0
    for g in real["groups"]:
        received_total = 0
        for m in g["members"]:
            want = {(r["broker"], r["queue"], r["queue_offset"]) for r in m["received"]}
            got = set()
            for broker in real["brokers"]:
                kept_by = _possibility({"stats": cluster["stats"][broker]}, real, g["group"], "T1")
                mine = _delivered(cluster["stats"][broker], cluster["decisions"][broker])
                got |= {(broker, q, o) for q, o in mine.get((g["group"], "T1", kept_by, m["client_id"]), set())}
            assert got == want, (g["group"], m["client_id"])
            received_total += len(want)
            compared += len(want)
        # the cluster's group_stats: the delivered counts of the kept possibility, summed over both brokers
        summed = sum(s["delivered"] for broker, stats in cluster["stats"].items() for s in stats
                     if s["consumer_group"] == g["group"]
                     and s["kept_by"] == _possibility({"stats": stats}, real, g["group"], "T1"))
        assert summed == received_total
        # not vacuous: each group's members received something (how much depends on whose subscription the real
        # broker kept, the last heartbeat's: 29 messages in all in one run, more than 30 in the runs before it)
        assert received_total > 0, g["group"]
    assert compared > 0


def test_explain_finds_a_message_on_whichever_broker_of_the_cluster_holds_it(spark, cluster, capsys):
    real = cluster["real"]
    g = next(g for g in real["groups"] if g["group"] == "C_AVG")
    r = next(r for m in g["members"] for r in m["received"] if r["broker"] == "broker-b")
    assert explain.main(["--warehouse", cluster["warehouse"], "--group", "C_AVG", "--cluster",
                         ",".join(cluster["dumps"].values()), "--queue", f"T1:{r['queue']}:{r['queue_offset']}"],
                        spark=spark) == 0
    out = capsys.readouterr().out
    assert f"on the broker of dump {cluster['dumps']['broker-b']}:" in out
    assert "DELIVERED" in out and "member 127.0.0.1@c_avg-" in out


def test_a_slaves_copy_in_a_cluster_is_refused_in_words(spark, cluster, tmp_path, capsys):
    broker = cluster["real"]["brokers"]["broker-a"]
    conf = tmp_path / "slave.conf"
    conf.write_text("".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                            for k, v in {**broker["config"], "brokerId": 1, "brokerRole": "SLAVE"}.items()))
    before = rows(spark, cluster["warehouse"], "group_stats", cluster["dumps"]["broker-a"], ["subscription_index"])
    assert simulate_pull.main(["--store", broker["store"], "--warehouse", cluster["warehouse"], "--dump-id",
                               cluster["dumps"]["broker-a"], "--broker-conf", str(conf), "--cluster",
                               ",".join(cluster["dumps"].values())], spark=spark) == 2
    err = capsys.readouterr().err
    assert "is a slave's copy (brokerId 1, brokerRole SLAVE) of broker-a: replay its master's copy" in err
    assert rows(spark, cluster["warehouse"], "group_stats", cluster["dumps"]["broker-a"],
                ["subscription_index"]) == before


def test_the_cluster_report_sums_each_member_over_the_brokers(spark, cluster, tmp_path):
    args = ["--warehouse", cluster["warehouse"], "--cluster", ",".join(cluster["dumps"].values()),
            "--out", str(tmp_path / "cluster.html")]
    summary = report.run(spark, report.validate(report.parser().parse_args(args)))
    assert (tmp_path / "cluster.html").is_file()
    members = {m["group"]: m for m in summary.data["members"]}
    assert set(members) == {"C_AVG", "C_CIRCLE"}
    for name, m in members.items():
        assert any("different" in x for x in m["losses"])
        for row in m["rows"]:
            key = (row["topic"], row["kept_by"], row["member"])
            per_broker = [s for stats in cluster["stats"].values() for s in stats
                          if s["consumer_group"] == name and (s["topic"], s["kept_by"], s["member"]) == key]
            assert len(per_broker) == 2
            for col in [vocab.OUTCOME_COLUMNS[o] for o in vocab.OUTCOME_NAMES]:
                assert row[col] == sum(s[col] for s in per_broker), (name, key, col)
            assert row["owned_queues"].count(":") == 2  # both brokers' queues, each named with its dump



def test_posted_and_lite_pull_members_are_filtered_with_their_own_push_members_with_the_kept(spark, tmp_path):
    """One group of every client kind (real push, push posting its expression, lite pull): the posted and lite-pull
    members' pulls carry their own expression, the push members' are filtered with the kept subscription, which
    any member's heartbeat may set (all of them list the topic); each member receives what the real one did."""
    real = refharness.run_group(kinds_group_scenario())
    broker = real["brokers"]["broker-a"]
    conf, subs, wh = tmp_path / "broker.conf", tmp_path / "subscriptions.json", str(tmp_path / "wh")
    conf.write_text("".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                            for k, v in broker["config"].items()))
    subs.write_text(json.dumps(_subscriptions(real)))
    assert build_queues.main(["--store", broker["store"], "--warehouse", wh, "--dump-id", "kinds", "--broker-conf",
                              str(conf)], spark=spark) == 0
    assert simulate_pull.main(["--warehouse", wh, "--dump-id", "kinds", "--subscriptions", str(subs)],
                              spark=spark) == 0
    stats = rows(spark, wh, "group_stats", "kinds", ["subscription_index"])
    delivered = _delivered(stats, rows(spark, wh, "pull_decisions", "kinds", ["subscription_index", "queue_id",
                                                                                "queue_offset"]))
    (g,) = real["groups"]
    assert g["stable"]
    kept_by = _possibility({"stats": stats}, real, "GK", "T1")
    assert len({s["kept_by"] for s in stats}) == 1  # every member gives its sub_version: the largest is kept
    kinds = set()
    for m in g["members"]:
        want = {(r["queue"], r["queue_offset"]) for r in m["received"]}
        assert delivered.get(("GK", "T1", kept_by, m["client_id"]), set()) == want, m["client_id"]
        kinds.add(m["consumer"])
    assert kinds == {"push", "push_posted", "lite_pull"}
    # the posted members pulled under their own expressions, which differ from the kept one
    own = {s["member"]: s for s in stats}
    assert all(own[m["client_id"]]["path"] == "posted" for m in g["members"] if m["consumer"] != "push")
    assert any(own[m["client_id"]]["expression"] != own[kept_by]["expression"] and own[m["client_id"]]["delivered"]
               for m in g["members"] if m["consumer"] != "push")
