"""The table TTL clause parsed at load time: column, truncation, interval, action, condition per rule."""

from __future__ import annotations

import pytest

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import TtlAction

from support.ddl import load_ddl, ref

COLUMNS = "(ts DateTime, d Date, k UInt8)"


def rules(tmp_path, ttl: str, columns: str = COLUMNS):
    loaded = load_ddl(
        tmp_path, f"CREATE TABLE d.t {columns} ENGINE = MergeTree ORDER BY ts {ttl};", toml='default_database = "d"'
    )
    table = loaded.project.tables[ref("d.t")]
    return [(r.column, r.truncation, r.interval, r.action, r.condition) for r in table.ttl_rules]


@pytest.mark.parametrize(
    ("ttl", "expected"),
    [
        ("TTL ts + INTERVAL 90 DAY", ("ts", None, (90, "DAY"))),
        ("TTL ts + INTERVAL '1' YEAR", ("ts", None, (1, "YEAR"))),
        ("TTL toDate(ts) + toIntervalMonth(3)", ("ts", Grain.DAY, (3, "MONTH"))),
        ("TTL toStartOfHour(ts) + INTERVAL 12 HOUR", ("ts", Grain.HOUR, (12, "HOUR"))),
        ("TTL (ts - INTERVAL 2 WEEK)", ("ts", None, (-2, "WEEK"))),
        ("TTL ts + 3600", ("ts", None, (3600, "SECOND"))),
        ("TTL d + 30", ("d", None, (30, "DAY"))),
        ("TTL toDateTime(d) + INTERVAL 1 MONTH", ("d", None, (1, "MONTH"))),
        ("TTL ts", ("ts", None, (0, "SECOND"))),
    ],
    ids=[
        "interval",
        "quoted-count",
        "toDate-toIntervalMonth",
        "truncation",
        "minus-in-parens",
        "seconds-on-datetime",
        "days-on-date",
        "conversion",
        "bare-column",
    ],
)
def test_time_expressions(tmp_path, ttl, expected):
    assert rules(tmp_path, ttl) == [(*expected, TtlAction.DELETE, None)]


@pytest.mark.parametrize(
    "ttl",
    [
        "TTL ts + INTERVAL 1 DAY + INTERVAL 1 HOUR",
        "TTL greatest(ts, toDateTime(d)) + INTERVAL 1 DAY",
        "TTL ts + INTERVAL k DAY",
    ],
    ids=["two-intervals", "two-columns", "non-constant-interval"],
)
def test_other_expressions_stay_unknown(tmp_path, ttl):
    assert rules(tmp_path, ttl) == [(None, None, None, TtlAction.DELETE, None)]


def test_actions_and_conditions_per_rule(tmp_path):
    ttl = (
        "TTL ts + INTERVAL 1 DAY RECOMPRESS CODEC(ZSTD(3)), ts + INTERVAL 7 DAY TO VOLUME 'cold', "
        "ts + INTERVAL 30 DAY TO DISK 'archive', ts + INTERVAL 90 DAY DELETE WHERE k = 1"
    )
    assert rules(tmp_path, ttl) == [
        ("ts", None, (1, "DAY"), TtlAction.RECOMPRESS, None),
        ("ts", None, (7, "DAY"), TtlAction.MOVE, None),
        ("ts", None, (30, "DAY"), TtlAction.MOVE, None),
        ("ts", None, (90, "DAY"), TtlAction.DELETE, "k = 1"),
    ]


def test_group_by_rolls_rows_up(tmp_path):
    got = rules(tmp_path, "TTL ts + INTERVAL 1 MONTH GROUP BY k SET d = max(d)")
    assert got == [("ts", None, (1, "MONTH"), TtlAction.GROUP_BY, None)]


def test_row_retention_keeps_only_rules_that_remove_rows(tmp_path):
    loaded = load_ddl(
        tmp_path,
        f"CREATE TABLE d.t {COLUMNS} ENGINE = MergeTree ORDER BY ts "
        "TTL ts + INTERVAL 1 DAY TO VOLUME 'cold', ts + INTERVAL 1 YEAR;",
        toml='default_database = "d"',
    )
    table = loaded.project.tables[ref("d.t")]
    assert [r.interval for r in table.row_retention] == [(1, "YEAR")]
    assert table.ttl == "ts + INTERVAL 1 DAY TO VOLUME 'cold', ts + INTERVAL 1 YEAR"  # verbatim, unchanged


def test_a_column_ttl_is_not_a_table_rule(tmp_path):
    assert rules(tmp_path, "", "(ts DateTime, k UInt8 TTL ts + INTERVAL 1 DAY)") == []


def test_example_project(example):
    errors = example.project.tables[ref("analytics.error_events")]
    assert [(r.column, r.interval) for r in errors.ttl_rules] == [("timestamp", (5, "YEAR"))]
    assert example.project.tables[ref("analytics.api_requests")].ttl_rules == ()
