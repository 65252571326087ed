"""time_sql: the only way a time value becomes SQL text, its zone written out; and no other way exists in the product."""

from __future__ import annotations

import ast
import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from chmv_assets.errors import ChmvError
from chmv_assets.sql.time_sql import UTC_INSTANT, declared_zone, time_sql

MOMENT = datetime(2026, 9, 1, 13, 5, 7, 123456)


@pytest.mark.parametrize(
    ("type_sql", "expected"),
    [
        ("Date", "CAST('2026-09-01' AS Date)"),
        ("Date32", "CAST('2026-09-01' AS Date32)"),
        ("Nullable(Date)", "CAST('2026-09-01' AS Date)"),
        ("DateTime", "toDateTime('2026-09-01 13:05:07', 'Europe/Berlin')"),
        ("DateTime('Asia/Kolkata')", "toDateTime('2026-09-01 13:05:07', 'Asia/Kolkata')"),
        ("DateTime64(3)", "toDateTime64('2026-09-01 13:05:07.123', 3, 'Europe/Berlin')"),
        ("DateTime64(0, 'UTC')", "toDateTime64('2026-09-01 13:05:07', 0, 'UTC')"),
        ("DateTime64(9, 'UTC')", "toDateTime64('2026-09-01 13:05:07.123456000', 9, 'UTC')"),
        ("LowCardinality(Nullable(DateTime))", "toDateTime('2026-09-01 13:05:07', 'Europe/Berlin')"),
        ("", "toDateTime('2026-09-01 13:05:07', 'Europe/Berlin')"),
        ("String", "'2026-09-01 13:05:07'"),
    ],
    ids=[
        "Date",
        "Date32",
        "Nullable-Date",
        "bare-DateTime-is-the-session's",
        "declared-zone-wins",
        "DateTime64-precision",
        "DateTime64-no-fraction",
        "DateTime64-nanoseconds",
        "wrapped-DateTime",
        "unknown-type-is-DateTime",
        "other-type-plain-string",
    ],
)
def test_a_wall_clock_is_written_in_the_zone_its_column_computes_in(type_sql, expected):
    assert time_sql(MOMENT, type_sql, "Europe/Berlin") == expected


def test_an_instant_is_written_as_the_wall_clock_of_the_columns_zone():
    instant = datetime(2026, 8, 31, 18, 30, tzinfo=UTC)
    assert time_sql(instant, "DateTime('Asia/Kolkata')") == "toDateTime('2026-09-01 00:00:00', 'Asia/Kolkata')"
    assert time_sql(instant, "DateTime", "Asia/Kolkata") == "toDateTime('2026-09-01 00:00:00', 'Asia/Kolkata')"
    assert time_sql(instant, "Date", "Asia/Kolkata") == "CAST('2026-09-01' AS Date)"
    assert time_sql(instant, UTC_INSTANT) == "toDateTime64('2026-08-31 18:30:00.000000', 6, 'UTC')"


@pytest.mark.parametrize(
    ("instant", "type_sql", "expected"),
    [
        (
            datetime(2026, 11, 1, 5, 30, tzinfo=UTC),  # 01:30 EDT: the first of two 01:30s
            "DateTime",
            "toTimeZone(toDateTime('2026-11-01 05:30:00', 'UTC'), 'America/New_York')",
        ),
        (
            datetime(2026, 11, 1, 6, 30, tzinfo=UTC),  # 01:30 EST: the second
            "DateTime",
            "toTimeZone(toDateTime('2026-11-01 06:30:00', 'UTC'), 'America/New_York')",
        ),
        (
            datetime(2026, 11, 1, 6, 0, 0, 250000, tzinfo=UTC),
            "DateTime64(3)",
            "toTimeZone(toDateTime64('2026-11-01 06:00:00.250', 3, 'UTC'), 'America/New_York')",
        ),
        (datetime(2026, 11, 1, 7, 0, tzinfo=UTC), "DateTime", "toDateTime('2026-11-01 02:00:00', 'America/New_York')"),
        (datetime(2026, 3, 8, 7, 0, tzinfo=UTC), "DateTime", "toDateTime('2026-03-08 03:00:00', 'America/New_York')"),
        (datetime(2026, 11, 1, 6, 30, tzinfo=UTC), "Date", "CAST('2026-11-01' AS Date)"),
    ],
    ids=[
        "first-of-a-repeated-time",
        "second-of-a-repeated-time",
        "DateTime64",
        "after-the-fall-back",
        "after-a-gap",
        "Date",
    ],
)
def test_an_instant_the_wall_clock_would_name_twice_is_written_in_utc(instant, type_sql, expected):
    """A wall clock a fall-back repeats names two instants, and the server reads it as the first: such an instant is
    written in UTC, moved into the column's zone (its type stays the column's)."""
    assert time_sql(instant, type_sql, "America/New_York") == expected


