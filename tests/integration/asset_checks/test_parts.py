"""The part-count check through Dagster: a count climbing over evaluations warns, the server's live limits judge.

The verdicts themselves (levels, thresholds, the merge pool) are tested in
``tests/integration/engine/health/test_part_counts.py``.
"""

from __future__ import annotations

from pathlib import Path

from dagster import AssetCheckKey, AssetCheckSeverity, DagsterInstance

from asset_checks.definitions import PARTS

from support.checks import TRANSLATOR, evaluations, ref, run_checks
from support.engines import make_engine


def test_flood_of_tiny_inserts_warns(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    instance = DagsterInstance.local_temp(str(tmp_path))  # SQLite, as dagster dev
    key = AssetCheckKey(TRANSLATOR.get_asset_key(ref("error_events")), PARTS)
    results = []
    for round_ in range(3):
        with engine.get_client() as client:
            for i in range(15):  # one tiny insert per new daily partition: parts that can never merge away
                day = 1 + round_ * 15 + i
                client.command(
                    f"INSERT INTO analytics.all_events VALUES (toDateTime('2027-01-01 00:00:00') + "
                    f"INTERVAL {day} DAY, 'click', 'error', 0, 'x')"
                )
        (evaluation,) = evaluations(run_checks(example, engine, [key], instance), PARTS)
        results.append(evaluation)
    assert [e.metadata["active_parts"].value for e in results] == [15, 30, 45]
    assert [e.metadata["partitions"].value for e in results] == [15, 30, 45]  # one part in each daily partition
    assert "| 20270102 | 1 |" in results[0].metadata["chmv/parts_by_partition"].value
    assert results[0].passed and results[1].passed
    assert not results[2].passed and results[2].severity == AssetCheckSeverity.WARN
    assert "climbed" in results[2].description


def test_the_check_reads_the_limits_the_server_applies_and_the_merges(tmp_path: Path, example) -> None:
    """A live ``ALTER TABLE … MODIFY SETTING`` the DDL does not have: the check judges by what the server enforces."""
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    key = AssetCheckKey(TRANSLATOR.get_asset_key(ref("error_events")), PARTS)
    with engine.get_client() as client:  # one session: the merges it stops stay stopped while the check runs
        client.command(
            "ALTER TABLE analytics.error_events MODIFY SETTING parts_to_delay_insert = 6, parts_to_throw_insert = 10"
        )
        client.command("SYSTEM STOP MERGES analytics.error_events")
        for n in range(8):  # eight parts in one daily partition: 80 % of the live throw limit
            client.command(
                f"INSERT INTO analytics.all_events VALUES ('2027-01-02 00:00:0{n}', 'click', 'error', 0, 'x')",
                settings={"async_insert": 0},
            )
        (evaluation,) = evaluations(run_checks(example, engine, [key], DagsterInstance.ephemeral()), PARTS)
    metadata = {name: value.value for name, value in evaluation.metadata.items()}
    assert (metadata["parts_to_delay_insert"], metadata["parts_to_throw_insert"]) == (6, 10)  # not the DDL's defaults
    assert not evaluation.passed and evaluation.severity == AssetCheckSeverity.ERROR
    assert "near parts_to_throw_insert=10" in evaluation.description
    assert {"merges_running", "mutations_running", "merge_pool_busy", "merge_pool_size"} <= set(metadata)
