"""The parity check through Dagster: one evaluation per partition with its numbers, a missing target's message.

Parity's logic (the recompute, its measures, partitions in one query) is tested in
``tests/integration/engine/health/test_parity.py``.
"""

from __future__ import annotations

from pathlib import Path

from dagster import DagsterInstance

from asset_checks.definitions import PARITY

from support.checks import evaluations, ref, run_parity
from support.engines import make_engine


def test_lost_rows_fail_only_their_partition_with_numbers(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    with engine.get_client() as client:
        client.command("ALTER TABLE analytics.hourly_endpoint_stats DROP PARTITION tuple(toDate('2026-08-02'))")
    instance = DagsterInstance.ephemeral()
    result = run_parity(example, engine, ref("hourly_endpoint_stats"), instance, "2026-08-01", "2026-08-03")
    by_partition = {e.partition: e for e in evaluations(result, PARITY)}  # one evaluation per partition
    assert sorted(by_partition) == ["2026-08-01", "2026-08-02", "2026-08-03"]
    assert [p for p, e in by_partition.items() if not e.passed] == ["2026-08-02"]
    assert by_partition["2026-08-02"].metadata["delta"].value < 0
    assert isinstance(by_partition["2026-08-02"].metadata["expected"].value, float)
    single = evaluations(
        run_parity(example, engine, ref("hourly_endpoint_stats"), instance, "2026-08-01", "2026-08-01")
    )
    assert single[0].passed and single[0].partition == "2026-08-01"


def test_missing_target_fails_with_a_clear_message(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    with engine.get_client() as client:
        client.command("DROP TABLE analytics.audit_log SYNC")
    result = run_parity(example, engine, ref("audit_log"), DagsterInstance.ephemeral(), "2026-08-01", "2026-08-01")
    (evaluation,) = evaluations(result, PARITY)
    assert not evaluation.passed
    assert "analytics.audit_log does not exist on the server" in evaluation.description
    assert "chmv apply" in evaluation.description
