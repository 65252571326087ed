"""Time grains: the one list of the granularities chmv knows, and the ClickHouse functions that produce them.

A grain is what a monotone truncation of a time column yields (``toStartOfHour(ts)`` → ``hour``) and what a
time-partitioned target is partitioned by (``toYYYYMM(ts)`` → ``month``). Everything a later layer needs per
grain (its length, its SQL interval, its order, its Dagster partition key format, its windows) is here.
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
    HOUR = "hour"
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
    def is_partition_grain(self) -> bool:
        """Whether a target can be partitioned by it in Dagster (hourly, daily, monthly partitions)."""
        return self in _KEY_FORMATS

    @property
    def key_format(self) -> str:
        """``strftime`` format of Dagster's partition keys for this grain (``2026-09-01-13:00`` for hours).

        Raises:
            ValueError: The grain is not a partition grain.
        """
        if self not in _KEY_FORMATS:
            raise ValueError(f"{self.value!r} is not a partition grain (hour, day or month)")
        return _KEY_FORMATS[self]

    def within(self, other: Grain) -> bool:
        """Whether every window of this grain lies inside one window of ``other`` (an hour within a day).

        A week straddles months and years, so it lies within a week only; anything up to a day lies within a week.
        """
        if self is other:
            return True
        if self is Grain.WEEK:
            return False
        if other is Grain.WEEK:
            return self.order <= Grain.DAY.order
        return self.order <= other.order

    def floor(self, value: datetime) -> datetime:
        """The start of the window of this partition grain that holds ``value``."""
        if self is Grain.HOUR:
            return value.replace(minute=0, second=0, microsecond=0)
        if self is Grain.DAY:
            return value.replace(hour=0, minute=0, second=0, microsecond=0)
        if self is Grain.MONTH:
            return value.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        raise ValueError(f"{self.value!r} is not a partition grain (hour, day or month)")

    def next_start(self, start: datetime) -> datetime:
        """The start of the window after the one starting at ``start`` (a partition grain's boundary)."""
        if self is Grain.HOUR:
            return start + timedelta(hours=1)
        if self is Grain.DAY:
            return start + timedelta(days=1)
        if self is Grain.MONTH:
            return (start.replace(day=28) + timedelta(days=4)).replace(day=1)
        raise ValueError(f"{self.value!r} is not a partition grain (hour, day or month)")


_ORDER = {grain: i for i, grain in enumerate(Grain)}
_SECONDS = {
    Grain.MINUTE: 60, Grain.FIVE_MINUTES: 300, Grain.TEN_MINUTES: 600, Grain.FIFTEEN_MINUTES: 900,
    Grain.HOUR: 3600, Grain.DAY: 86400, Grain.WEEK: 7 * 86400, Grain.MONTH: 31 * 86400,
    Grain.QUARTER: 92 * 86400, Grain.YEAR: 366 * 86400,
}  # fmt: skip
_KEY_FORMATS = {Grain.HOUR: "%Y-%m-%d-%H:%M", Grain.DAY: "%Y-%m-%d", Grain.MONTH: "%Y-%m-%d"}

#: Monotone truncations of a time column, by the grain of their result (for range pruning).
TRUNCATION_FUNCTIONS: dict[str, Grain] = {
    "toStartOfMinute": Grain.MINUTE, "toStartOfFiveMinutes": Grain.FIVE_MINUTES,
    "toStartOfFiveMinute": Grain.FIVE_MINUTES, "toStartOfTenMinutes": Grain.TEN_MINUTES,
    "toStartOfFifteenMinutes": Grain.FIFTEEN_MINUTES, "toStartOfHour": Grain.HOUR, "toDate": Grain.DAY,
    "toDate32": Grain.DAY, "toStartOfDay": Grain.DAY, "toMonday": Grain.WEEK, "toStartOfWeek": Grain.WEEK,
    "toStartOfMonth": Grain.MONTH, "toStartOfQuarter": Grain.QUARTER, "toStartOfYear": Grain.YEAR,
}  # fmt: skip
#: PARTITION BY functions (of one time column) that map onto Dagster time-window partitions.
PARTITION_FUNCTIONS: dict[str, Grain] = {
    "toYYYYMM": Grain.MONTH, "toStartOfMonth": Grain.MONTH, "toDate": Grain.DAY, "toYYYYMMDD": Grain.DAY,
    "toStartOfDay": Grain.DAY, "toStartOfHour": Grain.HOUR,
}  # fmt: skip
