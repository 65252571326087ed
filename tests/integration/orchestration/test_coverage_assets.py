"""Through Dagster (`materialize`): a backfill of a month the source lost fails with the refusal; force overrides."""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, materialize

from chmv_assets.orchestration.assets import build_chmv_assets

from support.engines import make_engine
from support.retention import EVENTS_AGG as TABLE
from support.retention import RETENTION, count, raw_events_ttl_project

EVENTS_AGG = AssetKey(["analytics", "events_agg"])
AUG = "toYYYYMM(event_date) = 202608"
KINDS = ["ttl", "drop_partition", "delete"]


@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_a_backfill_of_a_month_the_source_lost_fails_clearly_and_keeps_the_rows(tmp_path, example, kind):
    loaded = raw_events_ttl_project(tmp_path) if kind == "ttl" else example
    engine = make_engine(tmp_path / "chdb", loaded, rows=30_000)
    with engine.get_client() as client:
        client.command(RETENTION[kind], settings={"mutations_sync": 2})
        live = count(client, TABLE, AUG)
    asset = next(a for a in build_chmv_assets(loaded) if hasattr(a, "keys") and EVENTS_AGG in a.keys)
    instance = DagsterInstance.ephemeral()
    result = materialize(
        [asset],
        selection=[EVENTS_AGG],
        partition_key="2026-08-01",
        instance=instance,
        resources={"clickhouse": engine},
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    error = failure.step_failure_data.error.cause  # Dagster wraps the op's own error
    assert error.cls_name == "ChmvError"
    assert error.message.startswith(
        "chmv_assets.errors.ChmvError: rebuild failed for analytics.events_agg: "
        "analytics.events_agg: rebuild refused for 1 partition; nothing was changed"
    )
    since = "2026-09-01" if kind == "drop_partition" else "2026-08-10"
    assert f"analytics.raw_events (it holds data from {since}" in error.message
    assert f"The target partition holds {live:,} rows" in error.message and "force: true" in error.message
    logs = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any("**Coverage**" in m and "| 2026-08-01 | refused |" in m for m in logs)  # the plan, logged
    assert not result.asset_materializations_for_node(asset.node_def.name)
    with engine.get_client() as client:
        assert count(client, TABLE, AUG) == live

    forced = materialize(
        [asset],
        selection=[EVENTS_AGG],
        partition_key="2026-08-01",
        instance=instance,
        resources={"clickhouse": engine},
        run_config={"ops": {asset.node_def.name: {"config": {"force": True}}}},
    )
    assert forced.success
    meta = forced.asset_materializations_for_node(asset.node_def.name)[0].metadata
    assert meta["chmv/method"].value == ("drop" if kind == "drop_partition" else "replace")
    assert "| 2026-08-01 | clickhouse |" in meta["chmv/plan"].value and "forced: " in meta["chmv/plan"].value
    with engine.get_client() as client:
        kept = count(client, TABLE, AUG)
    assert kept < live and (kept == 0) == (kind == "drop_partition")
