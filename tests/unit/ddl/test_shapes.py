"""shapes: every registered shape (one row each in tests/support/shapes.py) is read from its PARTITION BY, names its
partitions with keys that decode back to their windows, and tiles time across New York's DST nights and in
Asia/Kolkata."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.partitioning import TargetPartitioning
from chmv_assets.ddl.shapes import TimeOnly, TimeShape, time_shape, time_shape_classes, time_shapes, whole_shape
from chmv_assets.errors import PartitionKeyError

from support.ddl import load_ddl, ref
from support.shapes import SHAPES, ShapeCase, shapes_ddl, table_name

TIMED = [c for c in SHAPES if c.start is not None]
#: Both nights of 2026 where New York's clocks change, and a zone without DST (whose offset is not whole hours).
NIGHTS = [
    ("America/New_York", datetime(2026, 11, 1)),  # 01:00-02:00 happens twice
    ("America/New_York", datetime(2026, 3, 8)),  # 02:00-03:00 does not happen
    ("Asia/Kolkata", datetime(2026, 11, 1)),
]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> LoadedProject:
    return load_ddl(tmp_path_factory.mktemp("shapes"), shapes_ddl(), toml='default_database = "d"')


def partitioning(loaded: LoadedProject, case: ShapeCase) -> TargetPartitioning:
    return loaded.partitioning(ref(f"d.{table_name(case)}"))


@pytest.mark.parametrize("case", SHAPES, ids=[c.id for c in SHAPES])
def test_the_registry_reads_the_partition_by_as_its_shape(loaded: LoadedProject, case: ShapeCase) -> None:
    p = partitioning(loaded, case)
    found = p.time if issubclass(case.shape, TimeShape) and not p.keyed else p.shape
    assert type(found) is case.shape
    if p.time is not None:  # the class of its grain too: one shape per grain
        assert type(time_shape(p.grain)) is type(p.time)


@pytest.mark.parametrize("case", SHAPES, ids=[c.id for c in SHAPES])
def test_a_key_names_its_window_and_back(loaded: LoadedProject, case: ShapeCase) -> None:
    p = partitioning(loaded, case)
    if case.key is None:
        with pytest.raises(PartitionKeyError, match="the target is unpartitioned"):
            p.window("2026-09-01")
        assert p.windows(datetime(2026, 1, 1), datetime(2027, 1, 1)) == [None]
        return
    window = p.window(case.key)
    assert (window.key, window.wall_start, window.wall_end) == (case.key, case.start, case.end)
    if window.timed:
        assert p.time is not None
        assert p.time.next_start(window.start, p.zone) == window.end
        assert p.time.floor(window.start + (window.end - window.start) / 2, p.zone) == window.start
        [again] = [w for w in p.windows(window.start, window.start, values=[window.values] if p.keyed else ()) if w]
        assert again == window
        assert p.partition_of(_value(p, window), window.start + timedelta(seconds=1)) == window
    else:
        assert p.partition_of("('acme','eu')", None) == window
    with pytest.raises(PartitionKeyError, match=re.escape(f"is not a partition of d.{table_name(case)}")):
        p.window(f"{case.key}/x")  # a value too many, or not a window's key


def _value(p: TargetPartitioning, window) -> str:
    """A ``system.parts.partition`` value of the window's partition (the time part's value is not read)."""
    if not p.keyed:
        return "x"
    return "(" + ",".join(["0", *(f"'{v}'" for v in window.values)]) + ")"


@pytest.mark.parametrize("shape", time_shapes(), ids=lambda s: s.grain.value)
@pytest.mark.parametrize(("zone", "night"), NIGHTS, ids=["fall-back", "spring-forward", "kolkata"])
def test_every_time_shape_tiles_time_across_dst(shape: TimeShape, zone: str, night: datetime) -> None:
    """Windows follow each other without a gap or an overlap; each key is distinct and decodes to its window (the
    two 01:00 hours of a fall-back night are two windows, the skipped hour of a spring-forward none)."""
    first = night - timedelta(days=1) if shape.grain.fixed else night.replace(day=1) - timedelta(days=800)
    windows = shape.windows_between(first, first, night + timedelta(days=1, hours=12), zone)
    assert len(windows) > 1 and all(
        a.end == b.start and a.start < a.end for a, b in zip(windows, windows[1:], strict=False)
    )
    assert len({w.key for w in windows}) == len(windows)
    calendar = TargetPartitioning(grain=shape.grain, zone=zone)
    assert [calendar.window(w.key) for w in windows] == windows
    if shape.grain.seconds <= 3600 and zone == "America/New_York" and night.month == 11:
        repeated = [w for w in windows if w.wall_start is not None and w.wall_start.date() == night.date()]
        assert sum(1 for w in repeated if w.key.endswith("-0500")) == 3600 // shape.grain.seconds


def test_every_registered_shape_has_its_row() -> None:
    """A shape is a registered class and its row in tests/support/shapes.py: a class without a row fails here."""
    rows = {c.shape for c in SHAPES}
    missing = [cls.__name__ for cls in time_shape_classes() if cls not in rows]
    missing += [
        type(s).__name__
        for s in (whole_shape(t, k) for t in (False, True) for k in (False, True))
        if type(s) not in rows | {TimeOnly}
    ]  # time alone: every time shape's row
    assert not missing, f"add a row for {', '.join(missing)} to tests/support/shapes.py"
