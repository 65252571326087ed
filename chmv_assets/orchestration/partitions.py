"""Dagster partitions definitions from the parsed partition scheme, and back from keys to time windows."""

from __future__ import annotations

from functools import lru_cache

from dagster import (
    DailyPartitionsDefinition,
    HourlyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    PartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.partitioning import PartitionScheme, PartitionWindow


def partitions_definition(scheme: PartitionScheme, start: str, timezone: str = "UTC") -> TimeWindowPartitionsDefinition | None:
    """The Dagster partitions definition for a scheme, starting at ``start`` (``YYYY-MM-DD``).

    Equal arguments return the same (immutable) object: the targets of one grain share it, so Dagster
    compares and hashes one definition instead of thousands of equal ones.
    """
    return _definition(scheme.grain, start, timezone)


@lru_cache(maxsize=256)
def _definition(grain: str | None, start: str, timezone: str) -> TimeWindowPartitionsDefinition | None:
    if grain == Grain.HOUR:
        return HourlyPartitionsDefinition(start_date=f"{start}-00:00", timezone=timezone, end_offset=1)
    if grain == Grain.DAY:
        return DailyPartitionsDefinition(start_date=start, timezone=timezone, end_offset=1)
    if grain == Grain.MONTH:
        return MonthlyPartitionsDefinition(start_date=start, timezone=timezone, end_offset=1)
    return None


def window_for_key(partitions_def: PartitionsDefinition | None, key: str | None) -> PartitionWindow | None:
    """The ``[start, end)`` window of a time partition key (naive UTC), None for an unpartitioned asset."""
    if key is None or not isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return None
    tw = partitions_def.time_window_for_partition_key(key)
    return PartitionWindow(key=key, start=tw.start.replace(tzinfo=None), end=tw.end.replace(tzinfo=None))
