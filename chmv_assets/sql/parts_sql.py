"""SQL of chmv's reads of ``system.parts``: the one place that writes them (run by :mod:`chmv_assets.engine.parts`).

Every read here takes the **active** parts only (a merged part stays listed, inactive, until it is removed) of the
tables bound as ``{dbs:Array(String)}`` × ``{names:Array(String)}`` (pairs are matched by the caller: the filter may
return a few rows of other pairs), or of every table of ``{dbs:Array(String)}``. An MV without TO keeps its rows in an
inner table (``.inner_id.<uuid>``, ``.inner.<name>``): with ``inner``, those tables are read too, and the MVs' uuids
come back in the same statement (:func:`inner_views_branch`) so the caller maps them back.

Time is the parts' min/max index of the partition key's time column, read as **wall seconds**
(:mod:`chmv_assets.engine.clock`): ``min_time``/``max_time`` for a ``DateTime`` key, else ``min_date``/``max_date`` (a
``Date`` key: the first day's midnight to the last day's last second); 0 when the key has no time. The oldest row's
time is read as an instant too (``first_instant``, Unix seconds of ``min_time``; 0 for a ``Date`` key or none): it tells
the two wall-clock hours of a fall-back night apart, which wall seconds do not. The partition's
value is ``system.parts.partition`` as the server prints it (``202609``, ``(202609,'eu')``, ``tuple()``).
"""

from __future__ import annotations

from chmv_assets.sql.time_sql import wall_seconds_sql

#: The filter on the bound tables' active parts.
ACTIVE = "active AND database IN {dbs:Array(String)} AND table IN {names:Array(String)}"
#: The same, with the inner tables of the bound databases' MVs without TO.
ACTIVE_WITH_INNER = (
    "active AND database IN {dbs:Array(String)} AND (table IN {names:Array(String)} OR startsWith(table, '.inner'))"
)
#: The filter on the active parts of every table of the bound databases.
ACTIVE_IN_DATABASES = "active AND database IN {dbs:Array(String)}"

#: The first columns of every row of the statements below: what it is (``'p'``: parts), of which table and partition.
_LEADING = ("kind", "database", "table", "partition_id", "value", "rows")
#: The columns of every row of :func:`parts_sql` (one active part).
PART_COLUMNS = (*_LEADING, "min_block", "max_block", "data_version", "first", "last", "first_instant")
#: The columns of every row of :func:`partitions_sql` (the active parts of one partition, folded).
PARTITION_COLUMNS = (*_LEADING, "parts", "bytes", "newest", "max_block", "first", "last", "first_instant")


def _filter(*, inner: bool, whole_databases: bool) -> str:
    if whole_databases:
        return ACTIVE_IN_DATABASES
    return ACTIVE_WITH_INNER if inner else ACTIVE


def time_span_sql(min_time: str, max_time: str, min_date: str, max_date: str) -> tuple[str, str]:
    """``(first, last)``: ``Int64`` wall seconds of the oldest and newest row by a min/max index; 0 without a time.

    ``min_time`` is 0 (the epoch) when the partition key has no ``DateTime``; then its ``Date`` (``min_date``, the
    epoch when it has none either) is the day's midnight to its last second.
    """
    timed = f"toUnixTimestamp({min_time}) > 0"
    return (
        f"if({timed}, {wall_seconds_sql(min_time)}, toInt64({min_date}) * 86400)",
        f"if({timed}, {wall_seconds_sql(max_time)}, if(toInt64({max_date}) > 0, toInt64({max_date}) * 86400 + 86399, 0))",
    )


def instant_sql(min_time: str) -> str:
    """``Int64`` Unix seconds of the oldest row by a min/max index (an instant); 0 for a key without a ``DateTime``."""
    return f"if(toUnixTimestamp({min_time}) > 0, toInt64(toUnixTimestamp({min_time})), 0)"


def parts_sql(*, inner: bool = False) -> str:
    """One row per active part of the bound tables: :data:`PART_COLUMNS`, ``kind`` ``'p'``."""
    first, last = time_span_sql("min_time", "max_time", "min_date", "max_date")
    return (
        "SELECT 'p' AS kind, database, table, partition_id, partition AS value, rows, "
        "toInt64(min_block_number) AS min_block, toInt64(max_block_number) AS max_block, "
        f"toInt64(data_version) AS version, {first} AS first, {last} AS last, "
        f"{instant_sql('min_time')} AS first_instant "
        f"FROM system.parts WHERE {_filter(inner=inner, whole_databases=False)}"
    )


