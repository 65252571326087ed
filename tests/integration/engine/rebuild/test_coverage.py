"""Coverage on the embedded engine: sources that lost old rows (TTL, DROP PARTITION, DELETE) never cost target rows.

A plain backfill of a partition whose source rows are gone is refused before anything changes, with the
source, how far back it holds data and what to do; ``force`` overrides. The shrink guard stops a swap that
would lose rows where coverage cannot tell, leaving the live data and no shadow behind.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.health.parity import parity_for_partition
from chmv_assets.engine.rebuild.coverage import Holding, observe_coverage, probe
from chmv_assets.engine.rebuild.executor import plan_for, rebuild_partitions
from chmv_assets.engine.rebuild.planner import Engine
from chmv_assets.errors import RebuildRefused, ShrinkRefused

from support.engines import make_engine
from support.retention import (
    AUGUST,
    EVENTS_AGG,
    EVENTS_DAILY,
    RAW_EVENTS,
    RETENTION,
    SEPTEMBER,
    count,
    raw_events_ttl_project,
)
from support.spark import digest

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
    # the table, its windows, its deletes (mutations, patch parts), the target's windows: one statement
    assert facts.sql.count("SELECT") == 1 + 1 + 2 + 1
    for window in days[1:]:
        stats = facts.source_window(ObjectRef(database="analytics", name="api_requests"), window.start)
        assert (stats.rows, stats.oldest, stats.newest) == truth[window.wall_start]
        assert facts.target_window(window.start).rows == target_rows[window.wall_start]
    assert facts.source_window(ObjectRef(database="analytics", name="api_requests"), days[0].start).rows == 0
    assert [w.sources[0].table.holding for w in coverage.windows] == [Holding.NONE, Holding.PARTLY, Holding.ENTIRELY]
    # the DELETE was created after every window's start: it may have touched the third too (its predicate is not read)
    assert coverage.windows[2].deletions.startswith("analytics.api_requests lists 1 DELETE mutation(s), the newest ")
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


LEDGER_DDL = """
CREATE DATABASE IF NOT EXISTS ledger ENGINE = Atomic;
CREATE TABLE ledger.sales (ts DateTime, amount UInt32) ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY ts;
CREATE TABLE ledger.sales_monthly (ts DateTime, amount UInt32) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE MATERIALIZED VIEW ledger.sales_monthly_mv TO ledger.sales_monthly AS SELECT ts, amount FROM ledger.sales;
CREATE TABLE ledger.orders (ts DateTime, amount UInt32) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE ledger.daily_totals (day Date, orders UInt64, amount UInt64) ENGINE = SummingMergeTree ORDER BY day;
CREATE MATERIALIZED VIEW ledger.daily_totals_mv TO ledger.daily_totals AS
SELECT toDate(ts) AS day, count() AS orders, sum(amount) AS amount FROM ledger.orders GROUP BY day
"""
SALES, MONTHLY = ObjectRef(database="ledger", name="sales"), ObjectRef(database="ledger", name="sales_monthly")
DAILY_TOTALS = ObjectRef(database="ledger", name="daily_totals")
SEPTEMBER_2025 = window_at(datetime(2025, 9, 1), "month")


@pytest.fixture
def ledger(tmp_path):
    """An engine with a daily-partitioned source copied into a monthly target, and a source summed per day into an
    unpartitioned SummingMergeTree; empty."""
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "ledger.sql").write_text(LEDGER_DDL)
    loaded = load(ddl, default_database="ledger", partition_start="2025-01-01")
    return loaded, make_engine(tmp_path / "chdb", loaded)


def _totals(client, table: str) -> tuple[int, int, int]:
    return tuple(client.query(f"SELECT count(), sum(orders), sum(amount) FROM {table}").result_rows[0])


def test_the_shrink_guard_compares_totals_not_only_keys(ledger):
    """Issue 25 (5): 90 % of every day of August deleted from the source keeps the 31 keys of an unpartitioned
    SummingMergeTree; the guarded rebuild would cut its totals by 90 %: refused, naming the columns and both totals,
    the live table unchanged; force goes through."""
    loaded, engine = ledger
    with engine.get_client() as client:
        client.command(
            "INSERT INTO ledger.orders SELECT toDateTime('2025-08-01 00:00:00') + number * 600, number % 10 + 1 "
            "FROM numbers(31 * 144)"
        )
        before = _totals(client, "ledger.daily_totals FINAL")
        assert before == (31, 31 * 144, 24_540)  # 31 keys, one per day; amounts 1…10 in turn
        client.command("ALTER TABLE ledger.orders DELETE WHERE amount > 1", settings={"mutations_sync": 2})
        kept = int(client.command("SELECT count() FROM ledger.orders"))
        assert int(client.command("SELECT uniqExact(toDate(ts)) FROM ledger.orders")) == 31  # every day keeps rows
    with pytest.raises(ShrinkRefused) as stopped:
        rebuild_partitions(engine, loaded, DAILY_TOTALS, [None])
    message = str(stopped.value)
    assert message.startswith(
        "ledger.daily_totals whole table: the rebuild would shrink the live partition's totals (31 rows on both "
        f"sides): sum(orders): {before[1]:,} → {kept:,}; sum(amount): {before[2]:,} → {kept:,} (live → rebuilt). "
        "Coverage does not vouch for every row of it ("
    ), message
    assert "ledger.orders lists 1 DELETE mutation(s)" in message
    assert "Nothing was swapped; the live partition is unchanged." in message
    with engine.get_client() as client:
        assert _totals(client, "ledger.daily_totals FINAL") == before and int(client.command(SHADOWS)) == 0
    rebuild_partitions(engine, loaded, DAILY_TOTALS, [None], force=True)
    with engine.get_client() as client:
        assert _totals(client, "ledger.daily_totals FINAL") == (31, kept, kept)


@pytest.mark.parametrize(
    "loss",
    [
        "DELETE FROM ledger.sales WHERE amount % 2 = 0",  # half of every day, lightweight
        "ALTER TABLE ledger.sales DELETE WHERE toHour(ts) = 3",  # one hour of every day
    ],
    ids=["half-of-every-day", "one-hour-of-every-day"],
)
def test_rows_deleted_inside_every_day_guard_the_month_and_parity_does_not_call_it_fixable(ledger, loss):
    """Issue 25 (6): ten days of September in a daily-partitioned source, 4,320 rows in the monthly target. Before
    any DELETE, the month doubled is repaired (a correction: no guard). After a DELETE inside every day, every day
    still has rows, so the source spans the month and no day is a hole; the DELETE the server lists makes the rebuild
    shrink-guarded: refused, 4,320 rows stay; parity says not verifiable, not a mismatch a rebuild would fix."""
    loaded, engine = ledger
    month = "toYYYYMM(ts) = 202509"
    with engine.get_client() as client:
        client.command(
            "INSERT INTO ledger.sales SELECT toDateTime('2025-09-01 00:00:00') + number * 200, number % 10 + 1 "
            "FROM numbers(10 * 432)"
        )
        client.command(f"INSERT INTO ledger.sales_monthly SELECT * FROM ledger.sales_monthly WHERE {month}")
        assert count(client, MONTHLY, month) == 2 * 4_320
    plan, _ = rebuild_partitions(engine, loaded, MONTHLY, [SEPTEMBER_2025])  # source intact, no DELETE
    assert plan.steps[0].guard is None
    with engine.get_client() as client:
        assert count(client, MONTHLY, month) == 4_320
        client.command(loss, settings={"mutations_sync": 2})
        left = count(client, SALES)
        assert left < 4_320 and int(client.command("SELECT uniqExact(toDate(ts)) FROM ledger.sales")) == 10
    plan = plan_for(engine, loaded, MONTHLY, [SEPTEMBER_2025])
    assert plan.steps[0].engine == Engine.CLICKHOUSE and "DELETE mutation(s)" in (plan.steps[0].guard or "")
    with pytest.raises(ShrinkRefused, match=f"partition 2025-09-01: the rebuild would leave {left:,} rows where the "):
        rebuild_partitions(engine, loaded, MONTHLY, [SEPTEMBER_2025])
    with engine.get_client() as client:
        assert count(client, MONTHLY, month) == 4_320 and int(client.command(SHADOWS)) == 0
        result = parity_for_partition(client, loaded, MONTHLY, SEPTEMBER_2025)
    assert result.passed and result.unverifiable, result.describe()
    assert f"the target holds more than its source yields (rows: expected {left}, actual 4320)" in result.unverifiable
    assert "may have lost rows of it (ledger.sales lists 1 DELETE mutation(s)" in result.unverifiable
