"""Partition rebuilds on a real embedded ClickHouse, checked against independent recomputes.

Each expected result below is written by hand over the raw source table (finalized aggregates, not
the MV's SQL), and each rebuilt partition must equal it, twice (idempotent), with the neighbouring
partitions untouched.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import PartitionWindow
from chmv_assets.engine.catalog import live_table
from chmv_assets.engine.clock import session_zone
from chmv_assets.engine.rebuild.planner import plan_from_source
from chmv_assets.engine.rebuild.steps import rebuild, run_steps
from chmv_assets.errors import ChmvError, ShrinkRefused
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

from support.engines import make_engine

pytestmark = pytest.mark.worker_seconds(40)


def ref(name: str, database: str = "analytics") -> ObjectRef:
    return ObjectRef(database=database, name=name)


def window(loaded, target: ObjectRef, key: str) -> PartitionWindow:
    """The window Dagster hands the asset for ``key`` (the same partitions definition the asset uses)."""
    tw = ChmvTranslator().get_partitions_def(loaded, target).time_window_for_partition_key(key)
    return PartitionWindow(key=key, start=tw.start, end=tw.end)


def rows(client, sql: str, **parameters) -> list[tuple]:
    return [tuple(r) for r in client.query(sql, parameters=parameters).result_rows]


@pytest.fixture(scope="module")
def engine(tmp_path_factory, example) -> ClickHouseResource:
    """One engine for the per-target tests: each test corrupts one target and leaves it rebuilt (correct)."""
    return make_engine(tmp_path_factory.mktemp("rebuild") / "chdb", example, rows=100_000)


# Per target: (hand-written finalized read of the target partition, independent recompute over the source).
# Both take {lo:DateTime} / {hi:DateTime}, the partition's window; results are compared as sorted row lists.
DAY = "toDate(hour) >= toDate({lo:DateTime}) AND toDate(hour) < toDate({hi:DateTime})"
RECOMPUTE = {
    "hourly_endpoint_stats": (
        f"""SELECT hour, endpoint, sumMerge(request_count), uniqMerge(unique_users),
                   round(quantileMerge(0.99)(p99_response), 6)
            FROM analytics.hourly_endpoint_stats WHERE {DAY} GROUP BY hour, endpoint ORDER BY hour, endpoint""",
        """SELECT toStartOfHour(timestamp) AS h, endpoint, count(), uniq(user_id), round(quantile(0.99)(response_time_ms), 6)
           FROM analytics.api_requests WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime}
           GROUP BY h, endpoint ORDER BY h, endpoint""",
    ),
    "requests_enriched": (
        """SELECT * FROM analytics.requests_enriched WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime}
           ORDER BY request_id, timestamp""",
        """SELECT timestamp, toStartOfHour(timestamp), request_id, user_id, response_time_ms,
                  if(response_time_ms > 1000, 'slow', if(response_time_ms > 200, 'normal', 'fast')),
                  if(status_code >= 500, 'server_error', if(status_code >= 400, 'client_error', 'success')),
                  if(startsWith(path, '/api/v'), splitByChar('/', path)[3], '')
           FROM analytics.raw_requests WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime}
           ORDER BY request_id, timestamp""",
    ),
    "error_events": (
        "SELECT * FROM analytics.error_events WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime} ORDER BY ALL",
        """SELECT timestamp, level, payload FROM analytics.all_events
           WHERE level = 'error' AND timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime} ORDER BY ALL""",
    ),
    "metric_events": (
        "SELECT * FROM analytics.metric_events WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime} ORDER BY ALL",
        """SELECT timestamp, payload FROM analytics.all_events
           WHERE event_type = 'metric' AND timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime} ORDER BY ALL""",
    ),
    "audit_log": (
        "SELECT * FROM analytics.audit_log WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime} ORDER BY ALL",
        """SELECT timestamp, payload FROM analytics.all_events
           WHERE is_audit = 1 AND timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime} ORDER BY ALL""",
    ),
    "counter_daily": (
        """SELECT device, day, sum(count), maxMerge(max_value_state), minMerge(min_value_state),
                  round(avgMerge(avg_value_state), 4)
           FROM analytics.counter_daily WHERE day >= {lo:DateTime} AND day < {hi:DateTime}
           GROUP BY device, day ORDER BY device, day""",
        """SELECT device, toStartOfDay(`when`) AS d, count(), max(value), min(value), round(avg(value), 4)
           FROM analytics.counter WHERE `when` >= {lo:DateTime} AND `when` < {hi:DateTime}
           GROUP BY device, d ORDER BY device, d""",
    ),
    "events_agg": (
        """SELECT event_date, event_hour, user_id, event_type, sum(count), sum(sum_duration_ms)
           FROM analytics.events_agg WHERE event_date >= toDate({lo:DateTime}) AND event_date < toDate({hi:DateTime})
           GROUP BY ALL ORDER BY ALL""",
        """SELECT toDate(timestamp), toStartOfHour(timestamp), user_id, event_type, count(), sum(duration_ms)
           FROM analytics.raw_events WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime}
           GROUP BY ALL ORDER BY ALL""",
    ),
    "events_daily": (
        """SELECT event_date, event_type, sumMerge(events), uniqMerge(users) FROM analytics.events_daily
           WHERE event_date >= toDate({lo:DateTime}) AND event_date < toDate({hi:DateTime}) GROUP BY ALL ORDER BY ALL""",
        """SELECT toDate(timestamp), event_type, count(), uniq(user_id) FROM analytics.raw_events
           WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime} GROUP BY ALL ORDER BY ALL""",
    ),
    "events_weekly": (
        """SELECT week, event_type, sumMerge(events), uniqMerge(users) FROM analytics.events_weekly
           WHERE week >= toDate({lo:DateTime}) AND week < toDate({hi:DateTime}) GROUP BY ALL ORDER BY ALL""",
        """SELECT toMonday(toDate(timestamp)) AS w, event_type, count(), uniq(user_id) FROM analytics.raw_events
           WHERE w >= toDate({lo:DateTime}) AND w < toDate({hi:DateTime}) GROUP BY ALL ORDER BY ALL""",
    ),
}

PARTITIONS = {
    "hourly_endpoint_stats": ["2026-08-01", "2026-09-15", "2026-10-31"],
    "requests_enriched": ["2026-08-01", "2026-10-01"],
    "error_events": ["2026-08-01", "2026-09-30"],
    "metric_events": ["2026-08-01", "2026-09-01"],
    "audit_log": ["2026-09-01", "2026-10-01"],
    "counter_daily": ["2026-08-01", "2026-10-01"],
    "events_agg": ["2026-08-01", "2026-09-01"],
    "events_daily": ["2026-08-02", "2026-10-15"],
    # July holds the week of Monday 2026-07-27 (data starts Saturday 2026-08-01); October's last week ends in November.
    "events_weekly": ["2026-07-01", "2026-10-01"],
}
#: Chain intermediates are only dropped: an INSERT of garbage into them would fire the next MV of the chain.
CHAIN_INTERMEDIATES = {"events_agg", "events_daily"}
CASES = [
    (target, key, "drop" if target in CHAIN_INTERMEDIATES else corruption)
    for target, keys in PARTITIONS.items()
    for key, corruption in zip(keys, ["drop", "garbage", "drop"], strict=False)
]


#: The target column its PARTITION BY reads, to find the partition's id by hand.
PARTITION_COLUMN = {
    "hourly_endpoint_stats": "hour",
    "counter_daily": "day",
    "events_agg": "event_date",
    "events_daily": "event_date",
    "events_weekly": "week",
}


def other_partitions(client, target: ObjectRef, partition_id: str) -> list[tuple]:
    return rows(
        client,
        f"SELECT _partition_id, count() FROM analytics.{target.name} WHERE _partition_id != {{p:String}} "
        "GROUP BY 1 ORDER BY 1",
        p=partition_id,
    )


@pytest.mark.parametrize(("target_name", "key", "corruption"), CASES, ids=[f"{t}-{k}-{c}" for t, k, c in CASES])
def test_rebuilt_partition_equals_independent_recompute(engine, example, target_name, key, corruption):
    target = ref(target_name)
    win = window(example, target, key)
    finalized, recompute = RECOMPUTE[target_name]
    params = {"lo": win.start, "hi": win.end}
    with engine.get_client() as client:
        expected = rows(client, recompute, **params)
        assert expected, "the test partition must hold source rows"
        assert rows(client, finalized, **params) == expected, "the live MV agrees before the test corrupts it"
        column = PARTITION_COLUMN.get(target_name, "timestamp")
        ids = rows(
            client,
            f"SELECT DISTINCT _partition_id FROM analytics.{target_name} "
            f"WHERE {column} >= {{lo:DateTime}} AND {column} < {{hi:DateTime}}",
            **params,
        )
        assert len(ids) == 1, ids
        partition_id = ids[0][0]
        untouched = other_partitions(client, target, partition_id)
        if corruption == "drop":
            client.command(
                f"ALTER TABLE analytics.{target_name} DROP PARTITION ID {{p:String}}", parameters={"p": partition_id}
            )
        else:
            client.command(
                f"INSERT INTO analytics.{target_name} SELECT * FROM analytics.{target_name} "
                "WHERE _partition_id = {p:String}",
                parameters={"p": partition_id},
            )
        assert rows(client, finalized, **params) != expected

        first = rebuild(client, example, target, win)
        assert rows(client, finalized, **params) == expected
        second = rebuild(client, example, target, win)
        assert rows(client, finalized, **params) == expected
        assert other_partitions(client, target, partition_id) == untouched

    assert (first.method, first.partition, first.target) == ("replace", key, target.fqn)
    assert first.rows_written == second.rows_written > 0
    assert any("REPLACE PARTITION" in s for s in first.statements)
    assert any(s.startswith("CREATE TABLE `analytics`.`_chmv_shadow_") for s in first.statements)
    assert first.statements[-1].startswith("DROP TABLE IF EXISTS `analytics`.`_chmv_shadow_")


@pytest.mark.parametrize("target_name", sorted(PARTITIONS))
def test_partitions_rebuilt_in_one_read_equal_their_recomputes(engine, example, target_name):
    """run_steps: every partition of the group (not adjacent: the partitions in between are read, not touched) is
    dropped, then rebuilt from one shadow filled by one INSERT per MV, and equals its independent recompute."""
    target = ref(target_name)
    keys = PARTITIONS[target_name]
    finalized, recompute = RECOMPUTE[target_name]
    column = PARTITION_COLUMN.get(target_name, "timestamp")
    windows = [window(example, target, key) for key in keys]
    with engine.get_client() as client:
        expected = {w.key: rows(client, recompute, lo=w.start, hi=w.end) for w in windows}
        ids = [
            rows(
                client,
                f"SELECT DISTINCT _partition_id FROM analytics.{target_name} WHERE {column} >= "
                "{lo:DateTime} AND {column} < {hi:DateTime}".replace("{column}", column),
                lo=w.start,
                hi=w.end,
            )[0][0]
            for w in windows
        ]
        untouched = rows(
            client,
            f"SELECT _partition_id, count() FROM analytics.{target_name} WHERE _partition_id "
            "NOT IN {ids:Array(String)} GROUP BY 1 ORDER BY 1",
            ids=ids,
        )
        for partition_id in ids:
            client.command(
                f"ALTER TABLE analytics.{target_name} DROP PARTITION ID {{p:String}}", parameters={"p": partition_id}
            )
        plan = plan_from_source(
            example,
            target,
            windows,
            live_table(client, example.project, target),
            zone=session_zone(client),
            one_read=True,
        )
        results = run_steps(client, example.project, plan, plan.steps)
        for w in windows:
            assert rows(client, finalized, lo=w.start, hi=w.end) == expected[w.key], w.key
        assert (
            rows(
                client,
                f"SELECT _partition_id, count() FROM analytics.{target_name} WHERE _partition_id "
                "NOT IN {ids:Array(String)} GROUP BY 1 ORDER BY 1",
                ids=ids,
            )
            == untouched
        )
        assert int(client.command("SELECT count() FROM system.tables WHERE name LIKE '\\_chmv\\_shadow\\_%'")) == 0
    assert [(r.partition, r.method) for r in results] == [(k, "replace") for k in keys]
    assert all(r.rows_written > 0 for r in results)
    inserts = [s for s in results[0].statements if s.startswith("INSERT INTO")]
    assert len(inserts) == len(example.project.views_into(target))
    (swap,) = [s for s in results[0].statements if s.startswith("ALTER TABLE")]  # every partition in one ALTER
    assert swap.count("REPLACE PARTITION") == len(keys) and all(not r.statements for r in results[1:])


def test_a_span_holding_every_source_row_is_read_without_the_time_predicate(engine, example):
    """run_steps over every month the source holds: part metadata says the span holds every row, so the read has no
    time predicate; each month still equals its recompute. A span of some months keeps the predicate."""
    target = ref("metric_events")
    finalized, recompute = RECOMPUTE["metric_events"]
    with engine.get_client() as client:
        low, high = rows(client, "SELECT min(timestamp), max(timestamp) FROM analytics.all_events")[0]
        keys = [f"{low.year}-{m:02d}-01" for m in range(low.month, high.month + 1)]
        assert len(keys) >= 2 and low.year == high.year
        windows = [window(example, target, key) for key in keys]
        expected = {w.key: rows(client, recompute, lo=w.start, hi=w.end) for w in windows}
        live = live_table(client, example.project, target)
        for chosen, pruned in ((windows, False), (windows[1:], True)):
            plan = plan_from_source(example, target, chosen, live, zone=session_zone(client), one_read=True)
            results = run_steps(client, example.project, plan, plan.steps)
            (insert,) = [s for s in results[0].statements if s.startswith("INSERT INTO")]
            assert ("`timestamp` >= toDateTime(" in insert) is pruned, insert
            for w in windows:
                assert rows(client, finalized, lo=w.start, hi=w.end) == expected[w.key], w.key


def test_a_guarded_partition_of_one_read_that_would_shrink_stops_there(engine, example):
    """The shrink guard counts only its own partition of the shared shadow: the first partition (live rows lost,
    the rebuild holds more) is swapped, the second (live rows doubled, the rebuild holds fewer) is refused, and the
    shadow is dropped."""
    target = ref("error_events")
    first, second = (window(example, target, key) for key in PARTITIONS["error_events"])
    count = "SELECT count() FROM analytics.error_events WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime}"
    with engine.get_client() as client:
        good = {w.key: int(client.command(count, parameters={"lo": w.start, "hi": w.end})) for w in (first, second)}
        client.command(
            "ALTER TABLE analytics.error_events DELETE WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime}",
            parameters={"lo": first.start, "hi": first.end},
            settings={"mutations_sync": 2},
        )
        client.command(
            "INSERT INTO analytics.error_events SELECT * FROM analytics.error_events WHERE timestamp "
            ">= {lo:DateTime} AND timestamp < {hi:DateTime}",
            parameters={"lo": second.start, "hi": second.end},
        )
        live = live_table(client, example.project, target)
        plan = plan_from_source(example, target, [first, second], live, zone=session_zone(client), one_read=True)
        guarded = replace(plan, steps=tuple(replace(s, guard="the test says so") for s in plan.steps))
        with pytest.raises(
            ShrinkRefused, match=f"partition {second.key}: the rebuild would leave {good[second.key]:,}"
        ):
            run_steps(client, example.project, guarded, guarded.steps)
        assert int(client.command(count, parameters={"lo": first.start, "hi": first.end})) == good[first.key]
        assert int(client.command(count, parameters={"lo": second.start, "hi": second.end})) == 2 * good[second.key]
        assert int(client.command("SELECT count() FROM system.tables WHERE name LIKE '\\_chmv\\_shadow\\_%'")) == 0
        rebuild(client, example, target, second)  # unguarded: back to correct for the other tests
        assert int(client.command(count, parameters={"lo": second.start, "hi": second.end})) == good[second.key]


def test_unpartitioned_replacing_target_rebuilds_whole_table(engine, example):
    """entity_latest (ReplacingMergeTree, no PARTITION BY): FINAL equals argMax over raw_webhooks."""
    target = ref("entity_latest")
    with engine.get_client() as client:

        def latest_by_entity() -> dict[int, tuple]:
            got = rows(client, "SELECT entity_id, updated_at, payload FROM analytics.entity_latest FINAL")
            assert len(got) == len({r[0] for r in got}), "FINAL returns one row per entity"
            return {r[0]: r[1:] for r in got}

        # Expected: the latest updated_at per entity and every payload seen at that instant (ties are legal).
        expected = {
            entity: (updated_at, set(payloads))
            for entity, updated_at, payloads in rows(
                client,
                """
                SELECT entity_id, max(updated_at) AS m, groupUniqArrayIf(payload, updated_at = m_all) FROM (
                    SELECT entity_id, updated_at, payload, max(updated_at) OVER (PARTITION BY entity_id) AS m_all
                    FROM analytics.raw_webhooks) GROUP BY entity_id""",
            )
        }
        assert sum(len(p) > 1 for _, p in expected.values()) < 5
        client.command(
            "INSERT INTO analytics.entity_latest VALUES (1, 'garbage', '2099-01-01 00:00:00'), "
            "(999999, 'ghost', '2026-01-01 00:00:00')"
        )
        assert latest_by_entity()[1][1] == "garbage"
        for _ in range(2):
            result = rebuild(client, example, target, None)
            got = latest_by_entity()
            assert set(got) == set(expected)
            for entity, (updated_at, payload) in got.items():
                assert updated_at == expected[entity][0] and payload in expected[entity][1], entity
            assert (result.method, result.partition) == ("replace", None)
            assert any("REPLACE PARTITION tuple() FROM" in s for s in result.statements)
        # A window passed for an unpartitioned target rebuilds the whole table.
        assert rebuild(client, example, target, window(example, ref("audit_log"), "2026-09-01")).method == "replace"
        assert int(client.command("SELECT count() FROM system.tables WHERE name LIKE '_chmv_shadow_%'")) == 0


def test_empty_source_partition_drops_the_target_partition(engine, example):
    target = ref("hourly_endpoint_stats")
    win = window(example, target, "2026-12-01")  # no source rows that day
    with engine.get_client() as client:
        client.command(
            "INSERT INTO analytics.hourly_endpoint_stats SELECT toDateTime('2026-12-01 05:00:00'), 'x', "
            "sumState(toUInt64(7)), uniqState(toUInt64(1)), quantileState(0.99)(toUInt32(1))"
        )
        before = int(client.command("SELECT count() FROM analytics.hourly_endpoint_stats"))
        result = rebuild(client, example, target, win)
        assert (result.method, result.rows_written) == ("drop", 0)
        assert (
            int(client.command("SELECT count() FROM analytics.hourly_endpoint_stats WHERE toDate(hour) = '2026-12-01'"))
            == 0
        )
        assert int(client.command("SELECT count() FROM analytics.hourly_endpoint_stats")) == before - 1


def test_replace_partition_is_atomic_for_readers(engine, example):
    """A reader sampling the partition during repeated corrupt+rebuild cycles only ever sees whole states."""
    target = ref("requests_enriched")
    win = window(example, target, "2026-09-01")
    count_sql = (
        "SELECT count() FROM analytics.requests_enriched WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime}"
    )
    params = {"lo": win.start, "hi": win.end}
    with engine.get_client() as client:
        good = int(client.command(count_sql, parameters=params))
    samples: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        with engine.get_client() as client:
            while not stop.is_set():
                samples.append(int(client.command(count_sql, parameters=params)))

    def sampled_more(than: int) -> None:
        """Wait until the reader has sampled the partition again (event-based: no fixed sleep)."""
        deadline = time.monotonic() + 30
        while len(samples) < than + 5 and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.001)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        with engine.get_client() as client:
            for _ in range(5):
                client.command(
                    "INSERT INTO analytics.requests_enriched SELECT * FROM analytics.requests_enriched "
                    "WHERE timestamp >= {lo:DateTime} AND timestamp < {hi:DateTime}",
                    parameters=params,
                )
                sampled_more(len(samples))  # the reader sees the corrupted (doubled) partition
                rebuild(client, example, target, win)
                sampled_more(len(samples))  # and the rebuilt one
    finally:
        stop.set()
        thread.join(timeout=30)
    assert len(samples) > 50
    assert set(samples) <= {good, 2 * good}, sorted(set(samples))
    assert {good, 2 * good} <= set(samples)
    with engine.get_client() as client:
        assert int(client.command(count_sql, parameters=params)) == good


# --- small DDL directories ------------------------------------------------------------------------------

FAN_IN_DDL = """
CREATE DATABASE IF NOT EXISTS shop ENGINE = Atomic;
CREATE TABLE shop.web_orders (ts DateTime, sku String, qty UInt32) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE shop.store_orders (sold_at DateTime, item String, n UInt32) ENGINE = MergeTree ORDER BY sold_at;
CREATE TABLE shop.sales_daily (day Date, channel String, sku String, units AggregateFunction(sum, UInt64))
ENGINE = AggregatingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (channel, sku, day);
CREATE MATERIALIZED VIEW shop.web_mv TO shop.sales_daily AS
SELECT toDate(ts) AS day, 'web' AS channel, sku, sumState(toUInt64(qty)) AS units FROM shop.web_orders GROUP BY day, sku;
CREATE MATERIALIZED VIEW shop.store_mv TO shop.sales_daily AS
SELECT toDate(sold_at) AS day, 'store' AS channel, item AS sku, sumState(toUInt64(n)) AS units
FROM shop.store_orders GROUP BY day, sku;
-- Inner-table MV (no TO), monthly partitions.
CREATE MATERIALIZED VIEW shop.sku_counts ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (sku, day)
AS SELECT toDate(ts) AS day, sku, count() AS orders FROM shop.web_orders GROUP BY day, sku;
-- Refreshable MV: the server recomputes the whole target on refresh.
CREATE TABLE shop.sku_totals (sku String, units UInt64) ENGINE = MergeTree ORDER BY sku;
CREATE MATERIALIZED VIEW shop.sku_totals_mv REFRESH EVERY 1 DAY TO shop.sku_totals AS
SELECT sku, sum(qty) AS units FROM shop.web_orders GROUP BY sku
"""


@pytest.fixture
def shop(tmp_path):
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "shop.sql").write_text(FAN_IN_DDL)
    loaded = load(ddl, default_database="shop", partition_start="2026-01-01")
    resource = make_engine(tmp_path / "chdb", loaded)
    with resource.get_client() as client:
        client.command(
            "INSERT INTO shop.web_orders SELECT toDateTime('2026-03-01 00:00:00') + number * 3600, "
            "concat('sku', toString(number % 7)), number % 5 + 1 FROM numbers(24 * 90)"
        )
        client.command(
            "INSERT INTO shop.store_orders SELECT toDateTime('2026-03-15 00:00:00') + number * 7200, "
            "concat('sku', toString(number % 3)), 2 FROM numbers(12 * 60)"
        )
    return loaded, resource


def test_fan_in_target_rebuilds_from_every_view(shop):
    loaded, resource = shop
    target = ref("sales_daily", "shop")
    finalized = (
        "SELECT day, channel, sku, sumMerge(units) FROM shop.sales_daily WHERE toYYYYMM(day) = 202604 "
        "GROUP BY ALL ORDER BY ALL"
    )
    recompute = """
        SELECT toDate(ts) AS d, 'web' AS c, sku, sum(qty) FROM shop.web_orders WHERE toYYYYMM(ts) = 202604 GROUP BY ALL
        UNION ALL
        SELECT toDate(sold_at) AS d, 'store' AS c, item, sum(n) FROM shop.store_orders WHERE toYYYYMM(sold_at) = 202604
        GROUP BY ALL ORDER BY ALL"""
    with resource.get_client() as client:
        expected = sorted(rows(client, recompute))
        assert {r[1] for r in expected} == {"web", "store"}
        client.command("ALTER TABLE shop.sales_daily DROP PARTITION 202604")
        for _ in range(2):
            result = rebuild(client, loaded, target, window(loaded, target, "2026-04-01"))
            assert sorted(rows(client, finalized)) == expected
        assert sum("INSERT INTO `shop`.`_chmv_shadow_sales_daily_20260401_r" in s for s in result.statements) == 2


def test_inner_table_view_rebuilds(shop):
    loaded, resource = shop
    target = ref("sku_counts", "shop")
    finalized = (
        "SELECT day, sku, sum(orders) FROM shop.sku_counts WHERE toYYYYMM(day) = 202603 GROUP BY ALL ORDER BY ALL"
    )
    recompute = (
        "SELECT toDate(ts), sku, count() FROM shop.web_orders WHERE toYYYYMM(ts) = 202603 GROUP BY ALL ORDER BY ALL"
    )
    with resource.get_client() as client:
        expected = rows(client, recompute)
        client.command("INSERT INTO shop.sku_counts SELECT * FROM shop.sku_counts")  # doubles every partition
        assert rows(client, finalized) != expected
        result = rebuild(client, loaded, target, window(loaded, target, "2026-03-01"))
        assert rows(client, finalized) == expected
        assert result.method == "replace" and ".inner" in result.statements[-2]
        # April was not rebuilt: still doubled.
        assert int(client.command("SELECT sum(orders) FROM shop.sku_counts WHERE toYYYYMM(day) = 202604")) == 2 * int(
            client.command("SELECT count() FROM shop.web_orders WHERE toYYYYMM(ts) = 202604")
        )


def test_refreshable_view_materializes_by_system_refresh(shop):
    loaded, resource = shop
    target = ref("sku_totals", "shop")
    with resource.get_client() as client:
        expected = rows(client, "SELECT sku, sum(qty) FROM shop.web_orders GROUP BY sku ORDER BY sku")
        client.command("INSERT INTO shop.web_orders VALUES ('2026-06-01 00:00:00', 'sku-new', 11)")
        client.command("INSERT INTO shop.sku_totals VALUES ('garbage', 1)")
        result = rebuild(client, loaded, target, None)
        assert result.method == "refresh"
        assert result.statements == [
            "SYSTEM REFRESH VIEW `shop`.`sku_totals_mv`",
            "SYSTEM WAIT VIEW `shop`.`sku_totals_mv`",
        ]
        assert rows(client, "SELECT sku, units FROM shop.sku_totals ORDER BY sku") == sorted(
            [*expected, ("sku-new", 11)]
        )
        assert result.rows_written == len(expected) + 1


def test_rebuild_errors_are_clear(example, engine):
    missing = "analytics.api_requests is not written by any materialized view"
    with engine.get_client() as client, pytest.raises(ChmvError, match=missing):
        rebuild(client, example, ref("api_requests"), None)


def test_inner_table_not_deployed_is_a_clear_error(shop, tmp_path):
    loaded, _ = shop
    empty = ClickHouseResource(dsn=f"chdb://{Path(tmp_path) / 'empty'}")
    target = ref("sku_counts", "shop")
    with (
        empty.get_client() as client,
        pytest.raises(ChmvError, match=r"inner table of shop.sku_counts not found: .*chmv apply"),
    ):
        rebuild(client, loaded, target, window(loaded, target, "2026-03-01"))
