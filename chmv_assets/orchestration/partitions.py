"""Dagster partitions definitions from a target's partitioning (:class:`~chmv_assets.ddl.partitioning.TargetPartitioning`).

- a time part alone: time-window partitions named by its time shape's cron schedule and key format (hourly ``0 * * *
  *``, daily, weekly from Monday, monthly, quarterly ``0 0 1 */3 *``, ``0 */6 * * *`` for ``toStartOfInterval(ts,
  INTERVAL 6 HOUR)``…: :mod:`chmv_assets.ddl.shapes`);
- a time part and a key part: a multi-partitions definition of the windows (dimension ``date``) and of the key's values
  (dimension ``key``, dynamic: the values the server's partitions hold, added by the ``chmv_live_state`` sensor);
- a key part alone: dynamic partitions of its values, likewise.

Keys are decoded by the partitioning itself (:meth:`~chmv_assets.ddl.partitioning.TargetPartitioning.window`), never
through Dagster: one codec for Dagster's runs, the CLI, the sweep and recovery.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

from dagster import (
    DynamicPartitionsDefinition,
    MultiPartitionsDefinition,
    PartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import TargetPartitioning
from chmv_assets.ddl.shapes import TimeShape

#: The dimensions of a time × key target's multi-partitions (Dagster orders them by name: the window's key first).
TIME_DIMENSION = "date"
KEY_DIMENSION = "key"


def partitions_definition(partitioning: TargetPartitioning) -> PartitionsDefinition | None:
    """The Dagster partitions definition of a target's partitioning (from its ``start``, in its ``zone``).

    Equal time shapes, starts and zones return the same (immutable) object: the targets of one grain share it, so
    Dagster compares and hashes one definition instead of thousands of equal ones. A partitioning with a key part gets a
    definition of its own (its values are the target's): its target names its dynamic partitions
    (:func:`dynamic_name`).
    """
    p = partitioning
    time = _definition(p.time, p.start, p.zone) if p.time is not None else None
    if not p.keyed:
        return time
    if p.target is None:
        raise ValueError(f"the partitions of a key part ({', '.join(p.keys)}) are named for their target")
    values = DynamicPartitionsDefinition(name=dynamic_name(p.target))
    if time is None:
        return values
    return MultiPartitionsDefinition({TIME_DIMENSION: time, KEY_DIMENSION: values})


def dynamic_name(target: ObjectRef) -> str:
    """The name of the dynamic partitions holding the key values of ``target`` (``chmv:db.table``)."""
    return f"chmv:{target.fqn}"


def dynamic_partitions_of(partitions_def: PartitionsDefinition | None) -> DynamicPartitionsDefinition | None:
    """The dynamic partitions of a definition (its key dimension), None for time windows or none."""
    if isinstance(partitions_def, DynamicPartitionsDefinition):
        return partitions_def
    if isinstance(partitions_def, MultiPartitionsDefinition):
        found = partitions_def.get_partitions_def_for_dimension(KEY_DIMENSION)
        return found if isinstance(found, DynamicPartitionsDefinition) else None
    return None


def time_partitions_of(partitions_def: PartitionsDefinition | None) -> TimeWindowPartitionsDefinition | None:
    """The time windows of a definition (its time dimension), None without."""
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return partitions_def
    if isinstance(partitions_def, MultiPartitionsDefinition):
        found = partitions_def.get_partitions_def_for_dimension(TIME_DIMENSION)
        return found if isinstance(found, TimeWindowPartitionsDefinition) else None
    return None


@lru_cache(maxsize=256)
def _definition(shape: TimeShape, start: str, timezone: str) -> TimeWindowPartitionsDefinition:
    """The windows of ``shape`` from the one holding ``start`` (``YYYY-MM-DD``): Dagster's definition of its cron
    schedule and key format (equal to Dagster's ``HourlyPartitionsDefinition`` and the like where there is one), the
    current window included."""
    # the first window is the one holding partition_start (Dagster's windows start at the first boundary on or after
    # the start date: a year target starting 2026-05-01 had no 2026 partition, a week target none for the days before
    # the first Monday)
    first = shape.grain.floor(datetime.strptime(start, "%Y-%m-%d")).strftime(shape.key_format)
    return TimeWindowPartitionsDefinition(
        first, shape.key_format, timezone=timezone, end_offset=1, cron_schedule=shape.cron
    )
