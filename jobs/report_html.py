"""The run report as ONE self-contained HTML file: plain data in (dicts and lists, as `jobs.report` collects them
from the Delta tables), a string out. No Spark, no template engine, no network at view time: the CSS is inline,
every chart is an SVG drawn here, and a Content-Security-Policy forbids the page to load anything.

`render(data)` takes::

    {"dump_id": str, "generated_at": str (ISO 8601, UTC), "warehouse": str,
     "totals": {"messages", "commitlog_files", "commitlog_bytes", "damaged_files", "damaged_bytes", "units",
                "subscriptions", "pulled", "decisions", "delivered", "pulls": int},
     "groups": [group_stats rows (dicts with at least consumer_group, topic, subscription_index, subscription_type,
                expression, path, source, answer, answer_remark, answer_cause, units_scanned, the seven outcome
                columns, bloom_tested, bloom_false_positives, bloom_fp_rate, configured_fp_rate, pulls)],
     "collisions": [{"consumer_group", "topic", "expression", "subscribed_tags": [str], "message_tag",
                     "hash_code", "count"}],
     "untagged": [{"consumer_group", "topic", "expression", "count"}],
     "sql_errors": [{"error_class", "cause_class", "consumer_group", "topic", "count", "example"}],
     "files": [dump_files rows],
     "bitmap": [{"topic", "messages", "sql_filters", "filter_groups": [str], "evaluations_added",
                 "evaluations_avoided", "avoided_by_group": {group: int}}]}

Every number a person reads is also in the page as text (tables, SVG labels and <title> tooltips), formatted
with thousands separators.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from filterlib import vocabulary as vocab
from filterlib.replay.plans import NOT_SUBSCRIBED

OUTCOMES: list[tuple[str, str, str]] = [(o.name, o.column, o.colour) for o in vocab.PIPELINE_ORDER]
"""The outcomes in pipeline order: name, group_stats column and colour (`filterlib.vocabulary`)."""
OUTCOME_HELP = {o.name: o.words for o in vocab.OUTCOMES}
FILE_PARTS: list[tuple[str, str, str]] = [
    ("decoded_bytes", "decoded", "#1b9e77"),
    ("blank_bytes", "blank filler", "#bdbdbd"),
    ("zero_tail_bytes", "zero tail", "#e0e0e0"),
    ("damaged_bytes", "damaged", "#d7301f"),
]
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

CSS = """
:root { --fg: #1d2125; --muted: #5b6470; --line: #d9dde3; --bg: #fff; --panel: #f6f7f9; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; max-width: 1320px; padding: 24px 28px 60px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 36px 0 8px; padding-top: 8px;
     border-top: 1px solid var(--line); } h3 { font-size: 15px; margin: 18px 0 6px; }
p.lead, p.note { color: var(--muted); margin: 4px 0 10px; max-width: 920px; }
code { font: 12.5px ui-monospace, "DejaVu Sans Mono", monospace; background: var(--panel); padding: 0 3px;
       border-radius: 3px; }
