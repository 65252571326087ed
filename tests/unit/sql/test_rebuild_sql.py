"""rebuild_sql: the MV's own SELECT over a window, staged rows or a cutoff; partition expressions; shadows."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import PartitionScheme, partition_scheme, window_at, window_for_partition_key
from chmv_assets.sql.rebuild_sql import (
    create_shadow_sql,
    insert_sql,
    partition_expression,
    partition_filter,
    partition_tuple,
    range_select,
    run_of_shadow,
    select_with_source,
    shadow_ref,
    shadows_pattern,
    source_range_predicate,
    source_relation,
    span_holds_all_sql,
    span_of,
    staged_relation,
    swap_sql,
    swaps_sql,
    view_select,
)

from support.ddl import load_ddl, ref

D = datetime

# Tables every select_with_source case can read (default database `d`).
PRELUDE = """
CREATE TABLE d.events (ts DateTime, user_id UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.sink (ts DateTime, user_id UInt64) ENGINE = MergeTree ORDER BY ts;
"""
D_TOML = 'default_database = "d"'


def test_select_with_source_replaces_only_the_block_position(tmp_path):
    """A self-join's other side and a subquery on the trigger read the whole table, as in the live MV."""
    select = (
        "SELECT a.ts, b.user_id FROM d.events a, d.events b WHERE a.user_id = b.user_id "
        "AND a.ts > (SELECT min(ts) FROM d.events)"
    )
    project = load_ddl(
        tmp_path / "self", f"{PRELUDE}\nCREATE MATERIALIZED VIEW d.mv TO d.sink AS {select}", toml=D_TOML
    ).project
    view = project.views[ref("d.mv")]
    assert select_with_source(view, ref("d.events"), "(SELECT 1)") == (
        "SELECT a.ts, b.user_id FROM (SELECT 1) a, d.events b WHERE a.user_id = b.user_id "
        "AND a.ts > (SELECT min(ts) FROM d.events)"
    )
    unaliased = load_ddl(
        tmp_path / "union",
        f"{PRELUDE}\nCREATE MATERIALIZED VIEW d.mv TO d.sink AS "
        "SELECT events.ts, user_id FROM d.events UNION ALL SELECT ts, user_id FROM d.events",
        toml=D_TOML,
    ).project
    assert select_with_source(unaliased.views[ref("d.mv")], ref("d.events"), "(SELECT 1)") == (
        "SELECT events.ts, user_id FROM (SELECT 1) AS `events` UNION ALL SELECT ts, user_id FROM (SELECT 1) AS `events`"
    )


def test_select_with_source_of_a_table_the_view_does_not_read_is_the_select(example):
    view = example.project.views[ref("analytics.errors_mv")]
    assert select_with_source(view, ref("analytics.raw_events"), "(SELECT 1)") == view.select_sql


# --- the example project -------------------------------------------------------------------------------------------


def parts(loaded, target: str, start: datetime):
    project = loaded.project
    table = project.table(ref(target))
    views = project.views_into(ref(target))
    scheme = partition_scheme(table, views)
    return project, table, views[0], scheme, window_at(start, scheme.grain)


@pytest.mark.parametrize(
    ("target", "start", "expected"),
    [
        ("analytics.hourly_endpoint_stats", D(2026, 9, 1), "toDate((toDateTime('2026-09-01 00:00:00', 'UTC')))"),
        ("analytics.error_events", D(2026, 9, 30), "toYYYYMMDD((toDateTime('2026-09-30 00:00:00', 'UTC')))"),
        ("analytics.metric_events", D(2026, 2, 1), "toStartOfMonth((toDateTime('2026-02-01 00:00:00', 'UTC')))"),
        ("analytics.events_agg", D(2026, 9, 1), "toYYYYMM((CAST('2026-09-01' AS Date)))"),
        ("analytics.events_daily", D(2028, 2, 29), "toYYYYMMDD((CAST('2028-02-29' AS Date)))"),
        ("analytics.counter_daily", D(2026, 12, 1), "toYYYYMM((toDateTime('2026-12-01 00:00:00', 'UTC')))"),
    ],
    ids=[
        "toDate-of-DateTime",
        "toYYYYMMDD-of-DateTime",
        "toStartOfMonth",
        "toYYYYMM-of-Date",
        "toYYYYMMDD-of-Date-leap-day",
        "quoted-when-source-december",
    ],
)
def test_partition_expression(example, target, start, expected):
    _project, table, _view, scheme, window = parts(example, target, start)
    assert partition_expression(table, scheme, window, zone="UTC") == expected


@pytest.mark.parametrize(
    ("target", "start", "expected"),
    [
        (
            "analytics.error_events",
            D(2026, 9, 1),
            "`timestamp` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND `timestamp` < toDateTime('2026-09-02 00:00:00', 'UTC')",
        ),
        (
            "analytics.hourly_endpoint_stats",
            D(2026, 9, 1),
            "`timestamp` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND `timestamp` < toDateTime('2026-09-02 00:00:00', 'UTC') "
            "+ INTERVAL 1 HOUR",
        ),
        (
            "analytics.counter_daily",
            D(2026, 9, 1),
            "`when` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND `when` < toDateTime('2026-10-01 00:00:00', 'UTC') + INTERVAL 1 DAY",
        ),
        (
            "analytics.events_daily",
            D(2026, 9, 1),
            "`event_date` >= CAST('2026-09-01' AS Date) AND `event_date` < CAST('2026-09-02' AS Date)",
        ),
        (
            "analytics.events_weekly",
            D(2026, 9, 1),
            "`event_date` >= CAST('2026-09-01' AS Date) AND `event_date` < CAST('2026-10-01' AS Date) + INTERVAL 1 WEEK",
        ),
    ],
    ids=[
        "bare-column",
        "toStartOfHour-into-daily",
        "toStartOfDay-into-monthly-quoted-keyword",
        "bare-Date-column",
        "toMonday-spans-past-the-month",
    ],
)
def test_source_range_predicate(example, target, start, expected):
    project, _table, view, scheme, window = parts(example, target, start)
    assert source_range_predicate(view, project, scheme, window, zone="UTC") == expected


UNDERIVABLE = """
CREATE TABLE d.src (ts DateTime, k String, v UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.latest (seen Date, k String) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(seen) ORDER BY k;
CREATE MATERIALIZED VIEW d.latest_mv TO d.latest AS SELECT addDays(toDate(ts), 1) AS seen, k FROM d.src;
CREATE TABLE d.const (day Date, k String) ENGINE = MergeTree PARTITION BY day ORDER BY k;
CREATE MATERIALIZED VIEW d.const_mv TO d.const AS SELECT today() AS day, k FROM d.src;
"""


@pytest.mark.parametrize("target", ["d.latest", "d.const"], ids=["non-monotone-expression", "no-source-column"])
def test_source_range_predicate_none_when_underivable(tmp_path, target):
    loaded = load_ddl(tmp_path, UNDERIVABLE, toml=D_TOML)
    project, _table, view, scheme, window = parts(loaded, target, D(2026, 9, 1))
    assert scheme.grain is not None
    assert source_range_predicate(view, project, scheme, window, zone="UTC") is None


def test_source_range_predicate_none_without_a_partition_column(example):
    view = example.project.views[ref("analytics.entity_latest_mv")]
    window = window_at(D(2026, 9, 1), "day")
    assert source_range_predicate(view, example.project, PartitionScheme(grain=None), window, zone="UTC") is None


def test_view_select_filters_the_trigger_to_the_window_and_the_output_to_the_partition(example):
    project, table, view, scheme, window = parts(example, "analytics.error_events", D(2026, 9, 1))
    assert view_select(view, project, table, scheme, window, zone="UTC") == (
        "SELECT `timestamp`, `level`, `payload` FROM (SELECT timestamp, level, payload FROM "
        "(SELECT * FROM `analytics`.`all_events` WHERE (`timestamp` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND "
        "`timestamp` < toDateTime('2026-09-02 00:00:00', 'UTC'))) AS `all_events` WHERE level = 'error') "
        "WHERE (toYYYYMMDD(timestamp)) = (toYYYYMMDD((toDateTime('2026-09-01 00:00:00', 'UTC'))))"
    )


def test_view_select_with_trigger_where_and_window(example):
    project, table, view, scheme, window = parts(example, "analytics.error_events", D(2026, 9, 1))
    sql = view_select(
        view,
        project,
        table,
        scheme,
        window,
        trigger_where="`timestamp` > toDateTime('2026-09-01 12:00:00', 'UTC')",
        zone="UTC",
    )
    assert (
        "FROM (SELECT * FROM `analytics`.`all_events` WHERE (`timestamp` > toDateTime('2026-09-01 12:00:00', 'UTC')) AND "
        "(`timestamp` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND `timestamp` < toDateTime('2026-09-02 00:00:00', 'UTC'))) "
        "AS `all_events` WHERE level = 'error'"
    ) in sql


def test_view_select_of_a_whole_unpartitioned_target_is_the_select_itself(example):
    project, table = example.project, example.project.table(ref("analytics.entity_latest"))
    view = project.views[ref("analytics.entity_latest_mv")]
    scheme = PartitionScheme(grain=None)
    assert view_select(view, project, table, scheme, None, zone="UTC") == (
        f"SELECT `entity_id`, `payload`, `updated_at` FROM ({view.select_sql})"
    )


def test_view_select_reads_the_trigger_relation_instead_of_the_table(example):
    project, table, view, scheme, window = parts(example, "analytics.events_agg", D(2026, 9, 1))
    sql = view_select(
        view, project, table, scheme, window, trigger_relation="file('/staging/p=1/*.parquet', Parquet)", zone="UTC"
    )
    assert (
        "FROM (SELECT * FROM file('/staging/p=1/*.parquet', Parquet) WHERE (`timestamp` >= "
        "toDateTime('2026-09-01 00:00:00', 'UTC') AND `timestamp` < toDateTime('2026-10-01 00:00:00', 'UTC') + INTERVAL 1 DAY)) "
        "AS `raw_events`\nGROUP BY"
    ) in sql
    assert "analytics.raw_events" not in sql and "`analytics`.`raw_events`" not in sql
    assert sql.endswith("WHERE (toYYYYMM(event_date)) = (toYYYYMM((CAST('2026-09-01' AS Date))))")


def test_view_select_trigger_relation_without_window_or_filter(example):
    project = example.project
    view = project.views[ref("analytics.entity_latest_mv")]
    sql = view_select(
        view,
        project,
        project.table(ref("analytics.entity_latest")),
        PartitionScheme(grain=None),
        None,
        trigger_relation="(SELECT * FROM staged)",
        zone="UTC",
    )
    assert sql == (
        "SELECT `entity_id`, `payload`, `updated_at` FROM (SELECT entity_id, payload, updated_at\n"
        "FROM (SELECT * FROM (SELECT * FROM staged)) AS `raw_webhooks`)"
    )


def test_range_select_of_one_window_is_view_select(example):
    project, table, view, scheme, window = parts(example, "analytics.events_agg", D(2026, 9, 1))
    assert range_select(view, project, table, scheme, [window], zone="UTC") == view_select(
        view, project, table, scheme, window, zone="UTC"
    )


def test_range_select_reads_the_span_once_and_keeps_each_windows_partition(example):
    project, table, view, scheme, first = parts(example, "analytics.error_events", D(2026, 9, 1))
    last = window_at(D(2026, 9, 3), scheme.grain)  # not adjacent: 09-02 is read but not kept
    assert range_select(view, project, table, scheme, [first, last], zone="UTC") == (
        "SELECT `timestamp`, `level`, `payload` FROM (SELECT timestamp, level, payload FROM "
        "(SELECT * FROM `analytics`.`all_events` WHERE (`timestamp` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND "
        "`timestamp` < toDateTime('2026-09-04 00:00:00', 'UTC'))) AS `all_events` WHERE level = 'error') "
        "WHERE (toYYYYMMDD(timestamp)) = (toYYYYMMDD((toDateTime('2026-09-01 00:00:00', 'UTC')))) "
        "OR (toYYYYMMDD(timestamp)) = (toYYYYMMDD((toDateTime('2026-09-03 00:00:00', 'UTC'))))"
    )


def test_range_select_without_the_output_filter(example):
    project, table, view, scheme, first = parts(example, "analytics.error_events", D(2026, 9, 1))
    sql = range_select(
        view, project, table, scheme, [first, window_at(D(2026, 9, 2), scheme.grain)], only_windows=False, zone="UTC"
    )
    assert sql.endswith("AS `all_events` WHERE level = 'error')") and "toYYYYMMDD" not in sql
    assert "`timestamp` < toDateTime('2026-09-03 00:00:00', 'UTC')" in sql


def test_range_select_reads_the_trigger_relation(example):
    project, table, view, scheme, first = parts(example, "analytics.events_agg", D(2026, 8, 1))
    sql = range_select(
        view,
        project,
        table,
        scheme,
        [first, window_at(D(2026, 9, 1), scheme.grain)],
        trigger_relation="`analytics`.`raw_events` FINAL",
        zone="UTC",
    )
    assert (
        "FROM (SELECT * FROM `analytics`.`raw_events` FINAL WHERE (`timestamp` >= toDateTime('2026-08-01 00:00:00', 'UTC') "
        "AND `timestamp` < toDateTime('2026-10-01 00:00:00', 'UTC') + INTERVAL 1 DAY)) AS `raw_events`"
    ) in sql


def test_range_select_unpruned_reads_every_trigger_row(example):
    project, table, view, scheme, first = parts(example, "analytics.error_events", D(2026, 9, 1))
    sql = range_select(view, project, table, scheme, [first], only_windows=False, prune=False, zone="UTC")
    assert sql == f"SELECT `timestamp`, `level`, `payload` FROM ({view.select_sql})"  # the MV's SELECT, verbatim


def test_span_holds_all_sql_reads_the_triggers_partition_column_bounds(example):
    project, _table, view, scheme, first = parts(example, "analytics.error_events", D(2026, 9, 1))
    span = span_of([first, window_at(D(2026, 9, 3), scheme.grain)])
    assert (span.wall_start, span.wall_end) == (D(2026, 9, 1), D(2026, 9, 4))
    # all_events is PARTITION BY toYYYYMM(timestamp): the server answers min/max from each part's metadata
    assert span_holds_all_sql(view, project, scheme, span, zone="UTC") == (
        "SELECT count() > 0 AND min(`timestamp`) >= toDateTime('2026-09-01 00:00:00', 'UTC') AND max(`timestamp`) < "
        "toDateTime('2026-09-04 00:00:00', 'UTC') FROM `analytics`.`all_events`"
    )


def test_span_holds_all_sql_none_where_metadata_cannot_answer(tmp_path):
    project = load_ddl(
        tmp_path,
        PRELUDE
        + """
CREATE TABLE d.by_user (ts DateTime, user_id UInt64) ENGINE = MergeTree PARTITION BY user_id % 4 ORDER BY ts;
CREATE TABLE d.daily (day Date, n UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY day;
CREATE MATERIALIZED VIEW d.daily_mv TO d.daily AS SELECT toDate(ts) AS day, count() AS n FROM d.by_user GROUP BY day;
""",
        toml=D_TOML,
    ).project
    view = project.views[ObjectRef(database="d", name="daily_mv")]
    table = project.table(view.writes_to)
    scheme = partition_scheme(table, [view])
    span = window_at(D(2026, 9, 1), scheme.grain)
    assert (
        span_holds_all_sql(view, project, scheme, span, zone="UTC") is None
    )  # the trigger's PARTITION BY is not its time


def test_range_select_needs_windows_of_a_partitioned_target(example):
    project = example.project
    view = project.views[ref("analytics.entity_latest_mv")]
    with pytest.raises(ValueError, match="time windows of a target partitioned by time"):
        range_select(
            view, project, project.table(ref("analytics.entity_latest")), PartitionScheme(grain=None), [], zone="UTC"
        )


def test_source_relation(example):
    project, source = example.project, ref("analytics.all_events")
    assert source_relation(project, source) == "(SELECT * FROM `analytics`.`all_events`)"
    assert source_relation(project, source, where="level = 'x'") == (
        "(SELECT * FROM `analytics`.`all_events` WHERE level = 'x')"
    )
    assert source_relation(project, source, relation="file('f', Parquet)", where="1") == (
        "(SELECT * FROM file('f', Parquet) WHERE 1)"
    )


def test_insert_sql(example):
    view = example.project.views[ref("analytics.errors_mv")]
    shadow = ObjectRef(database="analytics", name="shadow")
    assert insert_sql(shadow, view, "SELECT 1") == (
        "INSERT INTO `analytics`.`shadow` (`timestamp`, `level`, `payload`) SELECT 1"
    )


def test_shadow_ref_is_deterministic_and_distinct_per_partition():
    target = ref("analytics.events_daily")
    keys = [None, "2026-09-01", "2026-09-02", "2026-10-01", "2026-09-01-13:00", "2026-09-01-14:00"]
    shadows = [shadow_ref(target, key) for key in keys]
    assert shadows == [shadow_ref(target, key) for key in keys]
    assert len(set(shadows)) == len(keys)
    assert all(s.database == "analytics" and s.name != target.name for s in shadows)
    assert shadow_ref(ref("analytics.events_agg"), "2026-09-01") not in shadows


# --- shadows of replicated tables ----------------------------------------------------------------------------------

SHADOW_DDL = """
CREATE TABLE d.src (ts DateTime, k String, ver UInt64, sign Int8, v UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.plain (ts DateTime, k String) ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY k;
CREATE TABLE d.paths (ts DateTime, k String, ver UInt64)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/d/paths', '{replica}', ver)
PARTITION BY toYYYYMMDD(ts) ORDER BY (k, ts) PRIMARY KEY k SETTINGS index_granularity = 1024;
CREATE TABLE d.bare (ts DateTime, k String) ENGINE = ReplicatedMergeTree ORDER BY k;
CREATE TABLE d.defaults (ts DateTime, k String, ver UInt64) ENGINE = ReplicatedReplacingMergeTree(ver) ORDER BY k;
CREATE TABLE d.collapsing (ts DateTime, k String, sign Int8)
ENGINE = ReplicatedCollapsingMergeTree(sign) PARTITION BY toDate(ts) ORDER BY k;
CREATE TABLE d.summing (ts DateTime, k String, v UInt64)
ENGINE = ReplicatedSummingMergeTree('/p/{shard}', '{replica}', (v)) ORDER BY k TTL ts + INTERVAL 1 YEAR;
CREATE TABLE d.uuid_path (ts DateTime, k String)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}') ORDER BY k;
"""


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("plain", ""),
        (
            "paths",
            " ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/d/paths__shadow', '{replica}', ver) "
            "PARTITION BY toYYYYMMDD(ts) ORDER BY (k, ts) PRIMARY KEY k SETTINGS index_granularity = 1024",
        ),
        ("bare", " ENGINE = MergeTree() ORDER BY k"),
        ("defaults", " ENGINE = ReplacingMergeTree(ver) ORDER BY k"),
        ("collapsing", " ENGINE = CollapsingMergeTree(sign) PARTITION BY toDate(ts) ORDER BY k"),
        (
            "summing",
            " ENGINE = ReplicatedSummingMergeTree('/p/{shard}__shadow', '{replica}', (v)) ORDER BY k "
            "TTL ts + INTERVAL 1 YEAR",
        ),
        ("uuid_path", " ENGINE = MergeTree() ORDER BY k"),
    ],
    ids=[
        "not-replicated",
        "own-keeper-path-keeps-version-and-settings",
        "default-path-plain-family",
        "default-path-keeps-version",
        "default-path-keeps-sign",
        "own-keeper-path-keeps-columns-to-sum-and-ttl",
        "uuid-path-plain-family",
    ],
)
def test_create_shadow_sql(tmp_path, table, expected):
    """A replicated target's shadow never registers under the target's Keeper path: its own path, or no path."""
    project = load_ddl(tmp_path, SHADOW_DDL, toml=D_TOML).project
    live = ref(f"d.{table}")
    shadow = ObjectRef(database="d", name="shadow")
    model = project.table(live)
    sql = create_shadow_sql(shadow, live, model)
    assert sql == f"CREATE TABLE `d`.`shadow` AS `d`.`{table}`{expected}"
    if model.engine.keeper_path is not None:
        assert f"'{model.engine.keeper_path}'" not in sql
    assert "ON CLUSTER" not in sql


