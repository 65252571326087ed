"""Parser: hand-written tricky DDL, table-driven, plus every example file."""

from __future__ import annotations

import gc
import textwrap
from pathlib import Path

import pytest
from sqlglot import exp

from chmv_assets.ddl.models import ObjectRef, SourceRole
from chmv_assets.ddl.parsing.project import load_project
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.select_facts import split_combinators
from chmv_assets.errors import DDLError

EXAMPLE_DDL = Path(__file__).resolve().parents[3] / "examples" / "ddl"

# Tables every source case can read (default database `d`).
PRELUDE = """
CREATE TABLE d.events (ts DateTime, user_id UInt64, kind String, v Float64,
    tags Nested(key String, value String), t Tuple(UInt8, String)) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.users (id UInt64, name String) ENGINE = MergeTree ORDER BY id;
CREATE TABLE d.blocked (id UInt64) ENGINE = MergeTree ORDER BY id;
CREATE TABLE other.more_events (ts DateTime, user_id UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.sink (ts DateTime, user_id UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE DICTIONARY d.user_dict (id UInt64, name String) PRIMARY KEY id
    SOURCE(CLICKHOUSE(TABLE 'users' DB 'd')) LAYOUT(HASHED()) LIFETIME(MIN 0 MAX 300);
"""


def load_ddl(tmp_path: Path, files: dict[str, str] | str, default_database: str = "d", external=()):
    """Write DDL files into a fresh directory and parse it."""
    root = tmp_path / "ddl"
    root.mkdir(exist_ok=True)
    for name, text in ({"a.sql": files} if isinstance(files, str) else files).items():
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return load_project(root, default_database=default_database, external=external)


def ref(fqn: str) -> ObjectRef:
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name)


T, W, U = SourceRole.TRIGGER, SourceRole.READ_WHOLE, SourceRole.UNION_BRANCH

# (id, SELECT of `d.mv TO d.sink`, expected {source: role}, expected trigger)
SOURCE_CASES = [
    ("from", "SELECT ts, user_id FROM d.events", {"d.events": T}, "d.events"),
    ("unqualified-default-db", "SELECT ts, user_id FROM events", {"d.events": T}, "d.events"),
    (
        "join-read-whole",
        "SELECT e.ts, u.id AS user_id FROM d.events AS e LEFT JOIN d.users AS u ON u.id = e.user_id",
        {"d.events": T, "d.users": W},
        "d.events",
    ),
    (
        "in-subquery",
        "SELECT ts, user_id FROM d.events WHERE user_id NOT IN (SELECT id FROM d.blocked)",
        {"d.events": T, "d.blocked": W},
        "d.events",
    ),
    (
        "scalar-subquery",
        "SELECT ts, (SELECT max(id) FROM d.users) AS user_id FROM d.events",
        {"d.events": T, "d.users": W},
        "d.events",
    ),
    (
        "union-all",
        "SELECT ts, user_id FROM d.events UNION ALL SELECT ts, user_id FROM other.more_events",
        {"d.events": T, "other.more_events": U},
        "d.events",
    ),
    (
        "cte-body-is-source-cte-name-is-not",
        "WITH known AS (SELECT id FROM d.users) SELECT ts, user_id FROM d.events WHERE user_id IN (SELECT id FROM known)",
        {"d.events": T, "d.users": W},
        "d.events",
    ),
    (
        "trigger-through-cte",
        "WITH e AS (SELECT * FROM d.events) SELECT ts, user_id FROM e",
        {"d.events": T},
        "d.events",
    ),
    (
        "derived-table-alias-not-source",
        "SELECT x.ts, x.user_id FROM (SELECT ts, user_id FROM d.events WHERE v > 0) AS x",
        {"d.events": T},
        "d.events",
    ),
    (
        "table-functions-not-sources",
        "SELECT e.ts, e.user_id FROM d.events AS e CROSS JOIN numbers(3) AS n "
        "WHERE e.kind IN (SELECT k FROM url('http://example.com/k.csv', CSV, 'k String'))",
        {"d.events": T},
        "d.events",
    ),
    (
        "array-join-nested-and-tuple-dots",
        "SELECT e.ts, e.user_id FROM d.events AS e ARRAY JOIN e.tags.key AS k WHERE e.t.1 > 0 AND k != ''",
        {"d.events": T},
        "d.events",
    ),
    (
        "comma-self-join-one-source",
        "SELECT a.ts, b.user_id FROM d.events a, d.events b WHERE a.user_id = b.user_id",
        {"d.events": T},
        "d.events",
    ),
    (
        "trigger-is-leftmost-not-first-mentioned",
        "SELECT e.ts, e.user_id FROM (SELECT * FROM d.events) AS e INNER JOIN d.users AS u ON u.id = e.user_id "
        "WHERE e.user_id IN (SELECT id FROM d.blocked)",
        {"d.events": T, "d.users": W, "d.blocked": W},
        "d.events",
    ),
    (
        "dictget-is-not-a-table-source",
        "SELECT ts, user_id FROM d.events WHERE dictHas('d.user_dict', user_id)",
        {"d.events": T},
        "d.events",
    ),
]


@pytest.mark.parametrize(
    ("select", "sources", "trigger"), [c[1:] for c in SOURCE_CASES], ids=[c[0] for c in SOURCE_CASES]
)
def test_sources_and_trigger(tmp_path, select, sources, trigger):
    project = load_ddl(tmp_path, f"{PRELUDE}\nCREATE MATERIALIZED VIEW d.mv TO d.sink AS {select}")
    view = project.views[ref("d.mv")]
    assert {s.ref.fqn: s.role for s in view.sources} == sources
    assert view.trigger == ref(trigger)
    assert view.select_sql == select  # verbatim, up to the end of the statement
    for use in view.sources:  # every span points at the table's name as written
        for span in use.spans:
            written = view.select_sql[span.start : span.end]
            assert written.replace("`", "").endswith(use.ref.name), written


