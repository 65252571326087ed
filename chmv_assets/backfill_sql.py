"""SQL that rebuilds a target partition from the MV's own SELECT.

Nothing here re-implements an MV's transform: the verbatim SELECT is executed with its trigger table
swapped for a window of that table (or for staged rows), and its output filtered to one partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dagster import PartitionsDefinition, TimeWindowPartitionsDefinition

from chmv_assets.models import MaterializedView, ObjectRef, Project, Table, qualified, quote
from chmv_assets.partitions import PartitionScheme, interval, time_literal


@dataclass(frozen=True)
class PartitionWindow:
    """One Dagster time partition of a target: ``[start, end)`` in UTC and its key."""

    key: str
    start: datetime
    end: datetime


def window_for_key(partitions_def: PartitionsDefinition | None, key: str | None) -> PartitionWindow | None:
    """The ``[start, end)`` window of a time partition key (naive UTC), None for an unpartitioned asset."""
    if key is None or not isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return None
    tw = partitions_def.time_window_for_partition_key(key)
    return PartitionWindow(key=key, start=tw.start.replace(tzinfo=None), end=tw.end.replace(tzinfo=None))



def partition_expression(target: Table, scheme: PartitionScheme, window: PartitionWindow) -> str:
    """The target's PARTITION BY evaluated on the window start (``toYYYYMM(CAST('2026-09-01' AS Date))``)."""
    assert target.partition_by is not None and scheme.column is not None
    column = target.column(scheme.column)
    literal = time_literal(window.start, column.type if column else "DateTime")
    return target.partition_by.substitute({scheme.column: literal})


def source_range_predicate(view: MaterializedView, project: Project, scheme: PartitionScheme,
                           window: PartitionWindow) -> str | None:  # fmt: skip
    """A range on the trigger's own column that covers every row mapping into the window, for pruning.

    Derivable when the MV computes the partition column as a bare trigger column or a monotone
    truncation of one (``toStartOfHour(ts)``): then ``f(ts) in [start, end)`` implies
    ``ts in [start, end + grain)``. The exact filter is applied on the output as well.
    """
    if scheme.column is None or view.trigger is None:
        return None
    out = view.output(scheme.column)
    if out is None or out.truncation is None:
        return None
    source_column, grain = out.truncation
    source = project.table(view.trigger)
    col = source.column(source_column) if source else None
    if col is None:
        return None
    upper = time_literal(window.end, col.type)
    if grain:
        upper = f"{upper} + {interval(grain)}"
    name = quote(col.name)
    return f"{name} >= {time_literal(window.start, col.type)} AND {name} < {upper}"


def source_relation(project: Project, source: ObjectRef, *, where: str | None = None,
                    relation: str | None = None) -> str:  # fmt: skip
    """A parenthesized subquery standing in for a source table inside the MV's SELECT.

    Args:
        source: The table the MV reads.
        where: A filter on the source's rows.
        relation: What to read instead of the table itself (``file('…', Parquet)``).
    """
    table = project.table(source)
    hidden = [c for c in table.columns if c.default_kind in ("MATERIALIZED", "ALIAS")] if table else []
    columns = ", ".join(["*", *(quote(c.name) for c in hidden)]) if relation is None else "*"
    sql = f"SELECT {columns} FROM {relation or qualified(source)}"
    return f"({sql} WHERE {where})" if where else f"({sql})"


def view_select(view: MaterializedView, project: Project, target: Table, scheme: PartitionScheme,
                window: PartitionWindow | None, *, trigger_where: str | None = None,
                trigger_relation: str | None = None) -> str:  # fmt: skip
    """The MV's own SELECT over the trigger rows of a window, its output filtered to the window's partition.

    Args:
        view: An MV writing into ``target``.
        window: The partition; None rebuilds the whole table.
        trigger_where: An extra filter on trigger rows (a cutoff).
        trigger_relation: Read the trigger's rows from here instead (staged Parquet).
    """
    filters = [f for f in (trigger_where,) if f]
    if window is not None and scheme.grain is not None:
        pruning = source_range_predicate(view, project, scheme, window)
        if pruning:
            filters.append(pruning)
    select = view.select_sql
    if view.trigger is not None and (filters or trigger_relation):
        where = " AND ".join(f"({f})" for f in filters) or None
        select = view.select_with_source(
            view.trigger, source_relation(project, view.trigger, where=where, relation=trigger_relation)
        )
    columns = ", ".join(quote(c.name) for c in view.output_columns)
    sql = f"SELECT {columns} FROM ({select})"
    if window is not None and scheme.grain is not None and target.partition_by is not None:
        sql += f" WHERE ({target.partition_by.sql}) = ({partition_expression(target, scheme, window)})"
    return sql


def insert_sql(shadow: ObjectRef, view: MaterializedView, select: str) -> str:
    """``INSERT INTO shadow (cols) SELECT …``: columns matched by name, as the MV itself writes them."""
    columns = ", ".join(quote(c.name) for c in view.output_columns)
    return f"INSERT INTO {qualified(shadow)} ({columns}) {select}"
