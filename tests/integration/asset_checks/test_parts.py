"""Part-count growth: thresholds from the server, a climbing count over evaluations, the throw limit."""

from __future__ import annotations

from pathlib import Path

from chmv_check_helpers import TRANSLATOR, evaluations, ref, run_checks
from conftest import make_engine
from dagster import AssetCheckKey, AssetCheckSeverity, DagsterInstance

from asset_checks.definitions import PARTS
from asset_checks.parts import PartCount, assess, server_thresholds, table_thresholds
from chmv_assets.ddl.parser import parse_statement

LIMITS = {"parts_to_delay_insert": 1000, "parts_to_throw_insert": 3000, "max_parts_in_total": 100000}


def test_assess_levels() -> None:
    assert assess(PartCount("t", 10, 2, "p"), LIMITS, [9, 11]).severity == "ok"  # fell, then rose: a plateau
    assert assess(PartCount("t", 30, 2, "p"), LIMITS, [10, 20]).severity == "warning"
    assert assess(PartCount("t", 600, 600, "p"), LIMITS, []).severity == "warning"
    verdict = assess(PartCount("t", 2500, 2500, "202608"), LIMITS, [])
    assert verdict.severity == "error" and "parts_to_throw_insert=3000" in verdict.message


def test_thresholds_come_from_the_server_and_the_ddl(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    with engine.get_client() as client:
        server = server_thresholds(client)
    assert set(server) == set(LIMITS) and server["parts_to_throw_insert"] > server["parts_to_delay_insert"] > 0
    table = parse_statement("CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY a "
                            "SETTINGS parts_to_delay_insert = 7, index_granularity = 8192")  # fmt: skip
    assert table_thresholds(server, table)["parts_to_delay_insert"] == 7
    assert table_thresholds(server, None) == server


def test_flood_of_tiny_inserts_warns(tmp_path: Path, example) -> None:
    engine = make_engine(tmp_path / "chdb", example, rows=0)
    instance = DagsterInstance.local_temp(str(tmp_path))  # SQLite, as dagster dev
    key = AssetCheckKey(TRANSLATOR.get_asset_key(ref("error_events")), PARTS)
    results = []
    for round_ in range(3):
        with engine.get_client() as client:
            for i in range(15):  # one tiny insert per new daily partition: parts that can never merge away
                day = 1 + round_ * 15 + i
                client.command(f"INSERT INTO analytics.all_events VALUES (toDateTime('2027-01-01 00:00:00') + "
                               f"INTERVAL {day} DAY, 'click', 'error', 0, 'x')")  # fmt: skip
        (evaluation,) = evaluations(run_checks(example, engine, [key], instance), PARTS)
        results.append(evaluation)
    assert [e.metadata["active_parts"].value for e in results] == [15, 30, 45]
    assert [e.metadata["partitions"].value for e in results] == [15, 30, 45]  # one part in each daily partition
    assert "| 20270102 | 1 |" in results[0].metadata["chmv/parts_by_partition"].value
    assert results[0].passed and results[1].passed
    assert not results[2].passed and results[2].severity == AssetCheckSeverity.WARN
    assert "climbed" in results[2].description
