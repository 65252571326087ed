"""Live state: partitions that hold data appear as materialized without a run (real chdb, real Dagster sensor)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetKey, AssetSelection, DagsterInstance, materialize

from asset_checks.names import PARITY
from chmv_assets import demo_data
from chmv_assets.ddl.loader import load
from chmv_assets.orchestration import live_state
from chmv_assets.orchestration.assets import build_chmv_assets
from chmv_assets.orchestration.live_state import evaluate_live_state, tracked_assets
from spark.assets import pyspark_resource

from support.checks import TRANSLATOR, engine_held_by_another_process, ref, tick
from support.dst import dst_project
from support.engines import make_engine

FAN_IN = """
CREATE DATABASE IF NOT EXISTS app ENGINE = Atomic;
CREATE TABLE app.a (ts DateTime, x UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE app.b (ts DateTime, x UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE app.dim (x UInt64, name String) ENGINE = MergeTree ORDER BY x;
CREATE DICTIONARY app.names (x UInt64, name String) PRIMARY KEY x SOURCE(CLICKHOUSE(DB 'app' TABLE 'dim'))
LAYOUT(FLAT()) LIFETIME(60);
CREATE TABLE app.t (ts DateTime, x UInt64, name String) ENGINE = MergeTree PARTITION BY toStartOfHour(ts) ORDER BY ts;
CREATE MATERIALIZED VIEW app.a_mv TO app.t AS SELECT ts, x, dictGet('app.names', 'name', x) AS name FROM app.a;
CREATE MATERIALIZED VIEW app.b_mv TO app.t AS SELECT ts, x, '' AS name FROM app.b;
CREATE TABLE app.odd (k UInt64) ENGINE = MergeTree PARTITION BY k % 10 ORDER BY k;
CREATE MATERIALIZED VIEW app.odd_mv TO app.odd AS SELECT x AS k FROM app.a;
CREATE MATERIALIZED VIEW app.inner_mv ENGINE = MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY ts AS SELECT ts, x FROM app.b
"""


def key(name: str, database: str = "analytics") -> AssetKey:
    return AssetKey([database, name])


def report(instance: DagsterInstance, data) -> None:
    """What the sensor daemon does with a tick's asset events."""
    for event in data.asset_events:
        instance.report_runless_asset_event(event)


@pytest.fixture
def demo(tmp_path: Path, example, monkeypatch):
    """The example project with a landing zone configured (its sources are daily ingestion assets); 5 days of rows.

    Few days keep the test fast: Dagster records a runless event in ~10-30 ms on SQLite.
    """
    landing = tmp_path / "landing"
    landing.mkdir()
    monkeypatch.setenv("CHMV_LANDING_DIR", str(landing))
    engine = make_engine(tmp_path / "chdb", example)
    with engine.get_client() as client:
        demo_data.load_into_clickhouse(client, demo_data.generate_all(3000, days=5))
    return engine


def test_the_demo_is_materialized_without_a_run(demo, example, tmp_path: Path) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))  # SQLite, as dagster dev
    data = tick(example, "chmv_live_state", demo, instance, None)
    report(instance, data)
    assert not instance.get_runs()  # nothing was launched

    with demo.get_client() as client:
        monthly = {
            f"{m}-01"
            for (m,) in client.query(
                "SELECT DISTINCT formatDateTime(day, '%Y-%m') FROM analytics.counter_daily"
            ).result_rows
        }
        days = dict(
            client.query(
                "SELECT toString(toDate(timestamp)), count() FROM analytics.error_events GROUP BY 1"
            ).result_rows
        )
        source_days = dict(
            client.query("SELECT toString(toDate(timestamp)), count() FROM analytics.all_events GROUP BY 1").result_rows
        )
    assert instance.get_materialized_partitions(key("counter_daily")) == monthly
    assert instance.get_materialized_partitions(key("error_events")) == set(days)
    assert instance.get_materialized_partitions(key("all_events")) == set(source_days)  # the ingestion asset's days
    assert instance.get_latest_materialization_event(key("entity_latest")) is not None  # unpartitioned

    by_partition = {(e.asset_key, e.partition): e for e in data.asset_events}
    day = sorted(days)[3]
    event = by_partition[(key("error_events"), day)]
    assert event.metadata["dagster/partition_row_count"].value == days[day]
    assert event.metadata["chmv/parts"].value >= 1 and event.metadata["chmv/bytes_on_disk"].value > 0
    assert abs(event.metadata["dagster/last_updated_timestamp"].value - time.time()) < 600  # written just now
    assert by_partition[(key("all_events"), day)].metadata["dagster/partition_row_count"].value == source_days[day]


