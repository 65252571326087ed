"""The pure part of staleness: which time column each MV's trigger has and what each target can be measured by."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.health.staleness import Probe, freshness_window, probes, refresh_period, trigger_time_column

from support.ddl import load_ddl, ref


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("analytics.api_requests", "timestamp"),
        ("analytics.raw_webhooks", "received_at"),
        ("analytics.counter", "when"),
        ("analytics.hourly_endpoint_stats", "hour"),
        ("analytics.events_agg", "event_date"),
        ("analytics.events_weekly", "week"),
        ("analytics.entity_latest", None),
        ("analytics.nowhere", None),
    ],
    ids=[
        "configured",
        "configured-not-the-partition-column",
        "configured-quoted-keyword",
        "from-partition-by-toDate",
        "from-partition-by-toYYYYMM",
        "from-partition-by-of-a-Date",
        "unpartitioned-and-unconfigured",
        "not-in-the-ddl",
    ],
)
def test_trigger_time_column(example, table, expected):
    assert trigger_time_column(example, ref(table)) == expected


def test_configured_time_column_wins_over_the_partition_column(example):
    ingestion = example.config.ingestion.model_copy(update={"time_columns": {"analytics.events_agg": "event_hour"}})
    loaded = LoadedProject(config=example.config.model_copy(update={"ingestion": ingestion}), project=example.project)
    assert trigger_time_column(loaded, ref("analytics.events_agg")) == "event_hour"


def summary(found: list[Probe]) -> list[tuple[str, str, str, str, int]]:
    return [(p.view.ref.name, p.trigger.fqn, p.trigger_column, p.target_column, p.grain_seconds) for p in found]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            "analytics.hourly_endpoint_stats",
            [("hourly_endpoint_stats_mv", "analytics.api_requests", "timestamp", "hour", 3600)],
        ),
        (
            "analytics.requests_enriched",
            [("enriched_requests_mv", "analytics.raw_requests", "timestamp", "timestamp", 0)],
        ),
        ("analytics.error_events", [("errors_mv", "analytics.all_events", "timestamp", "timestamp", 0)]),
        ("analytics.counter_daily", [("counter_daily_mv", "analytics.counter", "when", "day", 86400)]),
        ("analytics.events_agg", [("mv_events_agg", "analytics.raw_events", "timestamp", "event_date", 86400)]),
        ("analytics.events_daily", [("mv_events_daily", "analytics.events_agg", "event_date", "event_date", 0)]),
        ("analytics.events_weekly", [("mv_events_weekly", "analytics.events_daily", "event_date", "week", 7 * 86400)]),
        ("analytics.entity_latest", []),
    ],
    ids=[
        "toStartOfHour",
        "bare-column",
        "routing",
        "toStartOfDay-quoted",
        "first-truncating-output",
        "chain-hop-from-partition-column",
        "toMonday",
        "output-keeps-no-time-column",
    ],
)
def test_probes_of_the_example(example, target, expected):
    assert summary(probes(example, ref(target))) == expected


def test_probe_holds_the_view_itself(example):
    (probe,) = probes(example, ref("analytics.error_events"))
    assert probe.view is example.project.views[ref("analytics.errors_mv")]


FANIN = """
CREATE TABLE d.a (ts DateTime, k String) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE d.b (at DateTime, k String) ENGINE = MergeTree PARTITION BY toYYYYMM(at) ORDER BY at;
CREATE TABLE d.c (k String) ENGINE = MergeTree ORDER BY k;
CREATE TABLE d.sink (minute DateTime, k String) ENGINE = MergeTree PARTITION BY toYYYYMMDD(minute) ORDER BY k;
CREATE MATERIALIZED VIEW d.a_mv TO d.sink AS SELECT toStartOfFiveMinutes(ts) AS minute, k FROM d.a;
CREATE MATERIALIZED VIEW d.b_mv TO d.sink AS SELECT toStartOfFifteenMinutes(at) AS minute, k FROM d.b;
CREATE MATERIALIZED VIEW d.c_mv TO d.sink AS SELECT now() AS minute, k FROM d.c;
CREATE MATERIALIZED VIEW d.n_mv TO d.sink AS SELECT toDateTime(number) AS minute, toString(number) AS k
FROM numbers(10);
CREATE MATERIALIZED VIEW d.r_mv REFRESH EVERY 1 HOUR TO d.sink AS SELECT toStartOfMinute(ts) AS minute, k FROM d.a;
"""


def test_probes_of_a_fan_in_skip_what_cannot_be_measured(tmp_path):
    """No probe for a refreshable MV, an MV without a trigger table, or one whose trigger has no time column."""
    loaded = load_ddl(tmp_path, FANIN, toml='default_database = "d"')
    assert summary(probes(loaded, ref("d.sink"))) == [
        ("a_mv", "d.a", "ts", "minute", 300),
        ("b_mv", "d.b", "at", "minute", 900),
    ]


@pytest.mark.parametrize(
    ("schedule", "period"),
    [
        ("EVERY 2 HOUR OFFSET 5 MINUTE", timedelta(hours=2)),
        ("AFTER 30 MINUTE", timedelta(minutes=30)),
        ("EVERY 1 HOUR 30 MINUTE", timedelta(minutes=90)),
        ("EVERY 5 MINUTES RANDOMIZE FOR 1 MINUTE", timedelta(minutes=5)),
        ("every 1 week depends on d.other", timedelta(weeks=1)),
        ("EVERY 1 MONTH", timedelta(days=31)),
        ("EVERY 1 FORTNIGHT", None),
        ("", None),
    ],
)
def test_refresh_period(schedule, period):
    assert refresh_period(schedule) == period


FRESHNESS_DDL = """
CREATE TABLE d.src (ts DateTime, k String) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.copy (ts DateTime, k String) ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY ts;
CREATE MATERIALIZED VIEW d.copy_mv TO d.copy AS SELECT ts, k FROM d.src;
CREATE TABLE d.snap (k String, n UInt64) ENGINE = MergeTree ORDER BY k;
CREATE MATERIALIZED VIEW d.snap_mv REFRESH EVERY 1 DAY TO d.snap AS SELECT k, count() AS n FROM d.src GROUP BY k;
"""


@pytest.mark.parametrize(("sla", "window"), [(5, timedelta(minutes=5)), (0, timedelta(minutes=1))])
def test_freshness_window_is_the_sla_at_least_a_minute_plus_a_refresh_period(tmp_path, sla, window):
    loaded = load_ddl(tmp_path, FRESHNESS_DDL, toml=f'default_database = "d"\nsla_minutes = {sla}')
    assert freshness_window(loaded, ref("d.copy")) == window
    assert freshness_window(loaded, ref("d.snap")) == window + timedelta(days=1)
    assert freshness_window(loaded, ref("d.src")) is None  # a source: nothing writes it that chmv watches
