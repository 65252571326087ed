"""chmv apply on the embedded engine while a writer inserts into the source throughout: one test per change kind.

Afterwards every target equals its MVs' new SELECT over all source rows (nothing lost, nothing counted twice),
and a second plan says no changes. The writer inserts under the source's write gate, as every writer into a
source must (docs/rebuilds.md, "Backfill protocol"), and at every point where apply holds no gate the apply waits for
another batch, so inserts interleave with every step.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.lifecycle.apply import apply_plan
from chmv_assets.engine.lifecycle.plan import Action
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.lifecycle.preflight import preflight

from support.lifecycle import (
    CHANGED_FILTER,
    NEW_SORT_KEY,
    SELECT_CHANGE,
    TOP_OF_CHAIN_SELECT,
    Writer,
    assert_exact,
    copy_ddl,
    edit,
    small_engine,
)


def ref(name: str) -> ObjectRef:
    return ObjectRef(database="analytics", name=name)


pytestmark = [pytest.mark.slow, pytest.mark.worker_seconds(75)]


@pytest.fixture
def engine(tmp_path: Path, example):
    return small_engine(tmp_path / "chdb", example)


def apply_with_writer(engine, ddl: Path, source: str, *, batch_seconds: float = 1.0):
    """Plan, preflight and apply ``ddl`` while a writer inserts into ``source``; return the plan and the writer."""
    loaded = load(ddl)
    with engine.get_client() as client:
        plan = plan_lifecycle(client, loaded)
        preflight(client, loaded, plan)

    with Writer(engine, source) as writer:
        report = apply_plan(engine, loaded, plan, pause=writer.pause, batch_seconds=batch_seconds, check_in_place=True)
    assert writer.batches >= len(writer.paused_at) >= 3  # inserts went on between the apply's steps
    with engine.get_client() as client:
        again = plan_lifecycle(client, loaded)
    assert not again.has_changes, again.describe()  # the plan is idempotent: applied, nothing is left
    return loaded, plan, report, writer


def test_select_change_modify_query_and_history_re_derived(engine, tmp_path: Path) -> None:
    ddl = copy_ddl(tmp_path)
    edit(ddl, *SELECT_CHANGE)
    # No time in a hold for more than one partition: each is re-derived in a hold of its own, rows arrive between.
    loaded, plan, report, writer = apply_with_writer(engine, ddl, "api_requests", batch_seconds=0.0)
    assert [c.action for c in plan.changes] == [Action.MODIFY_QUERY]
    # Every day of history, and the days the writer's rows opened past it while the apply ran.
    assert report.partitions["analytics.hourly_endpoint_stats"] >= 12 and report.parity_checked >= 12
    assert sum(p.startswith("rebuilt analytics.hourly_endpoint_stats") for p in writer.paused_at) >= 12
    with engine.get_client() as client:
        assert assert_exact(client, loaded, ref("hourly_endpoint_stats")) > 500


def test_added_column_filled_for_history(engine, tmp_path: Path) -> None:
    ddl = copy_ddl(tmp_path)
    edit(
        ddl,
        "40_all_events.sql",
        "CREATE TABLE IF NOT EXISTS analytics.audit_log (timestamp DateTime, payload String)",
        "CREATE TABLE IF NOT EXISTS analytics.audit_log (timestamp DateTime, payload String, level String DEFAULT '')",
    )
    edit(
        ddl,
        "40_all_events.sql",
        "SELECT timestamp, payload FROM analytics.all_events WHERE is_audit = 1;",
        "SELECT timestamp, payload, level FROM analytics.all_events WHERE is_audit = 1;",
    )
    loaded, plan, _report, _writer = apply_with_writer(engine, ddl, "all_events")
    assert [c.action for c in plan.changes] == [Action.ALTER, Action.MODIFY_QUERY]
    with engine.get_client() as client:
        assert assert_exact(client, loaded, ref("audit_log")) > 100
        assert client.query("SELECT countIf(level = '') FROM analytics.audit_log").result_rows[0][0] == 0


def test_changed_filter(engine, tmp_path: Path) -> None:
    ddl = copy_ddl(tmp_path)
    edit(ddl, *CHANGED_FILTER)
    loaded, _plan, _report, _writer = apply_with_writer(engine, ddl, "all_events")
    with engine.get_client() as client:
        assert assert_exact(client, loaded, ref("error_events")) > 100
        levels = {r[0] for r in client.query("SELECT DISTINCT level FROM analytics.error_events").result_rows}
    assert levels == {"error", "warn"}
    # The siblings on the same source were not touched and still match their SELECT.
    with engine.get_client() as client:
        assert_exact(client, loaded, ref("metric_events"))
        assert_exact(client, loaded, ref("audit_log"))


def test_new_sort_key_new_version_swapped_in_and_the_chain_below_re_derived(engine, tmp_path: Path) -> None:
    ddl = copy_ddl(tmp_path)
    edit(ddl, *NEW_SORT_KEY)
    loaded, plan, report, writer = apply_with_writer(engine, ddl, "raw_events")
    assert [c.action for c in plan.changes] == [Action.NEW_VERSION, Action.REDERIVE, Action.REDERIVE]
    assert "cut-in analytics._chmv_next_events_agg" in writer.paused_at  # rows arrived while it was built
    with engine.get_client() as client:
        (sorting_key,) = client.query(
            "SELECT sorting_key FROM system.tables WHERE database = 'analytics' AND name = 'events_agg'"
        ).result_rows[0]
        assert sorting_key == "event_type, event_date, event_hour, user_id"
        for name in ("events_agg", "events_daily", "events_weekly"):
            assert assert_exact(client, loaded, ref(name)) > 0
        leftovers = client.query(
            "SELECT name FROM system.tables WHERE database = 'analytics' AND name LIKE '\\_chmv\\_%'"
        ).result_rows
    assert [n for (n,) in leftovers if not n.startswith("_chmv_old_events_agg_")] == []


def test_change_at_the_top_of_a_chain(engine, tmp_path: Path) -> None:
    ddl = copy_ddl(tmp_path)
    edit(ddl, *TOP_OF_CHAIN_SELECT)
    loaded, plan, report, _writer = apply_with_writer(engine, ddl, "raw_events")
    assert [c.action for c in plan.changes] == [Action.MODIFY_QUERY, Action.REDERIVE, Action.REDERIVE]
    assert set(report.partitions) == {"analytics.events_agg", "analytics.events_daily", "analytics.events_weekly"}
    with engine.get_client() as client:
        for name in ("events_agg", "events_daily", "events_weekly"):
            assert assert_exact(client, loaded, ref(name)) > 0


class CountingFactory:
    """The engine resource, counting how often an apply opens it (each opening holds the engine exclusively)."""

    def __init__(self, resource):
        self.resource = resource
        self.opened = 0

    def get_client(self, **kwargs):
        self.opened += 1
        return self.resource.get_client(**kwargs)


@pytest.mark.parametrize(("batch_seconds", "one_opening"), [(600.0, True), (0.0, False)])
def test_an_apply_opens_the_engine_once_per_hold(engine, tmp_path: Path, batch_seconds, one_opening) -> None:
    """With time in the hold, the journal, the cut-in, the re-plan and the whole history share one opening of the
    engine; with none, every partition is re-derived in a hold (and an opening) of its own. Exact either way."""
    ddl = copy_ddl(tmp_path)
    edit(ddl, *SELECT_CHANGE)
    loaded = load(ddl)
    with engine.get_client() as client:
        plan = plan_lifecycle(client, loaded)
    counting = CountingFactory(engine)
    report = apply_plan(counting, loaded, plan, batch_seconds=batch_seconds)
    partitions = report.partitions["analytics.hourly_endpoint_stats"]
    assert partitions >= 12
    if one_opening:
        assert counting.opened == 1
    else:
        assert counting.opened >= partitions + 1  # the cut-in's hold, then one per partition
    with engine.get_client() as client:
        assert assert_exact(client, loaded, ref("hourly_endpoint_stats")) > 500


#: Another process writing into api_requests as ingestion does: its write gate first, then the engine (waiting up to
#: 60 s for it), one batch, both released.
GATED_WRITER = """
import sys
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.cutoff import source_gate
from resources.clickhouse import ClickHouseResource
from support.lifecycle import WRITES

