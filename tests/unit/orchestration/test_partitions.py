"""Dagster partitions definitions agree with the windows the engine layer computes without Dagster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dagster import (
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    HourlyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
)

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import PartitionScheme, PartitionWindow, window_for_partition_key, windows_between
from chmv_assets.orchestration.partitions import (
    dynamic_partitions_of,
    partitions_definition,
    time_partitions_of,
    window_for_key,
)

NOW = datetime(2026, 9, 17, 13, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)

# (grain, partition_start, expected class, first key, last key at NOW: the current partition is included)
GRAINS = [
    ("hour", "2026-09-10", HourlyPartitionsDefinition, "2026-09-10-00:00", "2026-09-17-13:00"),
    ("day", "2026-08-01", DailyPartitionsDefinition, "2026-08-01", "2026-09-17"),
    ("month", "2025-01-01", MonthlyPartitionsDefinition, "2025-01-01", "2026-09-01"),
]


@pytest.mark.parametrize(("grain", "start", "cls", "first", "last"), GRAINS, ids=[g[0] for g in GRAINS])
def test_partitions_definition_per_grain(grain, start, cls, first, last):
    definition = partitions_definition(PartitionScheme(grain=grain, column="ts"), start)
    assert type(definition) is cls
    assert definition.timezone == "UTC"
    keys = definition.get_partition_keys(current_time=NOW)
    assert (keys[0], keys[-1]) == (first, last)


def test_unpartitioned_scheme_has_no_definition():
    assert partitions_definition(PartitionScheme(grain=None), "2026-08-01") is None
    assert partitions_definition(PartitionScheme(grain=None, note="PARTITION BY k …"), "2026-08-01") is None


@pytest.mark.parametrize(
    ("grain", "start"),
    [
        ("hour", "2026-09-10"),
        ("day", "2026-08-01"),
        ("day", "2028-02-20"),
        ("month", "2025-01-01"),
        ("month", "2026-06-15"),
        ("month", "2024-01-31"),
    ],
    ids=["hourly", "daily", "daily-across-leap-day", "monthly", "monthly-start-mid-month", "monthly-start-on-a-31st"],
)
def test_window_for_key_agrees_with_windows_between(grain, start):
    definition = partitions_definition(PartitionScheme(grain=grain, column="ts"), start)
    now = NOW if not start.startswith("2028") else datetime(2028, 3, 2, 5, tzinfo=UTC)
    dagster_windows = [window_for_key(definition, k) for k in definition.get_partition_keys(current_time=now)]
    first = datetime.strptime(start, "%Y-%m-%d")
    ours = windows_between(grain, first, first, now.replace(tzinfo=None))
    assert dagster_windows == ours
    assert len(ours) > 1


#: Both nights of 2026 where New York's clocks change, and a zone without DST (whose offset is not whole hours).
DST_NIGHTS = [
    ("America/New_York", datetime(2026, 11, 1)),  # 01:00-02:00 happens twice
    ("America/New_York", datetime(2026, 3, 8)),  # 02:00-03:00 does not happen
    ("Asia/Kolkata", datetime(2026, 11, 1)),
]


@pytest.mark.parametrize(
    "grain", [Grain.FIFTEEN_MINUTES, Grain.HOUR, Grain.TWO_HOURS, Grain.SIX_HOURS, Grain.DAY, Grain.WEEK, Grain.MONTH]
)
@pytest.mark.parametrize(("zone", "night"), DST_NIGHTS, ids=["fall-back", "spring-forward", "kolkata"])
def test_across_dst_every_key_decodes_to_dagsters_window_and_the_windows_tile_time(grain, zone, night):
    """Dagster's keys of a DST night (``2026-11-01-01:00-0500`` for the second 01:00), the engine's enumeration and
    the engine's decoder of keys are one set of windows; the windows follow each other without a gap or an overlap."""
    first = night - timedelta(days=1) if grain.order <= Grain.DAY.order else night.replace(day=1) - timedelta(days=35)
    until = night + timedelta(days=1, hours=12)
    definition = partitions_definition(PartitionScheme(grain=grain, column="ts"), f"{first:%Y-%m-%d}", zone)
    keys = definition.get_partition_keys(current_time=until.replace(tzinfo=ZoneInfo(zone)))
    ours = windows_between(grain, first, first, until, zone)  # the current window included, as in Dagster
    assert [w.key for w in ours] == keys
    assert [window_for_key(definition, k) for k in keys] == ours
    assert [window_for_partition_key(grain, k, zone) for k in keys] == ours
    assert all(a.end == b.start and a.start < a.end for a, b in zip(ours, ours[1:], strict=False))
    if grain is Grain.HOUR and zone == "America/New_York":
        night_keys = [k for k in keys if k.startswith(f"{night:%Y-%m-%d}-0")][:5]
        if night.month == 11:  # the second 01:00 is a window of its own, named as Dagster names it
            assert night_keys == [
                "2026-11-01-00:00",
                "2026-11-01-01:00",
                "2026-11-01-01:00-0500",
                "2026-11-01-02:00",
            ] + ["2026-11-01-03:00"]
            assert ours[keys.index("2026-11-01-01:00")].end - ours[keys.index("2026-11-01-01:00")].start == HOUR
        else:  # the hour that does not exist has no key
            assert night_keys == ["2026-03-08-00:00", "2026-03-08-01:00", "2026-03-08-03:00", "2026-03-08-04:00"] + [
                "2026-03-08-05:00"
            ]


