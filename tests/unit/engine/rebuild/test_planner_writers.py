"""The planner reads who writes the triggers: open partitions deferred or their consumers paused, closed ones rebuilt,
a stream consumer's target never read."""

from __future__ import annotations

from datetime import datetime

import pytest

from chmv_assets.ddl.partitioning import keyed_window, partition_scheme, window_at, window_for_partition_key
from chmv_assets.engine.rebuild.planner import Engine, Observations, Swap, closes_at, plan_rebuild

from support.ddl import load_ddl, ref

DDL = """
CREATE DATABASE d;
CREATE TABLE d.app (ts DateTime, v UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE d.daily (day Date, n UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY day;
CREATE MATERIALIZED VIEW d.daily_mv TO d.daily AS SELECT toDate(ts) AS day, count() AS n FROM d.app GROUP BY day;
CREATE TABLE d.queue (ts DateTime, v UInt64) ENGINE = Kafka SETTINGS kafka_broker_list = 'k:9092',
    kafka_topic_list = 't', kafka_group_name = 'g', kafka_format = 'JSONEachRow';
CREATE TABLE d.landed (ts DateTime, v UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE MATERIALIZED VIEW d.consumer TO d.landed AS SELECT ts, v FROM d.queue;
CREATE TABLE d.per_day (day Date, s UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY day;
CREATE MATERIALIZED VIEW d.per_day_mv TO d.per_day AS SELECT toDate(ts) AS day, sum(v) AS s FROM d.landed GROUP BY day;
-- A week truncation into a monthly partition: a month's rows arrive until the last week that starts in it ends.
CREATE TABLE d.weekly (week Date, n UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMM(week) ORDER BY week;
CREATE MATERIALIZED VIEW d.weekly_mv TO d.weekly AS SELECT toMonday(ts) AS week, count() AS n FROM d.app GROUP BY week;
"""
NOVEMBER, OCTOBER = window_at(datetime(2026, 11, 1), "month"), window_at(datetime(2026, 10, 1), "month")
NOW = datetime(2026, 11, 24, 15, 0)


@pytest.fixture
def loaded(tmp_path):
    return load_ddl(tmp_path, DDL)


def plan(loaded, target: str, windows, now=NOW, **options):
    target_ref = ref(target)
    return plan_rebuild(
        loaded, target_ref, windows, Observations(live=target_ref, now=now, zone="UTC"), engine="clickhouse", **options
    )


def test_a_partition_open_to_others_is_deferred_with_when_it_closes(loaded):
    rebuild = plan(loaded, "d.daily", [OCTOBER, NOVEMBER])
    closed, open_ = rebuild.steps
    assert closed.engine == Engine.CLICKHOUSE and closed.swap == Swap.REPLACE_PARTITION
    assert open_.engine == Engine.DEFERRED and open_.shadow is None and open_.swap == Swap.NONE
    assert open_.closes_at == datetime(2026, 12, 1, 0, 15)  # the window's end + [writers] close_after_minutes
    assert open_.reason.startswith("open until 2026-12-01 00:15: d.app is written by others")
    assert rebuild.deferred == (open_,) and not rebuild.refused
    assert "**Deferred**" in rebuild.describe() and "- writers: d.app: others" in rebuild.describe()


def test_a_partition_closes_at_its_windows_end_plus_the_reach_of_a_coarser_truncation(loaded):
    weekly = plan(loaded, "d.weekly", [OCTOBER]).scheme
    # Monday 2026-10-26's week ends on 2026-11-01 and belongs to October: its rows arrive until then (+ 7 days max).
    assert closes_at(loaded, ref("d.weekly"), weekly, OCTOBER) == datetime(2026, 11, 8, 0, 15)
    assert plan(loaded, "d.weekly", [OCTOBER], now=datetime(2026, 11, 5)).steps[0].engine == Engine.DEFERRED
    assert plan(loaded, "d.weekly", [OCTOBER], now=datetime(2026, 11, 9)).steps[0].engine == Engine.CLICKHOUSE


def test_force_and_a_new_version_rebuild_an_open_partition_now_race_checked(loaded):
    for options in ({"force": True}, {"defer_open": False}):
        (step,) = plan(loaded, "d.daily", [NOVEMBER], **options).steps
        assert step.engine == Engine.CLICKHOUSE and "a read that races a write is not swapped" in step.reason


def test_only_chmv_writing_an_open_partition_rebuilds_it_under_the_gate(tmp_path):
    loaded = load_ddl(tmp_path, DDL, toml='[writers]\nchmv = ["d.app"]\n')
    (step,) = plan(loaded, "d.daily", [NOVEMBER]).steps
    assert step.engine == Engine.CLICKHOUSE and step.pause == () and "open" not in step.reason


def test_a_stream_consumer_writing_an_open_partition_is_paused_for_its_swap(loaded):
    closed, open_ = plan(loaded, "d.per_day", [OCTOBER, NOVEMBER]).steps
    assert open_.engine == Engine.CLICKHOUSE and open_.pause == (ref("d.consumer"),)
    assert "stream consumers d.consumer paused for the swap" in open_.reason
    assert closed.pause == ()


def test_a_stream_consumers_target_is_refused_and_its_stream_never_read(loaded):
    rebuild = plan(loaded, "d.landed", [OCTOBER])
    (step,) = rebuild.steps
    assert step.engine == Engine.REFUSED and step.relations == ()
    assert "its trigger d.queue (Kafka) is a stream: chmv never reads one" in rebuild.refusal()


def test_without_the_servers_time_nothing_is_deferred(loaded):
    assert plan(loaded, "d.daily", [NOVEMBER], now=None).steps[0].engine == Engine.CLICKHOUSE


KEYED = """
CREATE DATABASE d;
CREATE TABLE d.app (ts DateTime, region String, v UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE d.regional (day Date, region String, n UInt64) ENGINE = SummingMergeTree
PARTITION BY (toYYYYMM(day), region) ORDER BY day;
CREATE MATERIALIZED VIEW d.regional_mv TO d.regional AS
SELECT toDate(ts) AS day, region, count() AS n FROM d.app GROUP BY day, region;
CREATE TABLE d.per_region (region String, n UInt64) ENGINE = SummingMergeTree PARTITION BY region ORDER BY region;
CREATE MATERIALIZED VIEW d.per_region_mv TO d.per_region AS SELECT region, count() AS n FROM d.app GROUP BY region;
"""


def test_an_open_window_of_a_key_is_deferred_a_key_alone_never(tmp_path):
    """A partition is open by its time part: ``2026-11-01|eu`` waits for November to close like November does; a
    partition of a key alone has no time, so, like an unpartitioned target, it is rebuilt now, race-checked."""
    loaded = load_ddl(tmp_path, KEYED)
    scheme = partition_scheme(loaded.project.table(ref("d.regional")))
    closed, open_ = (window_for_partition_key(scheme, k) for k in ("2026-10-01|eu", "2026-11-01|eu"))
    first, second = plan(loaded, "d.regional", [closed, open_]).steps
    assert first.engine == Engine.CLICKHOUSE and second.engine == Engine.DEFERRED
    assert second.closes_at == datetime(2026, 12, 1, 0, 15) and second.key == "2026-11-01|eu"
    (alone,) = plan(loaded, "d.per_region", [keyed_window(("eu",))]).steps
    assert alone.engine == Engine.CLICKHOUSE and alone.closes_at is None
    assert "(without a time window it never closes)" in alone.reason
    assert alone.relations[0].predicate == "`region` = 'eu'"
