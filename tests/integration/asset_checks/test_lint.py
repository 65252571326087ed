"""The lint check through Dagster: a broken rule warns, and a WARN never fails the run.

The rules themselves are tested on the parsed model in ``tests/unit/engine/health/test_lint.py``.
"""

from __future__ import annotations

from pathlib import Path

from dagster import AssetCheckKey, AssetCheckSeverity, DagsterInstance

from asset_checks.definitions import LINT
from chmv_assets.ddl.loader import load

from support.checks import TRANSLATOR, evaluations, run_checks

#: A ReplacingMergeTree source aggregated with sum/count: duplicates are counted twice (seed 001).
DEDUP_SOURCE_DDL = """
CREATE DATABASE IF NOT EXISTS shop ENGINE = Atomic;
CREATE TABLE shop.orders (ts DateTime, order_id UInt64, user_id UInt64, amount UInt64)
ENGINE = ReplacingMergeTree() PARTITION BY toYYYYMM(ts) ORDER BY order_id;
CREATE TABLE shop.revenue (day Date, revenue AggregateFunction(sum, UInt64), n AggregateFunction(count))
ENGINE = AggregatingMergeTree() PARTITION BY toYYYYMM(day) ORDER BY day;
CREATE MATERIALIZED VIEW shop.revenue_mv TO shop.revenue AS
SELECT toDate(ts) AS day, sumState(amount) AS revenue, countState() AS n FROM shop.orders GROUP BY day;
"""


def test_lint_check_warns_through_dagster(tmp_path: Path) -> None:
    (tmp_path / "shop.sql").write_text(DEDUP_SOURCE_DDL)
    loaded = load(tmp_path)
    key = AssetCheckKey(TRANSLATOR.get_asset_key(loaded.project.targets[0]), LINT)
    result = run_checks(loaded, None, [key], DagsterInstance.ephemeral())
    (evaluation,) = evaluations(result, LINT)
    assert not evaluation.passed and evaluation.severity == AssetCheckSeverity.WARN
    assert result.success  # a WARN check never fails the run
    assert "dedup_source_additive_aggregate" in evaluation.metadata["chmv/rules"].value
