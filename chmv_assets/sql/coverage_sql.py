"""SQL of the coverage probe: how many rows, from when to when, a table holds per partition window.

One statement answers for every trigger of a target and the target itself (``UNION ALL`` of branches),
each branch reading one table pruned to the windows' ranges. Every branch yields the same columns::

    _chmv_side String, _chmv_i UInt32, _chmv_k Nullable(DateTime), _chmv_n UInt64,
    _chmv_lo Nullable(DateTime), _chmv_hi Nullable(DateTime), _chmv_now DateTime

``side`` says what the row is (a whole table, a window of a source, a window of the target, the deletes a source
recorded), ``i`` which source, ``k`` the window start (None for a whole table), ``n`` the rows, ``lo``/``hi`` the oldest and
newest time. Names only through :mod:`chmv_assets.sql.quoting`; times only as typed literals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from clickhouse_connect.driver.binding import format_query_value

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project
from chmv_assets.ddl.partitioning import PartitionScheme, PartitionWindow, window_instant, window_reach
from chmv_assets.ddl.types import parse_type
from chmv_assets.sql.meta import INGESTION_WATERMARKS
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.time_sql import column_zone, time_sql

#: ClickHouse function flooring a time to the start of its partition window, per grain (any other grain of a day or
#: less: ``toStartOfInterval``, see :func:`floor_sql`).
FLOOR_FUNCTIONS = {
    Grain.MINUTE: "toStartOfMinute",
    Grain.HOUR: "toStartOfHour",
    Grain.DAY: "toStartOfDay",
    Grain.WEEK: "toMonday",
    Grain.MONTH: "toStartOfMonth",
    Grain.QUARTER: "toStartOfQuarter",
    Grain.YEAR: "toStartOfYear",
}


def floor_sql(grain: Grain, expression: str) -> str:
    """``expression`` floored to the start of its ``grain`` window, as :meth:`Grain.floor` floors it."""
    if grain in FLOOR_FUNCTIONS:
        return f"{FLOOR_FUNCTIONS[grain]}({expression})"
    return f"toStartOfInterval({expression}, INTERVAL {grain.interval})"


_NULL_TIME = "CAST(NULL AS Nullable(DateTime))"


@dataclass(frozen=True)
class TimeMapping:
    """How a trigger's rows map onto the target's partition windows (derived from the MV's SELECT).

    Attributes:
        column: The trigger's time column the target's partition column is computed from.
        column_type: Its ClickHouse type.
        grain: The truncation the MV applies (``toStartOfHour(ts)`` → hour), None for the bare column.
        reach: How far past a window's end its rows' own time may lie, i.e. how far before a row's time the window it
            lands in may start (a weekly rollup of a day: the week starting up to 6 days before it):
            :func:`chmv_assets.ddl.partitioning.window_reach`.
    """

    column: str
    column_type: str
    grain: Grain | None
    reach: timedelta

    @property
    def exact(self) -> bool:
        """Every row lands in the window holding its own time (the truncation lies within the partition grain);
        otherwise a window's rows span ``[start, end + reach)``."""
        return not self.reach

    def source_range(self, window: PartitionWindow) -> tuple[datetime, datetime]:
        """``[lo, hi)`` of the trigger's time column holding every row that maps into ``window`` (a timed one)."""
        assert window.start is not None and window.end is not None, window
        return window.start, window.end + self.reach


def time_mapping(view: MaterializedView, project: Project, scheme: PartitionScheme) -> TimeMapping | None:
    """The mapping of ``view``'s trigger rows onto windows, when its partition column is a truncation of one."""
    if scheme.column is None or scheme.grain is None or view.trigger is None:
        return None
    out = view.output(scheme.column)
    source = project.table(view.trigger)
    if out is None or out.truncation is None or source is None:
        return None
    column_name, grain = out.truncation
    column = source.column(column_name)
    if column is None or not column.data_type.is_time:
        return None
    return TimeMapping(column.name, column.type, grain, window_reach(view, scheme))


#: The bucket coverage looks at inside a window of each partition grain (a source's hole inside a window).
SUB_GRAINS = {Grain.MONTH: Grain.DAY, Grain.DAY: Grain.HOUR}


def sub_grain_of(grain: Grain | None, mappings: Sequence[TimeMapping], target_type: str | None) -> Grain | None:
    """The bucket inside a window at which a source's rows and the target's rows can be compared, or None.

    Every trigger's rows must land in the window of their own time (exact mappings), and the target's partition
    column must keep the bucket's resolution: a truncation no coarser than the bucket, and no ``Date`` column for
    hours. Then a bucket where the target holds rows and no trigger does is rows a trigger lost.
    """
    sub = SUB_GRAINS.get(grain) if grain is not None else None
    if sub is None or not mappings or not all(m.exact for m in mappings):
        return None
    if any(m.grain is not None and m.grain.seconds > sub.seconds for m in mappings):
        return None
    types = [m.column_type for m in mappings] + ([target_type] if target_type else [])
    if sub is Grain.HOUR and any(parse_type(t).is_date for t in types):
        return None
    return sub


def _branch(
    side: str,
    index: int,
    table: ObjectRef,
    *,
    key: str,
    column: str | None,
    where: str | None = None,
    grouped: bool = False,
) -> str:
    # Aliases carry a prefix no column has, so a column called ``n`` or ``k`` is never shadowed by one.
    lo = f"CAST(toDateTime(min({quote(column)})) AS Nullable(DateTime))" if column else _NULL_TIME
    hi = f"CAST(toDateTime(max({quote(column)})) AS Nullable(DateTime))" if column else _NULL_TIME
    sql = (
        f"SELECT '{side}' AS _chmv_side, toUInt32({index}) AS _chmv_i, {key} AS _chmv_k, count() AS _chmv_n, "
        f"{lo} AS _chmv_lo, {hi} AS _chmv_hi, now() AS _chmv_now FROM {qualified(table)}"
    )
    if where:
        sql += f" WHERE {where}"
    if grouped:
        sql += f" GROUP BY {key}"
    return sql


def table_branch(side: str, index: int, table: ObjectRef, column: str | None) -> str:
    """Rows, oldest and newest time of a whole table (answered from part metadata when it can be)."""
    return _branch(side, index, table, key=_NULL_TIME, column=column)


def windows_branches(
    side: str,
    index: int,
    table: ObjectRef,
    column: str,
    column_type: str,
    grain: Grain,
    ranges: Sequence[tuple[datetime, datetime, datetime]],
    *,
    zone: str,
    bucketed: bool,
    sub_grain: Grain | None = None,
) -> list[str]:
    """Per-window rows, oldest and newest time of ``column`` in ``table``.

    Args:
        grain: The partition grain; with ``bucketed`` each row is counted in the window its own time
            floors to (one grouped branch), else one branch per window.
        ranges: ``(window start, lo, hi)`` per window: the rows with ``lo <= column < hi`` are the window's.
        zone: The session's time zone (:func:`chmv_assets.engine.clock.session_zone`): the zone of a column that
            declares none. Window bounds (aware) are written as the instants of the column's zone
            (:func:`chmv_assets.ddl.partitioning.window_instant`).
        sub_grain: With ``bucketed``, count the rows per ``sub_grain`` bucket instead (a day of a monthly window):
            the caller folds the buckets into windows and sees which buckets hold rows (:func:`sub_grain_of`).
    """
    name = quote(column)
    own = column_zone(column_type, zone)

    def value(bound: datetime) -> str:
        return time_sql(window_instant(bound, own), column_type, zone)

    def bounds(lo: datetime, hi: datetime) -> str:
        return f"({name} >= {value(lo)} AND {name} < {value(hi)})"

    if bucketed:
        where = " OR ".join(bounds(lo, hi) for _start, lo, hi in ranges)
        key = f"CAST(toDateTime({floor_sql(sub_grain or grain, name)}) AS Nullable(DateTime))"
        return [_branch(side, index, table, key=key, column=column, where=where, grouped=True)]
    return [
        _branch(
            side,
            index,
            table,
            key=f"CAST({time_sql(window_instant(start, zone), 'DateTime', zone)} AS Nullable(DateTime))",
            column=column,
            where=bounds(lo, hi),
        )
        for start, lo, hi in ranges
    ]


def watermark_branch(side: str, index: int, source: ObjectRef, *, legacy: bool = False) -> str:
    """The newest ingestion watermark of a source (``_chmv_lo``; NULL when there is none).

    Args:
        legacy: Read it from the legacy ``chmv_meta.watermarks`` (before ``chmv apply`` migrated it into typed
            tables: :mod:`chmv_assets.sql.meta`).
    """
    newest = "CAST(toDateTime(argMax(watermark, version), 'UTC') AS Nullable(DateTime))"
    relation = f"({INGESTION_WATERMARKS.legacy})" if legacy else qualified(INGESTION_WATERMARKS.ref)
    return (
        f"SELECT '{side}' AS _chmv_side, toUInt32({index}) AS _chmv_i, {_NULL_TIME} AS _chmv_k, "
        f"count() AS _chmv_n, {newest} AS _chmv_lo, {_NULL_TIME} AS _chmv_hi, now() AS _chmv_now "
        f"FROM {relation} WHERE source = {format_query_value(source.fqn)}"
    )


def deletes_branches(index: int, table: ObjectRef) -> list[str]:
    """What the server records of deletes from ``table`` that may not have shown in its row counts: the mutations it
    still lists that delete (``ALTER … DELETE``; a lightweight ``DELETE FROM``, recorded as ``UPDATE _row_exists =
    0``), and its active patch parts (a lightweight delete or update in ``lightweight_update`` mode, not listed as a
    mutation); per branch (side ``x``: the mutations, ``p``: the patch parts) how many, and the oldest and newest of
    their ``create_time``/``modification_time``."""
    where = f"database = {format_query_value(table.database)} AND table = {format_query_value(table.name)}"
    deleting = "(positionCaseInsensitive(command, 'DELETE') > 0 OR position(command, '_row_exists') > 0)"
    return [
        f"SELECT '{side}' AS _chmv_side, toUInt32({index}) AS _chmv_i, {_NULL_TIME} AS _chmv_k, count() AS _chmv_n, "
        f"CAST(min({column}) AS Nullable(DateTime)) AS _chmv_lo, CAST(max({column}) AS Nullable(DateTime)) AS _chmv_hi, "
        f"now() AS _chmv_now FROM {system} WHERE {where} AND {condition}"
        for side, system, column, condition in (
            ("x", "system.mutations", "create_time", deleting),
            ("p", "system.parts", "modification_time", "active AND startsWith(name, 'patch-')"),
        )
    ]


def union(branches: Sequence[str]) -> str:
    """The probe statement: every branch, ``UNION ALL``."""
    return " UNION ALL ".join(f"({b})" for b in branches)
