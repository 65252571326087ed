"""Auto-recovery on the embedded engine: an MV that throws on some rows, a detached MV, a permanent failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterInstance

from asset_checks.definitions import PARITY
from chmv_assets.ddl.loader import load
from chmv_assets.engine.health.parity import parity_for_partition
from chmv_assets.engine.health.recovery import Ledger, RebuildVerdict, RepairKind
from chmv_assets.orchestration.sensors import read_ledger

from support.checks import evaluations, execute, ref, requested, run_parity, tick
from support.engines import make_engine
from support.paths import EXAMPLE_DDL

pytestmark = pytest.mark.worker_seconds(40)

ERRORS = ref("error_events")
THROWING_MV = (
    "CREATE MATERIALIZED VIEW analytics.errors_mv TO analytics.error_events AS "
    "SELECT timestamp, level, payload FROM analytics.all_events "
    "WHERE level = 'error' AND throwIf(toDate(timestamp) IN ('2026-08-03', '2026-08-04'), 'bad row') = 0"
)


def _insert_errors(client, days: list[str]) -> None:
    for day in days:  # one block per day: a throwing block fails only its own day
        client.command(
            f"INSERT INTO analytics.all_events SELECT toDateTime('{day} 10:00:00') + number, 'click', 'error', 0, 'late' "
            "FROM numbers(7)",
            settings={"materialized_views_ignore_errors": 1},
        )


@pytest.fixture
def loaded_fast():
    """The example project with no cooldown, so consecutive ticks may retry."""
    return load(EXAMPLE_DDL, recovery_cooldown_minutes=0, recovery_max_attempts=2)


def test_a_live_select_that_differs_from_the_ddl_is_apply_pending_never_a_repair_by_ddl(
    tmp_path: Path, loaded_fast
) -> None:
    """The server's MV runs another SELECT than the DDL (a throwing one here): parity does not judge it with the
    DDL's SELECT, recovery executes no DDL and rebuilds nothing; with ``recovery_apply = "changes"`` it requests a
    chmv_apply run for the MV, which restores the SELECT and re-derives the lost rows."""
    engine = make_engine(tmp_path / "chdb", loaded_fast, rows=20_000)
    with engine.get_client() as client:
        client.command("DROP VIEW analytics.errors_mv SYNC")
        client.command(THROWING_MV)
        _insert_errors(client, ["2026-08-02", "2026-08-03", "2026-08-04", "2026-08-05"])
        live_select = _live_select(client)
    instance = DagsterInstance.local_temp(str(tmp_path))  # SQLite, run-sharded: as dagster dev

    result = run_parity(loaded_fast, engine, ERRORS, instance, "2026-08-01", "2026-08-06")
    by_partition = {e.partition: e for e in evaluations(result, PARITY)}  # one evaluation per partition
    assert len(by_partition) == 6 and all(e.passed for e in by_partition.values())
    assert all(
        "apply pending: analytics.errors_mv's live SELECT differs" in (e.description or "")
        for e in by_partition.values()
    )

    cursor = None
    for _ in range(3):
        data = tick(loaded_fast, "chmv_recovery", engine, instance, cursor)
        assert not data.run_requests
        cursor = data.cursor
    with engine.get_client() as client:
        assert _live_select(client) == live_select  # no DDL in a tick

    applying = load(
        EXAMPLE_DDL, recovery_cooldown_minutes=0, recovery_max_attempts=2, sweep={"recovery_apply": "changes"}
    )
    (request,) = tick(applying, "chmv_recovery", engine, instance, cursor).run_requests
    assert request.job_name == "chmv_apply" and request.tags["chmv/objects"] == "analytics.errors_mv"
    assert "select_changed" in request.tags["chmv/reason"]
    with engine.get_client() as client:
        assert _live_select(client) == live_select  # requesting is all the tick did
    run = execute(applying, engine, instance, request)
    assert run.success
    errors = loaded_fast.partitioning(ERRORS)
    with engine.get_client() as client:
        assert "throwIf" not in _live_select(client)
        for key in ["2026-08-02", "2026-08-03", "2026-08-04", "2026-08-05"]:
            result = parity_for_partition(client, loaded_fast, ERRORS, errors.window(key))
            assert result.passed and result.unverifiable is None, result.describe()
        assert client.command("SELECT count() FROM analytics.error_events WHERE payload = 'late'") == 28


def _live_select(client) -> str:
    return client.command("SELECT as_select FROM system.tables WHERE database = 'analytics' AND name = 'errors_mv'")


def test_recovery_limit_stops_a_permanently_failing_partition(tmp_path: Path, loaded_fast) -> None:
    engine = make_engine(tmp_path / "chdb", loaded_fast, rows=20_000)
    with engine.get_client() as client:
        # a row the MVs never produced, planted in the target (a writer outside the DDL): each recovery run refuses
        # to delete it at its swap, so parity keeps failing
        client.command("INSERT INTO analytics.error_events VALUES ('2026-08-07 01:00:00', 'error', 'ghost')")
    instance = DagsterInstance.local_temp(str(tmp_path))  # SQLite, run-sharded: as dagster dev
    assert not evaluations(run_parity(loaded_fast, engine, ERRORS, instance, "2026-08-07", "2026-08-07"))[0].passed

    cursor, attempts = None, []
    for _ in range(4):
        data = tick(loaded_fast, "chmv_recovery", engine, instance, cursor)
        cursor = data.cursor
        for request in data.run_requests:
            attempts.append(request.tags["chmv/attempt"])
            run = execute(loaded_fast, engine, instance, request)
            failures = [str(e.event_specific_data.error) for e in run.all_events if e.is_step_failure]
            assert not run.success and any("the live partition holds 1 row that" in f for f in failures), failures
            run_parity(loaded_fast, engine, ERRORS, instance, "2026-08-07", "2026-08-07")
    assert attempts == ["1", "2"]
    entry = read_ledger(cursor).of(RepairKind.REBUILD)["analytics.error_events|2026-08-07"]
    assert entry.exhausted is True and entry.attempts == 2
    with engine.get_client() as client:
        assert client.command("SELECT count() FROM analytics.error_events WHERE payload = 'ghost'") == 1


def test_detached_mv_is_reattached_by_an_apply_run_then_the_stale_partitions_rebuilt(
    tmp_path: Path, loaded_fast
) -> None:
    engine = make_engine(tmp_path / "chdb", loaded_fast, rows=20_000)
    with engine.get_client() as client:
        client.command("DETACH TABLE analytics.enriched_requests_mv PERMANENTLY")
        client.command(
            "INSERT INTO analytics.raw_requests SELECT toDateTime('2026-11-03 00:00:00') + number * 60, "
            "toString(number), number, 100, 200, '/api/v1/x' FROM numbers(120)"
        )
    instance = DagsterInstance.local_temp(str(tmp_path))  # SQLite, run-sharded: as dagster dev
    first = tick(loaded_fast, "chmv_recovery", engine, instance, None)
    assert not first.run_requests  # staleness seen once: not yet persistent
    second = tick(loaded_fast, "chmv_recovery", engine, instance, first.cursor)
    (repair,) = second.run_requests  # the MV first, through chmv_apply; the rebuilds wait for it
    assert repair.job_name == "chmv_apply" and repair.tags["chmv/objects"] == "analytics.enriched_requests_mv"
    run = execute(loaded_fast, engine, instance, repair)
    assert run.success
    plan_text = next(e for e in run.all_events if e.step_key == "plan_ddl" and e.event_type_value == "STEP_OUTPUT")
    assert "re-attach** analytics.enriched_requests_mv" in plan_text.event_specific_data.metadata["chmv/plan"].value
    third = tick(loaded_fast, "chmv_recovery", engine, instance, second.cursor)
    requests = third.run_requests
    # from the partition holding the target's newest row (it may be incomplete) to the source's newest
    assert [requested(r) for r in requests] == ["2026-10-01..2026-11-01"]
    assert all(r.tags["chmv/reason"] == "stale" for r in requests)
    (request,) = requests
    verdict = RebuildVerdict.from_tags(request.tags, ref("requests_enriched"))  # the planner's word at the tick
    assert verdict is not None and verdict.engine_of() == {"2026-10-01": "clickhouse", "2026-11-01": "clickhouse"}
    run = execute(loaded_fast, engine, instance, request)
    assert run.success
    plans = [e.materialization.metadata["chmv/plan"].value for e in run.get_asset_materialization_events()]
    # each partition's lines of the plan: its engine decided by the sensor, not chosen again
    assert len(plans) == 2 and all(p.count("decided by the recovery sensor: clickhouse") == 1 for p in plans)
    with engine.get_client() as client:
        assert client.command("SELECT count() FROM analytics.requests_enriched WHERE timestamp >= '2026-11-03'") == 120
    fourth = tick(loaded_fast, "chmv_recovery", engine, instance, third.cursor)
    assert not fourth.run_requests and read_ledger(fourth.cursor).of(RepairKind.REBUILD) == {}


def test_the_sensor_reads_the_untyped_ledger_of_a_format_2_cursor(tmp_path: Path, loaded_fast) -> None:
    """A cursor chmv wrote before typed ledgers: its attempts, limits and DDL repairs carry over; a cursor of an
    unknown format starts afresh."""
    engine = make_engine(tmp_path / "chdb", loaded_fast, rows=0)
    instance = DagsterInstance.local_temp(str(tmp_path))
    key = "analytics.error_events|2026-08-07"
    old = {
        "v": 2,
        "verdicts_after": 0,
        "ledger": {key: {"attempts": 2, "last": 1.0, "reason": "parity_failed", "exhausted": True, "since": 1.0}},
        "stale_ticks": {},
        "repairs": {"analytics.audit_mv": {"attempts": 1, "last": 1.0, "since": 1.0, "exhausted": False}},
        "alerted": {},
        "views_off": {},
    }
    data = tick(loaded_fast, "chmv_recovery", engine, instance, json.dumps(old))
    ledger = read_ledger(data.cursor)
    assert not data.run_requests  # exhausted: nothing more, no alert again
    entry = ledger.of(RepairKind.REBUILD)[key]
    assert (entry.attempts, entry.exhausted, entry.reason, entry.since) == (2, True, "parity_failed", 1.0)
    assert (
        read_ledger(tick(loaded_fast, "chmv_recovery", engine, instance, '{"v": 1}').cursor).entries == Ledger().entries
    )
