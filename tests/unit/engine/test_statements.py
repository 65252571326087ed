"""Statements are accountable: a deterministic query_id each."""

from __future__ import annotations

from chmv_assets.engine.statements import statement_id


def test_a_statement_id_is_the_same_for_the_same_step_on_every_host():
    one = statement_id("ingest", "analytics.raw_events", "batch-7")
    assert one == statement_id("ingest", "analytics.raw_events", "batch-7")
    assert one.startswith("chmv-ingest-") and len(one) == len("chmv-ingest-") + 16
    assert one != statement_id("ingest", "analytics.raw_events", "batch-8")
    assert statement_id("a", "b|c") != statement_id("a", "b", "c")
