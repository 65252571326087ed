"""Every corner of Dagster chmv reaches that is not Dagster's public API, in one place.

chmv needs six things Dagster does not export: an evaluation's link to the materialization it checked (its class is
not exported), the output name of an asset check inside a multi-asset, two readings of the event log's
asset-check index (history and per-partition status), a value kept in the instance that several sensors share
(the daemons' key-value store), and an asset's output that records no materialization (a range run's partitions are
recorded one by one as they are swapped in). Each is wrapped here with the public types it returns, so a
Dagster upgrade that moves one breaks this module and its test (tests/unit/orchestration/test_dagster_compat.py),
not the check, sensor or op code that uses it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetKey,
    AssetsDefinition,
    DagsterInstance,
    Output,
    deserialize_value,
)


def target_materialization_data(record: Any) -> Any:
    """Dagster's ``AssetCheckEvaluationTargetMaterializationData`` for a materialization record (its event log
    entry): what makes a per-partition check evaluation "current" for the partition in the UI.

    The class is not exported by ``dagster``; it is built through the public serdes API from its storage form (the
    event log's persisted format, kept stable across Dagster versions).
    """
    payload = {
        "__class__": "AssetCheckEvaluationTargetMaterializationData",
        "run_id": record.run_id,
        "storage_id": record.storage_id,
        "timestamp": record.timestamp,
    }
    return deserialize_value(json.dumps(payload))


def check_output_name(assets_def: AssetsDefinition, check_key: AssetCheckKey) -> str:
    """The op output that carries ``check_key``'s result in a multi-asset that yields it."""
    return assets_def.get_output_name_for_asset_check_key(check_key)


#: The metadata key Dagster marks an output with whose asset events its op records itself (Dagster's auto-converted
#: source assets log their observations in their body): the output then records no asset event of its own.
_OWN_ASSET_EVENTS = "__source_asset_observation__"


def output_without_materialization(assets_def: AssetsDefinition, key: AssetKey) -> Output:
    """The output of ``key`` in a multi-asset that records no materialization.

    An op that recorded each partition of a range run itself (``context.log_event``, as it was swapped in) still yields
    its asset's output: Dagster skips the steps of the run that depend on the asset (another target's op, the checks'
    op) without it. A plain output records a materialization of every partition of the run, a second one for each;
    Dagster has no public output of some partitions of a range (dagster-io/dagster#21072), so its own marker for an
    output whose asset events the op records itself is used.
    """
    return Output(None, output_name=assets_def.get_output_name_for_asset_key(key), metadata={_OWN_ASSET_EVENTS: True})


def completed_evaluations(instance: DagsterInstance, check_key: AssetCheckKey, scan: int) -> list[AssetCheckEvaluation]:
    """The evaluations of ``check_key`` that completed among its newest ``scan`` executions, newest first.

    Records still planned (a running evaluation) carry an ``AssetCheckEvaluationPlanned`` and are passed over:
    Dagster's record-status enum is not public API, so completion is read from the event.
    """
    records = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=scan)
    return [r.evaluation for r in records if isinstance(r.evaluation, AssetCheckEvaluation)]


@dataclass(frozen=True)
class CheckPartitionStatus:
    """The latest execution of one partition of an asset check, as the event log's index has it."""

    check_key: AssetCheckKey
    partition_key: str | None
    storage_id: int
    status: str  # "SUCCEEDED", "FAILED", "IN_PROGRESS", "SKIPPED", "EXECUTION_FAILED"


def check_partition_statuses(
    instance: DagsterInstance, check_keys: Sequence[AssetCheckKey], after_storage_id: int | None
) -> Iterator[CheckPartitionStatus]:
    """Per check and partition, its latest execution stored after ``after_storage_id`` (one call for all checks)."""
    for info in instance.event_log_storage.get_asset_check_partition_info(
        list(check_keys), after_storage_id=after_storage_id
    ):
        yield CheckPartitionStatus(
            info.check_key,
            info.partition_key,
            info.latest_check_event_storage_id or 0,
            info.latest_execution_status.value,  # the enum is not exported by dagster: its values are stable
        )


def shared_value(instance: DagsterInstance, key: str) -> str | None:
    """The value stored under ``key`` in the instance's key-value store (:func:`store_shared_value`), or None.

    Sensor cursors are each sensor's own; a memory several sensors share (chmv's staleness episodes) is kept here,
    in the store Dagster's daemons keep their cursors in.
    """
    return instance.daemon_cursor_storage.get_cursor_values({key}).get(key)


def store_shared_value(instance: DagsterInstance, key: str, value: str) -> None:
    """Store ``value`` under ``key`` (see :func:`shared_value`)."""
    instance.daemon_cursor_storage.set_cursor_values({key: value})
