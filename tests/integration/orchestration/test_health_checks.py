"""The health checks in Dagster (real runs on the embedded engine): numbers as metadata, failing verdicts with what to
do sent to the alert sink; the ``chmv_health`` sensor; a detached MV found, re-attached by a ``chmv_apply`` run and its
gap rebuilt; the maintenance sensor and job."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import clickhouse_connect
import pytest
from dagster import AssetCheckKey, AssetCheckSeverity, DagsterInstance

from asset_checks.definitions import HEALTH, PARITY, PARTS
from asset_checks.health_checks import health_check_keys
from chmv_assets.alerts import sink_for
from chmv_assets.ddl.loader import load
from chmv_assets.orchestration.definitions import build_definitions

from support.checks import TRANSLATOR, evaluations, execute, ref, requested, run_checks, run_parity, tick
from support.engines import make_engine
from support.paths import EXAMPLE_DDL
from support.spark import copy_engine

pytestmark = pytest.mark.worker_seconds(60)

AUDIT, ERRORS, ALL_EVENTS = ref("audit_log"), ref("error_events"), ref("all_events")


@pytest.fixture(scope="module")
def base(tmp_path_factory, example) -> Path:
    path = tmp_path_factory.mktemp("health") / "chdb"
    make_engine(path, example, rows=20_000)
    return path


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self) -> None:  # noqa: N802
        type(self).received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _key(target) -> AssetCheckKey:
    return AssetCheckKey(TRANSLATOR.get_asset_key(target), HEALTH)


def _fail_a_mutation(client, table: str = "error_events") -> None:
    client.command(
        f"ALTER TABLE analytics.{table} UPDATE payload = toString(throwIf(1, 'no such payload')) WHERE 1",
        settings={"mutations_sync": 0},
    )
    deadline = time.monotonic() + 60  # its first attempt is asynchronous: wait until the server has tried it
    sql = f"SELECT count() FROM system.mutations WHERE table = '{table}' AND latest_fail_reason != ''"
    while not int(client.command(sql)):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_every_target_has_a_health_check_and_the_sensors_load(example) -> None:
    repository = build_definitions(example, translator=TRANSLATOR).get_repository_def()
    assert {"chmv_health", "chmv_maintenance"} <= {s.name for s in repository.sensor_defs}
    keys = {k for k in repository.asset_graph.asset_check_keys if k.name == HEALTH}
    assert keys == set(health_check_keys(example, TRANSLATOR)) and len(keys) == 10  # the sources through their targets
    assert {k.asset_key for k in keys} == {TRANSLATOR.get_asset_key(t) for t in example.project.targets}
    assert repository.get_sensor_def("chmv_maintenance").default_status.value == "STOPPED"  # [maintenance] is opt-in
    assert repository.get_sensor_def("chmv_health").default_status.value == "RUNNING"


def test_health_checks_carry_their_numbers_and_send_failures_with_what_to_do(tmp_path: Path, base: Path) -> None:
    handler = type("Hook", (_Hook,), {"received": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        loaded = load(EXAMPLE_DDL, alert_webhook=f"http://127.0.0.1:{server.server_port}/alerts")
        engine = copy_engine(base, tmp_path / "chdb")
        # The engine stays up through the checks, as a server would: a mutation's fail reason lives in the server's
        # memory only, so each reopening of the embedded engine (a server's restart) shows a failed mutation as
        # merely pending until the server has tried it again (docs/pacing-and-health.md).
        running = clickhouse_connect.get_client(dsn=engine.resolved_dsn)
        _fail_a_mutation(running)
        _fail_a_mutation(running, "all_events")  # a source: reported by the three targets its MVs write
        running.command("DETACH TABLE analytics.audit_mv PERMANENTLY")
        instance = DagsterInstance.local_temp(str(tmp_path))
        result = run_checks(loaded, engine, health_check_keys(loaded, TRANSLATOR), instance)
        by_table = {tuple(e.asset_key.path): e for e in evaluations(result, HEALTH)}
        assert len(by_table) == 10
        errors, audit = by_table[("analytics", "error_events")], by_table[("analytics", "audit_log")]
        assert not errors.passed and errors.severity == AssetCheckSeverity.ERROR
        # the numbers are the target's own table's; the source's failed mutation is a finding of its own
        assert errors.metadata["mutations_failed"].value == 1 and errors.metadata["mutations_pending"].value == 1
        assert "no such payload" in errors.description and "KILL MUTATION" in errors.metadata["chmv/findings"].value
        assert "| analytics.all_events |" in errors.metadata["chmv/findings"].value
        assert "not checked on the embedded engine" in errors.metadata["chmv/not_checked"].value
        assert not audit.passed and audit.metadata["views_detached"].value == 1
        metrics = by_table[("analytics", "metric_events")]
        assert not metrics.passed and metrics.severity == AssetCheckSeverity.ERROR
        assert metrics.metadata["mutations_failed"].value == 0 and metrics.description.startswith(
            "analytics.all_events:"
        )
        healthy = by_table[("analytics", "events_agg")]
        assert healthy.passed and healthy.metadata["mutations_pending"].value == 0
        assert healthy.description.startswith("healthy")
        assert (
            healthy.metadata["chmv/checked"].value
            == "analytics.events_agg, analytics.mv_events_agg, analytics.raw_events"
        )
        assert sink_for(loaded.config.alert_webhook).flush(10)
        sent = [a for a in handler.received if a["details"].get("check") == HEALTH]
        alerts = {a["subject"]: a for a in sent}
        assert set(alerts) == {"analytics.error_events", "analytics.audit_log", "analytics.all_events"}
        assert len(sent) == 3  # the source's finding once, not once per target reading it
        assert alerts["analytics.error_events"]["kind"] == "check_failed"
        assert alerts["analytics.error_events"]["details"]["finding"] == "mutation_failed"
        assert "chmv_recovery re-attaches it" in alerts["analytics.audit_log"]["details"]["fix"]
        source = alerts["analytics.all_events"]
        assert source["kind"] == "check_failed" and source["details"]["finding"] == "mutation_failed"
        targets = ["analytics.audit_log", "analytics.error_events", "analytics.metric_events"]
        assert sorted(source["details"]["targets"]) == targets
        running.close()
    finally:
        server.shutdown()


def test_the_health_sensor_runs_the_checks_whose_verdict_changed(tmp_path: Path, base: Path, example) -> None:
    engine = copy_engine(base, tmp_path / "chdb")
    instance = DagsterInstance.local_temp(str(tmp_path))
    first = tick(example, "chmv_health", engine, instance, None)
    (report,) = first.run_requests  # the first tick reports every health and part-count check
    assert report.tags["chmv/reason"] == "health_report"
    assert {k.name for k in report.asset_check_keys} == {HEALTH, PARTS} and len(report.asset_check_keys) == 20
    second = tick(example, "chmv_health", engine, instance, first.cursor)
    assert not second.run_requests and "no verdict changed (0 of 10 asset(s) unhealthy)" in second.skip_message
    with engine.get_client() as client:
        client.command("DETACH TABLE analytics.audit_mv PERMANENTLY")
    third = tick(example, "chmv_health", engine, instance, second.cursor)
    (changed,) = third.run_requests
    assert changed.tags["chmv/reason"] == "health_changed" and list(changed.asset_check_keys) == [_key(AUDIT)]
    result = run_checks(example, engine, list(changed.asset_check_keys), instance)
    (evaluation,) = evaluations(result, HEALTH)
    assert not evaluation.passed and "the MV is detached" in evaluation.description


def test_a_detached_mv_is_reattached_by_an_apply_run_and_its_gap_rebuilt(tmp_path: Path, base: Path) -> None:
    """No new row in the newest partition (no staleness): the health check finds the MV, recovery restores it through
    chmv_apply after two ticks, parity then sees the rows of an old month it missed, and recovery rebuilds them."""
    loaded = load(EXAMPLE_DDL, recovery_cooldown_minutes=0)
    engine = copy_engine(base, tmp_path / "chdb")
    with engine.get_client() as client:
        client.command("DETACH TABLE analytics.audit_mv PERMANENTLY")
        client.command(
            "INSERT INTO analytics.all_events SELECT toDateTime('2026-08-10 10:00:00') + number, 'click', 'info', 1, "
            "'gap' FROM numbers(30)"
        )
    instance = DagsterInstance.local_temp(str(tmp_path))
    (found,) = evaluations(run_checks(loaded, engine, [_key(AUDIT)], instance), HEALTH)
    assert not found.passed and found.metadata["views_detached"].value == 1

    first = tick(loaded, "chmv_recovery", engine, instance, None)
    assert not first.run_requests  # seen once: a rebuild's pause of a consumer lasts seconds, never two ticks
    second = tick(loaded, "chmv_recovery", engine, instance, first.cursor)
    (repair,) = second.run_requests
    assert repair.job_name == "chmv_apply" and repair.tags["chmv/objects"] == "analytics.audit_mv"
    assert "missing on the server: analytics.audit_mv (detached)" in repair.tags["chmv/reason"]
    assert execute(loaded, engine, instance, repair).success
    (healed,) = evaluations(run_checks(loaded, engine, [_key(AUDIT)], instance), HEALTH)
    assert healed.passed

    (gap,) = evaluations(run_parity(loaded, engine, AUDIT, instance, "2026-08-01", "2026-08-01"), PARITY)
    assert not gap.passed  # the 30 rows that arrived while it was detached
    third = tick(loaded, "chmv_recovery", engine, instance, second.cursor)
    (rebuild,) = third.run_requests
    assert requested(rebuild) == "2026-08-01" and rebuild.tags["chmv/reason"] == "parity_failed"
    assert execute(loaded, engine, instance, rebuild).success
    with engine.get_client() as client:
        assert client.command("SELECT count() FROM analytics.audit_log WHERE payload = 'gap'") == 30
    (passed,) = evaluations(run_parity(loaded, engine, AUDIT, instance, "2026-08-01", "2026-08-01"), PARITY)
    assert passed.passed


def test_the_maintenance_sensor_requests_a_run_in_its_window_only(tmp_path: Path, base: Path, example) -> None:
    engine = copy_engine(base, tmp_path / "chdb")
    with engine.get_client() as client:
        hour = int(client.command("SELECT toHour(now())"))
        for n in range(2):  # late rows of an old month of a SummingMergeTree target, two more parts there
            client.command(
                f"INSERT INTO analytics.counter VALUES ('2026-08-0{n + 2} 10:00:00', {900 + n}, 1)",
                settings={"async_insert": 0},
            )
    inside = f"{hour:02d}:00-{(hour + 2) % 24:02d}:00"  # now and the next hour (may wrap midnight)
    outside = f"{(hour + 3) % 24:02d}:00-{(hour + 3) % 24:02d}:30"
    instance = DagsterInstance.local_temp(str(tmp_path))
    closed = load(EXAMPLE_DDL, maintenance={"enabled": True, "window": outside})
    skipped = tick(closed, "chmv_maintenance", engine, instance, None)
    assert not skipped.run_requests and "outside the quiet window" in skipped.skip_message
    opened = load(EXAMPLE_DDL, maintenance={"enabled": True, "window": inside})
    (request,) = tick(opened, "chmv_maintenance", engine, instance, None).run_requests
    assert request.run_key.startswith("chmv-maintain:") and request.tags["chmv/reason"] == "late_partitions"
    job = build_definitions(opened, clickhouse=engine, translator=TRANSLATOR).get_job_def("chmv_maintain")
    result = job.execute_in_process(instance=instance, tags=dict(request.tags))
    assert result.success
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = output.event_specific_data.metadata
    assert metadata["chmv/partitions_merged"].value >= 1
    assert "| analytics.counter_daily | 202608 |" in metadata["chmv/merged"].value
    with engine.get_client() as client:
        parts = client.command(
            "SELECT count() FROM system.parts WHERE active AND table = 'counter_daily' AND partition_id = '202608'"
        )
    assert int(parts) == 1
