"""The one grain enum: values, order, lengths, intervals, partition keys and windows."""

from __future__ import annotations

from datetime import datetime

import pytest

from chmv_assets.ddl.grains import TRUNCATION_FUNCTIONS, Grain, grain_of_interval


def test_values_are_the_strings_chmv_has_always_used() -> None:
    assert [g.value for g in Grain] == [
        "minute",
        "5 minute",
        "10 minute",
        "15 minute",
        "30 minute",
        "hour",
        "2 hour",
        "3 hour",
        "4 hour",
        "6 hour",
        "8 hour",
        "12 hour",
        "day",
        "week",
        "month",
        "quarter",
        "year",
    ]
    assert Grain("5 minute") is Grain.FIVE_MINUTES and Grain.HOUR == "hour" and Grain("6 hour") is Grain.SIX_HOURS


def test_order_and_seconds_grow_together() -> None:
    grains = list(Grain)
    assert [g.order for g in grains] == list(range(len(grains)))
    assert [g.seconds for g in grains] == sorted(g.seconds for g in grains)
    assert Grain.HOUR.seconds == 3600 and Grain.MONTH.seconds == 31 * 86400


@pytest.mark.parametrize(
    ("grain", "interval"),
    [
        (Grain.MINUTE, "1 MINUTE"),
        (Grain.FIVE_MINUTES, "5 MINUTE"),
        (Grain.FIFTEEN_MINUTES, "15 MINUTE"),
        (Grain.HOUR, "1 HOUR"),
        (Grain.QUARTER, "1 QUARTER"),
        (Grain.YEAR, "1 YEAR"),
    ],
)
def test_interval(grain: Grain, interval: str) -> None:
    assert grain.interval == interval


def test_within() -> None:
    assert Grain.HOUR.within(Grain.DAY) and Grain.DAY.within(Grain.MONTH) and Grain.MONTH.within(Grain.MONTH)
    assert Grain.FIVE_MINUTES.within(Grain.HOUR) and Grain.DAY.within(Grain.WEEK)
    assert not Grain.DAY.within(Grain.HOUR)
    assert not Grain.WEEK.within(Grain.MONTH) and not Grain.WEEK.within(Grain.YEAR)
    assert not Grain.MONTH.within(Grain.WEEK)
    # windows of a day or less nest where the longer is a multiple of the shorter
    assert Grain.FIVE_MINUTES.within(Grain.FIFTEEN_MINUTES) and not Grain.TEN_MINUTES.within(Grain.FIFTEEN_MINUTES)
    assert Grain.TWO_HOURS.within(Grain.SIX_HOURS) and not Grain.FOUR_HOURS.within(Grain.SIX_HOURS)
    assert Grain.EIGHT_HOURS.within(Grain.DAY) and Grain.SIX_HOURS.within(Grain.QUARTER)
    assert (
        Grain.MONTH.within(Grain.QUARTER) and Grain.QUARTER.within(Grain.YEAR) and not Grain.YEAR.within(Grain.QUARTER)
    )


D = datetime


@pytest.mark.parametrize(
    ("grain", "value", "floor", "following"),
    [
        (Grain.MINUTE, D(2026, 12, 31, 23, 59, 59), D(2026, 12, 31, 23, 59), D(2027, 1, 1)),
        (Grain.FIFTEEN_MINUTES, D(2026, 9, 1, 13, 44), D(2026, 9, 1, 13, 30), D(2026, 9, 1, 13, 45)),
        (Grain.THIRTY_MINUTES, D(2026, 9, 1, 23, 31), D(2026, 9, 1, 23, 30), D(2026, 9, 2)),
        (Grain.HOUR, D(2026, 12, 31, 13, 45, 10), D(2026, 12, 31, 13), D(2026, 12, 31, 14)),
        (Grain.SIX_HOURS, D(2026, 9, 1, 17, 59), D(2026, 9, 1, 12), D(2026, 9, 1, 18)),
        (Grain.TWELVE_HOURS, D(2026, 12, 31, 13), D(2026, 12, 31, 12), D(2027, 1, 1)),
        (Grain.DAY, D(2028, 2, 29, 23, 59), D(2028, 2, 29), D(2028, 3, 1)),
        (Grain.WEEK, D(2026, 8, 9, 23), D(2026, 8, 3), D(2026, 8, 10)),  # a Sunday: its week started on Monday
        (Grain.WEEK, D(2026, 12, 30), D(2026, 12, 28), D(2027, 1, 4)),
        (Grain.MONTH, D(2026, 12, 31, 13, 45, 10), D(2026, 12, 1), D(2027, 1, 1)),
        (Grain.QUARTER, D(2026, 9, 30, 23), D(2026, 7, 1), D(2026, 10, 1)),
        (Grain.QUARTER, D(2026, 12, 1), D(2026, 10, 1), D(2027, 1, 1)),
        (Grain.YEAR, D(2028, 2, 29), D(2028, 1, 1), D(2029, 1, 1)),
    ],
    ids=lambda v: str(v),
)
def test_floor_and_next_start_of_every_grain(
    grain: Grain, value: datetime, floor: datetime, following: datetime
) -> None:
    assert grain.floor(value) == floor and grain.next_start(floor) == following
    assert grain.floor(floor) == floor and grain.floor(following) == following


@pytest.mark.parametrize(
    ("count", "unit", "grain"),
    [
        (1, "MINUTE", Grain.MINUTE),
        (15, "MINUTE", Grain.FIFTEEN_MINUTES),
        (30, "MINUTE", Grain.THIRTY_MINUTES),
        (1, "HOUR", Grain.HOUR),
        (60, "MINUTE", Grain.HOUR),
        (6, "HOUR", Grain.SIX_HOURS),
        (1, "DAY", Grain.DAY),
        (24, "HOUR", Grain.DAY),
        (1, "WEEK", Grain.WEEK),
        (1, "MONTH", Grain.MONTH),
        (3, "MONTH", Grain.QUARTER),
        (1, "QUARTER", Grain.QUARTER),
        (12, "MONTH", Grain.YEAR),
        (1, "YEAR", Grain.YEAR),
        (2, "DAY", None),
        (2, "WEEK", None),
        (7, "MINUTE", None),
        (5, "HOUR", None),
        (2, "MONTH", None),
        (2, "YEAR", None),
    ],
)
def test_grain_of_interval(count: int, unit: str, grain: Grain | None) -> None:
    assert grain_of_interval(count, unit) is grain


def test_partition_keys() -> None:
    assert all(g.is_partition_grain for g in Grain)
    assert datetime(2026, 9, 1, 13).strftime(Grain.HOUR.key_format) == "2026-09-01-13:00"
    assert datetime(2026, 9, 1, 12).strftime(Grain.SIX_HOURS.key_format) == "2026-09-01-12:00"
    assert datetime(2026, 9, 1).strftime(Grain.MONTH.key_format) == "2026-09-01"
    assert {g.key_format for g in (Grain.DAY, Grain.WEEK, Grain.QUARTER, Grain.YEAR)} == {"%Y-%m-%d"}


def test_the_truncation_table_maps_onto_the_enum() -> None:
    assert TRUNCATION_FUNCTIONS["toStartOfHour"] is Grain.HOUR and TRUNCATION_FUNCTIONS["toMonday"] is Grain.WEEK
