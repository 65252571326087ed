"""One row per partition shape (chmv_assets/ddl/shapes.py): the table every test of shapes reads.

A shape is its registered class and this row: the PARTITION BY the registry reads as it, a key and the window the
key names (in a UTC calendar). tests/unit/ddl/test_shapes.py checks the registry, the key codec and the window
arithmetic (across New York's DST nights and in Asia/Kolkata), tests/unit/orchestration/test_partitions.py that
Dagster's windows of the shape are the same, tests/integration/sql/test_shape_predicates.py the SQL predicate and
partition on a real engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chmv_assets.ddl.shapes import (
    Day,
    FifteenMinutes,
    FiveMinutes,
    Hour,
    Interval,
    KeyOnly,
    Minute,
    Month,
    Quarter,
    TenMinutes,
    TimeByKey,
    Unpartitioned,
    Week,
    Year,
)

D = datetime


@dataclass(frozen=True)
class ShapeCase:
    """A PARTITION BY (on ``columns``), the class of shape it is (the time shape where it is time alone, else the whole
    shape), a key of it and the wall-clock window the key names (None: no time part; no key: unpartitioned)."""

    partition_by: str
    columns: str
    shape: type
    key: str | None = None
    start: datetime | None = None
    end: datetime | None = None

    @property
    def id(self) -> str:
        return self.shape.__name__


SHAPES = [
    ShapeCase("toStartOfHour(ts)", "ts DateTime", Hour, "2026-09-01-13:00", D(2026, 9, 1, 13), D(2026, 9, 1, 14)),
    ShapeCase("toDate(ts)", "ts DateTime", Day, "2026-09-01", D(2026, 9, 1), D(2026, 9, 2)),
    ShapeCase("toMonday(d)", "d Date", Week, "2026-08-31", D(2026, 8, 31), D(2026, 9, 7)),
    ShapeCase("toYYYYMM(ts)", "ts DateTime", Month, "2026-09-01", D(2026, 9, 1), D(2026, 10, 1)),
    ShapeCase("toStartOfQuarter(d)", "d Date", Quarter, "2026-07-01", D(2026, 7, 1), D(2026, 10, 1)),
    ShapeCase("toYear(d)", "d Date", Year, "2026-01-01", D(2026, 1, 1), D(2027, 1, 1)),
    ShapeCase(
        "toStartOfInterval(ts, INTERVAL 6 HOUR)",
        "ts DateTime",
        Interval,
        "2026-09-01-18:00",
        D(2026, 9, 1, 18),
        D(2026, 9, 2),
    ),
    ShapeCase(
        "toStartOfMinute(ts)", "ts DateTime", Minute, "2026-09-01-13:01", D(2026, 9, 1, 13, 1), D(2026, 9, 1, 13, 2)
    ),
    ShapeCase(
        "toStartOfFiveMinutes(ts)",
        "ts DateTime",
        FiveMinutes,
        "2026-09-01-13:05",
        D(2026, 9, 1, 13, 5),
        D(2026, 9, 1, 13, 10),
    ),
    ShapeCase(
        "toStartOfTenMinutes(ts)",
        "ts DateTime",
        TenMinutes,
        "2026-09-01-13:10",
        D(2026, 9, 1, 13, 10),
        D(2026, 9, 1, 13, 20),
    ),
    ShapeCase(
        "toStartOfFifteenMinutes(ts)",
        "ts DateTime",
        FifteenMinutes,
        "2026-09-01-13:15",
        D(2026, 9, 1, 13, 15),
        D(2026, 9, 1, 13, 30),
    ),
    ShapeCase(
        "(toYYYYMM(ts), region)",
        "ts DateTime, region String",
        TimeByKey,
        "2026-09-01|eu",
        D(2026, 9, 1),
        D(2026, 10, 1),
    ),
    ShapeCase("(tenant, region)", "tenant String, region String", KeyOnly, "acme/eu"),
    ShapeCase("tuple()", "ts DateTime", Unpartitioned),
]


def table_name(case: ShapeCase) -> str:
    return f"t_{case.id.lower()}"


def shapes_ddl(database: str = "d") -> str:
    """A table per case, in ``database``."""
    return "\n".join(
        f"CREATE TABLE {database}.{table_name(c)} ({c.columns}) ENGINE = MergeTree PARTITION BY {c.partition_by} "
        "ORDER BY tuple();"
        for c in SHAPES
    )
