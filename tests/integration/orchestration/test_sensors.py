"""The code location loads with every check and sensor; staleness and drift sensors on the embedded engine."""

from __future__ import annotations

import json
import shutil
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from chmv_check_helpers import TRANSLATOR, engine_held_by_another_process, ref, tick
from conftest import EXAMPLE_DDL, make_engine
from dagster import DagsterInstance

from asset_checks.definitions import DRIFT, LINT, PARITY, PARTS
from chmv_assets.alerts import sink_for
from chmv_assets.ddl.loader import load
from chmv_assets.orchestration.definitions import build_definitions
from resources.clickhouse import ClickHouseResource


def test_definitions_load_with_checks_and_sensors(example) -> None:
    repository = build_definitions(example, translator=TRANSLATOR).get_repository_def()
    assert {s.name for s in repository.sensor_defs} == {"chmv_staleness", "chmv_recovery", "chmv_drift", "chmv_live_state", "chmv_parity_sweep"}
    check_keys = repository.asset_graph.asset_check_keys
    for target in example.project.targets:
        key = TRANSLATOR.get_asset_key(target)
        assert {c.name for c in check_keys if c.asset_key == key} == {PARITY, PARTS, DRIFT, LINT}
    parity = next(c for c in check_keys if c.name == PARITY and c.asset_key == TRANSLATOR.get_asset_key(ref("error_events")))
    assert repository.asset_graph.get(parity).blocking


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self) -> None:  # noqa: N802
        type(self).received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_staleness_alerts_the_webhook_and_requests_catch_up_once(tmp_path: Path) -> None:
    handler = type("Hook", (_Hook,), {"received": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        loaded = load(EXAMPLE_DDL, alert_webhook=f"http://127.0.0.1:{server.server_port}/alerts")
        engine = make_engine(tmp_path / "chdb", loaded, rows=20_000)
        instance = DagsterInstance.ephemeral()
        assert not tick(loaded, "chmv_staleness", engine, instance, None).run_requests  # fresh engine: nothing stale
        with engine.get_client() as client:
            client.command("DETACH TABLE analytics.audit_mv PERMANENTLY")
            client.command("INSERT INTO analytics.all_events SELECT toDateTime('2026-11-02 00:00:00') + number * 60, "
                           "'click', 'info', 1, 'a' FROM numbers(30)")  # fmt: skip
        data = tick(loaded, "chmv_staleness", engine, instance, None)
        requests = sorted(data.run_requests, key=lambda r: r.partition_key)
        assert [r.partition_key for r in requests] == ["2026-10-01", "2026-11-01"]
        assert all(r.tags["chmv/reason"] == "stale" and r.job_name == "chmv_rebuild_month" for r in requests)
        again = tick(loaded, "chmv_staleness", engine, instance, data.cursor)
        assert not again.run_requests and "nothing new" in again.skip_message
        assert sink_for(loaded.config.alert_webhook).flush(10)
        stale = [a for a in handler.received if a["kind"] == "stale"]
        assert [a["subject"] for a in stale] == ["analytics.audit_log"]
        assert stale[0]["details"]["lag_seconds"] > 5 * 60
    finally:
        server.shutdown()


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
    assert {k.name for k in request.asset_check_keys} == {DRIFT} and request.tags["chmv/reason"] == "ddl_changed"
    assert json.loads(first.cursor)["drifted"] == []
    assert "unchanged" in tick(loaded, "chmv_drift", engine, instance, first.cursor).skip_message
    sql = ddl / "40_all_events.sql"
    sql.write_text(sql.read_text().replace("WHERE is_audit = 1", "WHERE is_audit = 1 AND level != 'debug'"))
    changed = tick(loaded, "chmv_drift", engine, instance, first.cursor)
    assert len(changed.run_requests) == 1
    assert json.loads(changed.cursor)["drifted"] == ["analytics.audit_log"]


@pytest.mark.parametrize("name", ["chmv_staleness", "chmv_recovery"])
def test_missing_target_is_an_alert_not_a_crash(tmp_path: Path, example, name: str) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    with engine.get_client() as client:
        client.command("DROP TABLE analytics.audit_log SYNC")
    data = tick(example, name, engine, DagsterInstance.ephemeral(), None)
    assert not data.run_requests and data.skip_message
