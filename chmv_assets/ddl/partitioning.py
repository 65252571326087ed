"""How a target table is partitioned in time, derived from its parsed PARTITION BY (no Dagster, no client).

The Dagster partitions definitions are built from this in ``chmv_assets.orchestration.partitions``;
the windows here use the same keys (``2026-09-01`` for days and months, ``2026-09-01-13:00`` for hours),
so the engine layer can compute the partitions a time range touches without Dagster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from chmv_assets.ddl.models import MaterializedView, Table
from chmv_assets.ddl.parser import PARTITION_GRAINS

_CALL = re.compile(r"^\s*(\w+)\s*\(\s*(`[^`]+`|\"[^\"]+\"|\w+)\s*\)\s*$")
_BARE = re.compile(r"^\s*(`[^`]+`|\"[^\"]+\"|\w+)\s*$")
_DATE_TYPES = ("Date", "Date32")
_CANONICAL = {"date": "Date", "date32": "Date32", "datetime": "DateTime", "datetime64": "DateTime64"}
#: Dagster's partition key format per grain.
KEY_FORMATS = {"hour": "%Y-%m-%d-%H:%M", "day": "%Y-%m-%d", "month": "%Y-%m-%d"}


@dataclass(frozen=True)
class PartitionWindow:
    """One time partition of a target: ``[start, end)`` in naive UTC and its key."""

    key: str
    start: datetime
    end: datetime


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
    elif bare and (col := table.column(bare.group(1).strip('`"'))) and base_type(col.type) in _DATE_TYPES:
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


def base_type(type_sql: str) -> str:
    """The type name without LowCardinality/Nullable wrappers and parameters (``DateTime64``)."""
    inner = type_sql
    for wrapper in ("LowCardinality(", "Nullable("):
        if inner.startswith(wrapper):
            inner = inner[len(wrapper) : -1]
    base = re.split(r"[(\s]", inner, maxsplit=1)[0]
    return _CANONICAL.get(base.lower(), base)


def floor_to_grain(value: datetime, grain: str) -> datetime:
    """The start of the partition of ``grain`` that holds ``value``."""
    if grain == "hour":
        return value.replace(minute=0, second=0, microsecond=0)
    if grain == "day":
        return value.replace(hour=0, minute=0, second=0, microsecond=0)
    return value.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_start(start: datetime, grain: str) -> datetime:
    """The start of the partition after the one starting at ``start``."""
    if grain == "hour":
        return start + timedelta(hours=1)
    if grain == "day":
        return start + timedelta(days=1)
    return (start.replace(day=28) + timedelta(days=4)).replace(day=1)


def window_at(start: datetime, grain: str) -> PartitionWindow:
    """The window of ``grain`` starting at ``start`` (a partition boundary), with its Dagster key."""
    return PartitionWindow(key=start.strftime(KEY_FORMATS[grain]), start=start, end=next_start(start, grain))


def windows_between(grain: str, first_start: datetime, since: datetime, until: datetime) -> list[PartitionWindow]:
    """The partitions of ``grain`` (none before ``first_start``) whose windows intersect ``[since, until]``.

    As in Dagster's time-window partitions, the first partition starts at the first boundary at or after
    ``first_start`` (a monthly ``partition_start = "2026-08-15"`` starts at ``2026-09-01``).
    """
    first = floor_to_grain(first_start, grain)
    if first < first_start:
        first = next_start(first, grain)
    cursor = floor_to_grain(max(since, first), grain)
    out = []
    while cursor <= until:
        out.append(window_at(cursor, grain))
        cursor = next_start(cursor, grain)
    return out
