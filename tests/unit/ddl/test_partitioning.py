"""partitioning: the Dagster grain of every PARTITION BY form (docs/partitions.md) and the windows of a grain."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from chmv_assets.ddl.partitioning import (
    PartitionScheme,
    PartitionWindow,
    decode_key,
    encode_key,
    floor_to_grain,
    keyed_window,
    next_start,
    partition_of,
    partition_scheme,
    partition_start,
    partition_values,
    target_reach,
    time_of,
    window_at,
    window_for_partition_key,
    window_reach,
    windows_between,
    with_values,
)

from support.ddl import load_ddl, ref

# (id, columns, PARTITION BY or None, expected grain, expected column)
TIME_CASES = [
    ("toYYYYMM", "ts DateTime", "toYYYYMM(ts)", "month", "ts"),
    ("toStartOfMonth", "ts DateTime", "toStartOfMonth(ts)", "month", "ts"),
    ("toDate", "ts DateTime", "toDate(ts)", "day", "ts"),
    ("toYYYYMMDD", "ts DateTime", "toYYYYMMDD(ts)", "day", "ts"),
    ("toStartOfDay", "ts DateTime", "toStartOfDay(ts)", "day", "ts"),
    ("bare-Date-column", "d Date", "d", "day", "d"),
    ("bare-Date32-column-quoted", "d Date32", "`d`", "day", "d"),
    ("toStartOfHour", "ts DateTime", "toStartOfHour(ts)", "hour", "ts"),
    ("toStartOfHour-DateTime64", "ts DateTime64(3, 'UTC')", "toStartOfHour(ts)", "hour", "ts"),
    ("toYYYYMM-of-Date", "d Date", "toYYYYMM(d)", "month", "d"),
    ("quoted-column-with-space", "`event time` DateTime", "toYYYYMM(`event time`)", "month", "event time"),
    ("spaces-inside-the-call", "ts DateTime", "toDate( ts )", "day", "ts"),
    ("toMonday", "ts DateTime", "toMonday(ts)", "week", "ts"),
    ("toStartOfWeek-monday-mode", "d Date", "toStartOfWeek(d, 1)", "week", "d"),
    ("toStartOfQuarter", "d Date", "toStartOfQuarter(d)", "quarter", "d"),
    ("toStartOfYear", "ts DateTime", "toStartOfYear(ts)", "year", "ts"),
    ("toYear", "d Date", "toYear(d)", "year", "d"),
    ("interval-6-hours", "ts DateTime", "toStartOfInterval(ts, INTERVAL 6 HOUR)", "6 hour", "ts"),
    ("interval-30-minutes", "ts DateTime", "toStartOfInterval(ts, INTERVAL 30 minute)", "30 minute", "ts"),
    ("interval-1-week", "d Date", "toStartOfInterval(d, INTERVAL 1 WEEK)", "week", "d"),
    ("interval-3-months", "d Date", "toStartOfInterval(d, INTERVAL 3 MONTH)", "quarter", "d"),
    ("intDiv-unix-hours", "ts DateTime", "intDiv(toUnixTimestamp(ts), 3600)", "hour", "ts"),
    ("intDiv-unix-days", "ts DateTime", "intDiv(toUInt32(ts), 86400)", "day", "ts"),
]
# (id, columns, PARTITION BY) of tables that Dagster sees unpartitioned, without a note
UNPARTITIONED_CASES = [
    ("tuple()", "ts DateTime", "tuple()"),
    ("none", "ts DateTime", None),
]
# (id, columns, PARTITION BY, grain, column, keys, note) of tables with a key part: a time window and a key, or a key
KEY_CASES = [
    ("compound-key", "ts DateTime, k String", "(toYYYYMM(ts), k)", "month", "ts", ("k",), None),
    ("tuple-function", "ts DateTime, k String", "tuple(toDate(ts), k)", "day", "ts", ("k",), None),
    ("key-first", "ts DateTime, k String, n UInt8", "(k, toMonday(ts), n % 4)", "week", "ts", ("k", "n % 4"), None),
    ("string-column", "k String", "k", None, None, ("k",), None),
    ("tuple-of-keys", "k String, n UInt8", "(k, n)", None, None, ("k", "n"), None),
    ("intDiv-of-a-number", "id UInt64", "intDiv(id, 1000)", None, None, ("intDiv(id, 1000)",), None),
    ("bare-DateTime-column", "ts DateTime", "ts", None, None, ("ts",), None),
    ("sunday-weeks", "d Date", "toStartOfWeek(d)", None, None, ("toStartOfWeek(d)",), "toStartOfWeek(d): no time"),
    (
        "two-days",
        "ts DateTime",
        "toStartOfInterval(ts, INTERVAL 2 DAY)",
        None,
        None,
        ("toStartOfInterval(ts, INTERVAL 2 DAY)",),
        "toStartOfInterval(ts, INTERVAL 2 DAY): no time",
    ),
]
ALL_CASES = [(c[0], c[1], c[2]) for c in TIME_CASES] + UNPARTITIONED_CASES + [(c[0], c[1], c[2]) for c in KEY_CASES]


def _table_name(case_id: str) -> str:
    return "t_" + re.sub(r"\W", "_", case_id)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    statements = []
    for case_id, columns, partition_by in ALL_CASES:
        clause = f" PARTITION BY {partition_by}" if partition_by else ""
        statements.append(
            f"CREATE TABLE d.{_table_name(case_id)} ({columns}) ENGINE = MergeTree{clause} ORDER BY tuple();"
        )
    return load_ddl(tmp_path_factory.mktemp("partitioning"), "\n".join(statements), toml='default_database = "d"')


def scheme_of(loaded, case_id: str) -> PartitionScheme:
    target = ref(f"d.{_table_name(case_id)}")
    return partition_scheme(loaded.project.table(target), loaded.project.views_into(target))


@pytest.mark.parametrize(
    ("case_id", "grain", "column"), [(c[0], c[3], c[4]) for c in TIME_CASES], ids=[c[0] for c in TIME_CASES]
)
def test_time_partitioned(tables, case_id, grain, column):
    assert scheme_of(tables, case_id) == PartitionScheme(grain=grain, column=column, note=None)


@pytest.mark.parametrize("case_id", [c[0] for c in UNPARTITIONED_CASES], ids=[c[0] for c in UNPARTITIONED_CASES])
def test_unpartitioned_without_note(tables, case_id):
    assert scheme_of(tables, case_id) == PartitionScheme(grain=None, column=None, note=None)


@pytest.mark.parametrize(
    ("case_id", "grain", "column", "keys", "note"), [(c[0], *c[3:]) for c in KEY_CASES], ids=[c[0] for c in KEY_CASES]
)
def test_a_key_part_partitions_by_the_values_the_server_holds(tables, case_id, grain, column, keys, note):
    scheme = scheme_of(tables, case_id)
    assert (scheme.grain, scheme.column, scheme.keys) == (grain, column, keys)
    assert scheme.partitioned and scheme.keyed
    assert scheme.note == note if note is None else scheme.note.startswith(note)


AGGREGATE_DDL = """
CREATE TABLE d.src (ts DateTime, k String, v UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.latest (seen DateTime, k String, v UInt64) ENGINE = SummingMergeTree PARTITION BY toDate(seen) ORDER BY k;
CREATE MATERIALIZED VIEW d.latest_mv TO d.latest AS SELECT max(ts) AS seen, k, sum(v) AS v FROM d.src GROUP BY k;
CREATE TABLE d.hourly (hour DateTime, k String, v UInt64) ENGINE = SummingMergeTree PARTITION BY toDate(hour) ORDER BY k;
CREATE MATERIALIZED VIEW d.hourly_mv TO d.hourly AS
SELECT toStartOfHour(ts) AS hour, k, sum(v) AS v FROM d.src GROUP BY hour, k;
CREATE MATERIALIZED VIEW d.hourly_max_mv TO d.hourly AS SELECT max(ts) AS hour, k, sum(v) AS v FROM d.src GROUP BY k;
CREATE TABLE d.plain (hour DateTime, k String, v UInt64) ENGINE = SummingMergeTree PARTITION BY toDate(hour) ORDER BY k;
CREATE MATERIALIZED VIEW d.plain_mv TO d.plain AS
SELECT toStartOfHour(ts) AS hour, k, sum(v) AS v FROM d.src GROUP BY hour, k;
"""


@pytest.mark.parametrize(
    ("target", "note", "key"),
    [
        (
            "d.latest",
            "partition column seen is an aggregate in d.latest_mv: partitioned by the values the server holds, "
            "not by time windows",
            "toDate(seen)",
        ),
        (
            "d.hourly",
            "partition column hour is an aggregate in d.hourly_max_mv: partitioned by the values the server "
            "holds, not by time windows",
            "toDate(hour)",
        ),
        ("d.plain", None, None),
    ],
    ids=["aggregate", "one-mv-of-a-fan-in-aggregates", "grouped-by-not-aggregated"],
)
def test_partition_column_that_an_mv_aggregates(tmp_path, target, note, key):
    loaded = load_ddl(tmp_path, AGGREGATE_DDL)
    project = loaded.project
    scheme = partition_scheme(project.table(ref(target)), project.views_into(ref(target)))
    if note:
        assert scheme == PartitionScheme(grain=None, note=note, keys=(key,), key_elements=(0,))
    else:
        assert scheme == PartitionScheme(grain="day", column="hour")


INNER_DDL = """
CREATE TABLE d.src (ts DateTime, region String) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.monthly ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY day
AS SELECT toDate(ts) AS day, count() AS n FROM d.src GROUP BY day;
CREATE MATERIALIZED VIEW d.by_region ENGINE = SummingMergeTree PARTITION BY (toMonday(day), region) ORDER BY day
AS SELECT toDate(ts) AS day, region, count() AS n FROM d.src GROUP BY day, region;
CREATE MATERIALIZED VIEW d.bare ENGINE = MergeTree PARTITION BY day ORDER BY day AS SELECT toDate(ts) AS day FROM d.src;
"""


@pytest.mark.parametrize(
    ("target", "scheme"),
    [
        ("d.monthly", PartitionScheme(grain="month", column="day")),
        ("d.by_region", PartitionScheme(grain="week", column="day", keys=("region",), key_elements=(1,))),
        ("d.bare", PartitionScheme(grain=None, keys=("day",), key_elements=(0,))),
    ],
    ids=["time-function", "time-and-key", "bare-column-of-unknown-type"],
)
def test_an_inner_table_of_unknown_column_types_is_partitioned_by_its_time_functions(tmp_path, target, scheme):
    """An MV without TO declares no column types: a time function of a column still names the windows (it takes
    nothing else); a bare column may be anything, so its values are the key."""
    project = load_ddl(tmp_path, INNER_DDL).project
    assert partition_scheme(project.table(ref(target)), project.views_into(ref(target))) == scheme


def test_the_example_targets(example):
    grains = {
        t.name: partition_scheme(example.project.table(t), example.project.views_into(t))
        for t in example.project.targets
    }
    assert {name: (s.grain, s.column) for name, s in grains.items()} == {
        "hourly_endpoint_stats": ("day", "hour"),
        "requests_enriched": ("month", "timestamp"),
        "entity_latest": (None, None),
        "error_events": ("day", "timestamp"),
        "metric_events": ("month", "timestamp"),
        "audit_log": ("month", "timestamp"),
        "counter_daily": ("month", "day"),
        "events_agg": ("month", "event_date"),
        "events_daily": ("day", "event_date"),
        "events_weekly": ("month", "week"),
    }
    assert all(s.note is None for s in grains.values())


# --- windows -----------------------------------------------------------------------------------------------------

D = datetime


@pytest.mark.parametrize(
    ("value", "grain", "expected"),
    [
        (D(2026, 9, 17, 13, 45, 12, 999), "hour", D(2026, 9, 17, 13)),
        (D(2026, 9, 17, 13, 45, 12, 999), "day", D(2026, 9, 17)),
        (D(2026, 9, 17, 13, 45, 12, 999), "month", D(2026, 9, 1)),
        (D(2026, 9, 1), "month", D(2026, 9, 1)),
        (D(2028, 2, 29, 23, 59, 59), "day", D(2028, 2, 29)),
        (D(2026, 12, 31, 23, 59, 59), "month", D(2026, 12, 1)),
    ],
    ids=["hour", "day", "month", "month-boundary-is-its-own-start", "leap-day", "december"],
)
def test_floor_to_grain(value, grain, expected):
    assert floor_to_grain(value, grain) == expected.replace(tzinfo=UTC)  # a window bound is an instant


@pytest.mark.parametrize(
    ("start", "grain", "expected"),
    [
        (D(2026, 9, 1, 23), "hour", D(2026, 9, 2, 0)),
        (D(2026, 12, 31), "day", D(2027, 1, 1)),
        (D(2028, 2, 28), "day", D(2028, 2, 29)),
        (D(2027, 2, 28), "day", D(2027, 3, 1)),
        (D(2026, 1, 1), "month", D(2026, 2, 1)),
        (D(2028, 2, 1), "month", D(2028, 3, 1)),
        (D(2026, 2, 1), "month", D(2026, 3, 1)),
        (D(2026, 7, 1), "month", D(2026, 8, 1)),
        (D(2026, 8, 1), "month", D(2026, 9, 1)),
        (D(2026, 12, 1), "month", D(2027, 1, 1)),
    ],
    ids=[
        "hour-across-midnight",
        "day-across-year",
        "leap-february-28",
        "common-february-28",
        "january",
        "leap-february",
        "common-february",
        "july-31-days",
        "august-31-days",
        "december",
    ],
)
def test_next_start(start, grain, expected):
    assert next_start(start, grain) == expected.replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "grain", "expected"),
    [
        (D(2026, 9, 1, 13), "hour", PartitionWindow("2026-09-01-13:00", D(2026, 9, 1, 13), D(2026, 9, 1, 14))),
        (D(2026, 9, 1, 0), "hour", PartitionWindow("2026-09-01-00:00", D(2026, 9, 1, 0), D(2026, 9, 1, 1))),
        (D(2026, 12, 31, 23), "hour", PartitionWindow("2026-12-31-23:00", D(2026, 12, 31, 23), D(2027, 1, 1))),
        (D(2028, 2, 29), "day", PartitionWindow("2028-02-29", D(2028, 2, 29), D(2028, 3, 1))),
        (D(2028, 2, 1), "month", PartitionWindow("2028-02-01", D(2028, 2, 1), D(2028, 3, 1))),
        (D(2026, 1, 1), "month", PartitionWindow("2026-01-01", D(2026, 1, 1), D(2026, 2, 1))),
    ],
    ids=["hour-key-like-dagster", "midnight-hour", "last-hour-of-year", "leap-day", "leap-february", "january"],
)
def test_window_at(start, grain, expected):
    assert window_at(start, grain) == utc(expected)


def utc(window: PartitionWindow) -> PartitionWindow:
    """``window`` with its naive bounds read as UTC instants (a calendar in UTC)."""
    return PartitionWindow(window.key, window.start.replace(tzinfo=UTC), window.end.replace(tzinfo=UTC), window.values)


def keys(windows: list[PartitionWindow]) -> list[str]:
    return [w.key for w in windows]


@pytest.mark.parametrize(
    ("grain", "first", "since", "until", "expected"),
    [
        ("day", D(2026, 8, 1), D(2026, 9, 1, 10), D(2026, 9, 3, 0, 30), ["2026-09-01", "2026-09-02", "2026-09-03"]),
        ("day", D(2026, 8, 1), D(2026, 9, 1), D(2026, 9, 2), ["2026-09-01", "2026-09-02"]),
        ("day", D(2026, 9, 2), D(2026, 8, 20), D(2026, 9, 3), ["2026-09-02", "2026-09-03"]),
        ("day", D(2028, 2, 1), D(2028, 2, 28, 12), D(2028, 3, 1, 1), ["2028-02-28", "2028-02-29", "2028-03-01"]),
        ("day", D(2026, 8, 1), D(2026, 9, 3), D(2026, 9, 1), []),
        (
            "hour",
            D(2026, 8, 1),
            D(2026, 9, 1, 22, 59),
            D(2026, 9, 2, 0, 0),
            ["2026-09-01-22:00", "2026-09-01-23:00", "2026-09-02-00:00"],
        ),
        (
            "month",
            D(2026, 8, 1),
            D(2026, 8, 31, 23),
            D(2027, 1, 1),
            ["2026-08-01", "2026-09-01", "2026-10-01", "2026-11-01", "2026-12-01", "2027-01-01"],
        ),
        ("month", D(2026, 8, 1), D(2020, 1, 1), D(2026, 9, 15), ["2026-08-01", "2026-09-01"]),
    ],
    ids=[
        "days-touched",
        "until-on-a-boundary-includes-that-window",
        "none-before-first-start",
        "across-leap-day",
        "since-after-until",
        "hours-across-midnight",
        "months-across-year",
        "months-from-first-start",
    ],
)
def test_windows_between(grain, first, since, until, expected):
    windows = windows_between(grain, first, since, until)
    assert keys(windows) == expected
    assert all(w.end == next_start(w.start, grain) for w in windows)
    assert all(a.end == b.start for a, b in zip(windows, windows[1:], strict=False))


@pytest.mark.parametrize(
    ("grain", "first", "expected"),
    [
        ("month", D(2026, 8, 15), ["2026-08-01", "2026-09-01"]),
        ("month", D(2026, 1, 31), ["2026-01-01", "2026-02-01"]),
        ("day", D(2026, 9, 30, 6), ["2026-09-30", "2026-10-01"]),
        ("month", D(2026, 9, 1), ["2026-09-01", "2026-10-01"]),
        ("year", D(2026, 5, 1), ["2026-01-01"]),
    ],
    ids=["month-from-mid-month", "month-from-a-31st", "day-from-mid-day", "aligned", "year-from-may"],
)
def test_first_window_is_the_one_holding_first_start(grain, first, expected):
    """As chmv's Dagster partitions of a ``partition_start`` that is not on a boundary
    (tests/unit/orchestration/test_partitions.py): the rows from ``partition_start`` on are in partitions the UI can
    materialize (a yearly target starting in May had no key for its first year)."""
    assert keys(windows_between(grain, first, D(2020, 1, 1), D(2026, 10, 2)))[: len(expected)] == expected


# --- keys ---------------------------------------------------------------------------------------------------------

MONTH_BY_REGION = PartitionScheme(grain="month", column="day", keys=("region",), key_elements=(1,))
TENANT_AND_REGION = PartitionScheme(grain=None, keys=("tenant", "region"), key_elements=(0, 1))


@pytest.mark.parametrize(
    "values",
    [("eu",), ("a|b", ""), ("x/y", "50%"), ("it's [1,2]",), ("München", "東京"), ("a...b",), ("tab\there",)],
    ids=["plain", "delimiter-and-empty", "slash-and-percent", "quote-brackets-comma", "unicode", "dots", "control"],
)
def test_key_values_round_trip_through_a_dagster_key(values):
    key = encode_key(values)
    assert decode_key(key) == values
    assert not {"|", ",", "[", "]"} & set(key) and "..." not in key and key  # what Dagster refuses in a key
    assert all(ord(c) >= 32 for c in key)


def test_a_value_dagster_allows_is_its_own_key():
    assert (
        encode_key(["eu"]) == "eu" and encode_key(["2025", "us"]) == "2025/us" and encode_key(["München"]) == "München"
    )


@pytest.mark.parametrize(
    ("text", "elements", "values"),
    [
        ("202609", 1, ("202609",)),
        ("it's / 50%|x", 1, ("it's / 50%|x",)),  # one element: the value as it is
        ("(202609,'eu')", 2, ("202609", "eu")),
        ("(202601,'q\\'s,)','y',-3)", 4, ("202601", "q's,)", "y", "-3")),
        ("(202601,'a\\tb','x',NULL)", 4, ("202601", "a\tb", "x", "NULL")),
        ("(2,'2025-09-29')", 2, ("2", "2025-09-29")),
    ],
    ids=["one", "one-with-delimiters", "tuple", "escaped-quote-comma-paren", "tab-and-null", "number-and-date"],
)
def test_partition_values_of_system_parts(text, elements, values):
    assert partition_values(text, elements) == values


def test_window_for_partition_key_of_each_shape():
    window = window_for_partition_key(MONTH_BY_REGION, "2026-09-01|eu")
    assert window == utc(PartitionWindow("2026-09-01|eu", D(2026, 9, 1), D(2026, 10, 1), ("eu",)))
    assert window.time_window() == utc(PartitionWindow("2026-09-01", D(2026, 9, 1), D(2026, 10, 1)))
    alone = window_for_partition_key(TENANT_AND_REGION, "it's %2F 50%25/eu")
    assert alone == PartitionWindow("it's %2F 50%25/eu", None, None, ("it's / 50%", "eu"))
    assert not alone.timed and alone.keyed and time_of(alone) is None
    assert window_for_partition_key("week", "2026-08-03").wall_end == D(2026, 8, 10)
    assert window_for_partition_key("6 hour", "2026-08-03-18:00").wall_end == D(2026, 8, 4)


@pytest.mark.parametrize(
    ("scheme", "key", "message"),
    [
        (MONTH_BY_REGION, "2026-09-01", "names a window without the key's values (expected <window>|<values>)"),
        (MONTH_BY_REGION, "2026-09-02|eu", "no month window starts there in UTC"),
        (TENANT_AND_REGION, "acme", "names 1 value(s); the key part tenant, region has 2"),
        (PartitionScheme(grain="day", column="d"), "2026-09-01|eu", "the target has no key part (expected a window)"),
        (PartitionScheme(grain=None), "eu", "the target is unpartitioned"),
    ],
    ids=["a-window-without-its-key", "not-a-boundary", "too-few-values", "a-key-where-there-is-none", "unpartitioned"],
)
def test_a_key_not_of_the_scheme_is_refused_with_what_it_expects(scheme, key, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        window_for_partition_key(scheme, key)


def test_partition_of_a_clickhouse_partition():
    assert partition_of(MONTH_BY_REGION, "(202609,'eu')", D(2026, 9, 14, 3)) == window_at(
        D(2026, 9, 1), "month", ("eu",)
    )
    assert partition_of(MONTH_BY_REGION, "(202609,'eu')", None) is None  # no time of its rows: no window
    assert partition_of(TENANT_AND_REGION, "('acme','eu')", None) == keyed_window(("acme", "eu"))
    assert partition_of(PartitionScheme(grain=None), "tuple()", None) is None


def test_each_time_window_once_per_key_value():
    windows = windows_between("month", D(2026, 8, 1), D(2026, 8, 1), D(2026, 9, 1))
    assert [w.key for w in with_values(windows, [("eu",), ("us",)])] == [
        "2026-08-01|eu",
        "2026-08-01|us",
        "2026-09-01|eu",
        "2026-09-01|us",
    ]


def test_partition_start_from_the_partition_value_or_the_oldest_row():
    assert partition_start("202609") == D(2026, 9, 1)
    assert partition_start("20260915") == D(2026, 9, 15)
    assert partition_start("2026-09-15") == D(2026, 9, 15)
    assert partition_start("'2026-09-15 10:00:00'") == D(2026, 9, 15, 10)
    assert partition_start("(1, 'x')", D(2026, 9, 15, 10)) == D(2026, 9, 15, 10)  # the parts' min/max index
    assert partition_start("7") is None


REACH_DDL = """
CREATE DATABASE app;
CREATE TABLE app.events (ts DateTime, day Date, n UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE app.late (ts DateTime, n UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE app.monthly (week Date, n UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMM(week) ORDER BY week;
CREATE MATERIALIZED VIEW app.by_day TO app.monthly AS SELECT toDate(ts) AS week, n FROM app.events;
CREATE MATERIALIZED VIEW app.by_week TO app.monthly AS SELECT toMonday(ts) AS week, n FROM app.late;
CREATE TABLE app.hourly (hour DateTime, n UInt64) ENGINE = SummingMergeTree PARTITION BY toDate(hour) ORDER BY hour;
CREATE MATERIALIZED VIEW app.by_hour TO app.hourly AS SELECT toStartOfHour(ts) AS hour, n FROM app.events;
CREATE TABLE app.by_n (n UInt64) ENGINE = MergeTree PARTITION BY n % 10 ORDER BY n;
CREATE MATERIALIZED VIEW app.n_mv TO app.by_n AS SELECT n FROM app.events;
"""


def test_window_reach_is_the_truncation_grain_only_where_it_straddles_the_partition_grain(tmp_path):
    project = load_ddl(tmp_path, REACH_DDL).project
    views = project.views
    monthly = partition_scheme(project.tables[ref("app.monthly")], project.views_into(ref("app.monthly")))
    hourly = partition_scheme(project.tables[ref("app.hourly")], project.views_into(ref("app.hourly")))
    by_n = partition_scheme(project.tables[ref("app.by_n")], project.views_into(ref("app.by_n")))
    assert window_reach(views[ref("app.by_day")], monthly) == timedelta(0)  # a day lies within its month
    assert window_reach(views[ref("app.by_week")], monthly) == timedelta(days=7)  # a week straddles two months
    assert window_reach(views[ref("app.by_hour")], hourly) == timedelta(0)
    assert window_reach(views[ref("app.n_mv")], by_n) == timedelta(0)  # no time window at all
    assert target_reach(project, ref("app.monthly"), monthly) == timedelta(days=7)  # the longest of its MVs
    assert target_reach(project, ref("app.monthly"), monthly, ref("app.events")) == timedelta(0)
    assert target_reach(project, ref("app.monthly"), monthly, ref("app.late")) == timedelta(days=7)
