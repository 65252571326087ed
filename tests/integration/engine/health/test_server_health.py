"""Health on the embedded engine: a mutation that cannot finish is reported with its reason, a stuck one warns, MVs
detached or missing are found, replication says why it is not checked here; every golden health statement runs; late
partitions of collapsing targets are merged."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

from chmv_assets.ddl.config import HealthConfig, MaintenanceConfig, PacingConfig
from chmv_assets.engine.health.maintenance import late_partitions, merge_late_partitions
from chmv_assets.engine.health.server_health import EMBEDDED_REPLICATION, assess, subjects, views_off

from support.engines import make_engine
from support.health import statements
from support.spark import copy_engine, digest, ref

pytestmark = pytest.mark.worker_seconds(25)

ERRORS, AUDIT, COUNTER = ref("error_events"), ref("audit_log"), ref("counter_daily")


def _until_tried(client, table: str, timeout: float = 60.0) -> None:
    """Wait until the server has tried the table's mutation and recorded why it failed (its first attempt is
    asynchronous)."""
    deadline = time.monotonic() + timeout
    sql = f"SELECT count() FROM system.mutations WHERE table = '{table}' AND latest_fail_reason != ''"
    while not int(client.command(sql)):
        assert time.monotonic() < deadline, "the server never tried the mutation"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def base(tmp_path_factory, example) -> Path:
    path = tmp_path_factory.mktemp("health") / "chdb"
    make_engine(path, example, rows=20_000)
    return path


def test_every_golden_health_statement_runs_on_the_embedded_engine(loaded_engine) -> None:
    with loaded_engine.get_client() as client:
        for name, text in statements().items():
            for sql in (s.strip() for s in re.split(r";\n", text) if s.strip()):
                body = "\n".join(line for line in sql.splitlines() if not line.startswith("--")).rstrip(";")
                if body.startswith("OPTIMIZE"):
                    continue  # names a replicated table the embedded engine does not have
                client.query(body)  # parses, and reads the system tables as a server would (no replica here)
            assert name


def test_a_mutation_that_cannot_finish_is_reported_with_its_reason(tmp_path: Path, base: Path, example) -> None:
    engine = copy_engine(base, tmp_path / "chdb")
    with engine.get_client() as client:
        client.command(
            "ALTER TABLE analytics.error_events UPDATE payload = toString(throwIf(1, 'no such payload')) WHERE 1",
            settings={"mutations_sync": 0},
        )
        _until_tried(client, "error_events")
        health = assess(client, example.project, [subjects(example.project)[ERRORS]])[ERRORS]
    assert health.severity == "error"
    (finding,) = health.findings
    assert finding.kind == "mutation_failed" and finding.subject == "analytics.error_events"
    assert "UPDATE payload = toString(throwIf(1, 'no such payload'))" in finding.message
    assert "cannot finish: Code: 395. DB::Exception: no such payload" in finding.message
    assert "KILL MUTATION WHERE database = 'analytics' AND table = 'error_events' AND mutation_id = " in finding.fix
    assert health.figures["mutations_failed"] == 1 and health.figures["mutations_pending"] == 1
    assert health.skipped == (EMBEDDED_REPLICATION,)


def test_a_mutation_that_does_not_progress_is_stuck(tmp_path: Path, base: Path, example) -> None:
    engine = copy_engine(base, tmp_path / "chdb")
    with engine.get_client() as client:
        client.command("SYSTEM STOP MERGES analytics.audit_log")  # mutations wait for the merge pool too
        client.command("ALTER TABLE analytics.audit_log DELETE WHERE payload = 'x'", settings={"mutations_sync": 0})
        health = assess(
            client, example.project, [subjects(example.project)[AUDIT]], HealthConfig(mutation_stuck_minutes=0)
        )[AUDIT]
        client.command("SYSTEM START MERGES analytics.audit_log")
    (finding,) = health.findings
    assert (finding.kind, finding.severity) == ("mutation_stuck", "warning")
    assert "is not done after 0 min" in finding.message and "parts_postpone_reasons" in finding.fix
    assert health.figures["mutations_failed"] == 0 and health.figures["mutations_pending"] == 1


def test_detached_and_missing_mvs_are_found(tmp_path: Path, base: Path, example) -> None:
    engine = copy_engine(base, tmp_path / "chdb")
    project = example.project
    with engine.get_client() as client:
        assert views_off(client, project) == {}
        client.command("DETACH TABLE analytics.audit_mv PERMANENTLY")
        client.command("DROP VIEW analytics.errors_mv SYNC")
        found = assess(client, project, [subjects(project)[AUDIT], subjects(project)[ERRORS]])
        off = views_off(client, project)
    assert off == {AUDIT: [ref("audit_mv")], ERRORS: [ref("errors_mv")]}
    (detached,) = found[AUDIT].findings
    assert detached.kind == "view_detached"
    assert (
        detached.message == "the MV is detached: inserts into analytics.all_events no longer reach analytics.audit_log"
    )
    assert "chmv_recovery re-attaches it through a chmv_apply run" in detached.fix
    (missing,) = found[ERRORS].findings
    assert missing.kind == "view_missing" and "re-derives the target's history" in missing.fix
    assert found[AUDIT].figures["views_detached"] == 1 and found[ERRORS].figures["views_missing"] == 1


def test_late_partitions_of_collapsing_targets_are_merged_and_read_the_same(
    tmp_path: Path, base: Path, example, caplog
) -> None:
    engine = copy_engine(base, tmp_path / "chdb")
    rules = MaintenanceConfig(enabled=True, closed_after_hours=24)
    project = example.project
    with engine.get_client() as client:
        for target in ("counter_daily", "hourly_endpoint_stats", "entity_latest", "events_daily", "events_weekly"):
            client.command(f"OPTIMIZE TABLE analytics.{target} FINAL")  # every partition merged: nothing late yet
        assert late_partitions(client, project, rules) == []
        for n in range(3):  # late rows of an old month, in three inserts: three more parts there
            client.command(
                f"INSERT INTO analytics.counter VALUES ('2026-08-0{n + 2} 10:00:00', {900 + n}, {n + 1})",
                settings={"async_insert": 0},
            )
        before = digest(client, example, COUNTER)
        (late,) = late_partitions(client, project, rules)
        assert (late.table, late.partition_id, late.parts) == (COUNTER, "202608", 4)
        with caplog.at_level(logging.INFO, "chmv_assets"):
            (merged,) = merge_late_partitions(client, project, rules, pacing=PacingConfig())
        assert merged.parts_after == 1 and late_partitions(client, project, rules) == []
        assert digest(client, example, COUNTER) == before  # the same rows as readers see them, FINAL or not
        plain = client.query("SELECT count() FROM analytics.counter_daily WHERE toYYYYMM(day) = 202608").result_rows
        final = client.query(
            "SELECT count() FROM analytics.counter_daily FINAL WHERE toYYYYMM(day) = 202608"
        ).result_rows
        assert plain == final  # collapsed: no FINAL needed any more
    log = [r.getMessage() for r in caplog.records if r.name.startswith("chmv_assets.")]
    assert "analytics.counter_daily partition 202608 (4 parts" in log[0]


def test_a_target_whose_merges_are_stopped_is_left_for_the_next_window(tmp_path: Path, base: Path, example) -> None:
    """``SYSTEM STOP MERGES`` on a target (an operator's, a migration's): the server cancels its merges (ABORTED).
    Maintenance says so for its partitions and merges the other targets' (the run failed on the first one with the
    server's raw error, the others left unmerged)."""
    engine = copy_engine(base, tmp_path / "chdb")
    rules = MaintenanceConfig(enabled=True, closed_after_hours=24)
    project = example.project
    with engine.get_client() as client:
        for target in ("counter_daily", "hourly_endpoint_stats", "entity_latest", "events_daily", "events_weekly"):
            client.command(f"OPTIMIZE TABLE analytics.{target} FINAL")
        for n in range(3):  # late rows of an old month of two targets
            client.command(
                f"INSERT INTO analytics.counter VALUES ('2026-08-0{n + 2} 10:00:00', {900 + n}, {n + 1})",
                settings={"async_insert": 0},
            )
            client.command(
                f"INSERT INTO analytics.events_daily SELECT toDate('2026-08-0{n + 2}'), 'late', sumState(toUInt64(1)), "
                "uniqState(toUInt64(1))",
                settings={"async_insert": 0},
            )
        client.command("SYSTEM STOP MERGES analytics.counter_daily")
        try:
            done = merge_late_partitions(client, project, rules, pacing=PacingConfig())
        finally:
            client.command("SYSTEM START MERGES analytics.counter_daily")
    by_table = {m.partition.table.name: m for m in done}
    assert {"counter_daily", "events_daily"} <= set(by_table)  # events_weekly too: events_daily feeds it
    skipped = by_table.pop("counter_daily")
    assert skipped.skipped is not None and "merges of analytics.counter_daily are stopped" in skipped.skipped
    assert all(m.skipped is None and m.parts_after == 1 for m in by_table.values()), by_table