def test_only_changed_partitions_are_reported_in_at_most_two_queries(demo, example) -> None:
    with demo.get_client() as client:
        first = evaluate_live_state(client, example, TRANSLATOR, None)
        assert first.queries == 2 and len(first.events) > 40
        again = evaluate_live_state(client, example, TRANSLATOR, first.cursor)
        assert again.queries == 1 and not again.events
        client.command("INSERT INTO analytics.all_events VALUES ('2026-08-03 01:00:00', 'click', 'error', 1, 'x')")
        changed = evaluate_live_state(client, example, TRANSLATOR, again.cursor)
    assert changed.queries == 2
    got = {(e.asset_key.path[-1], e.partition) for e in changed.events}
    # the routing MVs wrote the error (daily) and audit (monthly) targets; the source's day changed
    assert got == {("all_events", "2026-08-03"), ("error_events", "2026-08-03"), ("audit_log", "2026-08-01")}


def test_a_cold_start_is_spread_over_ticks_and_an_unreadable_cursor_starts_over(demo, example, monkeypatch) -> None:
    with demo.get_client() as client:
        everything = evaluate_live_state(client, example, TRANSLATOR, "not a cursor")
        monkeypatch.setattr(live_state, "MAX_EVENTS_PER_TICK", 10)
        cursor, reported, ticks = None, [], 0
        while True:
            report = evaluate_live_state(client, example, TRANSLATOR, cursor)
            if not report.events:
                break
            assert len(report.events) <= 10 and report.queries <= 2
            cursor, reported, ticks = report.cursor, reported + report.events, ticks + 1
    key = lambda e: (e.asset_key.to_user_string(), e.partition or "")  # noqa: E731
    assert sorted(map(key, reported)) == sorted(map(key, everything.events))  # each partition once, none lost
    assert ticks == -(-len(everything.events) // 10)
    targets = {TRANSLATOR.get_asset_key(t) for t in example.project.targets}
    first = sum(e.asset_key in targets for e in everything.events)
    assert all(e.asset_key in targets for e in reported[:first])  # the targets' state first


def test_a_partition_a_run_materialized_is_not_reported_again(demo, example, tmp_path: Path) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))
    data = tick(example, "chmv_live_state", demo, instance, None)
    report(instance, data)
    check = AssetCheckKey(key("error_events"), PARITY)
    assets = build_chmv_assets(example, TRANSLATOR)
    run = materialize(
        assets,
        selection=AssetSelection.assets(key("error_events")) | AssetSelection.checks(check),
        partition_key="2026-08-05",
        instance=instance,
        resources={"clickhouse": demo, "pyspark": pyspark_resource()},
    )
    assert run.success
    after = tick(example, "chmv_live_state", demo, instance, data.cursor)
    assert not after.asset_events  # the rebuild swapped new parts in, but the run already reported them
    info = {i.partition_key: i for i in instance.event_log_storage.get_asset_check_partition_info([check])}
    assert info["2026-08-05"].is_current  # so the check result still counts for the partition in the UI
    with demo.get_client() as client:  # a later write by the live MV is reported
        client.command("INSERT INTO analytics.all_events VALUES ('2026-08-05 02:00:00', 'click', 'error', 0, 'y')")
    later = tick(example, "chmv_live_state", demo, instance, after.cursor)
    assert {(e.asset_key.path[-1], e.partition) for e in later.asset_events} == {
        ("error_events", "2026-08-05"),
        ("all_events", "2026-08-05"),
    }


