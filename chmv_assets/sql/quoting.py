"""Identifiers and literals rendered into SQL: the only places chmv turns a name or a value into SQL text."""

from __future__ import annotations

from datetime import datetime

from clickhouse_connect.driver.binding import quote_identifier

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import base_type

_DATE_TYPES = ("Date", "Date32")
_INTERVALS = {"minute": "1 MINUTE", "5 minute": "5 MINUTE", "10 minute": "10 MINUTE", "15 minute": "15 MINUTE",
              "hour": "1 HOUR", "day": "1 DAY", "week": "1 WEEK", "month": "1 MONTH", "quarter": "1 QUARTER",
              "year": "1 YEAR"}  # fmt: skip


def quote(identifier: str) -> str:
    """Quote an identifier for ClickHouse with backticks, escaping as clickhouse-connect does."""
    return quote_identifier(identifier)


def qualified(ref: ObjectRef) -> str:
    """``\\`db\\`.\\`name\\``` for a reference: the only way chmv renders a table name into SQL."""
    return f"{quote(ref.database)}.{quote(ref.name)}"


def time_literal(value: datetime, type_sql: str) -> str:
    """A typed SQL literal for a time value, formatted for the column's type (no names involved)."""
    base = base_type(type_sql) or "DateTime"
    if base in _DATE_TYPES:
        return f"CAST('{value:%Y-%m-%d}' AS {base})"
    if base.startswith("DateTime"):
        return f"toDateTime('{value:%Y-%m-%d %H:%M:%S}')"
    return f"'{value:%Y-%m-%d %H:%M:%S}'"


def interval(grain: str | None) -> str | None:
    """``INTERVAL 1 HOUR`` for a truncation grain, None for a bare column."""
    return f"INTERVAL {_INTERVALS[grain]}" if grain else None