JOIN_CASES = [
    ("plain-from", "SELECT ts, user_id FROM d.events", False, (), False),
    (
        "left-join",
        "SELECT e.ts, e.user_id FROM d.events e LEFT JOIN d.users u ON u.id = e.user_id",
        True,
        ("d.users",),
        False,
    ),
    (
        "comma-self-join",
        "SELECT a.ts, b.user_id FROM d.events a, d.events b WHERE a.user_id = b.user_id",
        True,
        ("d.events",),
        True,
    ),
    (
        "join-a-cte-reads-its-body",
        "WITH u AS (SELECT id FROM d.users) SELECT e.ts, e.user_id FROM d.events e INNER JOIN u ON u.id = e.user_id",
        True,
        ("d.users",),
        False,
    ),
    ("array-join-is-no-join", "SELECT e.ts, e.user_id FROM d.events e ARRAY JOIN e.tags.key AS k", False, (), False),
    (
        "scalar-subquery-on-trigger-is-no-self-join",
        "SELECT ts, (SELECT max(user_id) FROM d.events) AS user_id FROM d.events",
        False,
        (),
        False,
    ),
]


@pytest.mark.parametrize(
    ("select", "has_join", "joined", "self_join"), [c[1:] for c in JOIN_CASES], ids=[c[0] for c in JOIN_CASES]
)
def test_join_marking(tmp_path, select, has_join, joined, self_join):
    project = load_ddl(tmp_path, f"{PRELUDE}\nCREATE MATERIALIZED VIEW d.mv TO d.sink AS {select}")
    view = project.views[ref("d.mv")]
    assert (view.has_join, tuple(r.fqn for r in view.joined_tables), view.self_join) == (has_join, joined, self_join)


DICT_CASES = [
    ("dictGet-qualified", "dictGet('d.user_dict', 'name', user_id)", "d.user_dict"),
    ("dictGetOrDefault-unqualified", "dictGetOrDefault('user_dict', 'name', user_id, '')", "d.user_dict"),
    ("dictGetString", "dictGetString('d.user_dict', 'name', user_id)", "d.user_dict"),
    ("dictHas", "toString(dictHas('d.user_dict', user_id))", "d.user_dict"),
]


@pytest.mark.parametrize(("call", "dictionary"), [c[1:] for c in DICT_CASES], ids=[c[0] for c in DICT_CASES])
def test_dictionaries_used(tmp_path, call, dictionary):
    ddl = f"{PRELUDE}\nCREATE MATERIALIZED VIEW d.mv TO d.sink AS SELECT ts, {call} AS user_id FROM d.events"
    project = load_ddl(tmp_path, ddl)
    assert project.views[ref("d.mv")].dictionaries == (ref(dictionary),)
    assert project.dictionaries[ref("d.user_dict")].source_table == ref("d.users")


def test_dictionary_source_without_db_uses_default_database(tmp_path):
    project = load_ddl(
        tmp_path,
        """
        CREATE TABLE users (id UInt64, name String) ENGINE = MergeTree ORDER BY id;
        CREATE DICTIONARY names (id UInt64, name String) PRIMARY KEY id
            SOURCE(CLICKHOUSE(TABLE 'users')) LAYOUT(FLAT()) LIFETIME(300);
        CREATE DICTIONARY by_query (id UInt64, name String) PRIMARY KEY id
            SOURCE(CLICKHOUSE(QUERY 'SELECT id, name FROM users')) LAYOUT(FLAT()) LIFETIME(300)
    """,
        default_database="app",
    )
    assert project.dictionaries[ref("app.names")].source_table == ref("app.users")
    assert project.dictionaries[ref("app.names")].primary_key == "id"
    assert project.dictionaries[ref("app.by_query")].source_table is None


AGG_CASES = [
    ("state", "sumState", "sum", ("State",)),
    ("merge", "uniqMerge", "uniq", ("Merge",)),
    ("merge-state", "uniqMergeState", "uniq", ("Merge", "State")),
    ("if-state", "countIfState", "count", ("If", "State")),
    ("simple-state", "maxSimpleState", "max", ("SimpleState",)),
    ("plain", "argMax", "argMax", ()),
    ("not-aggregate", "toStartOfHour", None, None),
    ("not-aggregate-suffix", "toStartOfMonth", None, None),
]


@pytest.mark.parametrize(("name", "base", "combinators"), [c[1:] for c in AGG_CASES], ids=[c[0] for c in AGG_CASES])
def test_split_combinators(name, base, combinators):
    assert split_combinators(name) == (None if base is None else (base, combinators))


def test_group_by_aggregates_outputs_and_verbatim_select(tmp_path):
    project = load_ddl(
        tmp_path,
        """
        CREATE TABLE d.api (timestamp DateTime, endpoint String, user_id UInt64, ms UInt32) ENGINE = MergeTree ORDER BY timestamp;
        CREATE TABLE d.stats (hour DateTime, endpoint String, n AggregateFunction(sum, UInt64),
            u AggregateFunction(uniq, UInt64), p AggregateFunction(quantile(0.99), UInt32), c UInt64)
            ENGINE = AggregatingMergeTree PARTITION BY toDate(hour) ORDER BY (endpoint, hour);
        CREATE MATERIALIZED VIEW d.stats_mv TO d.stats AS
        SELECT
            toStartOfHour(timestamp) AS hour,  -- stays toStartOfHour
            endpoint,
            sumState(toUInt64(1)) AS n,
            uniqState(user_id) AS u,
            quantileState(0.99)(ms) AS p,
            count() AS c
        FROM d.api
        GROUP BY endpoint, hour
    """,
    )
    view = project.views[ref("d.stats_mv")]
    assert view.group_by == ("endpoint", "hour")
    assert [(a.output, a.function, a.base, a.combinators) for a in view.aggregates] == [
        ("n", "sumState", "sum", ("State",)),
        ("u", "uniqState", "uniq", ("State",)),
        ("p", "quantileState", "quantile", ("State",)),
        ("c", "count", "count", ()),
    ]
    assert [o.name for o in view.output_columns] == ["hour", "endpoint", "n", "u", "p", "c"]
    assert [o.is_aggregate for o in view.output_columns] == [False, False, True, True, True, True]
    assert view.output("hour").truncation == ("timestamp", "hour")
    assert view.output("endpoint").truncation == ("endpoint", None)
    assert view.output("u").source_columns == (("d.api", "user_id"),)
    assert "toStartOfHour(timestamp) AS hour,  -- stays toStartOfHour" in view.select_sql
    assert "quantileState(0.99)(ms)" in view.select_sql
    assert view.select_sql.startswith("SELECT\n    toStartOfHour") and view.select_sql.endswith(
        "GROUP BY endpoint, hour"
    )


