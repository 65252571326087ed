"""The code location: Definitions load, asset specs, partitions, metadata, translator, materialization."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    MonthlyPartitionsDefinition,
    TableColumnLineage,
    TableSchema,
    materialize,
)

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.orchestration.assets import build_chmv_assets
from chmv_assets.orchestration.definitions import build_definitions
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

from support.engines import make_engine

TARGETS = {
    # target: (Dagster's partitions class of its grain or None, upstream assets)
    "hourly_endpoint_stats": (DailyPartitionsDefinition, {"api_requests"}),
    "requests_enriched": (MonthlyPartitionsDefinition, {"raw_requests"}),
    "entity_latest": (None, {"raw_webhooks"}),
    "error_events": (DailyPartitionsDefinition, {"all_events"}),
    "metric_events": (MonthlyPartitionsDefinition, {"all_events"}),
    "audit_log": (MonthlyPartitionsDefinition, {"all_events"}),
    "counter_daily": (MonthlyPartitionsDefinition, {"counter"}),
    "events_agg": (MonthlyPartitionsDefinition, {"raw_events"}),
    "events_daily": (DailyPartitionsDefinition, {"events_agg"}),
    "events_weekly": (MonthlyPartitionsDefinition, {"events_daily"}),
}
SOURCES = {"api_requests", "raw_requests", "raw_webhooks", "all_events", "counter", "raw_events"}


def key(name: str) -> AssetKey:
    return AssetKey(["analytics", name])


@pytest.fixture(scope="module")
def asset_graph(example):
    return (
        build_definitions(example, clickhouse=ClickHouseResource(dsn="chdb:///nonexistent"))
        .get_repository_def()
        .asset_graph
    )


def test_module_level_defs_load_and_resolve():
    module = importlib.import_module("chmv_assets.definitions")
    repo = module.defs.get_repository_def()
    keys = repo.asset_graph.get_all_asset_keys()
    assert {key(n) for n in [*TARGETS, *SOURCES]} <= keys
    assert "chmv_apply" in {job.name for job in repo.get_all_jobs()}
    assert isinstance(module.defs.resources["clickhouse"], ClickHouseResource)


@pytest.mark.parametrize("target", list(TARGETS))
def test_target_assets_partitions_and_deps(asset_graph, target):
    partitions_cls, upstream = TARGETS[target]
    node = asset_graph.get(key(target))
    assert node.is_materializable
    if partitions_cls is None:
        assert node.partitions_def is None
    else:
        # Dagster's own definition of the grain (chmv's is the TimeWindowPartitionsDefinition of its cron: equal)
        assert node.partitions_def == partitions_cls("2026-08-01", end_offset=1)  # partition_start of chmv.toml
        assert node.partitions_def.get_first_partition_key() == "2026-08-01"
    assert node.parent_keys == {key(u) for u in upstream}
    assert node.group_name == "analytics"


def test_sources_are_external_upstream_assets(asset_graph):
    for name in SOURCES:
        node = asset_graph.get(key(name))
        assert not node.is_materializable and node.partitions_def is None
    assert asset_graph.get(key("raw_events")).child_keys == {key("events_agg")}
    assert asset_graph.get(key("all_events")).child_keys == {
        key(n) for n in ("error_events", "metric_events", "audit_log")
    }


def test_metadata(asset_graph):
    node = asset_graph.get(key("events_weekly"))
    meta = node.metadata
    assert meta["chmv/chain_depth"] == 3
    assert asset_graph.get(key("events_daily")).metadata["chmv/chain_depth"] == 2
    schema = meta["dagster/column_schema"]
    assert isinstance(schema, TableSchema)
    assert [(c.name, c.type) for c in schema.columns] == [
        ("week", "Date"),
        ("event_type", "LowCardinality(String)"),
        ("events", "AggregateFunction(sum, UInt64)"),
        ("users", "AggregateFunction(uniq, UInt64)"),
    ]
    lineage = meta["dagster/column_lineage"]
    assert isinstance(lineage, TableColumnLineage)
    assert [(d.asset_key, d.column_name) for d in lineage.deps_by_column["week"]] == [
        (key("events_daily"), "event_date")
    ]
    assert meta["chmv/engine"] == "AggregatingMergeTree"
    assert meta["chmv/partition_by"] == "toYYYYMM(week)"
    assert meta["chmv/order_by"] == "(event_type, week)"
    assert "CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.mv_events_weekly" in meta["chmv/materialized_views"].value
    assert "CREATE TABLE IF NOT EXISTS analytics.events_weekly" in meta["chmv/ddl"].value
    assert meta["chmv/ddl_file"].endswith("60_raw_events.sql:56:1")
    assert node.description.startswith("Weekly rollup of the daily states.")
    ttl = asset_graph.get(key("error_events")).metadata["chmv/ttl"]
    assert ttl == "timestamp + INTERVAL 5 YEAR"
    hourly = asset_graph.get(key("hourly_endpoint_stats")).metadata["dagster/column_lineage"].deps_by_column
    assert [(d.asset_key, d.column_name) for d in hourly["unique_users"]] == [(key("api_requests"), "user_id")]
    assert asset_graph.get(key("api_requests")).description.startswith("Pre-aggregation")


FAN_IN = """
CREATE TABLE a (ts DateTime, x UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE b (ts DateTime, x UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE dim (x UInt64, name String) ENGINE = MergeTree ORDER BY x;
CREATE DICTIONARY names (x UInt64, name String) PRIMARY KEY x SOURCE(CLICKHOUSE(TABLE 'dim')) LAYOUT(FLAT()) LIFETIME(60);
-- Both feeds, hourly.
CREATE TABLE t (ts DateTime, x UInt64, name String) ENGINE = MergeTree PARTITION BY toStartOfHour(ts) ORDER BY ts;
CREATE MATERIALIZED VIEW a_mv TO t AS SELECT ts, x, dictGet('names', 'name', x) AS name FROM a;
CREATE MATERIALIZED VIEW b_mv TO t AS SELECT ts, x, '' AS name FROM b;
CREATE TABLE odd (k UInt64) ENGINE = MergeTree PARTITION BY k % 10 ORDER BY k;
CREATE MATERIALIZED VIEW odd_mv TO odd AS SELECT x AS k FROM a;
CREATE MATERIALIZED VIEW inner_mv ENGINE = MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY ts AS SELECT ts, x FROM b
"""


def test_fan_in_dictionaries_hourly_and_a_key_alone(tmp_path):
    (tmp_path / "x.sql").write_text(FAN_IN)
    loaded = load(tmp_path, default_database="app", partition_start="2026-01-01")
    graph = (
        build_definitions(loaded, clickhouse=ClickHouseResource(dsn="chdb:///nonexistent"))
        .get_repository_def()
        .asset_graph
    )
    t = graph.get(AssetKey(["app", "t"]))
    assert t.parent_keys == {AssetKey(["app", n]) for n in ("a", "b", "names")}
    assert t.partitions_def.get_first_partition_key() == "2026-01-01-00:00"
    assert t.description == "Both feeds, hourly.\n\nWritten by `app.a_mv`, `app.b_mv`."
    assert graph.get(AssetKey(["app", "names"])).parent_keys == {AssetKey(["app", "dim"])}
    odd = graph.get(AssetKey(["app", "odd"]))
    # a key alone: partitioned by the values the server holds (unpartitioned only where the DDL says so)
    assert isinstance(odd.partitions_def, DynamicPartitionsDefinition) and odd.partitions_def.name == "chmv:app.odd"
    inner = graph.get(AssetKey(["app", "inner_mv"]))
    assert inner.partitions_def.cron_schedule == DailyPartitionsDefinition("2026-01-01").cron_schedule
    assert inner.parent_keys == {AssetKey(["app", "b"])}


def test_translator_subclass_overrides_keys_everywhere(example):
    class Prefixed(ChmvTranslator):
        def get_asset_key(self, ref: ObjectRef) -> AssetKey:
            return AssetKey(["warehouse", ref.database, ref.name])

        def get_group_name(self, ref: ObjectRef) -> str:
            return "mvs"

    defs = build_definitions(example, translator=Prefixed(), clickhouse=ClickHouseResource(dsn="chdb:///nonexistent"))
    graph = defs.get_repository_def().asset_graph
    weekly = graph.get(AssetKey(["warehouse", "analytics", "events_weekly"]))
    assert weekly.parent_keys == {AssetKey(["warehouse", "analytics", "events_daily"])}
    assert weekly.group_name == "mvs"
    lineage = weekly.metadata["dagster/column_lineage"].deps_by_column["week"]
    assert lineage[0].asset_key == AssetKey(["warehouse", "analytics", "events_daily"])
    assert not any(k.path[0] == "analytics" for k in graph.get_all_asset_keys())


def test_materialize_target_partition_produces_the_right_rows(fresh_engine, example):
    assets = {k: a for a in build_chmv_assets(example) if hasattr(a, "op") for k in a.keys}
    hourly_key = key("hourly_endpoint_stats")
    hourly = assets[hourly_key]
    finalized = (
        "SELECT hour, endpoint, sumMerge(request_count) FROM analytics.hourly_endpoint_stats "
        "WHERE toDate(hour) = '2026-09-15' GROUP BY ALL ORDER BY ALL"
    )
    recompute = (
        "SELECT toStartOfHour(timestamp) AS h, endpoint, count() FROM analytics.api_requests "
        "WHERE toDate(timestamp) = '2026-09-15' GROUP BY ALL ORDER BY ALL"
    )
    with fresh_engine.get_client() as client:
        expected = client.query(recompute).result_rows
        client.command("ALTER TABLE analytics.hourly_endpoint_stats DROP PARTITION '2026-09-15'")
        assert client.query(finalized).result_rows == []
    result = materialize(
        [hourly], selection=[hourly_key], partition_key="2026-09-15", resources={"clickhouse": fresh_engine}
    )
    assert result.success
    materialization = result.asset_materializations_for_node(hourly.node_def.name)[0]
    assert materialization.partition == "2026-09-15"
    assert materialization.metadata["chmv/method"].value == "replace"
    assert materialization.metadata["chmv/rows_written"].value == len(expected)
    with fresh_engine.get_client() as client:
        assert client.query(finalized).result_rows == expected

    # An unpartitioned target materializes as a whole-table exchange.
    latest = assets[key("entity_latest")]
    result = materialize([latest], selection=[key("entity_latest")], resources={"clickhouse": fresh_engine})
    assert result.success
    assert result.asset_materializations_for_node(latest.node_def.name)[0].metadata["chmv/method"].value == "replace"


def test_chmv_apply_job_runs(tmp_path, example):
    resource = ClickHouseResource(dsn=f"chdb://{Path(tmp_path) / 'chdb'}")
    job = build_definitions(example, clickhouse=resource).get_job_def("chmv_apply")
    assert job.execute_in_process().success
    with resource.get_client() as client:
        names = {r[0] for r in client.query("SELECT name FROM system.tables WHERE database = 'analytics'").result_rows}
    assert {"events_weekly", "mv_events_weekly", "hourly_endpoint_stats_mv", "api_requests"} <= names
    assert job.execute_in_process().success  # idempotent


class WholeErrors(ChmvTranslator):
    """Partitions ``analytics.error_events`` (daily in its DDL) by nothing: rebuilt and checked whole."""

    def get_partitioning(self, loaded, ref: ObjectRef):
        found = super().get_partitioning(loaded, ref)
        if ref != ObjectRef(database="analytics", name="error_events"):
            return found
        return dataclasses.replace(found, grain=None, column=None, keys=(), key_elements=())


def test_the_translators_partitioning_is_the_one_both_halves_read(tmp_path: Path, example) -> None:
    """The hook's partitioning is the Definitions' project's (``translated``): the Dagster half (the asset's
    partitions, its op and its rebuild job) and the SQL half (the plan a run executes, its swaps) read the same object.
    Before, the hook changed only the Dagster partitions: the run decoded no key, and the engine rebuilt per day."""
    engine = make_engine(tmp_path / "chdb", example, rows=3000)
    errors = ObjectRef(database="analytics", name="error_events")
    defs = build_definitions(example, clickhouse=engine, translator=WholeErrors())
    graph = defs.get_repository_def().asset_graph
    assert graph.get(key("error_events")).partitions_def is None  # the Dagster half
    assert graph.get(key("audit_log")).partitions_def is not None  # (the others as their DDL says)
    job = defs.resolve_job_def("chmv_rebuild_unpartitioned")  # its job: the unpartitioned targets'
    assert key("error_events") in job.asset_layer.executable_asset_keys
    recompute = "SELECT timestamp, level, payload FROM analytics.all_events WHERE level = 'error' ORDER BY ALL"
    rows = "SELECT timestamp, level, payload FROM analytics.error_events ORDER BY ALL"
    with engine.get_client() as client:
        expected = client.query(recompute).result_rows
        client.command("TRUNCATE TABLE analytics.error_events")
    result = job.execute_in_process(asset_selection=[key("error_events")], raise_on_error=False)
    assert result.success
    (materialization,) = [m for m in result.get_asset_materialization_events() if m.asset_key == key("error_events")]
    metadata = materialization.materialization.metadata
    assert materialization.materialization.partition is None
    assert "partitioning: unpartitioned" in metadata["chmv/plan"].value  # the SQL half: one whole-table rebuild
    assert metadata["chmv/partitions"].value == 1 and "| all |" in metadata["chmv/progress"].value
    with engine.get_client() as client:
        assert client.query(rows).result_rows == expected and expected
    assert example.partitioning(errors).grain == "day"  # the project as loaded is not changed
