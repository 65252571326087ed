"""Schema drift against the live engine: a column added live, a changed SELECT, a dropped MV."""

from __future__ import annotations

from pathlib import Path

from chmv_check_helpers import TRANSLATOR, evaluations, ref, run_checks
from conftest import make_engine
from dagster import AssetCheckKey, DagsterInstance

from asset_checks.definitions import DRIFT
from asset_checks.drift import drift_report, normalize_type


def test_live_changes_fail_drift_with_a_readable_diff(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    with engine.get_client() as client:
        assert all(not items for items in drift_report(client, example.project, example.project.targets).values())
        client.command("ALTER TABLE analytics.audit_log ADD COLUMN source_ip String")
        client.command("ALTER TABLE analytics.errors_mv MODIFY QUERY "
                       "SELECT timestamp, level, payload FROM analytics.all_events WHERE level = 'fatal'")  # fmt: skip
        client.command("DROP VIEW analytics.metrics_mv SYNC")
    keys = [AssetCheckKey(TRANSLATOR.get_asset_key(ref(n)), DRIFT) for n in ("audit_log", "error_events",
                                                                            "metric_events", "counter_daily")]  # fmt: skip
    result = run_checks(example, engine, keys, DagsterInstance.ephemeral())
    by_asset = {e.asset_key.path[-1]: e for e in evaluations(result, DRIFT)}
    assert by_asset["counter_daily"].passed
    audit = by_asset["audit_log"]
    assert not audit.passed and "| analytics.audit_log | extra_column | absent | source_ip String |" in audit.metadata["chmv/diff"].value
    errors = by_asset["error_events"].metadata["chmv/diff"].value
    assert "select_changed" in errors and "-WHERE level = 'fatal'" in errors and "+WHERE level = 'error'" in errors
    assert "| analytics.metrics_mv | missing_object |" in by_asset["metric_events"].metadata["chmv/diff"].value


def test_type_normalization() -> None:
    assert normalize_type("AggregateFunction(quantile(0.99),  UInt32)") == "AggregateFunction(quantile(0.99), UInt32)"
    assert normalize_type("INT") == "Int32" and normalize_type("LowCardinality( String )") == "LowCardinality(String)"