@pytest.mark.parametrize(
    ("grain", "key", "expected"),
    [
        (
            "hour",
            "2026-09-01-13:00",
            PartitionWindow("2026-09-01-13:00", datetime(2026, 9, 1, 13), datetime(2026, 9, 1, 14)),
        ),
        (
            "hour",
            "2026-09-01-23:00",
            PartitionWindow("2026-09-01-23:00", datetime(2026, 9, 1, 23), datetime(2026, 9, 2)),
        ),
        ("day", "2026-08-31", PartitionWindow("2026-08-31", datetime(2026, 8, 31), datetime(2026, 9, 1))),
        ("month", "2026-02-01", PartitionWindow("2026-02-01", datetime(2026, 2, 1), datetime(2026, 3, 1))),
    ],
    ids=["hour", "last-hour-of-day", "last-day-of-month", "february"],
)
def test_window_for_key(grain, key, expected):
    definition = partitions_definition(PartitionScheme(grain=grain, column="ts"), "2026-01-01")
    window = window_for_key(definition, key)
    assert (window.key, window.wall_start, window.wall_end) == (expected.key, expected.start, expected.end)
    assert window.start == expected.start.replace(tzinfo=UTC) and window.end == expected.end.replace(tzinfo=UTC)


def test_window_for_key_without_time_partitions_is_none():
    daily = partitions_definition(PartitionScheme(grain="day", column="ts"), "2026-01-01")
    assert window_for_key(None, "2026-09-01") is None
    assert window_for_key(daily, None) is None
    assert window_for_key(StaticPartitionsDefinition(["a", "b"]), "a") is None


def test_equal_schemes_share_one_definition():
    """Thousands of targets of one grain share one (immutable) definition instead of thousands of equal ones."""
    daily = partitions_definition(PartitionScheme(grain="day", column="ts"), "2026-01-01")
    assert partitions_definition(PartitionScheme(grain=Grain.DAY, column="other"), "2026-01-01") is daily
    assert partitions_definition(PartitionScheme(grain="day", column="ts"), "2026-02-01") is not daily
    assert partitions_definition(PartitionScheme(grain="day", column="ts"), "2026-01-01", "Europe/Paris") is not daily
    assert partitions_definition(PartitionScheme(grain="month", column="ts"), "2026-01-01") is not daily