# --- staged rows ---------------------------------------------------------------------------------------------------


def test_staged_relation_without_cutoff_is_the_lake_alone():
    sql = staged_relation(
        ref("analytics.api_requests"), "file('/s/*.parquet', Parquet)", ["timestamp", "endpoint"], "timestamp", None
    )
    assert sql == "(SELECT `timestamp`, `endpoint` FROM file('/s/*.parquet', Parquet))"


def test_staged_relation_with_cutoff_unites_lake_and_newer_source_rows():
    sql = staged_relation(
        ref("analytics.api_requests"),
        "file('/s/*.parquet', Parquet)",
        ["timestamp", "endpoint"],
        "timestamp",
        D(2026, 9, 1, 12, 30, 5, 250),
    )
    assert sql == (
        "(SELECT `timestamp`, `endpoint` FROM file('/s/*.parquet', Parquet) UNION ALL "
        "SELECT `timestamp`, `endpoint` FROM `analytics`.`api_requests` "
        "WHERE `timestamp` > toDateTime64('2026-09-01 12:30:05.000250', 6, 'UTC'))"
    )


# --- names that need quoting are never spliced raw -----------------------------------------------------------------

ODD_DDL = """
CREATE TABLE `my-db`.`raw events` (`event time` DateTime, `user``id` UInt64, "kind" String,
    day Date MATERIALIZED toDate(`event time`), note String ALIAS concat(kind, '!'))
ENGINE = MergeTree PARTITION BY toYYYYMM(`event time`) ORDER BY `event time`;
CREATE TABLE `my-db`.`it's "q"` (`hour slot` DateTime, `user``id` UInt64, n UInt64)
ENGINE = SummingMergeTree PARTITION BY toStartOfDay(`hour slot`) ORDER BY (`user``id`, `hour slot`);
CREATE MATERIALIZED VIEW `my-db`.`mv; drop` TO `my-db`.`it's "q"` AS
SELECT toStartOfHour(`event time`) AS `hour slot`, `user``id`, count() AS n
FROM `my-db`.`raw events` GROUP BY `hour slot`, `user``id`;
"""
SOURCE, TARGET = ObjectRef(database="my-db", name="raw events"), ObjectRef(database="my-db", name='it\'s "q"')


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    return load_ddl(tmp_path_factory.mktemp("odd"), ODD_DDL, toml=D_TOML)