def test_aggregate_in_scalar_subquery_does_not_make_the_output_an_aggregate(tmp_path):
    ddl = f"{PRELUDE}\nCREATE MATERIALIZED VIEW d.mv TO d.sink AS SELECT ts, (SELECT max(id) FROM d.users) AS user_id FROM d.events"
    view = load_ddl(tmp_path, ddl).views[ref("d.mv")]
    assert view.aggregates == () and not view.output("user_id").is_aggregate


def test_files_statements_and_comments(tmp_path):
    project = load_ddl(
        tmp_path,
        {
            "01_first.sql": """\
            /* A block comment
               spanning lines; with a ; inside */
            CREATE DATABASE IF NOT EXISTS d ENGINE = Atomic;
            -- The fact table; a semicolon in a comment.
            CREATE TABLE d.a (x UInt64, s String DEFAULT 'a;b') ENGINE = MergeTree ORDER BY x; CREATE TABLE d.b (x UInt64)
            ENGINE = MergeTree ORDER BY x;
            """,
            "02_second.sql": """\
            CREATE MATERIALIZED VIEW d.ab TO d.b AS
            SELECT x FROM d.a -- trailing comment, no semicolon after the last statement
            """,
        },
    )
    assert [db.name for db in project.databases] == ["d"]
    assert set(project.tables) == {ref("d.a"), ref("d.b")}
    a = project.tables[ref("d.a")]
    assert a.description == "The fact table; a semicolon in a comment."
    assert (a.location.line, a.location.column) == (5, 1)
    assert a.column("s").default_kind == "DEFAULT" and a.column("s").default_expression == "'a;b'"
    line5 = (tmp_path / "ddl" / "01_first.sql").read_text().splitlines()[4]
    b = project.tables[ref("d.b")].location
    assert (b.line, b.column) == (5, line5.index("CREATE TABLE d.b") + 1)
    view = project.views[ref("d.ab")]
    assert view.location.file.endswith("02_second.sql") and view.trigger == ref("d.a")
    assert view.select_sql.startswith("SELECT x FROM d.a")


def test_table_properties(tmp_path):
    project = load_ddl(
        tmp_path,
        """
        CREATE TABLE IF NOT EXISTS d.src ON CLUSTER main
        (
            ts DateTime64(3, 'UTC') COMMENT 'event time',
            id UInt64,
            amount Decimal(18, 4) DEFAULT 0,
            day Date MATERIALIZED toDate(ts),
            tags Array(LowCardinality(String))
        )
        ENGINE = ReplicatedReplacingMergeTree('/clickhouse/{shard}/src', '{replica}', ts)
        PARTITION BY (toYYYYMM(ts), id % 4)
        ORDER BY (id, ts)
        TTL toDateTime(ts) + INTERVAL 30 DAY DELETE
        SETTINGS index_granularity = 8192
        COMMENT 'the source'
    """,
    )
    table = project.tables[ref("d.src")]
    assert [(c.name, c.type) for c in table.columns] == [
        ("ts", "DateTime64(3, 'UTC')"),
        ("id", "UInt64"),
        ("amount", "Decimal(18, 4)"),
        ("day", "Date"),
        ("tags", "Array(LowCardinality(String))"),
    ]
    assert table.column("ts").comment == "event time"
    assert (table.column("day").default_kind, table.column("day").default_expression) == ("MATERIALIZED", "toDate(ts)")
    assert table.engine.name == "ReplicatedReplacingMergeTree" and table.engine.family == "ReplacingMergeTree"
    assert table.engine.arguments == ("'/clickhouse/{shard}/src'", "'{replica}'", "ts")
    assert table.partition_by.sql == "(toYYYYMM(ts), id % 4)"
    assert table.partition_by.substitute({"ts": "x"}) == "(toYYYYMM((x)), id % 4)"
    assert table.order_by == "(id, ts)"
    assert table.ttl == "toDateTime(ts) + INTERVAL 30 DAY DELETE"
    assert table.settings == "index_granularity = 8192"
    assert table.on_cluster == "main"
    assert table.description == "the source"
    # The cluster and the Keeper path, for statements built beside it (a new version needs a path of its own).
    assert (table.engine.keeper_path, table.engine.replica_name, table.engine.family_arguments) == (
        "/clickhouse/{shard}/src",
        "{replica}",
        ("ts",),
    )
    assert table.statement[table.cluster_span.start : table.cluster_span.end] == " ON CLUSTER main"
    assert table.statement[table.keeper_path_span.start : table.keeper_path_span.end] == "'/clickhouse/{shard}/src'"


