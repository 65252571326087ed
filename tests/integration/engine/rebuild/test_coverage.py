"""Coverage on the embedded engine: sources that lost old rows (TTL, DROP PARTITION, DELETE) never cost target rows.

A plain backfill of a partition whose source rows are gone is refused before anything changes, with the
source, how far back it holds data and what to do; ``force`` overrides. The shrink guard stops a swap that
would lose rows where coverage cannot tell, leaving the live data and no shadow behind.
"""

from __future__ import annotations

import pytest
from conftest import make_engine
from retention_testing import (
    AUGUST,
    EVENTS_AGG,
    EVENTS_DAILY,
    RAW_EVENTS,
    RETENTION,
    SEPTEMBER,
    count,
    raw_events_ttl_project,
)
from spark_testing import digest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.rebuild.coverage import Holding, observe_coverage, probe
from chmv_assets.engine.rebuild.executor import plan_for, rebuild_partitions
from chmv_assets.engine.rebuild.planner import Engine
from chmv_assets.errors import RebuildRefused, ShrinkRefused

pytestmark = pytest.mark.worker_seconds(50)

AUG_WHERE = "toYYYYMM(event_date) = 202608"
SHADOWS = "SELECT count() FROM system.tables WHERE name LIKE '\\_chmv\\_shadow%'"


@pytest.fixture(params=list(RETENTION), ids=list(RETENTION))
def retained(request, tmp_path, example):
    """An engine with ~50k demo rows whose analytics.raw_events then lost (some of) August, by each way."""
    loaded = raw_events_ttl_project(tmp_path) if request.param == "ttl" else example
    engine = make_engine(tmp_path / "chdb", loaded, rows=50_000)
    with engine.get_client() as client:
        before = digest(client, loaded, EVENTS_AGG, AUG_WHERE)
        september = digest(client, loaded, EVENTS_AGG, "toYYYYMM(event_date) = 202609")
        client.command(RETENTION[request.param], settings={"mutations_sync": 2})
        assert count(client, RAW_EVENTS, "timestamp < '2026-08-09'") == 0  # the source lost those rows
    return request.param, loaded, engine, before, september


def test_a_plain_backfill_of_a_month_the_source_lost_is_refused_and_keeps_the_target(retained):
    kind, loaded, engine, before, _ = retained
    with pytest.raises(RebuildRefused) as refused:
        rebuild_partitions(engine, loaded, EVENTS_AGG, [AUGUST])
    message = str(refused.value)
    assert message.startswith(
        "analytics.events_agg: rebuild refused for 1 partition; nothing was changed\n"
        "- 2026-08-01: neither the source table nor the landing zone holds it: "
        "analytics.raw_events (it holds data from 2026-"
    )
    expected = {
        "drop_partition": "source table: none: analytics.raw_events holds no rows of the window while the "
        "target partition holds",
        "ttl": "source table: partly: analytics.raw_events: its TTL timestamp + INTERVAL",
        "delete": "source table: partly: analytics.raw_events holds the window from 2026-08-10",
        "lightweight_delete": "source table: partly: analytics.raw_events holds the window from 2026-08-10",
    }
    assert expected[kind] in message
    with engine.get_client() as client:
        rows = count(client, EVENTS_AGG, AUG_WHERE)
    assert f"The target partition holds {rows:,} rows, which a rebuild from the source would lose." in message
    assert "landing zone: unknown: no landing zone is configured" in message and "To proceed: deliver" in message
    with engine.get_client() as client:
        assert digest(client, loaded, EVENTS_AGG, AUG_WHERE) == before
        assert int(client.command(SHADOWS)) == 0