def test_hourly_fan_in_dictionary_inner_mv_and_external_sources(tmp_path: Path) -> None:
    (tmp_path / "ddl").mkdir()
    (tmp_path / "ddl" / "x.sql").write_text(FAN_IN)
    loaded = load(tmp_path / "ddl", default_database="app", partition_start="2026-01-01")
    engine = make_engine(tmp_path / "chdb", loaded)
    with engine.get_client() as client:
        client.command("INSERT INTO app.dim VALUES (1, 'one'), (2, 'two')")
        client.command(
            "INSERT INTO app.a SELECT toDateTime('2026-03-01 10:00:00') + number * 600, number % 3 FROM numbers(12)"
        )
        client.command("INSERT INTO app.b SELECT toDateTime('2026-03-02 00:30:00') + number * 3600, 1 FROM numbers(3)")
        client.command("SYSTEM RELOAD DICTIONARY app.names")
        result = evaluate_live_state(client, loaded, TRANSLATOR, None)
    kinds = {t.key.path[-1]: t.kind for t in tracked_assets(loaded, TRANSLATOR)}
    assert kinds == {
        "t": "target",
        "odd": "target",
        "inner_mv": "target",
        "a": "source",
        "b": "source",
        "names": "dictionary",
        "dim": "source",
    }
    got = {}
    for event in result.events:
        got.setdefault(event.asset_key.path[-1], {})[event.partition] = event.metadata
    assert sorted(got["t"]) == [
        "2026-03-01-10:00",
        "2026-03-01-11:00",
        "2026-03-02-00:00",
        "2026-03-02-01:00",
        "2026-03-02-02:00",
    ]
    assert sum(m["dagster/partition_row_count"].value for m in got["t"].values()) == 15
    assert list(got["inner_mv"]) == ["2026-03-02"]  # the inner table's rows, under the MV's key
    # PARTITION BY k % 10, a key alone: one event per value the server holds (x % 3 wrote 0, 1 and 2)
    assert sorted(got["odd"]) == ["0", "1", "2"]
    assert sum(m["dagster/partition_row_count"].value for m in got["odd"].values()) == 12
    assert got["a"][None]["dagster/row_count"].value == 12 and got["dim"][None]["dagster/row_count"].value == 2
    assert got["names"][None]["dagster/row_count"].value == 2  # the dictionary's loaded elements


#: Per zone, the hourly keys of the night and their rows (Kolkata's hours start at :30 UTC).
NIGHT_KEYS = {
    "America/New_York": {
        "2026-11-01-00:00": 60,
        "2026-11-01-01:00": 60,
        "2026-11-01-01:00-0500": 60,
        "2026-11-01-02:00": 60,
    },
    "Asia/Kolkata": {
        "2026-11-01-09:00": 30,
        "2026-11-01-10:00": 60,
        "2026-11-01-11:00": 60,
        "2026-11-01-12:00": 60,
        "2026-11-01-13:00": 30,
    },
}


@pytest.mark.parametrize("zone", list(NIGHT_KEYS))
def test_each_hour_of_a_fall_back_night_is_reported_under_its_own_key(tmp_path: Path, zone: str) -> None:
    """The live state of an hourly target and of an hourly × region target: each ClickHouse partition under the key
    of the window its rows are in, told apart by the instant of its oldest row (``system.parts``' min/max index).
    Before, both 01:00 hours of New York's night were counted under ``2026-11-01-01:00`` (120 rows), the second key
    reported nothing, and the hourly × region target's keys were read from the parts' wall clocks."""
    loaded, engine = dst_project(tmp_path, zone)
    with engine.get_client() as client:
        result = evaluate_live_state(client, loaded, TRANSLATOR, None)
    got: dict[str, dict[str, int]] = {}
    for event in result.events:
        if event.asset_key.path[0] == "dst" and event.partition is not None:
            rows = event.metadata["dagster/partition_row_count"].value
            got.setdefault(event.asset_key.path[-1], {})[event.partition] = rows
    assert got["hourly"] == NIGHT_KEYS[zone]
    assert got["regional"] == {f"{k}|eu": n for k, n in NIGHT_KEYS[zone].items()}


def test_busy_engine_skips_the_tick_with_the_reason(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    with engine_held_by_another_process(engine) as holder:
        data = tick(example, "chmv_live_state", engine, DagsterInstance.ephemeral(), None)
        assert "embedded engine busy" in data.skip_message and not data.asset_events
        assert holder.poll() is None, "the tick skipped while the engine was still held"
        assert data.cursor is None  # nothing consumed: the next tick reports it


def test_the_sensor_runs_by_default(example) -> None:
    from chmv_assets.orchestration.definitions import build_definitions
    from resources.clickhouse import ClickHouseResource

    repository = build_definitions(
        example, clickhouse=ClickHouseResource(dsn="chdb:///nonexistent")
    ).get_repository_def()
    sensor = repository.get_sensor_def("chmv_live_state")
    assert sensor.default_status.value == "RUNNING" and sensor.minimum_interval_seconds <= 30
    assert ref("error_events").fqn == "analytics.error_events"
