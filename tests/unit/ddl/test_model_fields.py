"""What later stages read from a table is derived from the parsed clauses at parse time, not from DDL text."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import ObjectRef, PartitionCall
from chmv_assets.ddl.parsing.project import load_project
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.partitioning import partition_scheme, window_at, windows_between
from chmv_assets.errors import DDLError


def table(ddl: str):
    return parse_statement(textwrap.dedent(ddl), default_database="d")


def test_order_by_columns_settings_and_engine_columns() -> None:
    t = table("""
        CREATE TABLE d.t (ts DateTime, `my col` UInt64, a UInt64, b UInt64, v Float64)
        ENGINE = ReplicatedSummingMergeTree('/p/{shard}', '{replica}', (v, `my col`))
        PARTITION BY toYYYYMM(ts)
        ORDER BY (toStartOfHour(ts), `my col`, a + 1)
        SETTINGS index_granularity = 8192, parts_to_delay_insert=7, storage_policy = 'hot and cold'
    """)
    assert t.order_by == "(toStartOfHour(ts), `my col`, a + 1)"  # verbatim, for execution
    assert t.order_by_columns == ("ts", "my col", "a")
    assert t.settings_map == (
        ("index_granularity", "8192"),
        ("parts_to_delay_insert", "7"),
        ("storage_policy", "hot and cold"),
    )
    assert t.setting("parts_to_delay_insert") == "7" and t.setting("parts_to_throw_insert") is None
    assert t.engine.argument_columns == ("v", "my col")
    assert t.partition_call == PartitionCall(function="toYYYYMM", column="ts")


def test_an_mv_select_keeps_its_order_by_and_settings_to_itself() -> None:
    view = table("""
        CREATE MATERIALIZED VIEW d.mv ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY kind
        SETTINGS index_granularity = 1024
        AS SELECT ts, kind FROM d.src ORDER BY ts SETTINGS max_threads = 2
    """)
    inner = view.inner_table
    assert inner.order_by_columns == ("kind",) and inner.settings_map == (("index_granularity", "1024"),)


def test_populate_is_found_by_token_not_by_word() -> None:
    view = table("""
        CREATE MATERIALIZED VIEW d.mv (`populate` UInt8, ts DateTime) ENGINE = MergeTree ORDER BY populate
        POPULATE AS SELECT 1 AS populate, ts FROM d.src
    """)
    assert view.populate and [c.name for c in view.inner_table.columns] == ["populate", "ts"]
    assert view.inner_table.order_by_columns == ("populate",)


@pytest.mark.parametrize(
    ("partition_by", "call", "grain", "column", "keys"),
    [
        ("toYYYYMM(ts)", ("toYYYYMM", "ts"), Grain.MONTH, "ts", ()),
        ("toYYYYMM(`event time`)", ("toYYYYMM", "event time"), Grain.MONTH, "event time", ()),
        ("toStartOfMonth(ts)", ("toStartOfMonth", "ts"), Grain.MONTH, "ts", ()),
        ("toYYYYMMDD(ts)", ("toYYYYMMDD", "ts"), Grain.DAY, "ts", ()),
        ("toDate(ts)", ("toDate", "ts"), Grain.DAY, "ts", ()),
        ("(toDate(ts))", ("toDate", "ts"), Grain.DAY, "ts", ()),
        ("toStartOfDay(ts)", ("toStartOfDay", "ts"), Grain.DAY, "ts", ()),
        ("toStartOfHour(ts)", ("toStartOfHour", "ts"), Grain.HOUR, "ts", ()),
        ("day", (None, "day"), Grain.DAY, "day", ()),
        ("d32", (None, "d32"), Grain.DAY, "d32", ()),
        ("toMonday(ts)", ("toMonday", "ts"), Grain.WEEK, "ts", ()),
        ("toYear(day)", ("toYear", "day"), Grain.YEAR, "day", ()),
        ("toStartOfInterval(ts, INTERVAL 6 HOUR)", None, Grain.SIX_HOURS, "ts", ()),
        ("intDiv(toUnixTimestamp(ts), 3600)", None, Grain.HOUR, "ts", ()),
        ("(toYYYYMM(ts), id % 4)", None, Grain.MONTH, "ts", ("id % 4",)),
        # No time window Dagster knows: partitioned by the values the server holds.
        ("ts", (None, "ts"), None, None, ("ts",)),
        ("toDate(ts, 'Asia/Tokyo')", None, None, None, ("toDate(ts, 'Asia/Tokyo')",)),
        ("toStartOfHour(ts, 'UTC')", None, None, None, ("toStartOfHour(ts, 'UTC')",)),
        ("toYYYYMM(ts) * 100", None, None, None, ("toYYYYMM(ts) * 100",)),
        ("cityHash64(id) % 8", None, None, None, ("cityHash64(id) % 8",)),
    ],
)
def test_partition_scheme_from_the_parsed_partition_by(partition_by, call, grain, column, keys) -> None:
    t = table(f"""
        CREATE TABLE d.t (ts DateTime, `event time` DateTime64(3), day Date, d32 Nullable(Date32), id UInt64)
        ENGINE = MergeTree PARTITION BY {partition_by} ORDER BY id
    """)
    assert t.partition_by.sql == partition_by
    assert t.partition_call == (PartitionCall(function=call[0], column=call[1]) if call else None)
    scheme = partition_scheme(t)
    assert (scheme.grain, scheme.column, scheme.keys) == (grain, column, keys)
    assert scheme.partitioned


def test_unpartitioned_tables_have_no_scheme_and_no_note() -> None:
    for clause in ("", "PARTITION BY tuple()"):
        t = table(f"CREATE TABLE d.t (ts DateTime) ENGINE = MergeTree {clause} ORDER BY ts")
        assert partition_scheme(t).grain is None and partition_scheme(t).note is None


def test_windows_use_dagster_keys() -> None:
    from datetime import datetime

    assert window_at(datetime(2026, 9, 1, 13), Grain.HOUR).key == "2026-09-01-13:00"
    months = windows_between("month", datetime(2026, 1, 1), datetime(2026, 11, 15), datetime(2027, 1, 2))
    assert [w.key for w in months] == ["2026-11-01", "2026-12-01", "2027-01-01"]
    assert months[-1].wall_end == datetime(2027, 2, 1)


def test_parse_statement_reads_a_server_statement_and_reports_problems(tmp_path: Path) -> None:
    view = parse_statement(
        'CREATE MATERIALIZED VIEW `my-db`.`mv ü` TO `my-db`.`it\'s "q"` (`ts` DateTime) '
        "AS SELECT ts FROM `my-db`.`my src`"
    )
    assert view.target == ObjectRef(database="my-db", name='it\'s "q"')
    assert view.trigger == ObjectRef(database="my-db", name="my src")
    with pytest.raises(DDLError, match="syntax error"):
        parse_statement("CREATE TABLE (")
    with pytest.raises(DDLError, match="expected one statement"):
        parse_statement("CREATE TABLE a (x UInt8) ENGINE = Log; CREATE TABLE b (x UInt8) ENGINE = Log")
    # The directory loader and parse_statement agree.
    (tmp_path / "a.sql").write_text(
        "CREATE TABLE d.t (ts DateTime) ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY ts"
    )
    loaded = load_project(tmp_path, default_database="d").tables[ObjectRef(database="d", name="t")]
    single = parse_statement((tmp_path / "a.sql").read_text(), default_database="d")
    assert loaded.model_dump(exclude={"location"}) == single.model_dump(exclude={"location"})


def test_every_column_of_a_wide_table_keeps_its_definition() -> None:
    definitions = [
        f"c{i} Map(String, Array(UInt{8 * 2 ** (i % 4)})) DEFAULT map() COMMENT 'c{i}, (x)'" for i in range(300)
    ]
    t = table(f"CREATE TABLE d.wide ({', '.join(definitions)}) ENGINE = MergeTree ORDER BY tuple()")
    assert [c.definition for c in t.columns] == definitions


def test_columns_keep_their_definition_verbatim_and_objects_their_name_spans() -> None:
    t = table("""
        CREATE TABLE IF NOT EXISTS d.`t x` (a UInt32 DEFAULT toStartOfHour(now()) COMMENT 'hi, (there)',
            `b` Array(Tuple(Int8, String)) CODEC(ZSTD(1)), INDEX i a TYPE minmax GRANULARITY 1)
        ENGINE = MergeTree ORDER BY a
    """)
    assert [c.definition for c in t.columns] == [
        "a UInt32 DEFAULT toStartOfHour(now()) COMMENT 'hi, (there)'",
        "`b` Array(Tuple(Int8, String)) CODEC(ZSTD(1))",
    ]
    assert t.statement[t.name_span.start : t.name_span.end] == "d.`t x`"
    view = table("CREATE MATERIALIZED VIEW mv TO d.target (`a` UInt32) AS SELECT a FROM src")
    assert view.statement[view.name_span.start : view.name_span.end] == "mv"
    assert view.statement[view.target_span.start : view.target_span.end] == "d.target"
    assert view.statement[view.select_offset :] == view.select_sql == "SELECT a FROM src"
    assert not view.or_replace
    assert table("CREATE OR REPLACE MATERIALIZED VIEW mv TO t AS SELECT a FROM src").or_replace


@pytest.mark.parametrize("engine", ["Kafka", "RabbitMQ", "NATS", "S3Queue", "FileLog"])
def test_stream_engines_are_known_as_streams(engine: str) -> None:
    assert table(f"CREATE TABLE d.q (ts DateTime, v UInt64) ENGINE = {engine} SETTINGS x = 1").engine.is_stream
    for plain in ("MergeTree ORDER BY ts", "Null", "ReplicatedMergeTree ORDER BY ts"):
        assert not table(f"CREATE TABLE d.t (ts DateTime) ENGINE = {plain}").engine.is_stream