@pytest.mark.parametrize(
    ("engine", "keeper_path", "family_arguments"),
    [
        ("ReplicatedAggregatingMergeTree", None, ()),
        ("ReplicatedReplacingMergeTree(ver)", None, ("ver",)),
        ("ReplicatedMergeTree('/p/{uuid}/{shard}', '{replica}')", "/p/{uuid}/{shard}", ()),
        ("ReplicatedMergeTree(concat('/p/', 'x'), '{replica}')", None, ("CONCAT('/p/', 'x')", "'{replica}'")),
        ("ReplacingMergeTree('/not/a/path', ver)", None, ("'/not/a/path'", "ver")),
    ],
    ids=["default-path", "default-path-own-parameter", "written-path", "computed-path", "not-replicated"],
)
def test_keeper_path_only_when_written_as_the_first_two_string_arguments(engine, keeper_path, family_arguments):
    table = parse_statement(
        f"CREATE TABLE d.t ON CLUSTER `{{cluster}}` (k UInt8, ver UInt64) ENGINE = {engine} ORDER BY k",
        default_database="d",
    )
    assert (table.engine.keeper_path, table.engine.family_arguments) == (keeper_path, family_arguments)
    assert (table.keeper_path_span is None) == (keeper_path is None)
    assert table.on_cluster == "{cluster}"
    assert table.statement[table.cluster_span.start : table.cluster_span.end] == " ON CLUSTER `{cluster}`"


def test_on_cluster_is_the_statements_own_clause_not_a_join_condition():
    view = parse_statement(
        "CREATE MATERIALIZED VIEW d.mv TO d.t AS SELECT a FROM d.s JOIN d.u ON cluster = 1", default_database="d"
    )
    assert view.on_cluster is None and view.cluster_span is None
    view = parse_statement(
        "CREATE MATERIALIZED VIEW d.mv ON CLUSTER c TO d.t AS SELECT a FROM d.s", default_database="d"
    )
    assert view.statement[view.cluster_span.start : view.cluster_span.end] == " ON CLUSTER c"


def test_materialized_view_kinds(tmp_path):
    project = load_ddl(
        tmp_path,
        f"""{PRELUDE}
        CREATE TABLE d.snap (kind String, c UInt64) ENGINE = MergeTree ORDER BY kind;
        -- Insert-triggered, explicit columns, ON CLUSTER.
        CREATE MATERIALIZED VIEW IF NOT EXISTS d.to_mv ON CLUSTER main TO d.sink (ts DateTime, user_id UInt64)
        AS SELECT ts, user_id FROM d.events;
        -- Inner table.
        CREATE MATERIALIZED VIEW d.inner_mv ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (kind, day)
        AS SELECT toDate(ts) AS day, kind, count() AS c FROM d.events GROUP BY day, kind;
        -- POPULATE: sqlglot falls back to exp.Command.
        CREATE MATERIALIZED VIEW d.pop_mv ENGINE = MergeTree ORDER BY ts POPULATE AS SELECT ts, user_id FROM d.events;
        CREATE MATERIALIZED VIEW d.refresh_mv REFRESH EVERY 1 HOUR TO d.snap AS SELECT kind, count() AS c FROM d.events GROUP BY kind;
        CREATE MATERIALIZED VIEW d.after_mv REFRESH AFTER 30 MINUTE APPEND TO d.snap AS SELECT kind, 1 AS c FROM d.events
    """,
    )
    views = project.views
    to_mv = views[ref("d.to_mv")]
    assert (to_mv.target, to_mv.inner_table, to_mv.refreshable, to_mv.on_cluster) == (
        ref("d.sink"),
        None,
        False,
        "main",
    )
    assert to_mv.description == "Insert-triggered, explicit columns, ON CLUSTER."
    assert to_mv.select_sql == "SELECT ts, user_id FROM d.events"

    inner = views[ref("d.inner_mv")]
    assert inner.target is None and inner.writes_to == ref("d.inner_mv")
    assert inner.inner_table.engine.name == "SummingMergeTree"
    assert inner.inner_table.partition_by.sql == "toYYYYMM(day)" and inner.inner_table.order_by == "(kind, day)"
    assert [c.name for c in inner.inner_table.columns] == ["day", "kind", "c"]
    assert project.table(ref("d.inner_mv")) is inner.inner_table
    assert ref("d.inner_mv") in project.targets

    pop = views[ref("d.pop_mv")]
    assert pop.populate and pop.trigger == ref("d.events") and pop.select_sql == "SELECT ts, user_id FROM d.events"
    assert pop.inner_table.order_by == "ts"

    refresh = views[ref("d.refresh_mv")]
    assert refresh.refreshable and refresh.refresh_schedule == "EVERY 1 HOUR" and refresh.target == ref("d.snap")
    after = views[ref("d.after_mv")]
    assert after.refreshable and after.refresh_schedule.startswith("AFTER 30 MINUTE")
    assert {v.ref.fqn for v in project.views_into(ref("d.snap"))} == {"d.refresh_mv", "d.after_mv"}


def test_quoted_identifiers_keep_exact_names(tmp_path):
    project = load_ddl(
        tmp_path,
        """
        CREATE TABLE `page-views` (ts DateTime, `user id` UInt64) ENGINE = MergeTree ORDER BY ts;
        CREATE TABLE "Daily Views" (day Date, c UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY day;
        CREATE MATERIALIZED VIEW `my-db`.`views-mv` TO "Daily Views" AS
        SELECT toDate(ts) AS day, count() AS c FROM `page-views` WHERE `user id` > 0 GROUP BY day
    """,
        external=("my-db.unused",),
    )
    assert set(project.tables) == {ref("d.page-views"), ref("d.Daily Views")}
    assert project.tables[ref("d.page-views")].column("user id").type == "UInt64"
    view = project.views[ref("my-db.views-mv")]
    assert view.target == ref("d.Daily Views") and view.trigger == ref("d.page-views")
    span = view.sources[0].spans[0]
    assert view.select_sql[span.start : span.end] == "`page-views`"