def test_odd_names_source_relation_lists_materialized_and_alias_columns(odd):
    assert source_relation(odd.project, SOURCE) == "(SELECT *, `day`, `note` FROM `my-db`.`raw events`)"


def test_odd_names_view_select(odd):
    project = odd.project
    table, view = project.table(TARGET), project.views_into(TARGET)[0]
    scheme = partition_scheme(table, (view,))
    assert scheme == PartitionScheme(grain="day", column="hour slot")
    window = window_at(D(2026, 9, 1), "day")
    predicate = (
        "`event time` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND "
        "`event time` < toDateTime('2026-09-02 00:00:00', 'UTC') + INTERVAL 1 HOUR"
    )
    assert source_range_predicate(view, project, scheme, window, zone="UTC") == predicate
    assert view_select(view, project, table, scheme, window, zone="UTC") == (
        r"SELECT `hour slot`, `user\`id`, `n` FROM (SELECT toStartOfHour(`event time`) AS `hour slot`, `user``id`, "
        f"count() AS n\nFROM (SELECT *, `day`, `note` FROM `my-db`.`raw events` WHERE ({predicate})) AS `raw events` "
        "GROUP BY `hour slot`, `user``id`) "
        "WHERE (toStartOfDay(`hour slot`)) = (toStartOfDay((toDateTime('2026-09-01 00:00:00', 'UTC'))))"
    )


