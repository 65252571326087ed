"""Dagster partitions definitions agree with the windows the engine layer computes without Dagster: Dagster's own
windows of its keys (read here through Dagster, the one place that does) are the partitioning's."""

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
    TimeWindowPartitionsDefinition,
    WeeklyPartitionsDefinition,
)

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import (
    PartitionWindow,
    TargetPartitioning,
    in_zone,
    window_for_partition_key,
    windows_between,
)
from chmv_assets.ddl.shapes import TimeShape, time_shapes
from chmv_assets.orchestration.partitions import dynamic_partitions_of, partitions_definition, time_partitions_of

NOW = datetime(2026, 9, 17, 13, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)


def calendar(grain, start: str = "1970-01-01", zone: str = "UTC", **fields) -> TargetPartitioning:
    """A partitioning of ``grain`` (None: none) from ``start`` in ``zone``."""
    return TargetPartitioning(grain=Grain(grain) if grain else None, start=start, zone=zone, **fields)


def window_for_key(definition, key: str) -> PartitionWindow:
    """Dagster's own window of a key of a time-window definition: what the partitioning's decoder must agree with."""
    tw = definition.time_window_for_partition_key(key)
    return PartitionWindow(key, in_zone(tw.start, definition.timezone), in_zone(tw.end, definition.timezone))


# (grain, partition_start, Dagster's own definition of it, first key, last key at NOW: the current one included)
GRAINS = [
    (
        "hour",
        "2026-09-10",
        HourlyPartitionsDefinition("2026-09-10-00:00", end_offset=1),
        "2026-09-10-00:00",
        "2026-09-17-13:00",
    ),
    ("day", "2026-08-01", DailyPartitionsDefinition("2026-08-01", end_offset=1), "2026-08-01", "2026-09-17"),
    (  # partition_start a Saturday: the first week is the one holding it
        "week",
        "2026-08-01",
        WeeklyPartitionsDefinition("2026-07-27", day_offset=1, end_offset=1),
        "2026-07-27",
        "2026-09-14",
    ),
    ("month", "2025-01-01", MonthlyPartitionsDefinition("2025-01-01", end_offset=1), "2025-01-01", "2026-09-01"),
]


@pytest.mark.parametrize(("grain", "start", "dagsters", "first", "last"), GRAINS, ids=[g[0] for g in GRAINS])
def test_partitions_definition_per_grain(grain, start, dagsters, first, last):
    """Every time shape's definition is Dagster's ``TimeWindowPartitionsDefinition`` of its cron schedule: equal to
    Dagster's own class of the grain where there is one (Dagster compares, hashes and snapshots them alike)."""
    definition = partitions_definition(calendar(grain, start, column="ts"))
    assert type(definition) is TimeWindowPartitionsDefinition and definition == dagsters
    assert hash(definition) == hash(dagsters) and definition.timezone == "UTC"
    keys = definition.get_partition_keys(current_time=NOW)
    assert (keys[0], keys[-1]) == (first, last)
    assert keys == dagsters.get_partition_keys(current_time=NOW)


def test_unpartitioned_scheme_has_no_definition():
    assert partitions_definition(calendar(None, "2026-08-01")) is None
    assert partitions_definition(calendar(None, "2026-08-01", note="PARTITION BY k …")) is None


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
    definition = partitions_definition(calendar(grain, start, column="ts"))
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
    definition = partitions_definition(calendar(grain, f"{first:%Y-%m-%d}", zone, column="ts"))
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
    window = calendar(grain, "2026-01-01", column="ts").window(key)
    assert (window.key, window.wall_start, window.wall_end) == (expected.key, expected.start, expected.end)
    assert window.start == expected.start.replace(tzinfo=UTC) and window.end == expected.end.replace(tzinfo=UTC)


def test_window_of_no_key_or_of_an_unpartitioned_target_is_none():
    assert calendar("day", "2026-01-01").window_of(None) is None
    assert calendar(None).window_of("2026-09-01") is None


