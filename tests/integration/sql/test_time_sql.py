"""Time values reach SQL one way (chmv_assets.sql.time_sql.time_sql), in the zone ClickHouse computes in, with the
session's zone read from the server (chmv_assets.engine.clock.session_zone): a session in another zone than the
value's changes nothing chmv writes.

Two cases failed before, each a value written another way:
- a watermark (a UTC instant) was bound as a naive ``{ts:DateTime64(6)}``, which a session in Asia/Kolkata read as
  its own wall clock: stored 5 h 30 early;
- a window of a column declaring its zone (``DateTime('Asia/Kolkata')``) was written ``toDateTime('…')``, read in the
  session's zone (UTC): the rebuild of the Kolkata day 2026-09-01 read [05:30, 05:30 the next day) and lost the rows
  of its first hours.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.clock import calendar_mismatch, server_zone, session_zone
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.rebuild.steps import rebuild
from chmv_assets.engine.watermarks import read_watermark, write_watermark
from resources.clickhouse import ClickHouseResource

from support.ddl import load_ddl

pytestmark = pytest.mark.worker_seconds(10)

DDL = """
CREATE DATABASE tz;
CREATE TABLE tz.events (ts DateTime('Asia/Kolkata'), n UInt32) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE tz.hourly (hour DateTime('Asia/Kolkata'), n UInt64)
    ENGINE = SummingMergeTree PARTITION BY toYYYYMMDD(hour) ORDER BY hour;
CREATE MATERIALIZED VIEW tz.hourly_mv TO tz.hourly AS
    SELECT toStartOfHour(ts) AS hour, sum(n) AS n FROM tz.events GROUP BY hour;
"""
HOURLY = ObjectRef(database="tz", name="hourly")
X = ObjectRef(database="landing", name="x")
#: Kolkata wall clock: two rows before 05:30 (the UTC day's start), one after, one the next day.
ROWS = [
    ("2026-09-01 01:00:00", 1),
    ("2026-09-01 05:00:00", 10),
    ("2026-09-01 12:00:00", 100),
    ("2026-09-02 01:00:00", 1000),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return load_ddl(tmp_path_factory.mktemp("ddl"), DDL)


def resource(path, zone: str) -> ClickHouseResource:
    """The engine at ``path`` with sessions in ``zone`` (``session_timezone``), whatever the process's zone."""
    return ClickHouseResource(dsn=f"chdb://{path}", settings={"session_timezone": zone})


def test_the_session_zone_is_read_from_the_server_once_per_client(tmp_path):
    with resource(tmp_path / "chdb", "Asia/Kolkata").get_client() as client:
        assert session_zone(client) == "Asia/Kolkata" and str(server_zone(client)) == "Asia/Kolkata"
        assert session_zone(client) is session_zone(client)  # kept: one read per client
        assert "set timezone = 'Asia/Kolkata'" in (calendar_mismatch(client, "UTC") or "")
        assert calendar_mismatch(client, "Asia/Kolkata") is None
    with resource(tmp_path / "chdb", "America/New_York").get_client() as other:
        assert session_zone(other) == "America/New_York"  # another client, read again


def test_a_watermark_is_the_same_instant_in_a_session_of_another_zone(tmp_path, project):
    instant = datetime(2026, 9, 1, 0, 0, 0, 250000)  # naive UTC, as chmv keeps watermarks
    with resource(tmp_path / "chdb", "Asia/Kolkata").get_client() as client:
        apply(client, project.project)
        write_watermark(client, X, last_processed_ts=instant, batch_id="b", status="committed")
        stored = client.query(
            "SELECT toString(watermark, 'UTC') FROM chmv_meta.ingestion_watermarks WHERE source = 'landing.x'"
        ).result_rows
        back = read_watermark(client, X)
    assert stored == [("2026-09-01 00:00:00.250",)]  # 2026-08-31 18:30:00.250 when bound naive
    assert back is not None and back.last_processed_ts == instant


@pytest.mark.parametrize("session", ["UTC", "America/New_York"])
def test_a_window_of_a_column_with_its_own_zone_is_its_wall_clock_whatever_the_session(tmp_path, project, session):
    engine = resource(tmp_path / "chdb", session)
    with engine.get_client() as client:
        apply(client, project.project)
        client.command(
            "INSERT INTO tz.events VALUES " + ", ".join(f"(toDateTime('{t}', 'Asia/Kolkata'), {n})" for t, n in ROWS)
        )
        client.command("TRUNCATE TABLE tz.hourly")  # the target lost everything: rebuild one Kolkata day
        result = rebuild(client, project, HOURLY, window_at(datetime(2026, 9, 1), "day"))
        held = client.query(
            "SELECT _partition_id, toString(hour, 'Asia/Kolkata'), n FROM tz.hourly FINAL ORDER BY hour"
        ).result_rows
    assert [tuple(r) for r in held] == [
        ("20260901", "2026-09-01 01:00:00", 1),
        ("20260901", "2026-09-01 05:00:00", 10),
        ("20260901", "2026-09-01 12:00:00", 100),
    ]
    assert result.rows_written == 3
    assert "toDateTime('2026-09-01 00:00:00', 'Asia/Kolkata')" in "\n".join(result.statements)


def test_a_calendar_zone_other_than_the_sessions_is_a_note_of_the_plan(tmp_path, project):
    """chmv.toml's ``timezone`` is Dagster's calendar: honoured there, never in SQL; ``chmv plan`` says when it is not
    the zone ClickHouse computes partitions in."""
    kolkata = load_ddl(tmp_path / "kolkata", DDL, toml='timezone = "Asia/Kolkata"')
    with resource(tmp_path / "chdb", "Asia/Kolkata").get_client() as client:
        notes = plan_lifecycle(client, project).notes
        agreed = plan_lifecycle(client, kolkata).notes
    assert [n for n in notes if n.startswith("timezone: chmv.toml has timezone = 'UTC'")], notes
    assert not [n for n in agreed if n.startswith("timezone:")], agreed
