"""Schema drift against the live engine: a column added live, a changed SELECT, a dropped MV."""

from __future__ import annotations

from pathlib import Path

from dagster import AssetCheckKey, DagsterInstance

from asset_checks.definitions import DRIFT
from chmv_assets.ddl.loader import load
from chmv_assets.engine.drift import drift_report

from support.checks import TRANSLATOR, evaluations, ref, run_checks
from support.engines import make_engine
from support.lifecycle import CHANGED_FILTER, TOP_OF_CHAIN_SELECT, copy_ddl, edit


def test_live_changes_fail_drift_with_a_readable_diff(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    with engine.get_client() as client:
        assert all(not items for items in drift_report(client, example.project, example.project.targets).values())
        client.command("ALTER TABLE analytics.audit_log ADD COLUMN source_ip String")
        client.command(
            "ALTER TABLE analytics.errors_mv MODIFY QUERY "
            "SELECT timestamp, level, payload FROM analytics.all_events WHERE level = 'fatal'"
        )
        client.command("DROP VIEW analytics.metrics_mv SYNC")
    keys = [
        AssetCheckKey(TRANSLATOR.get_asset_key(ref(n)), DRIFT)
        for n in ("audit_log", "error_events", "metric_events", "counter_daily")
    ]
    result = run_checks(example, engine, keys, DagsterInstance.ephemeral())
    by_asset = {e.asset_key.path[-1]: e for e in evaluations(result, DRIFT)}
    assert by_asset["counter_daily"].passed
    audit = by_asset["audit_log"]
    assert (
        not audit.passed
        and "| analytics.audit_log | extra_column | absent | source_ip String |" in audit.metadata["chmv/diff"].value
    )
    errors = by_asset["error_events"].metadata["chmv/diff"].value
    assert "select_changed" in errors and "-WHERE level = 'fatal'" in errors and "+WHERE level = 'error'" in errors
    assert "| analytics.metrics_mv | missing_object |" in by_asset["metric_events"].metadata["chmv/diff"].value


def test_a_target_whose_select_changed_in_the_repo_links_to_the_part_of_the_plan_that_fixes_it(
    tmp_path: Path, example
) -> None:
    """The repo changes two MVs' SELECT (targets in two ops of the run): each failing drift check carries the
    MODIFY QUERY of its own MV with the re-derivation of its target, and how to run it; the plan is made once."""
    engine = make_engine(tmp_path / "chdb", example, rows=2_000)
    ddl = copy_ddl(tmp_path)
    edit(ddl, *CHANGED_FILTER)  # errors_mv -> error_events
    edit(ddl, *TOP_OF_CHAIN_SELECT)  # mv_events_agg -> events_agg, another op
    loaded = load(ddl)
    names = ("error_events", "events_agg", "counter_daily")
    keys = [AssetCheckKey(TRANSLATOR.get_asset_key(ref(n)), DRIFT) for n in names]
    instance = DagsterInstance.ephemeral()
    result = run_checks(loaded, engine, keys, instance)
    by_asset = {e.asset_key.path[-1]: e for e in evaluations(result, DRIFT)}

    assert by_asset["counter_daily"].passed and "chmv/fix" not in by_asset["counter_daily"].metadata
    errors, agg = by_asset["error_events"], by_asset["events_agg"]
    assert not errors.passed and not agg.passed
    fix = errors.metadata["chmv/fix"].value
    assert "- **~ analytics.errors_mv: MODIFY QUERY** (" in fix
    assert "```sql\nALTER TABLE `analytics`.`errors_mv` MODIFY QUERY SELECT" in fix
    assert "WHERE level IN ('error', 'warn');\n```" in fix and "+WHERE level IN ('error', 'warn')" in fix
    assert "  - re-derive analytics.error_events into analytics.error_events: " in fix and "clickhouse" in fix
    assert "mv_events_agg" not in fix  # only the part of the plan that fixes this target
    assert "`chmv_apply` job" in fix
    assert f"chmv plan --ddl-dir {ddl} --dsn chdb://{tmp_path / 'chdb'}" in fix
    assert f"chmv apply --ddl-dir {ddl} --dsn chdb://{tmp_path / 'chdb'}" in fix
    agg_fix = agg.metadata["chmv/fix"].value
    assert "- **~ analytics.mv_events_agg: MODIFY QUERY** (" in agg_fix and "countIf(duration_ms > 100)" in agg_fix
    assert "errors_mv" not in agg_fix
    # The chain below events_agg is re-derived too, but it fixes events_daily's rows, not events_agg's drift.
    assert "re-derive analytics.events_daily" not in agg_fix

    planned = [
        e
        for e in instance.all_logs(result.run_id)
        if "lifecycle plan for the drift checks of this run" in (e.user_message or "")
    ]
    assert len(planned) == 1, "one plan per run, shared by the drift checks of both ops"
    assert errors.metadata["chmv/plan_seconds"].value == agg.metadata["chmv/plan_seconds"].value
