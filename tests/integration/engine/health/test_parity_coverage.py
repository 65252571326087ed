"""Parity uses coverage: a partition the source lost is checked against the landing zone, or not verifiable.

Never failed because the source was truncated; still failed when the target itself lost rows.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from chmv_assets import demo_data
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.health.parity import parity_for_partition, parity_for_partitions

from support.engines import make_engine
from support.retention import AUGUST, EVENTS_AGG, RETENTION, SEPTEMBER
from support.spark import with_landing


def test_a_month_the_source_lost_without_a_lake_is_not_verifiable_not_failed(tmp_path, example):
    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    with engine.get_client() as client:
        client.command(RETENTION["drop_partition"])
        august = parity_for_partition(client, example, EVENTS_AGG, AUGUST)
        september = parity_for_partition(client, example, EVENTS_AGG, SEPTEMBER)
        together = parity_for_partitions(client, example, EVENTS_AGG, [AUGUST, SEPTEMBER])
    assert [(r.unverifiable, r.measures, r.truth) for r in together] == [
        (r.unverifiable, r.measures, r.truth) for r in (august, september)
    ]
    assert august.passed and august.unverifiable and not august.measures
    assert august.describe().startswith(
        "analytics.events_agg partition 2026-08-01: not verifiable: the source no "
        "longer holds it (analytics.raw_events holds no rows of the window"
    )
    assert (
        "and the landing zone does not either (no landing zone is configured); the rebuild would refuse it too"
        in august.describe()
    )
    assert september.passed and september.truth == "source" and september.expected > 0 and not september.unverifiable


@pytest.fixture
def lake_backed(tmp_path, example):
    """raw_events of 2026-08-01 .. 2026-09-09 in the landing zone (with its duplicates) and, deduplicated, in the
    source; then the source's August partition is dropped by a retention job."""
    root = tmp_path / "landing"
    loaded = with_landing(example, root)
    source = "analytics.raw_events"
    demo_data.write_landing_zone(root, {source: demo_data.generate(source, 20_000, days=40, seed=5)}, seed=5)
    engine = make_engine(tmp_path / "chdb", loaded)
    with engine.get_client() as client:
        demo_data.load_into_clickhouse(
            client, {source: demo_data.generate(source, 20_000, days=40, seed=5, duplicates=0.0)}
        )
        client.command(RETENTION["drop_partition"])
    return loaded, engine


def test_a_lake_backed_month_is_checked_against_the_lake(lake_backed):
    loaded, engine = lake_backed
    with engine.get_client() as client:
        result = parity_for_partition(client, loaded, EVENTS_AGG, AUGUST)
        together = parity_for_partitions(client, loaded, EVENTS_AGG, [AUGUST, SEPTEMBER])
    assert [r.truth for r in together] == ["landing zone", "source"] and all(r.passed for r in together)
    assert together[0].measures == result.measures
    assert result.passed and result.truth == "landing zone" and result.expected > 0, result.describe()
    assert result.expected == result.actual and result.describe().endswith(", against the landing zone)")
    assert result.notes[0].startswith("the source no longer holds it (analytics.raw_events holds no rows of the window")
    assert "analytics.raw_events: " in result.notes[1] and "landing files (rows all of them)" in result.notes[1]
    assert "file(" in result.sql and "LIMIT 1 BY" in result.sql


def test_a_gap_in_a_lake_backed_month_still_fails(lake_backed):
    loaded, engine = lake_backed
    with engine.get_client() as client:
        client.command(
            "ALTER TABLE analytics.events_agg DELETE WHERE event_date = '2026-08-05'", settings={"mutations_sync": 2}
        )
        result = parity_for_partition(client, loaded, EVENTS_AGG, AUGUST)
        day = parity_for_partition(client, loaded, EVENTS_AGG, window_at(datetime(2026, 9, 1), "month"))
    assert not result.passed and result.truth == "landing zone" and result.actual < result.expected
    assert "MISMATCH" in result.describe()
    assert day.passed and day.truth == "source"
