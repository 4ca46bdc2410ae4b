"""The run report (jobs.report) on the bundled demo dump, opened in a real headless Chromium.

Job 1 and job 2 build a warehouse from demo/dump (demo/broker.conf, demo/subscriptions.json plus two subscriptions
the broker refuses before reading); `python -m jobs.report` writes <warehouse>/reports/demo.html; Chromium (the OS
package, `make browser`) loads it over the DevTools protocol and the test reads what a person would see: every
chart drawn with a nonzero size, the numbers in the charts' labels and tooltips and in the tables equal to the
Delta tables, and no request but the page itself. Without a browser the test fails (it is never skipped).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browser.cdp import BrowserError, Chromium

from filterlib import tags as tagmod
from jobs import build_queues, report, row_forms, simulate_pull
from jobs.report_html import OUTCOMES, render
from jobs.runs import read_dump

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
DUMP_ID = "demo"
# Beside the demo's own subscriptions: a registered SQL92 subscription the dump's registry does not hold, and a
# posted SQL92 subscription with an empty selector (FilterAPI.build refuses it). Neither pulls; the report must
# show the broker's answer instead.
REFUSED = [{"group": "late-joiner", "topic": "TradeOrder", "type": "SQL92", "expression": "level > 1"},
           {"group": "empty-selector", "topic": "TradeOrder", "type": "SQL92", "expression": "", "path": "posted"}]
NUMBER = re.compile(r"-?[\d,]+")


def as_int(text: str) -> int:
    m = NUMBER.search(text)
    assert m, f"no number in {text!r}"
    return int(m.group().replace(",", ""))


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory) -> dict:
    """A warehouse with the demo dump's tables of both jobs, and its report written by the entry point."""
    tmp = tmp_path_factory.mktemp("report")
    wh = str(tmp / "warehouse")
    subs = tmp / "subscriptions.json"
    subs.write_text(json.dumps(json.loads((DEMO / "subscriptions.json").read_text()) + REFUSED))
    args = ["--store", str(DEMO / "dump"), "--warehouse", wh, "--broker-conf", str(DEMO / "broker.conf"),
            "--dump-id", DUMP_ID]
    build_queues.run(spark, build_queues.validate(build_queues.parser().parse_args(args)))
    simulate_pull.run(spark, simulate_pull.validate(
        simulate_pull.parser().parse_args(args + ["--subscriptions", str(subs)])))
    assert report.main(["--warehouse", wh, "--dump-id", DUMP_ID], spark=spark) == 0
    out = Path(wh) / "reports" / f"{DUMP_ID}.html"
    assert out.is_file()
    return {"warehouse": wh, "report": out, "html": out.read_text(encoding="utf-8")}


@pytest.fixture(scope="module")
def tables(spark, built) -> dict:
    """What the report must show, read from the Delta tables directly (independently of jobs.report)."""
    from pyspark.sql import functions as F

    wh = built["warehouse"]

    def load(name):
        return read_dump(spark, wh, name, DUMP_ID)

    stats = [r.asDict() for r in load("group_stats").collect()]
    decisions = row_forms.pull_decisions(spark, wh, DUMP_ID)
    collisions = {(r["consumer_group"], r["tags"], r["tags_code"]): r["count"] for r in decisions
                  .where((F.col("outcome") == "TAG_CLIENT_MISMATCH") & (F.col("reason") == "client_tag_mismatch"))
                  .join(load("messages").select("commit_log_offset", "tags"), "commit_log_offset")
                  .groupBy("consumer_group", "tags", "tags_code").count().collect()}
    errors = {r["consumer_group"]: r["count"] for r in
              decisions.where(F.col("outcome") == "SQL_ERROR").groupBy("consumer_group").count().collect()}
    per_topic = {r["topic"]: r["count"] for r in load("messages").groupBy("topic").count().collect()}
    filters = {r["topic"]: r["count"] for r in load("consumer_filters").where("registered AND compiled")
               .groupBy("topic").count().collect()}
    files = [r.asDict() for r in load("dump_files").collect()]
    return {"stats": stats, "collisions": collisions, "errors": errors, "per_topic": per_topic,
            "filters": filters, "files": files, "units": load("consume_queue").count()}


