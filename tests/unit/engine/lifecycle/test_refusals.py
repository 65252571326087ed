"""POPULATE and CREATE OR REPLACE MATERIALIZED VIEW are refused with the reason and the alternative."""

from __future__ import annotations

import pytest

from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.engine.lifecycle.refusals import check_statement, refused_views
from chmv_assets.errors import ChmvError


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE OR REPLACE MATERIALIZED VIEW a TO b AS SELECT 1",
        "create or replace materialized view a to b as select 1",
        "REPLACE MATERIALIZED VIEW a TO b AS SELECT 1",
        "CREATE MATERIALIZED VIEW a ENGINE = Memory POPULATE AS SELECT 1",
    ],
)
def test_statements_chmv_never_sends(sql: str) -> None:
    with pytest.raises(ChmvError, match="refused"):
        check_statement(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE MATERIALIZED VIEW a TO b AS SELECT populate AS x FROM t",
        "CREATE TABLE t (populate UInt8) ENGINE = Memory",
        "CREATE OR REPLACE TABLE t (x UInt8) ENGINE = Memory",
        "ALTER TABLE mv MODIFY QUERY SELECT 'CREATE OR REPLACE MATERIALIZED VIEW' AS x FROM t",
    ],
)
def test_what_merely_looks_like_them_passes(sql: str) -> None:
    assert check_statement(sql) == sql


def test_refused_views_say_why_and_what_to_do_instead() -> None:
    populate = parse_statement(
        "CREATE MATERIALIZED VIEW d.p ENGINE = MergeTree ORDER BY x POPULATE AS SELECT x FROM d.s"
    )
    replace = parse_statement("CREATE OR REPLACE MATERIALIZED VIEW d.r TO d.t AS SELECT x FROM d.s")
    ok = parse_statement("CREATE MATERIALIZED VIEW d.ok TO d.t AS SELECT x FROM d.s")
    problems = refused_views([populate, replace, ok])
    assert [p.message.split(":")[0] for p in problems] == ["d.p", "d.r"]
    assert "rows inserted during it are lost or counted twice" in problems[0].message
    assert "chmv fills the target's history itself" in problems[0].hint
    assert "#108726" in problems[1].message and "MODIFY QUERY" in problems[1].hint