def test_a_date_is_its_midnight_and_a_date_column_needs_no_zone():
    assert time_sql(date(2026, 9, 1), "DateTime", "UTC") == "toDateTime('2026-09-01 00:00:00', 'UTC')"
    assert time_sql(MOMENT, "Date") == "CAST('2026-09-01' AS Date)"


@pytest.mark.parametrize("zone", [None, ""])
def test_a_bare_datetime_without_the_sessions_zone_is_refused(zone):
    with pytest.raises(ChmvError, match="time zone a DateTime column computes in is not known"):
        time_sql(MOMENT, "DateTime", zone)
    with pytest.raises(ChmvError):
        time_sql(MOMENT.replace(tzinfo=UTC), "Date", zone)


def test_a_zone_name_is_escaped_as_a_string():
    assert time_sql(MOMENT, "DateTime", "it's") == "toDateTime('2026-09-01 13:05:07', 'it\\'s')"


@pytest.mark.parametrize(
    ("type_sql", "zone"),
    [
        ("DateTime('Asia/Kolkata')", "Asia/Kolkata"),
        ("DateTime64(3, 'UTC')", "UTC"),
        ("Nullable(DateTime('America/New_York'))", "America/New_York"),
        ("DateTime", None),
        ("DateTime64(3)", None),
        ("Date", None),
        ("String", None),
    ],
)
def test_declared_zone(type_sql, zone):
    assert declared_zone(type_sql) == zone


# -- no other way ----------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("chmv_assets", "resources", "spark", "asset_checks")
THE_WAY = ROOT / "chmv_assets" / "sql" / "time_sql.py"

#: SQL that turns text chmv wrote into a time, or binds a time server-side: each is a second way in.
OTHER_WAYS = [
    (re.compile(r"\b(toDateTime(64)?|toDate(32)?|parseDateTime\w*)\(\s*'"), "a time parsed from a literal"),
    (re.compile(r"\b(toDateTime(64)?|toDate(32)?|parseDateTime\w*)\(\s*\{\w+:"), "a time parsed from a bound string"),
    (re.compile(r"\{\w+:\s*(Nullable\(|LowCardinality\()*(DateTime|Date)"), "a time bound as a query parameter"),
]


def _other_ways(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{node.lineno}: {why}" for pattern, why in OTHER_WAYS if pattern.search(node.value)]
        if isinstance(node, ast.JoinedStr):  # '{value:%Y-%m-%d}' inside an f-string: a time written into a literal
            for before, part in zip(node.values, node.values[1:], strict=False):
                quoted = isinstance(before, ast.Constant) and str(before.value).endswith("'")
                spec = isinstance(part, ast.FormattedValue) and part.format_spec is not None
                if quoted and spec and "%" in ast.unparse(part.format_spec):  # type: ignore[union-attr]
                    found.append(f"{node.lineno}: a time formatted into a string literal")
    return found


def test_no_time_value_reaches_sql_another_way():
    """A time value reaches SQL through time_sql only: no literal or bound string parsed as a time, no time bound as a
    query parameter (clickhouse-connect would format it naive and the session would read it in its own zone)."""
    offenders = [
        f"{path.relative_to(ROOT)}:{where}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != THE_WAY
        for where in _other_ways(path)
    ]
    assert not offenders, "time values written into SQL outside chmv_assets.sql.time_sql.time_sql:\n" + "\n".join(
        offenders
    )


def test_the_guard_sees_each_other_way(tmp_path: Path):
    """The scan above can fail: each way it forbids, written as the code once wrote it, is found."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(cutoff, start, column):\n"
        "    a = f\"toDateTime64('{cutoff:%Y-%m-%d %H:%M:%S.%f}', 6, 'UTC')\"\n"
        "    b = f\"CAST(toDateTime('{start:%Y-%m-%d %H:%M:%S}') AS Nullable(DateTime))\"\n"
        '    c = "VALUES ({ts:DateTime64(6)})"\n'
        '    d = f" WHERE {column} >= toDateTime({{lo:String}})"\n'
        "    e = f\"x >= '{start:%Y-%m-%d}'\"\n"
        "    return a, b, c, d, e\n",
        encoding="utf-8",
    )
    found = _other_ways(sample)
    assert sorted(int(f.split(":")[0]) for f in found) == [2, 2, 3, 3, 4, 5, 6], found
