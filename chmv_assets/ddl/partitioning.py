"""How a target table is partitioned in time, derived from its parsed PARTITION BY (no Dagster, no client).

The Dagster partitions definitions are built from this in ``chmv_assets.orchestration.partitions``;
the windows here use the same keys (``2026-09-01`` for days and months, ``2026-09-01-13:00`` for hours),
so the engine layer can compute the partitions a time range touches without Dagster.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chmv_assets.ddl.grains import PARTITION_FUNCTIONS, Grain
from chmv_assets.ddl.models import MaterializedView, Table

#: Dagster's partition key format per grain.
KEY_FORMATS = {grain: grain.key_format for grain in Grain if grain.is_partition_grain}


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

    grain: Grain | None
    column: str | None = None
    note: str | None = None


def partition_scheme(table: Table, views: tuple[MaterializedView, ...] = ()) -> PartitionScheme:
    """Derive the Dagster partitioning of a target from its parsed PARTITION BY and the MVs that write it."""
    fragment = table.partition_by
    if fragment is None or fragment.sql.strip() in ("tuple()", ""):
        return PartitionScheme(grain=None)
    call = table.partition_call
    grain = None
    if call is not None and call.function is not None:
        grain = PARTITION_FUNCTIONS.get(call.function)
    elif call is not None and (col := table.column(call.column)) is not None and col.data_type.is_date:
        grain = Grain.DAY
    if grain is None or call is None:
        return PartitionScheme(grain=None, note=f"PARTITION BY {fragment.sql} has no time-window equivalent: "
                                                "the asset is unpartitioned and rebuilds the whole table")  # fmt: skip
    column = call.column
    for view in views:
        out = view.output(column)
        if out is not None and out.is_aggregate:
            return PartitionScheme(grain=None, note=f"partition column {column} is an aggregate in {view.ref.fqn}: "
                                                    "the asset is unpartitioned")  # fmt: skip
    return PartitionScheme(grain=grain, column=column)


def floor_to_grain(value: datetime, grain: str) -> datetime:
    """The start of the partition of ``grain`` that holds ``value``."""
    return Grain(grain).floor(value)


def next_start(start: datetime, grain: str) -> datetime:
    """The start of the partition after the one starting at ``start``."""
    return Grain(grain).next_start(start)


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


def window_for_partition_key(grain: str, key: str) -> PartitionWindow:
    """The window of a Dagster partition key of ``grain`` (``2026-09-01``, ``2026-09-01-13:00``).

    Raises:
        ValueError: The key is not in the grain's format.
    """
    start = datetime.strptime(key, KEY_FORMATS[grain])
    if floor_to_grain(start, grain) != start:
        raise ValueError(f"{key} is not the start of a {grain} partition")
    return window_at(start, grain)
