"""SQL of a landing-zone load (:mod:`chmv_assets.engine.loads.load`): the staged rows, and the anti-join insert.

The staged Parquet files are read with ``file()``, their path and structure bound as ``{path:String}`` and
``{structure:String}``; the watermark's lower bound, a UTC instant, is written by
:func:`~chmv_assets.sql.time_sql.time_sql`. The insert is the batch's
idempotency: it inserts only the staged rows past the lower bound whose dedup key the source does not hold in the
same window, so a replayed batch inserts nothing twice. Names only through :mod:`chmv_assets.sql.quoting`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.time_sql import UTC_INSTANT, time_sql

#: The staged rows of a batch, as ClickHouse reads them.
STAGED_ROWS = "file({path:String}, Parquet, {structure:String})"


def past_lower_bound(time_column: str, lower: datetime | None) -> str:
    """Rows with event time past ``lower`` (watermark - tolerance: a UTC instant, naive UTC as chmv keeps watermarks),
    whatever zone the session reads the column in; every row when None."""
    if lower is None:
        return "1"
    instant = lower if lower.tzinfo is not None else lower.replace(tzinfo=UTC)
    return f"{quote(time_column)} > {time_sql(instant, UTC_INSTANT)}"


def staged_stats_sql(time_column: str) -> str:
    """Rows staged, their newest and their oldest event time."""
    column = quote(time_column)
    return f"SELECT count(), max({column}), min({column}) FROM {STAGED_ROWS}"


def time_unit(time_column: str, unit: str) -> str:
    """The start of the ``unit`` (``Hour``, ``Day``) of a row's event time, as a Unix timestamp."""
    return f"toUnixTimestamp(toStartOf{unit}({quote(time_column)}))"


def staged_units_sql(unit: str, window: str) -> str:
    """The distinct ``unit`` values (:func:`time_unit`) of the staged rows in ``window``, in time order."""
    return f"SELECT DISTINCT {unit} AS u FROM {STAGED_ROWS} WHERE {window} ORDER BY u"


def in_run(window: str, unit: str, first: int, last: int) -> str:
    """Rows of ``window`` whose ``unit`` lies in the run ``first``…``last`` (one insert of several)."""
    return f"{window} AND {unit} BETWEEN {first} AND {last}"


def count_sql(source: ObjectRef, where: str) -> str:
    """Rows of ``source`` matching ``where``."""
    return f"SELECT count() FROM {qualified(source)} WHERE {where}"


def span_sql(time_column: str, where: str) -> str:
    """The oldest and the newest event time of the staged rows matching ``where``."""
    column = quote(time_column)
    return f"SELECT min({column}), max({column}) FROM {STAGED_ROWS} WHERE {where}"


def newest_sql(time_column: str, where: str) -> str:
    """The newest event time of the staged rows matching ``where``."""
    return f"SELECT max({quote(time_column)}) FROM {STAGED_ROWS} WHERE {where}"


def anti_join_insert_sql(
    source: ObjectRef, columns: Sequence[str], keys: Sequence[str], where: str, window: str
) -> str:
    """Insert the staged rows matching ``where`` whose key (``keys``) ``source`` does not hold in ``window``."""
    cols = ", ".join(quote(c) for c in columns)
    key_sql = "(" + ", ".join(quote(k) for k in keys) + ")"
    return (
        f"INSERT INTO {qualified(source)} ({cols}) SELECT {cols} FROM {STAGED_ROWS} WHERE {where} AND {key_sql} "
        f"NOT IN (SELECT {', '.join(quote(k) for k in keys)} FROM {qualified(source)} WHERE {window})"
    )