@pytest.mark.parametrize("grain", [g for g in Grain if g not in (Grain.HOUR, Grain.DAY, Grain.MONTH)])
def test_every_grain_has_windows_agreeing_with_the_engine_layers(grain: Grain) -> None:
    """Weeks from Monday, quarters, years and intervals: Dagster's cron names the windows chmv computes itself."""
    start = "2026-09-15" if grain.fixed else "2025-01-01"
    definition = partitions_definition(PartitionScheme(grain=grain, column="ts"), start)
    first = datetime.strptime(start, "%Y-%m-%d")
    now = (first + 40.5 * timedelta(seconds=grain.seconds) if grain.fixed else datetime(2028, 3, 2)).replace(tzinfo=UTC)
    dagster_windows = [window_for_key(definition, k) for k in definition.get_partition_keys(current_time=now)]
    assert dagster_windows == windows_between(grain, first, first, now.replace(tzinfo=None))
    assert len(dagster_windows) > 1 and definition.fmt == grain.key_format


def test_a_key_part_gets_multi_or_dynamic_partitions_of_its_own_target() -> None:
    target = ObjectRef(database="d", name="by_region")
    monthly = PartitionScheme(grain="month", column="day", keys=("region",), key_elements=(1,))
    multi = partitions_definition(monthly, "2026-01-01", target=target)
    assert isinstance(multi, MultiPartitionsDefinition)
    assert [d.name for d in multi.partitions_defs] == ["date", "key"]  # the window's key first in "2026-09-01|eu"
    assert time_partitions_of(multi) is partitions_definition(PartitionScheme(grain="month"), "2026-01-01")
    assert dynamic_partitions_of(multi) == DynamicPartitionsDefinition(name="chmv:d.by_region")
    alone = partitions_definition(PartitionScheme(grain=None, keys=("region",)), "2026-01-01", target=target)
    assert alone == DynamicPartitionsDefinition(name="chmv:d.by_region") and time_partitions_of(alone) is None
    with pytest.raises(ValueError, match="named for their target"):
        partitions_definition(monthly, "2026-01-01")


def test_window_for_key_of_multi_and_dynamic_partitions() -> None:
    target = ObjectRef(database="d", name="t")
    multi = partitions_definition(
        PartitionScheme(grain="month", column="day", keys=("region",), key_elements=(1,)), "2026-01-01", target=target
    )
    sep, oct = datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 10, 1, tzinfo=UTC)
    expected = PartitionWindow("2026-09-01|a%7Cb", sep, oct, ("a|b",))
    assert window_for_key(multi, "2026-09-01|a%7Cb") == expected
    assert window_for_key(multi, MultiPartitionKey({"date": "2026-09-01", "key": "a%7Cb"})) == expected
    dynamic = partitions_definition(PartitionScheme(grain=None, keys=("k",)), "2026-01-01", target=target)
    assert window_for_key(dynamic, "acme/eu") == PartitionWindow("acme/eu", None, None, ("acme", "eu"))


@pytest.mark.parametrize(
    ("grain", "start", "first"),
    [
        ("year", "2026-05-01", "2026-01-01"),
        ("quarter", "2026-05-01", "2026-04-01"),
        ("month", "2026-05-15", "2026-05-01"),
        ("week", "2026-05-01", "2026-04-27"),  # a Friday: its week starts on the Monday before
        ("day", "2026-05-01", "2026-05-01"),
    ],
    ids=["year", "quarter", "month", "week", "day"],
)
def test_the_first_partition_holds_partition_start(grain: str, start: str, first: str) -> None:
    """Rows from ``partition_start`` on belong to a partition the UI can materialize: the window holding it comes
    first (a yearly target starting 2026-05-01 had 2027-01-01 as its first key: all of 2026 was unreachable)."""
    pdef = partitions_definition(PartitionScheme(grain=Grain(grain)), start)
    assert pdef is not None and pdef.get_first_partition_key() == first
