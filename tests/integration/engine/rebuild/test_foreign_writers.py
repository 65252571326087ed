"""Writers outside the DDL into a managed target (issue 25, class 4): their rows are never deleted by a rebuild.

An MV another team created on the server (not in the DDL directory) writes into ``analytics.audit_log``: drift and
``chmv plan`` report it, the rebuild planner refuses the target (unless forced), and so does the recovery sensor,
which requests nothing. A one-off ``INSERT INTO analytics.error_events`` of rows no source row yields: the rebuild
(as a recovery run makes it) is refused at its swap, naming the partition and the rows; a doubled partition is still
repaired. One engine for the module; each test uses targets of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterInstance

from asset_checks.definitions import PARITY
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import PartitionWindow
from chmv_assets.engine.drift import drift_report
from chmv_assets.engine.health.parity import parity_for_partition
from chmv_assets.engine.health.recovery import RepairKind
from chmv_assets.engine.health.schema_drift import drift_markdown
from chmv_assets.engine.lifecycle.plan import EXIT_NO_CHANGES, Action
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.rebuild.executor import plan_for, rebuild_partitions
from chmv_assets.engine.rebuild.planner import Engine
from chmv_assets.errors import ForeignRowsRefused, RebuildRefused
from chmv_assets.orchestration.sensors import read_ledger
from chmv_assets.orchestration.translator import ChmvTranslator

from support.checks import evaluations, run_parity, tick
from support.engines import make_engine
from support.paths import EXAMPLE_DDL

pytestmark = pytest.mark.worker_seconds(30)

AUDIT = ObjectRef(database="analytics", name="audit_log")
ERRORS = ObjectRef(database="analytics", name="error_events")
DAILY = ObjectRef(database="analytics", name="events_daily")
FOREIGN_MV = "team.audit_feed"
SHADOWS = "SELECT count() FROM system.tables WHERE name LIKE '\\_chmv\\_shadow%'"


def window(loaded, target: ObjectRef, key: str) -> PartitionWindow:
    tw = ChmvTranslator().get_partitions_def(loaded, target).time_window_for_partition_key(key)
    return PartitionWindow(key=key, start=tw.start, end=tw.end)


def count(client, target: ObjectRef, where: str, measure: str = "count()") -> int:
    return int(client.command(f"SELECT {measure} FROM {target.fqn} WHERE {where}"))


@pytest.fixture(scope="module")
def loaded():
    """The example project, no recovery cooldown (consecutive ticks may retry)."""
    return load(EXAMPLE_DDL, recovery_cooldown_minutes=0, recovery_max_attempts=3)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, loaded):
    return make_engine(tmp_path_factory.mktemp("foreign") / "chdb", loaded, rows=20_000)


def test_a_foreign_mv_is_reported_and_its_target_never_rebuilt_over_it(engine, loaded, tmp_path: Path) -> None:
    august = "toYYYYMM(timestamp) = 202608"
    with engine.get_client() as client:
        before = count(client, AUDIT, august)
        client.command("CREATE DATABASE team ENGINE = Atomic")
        client.command("CREATE TABLE team.signals (ts DateTime, note String) ENGINE = MergeTree ORDER BY ts")
        client.command(
            f"CREATE MATERIALIZED VIEW {FOREIGN_MV} TO analytics.audit_log AS "
            "SELECT ts AS timestamp, note AS payload FROM team.signals"
        )
        client.command(
            "INSERT INTO team.signals SELECT toDateTime('2026-08-10 00:00:00') + number * 60, 'team' FROM numbers(100)"
        )
        assert count(client, AUDIT, august) == before + 100

        # drift (what the drift check reads) names it
        items = drift_report(client, loaded.project, [AUDIT])[AUDIT]
        assert [(i.object, i.kind) for i in items] == [(FOREIGN_MV, "foreign_writer")]
        assert "analytics.audit_log" in drift_markdown(items)

        # chmv plan shows it (text, markdown, json), changes nothing, and never drops it, not even with --allow-drop
        for allow_drop in (False, True):
            plan = plan_lifecycle(client, loaded, allow_drop=allow_drop)
            assert not plan.changes and plan.exit_code == EXIT_NO_CHANGES
            assert not [c for c in plan.changes if c.action == Action.DROP]
            (finding,) = plan.findings
            assert finding.startswith(f"analytics.audit_log: {FOREIGN_MV} writes into analytics.audit_log")
            assert "1 finding (writers outside the DDL)" in plan.summary()
            assert f"findings:\n  - {finding}" in plan.describe()
            assert "### findings" in plan.describe(markdown=True)
            assert json.loads(plan.to_json())["findings"] == [finding]

        # the rebuild planner refuses it (chmv rebuild --dry-run prints this plan), unless forced
        key = window(loaded, AUDIT, "2026-08-01")
        refused = plan_for(engine, loaded, AUDIT, [key])
        assert [s.engine for s in refused.steps] == [Engine.REFUSED]
        assert f"add {FOREIGN_MV} to the DDL directory" in refused.describe()
        assert "force" in refused.refusal()
        forced = plan_for(engine, loaded, AUDIT, [key], force=True)
        assert not forced.refused and any("forced past a writer outside the DDL" in n for n in forced.notes)

    with pytest.raises(RebuildRefused, match=f"{FOREIGN_MV} writes into analytics.audit_log"):
        rebuild_partitions(engine, loaded, AUDIT, [key])

    # recovery: the parity failure is seen, and the refusal is recorded, never requested
    instance = DagsterInstance.local_temp(str(tmp_path))
    (failed,) = evaluations(run_parity(loaded, engine, AUDIT, instance, "2026-08-01", "2026-08-01"), PARITY)
    assert not failed.passed
    cursor = None
    for _ in range(2):
        data = tick(loaded, "chmv_recovery", engine, instance, cursor)
        assert not data.run_requests
        cursor = data.cursor
    entry = read_ledger(cursor).of(RepairKind.REBUILD)["analytics.audit_log|2026-08-01"]
    assert FOREIGN_MV in entry.refused and entry.attempts == 0
    with engine.get_client() as client:
        assert count(client, AUDIT, august) == before + 100  # the foreign rows survive
        assert count(client, AUDIT, "payload = 'team'") == 100


def test_rows_inserted_into_a_target_by_hand_survive_the_rebuild_recovery_makes(engine, loaded) -> None:
    day = "toDate(timestamp) = '2026-08-07'"
    key = window(loaded, ERRORS, "2026-08-07")
    with engine.get_client() as client:
        before = count(client, ERRORS, day)
        assert before > 0
        client.command(
            "INSERT INTO analytics.error_events SELECT toDateTime('2026-08-07 03:00:00') + number, 'error', 'one-off' "
            "FROM numbers(100)"
        )
        assert not parity_for_partition(client, loaded, ERRORS, key).passed
    with pytest.raises(ForeignRowsRefused) as refused:
        rebuild_partitions(engine, loaded, ERRORS, [key])  # what a recovery run of the partition does
    message = str(refused.value)
    assert message.startswith(
        "analytics.error_events partition 2026-08-07: the live partition holds 100 rows that the MVs' own SELECT "
        "does not yield from the sources"
    )
    assert "the live partition is unchanged" in message and "force" in message
    with engine.get_client() as client:
        assert count(client, ERRORS, day) == before + 100
        assert int(client.command(SHADOWS)) == 0

    # an aggregating target, compared on its key as readers see it: a key no source row yields is foreign
    day_key = window(loaded, DAILY, "2026-08-07")
    with engine.get_client() as client:
        client.command(
            "INSERT INTO analytics.events_daily SELECT toDate('2026-08-07'), 'ghost', sumState(toUInt64(1)), "
            "uniqState(toUInt64(1))"
        )
    with pytest.raises(ForeignRowsRefused, match="partition 2026-08-07: the live partition holds 1 row that"):
        rebuild_partitions(engine, loaded, DAILY, [day_key])

    # force deletes them, as asked
    rebuild_partitions(engine, loaded, ERRORS, [key], force=True)
    with engine.get_client() as client:
        assert count(client, ERRORS, day) == before
        assert parity_for_partition(client, loaded, ERRORS, key).passed


@pytest.mark.parametrize(
    ("target", "key", "where", "measure"),
    [
        (ERRORS, "2026-08-08", "toDate(timestamp) = '2026-08-08'", "count()"),
        (DAILY, "2026-08-08", "event_date = '2026-08-08'", "sumMerge(events)"),
        # last: doubling events_agg fires the MV writing events_daily (the chain below it doubles too)
        (
            ObjectRef(database="analytics", name="events_agg"),
            "2026-08-01",
            "toYYYYMM(event_date) = 202608",
            "sum(count)",
        ),
    ],
    ids=["plain", "aggregating", "grouped"],
)
def test_a_doubled_partition_is_still_repaired(
    engine, loaded, target: ObjectRef, key: str, where: str, measure: str
) -> None:
    """Rows the live partition holds twice are no foreign rows: the rebuild (coverage observed, not forced) repairs
    them, on every kind of row identity."""
    partition = window(loaded, target, key)
    with engine.get_client() as client:
        before = count(client, target, where, measure)
        assert before > 0
        client.command(f"INSERT INTO {target.fqn} SELECT * FROM {target.fqn} WHERE {where}")
        assert count(client, target, where, measure) == 2 * before
    plan, _ = rebuild_partitions(engine, loaded, target, [partition])
    assert plan.coverage is not None and not plan.force
    with engine.get_client() as client:
        assert count(client, target, where, measure) == before
        assert parity_for_partition(client, loaded, target, partition).passed
