"""Time in chmv: partition windows are wall-clock spans in the zone ClickHouse computes partitions in.

An MV's ``toDate(ts)`` / ``toStartOfHour(ts)`` runs in the column's time zone (``DateTime('Asia/Kolkata')``), or
the session's (the server's, unless ``session_timezone`` says otherwise) for a bare ``DateTime``; a target partition
``20260812`` holds the rows of that wall-clock day there. So chmv keeps a window as a ``[start, end)`` of that
wall clock with the calendar's UTC offset (Dagster's partition keys name the same dates; the offset tells the two hours
of a fall-back night apart: :class:`chmv_assets.ddl.partitioning.PartitionWindow`), writes it into SQL with that zone
spelled out
(:func:`chmv_assets.sql.time_sql.time_sql`, the only way a time value reaches SQL, given :func:`session_zone`, read
from the server once per client), and reads every time value back as the same wall clock (:func:`wall`), whatever
the zone of the chmv process (``TZ``), of the server or of the session:

- values: every client reads times in the server's zone (``tz_source="server"``); :func:`wall` turns one into
  the naive wall clock of a zone (the session's, :func:`server_zone`), never into the process's;
- instants: where chmv counts seconds (part min/max indexes in the sweep and the live-state sensor), it counts
  *wall seconds*: the wall clock read as if it were UTC (:func:`wall_seconds`, and
  :func:`chmv_assets.sql.time_sql.wall_seconds_sql` on the server), so a ``Date`` and a ``DateTime`` land on the
  same scale and a window converts with ``.replace(tzinfo=UTC)``; ingestion watermarks and cutoffs are UTC instants;
- now: the server's wall clock (:func:`wall_now`), never ``datetime.now()`` of the process.

``timezone`` in chmv.toml is the zone of Dagster's partition calendar only (when a partition opens and closes); it
never reaches SQL (docs/configuration.md, "Time zones"; :func:`calendar_mismatch`).
"""

from __future__ import annotations

import weakref
from datetime import UTC, date, datetime, tzinfo

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.partitioning import at_wall, in_zone, window_instant
from chmv_assets.sql.time_sql import zone_info

#: The session zone of each open client, read once (:func:`session_zone`).
_SESSION_ZONES: weakref.WeakKeyDictionary[Client, str] = weakref.WeakKeyDictionary()


def session_zone(client: Client) -> str:
    """The zone this client's session computes a bare ``DateTime`` in (``SELECT timezone()``: the ``session_timezone``
    setting where the session or the user's profile sets one, else the server's), read from the server once per client.

    It is the zone of every wall-clock value chmv holds for a bare ``DateTime`` column (its partition windows), and
    :func:`chmv_assets.sql.time_sql.time_sql` writes it into every time literal for such a column.
    """
    zone = _SESSION_ZONES.get(client)
    if zone is None:
        zone = str(client.command("SELECT timezone()")).strip()
        _SESSION_ZONES[client] = zone
    return zone


def server_zone(client: Client) -> tzinfo:
    """The ``tzinfo`` of :func:`session_zone`: what values read back are turned into the wall clock of."""
    return zone_info(session_zone(client))


def wall(value: datetime | date | None, zone: tzinfo | None = None) -> datetime | None:
    """A time value read from the server as the naive wall clock of ``zone`` (default: the value's own zone).

    clickhouse-connect returns a time aware (in the server's zone) or naive in UTC (a UTC server); a ``date`` is
    its midnight.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day)
    if zone is None:
        return value.replace(tzinfo=None)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(zone).replace(tzinfo=None)


def calendar_instant(value: datetime | date | None, session: str, calendar: str) -> datetime | None:
    """A time value read from the server as a partition window's bound is (aware, at the partition calendar's offset:
    :class:`chmv_assets.ddl.partitioning.PartitionWindow`): the same instant where the calendar is the session's zone,
    so the second of a repeated hour stays the second; else the session's wall clock read in the calendar, as windows
    are written into SQL (:func:`chmv_assets.ddl.partitioning.window_instant`). A naive value is UTC (a UTC server);
    a ``date`` is its midnight."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        return at_wall(datetime(value.year, value.month, value.day), calendar)
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return window_instant(in_zone(moment, session), calendar)


def wall_now(client: Client) -> datetime:
    """The server's wall clock now (from this process's clock, in the server's zone)."""
    return datetime.now(server_zone(client)).replace(tzinfo=None)


def wall_seconds(moment: datetime) -> int:
    """Wall seconds of a naive wall-clock time: the wall clock read as UTC."""
    return int(moment.replace(tzinfo=UTC).timestamp())


def from_wall_seconds(seconds: float) -> datetime:
    """The naive wall-clock time of wall seconds."""
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def calendar_mismatch(client: Client, calendar: str) -> str | None:
    """What to tell the user when chmv.toml's ``timezone`` (the zone of Dagster's partition calendar) is not the
    session's (the zone ClickHouse computes bare ``DateTime`` partitions in); None when they agree.

    The windows chmv rebuilds and checks stay the server's either way (:mod:`chmv_assets.sql.time_sql`); what differs
    is when Dagster opens and closes a partition.
    """
    session = session_zone(client)
    if session == calendar or zone_info(session) == zone_info(calendar):  # UTC's aliases are one zone
        return None
    return (
        f"chmv.toml has timezone = {calendar!r} but ClickHouse computes partitions of a bare DateTime in {session!r} "
        f"(SELECT timezone()): Dagster opens and closes each partition at {calendar} midnight while ClickHouse does at "
        f"{session} midnight (the rows chmv rebuilds and checks are the server's either way); set timezone = "
        f"{session!r} in chmv.toml (docs/configuration.md, Time zones)"
    )
