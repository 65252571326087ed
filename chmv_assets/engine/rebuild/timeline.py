"""Calendar arithmetic on naive UTC times for every grain, and the horizon of a TTL rule.

Windows of every grain are :class:`~chmv_assets.ddl.grains.Grain`'s; here the months of an interval and a TTL's
horizon.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import TtlRule

_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_FIXED = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 7 * 86400}


def add_months(value: datetime, months: int) -> datetime:
    """``value`` moved by whole months, the day clamped to the month's last (as ClickHouse does)."""
    index = value.year * 12 + value.month - 1 + months
    year, month = divmod(index, 12)
    month += 1
    following = datetime(year + (month == 12), month % 12 + 1, 1)
    last_day = (following - timedelta(days=1)).day
    return value.replace(year=year, month=month, day=min(value.day, last_day))


def shift(value: datetime, count: int, unit: str) -> datetime:
    """``value + INTERVAL count unit`` (a negative count goes back)."""
    if unit in _MONTHS:
        return add_months(value, count * _MONTHS[unit])
    return value + timedelta(seconds=count * _FIXED[unit])


def floor(value: datetime, grain: Grain) -> datetime:
    """The start of the ``grain`` window holding ``value`` (weeks start on Monday): :meth:`Grain.floor`."""
    return grain.floor(value)


def next_start(start: datetime, grain: Grain) -> datetime:
    """The start of the ``grain`` window after the one starting at ``start``: :meth:`Grain.next_start`."""
    return grain.next_start(start)


def ttl_horizon(rule: TtlRule, now: datetime) -> datetime | None:
    """The time before which ``rule`` has expired every row (rows with ``column < horizon``), None if unknown.

    A row expires when ``f(column) + interval <= now``: for the bare column that is ``column <= now - interval``;
    for a truncation ``f`` of grain ``g`` it is ``column < floor_g(now - interval) + g``.
    """
    if rule.column is None or rule.interval is None:
        return None
    count, unit = rule.interval
    base = shift(now, -count, unit)
    if rule.truncation is None:
        return base
    return next_start(floor(base, rule.truncation), rule.truncation)
