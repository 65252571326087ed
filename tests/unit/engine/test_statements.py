"""Statements are accountable: a deterministic query_id each, and the SQL that settles a killed run's orphans."""

from __future__ import annotations

from chmv_assets.engine.statements import kill_sql, statement_id


def test_a_statement_id_is_the_same_for_the_same_step_on_every_host():
    one = statement_id("ingest", "analytics.raw_events", "batch-7")
    assert one == statement_id("ingest", "analytics.raw_events", "batch-7")
    assert one.startswith("chmv-ingest-") and len(one) == len("chmv-ingest-") + 16
    assert one != statement_id("ingest", "analytics.raw_events", "batch-8")
    assert statement_id("a", "b|c") != statement_id("a", "b", "c")


def test_orphans_are_killed_by_their_ids():
    assert kill_sql(["chmv-x-2", "chmv-x-1", "it's"]) == (
        "KILL QUERY WHERE query_id IN ('chmv-x-1', 'chmv-x-2', 'it\\'s') SYNC"
    )
