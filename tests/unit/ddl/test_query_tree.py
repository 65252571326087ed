"""The SELECT facts from ClickHouse's query tree: the same as sqlglot's where sqlglot reads the SELECT, and right where
it cannot (aliases inside function arguments, lambdas with a ternary, APPLY)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from sqlglot import parse_one

from chmv_assets.ddl.models import ObjectRef, SourceRole
from chmv_assets.ddl.parsing.select import analyze_select
from chmv_assets.ddl.query_tree import analyze_query_tree, parse_dump
from chmv_assets.ddl.select_facts import SelectFacts
from chmv_assets.ddl.server_grammar import server_grammar

_spec = importlib.util.spec_from_file_location("_parser_cases", Path(__file__).with_name("test_parser.py"))
assert _spec is not None and _spec.loader is not None
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)

EXAMPLE_SELECTS = [
    (
        "aggregating-join",
        "SELECT toStartOfHour(r.ts) AS hour, r.kind AS kind, u.name AS name, sumState(toUInt64(1)) AS n, "
        "quantileState(0.99)(r.v) AS p99 FROM d.events AS r LEFT JOIN d.users AS u ON u.id = r.user_id "
        "GROUP BY hour, kind, name",
    ),
    ("final-keeps-its-trigger", "SELECT ts, user_id FROM d.events FINAL"),
    ("in-a-table", "SELECT ts, user_id FROM d.events WHERE user_id IN d.blocked"),
    (
        "cte-union",
        "WITH x AS (SELECT ts, user_id FROM d.events) SELECT ts, user_id FROM x "
        "UNION ALL SELECT ts, user_id FROM other.more_events",
    ),
    ("merge-state", "SELECT toMonday(ts) AS week, uniqMergeState(n) AS n, countIf(v > 1) AS c FROM d.events"),
    ("order-by", "SELECT ts, user_id FROM d.events ORDER BY ts"),
    ("dictionary", "SELECT ts, dictGet('d.user_dict', 'name', user_id) AS name FROM d.events"),
]
SELECTS = (
    [(c[0], c[1]) for c in _cases.SOURCE_CASES]
    + [(c[0], c[1]) for c in _cases.JOIN_CASES]
    + [(f"dict-{c[0]}", f"SELECT ts, {c[1]} AS user_id FROM d.events") for c in _cases.DICT_CASES]
    + EXAMPLE_SELECTS
)


def facts(select: str) -> tuple[SelectFacts, SelectFacts]:
    """The facts of ``select`` from sqlglot's tree and from ClickHouse's query tree."""
    dump = server_grammar().query_tree(select)
    assert isinstance(dump, str), dump
    return analyze_select(parse_one(select, read="clickhouse"), "d", 0), analyze_query_tree(dump, select, "d")


@pytest.mark.parametrize("select", [c[1] for c in SELECTS], ids=[c[0] for c in SELECTS])
def test_the_query_tree_agrees_with_sqlglot(select):
    mine, server = facts(select)

    def uses(found: SelectFacts) -> list:  # the mentions of one table in written order (sqlglot's come breadth-first)
        return [
            (
                s.ref,
                s.role,
                sorted(((p.start, p.end), a, b) for p, a, b in zip(s.spans, s.has_alias, s.block, strict=True)),
            )
            for s in found.sources
        ]

    assert uses(server) == uses(mine)
    for name in ("trigger", "dictionaries", "has_join", "joined", "self_join", "has_order_by", "aggregates"):
        assert getattr(server, name) == getattr(mine, name), name
    assert [(o.name, o.truncation, o.is_aggregate) for o in server.outputs] == [
        (o.name, o.truncation, o.is_aggregate) for o in mine.outputs
    ]
    if "(SELECT max" not in select:  # sqlglot counts a scalar subquery's columns as the trigger's; the tree does not
        assert [o.source_columns for o in server.outputs] == [o.source_columns for o in mine.outputs]


def test_what_sqlglot_cannot_read():
    select = (
        "SELECT toDate(ts) AS day, cityHash64(arraySort(arrayDistinct(tags)) AS sorted) AS h, "
        "toUInt8(length(sorted)) AS n, sum(arrayCount(a -> a > 100 ? 1 : 0, amounts)) AS big, uniqState(user_id) AS u "
        "FROM d.events AS e WHERE arrayExists(t -> t = 'x', tags) AND user_id IN d.blocked GROUP BY day, h, n"
    )
    with pytest.raises(Exception, match="Expecting|Required"):
        parse_one(select, read="clickhouse")
    dump = server_grammar().query_tree(select)
    assert isinstance(dump, str)
    found = analyze_query_tree(dump, select, "d")
    assert found.trigger == ObjectRef(database="d", name="events")
    assert [(s.ref.fqn, s.role) for s in found.sources] == [
        ("d.events", SourceRole.TRIGGER),
        ("d.blocked", SourceRole.READ_WHOLE),
    ]
    events = found.sources[0]
    assert [select[s.start : s.end] for s in events.spans] == ["d.events"] and events.has_alias == (True,)
    assert [select[s.start : s.end] for s in found.sources[1].spans] == ["d.blocked"]
    assert [o.name for o in found.outputs] == ["day", "h", "n", "big", "u"]
    assert found.outputs[0].truncation == ("ts", "day")
    assert found.outputs[1].expression == "cityHash64(arraySort(arrayDistinct(tags)) AS sorted)"
    # `sorted` is an alias of the query, `a` and `t` lambda parameters: none is a column of the trigger
    assert found.outputs[2].source_columns == ()
    assert found.outputs[3].source_columns == (("d.events", "amounts"),)
    assert [(a.output, a.base, a.combinators) for a in found.aggregates] == [
        ("big", "sum", ()),
        ("u", "uniq", ("State",)),
    ]
    assert found.group_by == ("day", "h", "n")


def test_a_bare_name_after_in_is_a_table_unless_the_query_names_it():
    select = "WITH [1, 2] AS wanted SELECT ts FROM d.events WHERE user_id IN wanted AND kind IN d.kinds"
    dump = server_grammar().query_tree(select)
    assert isinstance(dump, str)
    assert [s.ref.fqn for s in analyze_query_tree(dump, select, "d").sources] == ["d.events", "d.kinds"]


def test_the_dump_keeps_quoted_constants_whole():
    root = parse_dump(
        "QUERY id: 0\n  PROJECTION\n    LIST id: 1, nodes: 1\n"
        "      CONSTANT id: 2, alias: x, constant_value: 'a, b: \\'c\\'', constant_value_type: String\n"
    )
    constant = root.section("PROJECTION").items()[0]
    assert constant.attrs["constant_value"] == "'a, b: \\'c\\''"
    assert constant.attrs["alias"] == "x" and constant.attrs["constant_value_type"] == "String"
