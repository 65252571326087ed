"""Dagster partitions definitions from the parsed partition scheme, and back from keys to partitions.

- a time part alone: time-window partitions of its grain (hourly, daily, weekly from Monday, monthly, and a cron
  schedule for quarters, years and intervals: ``0 */6 * * *`` for ``toStartOfInterval(ts, INTERVAL 6 HOUR)``);
- a time part and a key part: a multi-partitions definition of the windows (dimension ``date``) and of the key's values
  (dimension ``key``, dynamic: the values the server's partitions hold, added by the ``chmv_live_state`` sensor);
- a key part alone: dynamic partitions of its values, likewise.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

from dagster import (
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    HourlyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    PartitionsDefinition,
    TimeWindowPartitionsDefinition,
    WeeklyPartitionsDefinition,
)

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import (
    KEY_DELIMITER,
    PartitionScheme,
    PartitionWindow,
    decode_key,
    in_zone,
    keyed_window,
)

#: The dimensions of a time × key target's multi-partitions (Dagster orders them by name: the window's key first).
TIME_DIMENSION = "date"
KEY_DIMENSION = "key"


def partitions_definition(
    scheme: PartitionScheme, start: str, timezone: str = "UTC", target: ObjectRef | None = None
) -> PartitionsDefinition | None:
    """The Dagster partitions definition for a scheme, starting at ``start`` (``YYYY-MM-DD``).

    Equal arguments return the same (immutable) object: the targets of one grain share it, so Dagster
    compares and hashes one definition instead of thousands of equal ones. A scheme with a key part gets a definition
    of its own (its values are the target's): ``target`` names its dynamic partitions (:func:`dynamic_name`).
    """
    time = _definition(scheme.grain, start, timezone) if scheme.grain is not None else None
    if not scheme.keyed:
        return time
    if target is None:
        raise ValueError(f"the partitions of a key part ({', '.join(scheme.keys)}) are named for their target")
    values = DynamicPartitionsDefinition(name=dynamic_name(target))
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


#: The cron schedule of each grain's windows, for those without a definition class of their own.
_CRONS = {Grain.QUARTER: "0 0 1 */3 *", Grain.YEAR: "0 0 1 1 *"}


@lru_cache(maxsize=256)
def _definition(grain: str | None, start: str, timezone: str) -> TimeWindowPartitionsDefinition | None:
    if grain is None:
        return None
    grain = Grain(grain)
    # the first window is the one holding partition_start (Dagster's windows start at the first boundary on or after
    # the start date: a year target starting 2026-05-01 had no 2026 partition, a week target none for the days before
    # the first Monday)
    start = grain.floor(datetime.fromisoformat(start)).strftime("%Y-%m-%d")
    if grain == Grain.HOUR:
        return HourlyPartitionsDefinition(start_date=f"{start}-00:00", timezone=timezone, end_offset=1)
    if grain == Grain.DAY:
        return DailyPartitionsDefinition(start_date=start, timezone=timezone, end_offset=1)
    if grain == Grain.WEEK:
        return WeeklyPartitionsDefinition(start_date=start, day_offset=1, timezone=timezone, end_offset=1)
    if grain == Grain.MONTH:
        return MonthlyPartitionsDefinition(start_date=start, timezone=timezone, end_offset=1)
    if grain in _CRONS:
        return TimeWindowPartitionsDefinition(
            start, grain.key_format, timezone=timezone, end_offset=1, cron_schedule=_CRONS[grain]
        )
    minutes = grain.seconds // 60
    cron = f"*/{minutes} * * * *" if minutes < 60 else f"0 */{minutes // 60} * * *"
    cron = cron.replace("*/1 ", "* ")
    return TimeWindowPartitionsDefinition(
        f"{start}-00:00", grain.key_format, timezone=timezone, end_offset=1, cron_schedule=cron
    )


def window_for_key(partitions_def: PartitionsDefinition | None, key: str | None) -> PartitionWindow | None:
    """The partition of a Dagster partition key: its ``[start, end)`` window (instants at the offset of the
    definition's zone, as :func:`chmv_assets.ddl.partitioning.window_for_partition_key` decodes the same key) and its
    key values; None for an unpartitioned asset."""
    if key is None or partitions_def is None:
        return None
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return _time_window(partitions_def, key)
    if isinstance(partitions_def, DynamicPartitionsDefinition):
        return keyed_window(decode_key(key))
    if isinstance(partitions_def, MultiPartitionsDefinition):
        keys = key.keys_by_dimension if isinstance(key, MultiPartitionKey) else None
        if keys is None:
            time_key, _, value_key = key.partition(KEY_DELIMITER)
        else:
            time_key, value_key = keys[TIME_DIMENSION], keys[KEY_DIMENSION]
        time = time_partitions_of(partitions_def)
        assert time is not None, "a multi-partitions definition of chmv has a time dimension"
        window = _time_window(time, time_key)
        return PartitionWindow(f"{time_key}{KEY_DELIMITER}{value_key}", window.start, window.end, decode_key(value_key))
    return None


def _time_window(partitions_def: TimeWindowPartitionsDefinition, key: str) -> PartitionWindow:
    tw = partitions_def.time_window_for_partition_key(key)
    zone = partitions_def.timezone
    return PartitionWindow(key=key, start=in_zone(tw.start, zone), end=in_zone(tw.end, zone))