def test_odd_names_shadow_insert_and_staging(odd):
    view = odd.project.views_into(TARGET)[0]
    shadow = shadow_ref(TARGET, "2026-09-01")
    assert shadow.database == "my-db"
    shadow_sql = f"`my-db`.`{shadow.name}`"
    assert insert_sql(shadow, view, "SELECT 1") == rf"INSERT INTO {shadow_sql} (`hour slot`, `user\`id`, `n`) SELECT 1"
    assert create_shadow_sql(shadow, TARGET, odd.project.table(TARGET)) == (
        rf"CREATE TABLE {shadow_sql} AS `my-db`.`it\'s " + '"q"`'
    )
    assert staged_relation(SOURCE, "file('x', Parquet)", ["event time", "user`id"], "event time", D(2026, 9, 1)) == (
        r"(SELECT `event time`, `user\`id` FROM file('x', Parquet) UNION ALL SELECT `event time`, `user\`id` "
        r"FROM `my-db`.`raw events` WHERE `event time` > toDateTime64('2026-09-01 00:00:00.000000', 6, 'UTC'))"
    )


def test_odd_names_shadows_are_plain_identifiers_distinct_per_partition(odd):
    shadows = {shadow_ref(TARGET, key) for key in (None, "2026-09-01", "2026-09-02")}
    assert len(shadows) == 3
    assert all("'" not in s.name and '"' not in s.name and " " not in s.name for s in shadows)