def test_partitions_the_source_still_holds_and_the_chain_below_rebuild_as_usual(retained):
    _, loaded, engine, _, september = retained
    _plan, results = rebuild_partitions(engine, loaded, EVENTS_AGG, [SEPTEMBER])
    assert [(r.engine, r.method) for r in results] == [("clickhouse", "replace")]
    # events_daily reads events_agg, which still holds August: its August days rebuild from it.
    day = window_at(AUGUST.start.replace(day=5), "day")
    plan = plan_for(engine, loaded, EVENTS_DAILY, [day])
    assert plan.steps[0].engine == Engine.CLICKHOUSE and plan.steps[0].guard is None
    with engine.get_client() as client:
        assert digest(client, loaded, EVENTS_AGG, "toYYYYMM(event_date) = 202609") == september


def test_force_rebuilds_from_what_the_source_holds(retained):
    kind, loaded, engine, _, _ = retained
    with engine.get_client() as client:
        live = count(client, EVENTS_AGG, AUG_WHERE)
    plan, results = rebuild_partitions(engine, loaded, EVENTS_AGG, [AUGUST], force=True)
    assert plan.force and plan.steps[0].reason.startswith("forced: ")
    with engine.get_client() as client:
        kept = count(client, EVENTS_AGG, AUG_WHERE)
    assert kept == results[0].rows_written < live
    assert (kept == 0) == (kind == "drop_partition")


def test_coverage_is_one_statement_that_matches_the_tables(fresh_engine, example):
    days = [window_at(AUGUST.start.replace(day=d), "day") for d in (1, 2, 3)]
    target = ObjectRef(database="analytics", name="hourly_endpoint_stats")
    with fresh_engine.get_client() as client:
        client.command(
            "ALTER TABLE analytics.api_requests DELETE WHERE timestamp < '2026-08-02 10:00:00'",
            settings={"mutations_sync": 2},
        )
        facts = probe(client, example, target, target, days)
        truth = {
            r[0]: tuple(r[1:])
            for r in client.query(
                "SELECT toStartOfDay(timestamp), count(), min(timestamp), max(timestamp) FROM analytics.api_requests "
                "WHERE timestamp < '2026-08-04' GROUP BY 1"
            ).result_rows
        }
        target_rows = {
            r[0]: r[1]
            for r in client.query(
                "SELECT toStartOfDay(hour), count() FROM analytics.hourly_endpoint_stats WHERE hour < '2026-08-04' "
                "GROUP BY 1"
            ).result_rows
        }
        coverage = observe_coverage(client, example, target, target, days, None)
    assert facts.sql.count("SELECT") == 1 + 1 + 1  # the table, its windows, the target's windows: one statement
    for window in days[1:]:
        stats = facts.source_window(ObjectRef(database="analytics", name="api_requests"), window.start)
        assert (stats.rows, stats.oldest, stats.newest) == truth[window.wall_start]
        assert facts.target_window(window.start).rows == target_rows[window.wall_start]
    assert facts.source_window(ObjectRef(database="analytics", name="api_requests"), days[0].start).rows == 0
    assert [w.sources[0].table.holding for w in coverage.windows] == [Holding.NONE, Holding.PARTLY, Holding.ENTIRELY]
    assert coverage.queries == 1


def test_the_shrink_guard_stops_an_unpartitioned_swap_that_would_lose_rows(fresh_engine, example):
    """Coverage of an unpartitioned target is unknown: a rebuild that would shrink it is stopped before the swap."""
    latest = ObjectRef(database="analytics", name="entity_latest")
    with fresh_engine.get_client() as client:
        client.command(
            "ALTER TABLE analytics.raw_webhooks DELETE WHERE received_at < '2026-09-01 00:00:00'",
            settings={"mutations_sync": 2},
        )
        live = int(client.command("SELECT count() FROM analytics.entity_latest FINAL"))
        rebuilt = int(client.command("SELECT uniqExact(entity_id) FROM analytics.raw_webhooks"))
        before = digest(client, example, latest)
    assert rebuilt < live
    with pytest.raises(ShrinkRefused) as stopped:
        rebuild_partitions(fresh_engine, example, latest, [None])
    assert str(stopped.value).startswith(
        f"analytics.entity_latest whole table: the rebuild would leave {rebuilt:,} rows where the live partition "
        f"holds {live:,}: {live - rebuilt:,} rows would go. Coverage does not vouch for every row of it "
        "(an unpartitioned target or a partition of a key alone (no time window): whether the table still holds every "
        "row it ever received is not observable"
    )
    assert "Nothing was swapped; the live partition is unchanged. To proceed:" in str(stopped.value)
    with fresh_engine.get_client() as client:
        assert digest(client, example, latest) == before and int(client.command(SHADOWS)) == 0
    _plan, results = rebuild_partitions(fresh_engine, example, latest, [None], force=True)
    assert results[0].method == "replace"
    with fresh_engine.get_client() as client:
        assert int(client.command("SELECT count() FROM analytics.entity_latest FINAL")) == rebuilt


