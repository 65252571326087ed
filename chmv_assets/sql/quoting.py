"""Identifiers and literals rendered into SQL: the only places chmv turns a name or a value into SQL text (a time value:
:func:`chmv_assets.sql.time_sql.time_sql`)."""

from __future__ import annotations

from clickhouse_connect.driver.binding import format_str, quote_identifier

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import ObjectRef


def quote(identifier: str) -> str:
    """Quote an identifier for ClickHouse with backticks, escaping as clickhouse-connect does."""
    return quote_identifier(identifier)


def string_literal(value: str) -> str:
    """A quoted ClickHouse string literal (``'it\\'s'``), escaped as clickhouse-connect binds strings."""
    return format_str(value)


def qualified(ref: ObjectRef) -> str:
    """``\\`db\\`.\\`name\\``` for a reference: the only way chmv renders a table name into SQL."""
    return f"{quote(ref.database)}.{quote(ref.name)}"


def interval(grain: str | None) -> str | None:
    """``INTERVAL 1 HOUR`` for a truncation grain, None for a bare column."""
    return f"INTERVAL {Grain(grain).interval}" if grain else None