@pytest.fixture(scope="module")
def page(built, tmp_path_factory):
    """The report in a real headless Chromium (fails, never skips, when no browser can be started)."""
    try:
        browser = Chromium.launch()
    except BrowserError as e:
        pytest.fail(f"the report test needs a real headless Chromium: {e}", pytrace=False)
    with browser:
        p = browser.open(built["report"].as_uri())
        p.screenshot(str(tmp_path_factory.mktemp("screenshot") / "report.png"))  # kept for a look after a failure
        yield p


SEEN = """(() => {
  const box = e => { const b = e.getBoundingClientRect(); return {w: b.width, h: b.height}; };
  const visible = e => { const s = getComputedStyle(e); return s.display !== 'none' && s.visibility !== 'hidden'
                         && parseFloat(s.opacity || '1') > 0; };
  return {
    title: document.title,
    charts: [...document.querySelectorAll('svg')].map(s => ({cls: s.getAttribute('class'), ...box(s),
                                                               visible: visible(s)})),
    bars: [...document.querySelectorAll('svg.outcomes g.bar')].map(g => ({
      group: g.dataset.group, topic: g.dataset.topic, answer: g.dataset.answer, text: g.textContent,
      segs: [...g.querySelectorAll('rect')].map(r => ({title: r.querySelector('title').textContent, fill:
                                                        getComputedStyle(r).fill, ...box(r)})),
      labels: [...g.querySelectorAll('text.in')].map(t => ({text: t.textContent, ...box(t)}))})),
    tables: Object.fromEntries([...document.querySelectorAll('table')].map(t => [t.className, {
      head: [...t.tHead.rows[0].cells].map(c => c.innerText.replace(/\\s+/g, '')),
      rows: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.innerText.trim()))}])),
    totals: Object.fromEntries([...document.querySelectorAll('#totals dd')].map(d => [d.dataset.total,
                                                                                      d.innerText])),
    text: document.body.innerText,
    refs: [...document.querySelectorAll('[src], [href], link, script, iframe, object, embed, image, use')]
            .map(e => e.getAttribute('src') || e.getAttribute('href') || e.getAttribute('xlink:href') || e.tagName),
  };
})()"""


@pytest.fixture(scope="module")
def seen(page) -> dict:
    return page.evaluate(SEEN)


def rows_by(table: dict, key: str) -> dict[str, dict[str, str]]:
    """A rendered table's rows as {value of column `key`: {header: cell text}} (last row wins on a repeat)."""
    head = table["head"]
    return {r[head.index(key)]: dict(zip(head, r, strict=True)) for r in table["rows"]}


@pytest.mark.spark
def test_every_chart_is_drawn_with_a_size(seen) -> None:
    kinds = {c["cls"] for c in seen["charts"]}
    assert {"chart outcomes", "chart bloom", "chart bitmap", "chart files"} <= kinds
    for c in seen["charts"]:
        assert c["visible"] and c["w"] > 100 and c["h"] > 20, c
    drawn = [s for b in seen["bars"] for s in b["segs"]]
    assert len(drawn) >= 25
    assert all(s["w"] >= 1 and s["h"] > 10 for s in drawn)
    assert all(s["fill"] not in ("none", "", "rgba(0, 0, 0, 0)") for s in drawn)


