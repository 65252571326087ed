"""The parity sweep on the embedded engine, with real Dagster: a silent gap found on its own, repaired down the chain."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest
from dagster import DagsterInstance, RunRequest

from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.engine.health.parity import parity_for_partition
from chmv_assets.engine.health.recovery import RepairKind
from chmv_assets.engine.health.sweep import SweepState, decide, read_parts, seen_partitions, tracked_tables
from chmv_assets.orchestration.definitions import build_definitions
from chmv_assets.orchestration.sensors import read_ledger
from chmv_assets.orchestration.sweep import SWEEP_JOB, SWEEP_SENSOR

from support.checks import TRANSLATOR, engine_held_by_another_process, execute, ref, requested, tick
from support.dst import REGIONAL, dst_project
from support.engines import make_engine
from support.paths import EXAMPLE_DDL

pytestmark = pytest.mark.worker_seconds(70)

RAW, AGG, DAILY, WEEKLY = ref("raw_events"), ref("events_agg"), ref("events_daily"), ref("events_weekly")
CHAIN = (AGG, DAILY, WEEKLY)
#: rows inserted into an old month while its MV is detached: the silent gap
GAP = (
    "INSERT INTO analytics.raw_events SELECT toDateTime('2026-08-12 10:00:00') + number * 60, 7000 + number % 5, "
    "'click', 10 FROM numbers(300)"
)


@pytest.fixture
def loaded() -> LoadedProject:
    """The example project; a budget that takes the whole first sweep in one tick, no recovery cooldown."""
    return load(EXAMPLE_DDL, sweep={"max_partitions": 1000}, recovery_cooldown_minutes=0)


def _sweep_run(loaded: LoadedProject, engine, instance: DagsterInstance, request: RunRequest):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = build_definitions(loaded, clickhouse=engine, translator=TRANSLATOR).resolve_job_def(SWEEP_JOB)
    tags = {**request.tags, "dagster/run_key": request.run_key}  # as the daemon tags the runs it launches
    return job.execute_in_process(run_config=request.run_config, instance=instance, tags=tags, raise_on_error=False)


def _swept(loaded: LoadedProject, engine) -> str:
    """The sensor's cursor after a complete sweep of what the engine holds now (every partition checked)."""
    with engine.get_client() as client:
        parts = read_parts(client, loaded, tracked_tables(loaded, loaded.project.targets))
    state = SweepState({ref.fqn: seen_partitions(found) for ref, found in parts.items()})
    return json.dumps({"state": state.dumps(), "inflight": {}})


def _verdicts(result) -> dict[tuple[str, str | None], bool]:
    return {(e.asset_key.to_user_string(), e.partition): e.passed for e in result.get_asset_check_evaluations()}


def _chain_passes(loaded: LoadedProject, engine, partitions: dict) -> bool:
    with engine.get_client() as client:
        return all(
            parity_for_partition(client, loaded, target, loaded.partitioning(target).window_of(key)).passed
            for target, keys in partitions.items()
            for key in keys
        )