def test_equal_schemes_share_one_definition():
    """Thousands of targets of one grain share one (immutable) definition instead of thousands of equal ones."""
    daily = partitions_definition(calendar("day", "2026-01-01", column="ts"))
    assert partitions_definition(calendar(Grain.DAY, "2026-01-01", column="other")) is daily
    assert partitions_definition(calendar("day", "2026-02-01", column="ts")) is not daily
    assert partitions_definition(calendar("day", "2026-01-01", "Europe/Paris", column="ts")) is not daily
    assert partitions_definition(calendar("month", "2026-01-01", column="ts")) is not daily


@pytest.mark.parametrize("shape", time_shapes(), ids=lambda s: s.grain.value)
def test_every_time_shape_has_windows_agreeing_with_the_engine_layers(shape: TimeShape) -> None:
    """Every registered time shape (hours, days, weeks from Monday, months, quarters, years, intervals): Dagster's
    windows of its cron schedule are the windows chmv computes itself."""
    grain = shape.grain
    start = "2026-09-15" if grain.fixed else "2025-01-01"
    definition = partitions_definition(calendar(grain, start, column="ts"))
    first = datetime.strptime(start, "%Y-%m-%d")
    now = (first + 40.5 * timedelta(seconds=grain.seconds) if grain.fixed else datetime(2028, 3, 2)).replace(tzinfo=UTC)
    dagster_windows = [window_for_key(definition, k) for k in definition.get_partition_keys(current_time=now)]
    assert dagster_windows == windows_between(grain, first, first, now.replace(tzinfo=None))
    assert len(dagster_windows) > 1 and definition.fmt == grain.key_format and definition.cron_schedule == shape.cron


def test_a_key_part_gets_multi_or_dynamic_partitions_of_its_own_target() -> None:
    target = ObjectRef(database="d", name="by_region")
    monthly = calendar("month", "2026-01-01", column="day", keys=("region",), key_elements=(1,), target=target)
    multi = partitions_definition(monthly)
    assert isinstance(multi, MultiPartitionsDefinition)
    assert [d.name for d in multi.partitions_defs] == ["date", "key"]  # the window's key first in "2026-09-01|eu"
    assert time_partitions_of(multi) is partitions_definition(calendar("month", "2026-01-01"))
    assert dynamic_partitions_of(multi) == DynamicPartitionsDefinition(name="chmv:d.by_region")
    alone = partitions_definition(calendar(None, "2026-01-01", keys=("region",), target=target))
    assert alone == DynamicPartitionsDefinition(name="chmv:d.by_region") and time_partitions_of(alone) is None
    with pytest.raises(ValueError, match="named for their target"):
        partitions_definition(calendar("month", "2026-01-01", column="day", keys=("region",), key_elements=(1,)))


def test_the_partitioning_decodes_the_keys_of_multi_and_dynamic_partitions() -> None:
    """Dagster hands a run of a time × key target a ``MultiPartitionKey``: the partitioning decodes it as its text."""
    target = ObjectRef(database="d", name="t")
    monthly = calendar("month", "2026-01-01", column="day", keys=("region",), key_elements=(1,), target=target)
    sep, oct = datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 10, 1, tzinfo=UTC)
    expected = PartitionWindow("2026-09-01|a%7Cb", sep, oct, ("a|b",))
    assert monthly.window("2026-09-01|a%7Cb") == expected
    assert monthly.window(MultiPartitionKey({"date": "2026-09-01", "key": "a%7Cb"})) == expected
    dynamic = calendar(None, "2026-01-01", keys=("k", "r"), key_elements=(0, 1), target=target)
    assert dynamic.window("acme/eu") == PartitionWindow("acme/eu", None, None, ("acme", "eu"))


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
    first (a yearly target starting 2026-05-01 had 2027-01-01 as its first key: all of 2026 was unreachable); the
    partitioning's own first window is the same."""
    p = calendar(grain, start)
    pdef = partitions_definition(p)
    assert pdef is not None and pdef.get_first_partition_key() == first
    assert p.time_windows(p.first, p.first)[0].key == first and p.opening.strftime("%Y-%m-%d") == first