@pytest.mark.spark
def test_outcome_bars_and_table_equal_group_stats(seen, tables) -> None:
    """Each pulled subscription's bar: a segment per nonzero outcome whose tooltip holds group_stats' count, widths
    in proportion to the counts; its row in the outcome table holds the same numbers."""
    bars = {(b["group"], b["topic"]): b for b in seen["bars"]}
    table = seen["tables"]["outcome-table"]
    head = table["head"]
    rows = {(r[0], r[1]): dict(zip(head, r, strict=True)) for r in table["rows"]}
    assert len(rows) == len(tables["stats"]) == 12
    scale: dict[str, set[float]] = {}  # pixels per unit of each wide segment: one scale per topic's chart
    for st in tables["stats"]:
        key = (st["consumer_group"], st["topic"])
        row = rows[key]
        assert row["answer"] == st["answer"]
        assert as_int(row["scanned"]) == st["units_scanned"]
        for outcome, col, _ in OUTCOMES:
            assert as_int(row[outcome]) == st[col], (key, outcome)
        if st["answer"] != "OK":
            continue
        bar = bars[key]
        shown = {}
        for s in bar["segs"]:
            name, count = s["title"].split(":", 1)
            shown[name] = (as_int(count), s["w"])
        assert {o: c for o, (c, _) in shown.items()} == {o: st[col] for o, col, _ in OUTCOMES if st[col]}, key
        scale.setdefault(key[1], set()).update(w / c for c, w in shown.values() if w > 1.5)
    for topic, px in scale.items():
        assert max(px) / min(px) < 1.1, (topic, px)  # widths in proportion to the counts (1-px minimum aside)
    billing = rows[("billing-paid", "TradeOrder")]
    want = next(s for s in tables["stats"] if s["consumer_group"] == "billing-paid")
    assert as_int(billing["DELIVERED"]) == want["delivered"] == 209  # demo/README.md's figure
    assert "209" in [lab["text"] for lab in bars[("billing-paid", "TradeOrder")]["labels"]]
    assert all(lab["w"] > 0 for b in seen["bars"] for lab in b["labels"])


@pytest.mark.spark
def test_subscriptions_that_did_not_pull_show_the_brokers_answer(seen, tables) -> None:
    answers = {s["consumer_group"]: s["answer"] for s in tables["stats"] if s["answer"] != "OK"}
    assert answers == {"late-joiner": "FILTER_DATA_NOT_EXIST", "empty-selector": "SUBSCRIPTION_PARSE_FAILED"}
    bars = {b["group"]: b for b in seen["bars"]}
    for group, answer in answers.items():
        assert bars[group]["segs"] == [] and f"not pulled: {answer}" in bars[group]["text"]
    shown = rows_by(seen["tables"]["answer-table"], "group")
    assert {g: r["answer"] for g, r in shown.items()} == answers
    assert "exist" in shown["late-joiner"]["remark"]
    assert "Expression can't be null" in shown["empty-selector"]["cause"]


@pytest.mark.spark
def test_bloom_rates_measured_and_configured(seen, tables) -> None:
    shown = rows_by(seen["tables"]["bloom-table"], "group")
    tested = {s["consumer_group"]: s for s in tables["stats"] if s["answer"] == "OK" and s["bloom_tested"]}
    assert set(shown) == set(tested) == {"billing-paid", "vip-orders", "big-orders-eu", "apac-fulfilment",
                                         "fraud-screening"}
    for group, st in tested.items():
        r = shown[group]
        assert as_int(r["bitmapstested"]) == st["bloom_tested"]
        assert as_int(r["falsepositives"]) == st["bloom_false_positives"]
        assert as_int(r["bloommisses"]) == st["bloom_miss"]
        assert r["measured"] == f"{st['bloom_fp_rate'] * 100:.2f}%"
        assert st["bloom_fp_rate"] == st["bloom_false_positives"] / (st["bloom_false_positives"] + st["bloom_miss"])
        assert r["configured"] == f"{st['configured_fp_rate'] * 100:.0f}%" == "30%"
    assert shown["vip-orders"]["falsepositives"] == "8" and shown["big-orders-eu"]["falsepositives"] == "13"


