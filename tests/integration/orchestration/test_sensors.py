"""The code location loads with every check and sensor; staleness and drift sensors on the embedded engine."""

from __future__ import annotations

import json
import shutil
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus

from asset_checks.definitions import DRIFT, HEALTH, LINT, PARITY, PARTS
from chmv_assets.alerts import sink_for
from chmv_assets.ddl.loader import load
from chmv_assets.engine.health.recovery import RepairKind
from chmv_assets.engine.health.staleness_memory import StalenessMemory
from chmv_assets.orchestration.dagster_compat import shared_value
from chmv_assets.orchestration.definitions import build_definitions
from chmv_assets.orchestration.sensors import read_ledger, staleness_key
from resources.clickhouse import ClickHouseResource

from support.checks import TRANSLATOR, engine_held_by_another_process, evaluations, execute, ref, run_parity, tick
from support.checks import requested as requested_range
from support.engines import make_engine
from support.paths import EXAMPLE_DDL


def test_definitions_load_with_checks_and_sensors(example) -> None:
    repository = build_definitions(example, translator=TRANSLATOR).get_repository_def()
    sensors = {"chmv_staleness", "chmv_recovery", "chmv_drift", "chmv_live_state", "chmv_parity_sweep", "chmv_health"}
    assert {s.name for s in repository.sensor_defs} == {*sensors, "chmv_maintenance"}
    check_keys = repository.asset_graph.asset_check_keys
    for target in example.project.targets:
        key = TRANSLATOR.get_asset_key(target)
        assert {c.name for c in check_keys if c.asset_key == key} == {PARITY, PARTS, DRIFT, LINT, HEALTH}
    parity = next(
        c for c in check_keys if c.name == PARITY and c.asset_key == TRANSLATOR.get_asset_key(ref("error_events"))
    )
    assert repository.asset_graph.get(parity).blocking


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self) -> None:  # noqa: N802
        type(self).received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_repeated_stale_ticks_request_each_partition_once(tmp_path: Path) -> None:
    """A detached MV while rows keep arriving: the staleness sensor alerts once and requests nothing; recovery, the one
    request path, restores the MV through a chmv_apply run, then rebuilds each lagging partition once."""
    handler = type("Hook", (_Hook,), {"received": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        loaded = load(EXAMPLE_DDL, alert_webhook=f"http://127.0.0.1:{server.server_port}/alerts")
        engine = make_engine(tmp_path / "chdb", loaded, rows=20_000)
        instance = DagsterInstance.local_temp(str(tmp_path))
        assert not tick(loaded, "chmv_staleness", engine, instance, None).run_requests  # fresh engine: nothing stale
        with engine.get_client() as client:
            client.command("DETACH TABLE analytics.audit_mv PERMANENTLY")
        cursors: dict[str, str | None] = {"chmv_staleness": None, "chmv_recovery": None}
        requested: list = []
        for n in range(6):  # rows keep arriving while the MV is detached: the newest expected value moves every tick
            with engine.get_client() as client:
                client.command(
                    f"INSERT INTO analytics.all_events SELECT toDateTime('2026-11-02 00:00:00') + {n * 600} "
                    "+ number * 60, 'click', 'info', 1, 'a' FROM numbers(10)"
                )
            for name in cursors:
                data = tick(loaded, name, engine, instance, cursors[name])
                cursors[name] = data.cursor or cursors[name]
                requested += [(name, r) for r in data.run_requests]
        assert [name for name, _ in requested] == ["chmv_recovery"]  # the repair, once; no rebuild while detached
        ((_, repair),) = requested
        assert repair.job_name == "chmv_apply" and repair.tags["chmv/objects"] == "analytics.audit_mv"
        assert "missing on the server: analytics.audit_mv (detached)" in repair.tags["chmv/reason"]
        with engine.get_client() as client:  # no DDL in the ticks: the MV is still detached
            assert not client.query("SELECT 1 FROM system.tables WHERE name = 'audit_mv'").result_rows
        assert execute(loaded, engine, instance, repair).success
        rebuilds = []
        for _ in range(4):
            data = tick(loaded, "chmv_recovery", engine, instance, cursors["chmv_recovery"])
            cursors["chmv_recovery"] = data.cursor
            rebuilds += data.run_requests
        assert [requested_range(r) for r in rebuilds] == ["2026-10-01..2026-11-01"]  # each partition once
        assert rebuilds[0].tags["chmv/reason"] == "stale" and rebuilds[0].job_name == "chmv_rebuild_month"
        assert execute(loaded, engine, instance, rebuilds[0]).success
        with engine.get_client() as client:
            assert client.command("SELECT count() FROM analytics.audit_log WHERE timestamp >= '2026-11-02'") == 60
        assert sink_for(loaded.config.alert_webhook).flush(10)
        stale = [a for a in handler.received if a["kind"] == "stale"]
        assert [a["subject"] for a in stale] == ["analytics.audit_log"]  # one alert for the episode
        assert stale[0]["details"]["lag_seconds"] > 5 * 60
    finally:
        server.shutdown()


def test_the_staleness_and_recovery_sensors_share_one_memory_of_staleness(tmp_path: Path) -> None:
    """A target the staleness sensor measured stale is the recovery's episode too: measured stale once more by
    recovery, it persists, and recovery requests its catch-up at its first tick (its own second measurement is not
    needed); the episode is alerted once, whoever measures it."""
    loaded = load(EXAMPLE_DDL)
    engine = make_engine(tmp_path / "chdb", loaded, rows=20_000)
    with engine.get_client() as client:  # new audit rows, then the target loses them: it lags its source
        client.command(
            "INSERT INTO analytics.all_events SELECT toDateTime('2026-11-02 00:00:00') + number * 60, 'click', 'info', "
            "1, 'a' FROM numbers(10)"
        )
        client.command("TRUNCATE TABLE analytics.audit_log")
    instance = DagsterInstance.local_temp(str(tmp_path))
    first = tick(loaded, "chmv_staleness", engine, instance, None)
    assert "1 stale target(s)" in first.skip_message
    (request,) = tick(loaded, "chmv_recovery", engine, instance, None).run_requests
    assert request.tags["chmv/reason"] == "stale" and request.tags["chmv/target"] == "analytics.audit_log"
    memory = StalenessMemory.from_data(json.loads(shared_value(instance, staleness_key(engine))))
    (episode,) = memory.episodes.values()
    assert memory.episodes.keys() == {"analytics.audit_log"} and episode.alerted and episode.seen == 2
    assert "1 stale target(s)" in tick(loaded, "chmv_staleness", engine, instance, first.cursor).skip_message


def test_a_partition_a_run_already_covers_is_not_requested_again(tmp_path: Path) -> None:
    """With no cooldown, a failed partition whose rebuild is queued is held (no attempt used) until the run ends."""
    loaded = load(EXAMPLE_DDL, recovery_cooldown_minutes=0)
    engine = make_engine(tmp_path / "chdb", loaded, rows=20_000)
    with engine.get_client() as client:
        client.command("INSERT INTO analytics.error_events VALUES ('2026-08-07 01:00:00', 'error', 'ghost')")
    instance = DagsterInstance.local_temp(str(tmp_path))
    assert not evaluations(run_parity(loaded, engine, ref("error_events"), instance, "2026-08-07", "2026-08-07"))[
        0
    ].passed
    first = tick(loaded, "chmv_recovery", engine, instance, None)
    (request,) = first.run_requests
    assert request.tags["chmv/attempt"] == "1" and request.partition_key == "2026-08-07"
    job = build_definitions(loaded, clickhouse=engine, translator=TRANSLATOR).resolve_job_def(request.job_name)
    queued = instance.create_run_for_job(
        job,
        status=DagsterRunStatus.NOT_STARTED,
        tags={"dagster/partition": "2026-08-07"},
        asset_selection=frozenset(request.asset_selection),
    )
    cursor = first.cursor
    for _ in range(3):
        data = tick(loaded, "chmv_recovery", engine, instance, cursor)
        assert not data.run_requests
        cursor = data.cursor
    assert read_ledger(cursor).of(RepairKind.REBUILD)["analytics.error_events|2026-08-07"].attempts == 1
    instance.report_run_failed(instance.get_run_by_id(queued.run_id))
    again = tick(loaded, "chmv_recovery", engine, instance, cursor)
    assert [r.tags["chmv/attempt"] for r in again.run_requests] == ["2"]
    assert again.run_requests[0].run_key != request.run_key


def test_busy_engine_skips_the_tick_with_the_reason(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    with engine_held_by_another_process(engine) as holder:
        data = tick(example, "chmv_recovery", engine, DagsterInstance.ephemeral(), None)
        assert "embedded engine busy" in data.skip_message
        assert holder.poll() is None, "the tick skipped while the engine was still held, without waiting for it"
        assert data.cursor is None  # nothing consumed: the next tick catches up


def test_unreachable_server_skips_with_the_reason(example) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ClickHouseResource(dsn=f"http://127.0.0.1:{port}")
    data = tick(example, "chmv_staleness", server, DagsterInstance.ephemeral(), None)
    assert "ClickHouse unreachable" in data.skip_message


def test_drift_sensor_reevaluates_when_the_ddl_changes(tmp_path: Path) -> None:
    ddl = tmp_path / "ddl"
    shutil.copytree(EXAMPLE_DDL, ddl)
    loaded = load(ddl)
    engine = make_engine(tmp_path / "chdb", loaded, rows=0)
    instance = DagsterInstance.ephemeral()
    first = tick(loaded, "chmv_drift", engine, instance, None)
    (request,) = first.run_requests
    # the first tick evaluates lint and part counts too: every check has a verdict from the start
    assert {k.name for k in request.asset_check_keys} == {DRIFT, LINT, PARTS}
    assert request.tags["chmv/reason"] == "ddl_changed"
    assert json.loads(first.cursor)["drifted"] == []
    assert "unchanged" in tick(loaded, "chmv_drift", engine, instance, first.cursor).skip_message
    sql = ddl / "40_all_events.sql"
    sql.write_text(sql.read_text().replace("WHERE is_audit = 1", "WHERE is_audit = 1 AND level != 'debug'"))
    changed = tick(loaded, "chmv_drift", engine, instance, first.cursor)
    assert len(changed.run_requests) == 1
    assert {k.name for k in changed.run_requests[0].asset_check_keys} == {DRIFT}
    assert json.loads(changed.cursor)["drifted"] == ["analytics.audit_log"]


@pytest.mark.parametrize("name", ["chmv_staleness", "chmv_recovery"])
def test_missing_target_is_an_alert_not_a_crash(tmp_path: Path, name: str) -> None:
    """A target dropped on the server: the tick completes, requests no rebuild of it, and an alert names it."""
    handler = type("Hook", (_Hook,), {"received": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        loaded = load(EXAMPLE_DDL, alert_webhook=f"http://127.0.0.1:{server.server_port}/alerts")
        engine = make_engine(tmp_path / "chdb", loaded, rows=0)
        with engine.get_client() as client:
            client.command("DROP TABLE analytics.audit_log SYNC")
        cursor, requested, instance = None, [], DagsterInstance.local_temp(str(tmp_path))
        for _ in range(2):  # recovery restores what is missing at two ticks in a row
            data = tick(loaded, name, engine, instance, cursor)
            cursor = data.cursor or cursor
            requested += data.run_requests
        assert sink_for(loaded.config.alert_webhook).flush(10)
        assert any("analytics.audit_log" in f"{a['subject']} {a['message']}" for a in handler.received)
        if name == "chmv_staleness":
            assert not requested  # staleness only alerts
            return
        ((repair,),) = [requested]  # recovery: the table back through the apply job, no rebuild of a missing table
        assert repair.job_name == "chmv_apply" and repair.tags["chmv/objects"] == "analytics.audit_log"
        assert execute(loaded, engine, instance, repair).success
        with engine.get_client() as client:  # inserts into the source reach the target again
            client.command("INSERT INTO analytics.all_events VALUES ('2026-08-05 02:00:00', 'login', 'info', 1, 'u')")
            assert client.command("SELECT count() FROM analytics.audit_log") == 1
    finally:
        server.shutdown()


def test_a_deferred_partition_is_requested_once_it_has_closed(tmp_path: Path, example) -> None:
    """A rebuild left an open partition until it closes (engine/rebuild/deferrals.py): recovery requests it then, once; one
    that closes in 2099 waits."""
    from datetime import datetime

    from chmv_assets.engine.rebuild.deferrals import Deferral, record

    engine = make_engine(tmp_path / "chdb", example, rows=0)
    errors, audit = ref("error_events"), ref("audit_log")
    with engine.get_client() as client:
        record(
            client,
            [
                Deferral(errors, "2026-08-07", datetime(2026, 8, 8, 0, 15), "open to writers"),
                Deferral(audit, "2099-01-01", datetime(2099, 2, 1), "open to writers"),
            ],
        )
    instance = DagsterInstance.local_temp(str(tmp_path))
    first = tick(example, "chmv_recovery", engine, instance, None)
    assert [(r.tags["chmv/target"], r.partition_key, r.tags["chmv/reason"]) for r in first.run_requests] == [
        ("analytics.error_events", "2026-08-07", "deferred")
    ]
    assert not tick(example, "chmv_recovery", engine, instance, first.cursor).run_requests  # the cooldown holds it
