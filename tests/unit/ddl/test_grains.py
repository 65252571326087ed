"""The one grain enum: values, order, lengths, intervals, partition keys and windows."""

from __future__ import annotations

from datetime import datetime

import pytest

from chmv_assets.ddl.grains import PARTITION_FUNCTIONS, TRUNCATION_FUNCTIONS, Grain


def test_values_are_the_strings_chmv_has_always_used() -> None:
    assert [g.value for g in Grain] == ["minute", "5 minute", "10 minute", "15 minute", "hour", "day", "week",
                                        "month", "quarter", "year"]  # fmt: skip
    assert Grain("5 minute") is Grain.FIVE_MINUTES and Grain.HOUR == "hour"


def test_order_and_seconds_grow_together() -> None:
    grains = list(Grain)
    assert [g.order for g in grains] == list(range(len(grains)))
    assert [g.seconds for g in grains] == sorted(g.seconds for g in grains)
    assert Grain.HOUR.seconds == 3600 and Grain.MONTH.seconds == 31 * 86400


@pytest.mark.parametrize(("grain", "interval"), [(Grain.MINUTE, "1 MINUTE"), (Grain.FIVE_MINUTES, "5 MINUTE"),
                                                 (Grain.FIFTEEN_MINUTES, "15 MINUTE"), (Grain.HOUR, "1 HOUR"),
                                                 (Grain.QUARTER, "1 QUARTER"), (Grain.YEAR, "1 YEAR")])  # fmt: skip
def test_interval(grain: Grain, interval: str) -> None:
    assert grain.interval == interval


def test_within() -> None:
    assert Grain.HOUR.within(Grain.DAY) and Grain.DAY.within(Grain.MONTH) and Grain.MONTH.within(Grain.MONTH)
    assert Grain.FIVE_MINUTES.within(Grain.HOUR) and Grain.DAY.within(Grain.WEEK)
    assert not Grain.DAY.within(Grain.HOUR)
    assert not Grain.WEEK.within(Grain.MONTH) and not Grain.WEEK.within(Grain.YEAR)
    assert not Grain.MONTH.within(Grain.WEEK)


def test_partition_grains_keys_and_windows() -> None:
    assert [g for g in Grain if g.is_partition_grain] == [Grain.HOUR, Grain.DAY, Grain.MONTH]
    at = datetime(2026, 12, 31, 13, 45, 10)
    assert Grain.HOUR.floor(at) == datetime(2026, 12, 31, 13) and Grain.HOUR.next_start(datetime(2026, 12, 31, 23)) == datetime(2027, 1, 1)
    assert Grain.DAY.floor(at) == datetime(2026, 12, 31) and Grain.DAY.next_start(datetime(2026, 12, 31)) == datetime(2027, 1, 1)
    assert Grain.MONTH.floor(at) == datetime(2026, 12, 1) and Grain.MONTH.next_start(datetime(2026, 12, 1)) == datetime(2027, 1, 1)
    assert Grain.MONTH.next_start(datetime(2026, 1, 1)) == datetime(2026, 2, 1)
    assert datetime(2026, 9, 1, 13).strftime(Grain.HOUR.key_format) == "2026-09-01-13:00"
    assert datetime(2026, 9, 1).strftime(Grain.MONTH.key_format) == "2026-09-01"
    with pytest.raises(ValueError, match="not a partition grain"):
        _ = Grain.WEEK.key_format
    with pytest.raises(ValueError, match="not a partition grain"):
        Grain.YEAR.floor(at)


def test_function_tables_map_onto_the_enum() -> None:
    assert TRUNCATION_FUNCTIONS["toStartOfHour"] is Grain.HOUR and TRUNCATION_FUNCTIONS["toMonday"] is Grain.WEEK
    assert PARTITION_FUNCTIONS["toYYYYMM"] is Grain.MONTH and PARTITION_FUNCTIONS["toYYYYMMDD"] is Grain.DAY
    assert all(g.is_partition_grain for g in PARTITION_FUNCTIONS.values())