with source_gate([ObjectRef(database="analytics", name="api_requests")]):
    print("gate held", flush=True)
    with ClickHouseResource(dsn=sys.argv[1]).get_client(lock_timeout_seconds=60) as client:
        client.command(WRITES["api_requests"])
print("inserted", flush=True)
"""


@pytest.mark.parametrize("writer_waiting", [False, True], ids=["alone", "writer_waiting"])
def test_an_apply_takes_over_the_planning_client(engine, tmp_path: Path, writer_waiting) -> None:
    """``chmv apply``'s path: the client opened for the plan and the preflight is the apply's first hold (no second
    opening). A writer in another process holding the source's gate and waiting for the engine is not deadlocked:
    the apply only tries the gate while it holds the engine, so it closes the engine, waits for the gate, and opens
    the engine again (once); the writer's rows are counted once."""
    ddl = copy_ddl(tmp_path)
    edit(ddl, *SELECT_CHANGE)
    loaded = load(ddl)
    counting = CountingFactory(engine)
    writer = None
    with ExitStack() as opened:
        client = opened.enter_context(engine.get_client())
        plan = plan_lifecycle(client, loaded)
        if writer_waiting:  # holds the gate, then waits for the engine this process holds
            writer = subprocess.Popen(
                [sys.executable, "-c", GATED_WRITER, engine.dsn],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            assert writer.stdout is not None and writer.stdout.readline().strip() == "gate held"
        report = apply_plan(counting, loaded, plan, batch_seconds=600.0, opened=(client, opened.pop_all()))
    assert report.partitions["analytics.hourly_endpoint_stats"] >= 12
    if writer is not None:
        out, _ = writer.communicate(timeout=120)
        assert writer.returncode == 0 and out.strip() == "inserted", out
    assert counting.opened == (1 if writer_waiting else 0)
    assert engine_lock_free(engine)  # the handed client is closed: another process could open the engine now
    with engine.get_client() as client:
        assert assert_exact(client, loaded, ref("hourly_endpoint_stats")) > 500


def engine_lock_free(engine) -> bool:
    """Whether no client of this process holds the embedded engine: its cross-process lock can be taken on a
    descriptor of its own (a ``flock`` conflicts with the process's other descriptors too)."""
    from filelock import FileLock, Timeout

    try:
        FileLock(engine.embedded_path + ".lock", is_singleton=False).acquire(timeout=0).lock.release()
    except Timeout:
        return False
    return True


def test_an_interrupted_re_derivation_is_a_pending_change_until_an_apply_finishes_it(
    engine, tmp_path: Path, capsys
) -> None:
    """Issue 25, class 8: an apply stopped during the re-derivation (here: RacedWrites after the first partition, at
    the point between two holds) leaves the new SELECT live and history mixed. ``chmv plan`` says so (exit 3, the
    partitions left) until the next ``chmv apply`` re-derives what is left; then the plan is empty."""
    from chmv_assets.cli import main
    from chmv_assets.errors import RacedWrites

    ddl = copy_ddl(tmp_path)
    edit(ddl, *CHANGED_FILTER)
    loaded = load(ddl)
    dsn = f"chdb://{tmp_path / 'chdb'}"

    def stop(point: str) -> None:  # the apply's point after its first partition: deterministic, no race to win
        if point.startswith("rebuilt analytics.error_events"):
            raise RacedWrites(f"{point}: writes kept racing the next partition (injected)")

    with engine.get_client() as client:
        plan = plan_lifecycle(client, loaded)
    total = len(next(plan.rederivations()).plan.steps)
    with pytest.raises(RacedWrites):
        apply_plan(engine, loaded, plan, pause=stop, batch_seconds=0.0)

    with engine.get_client() as client:
        pending = plan_lifecycle(client, loaded)
    (change,) = pending.changes
    assert change.unfinished and change.action == Action.REDERIVE and change.ref == ref("error_events")
    assert change.rederive is not None and len(change.rederive.plan.steps) == total - 1  # the first one is done
    assert f"1 partition re-derived, {total - 1} partitions left" in change.reasons[0]
    capsys.readouterr()
    assert main(["plan", "--ddl-dir", str(ddl), "--dsn", dsn]) == 3
    assert "finish the re-derivation an earlier apply left unfinished" in capsys.readouterr().out

    assert main(["apply", "--ddl-dir", str(ddl), "--dsn", dsn]) == 0
    assert f"{total - 1} partitions re-derived" in capsys.readouterr().out
    with engine.get_client() as client:
        assert assert_exact(client, loaded, ref("error_events")) > 100
    assert main(["plan", "--ddl-dir", str(ddl), "--dsn", dsn]) == 0


FOREIGN_MV = "team.error_feed"
FOREIGN_ROWS = "SELECT count() FROM analytics.error_events WHERE payload = 'from team'"


def add_foreign_writer(client) -> None:
    """Another team's MV writing 50 rows into ``analytics.error_events`` (not in the DDL directory)."""
    client.command("CREATE DATABASE IF NOT EXISTS team ENGINE = Atomic")
    client.command("CREATE TABLE team.errors (ts DateTime, level String) ENGINE = MergeTree ORDER BY ts")
    client.command(
        f"CREATE MATERIALIZED VIEW {FOREIGN_MV} TO analytics.error_events AS "
        "SELECT ts AS timestamp, level, 'from team' AS payload FROM team.errors"
    )
    client.command(
        "INSERT INTO team.errors SELECT toDateTime('2026-08-05 00:00:00') + number * 60, 'error' FROM numbers(50)"
    )
    assert int(client.command(FOREIGN_ROWS)) == 50


def test_a_re_derivation_never_deletes_rows_a_foreign_mv_wrote(engine, tmp_path: Path) -> None:
    """Issue 25, class 4 on chmv apply's paths: an MV outside the DDL that writes into a target whose history a
    change re-derives. Created after ``chmv plan`` (the apply's own re-planning sees it), and after an interrupted
    re-derivation (the pending change ``chmv plan`` shows is blocked by it): nothing of it is re-derived, its rows stay."""
    from chmv_assets.errors import ForeignRowsRefused

    ddl = copy_ddl(tmp_path)
    edit(ddl, *CHANGED_FILTER)
    loaded = load(ddl)
    with engine.get_client() as client:
        plan = plan_lifecycle(client, loaded)
        add_foreign_writer(client)
    assert not plan.blocked  # planned before the foreign MV existed
    with pytest.raises(ForeignRowsRefused, match=f"{FOREIGN_MV}, not in the DDL directory, writes into"):
        apply_plan(engine, loaded, plan)
    with engine.get_client() as client:
        assert int(client.command(FOREIGN_ROWS)) == 50
        # the cut-in is done: the re-derivation is pending, and blocked by the foreign MV
        pending = plan_lifecycle(client, loaded)
    (change,) = pending.changes
    assert change.unfinished and change.blocked and FOREIGN_MV in change.blocked
    with pytest.raises(Exception, match="nothing was changed"):
        apply_plan(engine, loaded, pending)
    with engine.get_client() as client:
        assert int(client.command(FOREIGN_ROWS)) == 50
        client.command(f"DROP VIEW {FOREIGN_MV}")
        client.command("DROP DATABASE team")
        client.command("DELETE FROM analytics.error_events WHERE payload = 'from team'", settings={"mutations_sync": 2})
        pending = plan_lifecycle(client, loaded)
    assert not pending.blocked
    apply_plan(engine, loaded, pending)
    with engine.get_client() as client:
        assert assert_exact(client, loaded, ref("error_events")) > 100