@pytest.mark.spark
def test_tag_hash_collisions(seen, tables) -> None:
    table = seen["tables"]["collision-table"]
    got = {(r[0], r[4], int(r[5])): (r[3], as_int(r[6])) for r in table["rows"]}
    assert {k: n for k, (_, n) in got.items()} == tables["collisions"]
    assert got[("order-tag-consumer", "BB", 2112)] == ("Aa", 32)
    assert tagmod.tags_code("Aa") == tagmod.tags_code("BB") == 2112
    untagged = rows_by(seen["tables"]["untagged-table"], "group")
    assert as_int(untagged["zero-hash-tag"]["messages"]) == 33


@pytest.mark.spark
def test_sql_errors_by_class_and_group(seen, tables) -> None:
    table = seen["tables"]["sql-error-table"]
    by_group: dict[str, int] = {}
    for exc, cause, group, _topic, units, example in table["rows"]:
        assert exc == "RuntimeException" and cause == "java.lang.NumberFormatException"
        assert example.startswith("RuntimeException: java.lang.NumberFormatException: For input string")
        by_group[group] = by_group.get(group, 0) + as_int(units)
    assert by_group == tables["errors"] == {"order-audit": 105, "big-orders-eu": 15}


@pytest.mark.spark
def test_the_bitmap_question_per_topic(seen, tables) -> None:
    shown = rows_by(seen["tables"]["bitmap-table"], "topic")
    assert set(shown) == {"TradeOrder", "PaymentEvents"}
    for topic, r in shown.items():
        msgs, n = tables["per_topic"][topic], tables["filters"][topic]
        avoided = sum(s["bloom_miss"] for s in tables["stats"] if s["topic"] == topic and s["answer"] == "OK")
        assert (as_int(r["messages"]), as_int(r["SQL92filters"])) == (msgs, n)
        assert as_int(r["addedatdispatch"]) == msgs * n
        assert as_int(r["avoidedatpull"]) == avoided
        assert as_int(r["netsaved"]) == avoided - msgs * n
    assert as_int(shown["TradeOrder"]["addedatdispatch"]) == 702 * 4
    assert as_int(shown["TradeOrder"]["avoidedatpull"]) == 493 + 492 + 469 + 476


@pytest.mark.spark
def test_header_files_and_damage(seen, tables) -> None:
    t = seen["totals"]
    assert as_int(t["messages (CommitLog records)"]) == sum(tables["per_topic"].values()) == 968
    assert as_int(t["consume-queue units"]) == tables["units"]
    assert as_int(t["decisions"]) == sum(s["units_scanned"] for s in tables["stats"])
    assert as_int(t["delivered"]) == sum(s["delivered"] for s in tables["stats"])
    assert as_int(t["commitlog files"]) == len(tables["files"]) == 4
    assert t["subscriptions (pulled)"] == "12 (10)"
    assert t["broker version"] == "5.3.3"  # demo/README: a real 5.3.3 broker wrote the dump
    assert "grammar-table" not in seen["tables"]  # 5.3.3 reads every selector as 5.x does: no such section
    assert seen["title"] == "Filter replay report — demo" and "Generated 20" in seen["text"]
    shown = rows_by(seen["tables"]["file-table"], "file")
    for f in tables["files"]:
        r = shown[f["path"]]
        for col, key in (("size", "size"), ("records", "records"), ("decoded", "decoded_bytes"),
                         ("blank", "blank_bytes"), ("zerotail", "zero_tail_bytes"), ("damaged", "damaged_bytes")):
            assert as_int(r[col]) == f[key], (f["path"], col)
        assert r["end"] == f["end_kind"]
    assert "No damaged range" in seen["text"] and "damage-table" not in seen["tables"]


@pytest.mark.spark
def test_no_network_at_view_time(page, seen, built) -> None:
    """The page asks for nothing but itself: no request, no external reference, a CSP that forbids loading."""
    assert page.requests == [built["report"].as_uri()]
    assert page.failed == []
    assert all(ref.startswith("#") for ref in seen["refs"]), seen["refs"]
    html = built["html"]
    assert "default-src 'none'" in html
    assert re.findall(r"https?://[^\s\"'<>)]+", html) == ["http://www.w3.org/2000/svg"] * html.count("<svg")
    assert "<script" not in html and "<link" not in html and "@import" not in html and "url(" not in html


