"""A broker with configManagerVersion=v2 keeps its topics, subscription groups and consumer offsets in ONE RocksDB
database, config/rdb/ (ConfigStorage; consumerFilter.json stays JSON). The jobs do not read it: each says so in one
sentence naming config/rdb/ and what it does instead, and the replay still equals the real pull of a store the
5.5.1 harness wrote with that setting; --from committed, which needs the offsets, refuses."""

from __future__ import annotations

import json

import pytest
import refharness
import scenarios
from support.job_runs import broker_conf, compare, subscriptions_file

from jobs import build_queues, simulate_pull

pytestmark = [pytest.mark.reference, pytest.mark.spark]


@pytest.mark.parametrize("version", [v for v in refharness.VERSIONS if v != "4.9.7"])  # v2 configs: 5.x only
def test_a_v2_config_store_is_said_not_read_and_replayed_as_the_real_pull(spark, tmp_path, capsys, version) -> None:
    sc = scenarios.tag_and_sql_scenario(1)
    sc["broker"] = {**sc["broker"], "configManagerVersion": "v2"}
    out = refharness.write_store(sc, version)
    report = json.loads((out / "report.json").read_text())
    store = out / "store"
    assert report["broker"]["configManagerVersion"] == "v2"
    assert sorted(p.name for p in (store / "config").iterdir()) == ["consumerFilter.json", "consumerFilter.json.bak",
                                                                    "rdb"]
    conf = broker_conf(tmp_path / "broker.conf", report["broker"], report["store"])
    subs = subscriptions_file(tmp_path / "subs.json", sc["subscriptions"])
    wh = str(tmp_path / "wh")
    args = ["--store", str(store), "--warehouse", wh, "--broker-conf", conf, "--dump-id", "v2",
            "--broker-version", version]
    built = build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args + ["--verify"])))
    rdb = str(store / "config" / "rdb")
    said = [i for i in built.issues if rdb in i]
    # 5.5.1's registry needs the topic table; --verify the groups: one sentence each, naming config/rdb/
    assert len(said) == (2 if version == "5.5.1" else 1), built.issues
    assert all("configManagerVersion=v2" in i for i in said)
    assert any("--verify explains bitmaps by the groups of the registry" in i for i in said)
    assert (version == "5.5.1") == any("every topic is taken as present" in i for i in said)
    assert built.verify.differences == 0
    summary = simulate_pull.run(spark, simulate_pull.validate(simulate_pull.parser().parse_args(
        args + ["--subscriptions", subs])))
    notes = [n for n in summary.notes if rdb in n]
    assert len(notes) == (2 if version == "5.5.1" else 1), summary.notes
    assert any("every subscription is replayed as an ordinary one" in n for n in notes)
    units, calls, msgs, problems = compare(spark, wh, "v2", json.loads((out / "pull.json").read_text()))
    assert not problems, problems[:3]
    assert units == summary.decisions > 0 and msgs > 0
    capsys.readouterr()
    assert simulate_pull.main(args + ["--subscriptions", subs, "--from", "committed"], spark=spark) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and rdb in err and "--from committed" in err, err
