"""Parity per partition on the embedded engine: every example target passes, faults fail with numbers."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.parity import measures_for, parity_for_partition, parity_for_partitions

from support.checks import ref
from support.engines import make_engine

SHOP_TARGET = ObjectRef(database="shop", name="daily_revenue")
DEDUP_DDL = """
CREATE DATABASE IF NOT EXISTS shop ENGINE = Atomic;
CREATE TABLE shop.orders (ts DateTime, order_id UInt64, amount UInt64)
ENGINE = ReplacingMergeTree() PARTITION BY toYYYYMM(ts) ORDER BY order_id;
CREATE TABLE shop.daily_revenue (day Date, orders AggregateFunction(count), revenue AggregateFunction(sum, UInt64))
ENGINE = AggregatingMergeTree() PARTITION BY toYYYYMM(day) ORDER BY day;
CREATE MATERIALIZED VIEW shop.daily_revenue_mv TO shop.daily_revenue AS
SELECT toDate(ts) AS day, countState() AS orders, sumState(amount) AS revenue FROM shop.orders GROUP BY day;
"""


def test_every_example_target_passes(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    with engine.get_client() as client:
        for target in example.project.targets:
            partitioning = example.partitioning(target)
            keys = (
                [None]
                if not partitioning.partitioned
                else ["2026-08-02" if partitioning.grain == "day" else "2026-09-01"]
            )
            for key in keys:
                result = parity_for_partition(client, example, target, example.partitioning(target).window_of(key))
                assert result.passed and result.expected > 0, result.describe()


def test_partitions_in_one_query_equal_one_by_one(tmp_path: Path, example) -> None:
    """parity_for_partitions (one probe, one recompute per call) gives each partition the figures of its own check,
    a lost partition included, for every partitioned example target."""
    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    with engine.get_client() as client:
        client.command("ALTER TABLE analytics.hourly_endpoint_stats DROP PARTITION tuple(toDate('2026-08-02'))")
        checked = 0
        for target in example.project.targets:
            if not example.partitioning(target).partitioned:
                continue
            daily = example.partitioning(target).grain == "day"
            keys = ["2026-08-01", "2026-08-02", "2026-08-04"] if daily else ["2026-08-01", "2026-10-01"]
            windows = [example.partitioning(target).window_of(key) for key in keys]
            grouped = parity_for_partitions(client, example, target, windows)
            alone = [parity_for_partition(client, example, target, w) for w in windows]
            assert [(r.partition, r.measures, r.within_tolerance, r.error) for r in grouped] == [
                (r.partition, r.measures, r.within_tolerance, r.error) for r in alone
            ], target.fqn
            assert any(r.expected > 0 for r in grouped), target.fqn
            checked += 1
        lost = parity_for_partitions(
            client,
            example,
            ref("hourly_endpoint_stats"),
            [example.partitioning(ref("hourly_endpoint_stats")).window(k) for k in ("2026-08-01", "2026-08-02")],
        )
    assert checked >= 5
    assert [r.within_tolerance for r in lost] == [True, False] and lost[1].actual == 0 < lost[1].expected


def test_measures_follow_the_engine(example) -> None:
    names = {t.name: [m[0] for m in measures_for(example.project.table(t))] for t in example.project.targets}
    assert names["hourly_endpoint_stats"] == ["sumMerge(request_count)", "distinct keys"]
    assert names["counter_daily"] == ["sum(count)", "distinct keys"]
    assert names["entity_latest"] == ["rows (FINAL)"]
    assert names["error_events"] == ["rows"]


def test_grace_period_for_the_newest_partition(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    errors = example.partitioning(ref("error_events"))
    with engine.get_client() as client:
        client.command("INSERT INTO analytics.error_events VALUES ('2026-08-07 01:00:00', 'error', 'ghost')")
        window = errors.window("2026-08-07")
        late = parity_for_partition(client, example, ref("error_events"), window, now=datetime(2026, 8, 8, 0, 5))
        assert late.in_grace and late.passed and not late.within_tolerance
        later = parity_for_partition(client, example, ref("error_events"), window, now=datetime(2026, 8, 9))
        assert not later.passed and later.delta == 1


def test_replacing_source_with_duplicates_shows_the_overcount(tmp_path: Path) -> None:
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "shop.sql").write_text(DEDUP_DDL)
    loaded = load(ddl)
    engine = make_engine(tmp_path / "chdb", loaded)
    with engine.get_client() as client:
        for _ in range(2):  # a retried delivery: the same 10 orders twice
            client.command(
                "INSERT INTO shop.orders SELECT toDateTime('2026-09-10 12:00:00') + number, number, 5 FROM numbers(10)",
                settings={"insert_deduplicate": 0},
            )
        shop = loaded.partitioning(SHOP_TARGET)
        result = parity_for_partition(client, loaded, SHOP_TARGET, shop.window("2026-09-01"))
        grouped = parity_for_partitions(
            client, loaded, SHOP_TARGET, [shop.window(k) for k in ("2026-09-01", "2026-10-01")]
        )
    assert not result.passed
    assert (result.measures[0].name, result.expected, result.actual) == ("countMerge(orders)", 10.0, 20.0)
    assert grouped[0].measures == result.measures and grouped[1].within_tolerance  # the source read FINAL too


def test_a_group_by_mv_into_a_merge_tree_is_judged_by_what_batching_does_not_change(tmp_path: Path, example) -> None:
    """events_agg (GROUP BY into a plain MergeTree) gets one row per group per insert block: rows are no verdict."""
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    agg = ref("events_agg")
    window = example.partitioning(agg).window("2026-08-01")
    rows = (
        "INSERT INTO analytics.raw_events SELECT toDateTime('2026-08-03 10:00:00') + number * 7, number % 3, "
        "'click', number FROM numbers({first}, {n})"
    )
    with engine.get_client() as client:
        for first, n in ((0, 400), (400, 300), (700, 300)):  # one day's rows in three blocks: three rows per group
            client.command(rows.format(first=first, n=n))
        target_rows = int(client.command("SELECT count() FROM analytics.events_agg"))
        groups = int(
            client.command("SELECT count() FROM (SELECT DISTINCT event_hour, user_id FROM analytics.events_agg)")
        )
        assert target_rows > groups  # the batching shows in the rows
        result = parity_for_partition(client, example, agg, window)
        assert result.passed and not result.in_grace, result.describe()
        assert [m.name for m in result.measures][:2] == ["sum(count)", "sum(sum_duration_ms)"]
        assert result.measures[0].expected == 1000 and result.measures[-1].expected == groups
        client.command(
            "ALTER TABLE analytics.events_agg DELETE WHERE user_id = 1 AND event_hour = "
            "toDateTime('2026-08-03 10:00:00') SETTINGS mutations_sync = 2"
        )
        lost = parity_for_partition(client, example, agg, window)
    assert not lost.passed and lost.measures[0].delta < 0, lost.describe()