# The renderer alone: pure data in, no Spark.

def test_group_stats_from_an_older_release_still_report(spark, built, tmp_path) -> None:
    """A group_stats table written before a column existed (client_decode_failed) still gives the report, the
    missing count as 0 and every other figure as from the full table."""
    import shutil

    wh = tmp_path / "warehouse"
    shutil.copytree(built["warehouse"], wh, ignore=shutil.ignore_patterns("reports"))
    old = read_dump(spark, str(wh), "group_stats", DUMP_ID).drop("client_decode_failed").localCheckpoint()
    old.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(str(wh / "group_stats"))
    shutil.rmtree(wh / "runs")  # an older release's warehouse: no runs table, every table read at its latest
    full = report.collect(spark, built["warehouse"], DUMP_ID)["groups"]
    older = report.collect(spark, str(wh), DUMP_ID)["groups"]
    assert [g["client_decode_failed"] for g in older] == [None] * len(full)
    assert [{**g, "client_decode_failed": None} for g in full] == older
    assert "CLIENT_DECODE_FAILED" in render(report.collect(spark, str(wh), DUMP_ID))


def _data(**over) -> dict:
    g = {"consumer_group": "g<1>", "topic": "T", "subscription_index": 0, "subscription_type": "SQL92",
         "expression": "a > '<b>'", "path": "registered", "source": "subscriptions", "answer": "OK",
         "answer_remark": None, "answer_cause": None, "units_scanned": 10, "delivered": 4, "tag_hash_miss": 0,
         "tag_client_mismatch": 0, "bloom_miss": 6, "sql_false": 0, "sql_null": 0, "sql_error": 0,
         "bloom_tested": 10, "bloom_false_positives": 0, "bloom_fp_rate": 0.0, "configured_fp_rate": 0.2, "pulls": 2}
    d = {"dump_id": "d1", "generated_at": "2026-01-01T00:00:00+00:00", "warehouse": "/w", "totals": {},
         "groups": [g], "collisions": [], "untagged": [], "sql_errors": [], "bitmap": [],
         "files": [{"path": "commitlog/00000000000000000000", "size": 100, "records": 1, "decoded_bytes": 40,
                    "blank_bytes": 0, "zero_tail_bytes": 0, "damaged_bytes": 60, "valid_end": 40, "end_kind": "fail",
                    "damage_offset": 40, "damage_global_offset": 40, "damage_length": 60,
                    "damage_reason": "bad magic code 0x1234", "splits": 1, "whole_file_fallback": False}]}
    d.update(over)
    return d


def test_renderer_escapes_and_lists_damage() -> None:
    html = render(_data())
    assert "g&lt;1&gt;" in html and "g<1>" not in html and "&#x27;&lt;b&gt;&#x27;" in html
    assert 'class="damage-table"' in html and "bad magic code 0x1234" in html and "No damaged range" not in html
    assert html.count("<svg") == 3  # outcomes, bloom, files (no bitmap rows given)


def test_report_cli_rejects_bad_input_before_spark(tmp_path, capsys) -> None:
    assert report.main(["--warehouse", "s3a://bucket/wh", "--dump-id", "d1"]) == 2
    assert "pass --out FILE" in capsys.readouterr().err
    assert report.main(["--warehouse", str(tmp_path), "--dump-id", "d1"]) == 2
    assert "no Delta table" in capsys.readouterr().err
    assert report.main(["--warehouse", str(tmp_path), "--dump-id", "bad id"]) == 2
    assert "dump id" in capsys.readouterr().err


def test_a_missing_browser_fails_with_what_to_do(monkeypatch) -> None:
    monkeypatch.setenv("CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(BrowserError, match="make browser"):
        Chromium.launch()
