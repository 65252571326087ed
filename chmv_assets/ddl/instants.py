"""Instants of a zone's calendar: the arithmetic every partition window's bound goes through (no Dagster, no client).

A window bound is an aware datetime at the UTC offset the partition calendar's zone has then (:func:`in_zone`): its
wall clock is ``bound.replace(tzinfo=None)`` and its offset says which occurrence of a wall time a fall-back repeats
it is (``2026-11-01 01:00-04:00`` and ``01:00-05:00`` in New York). :func:`window_instant` turns a bound into the
instant of the zone a column computes in, for SQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfoNotFoundError

from clickhouse_connect.driver.tzutil import resolve_zone


@lru_cache(maxsize=64)
def zone_info(zone: str) -> tzinfo:
    """The ``tzinfo`` of a zone name as ClickHouse spells it (an IANA name, ``UTC`` and its aliases, or
    ``Fixed/UTC+05:30:00``)."""
    try:
        return resolve_zone(zone)
    except ZoneInfoNotFoundError as err:
        raise ValueError(f"{zone!r} is not a time zone (an IANA name: 'UTC', 'America/New_York')") from err


def in_zone(instant: datetime, zone: str) -> datetime:
    """``instant`` (aware) at the UTC offset ``zone`` has then: the wall clock of ``zone`` and its offset."""
    local = instant.astimezone(UTC).astimezone(zone_info(zone))  # through UTC: a wall clock a gap skips moves on
    return local.replace(tzinfo=timezone(local.utcoffset() or timedelta(0)), fold=0)


def at_wall(wall: datetime, zone: str, fold: int = 0) -> datetime:
    """The instant the wall clock ``wall`` (naive) of ``zone`` names, at its UTC offset (:func:`in_zone`): the first
    occurrence of a time a fall-back repeats (``fold=1``: the second); a time a spring-forward skips is read at the
    offset before it (``02:30`` in New York on 2026-03-08 is ``03:30-04:00``), as ClickHouse reads it."""
    return in_zone(wall.replace(tzinfo=zone_info(zone), fold=fold), zone)


def instant(value: datetime, zone: str, fold: int = 0) -> datetime:
    """An aware value as it is (at ``zone``'s offset), a naive one as a wall clock of ``zone`` (:func:`at_wall`)."""
    return in_zone(value, zone) if value.tzinfo is not None else at_wall(value, zone, fold)


def window_instant(bound: datetime, zone: str) -> datetime:
    """A window bound as the instant of the zone a column computes in: the bound itself where that zone has the same
    offset at the same wall clock (the calendar is that zone: the occurrence is kept), else the bound's wall clock
    read in ``zone``. A naive bound is a wall clock of ``zone``."""
    if bound.tzinfo is None:
        return at_wall(bound, zone)
    wall = bound.replace(tzinfo=None)
    offset = bound.utcoffset()
    for fold in (0, 1):
        candidate = at_wall(wall, zone, fold)
        if candidate.utcoffset() == offset and candidate.replace(tzinfo=None) == wall:
            return candidate
    return at_wall(wall, zone)


def repeated(start: datetime, zone: str) -> bool:
    """``start`` (aware) is the second occurrence of a wall-clock time a fall-back repeats in ``zone``."""
    return at_wall(in_zone(start, zone).replace(tzinfo=None), zone) != start