def test_swaps_sql_swaps_every_partition_in_one_alter_in_order():
    live, shadow = ObjectRef(database="a-b", name="t"), ObjectRef(database="a-b", name="_chmv_shadow_t_range")
    sql = swaps_sql(live, shadow, [("tuple(20260801)", False), ("tuple(20260802)", True), ("tuple(20260803)", False)])
    assert sql == (
        "ALTER TABLE `a-b`.`t` REPLACE PARTITION tuple(20260801) FROM `a-b`.`_chmv_shadow_t_range`, "
        "DROP PARTITION tuple(20260802), "
        "REPLACE PARTITION tuple(20260803) FROM `a-b`.`_chmv_shadow_t_range`"
    )
    assert swap_sql(live, shadow, "tuple(20260801)") == swaps_sql(live, shadow, [("tuple(20260801)", False)])


def test_shadow_names_carry_the_run_and_match_only_their_tables_pattern():
    daily = ObjectRef(database="w", name="daily")
    shadow = shadow_ref(daily, "2026-01-01", "0a1b2c3d")
    assert shadow.name == "_chmv_shadow_daily_20260101_r0a1b2c3d" and run_of_shadow(shadow.name) == "0a1b2c3d"
    pattern = re.compile(shadows_pattern(daily))
    for name in (
        shadow.name,
        "_chmv_shadow_daily_range_rfeed",
        "_chmv_shadow_daily_all",
        "_chmv_shadow_daily_20260101",
    ):
        assert pattern.match(name), name
    for name in ("_chmv_shadow_daily_x_20260101_r0a1b2c3d", "_chmv_shadow_daily_2026_all_r1", "daily"):
        assert not pattern.match(name), name
    assert run_of_shadow("_chmv_shadow_daily_range") is None and run_of_shadow("_chmv_shadow_daily_all") is None