def test_a_silent_gap_in_an_old_partition_is_found_and_repaired_down_the_chain(tmp_path: Path, loaded) -> None:
    engine = make_engine(tmp_path / "chdb", loaded, rows=20_000)
    instance = DagsterInstance.local_temp(str(tmp_path))

    # after a complete first sweep (test_the_budget_spreads_…), nothing changed: nothing to check
    second = tick(loaded, SWEEP_SENSOR, engine, instance, _swept(loaded, engine))
    assert not second.run_requests and "0 partition(s) to check" in second.skip_message

    # the silent gap: the MV detached while rows of an old month arrived, then attached again
    with engine.get_client() as client:
        client.command("DETACH TABLE analytics.mv_events_agg")
        client.command(GAP)
        client.command("ATTACH TABLE analytics.mv_events_agg")
    found = tick(loaded, SWEEP_SENSOR, engine, instance, second.cursor)
    (request,) = found.run_requests
    assert request.run_config["ops"]["chmv_parity_sweep_op"]["config"]["partitions"] == {AGG.fqn: ["2026-08-01"]}
    run = _sweep_run(loaded, engine, instance, request)
    assert _verdicts(run) == {("analytics/events_agg", "2026-08-01"): False}

    # recovery rebuilds it through the planner, then the partitions of the chain below it, level by level
    cursor, rebuilt = None, []
    for _level in CHAIN:
        data = tick(loaded, "chmv_recovery", engine, instance, cursor)
        cursor = data.cursor
        assert data.run_requests, json.loads(cursor)
        for request in data.run_requests:
            assert request.tags["chmv/engine"] == "clickhouse"
            assert execute(loaded, engine, instance, request).success
            rebuilt.append((request.tags["chmv/target"], requested(request)))
    assert rebuilt == [
        (AGG.fqn, "2026-08-01"),
        (DAILY.fqn, "2026-08-01..2026-08-31"),  # one run per range
        (WEEKLY.fqn, "2026-08-01"),
    ]  # (the week of Monday 27 July is before partition_start)
    last = tick(loaded, "chmv_recovery", engine, instance, cursor)
    assert not last.run_requests and read_ledger(last.cursor).of(RepairKind.REBUILD) == {}
    assert _chain_passes(loaded, engine, {AGG: ["2026-08-01"], DAILY: ["2026-08-12"], WEEKLY: ["2026-08-01"]})

    # the sweep then sees the rebuilt partitions changed and confirms them
    after = tick(loaded, SWEEP_SENSOR, engine, instance, found.cursor)
    (request,) = after.run_requests
    verdicts = _verdicts(_sweep_run(loaded, engine, instance, request))
    assert ("analytics/events_agg", "2026-08-01") in verdicts and all(verdicts.values())


def test_the_budget_spreads_a_sweep_over_ticks_one_run_at_a_time(tmp_path: Path) -> None:
    loaded = load(EXAMPLE_DDL, sweep={"max_partitions": 60})
    engine = make_engine(tmp_path / "chdb", loaded, rows=5_000)
    instance = DagsterInstance.local_temp(str(tmp_path))
    cursor, seen, ticks = None, set(), 0
    while True:
        data = tick(loaded, SWEEP_SENSOR, engine, instance, cursor)
        cursor, ticks = data.cursor, ticks + 1
        if not data.run_requests:
            break
        (request,) = data.run_requests
        keys = {
            (t, k)
            for t, ks in request.run_config["ops"]["chmv_parity_sweep_op"]["config"]["partitions"].items()
            for k in ks
        }
        assert len(keys) <= 60 and not keys & seen
        seen |= keys
        busy = tick(loaded, SWEEP_SENSOR, engine, instance, cursor)  # the run has not run yet: only marks
        assert not busy.run_requests and "waiting for the sweep run" in busy.skip_message
        run = _sweep_run(loaded, engine, instance, request)
        assert run.success and len(_verdicts(run)) == len(keys)
        assert all(_verdicts(run).values()), [k for k, v in _verdicts(run).items() if not v]  # the demo is exact
    pending = SweepState.loads(json.loads(cursor)["state"]).pending
    assert ticks > 3 and len(seen) > 120  # every partition once, 60 at a time
    # only the unpartitioned target waits: it is checked once its writes pause for the grace period
    assert {fqn: set(keys) for fqn, keys in pending.items()} == {"analytics.entity_latest": {""}}
    turn, _marked = pending["analytics.entity_latest"][""]
    assert turn == pytest.approx(time.time() + 15 * 60, abs=300)


