"""Sources that lost old rows, with a landing zone: a plain backfill rebuilds exactly from the lake (Spark).

The truth is the landing zone: every row of it was ingested and fired the live MVs; then the source lost
days (a TTL, a DROP PARTITION). A backfill with the default engine (auto) must take those days from the
lake and leave every target row as the live MV built it.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from dagster import AssetKey, materialize

from asset_checks.names import PARITY
from chmv_assets import demo_data
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.partitioning import PartitionWindow
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.loads.load import ingest
from chmv_assets.engine.rebuild.executor import plan_for
from chmv_assets.orchestration.assets import build_chmv_assets
from resources.clickhouse import ClickHouseResource
from spark.assets import pyspark_resource
from spark.staging import SparkStager

from support.retention import count, ddl_with_ttl, ttl_back_to
from support.spark import backfill, deliver, digest, recompute, ref, with_landing, write_lake

pytestmark = pytest.mark.worker_seconds(25)

STATS = ref("hourly_endpoint_stats")
DAYS = [
    PartitionWindow(f"2026-08-0{d}", datetime(2026, 8, d, tzinfo=UTC), datetime(2026, 8, d + 1, tzinfo=UTC))
    for d in (1, 2, 3)
]
WHERE = "toDate(hour) <= '2026-08-03'"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    write_lake(root, {"analytics.api_requests": 12_000})
    return root


def ingested(spark, tmp_path, loaded, lake):
    """An engine where the whole lake was ingested: the target as the live MV built it from every lake row."""
    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    deliver(lake, loaded.config.ingestion.landing_dir)
    ingest(SparkStager(spark), engine, loaded, ref("api_requests"))
    with engine.get_client() as client:
        return engine, digest(client, loaded, STATS, WHERE)


def test_ttl_retention_backfill_through_dagster_rebuilds_from_the_lake(spark, tmp_path, lake):
    """A TTL deleting api_requests rows before 2026-08-02 12:00; the Dagster asset backfills 08-01..08-03 (auto)."""
    ttl = ttl_back_to("timestamp", datetime(2026, 8, 2, 12))
    ddl = ddl_with_ttl(tmp_path, "10_api_requests.sql", "ORDER BY (endpoint, timestamp);", ttl)
    loaded = with_landing(load(ddl), tmp_path / "landing")
    engine, expected = ingested(spark, tmp_path, loaded, lake)  # the MV saw every row, expired ones included
    with engine.get_client() as client:
        client.command("OPTIMIZE TABLE analytics.api_requests FINAL")  # the TTL deletes what insert did not already
        assert count(client, ref("api_requests"), "timestamp < '2026-08-02 11:59:00'") == 0
        assert count(client, ref("api_requests"), "timestamp >= '2026-08-02 12:01:00'") > 0
    key = AssetKey(["analytics", "hourly_endpoint_stats"])
    asset = next(a for a in build_chmv_assets(loaded) if hasattr(a, "keys") and key in a.keys)
    result = materialize(
        [asset],
        selection=[key],
        resources={"clickhouse": engine, "pyspark": pyspark_resource()},
        tags={"dagster/asset_partition_range_start": "2026-08-01", "dagster/asset_partition_range_end": "2026-08-03"},
    )
    assert result.success
    # each partition's materialization as it was swapped in: the source table's first, then the landing zone's
    materializations = result.asset_materializations_for_node(asset.node_def.name)
    assert [m.partition for m in materializations] == ["2026-08-03", "2026-08-01", "2026-08-02"]
    meta = materializations[1].metadata  # 2026-08-01's
    progress = "\n".join(m.metadata["chmv/progress"].value for m in materializations)  # a row on each partition's
    assert "| 2026-08-01 | spark |" in progress and "| 2026-08-02 | spark |" in progress
    assert "| 2026-08-03 | clickhouse |" in progress
    assert "its TTL timestamp + INTERVAL" in meta["chmv/plan"].value
    with engine.get_client() as client:
        assert digest(client, loaded, STATS, WHERE) == expected


@pytest.fixture(scope="module")
def summer_lake(tmp_path_factory):
    """api_requests rows of 2026-07-30 .. 2026-08-03 as a landing zone: two days in a July partition of the source."""
    root = tmp_path_factory.mktemp("summer_lake")
    tables = {
        "analytics.api_requests": demo_data.generate(
            "analytics.api_requests", 12_000, start=date(2026, 7, 30), days=5, seed=11
        )
    }
    demo_data.write_landing_zone(root, tables, seed=11)
    return root


def test_a_dropped_partition_is_rebuilt_from_the_lake_and_the_rest_from_the_source(
    spark, tmp_path, example, summer_lake
):
    """A retention job dropped the source's July; a backfill of 07-30 .. 08-01 (auto) reads July from the lake."""
    loaded = with_landing(example, tmp_path / "landing")
    days = [
        PartitionWindow(f"{d:%Y-%m-%d}", d, d + timedelta(days=1))
        for d in (
            datetime(2026, 7, 30, tzinfo=UTC),
            datetime(2026, 7, 31, tzinfo=UTC),
            datetime(2026, 8, 1, tzinfo=UTC),
        )
    ]
    where = "toDate(hour) <= '2026-08-01'"
    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    deliver(summer_lake, tmp_path / "landing")
    ingest(SparkStager(spark), engine, loaded, ref("api_requests"))
    with engine.get_client() as client:
        expected = digest(client, loaded, STATS, where)
        assert recompute(client, loaded, STATS, where) == expected and expected
        client.command("ALTER TABLE analytics.api_requests DROP PARTITION 202607")
    plan = plan_for(engine, loaded, STATS, days, root=tmp_path / "landing")
    assert [(s.engine, bool(s.guard)) for s in plan.steps] == [("spark", True), ("spark", True), ("clickhouse", False)]
    source = plan.coverage.windows[0].sources[0]
    assert source.table.reason.startswith("analytics.api_requests holds no rows of the window while the target")
    assert source.lake.reason.endswith(
        "landing files arrived in the window's range (the landing zone starts at 2026-07-30 00:00:00)"
    )
    results = backfill(spark, engine, loaded, STATS, days)
    assert [r.engine for r in results] == ["spark", "spark", "clickhouse"]
    with engine.get_client() as client:
        assert digest(client, loaded, STATS, where) == expected


