"""Every time-partitioned dependency maps by time window and allows upstream partitions that do not exist yet.

Without that, Dagster refuses to launch a backfill of the current month of a monthly target whose upstream
is a daily ingestion asset ("depends on non-existent partitions"); tests/scenarios/test_ui.py launches them for real.
"""

from __future__ import annotations

from dagster import TimeWindowPartitionMapping, TimeWindowPartitionsDefinition

from chmv_assets.orchestration.definitions import build_definitions
from resources.clickhouse import ClickHouseResource

from support.checks import TRANSLATOR


def test_time_partitioned_dependencies_allow_future_upstream_partitions(example, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CHMV_LANDING_DIR", str(tmp_path))  # a landing zone: the sources are daily ingestion assets
    graph = (
        build_definitions(example, clickhouse=ClickHouseResource(dsn="chdb:///nonexistent"))
        .get_repository_def()
        .asset_graph
    )
    pairs = []
    for target in example.project.targets:
        node = graph.get(TRANSLATOR.get_asset_key(target))
        for parent in node.parent_keys:
            if isinstance(node.partitions_def, TimeWindowPartitionsDefinition) and isinstance(
                graph.get(parent).partitions_def, TimeWindowPartitionsDefinition
            ):
                mapping = graph.get_partition_mapping(node.key, parent)
                assert isinstance(mapping, TimeWindowPartitionMapping), (node.key, parent, mapping)
                assert mapping.allow_nonexistent_upstream_partitions, (node.key, parent)
                pairs.append((node.key.path[-1], parent.path[-1]))
    # monthly over daily ingestion, daily over daily, daily over a monthly target, monthly over a daily target
    assert {
        ("counter_daily", "counter"),
        ("error_events", "all_events"),
        ("events_daily", "events_agg"),
        ("events_weekly", "events_daily"),
    } <= set(pairs)