def test_the_shrink_guard_on_a_partition_whose_coverage_is_unknown(tmp_path):
    """A TTL chmv cannot read makes coverage unknown; a hole deleted mid-month would shrink August: stopped."""
    loaded = raw_events_ttl_project(tmp_path, "TTL timestamp + INTERVAL 1 YEAR + INTERVAL 1 DAY")
    engine = make_engine(tmp_path / "chdb", loaded, rows=50_000)
    with engine.get_client() as client:
        client.command(
            "ALTER TABLE analytics.raw_events DELETE WHERE timestamp >= '2026-08-10' AND timestamp < '2026-08-12'",
            settings={"mutations_sync": 2},
        )
        before = digest(client, loaded, EVENTS_AGG, AUG_WHERE)
    plan = plan_for(engine, loaded, EVENTS_AGG, [AUGUST])
    assert plan.steps[0].engine == Engine.CLICKHOUSE and "cannot read as a time horizon" in plan.steps[0].guard
    with pytest.raises(ShrinkRefused, match=r"analytics\.events_agg partition 2026-08-01: the rebuild would leave "):
        rebuild_partitions(engine, loaded, EVENTS_AGG, [AUGUST])
    with engine.get_client() as client:
        assert digest(client, loaded, EVENTS_AGG, AUG_WHERE) == before


def test_a_hole_inside_a_month_is_partly_held_refused_without_a_lake_and_read_from_it_with_one(tmp_path, example):
    """Six days deleted in the middle of August: the month's first and last rows are still in the source, but the
    days in between are not; a plain backfill of the month is refused (never shrunk), or reads the landing zone."""
    from chmv_assets import demo_data

    engine = make_engine(tmp_path / "chdb", example, rows=50_000)
    with engine.get_client() as client:
        before = digest(client, example, EVENTS_AGG, AUG_WHERE)
        client.command("DELETE FROM analytics.raw_events WHERE timestamp >= '2026-08-10' AND timestamp < '2026-08-16'")
        assert count(client, RAW_EVENTS, "toYYYYMM(timestamp) = 202608") > 0  # the month's edges are still there
        coverage = observe_coverage(client, example, EVENTS_AGG, EVENTS_AGG, [AUGUST], None)
    (source,) = coverage.windows[0].sources
    assert source.table.holding == Holding.PARTLY
    assert "holds no rows of 2026-08-10 … 2026-08-15 (6 days) inside the window" in source.table.reason
    with pytest.raises(RebuildRefused, match="holds no rows of 2026-08-10 … 2026-08-15 \\(6 days\\)"):
        rebuild_partitions(engine, example, EVENTS_AGG, [AUGUST])
    with engine.get_client() as client:
        assert digest(client, example, EVENTS_AGG, AUG_WHERE) == before and int(client.command(SHADOWS)) == 0
    lake = tmp_path / "landing"
    demo_data.write_landing_zone(lake, demo_data.generate_all(50_000))  # the lake still holds every day
    plan = plan_for(engine, example, EVENTS_AGG, [AUGUST], root=lake)
    assert plan.steps[0].engine == Engine.SPARK, plan.describe()
    # a month without a hole, and a daily target of the same chain, keep reading the source
    assert plan_for(engine, example, EVENTS_AGG, [SEPTEMBER]).steps[0].engine == Engine.CLICKHOUSE