def test_a_busy_engine_skips_the_tick_and_keeps_the_cursor(tmp_path: Path, loaded) -> None:
    engine = make_engine(tmp_path / "chdb", loaded)
    instance = DagsterInstance.local_temp(str(tmp_path))
    with engine_held_by_another_process(engine):
        data = tick(loaded, SWEEP_SENSOR, engine, instance, "kept")
    assert not data.run_requests and "busy" in data.skip_message
    assert data.cursor in (None, "kept")


def test_retention_after_a_gap_is_refused_not_rebuilt(tmp_path: Path, loaded) -> None:
    """A failing month whose source then lost it to retention: recovery never requests what the planner refuses."""
    engine = make_engine(tmp_path / "chdb", loaded, rows=20_000)
    instance = DagsterInstance.local_temp(str(tmp_path))
    swept = _swept(loaded, engine)
    with engine.get_client() as client:
        client.command("DETACH TABLE analytics.mv_events_agg")
        client.command(GAP)
        client.command("ATTACH TABLE analytics.mv_events_agg")
    found = tick(loaded, SWEEP_SENSOR, engine, instance, swept)
    assert _verdicts(_sweep_run(loaded, engine, instance, found.run_requests[0])) == {
        ("analytics/events_agg", "2026-08-01"): False
    }
    with engine.get_client() as client:
        client.command("ALTER TABLE analytics.raw_events DROP PARTITION 202608")  # retention, before recovery acts
        before = client.query(
            "SELECT count() FROM analytics.events_agg WHERE toYYYYMM(event_date) = 202608"
        ).result_rows[0][0]
    data = tick(loaded, "chmv_recovery", engine, instance, None)
    assert not data.run_requests
    entry = read_ledger(data.cursor).of(RepairKind.REBUILD)[f"{AGG.fqn}|2026-08-01"]
    assert "rebuild refused" in entry.refused and entry.attempts == 0
    again = tick(loaded, "chmv_recovery", engine, instance, data.cursor)
    assert not again.run_requests
    # the sweep now reports the month not verifiable rather than failed: the source no longer holds it
    swept = tick(loaded, SWEEP_SENSOR, engine, instance, found.cursor)
    verdicts = _verdicts(_sweep_run(loaded, engine, instance, swept.run_requests[0]))
    assert verdicts[("analytics/events_agg", "2026-08-01")] is True
    with engine.get_client() as client:
        after = client.query(
            "SELECT count() FROM analytics.events_agg WHERE toYYYYMM(event_date) = 202608"
        ).result_rows[0][0]
    assert after == before > 0


#: Per zone, the key of the hour holding 2026-11-01 06:30 UTC (New York: the second 01:00, EST).
SECOND_HOUR = {"America/New_York": "2026-11-01-01:00-0500|eu", "Asia/Kolkata": "2026-11-01-12:00|eu"}


@pytest.mark.parametrize("zone", list(SECOND_HOUR))
def test_a_change_of_an_hour_and_a_key_marks_that_hour_across_a_fall_back(tmp_path: Path, zone: str) -> None:
    """A ClickHouse partition of an hourly × region target that changed marks the partition its rows are in, told
    by the instant of its oldest row: in New York the second 01:00 hour, not the first (as it did before, reading
    the parts' wall clock)."""
    loaded, engine = dst_project(tmp_path, zone)
    regional = REGIONAL
    with engine.get_client() as client:
        first = decide(client, loaded, [regional], SweepState(), now=1.8e9, max_partitions=0, max_rows=10**12)
        client.command(
            "INSERT INTO dst.regional SELECT toDateTime('2026-11-01 06:30:00', 'UTC'), 'eu', 1"
        )  # a write into the second 01:00 hour alone
        second = decide(client, loaded, [regional], first.state, now=1.8e9 + 600, max_partitions=0, max_rows=10**12)
    before, after = first.state.pending[regional.fqn], second.state.pending[regional.fqn]
    assert SECOND_HOUR[zone] in before  # the cold start marked every hour once
    assert {k for k, v in after.items() if before.get(k) != v} == {SECOND_HOUR[zone]}
