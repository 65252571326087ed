"""Helpers of the daylight-saving tests of the sensors: an hourly target and an hourly × region target across New
York's fall-back night of 2026 (or the same night in another zone), on the embedded engine."""

from __future__ import annotations

from pathlib import Path

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.lifecycle.deploy import apply
from resources.clickhouse import ClickHouseResource

from support.ddl import load_ddl

HOURLY, REGIONAL = ObjectRef(database="dst", name="hourly"), ObjectRef(database="dst", name="regional")

DST = """
CREATE DATABASE dst;
CREATE TABLE dst.events (ts DateTime, region String) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE dst.hourly (minute DateTime, rows UInt64)
    ENGINE = SummingMergeTree PARTITION BY toStartOfHour(minute) ORDER BY minute;
CREATE MATERIALIZED VIEW dst.hourly_mv TO dst.hourly AS
    SELECT toStartOfMinute(ts) AS minute, count() AS rows FROM dst.events GROUP BY minute;
CREATE TABLE dst.regional (minute DateTime, region String, rows UInt64)
    ENGINE = SummingMergeTree PARTITION BY (toStartOfHour(minute), region) ORDER BY (minute, region);
CREATE MATERIALIZED VIEW dst.regional_mv TO dst.regional AS
    SELECT toStartOfMinute(ts) AS minute, region, count() AS rows FROM dst.events GROUP BY minute, region;
"""
#: An hourly and a daily target of one source, with a measure: the rebuilds and staging across both nights.
HOURLY_DAILY = """
CREATE DATABASE dst;
CREATE TABLE dst.events (ts DateTime, n UInt32) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE dst.hourly (minute DateTime, rows UInt64, n UInt64)
    ENGINE = SummingMergeTree PARTITION BY toStartOfHour(minute) ORDER BY minute;
CREATE MATERIALIZED VIEW dst.hourly_mv TO dst.hourly AS
    SELECT toStartOfMinute(ts) AS minute, count() AS rows, sum(n) AS n FROM dst.events GROUP BY minute;
CREATE TABLE dst.daily (day Date, rows UInt64, n UInt64) ENGINE = SummingMergeTree PARTITION BY toDate(day) ORDER BY day;
CREATE MATERIALIZED VIEW dst.daily_mv TO dst.daily AS
    SELECT toDate(ts) AS day, count() AS rows, sum(n) AS n FROM dst.events GROUP BY day;
"""
#: A row a minute by instant, 2026-11-01 04:00-08:00 UTC: New York 00:00 EDT to 03:00 EST, both 01:00 hours.
NIGHT = "INSERT INTO dst.events SELECT toDateTime('2026-11-01 04:00:00', 'UTC') + number * 60, 'eu' FROM numbers(240)"


def dst_project(root: Path, zone: str) -> tuple[LoadedProject, ClickHouseResource]:
    """An hourly target and an hourly × region target in the partition calendar of ``zone``, deployed on an engine
    whose sessions compute in ``zone`` (as tests/scenarios/test_dst.py)."""
    toml = f'default_database = "dst"\npartition_start = "2026-10-01"\ntimezone = "{zone}"\n'
    loaded = load_ddl(root / "ddl", DST, toml=toml)
    engine = ClickHouseResource(dsn=f"chdb://{root / 'chdb'}", settings={"session_timezone": zone})
    with engine.get_client() as client:
        apply(client, loaded.project)
        client.command(NIGHT)
    return loaded, engine