def test_same_definition_twice_is_fine(tmp_path):
    table = "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;"
    project = load_ddl(tmp_path, {"1.sql": table, "2.sql": table.replace(" ORDER", "\n  order")})
    assert list(project.tables) == [ref("d.a")]


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLE_DDL.glob("*.sql")))
def test_every_example_file_parses(name, example):
    """Each example file parses, and contributes its objects to the example project."""
    text = (EXAMPLE_DDL / name).read_text()
    objects = [
        *example.project.tables.values(),
        *example.project.views.values(),
        *example.project.dictionaries.values(),
    ]
    from_file = [o for o in objects if o.location.file.endswith(name)]
    assert (
        len(from_file) == text.count("CREATE TABLE") + text.count("CREATE MATERIALIZED VIEW")
        or name == "00_databases.sql"
    )


EXAMPLE_LINEAGE = {
    # view: (target, trigger, sources, group_by, aggregate functions)
    "hourly_endpoint_stats_mv": (
        "hourly_endpoint_stats",
        "api_requests",
        ("api_requests",),
        ("endpoint", "hour"),
        ("sumState", "uniqState", "quantileState"),
    ),
    "enriched_requests_mv": ("requests_enriched", "raw_requests", ("raw_requests",), (), ()),
    "entity_latest_mv": ("entity_latest", "raw_webhooks", ("raw_webhooks",), (), ()),
    "errors_mv": ("error_events", "all_events", ("all_events",), (), ()),
    "metrics_mv": ("metric_events", "all_events", ("all_events",), (), ()),
    "audit_mv": ("audit_log", "all_events", ("all_events",), (), ()),
    "counter_daily_mv": (
        "counter_daily",
        "counter",
        ("counter",),
        ("device", "day"),
        ("count", "maxState", "minState", "avgState"),
    ),
    "mv_events_agg": (
        "events_agg",
        "raw_events",
        ("raw_events",),
        ("event_date", "event_hour", "event_type", "user_id"),
        ("count", "sum"),
    ),
    "mv_events_daily": (
        "events_daily",
        "events_agg",
        ("events_agg",),
        ("event_date", "event_type"),
        ("sumState", "uniqState"),
    ),
    "mv_events_weekly": (
        "events_weekly",
        "events_daily",
        ("events_daily",),
        ("week", "event_type"),
        ("sumMergeState", "uniqMergeState"),
    ),
}


@pytest.mark.parametrize("view_name", list(EXAMPLE_LINEAGE))
def test_example_lineage(example, view_name):
    target, trigger, sources, group_by, aggregates = EXAMPLE_LINEAGE[view_name]
    view = example.project.views[ObjectRef(database="analytics", name=view_name)]
    assert view.target == ObjectRef(database="analytics", name=target)
    assert view.trigger == ObjectRef(database="analytics", name=trigger)
    assert tuple(r.name for r in view.source_refs) == sources
    assert view.group_by == group_by
    assert tuple(a.function for a in view.aggregates) == aggregates
    assert not view.refreshable and not view.has_join and view.dictionaries == ()
    assert view.statement.endswith(view.select_sql)


def test_example_details(example):
    project = example.project
    assert set(project.views) == {ObjectRef(database="analytics", name=n) for n in EXAMPLE_LINEAGE}
    weekly = project.views[ref("analytics.mv_events_weekly")]
    assert [a.combinators for a in weekly.aggregates] == [("Merge", "State"), ("Merge", "State")]
    assert weekly.output("week").truncation == ("event_date", "week")
    hourly = project.views[ref("analytics.hourly_endpoint_stats_mv")]
    assert "toStartOfHour(timestamp) AS hour" in hourly.select_sql
    counter = project.tables[ref("analytics.counter")]
    assert counter.column("when").default_expression == "now()"
    assert project.tables[ref("analytics.error_events")].ttl == "timestamp + INTERVAL 5 YEAR"
    assert project.tables[ref("analytics.audit_log")].ttl is None
    assert project.tables[ref("analytics.entity_latest")].engine.arguments == ("updated_at",)
    assert project.tables[ref("analytics.hourly_endpoint_stats")].description == (
        "Hourly request count, unique users and p99 latency per endpoint."
    )


# --- errors -------------------------------------------------------------------------------------------

ERROR_CASES = [
    (
        "syntax-error",
        {
            "a.sql": "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;\n\nCREATE TABLE d.b (x UInt64 ENGINE = MergeTree ORDER BY x;"
        },
        r"syntax error",
        ("a.sql", 3, 28),
    ),
    (
        "unknown-statement",
        {"a.sql": "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;\n  SELEC oops FROM;"},
        r"syntax error|unsupported",
        ("a.sql", 2, None),
    ),
    (
        "to-target-nowhere",
        {
            "a.sql": "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;\nCREATE MATERIALIZED VIEW d.mv TO d.nowhere AS SELECT x FROM d.a;"
        },
        r"d\.mv writes TO d\.nowhere, which is defined nowhere",
        ("a.sql", 2, 1),
    ),
    (
        "source-nowhere",
        {
            "a.sql": "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;\nCREATE MATERIALIZED VIEW d.mv TO d.a AS\n  SELECT x FROM d.ghost;"
        },
        r"d\.mv reads d\.ghost, which is defined nowhere.*\n.*external = \[\"d\.ghost\"\]",
        ("a.sql", 3, 17),
    ),
    (
        "dictionary-nowhere",
        {
            "a.sql": "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;\nCREATE TABLE d.b (x UInt64) ENGINE = MergeTree ORDER BY x;\nCREATE MATERIALIZED VIEW d.mv TO d.b AS SELECT dictGet('d.nodict', 'x', x) AS x FROM d.a;"
        },
        r"uses dictionary d\.nodict, which is defined nowhere",
        ("a.sql", 3, 1),
    ),
    (
        "defined-twice-differently",
        {
            "a.sql": "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;",
            "b.sql": "-- again\nCREATE TABLE d.a (x UInt32) ENGINE = MergeTree ORDER BY x;",
        },
        r"d\.a is defined again with a different definition \(first at .*a\.sql:1:1\)",
        ("b.sql", 2, 1),
    ),
]