# --- a key part -------------------------------------------------------------------------------------------------

KEYED = """
CREATE TABLE d.src (ts DateTime, region LowCardinality(String), tenant String, device String, v UInt64)
ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE d.by_region (day Date, region LowCardinality(String), n UInt64) ENGINE = SummingMergeTree
PARTITION BY (toYYYYMM(day), region) ORDER BY (region, day);
CREATE MATERIALIZED VIEW d.by_region_mv TO d.by_region AS
SELECT toDate(ts) AS day, region, count() AS n FROM d.src GROUP BY day, region;
CREATE TABLE d.by_tenant (tenant String, n UInt64) ENGINE = SummingMergeTree PARTITION BY tenant ORDER BY tenant;
CREATE MATERIALIZED VIEW d.by_tenant_mv TO d.by_tenant AS SELECT tenant, count() AS n FROM d.src GROUP BY tenant;
CREATE TABLE d.buckets (bucket UInt8, week Date, n UInt64) ENGINE = SummingMergeTree
PARTITION BY tuple(bucket, toMonday(week)) ORDER BY week;
CREATE MATERIALIZED VIEW d.buckets_mv TO d.buckets AS
SELECT toUInt8(cityHash64(device) % 4) AS bucket, toMonday(ts) AS week, count() AS n FROM d.src GROUP BY bucket, week;
"""


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    return load_ddl(tmp_path_factory.mktemp("keyed"), KEYED, toml=D_TOML)


