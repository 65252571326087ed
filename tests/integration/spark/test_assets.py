"""The Dagster side: ingestion assets and spark-engine backfills run through real `materialize`."""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterInstance, materialize

from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.orchestration.assets import build_chmv_assets
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource
from spark.assets import build_spark_definitions, pyspark_resource

from support.spark import deliver, digest, recompute, ref, with_landing, write_lake

pytestmark = pytest.mark.worker_seconds(25)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    write_lake(root, {"analytics.api_requests": 15_000})
    return root


def test_definitions_without_a_landing_zone_add_nothing(example):
    defs = build_spark_definitions(example, ChmvTranslator())
    assert not list(defs.assets or [])


def test_ingestion_asset_then_spark_backfill_of_a_partition_range(spark, tmp_path, example, lake):
    landing = tmp_path / "landing"
    deliver(lake, landing)
    loaded = with_landing(example, landing)
    translator = ChmvTranslator()
    spark_defs = build_spark_definitions(loaded, translator)
    ingest_asset = next(a for a in spark_defs.assets if AssetKey(["analytics", "api_requests"]) in a.keys)
    targets = {k: a for a in build_chmv_assets(loaded, translator) if hasattr(a, "keys") for k in a.keys}
    hourly = targets[AssetKey(["analytics", "hourly_endpoint_stats"])]
    assert AssetKey(["analytics", "api_requests"]) not in targets  # the spec gave way to the ingestion asset
    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    resources = {"clickhouse": engine, "pyspark": pyspark_resource()}

    instance = DagsterInstance.ephemeral()
    result = materialize([ingest_asset], partition_key="2026-08-01", resources=resources, instance=instance)
    assert result.success
    meta = result.asset_materializations_for_node(ingest_asset.node_def.name)[0].metadata
    assert meta["chmv/rows_inserted"].value > 0 and meta["chmv/watermark_before"].value == "None"
    logs = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any(m.startswith("analytics.api_requests: batch ") and " inserted " in m for m in logs)  # the load's log
    assert meta["chmv/watermark_after"].value.startswith("2026-08-0")
    assert len(meta["chmv/batch_id"].value) == 16
    result = materialize(
        [ingest_asset],
        resources=resources,
        tags={"dagster/asset_partition_range_start": "2026-08-02", "dagster/asset_partition_range_end": "2026-08-03"},
    )
    assert result.success

    with engine.get_client() as client:
        where = "toDate(hour) IN ('2026-08-01', '2026-08-02')"
        expected = recompute(client, loaded, ref("hourly_endpoint_stats"), where)
        client.command("TRUNCATE TABLE analytics.hourly_endpoint_stats")
    instance = DagsterInstance.ephemeral()
    result = materialize(
        [hourly],
        selection=[AssetKey(["analytics", "hourly_endpoint_stats"])],
        resources=resources,
        instance=instance,
        run_config={"ops": {hourly.node_def.name: {"config": {"engine": "spark"}}}},
        tags={"dagster/asset_partition_range_start": "2026-08-01", "dagster/asset_partition_range_end": "2026-08-02"},
    )
    assert result.success
    materializations = result.asset_materializations_for_node(hourly.node_def.name)
    assert [m.partition for m in materializations] == ["2026-08-01", "2026-08-02"]  # each as it was swapped in
    meta = materializations[1].metadata
    assert meta["chmv/engine_path"].value == "spark" and meta["chmv/partitions"].value == 2
    assert meta["chmv/rows_staged"].value > 0 and "| 2026-08-02 | spark |" in meta["chmv/progress"].value
    logs = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any("Spark stages analytics.api_requests" in m for m in logs)  # progress logged while it runs
    assert any("2026-08-02: replace" in m and "rows written" in m for m in logs)
    with engine.get_client() as client:
        assert digest(client, loaded, ref("hourly_endpoint_stats"), where) == expected
