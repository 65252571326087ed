"""The local twin: each stand-in of the fixture schemas, and what stays as it is."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chmv_assets.ddl.loader import load, twin_of
from chmv_assets.ddl.models import KeptKind, ObjectRef, Project, Table
from chmv_assets.ddl.parsing.project import load_project
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.twin import describe_stand_ins, engine_of, local_twin, null_stand_in_sql

SCHEMAS = Path(__file__).resolve().parents[2] / "fixtures" / "schemas"


def ref(fqn: str) -> ObjectRef:
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name)


@pytest.fixture(scope="module")
def clustered():
    return load(SCHEMAS / "clustered", twin=True).project


@pytest.fixture(scope="module")
def kafka():
    return load(SCHEMAS / "kafka_chain", twin=True).project


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_a_clustered_schema_runs_on_one_host(clustered):
    assert clustered.twin and local_twin(clustered) is clustered
    statements = [o.statement for o in (*clustered.tables.values(), *clustered.views.values(), *clustered.databases)]
    assert not any("ON CLUSTER" in s or "Replicated" in s for s in statements)
    engines = {r.fqn: t.engine.name for r, t in clustered.tables.items()}
    assert engines == {
        "metrics.samples_in": "Null",
        "metrics.samples_local": "MergeTree",
        "metrics.samples": "Buffer",
        "metrics.minute_local": "AggregatingMergeTree",
        "metrics.errors_daily_local": "SummingMergeTree",
        "metrics.minute": "Buffer",
        "metrics.errors_all": "Merge",
        "metrics_dist.hosts": "ReplacingMergeTree",
    }
    samples = clustered.tables[ref("metrics.samples_local")]
    assert samples.settings_map == (("index_granularity", "8192"),)  # the storage policy is dropped, the rest kept
    assert one_line(samples.ttl) == "toDateTime(ts) + INTERVAL 30 DAY DELETE"  # the move to a volume is dropped
    assert samples.partition_by.sql == "toDate(ts)" and samples.column("label_hash").default_kind == "MATERIALIZED"
    assert (
        "Buffer('metrics', 'samples_local', 1, 0, 0, 0, 0, 0, 0)" in clustered.tables[ref("metrics.samples")].statement
    )
    assert "Buffer('metrics', 'minute_local'" in clustered.tables[ref("metrics.minute")].statement
    assert {d.name: d.engine for d in clustered.databases} == {"metrics": "Atomic", "metrics_dist": "Atomic"}
    assert clustered.views[ref("metrics.minute_mv")].on_cluster is None


def test_each_stand_in_is_named_once(clustered):
    lines = describe_stand_ins(clustered)
    assert lines[0].startswith(f"local twin: the embedded engine runs {len(clustered.stand_ins)} stand-ins")
    assert "  ON CLUSTER ops dropped from 12 statements" in lines
    text = "\n".join(lines)
    assert "metrics.samples: Distributed(ops, metrics, samples_local, cityHash64(host)) → Buffer over " in text
    assert "ReplicatedReplacingMergeTree → ReplacingMergeTree" in text
    assert "SETTINGS storage_policy = 'hot_cold' → dropped" in text
    assert describe_stand_ins(load(SCHEMAS / "clustered").project) == []  # a server's project: nothing stands in


def test_a_stream_is_a_null_table_that_stays_a_stream_in_the_model(kafka):
    queue = kafka.tables[ref("shop.order_events_queue")]
    assert queue.engine.name == "Kafka" and kafka.is_stream(queue.ref)  # chmv still never reads it
    assert engine_of(queue.statement) == "Null" and "kafka_broker_list" not in queue.statement
    names = [c.name for c in queue.columns]
    assert names[:6] == ["order_id", "customer_id", "status", "amount_cents", "currency", "occurred_at"]
    assert {"_topic", "_offset", "_partition", "_timestamp", "_headers.name", "_raw_message", "_error"} <= set(names)
    files = kafka.tables[ref("shop.invoice_files")]
    assert files.engine.name == "S3Queue" and {"_file", "_path"} <= {c.name for c in files.columns}
    assert kafka.tables[ref("shop.fx_rates_remote")].engine.name == "MergeTree"
    assert "SOURCE(NULL())" in kafka.dictionaries[ref("shop.fx_rates")].statement
    (collection,) = kafka.kept
    assert collection.kind == KeptKind.NAMED_COLLECTION  # runs on the embedded engine as it is
    why = {s.object: s.why for s in kafka.stand_ins}
    assert (
        why["shop.order_events_queue"]
        == "insert into it to feed shop.order_events_consumer, shop.order_events_dead_letters_mv"
    )


def test_a_declared_virtual_column_is_not_added_twice():
    table = parse_statement("CREATE TABLE q (a UInt8, _topic String) ENGINE = Kafka SETTINGS kafka_broker_list = 'b'")
    assert isinstance(table, Table)
    sql = null_stand_in_sql(table, "`s`.`q`")
    assert (
        sql.startswith("CREATE TABLE `s`.`q` (a UInt8, _topic String, _key String MATERIALIZED ''")
        and sql.count("_topic") == 1
    )
    assert sql.endswith("ENGINE = Null")


def test_functions_views_and_access_control(tmp_path):
    root = tmp_path / "ddl"
    root.mkdir()
    (root / "a.sql").write_text(
        textwrap.dedent("""
        CREATE FUNCTION f ON CLUSTER c AS (x) -> x + 1;
        CREATE TABLE d.t ON CLUSTER c (a UInt8) ENGINE = ReplicatedMergeTree('/p/{shard}', '{replica}') ORDER BY a;
        CREATE VIEW d.v ON CLUSTER c AS SELECT f(a) AS b FROM d.t;
        CREATE ROLE r ON CLUSTER c;
        GRANT SELECT ON d.t TO r;
        CREATE DICTIONARY d.dict (a UInt8, b String) PRIMARY KEY a
            SOURCE(CLICKHOUSE(HOST 'other' PORT 9000 TABLE 't' DB 'd')) LIFETIME(60) LAYOUT(HASHED());
        """)
    )
    project = local_twin(load_project(root, default_database="d"))
    assert [(k.kind, k.name) for k in project.kept] == [(KeptKind.FUNCTION, "f"), (KeptKind.VIEW, "d.v")]
    function, view = project.kept
    assert function.statement == "CREATE FUNCTION f AS (x) -> x + 1" and function.cluster_span is None
    assert view.statement == "CREATE VIEW d.v AS SELECT f(a) AS b FROM d.t"
    assert view.statement[view.select_at :] == view.select_sql
    assert "SOURCE(CLICKHOUSE(TABLE 't' DB 'd'))" in project.dictionaries[ref("d.dict")].statement
    missing = {s.object: s.local for s in project.stand_ins if s.local == "not deployed"}
    assert missing == {"role r": "not deployed", "grant GRANT SELECT ON d.t TO r": "not deployed"}


def test_twin_of_a_loaded_project_is_made_once():
    loaded = load(SCHEMAS / "kafka_chain")
    assert twin_of(loaded) is twin_of(loaded) and twin_of(loaded).project.twin
    assert twin_of(twin_of(loaded)) is twin_of(loaded)


def test_databases_named_in_engine_arguments_and_dictionary_sources_are_renamed():
    from chmv_assets.ddl.twin import databases_renamed

    scratch = {"logs": "_s_logs", "d": "_s_d"}
    cases = {
        "CREATE TABLE x.m (a UInt8) ENGINE = Merge('logs', '^ev_')": "Merge('_s_logs', '^ev_')",
        "CREATE TABLE x.m (a UInt8) ENGINE = Merge(logs, '^ev_')": "Merge('_s_logs', '^ev_')",
        "CREATE TABLE x.m (a UInt8) ENGINE = Buffer(d, t, 1, 0, 0, 0, 0, 0, 0)": "Buffer('_s_d', t, 1,",
        "CREATE TABLE x.m (a UInt8) ENGINE = Distributed(c, 'd', t, rand())": "Distributed(c, '_s_d', t, rand())",
        "CREATE TABLE x.m (a UInt8) ENGINE = Dictionary('d.dd')": "Dictionary('_s_d.dd')",
        "CREATE DICTIONARY x.dd (a UInt8) PRIMARY KEY a SOURCE(CLICKHOUSE(TABLE 't' DB 'd')) LAYOUT(FLAT()) "
        "LIFETIME(0)": "SOURCE(CLICKHOUSE(TABLE 't' DB '_s_d'))",
        "CREATE TABLE x.m (a UInt8) ENGINE = Merge('other', '^ev_')": "Merge('other', '^ev_')",
    }
    for statement, expected in cases.items():
        assert expected in databases_renamed(statement, scratch), statement


def test_a_server_version_before_26_9_accepts_dimensions_outside_the_sorting_key():
    """ClickHouse 26.9 refuses an AggregatingMergeTree with plain columns outside its sorting key (a MergeTree
    setting: compatibility = '24.8' does not lift it, measured on chdb 26.9): the twin of a 24.8 server sets it."""
    table = parse_statement(
        "CREATE TABLE d.a (day Date, city String, n AggregateFunction(sum, UInt64)) ENGINE = "
        "ReplicatedAggregatingMergeTree('/p/{shard}', '{replica}') PARTITION BY toYYYYMM(day) ORDER BY day "
        "SETTINGS index_granularity = 8192, storage_policy = 'x' COMMENT 'c'",
        default_database="d",
    )
    view = parse_statement(
        "CREATE MATERIALIZED VIEW d.mv ENGINE = AggregatingMergeTree ORDER BY day AS SELECT day, any(city) AS city, "
        "sumState(toUInt64(1)) AS n FROM d.a GROUP BY day",
        default_database="d",
    )
    project = Project(ddl_dir=".", default_database="d", tables={table.ref: table}, views={view.ref: view})
    old = local_twin(project, server_version="24.8")
    assert one_line(old.tables[table.ref].statement).endswith(
        "ORDER BY day SETTINGS index_granularity = 8192, allow_dimensions_outside_sorting_key = 1 COMMENT 'c'"
    )
    assert "ORDER BY day SETTINGS allow_dimensions_outside_sorting_key = 1 AS SELECT" in old.views[view.ref].statement
    for same in (local_twin(project), local_twin(project, server_version="26.9")):
        assert "allow_dimensions" not in same.tables[table.ref].statement + same.views[view.ref].statement