def test_a_lake_backed_month_passes_parity_and_its_chain_rebuilds(spark, tmp_path):
    """raw_events lost its first August days to a TTL: the month of events_agg is rebuilt from the lake, its
    blocking parity passes against the lake (not the truncated source), and the daily target below it rebuilds."""
    ttl = ttl_back_to("timestamp", datetime(2026, 8, 10))
    loaded = with_landing(
        load(ddl_with_ttl(tmp_path, "60_raw_events.sql", "ORDER BY (event_type, timestamp);", ttl)),
        tmp_path / "landing",
    )
    lake_root = tmp_path / "lake"  # 1-20 August: the whole month's rows up to the ingestion watermark
    demo_data.write_landing_zone(
        lake_root, {"analytics.raw_events": demo_data.generate("analytics.raw_events", 12_000, days=20, seed=7)}, seed=7
    )
    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    deliver(lake_root, loaded.config.ingestion.landing_dir)
    ingest(
        SparkStager(spark), engine, loaded, ref("raw_events")
    )  # the live MVs see every row, then the TTL deletes the oldest
    agg, daily = ref("events_agg"), ref("events_daily")
    with engine.get_client() as client:
        expected = (
            digest(client, loaded, agg, "toYYYYMM(event_date) = 202608"),
            digest(client, loaded, daily, "event_date = '2026-08-05'"),
        )
        client.command("OPTIMIZE TABLE analytics.raw_events FINAL")
        assert count(client, ref("raw_events"), "timestamp < '2026-08-09 00:00:00'") == 0
    assets = build_chmv_assets(loaded)
    resources = {"clickhouse": engine, "pyspark": pyspark_resource()}
    for target, partition in ((agg, "2026-08-01"), (daily, "2026-08-05")):
        key = AssetKey(["analytics", target.name])
        asset = next(a for a in assets if hasattr(a, "keys") and key in a.keys)
        result = materialize([asset], selection=[key], partition_key=partition, resources=resources)
        assert result.success, target
        (parity,) = [e for e in result.get_asset_check_evaluations() if e.check_name == PARITY and e.asset_key == key]
        assert parity.passed, parity.description
        if target == agg:
            assert parity.metadata["chmv/truth"].value == "landing zone"
    with engine.get_client() as client:
        assert (
            digest(client, loaded, agg, "toYYYYMM(event_date) = 202608"),
            digest(client, loaded, daily, "event_date = '2026-08-05'"),
        ) == expected
