"""Part-count verdicts: the levels, thresholds from the server and the DDL, a saturated merge pool."""

from __future__ import annotations

from pathlib import Path

from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.engine.health.part_counts import PartCount, assess, pool_verdict, server_thresholds, table_thresholds

from support.engines import make_engine

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
    table = parse_statement(
        "CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY a "
        "SETTINGS parts_to_delay_insert = 7, index_granularity = 8192"
    )
    assert table_thresholds(server, table)["parts_to_delay_insert"] == 7
    assert table_thresholds(server, None) == server


def test_a_saturated_merge_pool_warns() -> None:
    assert pool_verdict(3, 4) is None and pool_verdict(0, 0) is None
    verdict = pool_verdict(16, 16)
    assert verdict is not None and verdict.severity == "warning"
    assert verdict.message.startswith("the merge pool is saturated (16 of 16 merge/mutation tasks busy)")
