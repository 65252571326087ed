"""Time values in SQL: :func:`time_sql` is the only way a time value chmv holds becomes SQL text.

A value is written with its zone spelled out (``toDateTime('2026-09-01 00:00:00', 'Asia/Kolkata')``), so the server
reads the instant chmv means whatever zone the session, the server or chmv's process is in
(see :mod:`chmv_assets.engine.clock` and docs/configuration.md, "Time zones"):

- a **naive** value is a wall clock: that of the zone the column it meets computes in, its declared zone
  (``DateTime('Asia/Kolkata')``) or, for a bare ``DateTime``, the session's (read from the server once per client,
  :func:`chmv_assets.engine.clock.session_zone`); a partition window is one;
- an **aware** value is an instant (an ingestion watermark, a cutoff, a window bound made the instant of the column's
  zone, :func:`chmv_assets.ddl.partitioning.window_instant`): written as the wall clock of that same zone where that
  wall clock names that instant alone; in an hour a fall-back repeats (``01:30`` twice in New York) or a spring-forward
  skips, as the instant in UTC moved into the column's zone (``toTimeZone(toDateTime('2026-11-01 06:30:00', 'UTC'),
  'America/New_York')``), so the server cannot read it as the other occurrence.

Also here: wall seconds of a part's min/max index, computed on the server.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, tzinfo

from clickhouse_connect.driver.tzutil import resolve_zone

from chmv_assets.ddl.types import parse_type
from chmv_assets.errors import ChmvError
from chmv_assets.sql.quoting import string_literal

#: The type of a UTC instant with microseconds: ingestion watermarks and cutoffs (``chmv_meta`` keeps them so).
UTC_INSTANT = "DateTime64(6, 'UTC')"

_DECLARED = re.compile(r"^DateTime(?:64)?\((?:\s*(?P<precision>\d+)\s*)?,?\s*'(?P<zone>(?:[^'\\]|\\.)+)'\s*\)$")
_PRECISION = re.compile(r"^DateTime64\(\s*(?P<precision>\d+)")


def time_sql(value: datetime | date, type_sql: str, zone: str | None = None) -> str:
    """The SQL of a time value meeting a column of type ``type_sql``, its zone written out.

    Args:
        value: Naive: a wall clock of the column's zone. Aware: an instant. A ``date``: its midnight.
        type_sql: The column's type (``Date``, ``DateTime``, ``DateTime('Asia/Kolkata')``, ``DateTime64(3)``, wrapped
            in ``Nullable``/``LowCardinality`` or not); empty means ``DateTime``.
        zone: The session's time zone (:func:`chmv_assets.engine.clock.session_zone`): the zone of a column that
            declares none. Not needed for a ``Date`` or a column that declares its zone.

    Returns:
        ``CAST('2026-09-01' AS Date)`` for a ``Date``/``Date32``; ``toDateTime('2026-09-01 13:05:07', 'UTC')`` for a
        ``DateTime``; ``toDateTime64('2026-09-01 13:05:07.123456', 3, 'UTC')`` for a ``DateTime64(3)``; a string
        literal for any other type (a time kept as text).

    Raises:
        ChmvError: The column has no declared zone and ``zone`` is None or empty.
    """
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    parsed = parse_type(type_sql or "DateTime")
    zone = declared_zone(type_sql) or zone
    if parsed.is_date and value.tzinfo is None:
        return _date(value, parsed.base)
    if not zone:
        raise ChmvError(
            f"the time zone a {type_sql or 'DateTime'} column computes in is not known: a time value is written with "
            "the session's (chmv_assets.engine.clock.session_zone, read with a client)"
        )
    ambiguous = False
    if value.tzinfo is not None:
        local = value.astimezone(zone_info(zone)).replace(tzinfo=None)
        ambiguous = any(local.replace(tzinfo=zone_info(zone), fold=f) != value for f in (0, 1))
        utc, value = value.astimezone(UTC).replace(tzinfo=None), local
    if parsed.is_date:
        return _date(value, parsed.base)
    if parsed.base and not parsed.is_datetime:
        return string_literal(f"{value:%Y-%m-%d %H:%M:%S}")
    precision = _PRECISION.match(_unwrapped(type_sql))
    if precision is not None:
        digits = int(precision["precision"])
        fraction = f"{value:%f}".ljust(digits, "0")[:digits]
        if ambiguous:
            text = f"{utc:%Y-%m-%d %H:%M:%S}" + (f".{fraction}" if digits else "")
            return f"toTimeZone(toDateTime64('{text}', {digits}, 'UTC'), {string_literal(zone)})"
        text = f"{value:%Y-%m-%d %H:%M:%S}" + (f".{fraction}" if digits else "")
        return f"toDateTime64('{text}', {digits}, {string_literal(zone)})"
    if ambiguous:
        return f"toTimeZone(toDateTime('{utc:%Y-%m-%d %H:%M:%S}', 'UTC'), {string_literal(zone)})"
    return f"toDateTime('{value:%Y-%m-%d %H:%M:%S}', {string_literal(zone)})"


def declared_zone(type_sql: str) -> str | None:
    """The zone a ``DateTime``/``DateTime64`` type declares (``DateTime('Asia/Kolkata')`` → ``Asia/Kolkata``), else
    None (a bare ``DateTime`` computes in the session's zone)."""
    found = _DECLARED.match(_unwrapped(type_sql))
    return found["zone"].replace("\\'", "'") if found else None


def column_zone(type_sql: str, session: str) -> str:
    """The zone a column of ``type_sql`` computes in: its declared zone, else the session's."""
    return declared_zone(type_sql) or session


def zone_info(zone: str) -> tzinfo:
    """The ``tzinfo`` of a zone name as ClickHouse spells it (an IANA name, or ``Fixed/UTC+05:30:00``)."""
    return resolve_zone(zone)


def wall_seconds_sql(expression: str) -> str:
    """``Int64`` wall seconds of a ``DateTime`` expression: its wall clock in its own zone, read as UTC; 0 for the
    epoch (``system.parts`` says ``min_time`` is 0 when the partition key has no time)."""
    unix = f"toUnixTimestamp({expression})"
    return f"toInt64(if({unix} = 0, 0, {unix} + timeZoneOffset({expression})))"


def _date(value: datetime, base: str) -> str:
    return f"CAST('{value:%Y-%m-%d}' AS {base})"


def _unwrapped(type_sql: str) -> str:
    text = parse_type(type_sql).canonical if type_sql else ""
    for wrapper in ("LowCardinality(", "Nullable("):
        while text.startswith(wrapper) and text.endswith(")"):
            text = text[len(wrapper) : -1]
    return text