def keyed_parts(loaded, target: str, key: str):
    project = loaded.project
    table = project.table(ref(target))
    views = project.views_into(ref(target))
    scheme = partition_scheme(table, views)
    return project, table, views[0], scheme, window_for_partition_key(scheme, key)


def test_a_window_and_a_key_swap_filter_and_read_by_both(keyed):
    project, table, view, scheme, window = keyed_parts(keyed, "d.by_region", "2026-09-01|it's")
    assert (
        partition_tuple(table, scheme, window, zone="UTC") == "tuple(toYYYYMM((CAST('2026-09-01' AS Date))), 'it\\'s')"
    )
    assert partition_filter(table, scheme, window, zone="UTC") == (
        "(toYYYYMM(day)) = (toYYYYMM((CAST('2026-09-01' AS Date)))) AND (region) = ('it\\'s')"
    )
    assert source_range_predicate(view, project, scheme, window, zone="UTC") == (
        "`ts` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND `ts` < toDateTime('2026-10-01 00:00:00', 'UTC') + INTERVAL 1 DAY "
        "AND `region` = 'it\\'s'"
    )
    assert view_select(view, project, table, scheme, window, zone="UTC").endswith(
        " AS `src` GROUP BY day, region) WHERE (toYYYYMM(day)) = (toYYYYMM((CAST('2026-09-01' AS Date)))) "
        "AND (region) = ('it\\'s')"
    )