def partitions_sql(*, inner: bool = False, whole_databases: bool = False) -> str:
    """One row per partition of the bound tables (or of every table of ``{dbs}``), its active parts folded by the
    server: :data:`PARTITION_COLUMNS`, ``kind`` ``'p'``. Rows, parts and bytes are sums; ``newest`` the newest part's
    modification (unix seconds); ``max_block`` the newest block number; the time span is of the parts holding rows
    (an empty part, what a swap or a drop leaves over a range, has no time)."""
    first, last = time_span_sql(
        "minIf(min_time, rows > 0)",
        "maxIf(max_time, rows > 0)",
        "minIf(min_date, rows > 0)",
        "maxIf(max_date, rows > 0)",
    )
    return (
        "SELECT 'p' AS kind, database, table, partition_id, any(partition) AS value, sum(rows) AS held_rows, "
        "count() AS held_parts, sum(bytes_on_disk) AS held_bytes, "
        "toInt64(toUnixTimestamp(max(modification_time))) AS newest, "
        f"toInt64(max(max_block_number)) AS max_block, {first} AS first, {last} AS last, "
        f"{instant_sql('minIf(min_time, rows > 0)')} AS first_instant "
        f"FROM system.parts WHERE {_filter(inner=inner, whole_databases=whole_databases)} "
        "GROUP BY database, table, partition_id"
    )


def inner_views_branch(columns: tuple[str, ...]) -> str:
    """A ``UNION ALL`` branch of the statements above: one row ``'m', database, name, uuid`` per MV of
    ``{mv_dbs:Array(String)}`` × ``{mv_names:Array(String)}`` (whose inner table is ``.inner_id.<uuid>``), the other
    ``columns`` empty."""
    return _branch(
        columns,
        "'m'",
        "database",
        "name",
        "toString(uuid)",
        "system.tables WHERE engine = 'MaterializedView' "
        "AND database IN {mv_dbs:Array(String)} AND name IN {mv_names:Array(String)}",
    )


def dictionaries_branch() -> str:
    """A ``UNION ALL`` branch of :func:`partitions_sql`: one row ``'d'`` per dictionary of ``{dict_dbs:Array(String)}``
    × ``{dict_names:Array(String)}``, its loaded state as one partition (``rows``: its elements, ``bytes``: the memory
    it takes, ``newest``: its last successful load)."""
    return _branch(
        PARTITION_COLUMNS,
        "'d'",
        "database",
        "name",
        "''",
        "system.dictionaries WHERE database IN {dict_dbs:Array(String)} AND name IN {dict_names:Array(String)}",
        rows="toUInt64(element_count)",
        bytes="toUInt64(bytes_allocated)",
        newest="toInt64(toUnixTimestamp(last_successful_update_time))",
    )


#: What a column of a ``UNION ALL`` branch holds where the branch has nothing to say (of the first branch's type).
_EMPTY = {
    "value": "''",
    "rows": "toUInt64(0)",
    "parts": "toUInt64(0)",
    "bytes": "toUInt64(0)",
    "newest": "toInt64(0)",
    "min_block": "toInt64(0)",
    "max_block": "toInt64(0)",
    "data_version": "toInt64(0)",
    "first": "toInt64(0)",
    "last": "toInt64(0)",
    "first_instant": "toInt64(0)",
}


def _branch(
    columns: tuple[str, ...], kind: str, database: str, name: str, third: str, source: str, **values: str
) -> str:
    given = {"kind": kind, "database": database, "table": name, "partition_id": third, **values}
    selected = ", ".join(given.get(c) or _EMPTY[c] for c in columns)
    return f"SELECT {selected} FROM {source}"


def part_counts_sql() -> str:
    """Active parts per partition of the bound tables, counted by the server: ``(database, table, partition_id, c)``
    (a subquery of the statement a paced insert looks at the server with, :func:`chmv_assets.sql.health_sql.load_sql`)."""
    return f"SELECT database, table, partition_id, count() AS c FROM system.parts WHERE {ACTIVE} GROUP BY database, table, partition_id"


def newest_per_table_sql() -> str:
    """The newest time of every table of ``{dbs:Array(String)}`` by its parts' min/max index: ``(database, table,
    newest_time, newest_date)`` as the server's ``DateTime`` and ``Date`` (the epoch without one), a subquery of the
    staleness measurement's first statement."""
    return (
        "SELECT database, table, max(max_time) AS newest_time, max(max_date) AS newest_date FROM system.parts "
        f"WHERE {ACTIVE_IN_DATABASES} GROUP BY database, table"
    )


def newer_parts_sql() -> str:
    """The names of the active parts of the bound tables holding a block newer than the partition's watched one:
    ``(database, table, name)``. The watch is bound as ``{keys:Array(String)}`` (``db.table/partition_id``) and
    ``{blocks:Array(UInt64)}``; a partition not watched (indexOf 0: element 0 of an array is its default, 0) has every
    part listed."""
    return (
        f"SELECT database, table, name FROM system.parts WHERE {ACTIVE} AND max_block_number > "
        "{blocks:Array(UInt64)}[indexOf({keys:Array(String)}, concat(database, '.', table, '/', partition_id))]"
    )


__all__ = [
    "PARTITION_COLUMNS",
    "PART_COLUMNS",
    "dictionaries_branch",
    "instant_sql",
    "inner_views_branch",
    "newer_parts_sql",
    "newest_per_table_sql",
    "part_counts_sql",
    "partitions_sql",
    "parts_sql",
    "time_span_sql",
]
