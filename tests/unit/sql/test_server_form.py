"""A view's SELECT as the server stores it: tables qualified, SQL functions expanded (parentheses only where needed)."""

from __future__ import annotations

import pytest

from chmv_assets.ddl.models import MaterializedView
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.sql.server_form import expand_functions, function_parts, same_structure, server_select

FUNCTIONS = {
    "clean": (("p",), "trimRight(lower(p), '/')"),
    "section": (("p",), "splitByChar('/', clean(p))[2]"),
    "plus_one": (("x",), "x + 1"),
    "twice": (("x",), "x * 2"),
    "pair": (("a", "b"), "concat(a, '=', b)"),
}


@pytest.mark.parametrize(
    ("sql", "expanded"),
    [
        ("SELECT clean(path) AS c FROM t", "SELECT trimRight(lower(path), '/') AS c FROM t"),
        (
            "SELECT section(v.path) AS s FROM t AS v",
            "SELECT splitByChar('/', trimRight(lower(v.path), '/'))[2] AS s FROM t AS v",
        ),
        ("SELECT twice(a + b) AS d FROM t", "SELECT (a + b) * 2 AS d FROM t"),
        ("SELECT plus_one(a) * 3 AS d FROM t", "SELECT (a + 1) * 3 AS d FROM t"),
        (
            "SELECT countIf(NOT clean(a) = '') AS n FROM t",
            "SELECT countIf(NOT trimRight(lower(a), '/') = '') AS n FROM t",
        ),
        ("SELECT pair(k, clean(v)) AS kv FROM t", "SELECT concat(k, '=', trimRight(lower(v), '/')) AS kv FROM t"),
        ("SELECT t.clean(x), other(x) FROM t", "SELECT t.clean(x), other(x) FROM t"),
    ],
)
def test_sql_functions_are_expanded_like_the_server_does(sql, expanded):
    assert expand_functions(sql, FUNCTIONS) == expanded


def test_function_parts():
    assert function_parts("CREATE FUNCTION IF NOT EXISTS f ON CLUSTER c AS (a, b) -> a + b") == (("a", "b"), "a + b")
    assert function_parts("CREATE FUNCTION g AS x -> lower(x)") == (("x",), "lower(x)")


def test_unqualified_tables_get_their_database(tmp_path):
    view = parse_statement(
        "CREATE MATERIALIZED VIEW v TO t AS SELECT a FROM src AS s JOIN db2.dim AS d USING (a) WHERE a IN allowed",
        default_database="db",
    )
    assert isinstance(view, MaterializedView)
    from chmv_assets.ddl.models import Project

    project = Project(ddl_dir=str(tmp_path), default_database="db")
    assert (
        server_select(view, project)
        == "SELECT a FROM `db`.src AS s JOIN db2.dim AS d USING (a) WHERE a IN `db`.allowed"
    )


def test_the_servers_own_tables_are_qualified_already(tmp_path):
    """``system.one`` alone reads as the SYSTEM statement to the tokenizer: it is qualified, left as written (else the
    server cannot format the SELECT, and every plan after an apply shows a change)."""
    view = parse_statement(
        "CREATE MATERIALIZED VIEW v ENGINE = Memory AS SELECT a FROM src LEFT JOIN "
        "(SELECT toInt64(dummy) AS a FROM system.one) AS o USING (a) WHERE a IN (SELECT 1 FROM system.numbers)",
        default_database="db",
    )
    from chmv_assets.ddl.models import Project

    assert server_select(view, Project(ddl_dir=str(tmp_path), default_database="db")) == (
        "SELECT a FROM `db`.src LEFT JOIN (SELECT toInt64(dummy) AS a FROM system.one) AS o USING (a) "
        "WHERE a IN (SELECT 1 FROM system.numbers)"
    )


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ("SELECT (splitByChar('/', p)[2]) AS s FROM t", "SELECT splitByChar('/', p)[2] AS s FROM t", True),
        (
            "SELECT x FROM t WHERE (a = 1) AND (b IN (SELECT 1))",
            "SELECT x FROM t WHERE a = 1 AND b IN (SELECT 1)",
            True,
        ),
        ("SELECT (a + b) * c FROM t", "SELECT a + (b * c) FROM t", False),
        ("SELECT x FROM t WHERE (a = 1 OR b = 2) AND c", "SELECT x FROM t WHERE a = 1 OR (b = 2 AND c)", False),
        ("SELECT x FROM t WHERE a = 1", "SELECT x FROM t WHERE a = 2", False),
        ("SELECT x FROM (SELECT x FROM t)", "SELECT x FROM t", False),
        ("SELECT (", "SELECT (", False),  # does not parse: never the same
    ],
    ids=["function-body", "conditions", "precedence", "boolean-precedence", "literal", "subquery", "unparsable"],
)
def test_same_structure_ignores_only_redundant_parentheses(left: str, right: str, same: bool) -> None:
    """ALTER TABLE … MODIFY QUERY stores an expanded SQL function's body parenthesized where CREATE stores it bare:
    the comparison of the DDL's SELECT with the live one must not see a change there (every plan after such an apply
    showed a MODIFY QUERY again), and must see every other."""
    assert same_structure(left, right) is same
