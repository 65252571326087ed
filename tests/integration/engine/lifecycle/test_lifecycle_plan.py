"""The lifecycle plan on the embedded engine: every change kind, in topological order, without changing anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.lifecycle.plan import EXIT_CHANGES, EXIT_NO_CHANGES, Action
from chmv_assets.engine.lifecycle.planner import plan_lifecycle

from support.engines import make_engine
from support.lifecycle import ADD_COLUMN, CHANGED_FILTER, NEW_SORT_KEY, NEW_TTL, copy_ddl, edit, snapshot


def ref(fqn: str) -> ObjectRef:
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory):
    """An engine with the example DDL deployed and 20k demo rows (read-only: plans change nothing)."""
    root = tmp_path_factory.mktemp("lifecycle_plan")
    return make_engine(root / "chdb", load(copy_ddl(root / "orig")), rows=20_000)


def test_a_deployed_repo_plans_no_changes(deployed, example) -> None:
    with deployed.get_client() as client:
        plan = plan_lifecycle(client, example)
    assert not plan.has_changes and plan.exit_code == EXIT_NO_CHANGES
    assert "no changes" in plan.describe() and plan.to_dict()["status"] == "no changes"


def test_every_change_kind_in_topological_order_and_nothing_changed(deployed, tmp_path: Path) -> None:
    ddl = copy_ddl(tmp_path)
    for change in (ADD_COLUMN, CHANGED_FILTER, NEW_TTL, NEW_SORT_KEY):
        edit(ddl, *change)
    with deployed.get_client() as client:
        client.command("CREATE TABLE analytics.stray (x UInt8) ENGINE = Memory")
        try:
            before = snapshot(client)
            plan = plan_lifecycle(client, load(ddl))
            assert snapshot(client) == before  # nothing changed
        finally:
            client.command("DROP TABLE analytics.stray SYNC")
    assert plan.exit_code == EXIT_CHANGES
    by_object = {c.ref.fqn: c for c in plan.changes}
    assert [c.layer for c in plan.changes] == sorted(c.layer for c in plan.changes)

    audit = by_object["analytics.audit_log"]
    assert audit.action == Action.ALTER and audit.rederive is None
    assert audit.statements == (
        "ALTER TABLE `analytics`.`audit_log` ADD COLUMN source_ip String DEFAULT '' COMMENT 'who' AFTER `payload`",
    )
    ttl = by_object["analytics.metric_events"]
    assert ttl.statements == ("ALTER TABLE `analytics`.`metric_events` MODIFY TTL timestamp + INTERVAL 11 YEAR",)

    errors = by_object["analytics.errors_mv"]
    assert errors.action == Action.MODIFY_QUERY and "+WHERE level IN ('error', 'warn')" in errors.diff
    assert errors.statements == (
        "ALTER TABLE `analytics`.`errors_mv` MODIFY QUERY SELECT timestamp, level, payload "
        "FROM analytics.all_events WHERE level IN ('error', 'warn')",
    )
    rederive = errors.rederive
    assert rederive is not None and rederive.target == ref("analytics.error_events")
    assert {p.engine for p in rederive.partitions} == {"clickhouse"} and rederive.partitions[
        0
    ].partition == "2026-08-01"
    assert 0 < rederive.rows <= 20_000

    agg = by_object["analytics.events_agg"]
    assert agg.action == Action.NEW_VERSION and agg.next_ref == ref("analytics._chmv_next_events_agg")
    assert agg.reasons[0].startswith("ORDER BY (event_date, event_hour, event_type, user_id) → (event_type,")
    assert agg.statements[0].startswith("CREATE TABLE IF NOT EXISTS `analytics`.`_chmv_next_events_agg`\n(\n")
    assert "ORDER BY (event_type, event_date, event_hour, user_id)" in agg.statements[0]
    assert agg.statements[1].startswith(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS `analytics`.`_chmv_next_mv_events_agg` "
        "TO `analytics`.`_chmv_next_events_agg` AS\nSELECT\n    toDate(timestamp)"
    )
    assert agg.rederive.plan.live == agg.next_ref and agg.rederive.plan.steps[0].shadow.name.startswith(
        "_chmv_shadow__chmv_next_events_agg_"
    )
    # The chain below a changed target is re-derived, upstream first.
    chain = [c.ref.fqn for c in plan.changes if c.action == Action.REDERIVE]
    assert chain == ["analytics.events_daily", "analytics.events_weekly"]
    assert by_object["analytics.events_daily"].layer < by_object["analytics.events_weekly"].layer
    assert "analytics.stray: a Memory the DDL does not define; kept (--allow-drop drops it)" in plan.notes
    text = plan.describe()
    assert "± analytics.events_agg: new version built beside as analytics._chmv_next_events_agg" in text
    assert (
        "re-derive analytics.error_events into analytics.error_events: 92 partitions (2026-08-01 … 2026-10-31)" in text
    )


def test_drops_only_with_allow_drop(deployed, tmp_path: Path) -> None:
    ddl = copy_ddl(tmp_path)
    edit(
        ddl,
        "40_all_events.sql",
        "CREATE TABLE IF NOT EXISTS analytics.metric_events (timestamp DateTime, payload String)",
        "CREATE TABLE IF NOT EXISTS analytics.metric_events (timestamp DateTime)",
    )
    text = (ddl / "40_all_events.sql").read_text()
    (ddl / "40_all_events.sql").write_text(
        text.replace(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.audit_mv TO analytics.audit_log AS\n"
            "SELECT timestamp, payload FROM analytics.all_events WHERE is_audit = 1;",
            "",
        )
    )
    edit(
        ddl,
        "40_all_events.sql",
        "CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.metrics_mv TO analytics.metric_events AS\n"
        "SELECT timestamp, payload FROM",
        "CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.metrics_mv TO analytics.metric_events AS\n"
        "SELECT timestamp FROM",
    )
    loaded = load(ddl)
    with deployed.get_client() as client:
        kept = plan_lifecycle(client, loaded)
        dropped = plan_lifecycle(client, loaded, allow_drop=True)
    assert not [c for c in kept.changes if c.action == Action.DROP]
    assert "analytics.audit_mv: a MaterializedView the DDL does not define; kept (--allow-drop drops it)" in kept.notes
    assert (
        "analytics.metric_events: column payload String is not in the DDL; kept (--allow-drop drops it)" in kept.notes
    )
    drops = [(c.ref.fqn, c.statements) for c in dropped.changes if c.action == Action.DROP]
    assert drops == [
        ("analytics.audit_mv", ("DROP VIEW IF EXISTS `analytics`.`audit_mv` SYNC",)),
        ("analytics.metric_events", ("ALTER TABLE `analytics`.`metric_events` DROP COLUMN `payload`",)),
    ]
    assert dropped.changes[-1].action == Action.DROP  # drops come last