@pytest.mark.parametrize(("files", "pattern", "where"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_errors_name_file_line_column_and_fix(tmp_path, files, pattern, where):
    with pytest.raises(DDLError, match=pattern) as info:
        load_ddl(tmp_path, files)
    assert len(info.value.problems) == 1, str(info.value)
    problem = info.value.problems[0]
    file, line, column = where
    assert Path(problem.file).name == file
    assert line is None or problem.line == line, problem
    assert column is None or problem.column == column, problem
    assert problem.hint, "every problem says what to do"
    assert "nothing was deployed" in str(info.value)


def test_cycle_names_the_whole_cycle(tmp_path):
    project = load_ddl(
        tmp_path,
        """
        CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE TABLE d.b (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE TABLE d.c (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE MATERIALIZED VIEW d.ab TO d.b AS SELECT x FROM d.a;
        CREATE MATERIALIZED VIEW d.bc TO d.c AS SELECT x FROM d.b;
        CREATE MATERIALIZED VIEW d.ca TO d.a AS SELECT x FROM d.c;
    """,
    )
    (loop,) = project.loops
    problem = loop.problem()
    assert (Path(problem.file).name, problem.line, problem.column) == ("a.sql", 5, 1) and problem.hint
    message = problem.message
    assert message.endswith("(a trigger loop: d.ab at a.sql:5, d.bc at a.sql:6, d.ca at a.sql:7)"), message
    cycle = message.removeprefix("cycle in the MV graph: ").partition(" (")[0].split(" -> ")
    assert cycle[0] == cycle[-1] and len(cycle) == 7
    assert set(cycle) == {"d.a", "d.b", "d.c", "d.ab", "d.bc", "d.ca"}
    for before, after in zip(cycle, cycle[1:], strict=False):  # consecutive nodes are edges of the graph
        assert (before, after) in {
            ("d.a", "d.ab"),
            ("d.ab", "d.b"),
            ("d.b", "d.bc"),
            ("d.bc", "d.c"),
            ("d.c", "d.ca"),
            ("d.ca", "d.a"),
        }


def test_all_problems_reported_together(tmp_path):
    files = {
        "1.sql": "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;\nCREATE TABLE d.b (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE TABLE d.broken (x UInt64 ENGINE = MergeTree ORDER BY x;\n"
        "CREATE MATERIALIZED VIEW d.ab TO d.b AS SELECT x FROM d.a;\nCREATE MATERIALIZED VIEW d.ba TO d.a AS SELECT x FROM d.b;\n"
        "CREATE MATERIALIZED VIEW d.m1 TO d.nowhere AS SELECT x FROM d.a;\nCREATE MATERIALIZED VIEW d.m2 TO d.b AS SELECT x FROM d.ghost",
        "2.sql": "CREATE TABLE d.a (x String) ENGINE = MergeTree ORDER BY x",
    }
    with pytest.raises(DDLError) as info:
        load_ddl(tmp_path, files)
    messages = [p.message for p in info.value.problems]
    assert len(messages) == 5, messages  # a trigger loop too: with other problems, every problem at once
    for pattern in ("syntax error", "defined again", "TO d.nowhere", "reads d.ghost", "cycle"):
        assert any(pattern in m for m in messages), (pattern, messages)
    assert str(info.value).startswith("5 problems in the DDL directory")


def test_external_sources_are_accepted(tmp_path):
    ddl = "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;\nCREATE MATERIALIZED VIEW d.mv TO d.a AS SELECT x FROM ext.feed"
    with pytest.raises(DDLError, match="reads ext.feed"):
        load_ddl(tmp_path, ddl)
    project = load_ddl(tmp_path, ddl, external=("ext.feed",))
    assert project.external == (ref("ext.feed"),)
    assert project.views[ref("d.mv")].trigger == ref("ext.feed")


def test_missing_directory_and_empty_directory(tmp_path):
    with pytest.raises(DDLError, match="DDL directory not found"):
        load_project(tmp_path / "nope")
    with pytest.raises(DDLError, match=r"no \.sql files found"):
        load_project(tmp_path)


def test_parse_trees_are_freed_without_the_cyclic_garbage_collector(tmp_path):
    """A parse tree is a reference cycle (each node points to its parent): the parser unlinks it after use,
    so a large directory does not leave the collector thousands of trees to traverse."""
    views = "".join(
        f"CREATE TABLE d.t{i} (ts DateTime, x UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;\n"
        f"CREATE MATERIALIZED VIEW d.mv{i} TO d.t{i} AS SELECT ts, sum(x) AS x FROM d.events GROUP BY ts;\n"
        for i in range(40)
    )
    load_ddl(tmp_path, PRELUDE + views)  # every lazy import and cache of the parser in place
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable is kept in gc.garbage, to be looked at
    try:
        load_ddl(tmp_path, PRELUDE + views)
        gc.collect()
        # only parse-tree nodes count: other threads of a test worker (a Spark session's, say) make garbage too
        nodes = sum(isinstance(o, exp.Expression) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert nodes < 4 * 80  # a few nodes per statement sqlglot itself detaches (2 here); a tree is ~30 nodes


# MVs as SHOW CREATE prints them (ClickHouse 26.9): a security clause on every refreshable MV and every MV with one.
SHOW_CREATE_CASES = [
    (
        "definer-columns",
        "CREATE MATERIALIZED VIEW d.mv TO d.sink (`ts` DateTime, `user_id` UInt64) DEFINER = default "
        "SQL SECURITY DEFINER AS SELECT ts, user_id FROM d.events",
        False,
        None,
    ),
    (
        "definer-no-columns",
        "CREATE MATERIALIZED VIEW d.mv TO d.sink DEFINER = CURRENT_USER SQL SECURITY DEFINER AS SELECT ts, user_id "
        "FROM d.events",
        False,
        None,
    ),
    (
        "sql-security-none",
        "CREATE MATERIALIZED VIEW d.mv TO d.sink SQL SECURITY NONE AS SELECT * FROM d.events",
        False,
        None,
    ),
    (
        "refresh-append",
        "CREATE MATERIALIZED VIEW d.mv REFRESH EVERY 1 HOUR APPEND TO d.sink (`ts` DateTime, `user_id` UInt64) "
        "DEFINER = default SQL SECURITY DEFINER AS SELECT ts, user_id FROM d.events",
        True,
        "EVERY 1 HOUR APPEND",
    ),
    (
        "refresh-depends-on-comment",
        "CREATE MATERIALIZED VIEW d.mv REFRESH EVERY 1 HOUR DEPENDS ON d.other TO d.sink (`ts` DateTime, `user_id` "
        "UInt64) DEFINER = default SQL SECURITY DEFINER COMMENT 'hi' AS SELECT ts, user_id FROM d.events",
        True,
        "EVERY 1 HOUR DEPENDS ON d.other",
    ),
    (
        "refresh-settings-randomize",
        "CREATE MATERIALIZED VIEW d.mv REFRESH AFTER 1 HOUR RANDOMIZE FOR 10 MINUTE SETTINGS refresh_retries = 3 "
        "TO d.sink (`ts` DateTime, `user_id` UInt64) DEFINER = default SQL SECURITY DEFINER AS SELECT ts, user_id "
        "FROM d.events",
        True,
        "AFTER 1 HOUR RANDOMIZE FOR 10 MINUTE SETTINGS refresh_retries = 3",
    ),
    (
        "refresh-empty",
        "CREATE MATERIALIZED VIEW d.mv REFRESH EVERY 1 DAY OFFSET 2 HOUR APPEND TO d.sink EMPTY DEFINER = default "
        "SQL SECURITY DEFINER AS SELECT ts, user_id FROM d.events",
        True,
        "EVERY 1 DAY OFFSET 2 HOUR APPEND",
    ),
    (
        "inner-engine-populate-definer",
        "CREATE MATERIALIZED VIEW d.mv ENGINE = MergeTree ORDER BY ts POPULATE DEFINER = default SQL SECURITY DEFINER "
        "AS SELECT ts, user_id FROM d.events",
        False,
        None,
    ),
    (
        "server-parser-definer",  # a ternary in a lambda: ClickHouse's parser reads the SELECT
        "CREATE MATERIALIZED VIEW d.mv TO d.sink DEFINER = default SQL SECURITY DEFINER AS SELECT ts, "
        "arrayMap(x -> x > 0 ? 1 : 0, [user_id])[1] AS user_id FROM d.events",
        False,
        None,
    ),
]


@pytest.mark.parametrize(
    ("sql", "refreshable", "schedule"), [c[1:] for c in SHOW_CREATE_CASES], ids=[c[0] for c in SHOW_CREATE_CASES]
)
def test_show_create_clauses_are_read(sql, refreshable, schedule):
    view = parse_statement(sql, default_database="d")
    assert view.ref == ref("d.mv") and view.trigger == ref("d.events")
    assert (view.refreshable, view.refresh_schedule) == (refreshable, schedule)
    assert view.statement == sql  # deployed as written, the security clause included


def test_reads_of_the_own_target_or_downstream_are_not_cycles(tmp_path):
    """Dedup (NOT IN its own target) and feedback (a JOIN of a table downstream): an insert there never fires the MV."""
    project = load_ddl(
        tmp_path,
        """
        CREATE TABLE d.src (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
        CREATE TABLE d.dedup (ts DateTime, k UInt64) ENGINE = ReplacingMergeTree ORDER BY k;
        CREATE MATERIALIZED VIEW d.dedup_mv TO d.dedup AS
            SELECT ts, k FROM d.src WHERE k NOT IN (SELECT k FROM d.dedup);
        CREATE TABLE d.agg (k UInt64, n UInt64) ENGINE = SummingMergeTree ORDER BY k;
        CREATE MATERIALIZED VIEW d.agg_mv TO d.agg AS
            SELECT s.k AS k, count() AS n FROM d.src AS s LEFT JOIN d.down AS w ON w.k = s.k GROUP BY s.k;
        CREATE TABLE d.down (k UInt64, n UInt64) ENGINE = MergeTree ORDER BY k;
        CREATE MATERIALIZED VIEW d.down_mv TO d.down AS SELECT k, n FROM d.agg;
        """,
    )
    from chmv_assets.ddl.lineage import LineageGraph

    graph = LineageGraph(project)
    assert graph.feedback == {("d.dedup", "d.dedup_mv"), ("d.down", "d.agg_mv")}
    assert graph.find_cycle() is None
    views = {v["name"]: v for v in graph.to_dict()["views"]}
    assert views["d.agg_mv"]["feedback_reads"] == ["d.down"] and views["d.agg_mv"]["sources"] == ["d.src", "d.down"]
    assert "-.->|reads|" in graph.to_mermaid() and 'style=dashed, label="reads"' in graph.to_dot()


LOOP_DDL = """
CREATE TABLE d.src (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.ok (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.ok_mv TO d.ok AS SELECT ts, k FROM d.src WHERE k IN (SELECT k FROM d.x);
CREATE TABLE d.x (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.y (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.x_to_y TO d.y AS SELECT ts, k FROM d.x;
CREATE MATERIALIZED VIEW d.y_to_x TO d.x AS SELECT ts, k + 1 AS k FROM d.y;
CREATE TABLE d.z (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW d.y_to_z TO d.z AS SELECT ts, k FROM d.y;
"""


def test_a_trigger_loop_is_left_out_alone_and_named(tmp_path):
    """The loop is one problem naming its MVs at file:line; everything else loads (the MV reading the loop's table
    through IN, the MV downstream of it)."""
    project = load_ddl(tmp_path, LOOP_DDL)
    assert set(project.views) == {ref("d.ok_mv"), ref("d.y_to_z")}
    (loop,) = project.loops
    assert loop.refs == (ref("d.x_to_y"), ref("d.y_to_x")) and set(project.loop_views) == set(loop.refs)
    problem = loop.problem()
    assert problem.message == (
        "cycle in the MV graph: d.x -> d.x_to_y -> d.y -> d.y_to_x -> d.x "
        "(a trigger loop: d.x_to_y at a.sql:7, d.y_to_x at a.sql:8)"
    )
    assert (problem.line, "TOO_DEEP_RECURSION" in problem.hint) == (7, True)
    assert set(project.targets) == {ref("d.ok"), ref("d.z")}  # the loop's targets are nobody's target now


def test_a_trigger_loop_with_other_problems_is_one_of_them(tmp_path):
    with pytest.raises(DDLError) as info:
        load_ddl(tmp_path, LOOP_DDL + "CREATE MATERIALIZED VIEW d.bad TO d.nowhere AS SELECT ts, k FROM d.src;\n")
    messages = [p.message for p in info.value.problems]
    assert len(messages) == 2 and messages[1].startswith("cycle in the MV graph: d.x -> d.x_to_y"), messages


def test_every_mv_of_a_tangled_loop_is_left_out(tmp_path):
    """Two MVs from a to b and one back: each is on a loop (the strongly connected part), all three are left out."""
    project = load_ddl(
        tmp_path,
        """
        CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE TABLE d.b (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE MATERIALIZED VIEW d.ab1 TO d.b AS SELECT x FROM d.a;
        CREATE MATERIALIZED VIEW d.ab2 TO d.b AS SELECT x + 1 AS x FROM d.a;
        CREATE MATERIALIZED VIEW d.ba TO d.a AS SELECT x FROM d.b WHERE x < 10;
        CREATE MATERIALIZED VIEW d.self ENGINE = MergeTree ORDER BY x AS SELECT x FROM d.self_src;
        CREATE TABLE d.self_src (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE MATERIALIZED VIEW d.self_loop TO d.self_src AS SELECT x FROM d.self_src;
        """,
    )
    assert set(project.views) == {ref("d.self")}
    first, second = project.loops
    assert first.refs == (ref("d.ab1"), ref("d.ab2"), ref("d.ba"))
    assert first.cycle == ("d.a", "d.ab1", "d.b", "d.ba", "d.a")
    assert second.refs == (ref("d.self_loop"),) and second.cycle == ("d.self_src", "d.self_loop", "d.self_src")


def test_system_tables_and_a_select_without_from_need_no_external(tmp_path):
    project = load_ddl(
        tmp_path,
        """
        CREATE DATABASE d ENGINE = Atomic;
        CREATE TABLE d.src (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
        CREATE TABLE d.dst (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
        CREATE MATERIALIZED VIEW d.no_from REFRESH EVERY 1 HOUR APPEND TO d.dst AS
            SELECT now() AS ts, arrayMap(x -> x > 0 ? 1 : 0, [1])[1] AS k;
        CREATE MATERIALIZED VIEW d.catalog REFRESH EVERY 1 HOUR APPEND TO d.dst AS
            SELECT now() AS ts, count() AS k FROM system.tables;
        CREATE MATERIALIZED VIEW d.numbers REFRESH EVERY 1 HOUR APPEND TO d.dst AS
            SELECT now() AS ts, number AS k FROM numbers(10);
        CREATE MATERIALIZED VIEW d.joined TO d.dst AS
            SELECT s.ts, s.k FROM d.src AS s LEFT JOIN system.one AS o ON 1 = 1
            WHERE s.k IN (SELECT number FROM system.numbers LIMIT 3);
        """,
    )
    sources = {v.ref.name: [s.fqn for s in v.source_refs] for v in project.views.values()}
    assert sources == {
        "no_from": [],
        "catalog": ["system.tables"],
        "numbers": [],
        "joined": ["d.src", "system.one", "system.numbers"],
    }
    from chmv_assets.ddl.lineage import LineageGraph

    assert LineageGraph(project).kinds["system.tables"] == "external"


def test_depends_on_is_read_as_the_server_resolves_it(tmp_path):
    """``DEPENDS ON`` names refreshable MVs: unqualified against the default database (the server's current one),
    several at once; one defined nowhere is a problem (the server would never refresh the MV)."""
    ddl = """
        CREATE TABLE d.t (ts DateTime) ENGINE = MergeTree ORDER BY ts;
        CREATE MATERIALIZED VIEW e.a REFRESH EVERY 1 HOUR TO d.t AS SELECT now() AS ts;
        CREATE MATERIALIZED VIEW d.b REFRESH EVERY 1 HOUR TO d.t AS SELECT now() AS ts;
        CREATE MATERIALIZED VIEW e.c REFRESH EVERY 1 HOUR DEPENDS ON e.a, b APPEND TO d.t AS SELECT now() AS ts;
        """
    project = load_ddl(tmp_path, ddl)
    assert project.views[ref("e.c")].depends_on == (ref("e.a"), ref("d.b"))
    assert project.views[ref("e.c")].refresh_schedule == "EVERY 1 HOUR DEPENDS ON e.a, b APPEND"
    assert project.views[ref("d.b")].depends_on == ()
    with pytest.raises(DDLError) as info:
        load_ddl(tmp_path, ddl.replace("e.a, b", "e.a, e.ghost"))
    (problem,) = info.value.problems
    assert problem.message.startswith("e.c DEPENDS ON e.ghost, which is defined nowhere in the DDL directory")
    assert (problem.line, "MissingDependencies" in problem.message, "external" in problem.hint) == (5, True, True)
