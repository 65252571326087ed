"""Map a target's PARTITION BY onto Dagster partitions and back onto ClickHouse partitions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from dagster import (
    DailyPartitionsDefinition,
    HourlyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from chmv_assets.models import MaterializedView, Table
from chmv_assets.parser import PARTITION_GRAINS

_CALL = re.compile(r"^\s*(\w+)\s*\(\s*(`[^`]+`|\"[^\"]+\"|\w+)\s*\)\s*$")
_BARE = re.compile(r"^\s*(`[^`]+`|\"[^\"]+\"|\w+)\s*$")
_DATE_TYPES = ("Date", "Date32")
_CANONICAL = {"date": "Date", "date32": "Date32", "datetime": "DateTime", "datetime64": "DateTime64"}
_INTERVALS = {"minute": "1 MINUTE", "5 minute": "5 MINUTE", "10 minute": "10 MINUTE", "15 minute": "15 MINUTE",
              "hour": "1 HOUR", "day": "1 DAY", "week": "1 WEEK", "month": "1 MONTH", "quarter": "1 QUARTER",
              "year": "1 YEAR"}  # fmt: skip


@dataclass(frozen=True)
class PartitionScheme:
    """How a target table is partitioned, as far as Dagster is concerned.

    Attributes:
        grain: ``hour``, ``day`` or ``month``; None for an unpartitioned asset.
        column: The target column the PARTITION BY reads.
        note: Why a table with a PARTITION BY is unpartitioned in Dagster, for the asset's metadata.
    """

    grain: str | None
    column: str | None = None
    note: str | None = None


def partition_scheme(table: Table, views: tuple[MaterializedView, ...] = ()) -> PartitionScheme:
    """Derive the Dagster partitioning of a target from its PARTITION BY and the MVs that write it."""
    fragment = table.partition_by
    if fragment is None or fragment.sql.strip() in ("tuple()", ""):
        return PartitionScheme(grain=None)
    call, bare = _CALL.match(fragment.sql), _BARE.match(fragment.sql)
    if call and call.group(1) in PARTITION_GRAINS:
        grain, column = PARTITION_GRAINS[call.group(1)], call.group(2).strip('`"')
    elif bare and (col := table.column(bare.group(1).strip('`"'))) and _base_type(col.type) in _DATE_TYPES:
        grain, column = "day", col.name
    else:
        return PartitionScheme(grain=None, note=f"PARTITION BY {fragment.sql} has no time-window equivalent: "
                                                "the asset is unpartitioned and rebuilds the whole table")  # fmt: skip
    for view in views:
        out = view.output(column)
        if out is not None and out.is_aggregate:
            return PartitionScheme(grain=None, note=f"partition column {column} is an aggregate in {view.ref.fqn}: "
                                                    "the asset is unpartitioned")  # fmt: skip
    return PartitionScheme(grain=grain, column=column)


def partitions_definition(scheme: PartitionScheme, start: str, timezone: str = "UTC") -> TimeWindowPartitionsDefinition | None:
    """The Dagster partitions definition for a scheme, starting at ``start`` (``YYYY-MM-DD``)."""
    if scheme.grain == "hour":
        return HourlyPartitionsDefinition(start_date=f"{start}-00:00", timezone=timezone, end_offset=1)
    if scheme.grain == "day":
        return DailyPartitionsDefinition(start_date=start, timezone=timezone, end_offset=1)
    if scheme.grain == "month":
        return MonthlyPartitionsDefinition(start_date=start, timezone=timezone, end_offset=1)
    return None


def _base_type(type_sql: str) -> str:
    inner = type_sql
    for wrapper in ("LowCardinality(", "Nullable("):
        if inner.startswith(wrapper):
            inner = inner[len(wrapper) : -1]
    base = re.split(r"[(\s]", inner, maxsplit=1)[0]
    return _CANONICAL.get(base.lower(), base)


def time_literal(value: datetime, type_sql: str) -> str:
    """A typed SQL literal for a time value, formatted for the column's type (no names involved)."""
    base = _base_type(type_sql) or "DateTime"
    if base in _DATE_TYPES:
        return f"CAST('{value:%Y-%m-%d}' AS {base})"
    if base.startswith("DateTime"):
        return f"toDateTime('{value:%Y-%m-%d %H:%M:%S}')"
    return f"'{value:%Y-%m-%d %H:%M:%S}'"


def interval(grain: str | None) -> str | None:
    """``INTERVAL 1 HOUR`` for a truncation grain, None for a bare column."""
    return f"INTERVAL {_INTERVALS[grain]}" if grain else None


def window_days(start: datetime, end: datetime) -> float:
    return (end - start) / timedelta(days=1)
