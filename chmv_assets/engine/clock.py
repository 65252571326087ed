"""Time in chmv: partition windows are wall-clock spans in the zone ClickHouse computes partitions in.

An MV's ``toDate(ts)`` / ``toStartOfHour(ts)`` runs in the column's time zone (``DateTime('Asia/Kolkata')``), or
the server's for a bare ``DateTime``; a target partition ``20260812`` holds the rows of that wall-clock day there.
So chmv keeps a window as a naive ``[start, end)`` of that wall clock (Dagster's partition keys name the same
dates), binds it in SQL as a literal the server reads in the column's zone, and reads every time value back as the
same wall clock (:func:`wall`), whatever the zone of the chmv process (``TZ``) and whichever zone the server has:

- values: every client reads times in the server's zone (``tz_source="server"``); :func:`wall` turns one into
  the naive wall clock of a zone (the server's by default), never into the process's;
- instants: where chmv counts seconds (part min/max indexes in the sweep and the live-state sensor), it counts
  *wall seconds*: the wall clock read as if it were UTC (:func:`wall_seconds`, and
  :func:`chmv_assets.sql.time_sql.wall_seconds_sql` on the server), so a ``Date`` and a ``DateTime`` land on the
  same scale and a window converts with ``.replace(tzinfo=UTC)``;
- now: the server's wall clock (:func:`wall_now`), never ``datetime.now()`` of the process.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from clickhouse_connect.driver.client import Client


def server_zone(client: Client) -> tzinfo:
    """The zone the server computes a bare ``DateTime`` in for this client's session: the ``session_timezone``
    setting when the session sets one, else the server's zone as the client learned it (UTC when it did not say)."""
    try:
        session = client.get_client_setting("session_timezone")
    except (AttributeError, NotImplementedError):
        session = None
    if session:
        try:
            return ZoneInfo(str(session))
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return getattr(client, "server_tz", None) or UTC


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


def wall_now(client: Client) -> datetime:
    """The server's wall clock now (from this process's clock, in the server's zone)."""
    return datetime.now(server_zone(client)).replace(tzinfo=None)


def wall_seconds(moment: datetime) -> int:
    """Wall seconds of a naive wall-clock time: the wall clock read as UTC."""
    return int(moment.replace(tzinfo=UTC).timestamp())


def wall_seconds_now(client: Client) -> float:
    """The server's wall clock now, in wall seconds."""
    return wall_now(client).replace(tzinfo=UTC).timestamp()


def from_wall_seconds(seconds: float) -> datetime:
    """The naive wall-clock time of wall seconds."""
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
