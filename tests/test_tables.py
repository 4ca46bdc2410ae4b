"""The one vocabulary and the one table module against everything that repeats them: docs/ column tables, the
headings' keys, job 2's task outputs, the report's legend. No Spark."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from filterlib import tables, vocabulary
from filterlib.replay.rows import DECISIONS_SCHEMA, PULLS_SCHEMA
from jobs.report_html import OUTCOME_HELP, OUTCOMES
from jobs.schemas import spark_ddl, table_ddl

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("doc", sorted(tables.DOCS))
def test_docs_column_tables_are_the_modules(doc):
    """Every column table in docs/ is what filterlib.tables makes (rewrite with `python -m filterlib.tables`)."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert tables.documented(text) == [t.name for t in tables.DOCS[doc]]
    assert text == tables.render_docs(text), f"{doc} disagrees with filterlib/tables.py: run python -m filterlib.tables"


@pytest.mark.parametrize("doc", sorted(tables.DOCS))
def test_docs_headings_name_each_tables_key(doc):
    """Each table's heading in docs/ gives its key as the module does."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    for t in tables.DOCS[doc]:
        heading = re.search(rf"^### {t.name} — .*$", text, re.M)
        assert heading, t.name
        key = re.search(r"key \(([^)]*)\)", heading[0])
        assert (tuple(key[1].split(", ")) if key else ()) == t.key, heading[0]


def test_render_docs_replaces_a_stale_block():
    """A block that no longer matches is rewritten whole, the text around it kept."""
    stale = "before\n<!-- columns: dumps -->\n| old |\n<!-- end columns -->\nafter\n"
    assert tables.render_docs(stale) == f"before\n<!-- columns: dumps -->\n{tables.DUMPS.markdown()}\n" \
                                        "<!-- end columns -->\nafter\n"


def test_every_table_is_keyed_and_described():
    """Keys name existing columns, dump_id first; no column twice; every column has a meaning."""
    for t in tables.TABLES.values():
        assert t.names[0] == "dump_id" and t.key[:1] in ((), ("dump_id",)), t.name
        assert set(t.key) <= set(t.names) and len(set(t.names)) == len(t.names), t.name
        assert all(c.doc.strip() for c in t.columns), t.name


def test_described_refuses_a_column_without_meaning():
    """A producer's schema and the meanings must name the same columns in the same order."""
    with pytest.raises(ValueError):
        tables.described(tables.DUMPS.arrow(), {"dump_id": "x"})


def test_job2_tables_agree_with_the_replay_outputs():
    """pull_decisions and pulls hold the replay's columns with the replay's types (filter_bitmap → bloom_bitmap)."""
    decisions = {f.name.replace("filter_bitmap", "bloom_bitmap"): f.type for f in DECISIONS_SCHEMA}
    pulls = {f.name: f.type for f in PULLS_SCHEMA}
    for table, out in ((tables.PULL_DECISIONS, decisions), (tables.PULLS, pulls)):
        shared = [c for c in table.columns if c.name in out]
        assert len(shared) >= len(out) - 1  # all but `plan`
        assert all(c.type == out[c.name] for c in shared), table.name


def test_spark_ddl_of_a_table():
    """The DDL names every column in order, quoted, with its Spark type."""
    assert table_ddl(tables.DUMPS).startswith("`dump_id` string, `store` string")
    assert spark_ddl(tables.CONSUMER_FILTERS.arrow()).count("`") == 2 * len(tables.CONSUMER_FILTERS.columns)
    assert "`bloom_bit_pos` array<int>" in table_ddl(tables.CONSUMER_FILTERS)


def test_outcomes_read_the_vocabulary():
    """group_stats has a count column per outcome, and the report shows every outcome once with its words."""
    stats = tables.GROUP_STATS.names
    assert [o.column for o in vocabulary.OUTCOMES] == [n for n in stats if n in vocabulary.OUTCOME_COLUMNS.values()]
    assert sorted(o for o, _, _ in OUTCOMES) == sorted(vocabulary.OUTCOME_NAMES)
    assert set(OUTCOME_HELP) == set(vocabulary.OUTCOME_NAMES)
    assert len({c for _, _, c in OUTCOMES}) == len(OUTCOMES)


def test_branches_belong_to_layers():
    """Every branch names a known layer; the reason codes are the distinct branch names."""
    assert {b.layer for b in vocabulary.BRANCHES} == set(vocabulary.LAYERS)
    assert set(vocabulary.REASONS) == {b.name for b in vocabulary.BRANCHES}
    assert set(vocabulary.DECODE_BRANCHES) <= set(vocabulary.words(vocabulary.CLIENT))


def test_job2_compact_tables_agree_with_the_replay_outputs():
    """The matrix, details and codes tables hold the replay's compact columns with its types."""
    from filterlib.replay.matrix import CODES_SCHEMA, DETAILS_SCHEMA, MATRIX_SCHEMA

    assert tables.DECISION_MATRIX.arrow(drop=("dump_id", "topic", "queue_id", "copy")) == MATRIX_SCHEMA
    details = {f.name.replace("plan", "subscription_index"): f.type for f in DETAILS_SCHEMA}
    assert {c.name: c.type for c in tables.DECISION_DETAILS.columns if c.name in details} == details
    assert tables.DECISION_CODES.arrow(drop=("dump_id",)) == CODES_SCHEMA
    assert "subscription_position" in tables.GROUP_STATS.names
