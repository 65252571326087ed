"""Time grains: the one list of the granularities chmv knows, and the ClickHouse functions that produce them.

A grain is what a monotone truncation of a time column yields (``toStartOfHour(ts)`` → ``hour``) and what a
time-partitioned target is partitioned by (``toYYYYMM(ts)`` → ``month``, ``toMonday(d)`` → ``week``,
``toStartOfInterval(ts, INTERVAL 6 HOUR)`` → ``6 hour``). Everything a later layer needs per grain (its length, its
SQL interval, its order, its Dagster partition key format, its windows) is here.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum


class Grain(StrEnum):
    """A time granularity, finest first; values are the strings chmv has always used (``"5 minute"``)."""

    MINUTE = "minute"
    FIVE_MINUTES = "5 minute"
    TEN_MINUTES = "10 minute"
    FIFTEEN_MINUTES = "15 minute"
    THIRTY_MINUTES = "30 minute"
    HOUR = "hour"
    TWO_HOURS = "2 hour"
    THREE_HOURS = "3 hour"
    FOUR_HOURS = "4 hour"
    SIX_HOURS = "6 hour"
    EIGHT_HOURS = "8 hour"
    TWELVE_HOURS = "12 hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    QUARTER = "quarter"
    YEAR = "year"

    @property
    def order(self) -> int:
        """Rank from finest (0, ``minute``) to coarsest."""
        return _ORDER[self]

    @property
    def seconds(self) -> int:
        """The longest a window of this grain can be (a month counts 31 days, a year 366)."""
        return _SECONDS[self]

    @property
    def interval(self) -> str:
        """The ClickHouse interval of one window (``1 HOUR``, ``5 MINUTE``), to write after ``INTERVAL``."""
        count, _, unit = self.value.rpartition(" ")
        return f"{count or 1} {unit.upper()}"

    @property
    def fixed(self) -> bool:
        """Every window has the same length and a day holds a whole number of them (a minute … a day)."""
        return self.order <= Grain.DAY.order

    @property
    def is_partition_grain(self) -> bool:
        """Whether a target can be partitioned by it in Dagster (every grain: a cron schedule names its windows)."""
        return True

    @property
    def key_format(self) -> str:
        """``strftime`` format of Dagster's partition keys for this grain (``2026-09-01-13:00`` below a day,
        ``2026-09-01`` from a day up: a week, a month, a quarter and a year are keyed by their first day)."""
        return "%Y-%m-%d-%H:%M" if self.seconds < Grain.DAY.seconds else "%Y-%m-%d"

    def within(self, other: Grain) -> bool:
        """Whether every window of this grain lies inside one window of ``other`` (an hour within a day).

        Windows of a day or less nest where the longer is a multiple of the shorter (10 minutes do not nest in 15);
        a week straddles months and years, so it lies within a week only; anything up to a day lies within a week,
        a month, a quarter and a year; a month within a quarter and a year, a quarter within a year.
        """
        if self is other:
            return True
        if self.fixed:
            return other.seconds % self.seconds == 0 if other.fixed else True
        if self is Grain.WEEK or other.fixed or other is Grain.WEEK:
            return False
        return _MONTHS[other] % _MONTHS[self] == 0

    def floor(self, value: datetime) -> datetime:
        """The start of the window of this grain that holds ``value`` (weeks start on Monday, as ``toMonday``; windows
        of a day or less are aligned on midnight, as ``toStartOfInterval`` aligns them)."""
        if self.fixed:
            day = value.replace(hour=0, minute=0, second=0, microsecond=0)
            into = (value - day) // timedelta(seconds=self.seconds)
            return day + into * timedelta(seconds=self.seconds)
        day = value.replace(hour=0, minute=0, second=0, microsecond=0)
        if self is Grain.WEEK:
            return day - timedelta(days=day.weekday())
        months = _MONTHS[self]
        return day.replace(month=(value.month - 1) // months * months + 1, day=1)

    def next_start(self, start: datetime) -> datetime:
        """The start of the window after the one starting at ``start`` (a boundary of this grain)."""
        if self.fixed or self is Grain.WEEK:
            return start + timedelta(seconds=self.seconds)
        index = start.year * 12 + start.month - 1 + _MONTHS[self]
        return start.replace(year=index // 12, month=index % 12 + 1, day=1)


_ORDER = {grain: i for i, grain in enumerate(Grain)}
_SECONDS = {
    Grain.MINUTE: 60,
    Grain.FIVE_MINUTES: 300,
    Grain.TEN_MINUTES: 600,
    Grain.FIFTEEN_MINUTES: 900,
    Grain.THIRTY_MINUTES: 1800,
    Grain.HOUR: 3600,
    Grain.TWO_HOURS: 7200,
    Grain.THREE_HOURS: 10800,
    Grain.FOUR_HOURS: 14400,
    Grain.SIX_HOURS: 21600,
    Grain.EIGHT_HOURS: 28800,
    Grain.TWELVE_HOURS: 43200,
    Grain.DAY: 86400,
    Grain.WEEK: 7 * 86400,
    Grain.MONTH: 31 * 86400,
    Grain.QUARTER: 92 * 86400,
    Grain.YEAR: 366 * 86400,
}
_MONTHS = {Grain.MONTH: 1, Grain.QUARTER: 3, Grain.YEAR: 12}

#: Monotone truncations of a time column, by the grain of their result (for range pruning).
TRUNCATION_FUNCTIONS: dict[str, Grain] = {
    "toStartOfMinute": Grain.MINUTE,
    "toStartOfFiveMinutes": Grain.FIVE_MINUTES,
    "toStartOfFiveMinute": Grain.FIVE_MINUTES,
    "toStartOfTenMinutes": Grain.TEN_MINUTES,
    "toStartOfFifteenMinutes": Grain.FIFTEEN_MINUTES,
    "toStartOfHour": Grain.HOUR,
    "toDate": Grain.DAY,
    "toDate32": Grain.DAY,
    "toStartOfDay": Grain.DAY,
    "toMonday": Grain.WEEK,
    "toStartOfWeek": Grain.WEEK,
    "toStartOfMonth": Grain.MONTH,
    "toStartOfQuarter": Grain.QUARTER,
    "toStartOfYear": Grain.YEAR,
}


def grain_of_interval(count: int, unit: str) -> Grain | None:
    """The grain whose windows are ``INTERVAL count unit`` long and aligned as ClickHouse's ``toStartOfInterval`` aligns
    them (``6 HOUR`` → ``6 hour``, ``3 MONTH`` → ``quarter``, ``1 WEEK`` → ``week``), None for any other interval."""
    unit = unit.upper().removesuffix("S")
    if unit in _CALENDAR:
        months = count * _CALENDAR[unit]
        return next((g for g, m in _MONTHS.items() if m == months), None)
    if unit == "WEEK":
        return Grain.WEEK if count == 1 else None
    seconds = count * _FIXED_UNITS.get(unit, 0)
    return next((g for g in Grain if g.fixed and g.seconds == seconds), None)


_CALENDAR = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_FIXED_UNITS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}
