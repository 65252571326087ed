"""Every statement ClickHouse accepts is read (sqlglot, else ClickHouse's own parser); one it refuses is reported at
its file, line and column with the server's message; statements chmv does not model are kept as written."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from chmv_assets.ddl.lineage import LineageGraph
from chmv_assets.ddl.models import KeptKind, MaterializedView, ObjectRef, SourceRole, Table
from chmv_assets.ddl.parsing.project import load_project
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.errors import DDLError
from chmv_assets.sql.rewrite import renamed_select, renamed_statement

PRELUDE = """
CREATE TABLE d.events (ts DateTime, user_id UInt64, kind String, tags Array(String), amounts Array(Float64))
    ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE d.blocked (user_id UInt64) ENGINE = Set;
CREATE TABLE d.sink (day Date, h UInt64, n UInt8, big UInt64) ENGINE = MergeTree ORDER BY day;
"""


def load(tmp_path: Path, text: str):
    root = tmp_path / "ddl"
    root.mkdir(exist_ok=True)
    (root / "a.sql").write_text(textwrap.dedent(text), encoding="utf-8")
    return load_project(root, default_database="d")


def ref(fqn: str) -> ObjectRef:
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name)


def test_an_mv_whose_select_sqlglot_cannot_read(tmp_path):
    select = (
        "SELECT toDate(ts) AS day, cityHash64(arraySort(tags) AS sorted) AS h, toUInt8(length(sorted)) AS n,\n"
        "       sum(arrayCount(a -> a > 100 ? 1 : 0, amounts)) AS big\n"
        "FROM d.events\nWHERE user_id NOT IN d.blocked\nGROUP BY day, h, n"
    )
    project = load(tmp_path, PRELUDE + f"-- tag sets\nCREATE MATERIALIZED VIEW d.mv TO d.sink AS\n{select}\n")
    view = project.views[ref("d.mv")]
    assert view.select_sql == select and view.description == "tag sets"
    assert view.trigger == ref("d.events")
    assert {s.ref.fqn: s.role for s in view.sources} == {
        "d.events": SourceRole.TRIGGER,
        "d.blocked": SourceRole.READ_WHOLE,
    }
    assert [o.name for o in view.output_columns] == ["day", "h", "n", "big"]
    assert [a.output for a in view.aggregates] == ["big"] and view.group_by == ("day", "h", "n")
    # the spans splice: a partition window in place of the trigger, another name for the IN table (no alias there)
    renamed = renamed_select(view, {ref("d.events"): ref("x.w"), ref("d.blocked"): ref("x.b")})
    assert "FROM `x`.`w` AS `events`" in renamed and "NOT IN `x`.`b`\n" in renamed
    assert renamed_statement(view, {ref("d.mv"): ref("x.mv")}).startswith("CREATE MATERIALIZED VIEW `x`.`mv` TO d.sink")


def test_an_mv_with_its_comment_after_the_select(tmp_path):
    statement = "CREATE MATERIALIZED VIEW d.mv TO d.sink AS SELECT toDate(ts) AS day FROM d.events COMMENT 'daily'"
    view = load(tmp_path, PRELUDE + statement).views[ref("d.mv")]
    assert view.select_sql == "SELECT toDate(ts) AS day FROM d.events" and view.description == "daily"
    assert view.statement[view.select_offset :].startswith(view.select_sql)
    assert renamed_select(view, {ref("d.events"): ref("x.e")}) == "SELECT toDate(ts) AS day FROM `x`.`e` AS `events`"


@pytest.mark.parametrize(
    ("column", "name", "type_", "default"),
    [
        (
            "h UInt64 MATERIALIZED cityHash64(arraySort(tags) AS s, length(s))",
            "h",
            "UInt64",
            ("MATERIALIZED", "cityHash64(arraySort(tags) AS s, length(s))"),
        ),
        ("o Object('json')", "o", "Object('json')", (None, None)),
        ("s String SETTINGS (max_compress_block_size = 1048576)", "s", "String", (None, None)),
        ("v UInt64 STATISTICS(tdigest) COMMENT 'hi'", "v", "UInt64", (None, None)),
    ],
)
def test_a_table_column_sqlglot_cannot_read_is_kept_as_written(column, name, type_, default):
    table = parse_statement(f"CREATE TABLE d.t (tags Array(String), {column}, x UInt8) ENGINE = MergeTree ORDER BY x")
    assert isinstance(table, Table)
    assert [c.name for c in table.columns] == ["tags", name, "x"]
    read = table.columns[1]
    assert (read.type, read.default_kind, read.default_expression, read.definition) == (type_, *default, column)
    assert table.order_by == "x" and table.engine is not None and table.engine.name == "MergeTree"


def test_a_dictionary_with_a_range():
    dictionary = parse_statement(
        "CREATE DICTIONARY d.prices (id UInt64, start Date, finish Date, price Float64) PRIMARY KEY id "
        "SOURCE(CLICKHOUSE(TABLE 'prices_src' DB 'd')) LIFETIME(MIN 0 MAX 300) LAYOUT(RANGE_HASHED()) "
        "RANGE(MIN start MAX finish)"
    )
    assert dictionary.source_table == ref("d.prices_src") and [c.name for c in dictionary.columns][-1] == "price"


def test_a_statement_the_server_refuses_is_reported_where_it_fails(tmp_path):
    text = (
        PRELUDE
        + "CREATE MATERIALIZED VIEW d.mv TO d.sink AS\nSELECT arrayMap(x -> (x -> x + 1)(x), tags) AS h\nFROM d.events"
    )
    with pytest.raises(DDLError) as err:
        load(tmp_path, text)
    (problem,) = err.value.problems
    assert problem.message.startswith("the server refused it: syntax error")
    line = text.splitlines()[problem.line - 1]
    assert problem.file.endswith("a.sql") and line.startswith("SELECT arrayMap")
    assert line[problem.column - 1 :].startswith("(x)")


def test_one_off_statements_are_refused_with_what_to_do(tmp_path):
    with pytest.raises(DDLError, match="(?s)unsupported statement: INSERT INTO d.events.*run one-off statements"):
        load(tmp_path, PRELUDE + "INSERT INTO d.events (ts) VALUES (now())")


FUNCTIONS_AND_VIEWS = """
CREATE FUNCTION IF NOT EXISTS clean ON CLUSTER main AS (p) -> trimRight(lower(p), '/');
CREATE FUNCTION section AS (p) -> splitByChar('/', clean(p))[2];
CREATE VIEW d.users_view AS SELECT DISTINCT user_id FROM d.events WHERE kind != 'bot';
CREATE VIEW d.vip ON CLUSTER main AS SELECT user_id FROM d.users_view WHERE user_id < 100;
CREATE TABLE d.sections (day Date, section String, n UInt64) ENGINE = SummingMergeTree ORDER BY (day, section);
CREATE MATERIALIZED VIEW d.sections_mv TO d.sections AS
SELECT toDate(ts) AS day, section(kind) AS section, count() AS n FROM d.events
WHERE user_id IN (SELECT user_id FROM d.vip) GROUP BY day, section;
CREATE ROLE IF NOT EXISTS reader, writer;
CREATE USER IF NOT EXISTS analyst IDENTIFIED WITH sha256_password BY 'x' DEFAULT ROLE reader;
GRANT ON CLUSTER main SELECT ON d.sections TO reader, analyst;
CREATE ROW POLICY tenant ON CLUSTER main ON d.events FOR SELECT USING kind = currentUser() TO reader;
CREATE SETTINGS PROFILE IF NOT EXISTS slow SETTINGS max_threads = 1 TO analyst;
CREATE QUOTA hourly FOR INTERVAL 1 hour MAX queries = 100 TO reader;
CREATE NAMED COLLECTION broker AS kafka_broker_list = 'k:9092';
"""


def test_statements_chmv_keeps_as_written(tmp_path):
    project = load(tmp_path, PRELUDE + FUNCTIONS_AND_VIEWS)
    kept = {(k.kind, k.name): k for k in project.kept}
    assert set(kept) == {
        (KeptKind.FUNCTION, "clean"),
        (KeptKind.FUNCTION, "section"),
        (KeptKind.VIEW, "d.users_view"),
        (KeptKind.VIEW, "d.vip"),
        (KeptKind.ROLE, "reader, writer"),
        (KeptKind.USER, "analyst"),
        (KeptKind.GRANT, "GRANT ON CLUSTER main SELECT ON d.sections TO reader, analyst"),
        (KeptKind.ROW_POLICY, "tenant ON d.events"),
        (KeptKind.SETTINGS_PROFILE, "slow"),
        (KeptKind.QUOTA, "hourly"),
        (KeptKind.NAMED_COLLECTION, "broker"),
    }
    clean = kept[(KeptKind.FUNCTION, "clean")]
    assert (
        clean.on_cluster == "main"
        and clean.statement[clean.cluster_span.start : clean.cluster_span.end] == " ON CLUSTER main"
    )
    assert kept[(KeptKind.FUNCTION, "section")].functions == ("splitByChar", "clean")
    vip = project.plain_views[ref("d.vip")]
    assert vip.reads == (ref("d.users_view"),) and vip.select_sql.startswith("SELECT user_id FROM d.users_view")
    assert kept[(KeptKind.ROLE, "reader, writer")].names == ("reader", "writer")
    grant = kept[(KeptKind.GRANT, "GRANT ON CLUSTER main SELECT ON d.sections TO reader, analyst")]
    assert grant.names == ("reader", "analyst") and grant.reads == (ref("d.sections"),)
    assert kept[(KeptKind.ROW_POLICY, "tenant ON d.events")].reads == (ref("d.events"),)
    assert project.views[ref("d.sections_mv")].sources[1].ref == ref("d.vip")  # an MV reads a plain view
    # the preflight builds a view over renamed copies of what it reads
    assert renamed_statement(vip, {ref("d.vip"): ref("s.vip"), ref("d.users_view"): ref("s.u")}, local=True) == (
        "CREATE VIEW `s`.`vip` AS SELECT user_id FROM `s`.`u` AS `users_view` WHERE user_id < 100"
    )


def test_lineage_through_plain_views_and_functions(tmp_path):
    project = load(tmp_path, PRELUDE + FUNCTIONS_AND_VIEWS)
    graph = LineageGraph(project)
    assert graph.kinds["d.vip"] == graph.kinds["d.users_view"] == "plain_view"
    assert graph.kinds["section"] == graph.kinds["clean"] == "function"
    assert graph.upstream["d.users_view"] == {"d.events"} and graph.upstream["d.vip"] == {"d.users_view"}
    assert graph.upstream["d.sections_mv"] == {"d.events", "d.vip", "section"}
    assert graph.upstream["section"] == {"clean"}
    assert graph.depth["d.sections"] == 1  # a view or a function is no MV hop
    order = [n for layer in graph.layers for n in layer]
    assert order.index("clean") < order.index("section") < order.index("d.sections_mv")
    assert order.index("d.users_view") < order.index("d.vip") < order.index("d.sections_mv")
    data = json.loads(graph.to_json())
    assert next(v for v in data["views"] if v["name"] == "d.sections_mv")["functions"] == ["section"]
    assert {f["name"] for f in data["functions"]} == {"clean", "section"}
    assert {"d.vip", "d.users_view"} <= {t["name"] for t in data["tables"] if t["kind"] == "plain_view"}
    assert len(data["kept"]) == len(project.kept)


def test_a_view_reading_what_is_defined_nowhere_is_reported(tmp_path):
    with pytest.raises(DDLError, match=r"view d.v reads d.ghost, which is defined nowhere"):
        load(tmp_path, PRELUDE + "CREATE VIEW d.v AS SELECT * FROM d.ghost")


def test_sqlglot_path_fixes():
    view = parse_statement(
        "CREATE MATERIALIZED VIEW d.mv TO d.t AS SELECT a, joinGet('d.scores', 'score', a) AS s "
        "FROM d.src FINAL WHERE k IN d.allowed"
    )
    assert isinstance(view, MaterializedView)
    assert view.trigger == ref("d.src") and [s.ref.fqn for s in view.sources] == ["d.src", "d.allowed"]
    assert view.dictionaries == (ref("d.scores"),)  # a Join table is looked up, like a dictionary
    table = parse_statement("CREATE TABLE d.n (a UInt8) ENGINE = Null")
    assert table.engine.name == "Null"
    copy = parse_statement("CREATE TABLE d.c ON CLUSTER x AS d.n ENGINE = Distributed(x, currentDatabase(), n, rand())")
    assert copy.as_table == ref("d.n") and copy.reads == (ref("d.n"),)
    assert copy.statement[copy.as_table_span.start : copy.as_table_span.end] == "d.n"