dl.totals { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 8px; margin: 14px 0; }
dl.totals div { background: var(--panel); border-radius: 6px; padding: 8px 10px; }
dl.totals dt { color: var(--muted); font-size: 12px; } dl.totals dd { margin: 0; font-size: 19px; font-weight: 600; }
table { border-collapse: collapse; margin: 8px 0 4px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
td.sub { min-width: 200px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.refused td { color: #8a1c1c; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin: 6px 0 10px; font-size: 12.5px; }
.legend span.sw { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 5px;
                  vertical-align: -1px; }
svg.chart { display: block; margin: 6px 0 4px; max-width: 100%; height: auto; }
svg.chart text { font: 12px system-ui, "DejaVu Sans", sans-serif; fill: var(--fg); }
svg.chart text.in { fill: #fff; font-size: 11px; } svg.chart text.muted { fill: var(--muted); }
svg.chart text.refused { fill: #8a1c1c; }
.ok { color: #1b7a3a; } .bad { color: #b42318; } .wrap { overflow-x: auto; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""


def esc(value: Any) -> str:
    """Text for HTML (None as an empty string)."""
    return html.escape("" if value is None else str(value), quote=True)


def num(value: Any) -> str:
    """An integer with thousands separators ('' for None)."""
    return "" if value is None else f"{int(value):,}"


def pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value * 100:.{digits}f}%"


def _td(value: Any, numeric: bool = False, attrs: str = "") -> str:
    cls = ' class="num"' if numeric else ""
    return f"<td{cls}{attrs}>{num(value) if numeric else esc(value)}</td>"


def table(headers: Sequence[tuple[str, bool]], rows: Iterable[Sequence[str]], cls: str = "",
          row_classes: Sequence[str] | None = None) -> str:
    """An HTML table; headers are (label, numeric); rows are already-rendered <td> cells."""
    head = "".join(f'<th{" class=num" if n else ""}>{esc(h).replace("_", "_<wbr>")}</th>' for h, n in headers)
    body = []
    for i, cells in enumerate(rows):
        rc = row_classes[i] if row_classes else ""
        attr = f' class="{esc(rc)}"' if rc else ""
        body.append(f"<tr{attr}>{''.join(cells)}</tr>")
    return f'<div class="wrap"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead>' \
           f'<tbody>{"".join(body)}</tbody></table></div>'


def legend(items: Iterable[tuple[str, str, str]]) -> str:
    return '<div class="legend">' + "".join(
        f'<span title="{esc(tip)}"><span class="sw" style="background:{color}"></span>{esc(label)}</span>'
        for label, color, tip in items) + "</div>"


def _trim(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _light(color: str) -> bool:
    """Whether a #rrggbb colour is light enough to need dark text on it."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b > 170


def group_label(g: Mapping[str, Any]) -> str:
    return _label(g) + (f" (until the copy {g['until_copy']})" if g.get("until_copy") else "")


def _label(g: Mapping[str, Any]) -> str:
    if g.get("member") is not None:
        if g.get("answer") == NOT_SUBSCRIBED:
            return f"{g['consumer_group']} {g['member']} [not subscribed; kept {g.get('kept_by')}]"
        return f"{g['consumer_group']} {g['member']} [{g.get('subscription_type') or 'TAG'} " \
               f"{g.get('expression') or '*'}; kept {g.get('kept_by')}]"
    return f"{g['consumer_group']} [{g.get('subscription_type') or 'TAG'} {g.get('expression') or '*'}]"


def in_force(g: Mapping[str, Any]) -> str:
    """When over a broker's history the subscription was in force (nothing for one in force from its first run)."""
    if g.get("until_copy"):
        return f"; in force from the copy {g.get('since_copy')} until the copy {g['until_copy']}"
    return ""


def _shown(g: Mapping[str, Any]) -> bool:
    """Whether a row has outcome counts to draw: the broker answered it OK, or it is a member's queues nobody
    pulls."""
    return g["answer"] in ("OK", NOT_SUBSCRIBED)


def stacked_bars(title: str, rows: Sequence[tuple[str, str, Sequence[tuple[str, int, str]], dict[str, str] | None]],
                 label_width: int = 360, bar_width: int = 540, css_class: str = "outcomes") -> str:
    """A horizontal stacked-bar chart as inline SVG.

    rows: (label, tooltip for the label, segments [(name, count, colour)], attrs) — a row whose segments are all
    zero but whose attrs carry "note" shows the note instead of a bar. Bars share one scale (the largest total).
    Each segment has a <title> with its name and count, and its count as a label when it is wide enough.
    """
    row_h, gap, top = 24, 8, 4
    scale_max = max((sum(c for _, c, _ in segs) for _, _, segs, _ in rows), default=0) or 1
    width = label_width + bar_width + 90
    height = top + len(rows) * (row_h + gap) + 18
    out = [f'<svg class="chart {esc(css_class)}" xmlns="http://www.w3.org/2000/svg" role="img" '
           f'aria-label="{esc(title)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f"<title>{esc(title)}</title>"]
    for i, (label, tip, segs, attrs) in enumerate(rows):
        y = top + i * (row_h + gap)
        data = "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in (attrs or {}).items() if k != "note")
        total = sum(c for _, c, _ in segs)
        out.append(f'<g class="bar"{data}>')
        out.append(f'<text x="{label_width - 8}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end">'
                   f"<title>{esc(tip)}</title>{esc(_trim(label, 46))}</text>")
        note = (attrs or {}).get("note")
        if note and not total:
            out.append(f'<text class="refused" x="{label_width}" y="{y + row_h / 2 + 4:.1f}">{esc(note)}</text>')
            out.append("</g>")
            continue
        x = float(label_width)
        for name, count, color in segs:
            if not count:
                continue
            w = max(1.0, count / scale_max * bar_width)
            share = count / total if total else 0
            out.append(f'<rect class="seg" data-outcome="{esc(name)}" data-count="{count}" x="{x:.2f}" y="{y}" '
                       f'width="{w:.2f}" height="{row_h}" fill="{color}">'
                       f"<title>{esc(name)}: {num(count)} ({share:.1%})</title></rect>")
            if w >= 9 * len(num(count)) + 6:
                light = ' style="fill:#1d2125"' if _light(color) else ""
                out.append(f'<text class="in"{light} x="{x + w / 2:.2f}" y="{y + row_h / 2 + 4:.1f}" '
                           f'text-anchor="middle" pointer-events="none">{num(count)}</text>')
            x += w
        out.append(f'<text class="muted total" x="{x + 6:.2f}" y="{y + row_h / 2 + 4:.1f}">{num(total)}</text>')
        out.append("</g>")
    out.append(f'<line x1="{label_width}" x2="{label_width}" y1="0" y2="{height - 14}" stroke="#9aa3ad"/>')
    out.append(f'<text class="muted" x="{label_width}" y="{height - 2}">0</text>')
    out.append(f'<text class="muted" x="{label_width + bar_width}" y="{height - 2}" text-anchor="end">'
               f"{num(scale_max)}</text>")
    out.append("</svg>")
    return "".join(out)


def _header(d: Mapping[str, Any]) -> str:
    t = d.get("totals") or {}
    items = [("messages (CommitLog records)", num(t.get("messages"))),
             ("consume-queue units", num(t.get("units"))),
             ("commitlog files", num(t.get("commitlog_files"))),
             ("commitlog bytes", num(t.get("commitlog_bytes"))),
             ("files with damage", num(t.get("damaged_files"))),
             ("subscriptions (pulled)", f"{num(t.get('subscriptions'))} ({num(t.get('pulled'))})"),
             ("decisions", num(t.get("decisions"))),
             ("delivered", num(t.get("delivered"))),
             ("pulls", num(t.get("pulls"))),
             ("broker version", esc(d.get("broker_version") or ""))]
    cells = "".join(f'<div><dt>{esc(k)}</dt><dd data-total="{esc(k)}">{v}</dd></div>' for k, v in items)
    return (f'<h1>Filter replay report — dump <code id="dump-id">{esc(d["dump_id"])}</code></h1>'
            f'<p class="lead">Generated <time id="generated-at">{esc(d.get("generated_at"))}</time> from the Delta '
            f'tables of warehouse <code>{esc(d.get("warehouse"))}</code>. Every consumer group\'s pull replayed '
            f"over the dump as the broker would answer it now (job 2), over the queues and records job 1 read."
            f'</p><dl class="totals" id="totals">{cells}</dl>')


def _outcomes(groups: Sequence[Mapping[str, Any]]) -> str:
    out = ['<h2 id="outcomes">Outcomes per subscription</h2>',
           '<p class="lead">Each bar is one subscription (consumer group, topic, subscription): every consume-queue '
           "unit it scanned, by the filter layer that decided it. Hover a segment for its count. Subscriptions the "
           "broker refused before reading (the pre-read answer) scanned nothing and show the answer instead.</p>",
           legend((o, c, OUTCOME_HELP[o]) for o, _, c in OUTCOMES)]
    topics: dict[str, list[Mapping[str, Any]]] = {}
    for g in groups:
        topics.setdefault(g["topic"], []).append(g)
    for topic, gs in topics.items():
        rows = []
        for g in gs:
            attrs = {"group": g["consumer_group"], "topic": topic, "subscription-index": g["subscription_index"],
                     "answer": g["answer"]}
            if not _shown(g):
                attrs["note"] = f"not pulled: {g['answer']}"
            segs = [(o, int(g.get(col) or 0), c) for o, col, c in OUTCOMES] if _shown(g) else []
            rows.append((group_label(g), f"{g['consumer_group']} on {topic}: {g.get('subscription_type')} "
                         f"{g.get('expression')} ({g.get('path')}, {g.get('source')}{in_force(g)})", segs, attrs))
        out.append(f'<h3>Topic <code>{esc(topic)}</code></h3>')
        out.append(stacked_bars(f"Outcomes of the subscriptions to {topic}", rows))
    headers = [("group", False), ("topic", False), ("subscription", False), ("answer", False),
               ("scanned", True)] + [(o, True) for o, _, _ in OUTCOMES] + [("pulls", True)]
    rows_html, classes = [], []
    for g in groups:
        ok = g["answer"] == "OK"
        sub = f"{g.get('subscription_type')} {g.get('expression')} ({g.get('path')}, {g.get('source')}{in_force(g)})"
        attrs = f' data-group="{esc(g["consumer_group"])}" data-topic="{esc(g["topic"])}"'
        cells = [f"<td{attrs}>{esc(g['consumer_group'])}</td>", _td(g["topic"]), f'<td class="sub">{esc(sub)}</td>',
                 _td(g["answer"]),
                 _td(g.get("units_scanned"), True)]
        cells += [f'<td class="num" data-outcome="{o}">{num(g.get(col) or 0)}</td>' for o, col, _ in OUTCOMES]
        cells.append(_td(g.get("pulls"), True))
        rows_html.append(cells)
        classes.append("" if ok else "refused")
    out.append(table(headers, rows_html, "outcome-table", classes))
    refused = [g for g in groups if not _shown(g)]
    out.append('<h3 id="answers">Subscriptions that did not pull</h3>')
    if not refused:
        out.append('<p class="note">None: the broker answered every subscription OK before reading.</p>')
    else:
        out.append('<p class="note">PullMessageProcessor\'s checks before any read: these consumers would get this '
                   "answer on every pull and no message.</p>")
        out.append(table([("group", False), ("topic", False), ("subscription", False), ("answer", False),
                          ("remark", False), ("cause", False)],
                         [[_td(g["consumer_group"]), _td(g["topic"]),
                           _td(f"{g.get('subscription_type')} {g.get('expression')} ({g.get('path')})"),
                           f'<td class="bad">{esc(g["answer"])}</td>', _td(g.get("answer_remark")),
                           _td(g.get("answer_cause"))] for g in refused], "answer-table"))
    return "".join(out)


def _members(members: Sequence[Mapping[str, Any]]) -> str:
    """The consistency section: per group replayed as its members, what makes them inconsistent, each member's
    outcomes in each possibility (whose subscription the broker keeps) and the member losses per queue."""
    out = ['<h2 id="members">Groups whose members subscribe differently</h2>']
    if not members:
        out.append('<p class="note">No group was replayed as its members (name each subscription\'s '
                   "<code>client_id</code> in the subscriptions file).</p>")
        return "".join(out)
    out.append('<p class="lead">The broker filters every push member\'s pull with the one subscription it keeps '
               "for the group, and each client re-checks tags against its own: a member loses what another "
               "member's subscription drops (FILTERED_BY_OTHER_MEMBER), what its own re-check drops after the "
               "broker passed it (MEMBER_RECHECK_DROP), and a queue allocated to a member that does not subscribe "
               "the topic is never pulled (NEVER_PULLED). Where the input does not say whose subscription the "
               "broker keeps, each possibility is shown.</p>")
    member_outcomes = [(o, col, c) for o, col, c in OUTCOMES]
    for m in members:
        gid = esc(m["group"])
        out.append(f'<h3 class="member-group" data-group="{gid}">Group <code>{gid}</code></h3>')
        findings = [f'<li class="loss">{esc(x)}</li>' for x in m.get("losses") or []]
        findings += [f'<li class="harmless">{esc(x)}</li>' for x in m.get("harmless") or []]
        out.append(f'<ul class="findings">{"".join(findings)}</ul>' if findings else
                   '<p class="note">Its members subscribe alike.</p>')
        rows = []
        for g in m["rows"]:
            attrs = {"group": g["consumer_group"], "member": g["member"], "kept-by": g.get("kept_by") or "",
                     "topic": g["topic"]}
            if not _shown(g):
                attrs["note"] = f"not pulled: {g['answer']}"
            segs = [(o, int(g.get(col) or 0), c) for o, col, c in member_outcomes] if _shown(g) else []
            rows.append((f"{g['topic']} {g['member']} (kept {g.get('kept_by')})", group_label(g), segs, attrs))
        out.append(stacked_bars(f"Outcomes of the members of {m['group']}", rows, css_class="members"))
        if m.get("queues"):
            out.append(table([("topic", False), ("if the broker keeps", False), ("member", False), ("queue", True),
                              ("outcome", False), ("messages", True)],
                             [[_td(q["topic"]), _td(q["kept_by"]), _td(q["member"]),
                               _td(q["queue_id"], isinstance(q["queue_id"], int)),
                               f'<td data-outcome="{esc(q["outcome"])}">{esc(q["outcome"])}</td>',
                               _td(q["count"], True)] for q in m["queues"]], "member-loss-table"))
    return "".join(out)


def _bloom(groups: Sequence[Mapping[str, Any]]) -> str:
    out = ['<h2 id="bloom">Bloom filter: false-positive rate measured against configured</h2>',
           '<p class="lead">For each SQL92 subscription whose pulls tested ext bitmaps: of the units its selector '
           "does not match, the share the bitmap let through anyway (false positives / (false positives + bloom "
           "misses)), against <code>maxErrorRateOfBloomFilter</code>. A false positive costs one SQL evaluation; "
           "a miss saves one.</p>"]
    tested = [g for g in groups if g["answer"] == "OK" and (g.get("bloom_tested") or 0) > 0]
    if not tested:
        out.append('<p class="note">No subscription tested a bloom bitmap (ext or CalcBitMap off, posted '
                   "subscriptions, or tag subscriptions only).</p>")
        return "".join(out)
    label_w, bar_w, row_h, gap = 360, 480, 22, 10
    top_rate = max([g.get("configured_fp_rate") or 0 for g in tested] + [g.get("bloom_fp_rate") or 0 for g in tested])
    scale = max(top_rate, 0.01) * 1.1
    height = 6 + len(tested) * (row_h + gap) + 18
    width = label_w + bar_w + 110
    svg = [f'<svg class="chart bloom" xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" aria-label="Bloom false-positive rates">'
           "<title>Bloom false-positive rate per subscription, measured (bar) against configured (line)</title>"]
    for i, g in enumerate(tested):
        y = 6 + i * (row_h + gap)
        rate, conf = g.get("bloom_fp_rate"), g.get("configured_fp_rate")
        w = 0 if rate is None else max(1.0 if rate else 0.0, rate / scale * bar_w)
        svg.append(f'<g class="bar" data-group="{esc(g["consumer_group"])}" data-topic="{esc(g["topic"])}">')
        svg.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end">{esc(_trim(group_label(g), 46))}</text>')
        svg.append(f'<rect x="{label_w}" y="{y}" width="{bar_w}" height="{row_h}" fill="#f1f3f5"/>')
        svg.append(f'<rect class="measured" x="{label_w}" y="{y + 3}" width="{w:.2f}" height="{row_h - 6}" '
                   f'fill="#3b6fb6"><title>measured {pct(rate, 2)}: {num(g.get("bloom_false_positives"))} false '
                   f"positives, {num(g.get('bloom_miss'))} bloom misses, {num(g.get('bloom_tested'))} bitmaps "
                   f"tested</title></rect>")
        if conf is not None:
            cx = label_w + conf / scale * bar_w
            svg.append(f'<line class="configured" x1="{cx:.2f}" x2="{cx:.2f}" y1="{y - 2}" y2="{y + row_h + 2}" '
                       f'stroke="#b42318" stroke-width="2"><title>configured {pct(conf, 0)}</title></line>')
        svg.append(f'<text x="{label_w + bar_w + 8}" y="{y + 15}">{pct(rate, 2)}'
                   f'<tspan class="muted"> / {pct(conf, 0)}</tspan></text></g>')
    svg.append(f'<text class="muted" x="{label_w}" y="{height - 2}">0%</text><text class="muted" '
               f'x="{label_w + bar_w}" y="{height - 2}" text-anchor="end">{pct(scale, 0)}</text></svg>')
    out.append(legend([("measured false-positive rate", "#3b6fb6", ""),
                       ("configured (maxErrorRateOfBloomFilter)", "#b42318", "")]))
    out.append("".join(svg))
    rows = []
    for g in tested:
        rate, conf = g.get("bloom_fp_rate"), g.get("configured_fp_rate")
        verdict = "" if rate is None or conf is None else (
            '<td class="ok">within</td>' if rate <= conf else '<td class="bad">above</td>')
        rows.append([f'<td data-group="{esc(g["consumer_group"])}">{esc(g["consumer_group"])}</td>', _td(g["topic"]),
                     _td(g.get("expression")), _td(g.get("bloom_tested"), True),
                     _td(g.get("bloom_false_positives"), True), _td(g.get("bloom_miss"), True),
                     f'<td class="num" data-rate="measured">{pct(rate, 2)}</td>',
                     f'<td class="num" data-rate="configured">{pct(conf, 0)}</td>', verdict or "<td></td>"])
    out.append(table([("group", False), ("topic", False), ("selector", False), ("bitmaps tested", True),
                      ("false positives", True), ("bloom misses", True), ("measured", True), ("configured", True),
                      ("", False)], rows, "bloom-table"))
    return "".join(out)


def _collisions(collisions: Sequence[Mapping[str, Any]], untagged: Sequence[Mapping[str, Any]]) -> str:
    out = ['<h2 id="collisions">Top tag-hash collisions</h2>',
           '<p class="lead">Messages that passed the broker\'s 32-bit tag hash check (the consume queue holds only '
           "<code>String.hashCode</code> of the tag) and that the client's exact tag check then dropped: a message "
           "tag with the hash code of a subscribed tag.</p>"]
    if collisions:
        out.append(table([("group", False), ("topic", False), ("subscription", False), ("subscribed tag(s)", False),
                          ("message tag", False), ("hash code", True), ("messages", True)],
                         [[_td(c["consumer_group"]), _td(c["topic"]), _td(c.get("expression")),
                           _td(", ".join(c.get("subscribed_tags") or []) or "?"), _td(c.get("message_tag")),
                           f'<td class="num">{esc(c.get("hash_code"))}</td>', _td(c.get("count"), True)]
                          for c in collisions], "collision-table"))
    else:
        out.append('<p class="note">None found: no message passed the hash check with another tag.</p>')
    if untagged:
        out.append('<p class="note">Also dropped by the client after passing the hash: messages <em>without</em> a '
                   "tag (tags code 0) under a subscription with a tag whose hash code is 0.</p>")
        out.append(table([("group", False), ("topic", False), ("subscription", False), ("messages", True)],
                         [[_td(u["consumer_group"]), _td(u["topic"]), _td(u.get("expression")),
                           _td(u.get("count"), True)] for u in untagged], "untagged-table"))
    return "".join(out)


def _grammar(version: str | None, notes: Sequence[Mapping[str, Any]]) -> str:
    if not notes:
        return ""
    out = ['<h2 id="grammar">Selectors this broker reads otherwise than 5.x</h2>',
           f'<p class="lead">The dump was replayed as broker {esc(version)}, whose SQL92 grammar differs from '
           "5.x's: these subscriptions were filtered as that broker reads them, not as they read on 5.x.</p>"]
    out.append(table([("group", False), ("topic", False), ("selector", False), ("how it reads", False)],
                     [[_td(n["consumer_group"]), _td(n["topic"]), f"<td><code>{esc(n['expression'])}</code></td>",
                       _td(n["note"])] for n in notes], "grammar-table"))
    return "".join(out)


def _sql_errors(errors: Sequence[Mapping[str, Any]]) -> str:
    out = ['<h2 id="sql-errors">SQL92 evaluation errors by class and group</h2>',
           '<p class="lead">Units whose selector threw during evaluation (the broker logs and drops them): the Java '
           "exception class, the cause class when the message names one, and one example message.</p>"]
    if not errors:
        out.append('<p class="note">None: no SQL92 evaluation threw.</p>')
        return "".join(out)
    out.append(table([("exception", False), ("cause", False), ("group", False), ("topic", False), ("units", True),
                      ("example", False)],
                     [[_td(e["error_class"]), _td(e.get("cause_class")), _td(e["consumer_group"]), _td(e["topic"]),
                       _td(e["count"], True), f"<td><code>{esc(_trim(e.get('example') or '', 160))}</code></td>"]
                      for e in errors], "sql-error-table"))
    return "".join(out)


def _bitmap(rows: Sequence[Mapping[str, Any]]) -> str:
    out = ['<h2 id="bitmap">The seeds\' bitmap question, per topic</h2>',
           '<p class="lead">Are bloom bitmaps (ConsumeQueueExt + <code>enableCalcFilterBitMap</code>) worth it here? '
           "<b>Avoided at pull time:</b> units a SQL92 subscription's bloom test rejected (BLOOM_MISS), each of "
           "which would otherwise have been one SQL evaluation. <b>Added at dispatch:</b> CalcBitMap evaluates every "
           "registered SQL92 filter of the topic on every message, so messages of the topic × filters registered on "
           "it (compiled, from <code>consumer_filters</code>). Avoided minus added is what the bitmaps saved "
           "(negative: they cost more evaluations than they saved); each group pulls once per message, so more "
           "consumer groups on the same filters tip the balance.</p>"]
    if not rows:
        out.append('<p class="note">No topic had a SQL92 filter registered or a subscription pulled.</p>')
        return "".join(out)
    chart_rows = []
    for r in rows:
        chart_rows.append((f"{r['topic']} — avoided", "SQL evaluations avoided at pull time (BLOOM_MISS)",
                           [("avoided", int(r["evaluations_avoided"]), "#1b9e77")],
                           {"topic": r["topic"], "kind": "avoided"}))
        chart_rows.append((f"{r['topic']} — added", "SQL evaluations CalcBitMap adds at dispatch",
                           [("added", int(r["evaluations_added"]), "#d95f02")], {"topic": r["topic"], "kind": "added"}))
    out.append(legend([("avoided at pull time", "#1b9e77", ""), ("added at dispatch", "#d95f02", "")]))
    out.append(stacked_bars("SQL evaluations avoided vs added by bloom bitmaps, per topic", chart_rows,
                            css_class="bitmap"))
    table_rows = []
    for r in rows:
        net = int(r["evaluations_avoided"]) - int(r["evaluations_added"])
        by = ", ".join(f"{g} {num(n)}" for g, n in sorted((r.get("avoided_by_group") or {}).items()))
        table_rows.append([f'<td data-topic="{esc(r["topic"])}">{esc(r["topic"])}</td>', _td(r["messages"], True),
                           _td(r["sql_filters"], True), _td(", ".join(r.get("filter_groups") or [])),
                           _td(r["evaluations_added"], True), _td(r["evaluations_avoided"], True), _td(by),
                           f'<td class="num {"ok" if net >= 0 else "bad"}">{"+" if net > 0 else ""}{num(net)}</td>'])
    out.append(table([("topic", False), ("messages", True), ("SQL92 filters", True), ("filters", False),
                      ("added at dispatch", True), ("avoided at pull", True), ("avoided by group", False),
                      ("net saved", True)], table_rows, "bitmap-table"))
    return "".join(out)


def _files(files: Sequence[Mapping[str, Any]]) -> str:
    out = ['<h2 id="files">The dump\'s files: damage and byte accounting</h2>',
           '<p class="lead">Every commitlog file job 1 read: size = decoded + blank filler + zero tail + damaged '
           "bytes, where reading stopped and why.</p>"]
    damaged = [f for f in files if f.get("damage_offset") is not None]
    out.append('<h3 id="damage">Damaged ranges</h3>')
    if damaged:
        out.append(table([("file", False), ("file offset", True), ("global offset", True), ("length", True),
                          ("reason", False)],
                         [[_td(f["path"]), _td(f["damage_offset"], True), _td(f.get("damage_global_offset"), True),
                           _td(f.get("damage_length"), True), _td(f.get("damage_reason"))] for f in damaged],
                         "damage-table"))
    else:
        out.append('<p class="note ok">No damaged range: every file reads cleanly to its end.</p>')
    if not files:
        return "".join(out)
    out.append('<h3 id="accounting">File accounting</h3>')
    out.append(legend((label, c, "") for _, label, c in FILE_PARTS))
    shown = files if len(files) <= 60 else \
        damaged[:30] + [f for f in files if f.get("damage_offset") is None][: 60 - len(damaged[:30])]
    out.append(stacked_bars("Bytes of each commitlog file", [
        (f["path"], f"{f['path']}: {num(f.get('size'))} bytes, end {f.get('end_kind')}",
         [(label, int(f.get(col) or 0), c) for col, label, c in FILE_PARTS], {"path": f["path"]}) for f in shown],
        css_class="files"))
    if len(shown) < len(files):
        out.append(f'<p class="note">{num(len(shown))} of {num(len(files))} files drawn (damaged ones first); the '
                   "table lists all.</p>")
    out.append(table([("file", False), ("size", True), ("records", True), ("decoded", True), ("blank", True),
                      ("zero tail", True), ("damaged", True), ("valid end", True), ("end", False), ("splits", True),
                      ("whole-file fallback", False)],
                     [[_td(f["path"]), _td(f.get("size"), True), _td(f.get("records"), True),
                       _td(f.get("decoded_bytes"), True), _td(f.get("blank_bytes"), True),
                       _td(f.get("zero_tail_bytes"), True), _td(f.get("damaged_bytes"), True),
                       _td(f.get("valid_end"), True), _td(f.get("end_kind")), _td(f.get("splits"), True),
                       _td("yes" if f.get("whole_file_fallback") else "")] for f in files], "file-table"))
    return "".join(out)


def render(data: Mapping[str, Any]) -> str:
    """The whole report page (UTF-8 text)."""
    groups = list(data.get("groups") or [])
    body = [_header(data),
            '<nav><a href="#outcomes">outcomes</a> · <a href="#bloom">bloom</a> · <a href="#collisions">tag '
            'collisions</a> · <a href="#sql-errors">SQL errors</a> · <a href="#bitmap">bitmap question</a> · '
            '<a href="#files">files</a> · <a href="#members">group members</a></nav>',
            _outcomes(groups), _members(data.get("members") or []), _bloom(groups),
            _collisions(data.get("collisions") or [], data.get("untagged") or []),
            _grammar(data.get("broker_version"), data.get("grammar") or []),
            _sql_errors(data.get("sql_errors") or []), _bitmap(data.get("bitmap") or []),
            _files(data.get("files") or []),
            f"<footer>rocketmq-filter-replay · <code>python -m jobs.report</code> · dump {esc(data['dump_id'])} · "
            f"{esc(data.get('generated_at'))}</footer>"]
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>Filter replay report — {esc(data['dump_id'])}</title><style>{CSS}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")
