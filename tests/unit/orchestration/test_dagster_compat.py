"""dagster_compat against the installed Dagster: each corner chmv reaches works as chmv uses it (fails when Dagster
moves one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSpec,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    AssetSpec,
    DagsterEventType,
    DagsterInstance,
    DailyPartitionsDefinition,
    MaterializeResult,
    Output,
    materialize,
    multi_asset,
)

from chmv_assets.orchestration.dagster_compat import (
    check_output_name,
    check_partition_statuses,
    completed_evaluations,
    output_without_materialization,
    shared_value,
    store_shared_value,
    target_materialization_data,
)

DAYS = DailyPartitionsDefinition(start_date="2026-01-01")
KEY = AssetKey("t")
CHECK = AssetCheckKey(KEY, "c")


@multi_asset(specs=[AssetSpec(KEY, partitions_def=DAYS)], check_specs=[AssetCheckSpec("c", asset=KEY)])
def t(context):
    """As chmv's target ops do: the asset, the check's output, then a per-partition evaluation of its own."""
    yield MaterializeResult(asset_key=KEY)
    yield Output(None, output_name=check_output_name(context.assets_def, CHECK))
    record = context.instance.fetch_materializations(AssetRecordsFilter(asset_key=KEY), limit=1).records[0]
    yield AssetCheckEvaluation(
        asset_key=KEY,
        check_name="c",
        passed=context.partition_key != "2026-01-02",
        metadata={"n": 7},
        target_materialization_data=target_materialization_data(record),
        partition=context.partition_key,
    )


@pytest.fixture(scope="module")
def instance():
    instance = DagsterInstance.ephemeral()
    for day in ("2026-01-01", "2026-01-02"):
        assert materialize([t], partition_key=day, instance=instance).success
    return instance


def test_completed_evaluations_read_the_check_history(instance) -> None:
    evaluations = completed_evaluations(instance, CHECK, scan=10)
    assert [e.passed for e in evaluations] == [False, True]  # newest first
    assert evaluations[0].metadata["n"].value == 7


def test_partition_statuses_name_each_partitions_latest_verdict(instance) -> None:
    statuses = {s.partition_key: s for s in check_partition_statuses(instance, [CHECK], after_storage_id=None)}
    assert {p: s.status for p, s in statuses.items()} == {"2026-01-01": "SUCCEEDED", "2026-01-02": "FAILED"}
    assert all(s.check_key == CHECK and s.storage_id > 0 for s in statuses.values())
    newest = max(s.storage_id for s in statuses.values())
    assert not list(check_partition_statuses(instance, [CHECK], after_storage_id=newest))


def test_target_materialization_data_is_dagsters_own_class(instance) -> None:
    record = instance.fetch_materializations(AssetRecordsFilter(asset_key=KEY), limit=1).records[0]
    data = target_materialization_data(record)
    assert type(data).__name__ == "AssetCheckEvaluationTargetMaterializationData"
    assert (data.run_id, data.storage_id) == (record.run_id, record.storage_id)


def test_check_output_name_is_an_output_of_the_op() -> None:
    name = check_output_name(t, CHECK)
    assert name in t.node_def.output_dict


def test_no_other_module_reaches_these_corners() -> None:
    """The seam stays the only one: product code names none of the non-public corners outside dagster_compat."""
    root = Path(__file__).resolve().parents[3]
    corners = (
        "event_log_storage",
        "deserialize_value",
        "get_output_name_for_asset_check_key",
        "dagster._",
        "__source_asset_observation__",
    )
    found = [
        f"{path.relative_to(root)}: {corner}"
        for folder in ("chmv_assets", "asset_checks", "resources", "spark")
        for path in (root / folder).rglob("*.py")
        if path.name != "dagster_compat.py"
        for corner in corners
        if corner in path.read_text()
    ]
    assert not found, found


def test_a_shared_value_is_kept_in_the_instance_for_every_sensor(tmp_path: Path) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))
    assert shared_value(instance, "chmv/x") is None
    store_shared_value(instance, "chmv/x", "one")
    store_shared_value(instance, "chmv/x", "two")
    assert shared_value(instance, "chmv/x") == "two"
    assert shared_value(DagsterInstance.local_temp(str(tmp_path)), "chmv/x") == "two"  # stored, not in memory


UP, DOWN = AssetKey("up"), AssetKey("down")


@multi_asset(specs=[AssetSpec(UP, partitions_def=DAYS)], can_subset=True)
def up(context):
    """As chmv's target ops do in a range run: each partition recorded as it is done, then the output."""
    for day in context.partition_keys[:-1]:  # the last one is not done: not recorded
        context.log_event(AssetMaterialization(asset_key=UP, partition=day, metadata={"day": day}))
    yield output_without_materialization(context.assets_def, UP)


@multi_asset(specs=[AssetSpec(DOWN, partitions_def=DAYS, deps=[UP])], can_subset=True)
def down(context):
    yield MaterializeResult(asset_key=DOWN)


def test_an_output_without_materialization_lets_the_run_go_on_and_records_nothing() -> None:
    """The steps downstream run (Dagster skips them without the output) and each partition has only the
    materialization the op recorded: none for the one it did not."""
    instance = DagsterInstance.ephemeral()
    tags = {"dagster/asset_partition_range_start": "2026-01-01", "dagster/asset_partition_range_end": "2026-01-03"}
    result = materialize([up, down], instance=instance, tags=tags)
    assert result.success
    ups = [e for e in result.get_asset_materialization_events() if e.asset_key == UP]
    assert sorted(e.partition for e in ups) == ["2026-01-01", "2026-01-02"]
    assert all(e.materialization.metadata["day"].value == e.partition for e in ups)
    downs = [e for e in result.get_asset_materialization_events() if e.asset_key == DOWN]
    assert len(downs) == 3  # ran: not skipped
    assert not [e for e in result.all_events if e.event_type == DagsterEventType.STEP_SKIPPED]
    assert instance.get_materialized_partitions(UP) == {"2026-01-01", "2026-01-02"}