def test_a_key_alone_swaps_its_value_and_reads_only_its_rows(keyed):
    project, table, view, scheme, window = keyed_parts(keyed, "d.by_tenant", "acme")
    assert partition_tuple(table, scheme, window, zone="UTC") == "tuple('acme')"
    assert partition_filter(table, scheme, window, zone="UTC") == "(tenant) = ('acme')"
    assert source_range_predicate(view, project, scheme, window, zone="UTC") == "`tenant` = 'acme'"
    assert shadow_ref(table.ref, window.key, "ab12").name == "_chmv_shadow_by_tenant_acme_rab12"


def test_a_key_the_mv_computes_is_filtered_on_the_output_only(keyed):
    """``bucket`` is a hash of the device: the trigger is read for the week, the output kept for the bucket."""
    project, table, view, scheme, window = keyed_parts(keyed, "d.buckets", "2026-08-03|2")
    assert partition_tuple(table, scheme, window, zone="UTC") == "tuple('2', toMonday((CAST('2026-08-03' AS Date))))"
    assert source_range_predicate(view, project, scheme, window, zone="UTC") == (
        "`ts` >= toDateTime('2026-08-03 00:00:00', 'UTC') AND `ts` < toDateTime('2026-08-10 00:00:00', 'UTC') + INTERVAL 1 WEEK"
    )
    assert partition_filter(table, scheme, window, zone="UTC") == (
        "(bucket) = ('2') AND (toMonday(week)) = (toMonday((CAST('2026-08-03' AS Date))))"
    )
    two = [window, window_for_partition_key(scheme, "2026-08-10|0")]
    assert range_select(view, project, table, scheme, two, zone="UTC").endswith(
        "WHERE ((bucket) = ('2') AND (toMonday(week)) = (toMonday((CAST('2026-08-03' AS Date))))) "
        "OR ((bucket) = ('0') AND (toMonday(week)) = (toMonday((CAST('2026-08-10' AS Date)))))"
    )


def test_a_shadow_of_a_key_without_letters_or_digits_gets_a_digest():
    target = ObjectRef(database="d", name="t")
    names = {shadow_ref(target, key, "ab12").name for key in ("東京", "大阪", "x" * 100, "y" * 100)}
    assert len(names) == 4 and all(re.fullmatch(shadows_pattern(target), n) for n in names)
    assert all(len(n) < 80 for n in names)
