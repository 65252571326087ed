"""ChmvTranslator: each hook's decision, the spec assembled from them, and a subclass changing one hook."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from dagster import (
    AssetKey,
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionsDefinition,
    TableColumn,
    TableColumnDep,
    TableColumnLineage,
)

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.orchestration.translator import ChmvTranslator

from support.ddl import load_ddl, ref

NOW = datetime(2026, 9, 17, 12, tzinfo=UTC)


def key(name: str) -> AssetKey:
    return AssetKey(["analytics", name])


@pytest.fixture(scope="module")
def translator() -> ChmvTranslator:
    return ChmvTranslator()


DICT_DDL = """
CREATE TABLE d.users (id UInt64, name String) ENGINE = MergeTree ORDER BY id;
-- Users by id.
CREATE DICTIONARY d.user_dict (id UInt64, name String) PRIMARY KEY id
    SOURCE(CLICKHOUSE(TABLE 'users' DB 'd')) LAYOUT(HASHED()) LIFETIME(MIN 0 MAX 300);
CREATE TABLE d.events (ts DateTime, user_id UInt64, k String) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE d.named (ts DateTime, name String COMMENT 'the user name', n UInt64 DEFAULT 1 COMMENT 'always one')
ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY ts TTL ts + INTERVAL 1 YEAR;
CREATE MATERIALIZED VIEW d.named_mv TO d.named AS
SELECT ts, dictGet('d.user_dict', 'name', user_id) AS name FROM d.events;
CREATE TABLE d.by_key (ts DateTime, k String) ENGINE = MergeTree PARTITION BY (toYYYYMM(ts), k) ORDER BY ts;
CREATE MATERIALIZED VIEW d.by_key_mv TO d.by_key AS SELECT ts, k FROM d.events;
"""


@pytest.fixture(scope="module")
def dicts(tmp_path_factory):
    return load_ddl(
        tmp_path_factory.mktemp("dicts"), DICT_DDL, toml='default_database = "d"\npartition_start = "2026-09-01"'
    )


def test_asset_key_and_group(translator):
    target = ref("analytics.events_daily")
    assert translator.get_asset_key(target) == key("events_daily")
    assert translator.get_group_name(target) == "analytics"


@pytest.mark.parametrize(
    ("target", "dagsters", "first"),
    [
        ("analytics.hourly_endpoint_stats", DailyPartitionsDefinition("2026-08-01", end_offset=1), "2026-08-01"),
        ("analytics.error_events", DailyPartitionsDefinition("2026-08-01", end_offset=1), "2026-08-01"),
        ("analytics.requests_enriched", MonthlyPartitionsDefinition("2026-08-01", end_offset=1), "2026-08-01"),
        ("analytics.events_weekly", MonthlyPartitionsDefinition("2026-08-01", end_offset=1), "2026-08-01"),
        ("analytics.entity_latest", None, None),
    ],
    ids=["toDate", "toYYYYMMDD", "toYYYYMM", "chain-end-monthly", "unpartitioned"],
)
def test_partitions_def_per_target(example, translator, target, dagsters, first):
    definition = translator.get_partitions_def(example, ref(target))
    spec = translator.get_asset_spec(example, ref(target))
    if dagsters is None:
        assert definition is None and spec.partitions_def is None
        return
    assert definition == dagsters  # Dagster's own class of the grain (its cron schedule): equal
    assert definition.get_first_partition_key() == first
    assert spec.partitions_def == definition


def test_a_source_table_is_an_unpartitioned_spec_without_deps(example, translator):
    spec = translator.get_asset_spec(example, ref("analytics.api_requests"))
    assert (spec.key, spec.deps, spec.partitions_def, spec.group_name) == (key("api_requests"), [], None, "analytics")
    assert spec.kinds == {"clickhouse", "table"}
    assert spec.description == "Pre-aggregation (seed 001): hourly endpoint statistics as AggregatingMergeTree states."


@pytest.mark.parametrize(
    ("target", "upstream"),
    [
        ("analytics.hourly_endpoint_stats", ["api_requests"]),
        ("analytics.events_agg", ["raw_events"]),
        ("analytics.events_daily", ["events_agg"]),
        ("analytics.events_weekly", ["events_daily"]),
    ],
    ids=["source", "chain-start", "chain-hop", "chain-end"],
)
def test_upstream_deps(example, translator, target, upstream):
    spec = translator.get_asset_spec(example, ref(target))
    assert [d.asset_key for d in spec.deps] == [key(u) for u in upstream]


def test_upstream_deps_include_dictionaries_and_a_dictionary_depends_on_its_table(dicts, translator):
    named = translator.get_asset_spec(dicts, ref("d.named"))
    assert [(d.asset_key, d.partition_mapping) for d in named.deps] == [
        (AssetKey(["d", "events"]), None),
        (AssetKey(["d", "user_dict"]), None),
    ]
    dictionary = translator.get_asset_spec(dicts, ref("d.user_dict"))
    assert [d.asset_key for d in dictionary.deps] == [AssetKey(["d", "users"])]
    assert dictionary.kinds == {"clickhouse", "dictionary"}
    assert dictionary.partitions_def is None
    assert dictionary.description == "Users by id."
    assert [c.name for c in dictionary.metadata["dagster/column_schema"].columns] == ["id", "name"]


def test_a_chain_hop_maps_a_daily_partition_onto_its_monthly_upstream(example, translator):
    daily, monthly = ref("analytics.events_daily"), ref("analytics.events_agg")
    (dep,) = translator.get_asset_spec(example, daily).deps
    assert dep.partition_mapping is not None
    assert translator.get_partition_mapping(example, monthly, ref("analytics.raw_events")) is None
    downstream_def = translator.get_partitions_def(example, daily)
    upstream_def = translator.get_partitions_def(example, monthly)
    result = dep.partition_mapping.get_upstream_mapped_partitions_result_for_partitions(
        downstream_def.empty_subset().with_partition_keys(["2026-09-05"]),
        downstream_def,
        upstream_def,
        current_time=NOW,
    )
    assert list(result.partitions_subset.get_partition_keys()) == ["2026-09-01"]


def test_metadata_of_a_target(example, translator):
    target = ref("analytics.hourly_endpoint_stats")
    table = example.project.table(target)
    meta = translator.get_asset_spec(example, target).metadata
    assert meta["chmv/object"] == "analytics.hourly_endpoint_stats"
    assert meta["chmv/chain_depth"] == 1
    assert meta["chmv/ddl"].value == f"```sql\n{table.statement}\n```"
    assert meta["chmv/ddl_file"].endswith("examples/ddl/10_api_requests.sql:15:1")
    assert meta["chmv/engine"] == "AggregatingMergeTree"
    assert meta["chmv/order_by"] == "(endpoint, hour)"
    assert meta["chmv/partition_by"] == "toDate(hour)"
    assert "chmv/ttl" not in meta and "chmv/partitioning_note" not in meta
    assert "**analytics.hourly_endpoint_stats_mv** (" in meta["chmv/materialized_views"].value
    assert [(c.name, c.type) for c in meta["dagster/column_schema"].columns] == [
        ("hour", "DateTime"),
        ("endpoint", "String"),
        ("request_count", "AggregateFunction(sum, UInt64)"),
        ("unique_users", "AggregateFunction(uniq, UInt64)"),
        ("p99_response", "AggregateFunction(quantile(0.99), UInt32)"),
    ]
    assert meta["dagster/column_lineage"] == TableColumnLineage(
        deps_by_column={
            "hour": [TableColumnDep(asset_key=key("api_requests"), column_name="timestamp")],
            "endpoint": [TableColumnDep(asset_key=key("api_requests"), column_name="endpoint")],
            "unique_users": [TableColumnDep(asset_key=key("api_requests"), column_name="user_id")],
            "p99_response": [TableColumnDep(asset_key=key("api_requests"), column_name="response_time_ms")],
        }
    )


@pytest.mark.parametrize(
    ("target", "field", "expected"),
    [
        ("analytics.entity_latest", "chmv/engine", "ReplacingMergeTree(updated_at)"),
        ("analytics.error_events", "chmv/ttl", "timestamp + INTERVAL 5 YEAR"),
        ("analytics.events_daily", "chmv/chain_depth", 2),
        ("analytics.events_weekly", "chmv/chain_depth", 3),
        ("analytics.raw_events", "chmv/chain_depth", 0),
    ],
    ids=["engine-arguments", "ttl", "chain-depth-2", "chain-depth-3", "source-depth-0"],
)
def test_metadata_fields(example, translator, target, field, expected):
    assert translator.get_metadata(example, ref(target))[field] == expected


def test_metadata_column_comments_defaults_and_dictionary_lineage(dicts, translator):
    meta = translator.get_metadata(dicts, ref("d.named"))
    assert meta["dagster/column_schema"].columns == [
        TableColumn(name="ts", type="DateTime"),
        TableColumn(name="name", type="String", description="the user name"),
        TableColumn(name="n", type="UInt64", description="DEFAULT 1 — always one"),
    ]
    assert meta["dagster/column_lineage"].deps_by_column["ts"] == [
        TableColumnDep(asset_key=AssetKey(["d", "events"]), column_name="ts")
    ]
    assert meta["chmv/ttl"] == "ts + INTERVAL 1 YEAR"


def test_a_window_and_a_key_are_multi_partitions_of_the_windows_and_the_key_values(dicts, translator):
    target = ref("d.by_key")
    spec = translator.get_asset_spec(dicts, target)
    assert isinstance(spec.partitions_def, MultiPartitionsDefinition)
    dimensions = {d.name: d.partitions_def for d in spec.partitions_def.partitions_defs}
    assert dimensions["date"] == MonthlyPartitionsDefinition(dicts.config.partition_start, end_offset=1)
    assert dimensions["key"] == DynamicPartitionsDefinition(name="chmv:d.by_key")
    assert "chmv/partitioning_note" not in spec.metadata
    assert spec.metadata["chmv/partition_by"] == "(toYYYYMM(ts), k)"
    # the upstream's windows are the time dimension's: each window's partitions depend on that window
    assert translator.get_partition_mapping(dicts, target, ref("d.events")) is None  # not ingested: no partitions


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            "analytics.hourly_endpoint_stats",
            "Hourly request count, unique users and p99 latency per endpoint.\n\nWritten by `analytics.hourly_endpoint_stats_mv`.",
        ),
        ("analytics.audit_log", "Audit trail, kept forever.\n\nWritten by `analytics.audit_mv`."),
        ("analytics.counter", "Device readings with daily min/max/avg states (seed 002)."),
    ],
    ids=["target", "target-with-a-trailing-comment-line", "source"],
)
def test_description(example, translator, target, expected):
    assert translator.get_description(example, ref(target)) == expected


def test_description_none_without_comment_or_views(dicts, translator):
    assert translator.get_description(dicts, ref("d.users")) is None
    assert translator.get_description(dicts, ref("d.named")) == "Written by `d.named_mv`."


class PrefixedTranslator(ChmvTranslator):
    def get_asset_key(self, ref: ObjectRef) -> AssetKey:
        return AssetKey(["clickhouse", ref.database, ref.name])

    def get_group_name(self, ref: ObjectRef) -> str:
        return "warehouse"


def test_a_subclass_overriding_one_hook_changes_the_spec(example, translator):
    target = ref("analytics.events_daily")
    spec = PrefixedTranslator().get_asset_spec(example, target)
    assert spec.key == AssetKey(["clickhouse", "analytics", "events_daily"])
    assert [d.asset_key for d in spec.deps] == [AssetKey(["clickhouse", "analytics", "events_agg"])]
    assert spec.group_name == "warehouse"
    lineage = spec.metadata["dagster/column_lineage"].deps_by_column
    assert {d.asset_key for deps in lineage.values() for d in deps} == {
        AssetKey(["clickhouse", "analytics", "events_agg"])
    }
    base = translator.get_asset_spec(example, target)
    assert base.key == key("events_daily") and base.group_name == "analytics"
    assert spec.partitions_def == base.partitions_def and spec.description == base.description


DEPENDS_DDL = """
CREATE DATABASE d ENGINE = Atomic;
CREATE TABLE d.src (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.snap (ts DateTime, n UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.report (ts DateTime, n UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.snap_mv REFRESH EVERY 1 HOUR TO d.snap AS SELECT now() AS ts, count() AS n FROM d.src;
CREATE MATERIALIZED VIEW d.report_mv REFRESH EVERY 1 HOUR DEPENDS ON d.snap_mv APPEND TO d.report AS
    SELECT now() AS ts, count() AS n FROM d.src;
"""


def test_a_refreshable_target_depends_on_the_targets_of_what_its_mv_depends_on(tmp_path, translator):
    loaded = load_ddl(tmp_path / "ok", DEPENDS_DDL, toml='default_database = "d"')
    report = translator.get_asset_spec(loaded, ref("d.report"))
    assert [d.asset_key for d in report.deps] == [AssetKey(["d", "src"]), AssetKey(["d", "snap"])]
    # snap_mv DEPENDS ON report_mv too: the first in file order orders the graph, the one closing the loop does not
    looped = DEPENDS_DDL.replace(
        "REFRESH EVERY 1 HOUR TO d.snap", "REFRESH EVERY 1 HOUR DEPENDS ON d.report_mv TO d.snap"
    )
    loaded = load_ddl(tmp_path / "looped", looped, toml='default_database = "d"')
    deps = {
        name: [d.asset_key for d in translator.get_asset_spec(loaded, ref(f"d.{name}")).deps]
        for name in ("snap", "report")
    }
    assert deps == {"snap": [AssetKey(["d", "src"]), AssetKey(["d", "report"])], "report": [AssetKey(["d", "src"])]}
