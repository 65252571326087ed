"""Clause-by-clause comparison of a repo table with the live one: in place, new version, or drop."""

from __future__ import annotations

from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.engine.lifecycle.table_diff import diff_table, same_text

LIVE = (
    "CREATE TABLE d.t (`ts` DateTime, `k` String, `v` UInt32 COMMENT 'value', `gone` UInt8) "
    "ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY (k, ts) TTL ts + toIntervalYear(1) "
    "SETTINGS index_granularity = 8192"
)


def diff(repo_sql: str, live_sql: str = LIVE):
    repo = parse_statement(repo_sql, default_database="d")
    # The planner compares the server's formatting of both sides; here the texts are written that way already.
    return diff_table(repo, repo, parse_statement(live_sql, default_database="d"))


def test_same_statement_is_no_change_and_the_cheap_test_ignores_server_defaults() -> None:
    assert diff(LIVE).empty
    repo = LIVE.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS").replace(" SETTINGS index_granularity = 8192", "")
    assert same_text(repo, LIVE) and not same_text(repo.replace("k, ts", "ts, k"), LIVE)


def test_in_place_changes_run_the_repo_text_verbatim() -> None:
    d = diff(
        "CREATE TABLE d.t (ts DateTime, k LowCardinality(String), v UInt64 COMMENT 'the value', "
        "extra String DEFAULT lower(k) COMMENT 'new', gone UInt8) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) "
        "ORDER BY (k, ts) TTL ts + INTERVAL 2 YEAR SETTINGS index_granularity = 8192 COMMENT 'tbl'"
    )
    clauses = [c for c, _ in d.in_place]
    assert d.structural == ("column k String → LowCardinality(String) (a sorting or partition key column)",)
    assert "MODIFY COLUMN v UInt64 COMMENT 'the value'" in clauses
    assert "ADD COLUMN extra String DEFAULT lower(k) COMMENT 'new' AFTER `v`" in clauses
    assert "MODIFY TTL ts + INTERVAL 2 YEAR" in clauses and "MODIFY COMMENT 'tbl'" in clauses


def test_column_changes_in_place() -> None:
    d = diff(LIVE.replace("`v` UInt32 COMMENT 'value'", "`v` UInt64 COMMENT 'value'"))
    assert d.in_place == (("MODIFY COLUMN `v` UInt64 COMMENT 'value'", "column v UInt32 → UInt64"),)
    d = diff(LIVE.replace("COMMENT 'value'", "COMMENT 'it''s'"))
    assert d.in_place == (("COMMENT COLUMN `v` 'it\\'s'", "column v: comment changed"),)
    d = diff(LIVE.replace(" COMMENT 'value'", ""))
    assert d.in_place == (("MODIFY COLUMN `v` REMOVE COMMENT", "column v: comment removed"),)
    assert diff(LIVE.replace(" TTL ts + toIntervalYear(1)", "")).in_place == (
        ("REMOVE TTL", "TTL ts + toIntervalYear(1) removed"),
    )


def test_what_cannot_change_in_place_needs_a_new_version() -> None:
    assert diff(LIVE.replace("ORDER BY (k, ts)", "ORDER BY (ts, k)")).structural == ("ORDER BY (k, ts) → (ts, k)",)
    assert diff(LIVE.replace("toYYYYMM(ts)", "toDate(ts)")).structural == ("PARTITION BY toYYYYMM(ts) → toDate(ts)",)
    assert diff(LIVE.replace("ENGINE = MergeTree", "ENGINE = ReplacingMergeTree(ts)")).structural == (
        "engine MergeTree() → ReplacingMergeTree(ts)",
    )
    assert diff(LIVE.replace("`v` UInt32", "`v` UInt16")).structural == (
        "column v UInt32 → UInt16 (the values do not convert in place)",
    )


def test_a_column_the_ddl_no_longer_has_is_a_drop() -> None:
    d = diff(LIVE.replace(", `gone` UInt8", ""))
    assert d.drops == (("DROP COLUMN `gone`", "column gone UInt8 is not in the DDL"),) and not d.in_place


REPLICATED = LIVE.replace(
    "ENGINE = MergeTree", "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', v)"
)


def test_the_keeper_path_and_replica_name_are_the_deployment_not_the_schema() -> None:
    """The server shows its default path where the repo writes none, and a swapped-in version has its own path:
    neither is a change; the engine's own parameters and the Replicated prefix still are."""
    assert diff(REPLICATED.replace("'/clickhouse/tables/{uuid}/{shard}', '{replica}', ", ""), REPLICATED).empty
    renamed_path = REPLICATED.replace("{uuid}/{shard}", "{shard}/d/t__chmv_v2")
    assert diff(REPLICATED.replace("{uuid}/{shard}", "{shard}/d/t"), renamed_path).empty
    assert diff(REPLICATED.replace(", v)", ", ts)"), REPLICATED).structural == (
        "engine ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', v) → "
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', ts)",
    )
    assert diff(
        REPLICATED.replace("Replicated", "").replace("'/clickhouse/tables/{uuid}/{shard}', '{replica}', ", ""),
        REPLICATED,
    ).structural  # leaving replication is a new version


def test_what_the_server_writes_out_is_no_change() -> None:
    live = "CREATE TABLE d.s (`v` Float64 CODEC(Gorilla(8), ZSTD(1)), `d` DateTime CODEC(Delta(4))) ENGINE = Memory"
    # the repo as the server formats it, but for the widths the DDL leaves out
    repo = "CREATE TABLE d.s (`v` Float64 CODEC(Gorilla, ZSTD(1)), `d` DateTime CODEC(Delta)) ENGINE = Memory"
    assert diff(repo, live).empty
    changed = diff(repo.replace("Delta", "Delta(8)"), live)
    assert [reason for _, reason in changed.in_place] == ["column d: definition changed"]
    merge = "CREATE TABLE d.m (`a` UInt8) ENGINE = Merge('d', '^t$')"
    assert diff("CREATE TABLE d.m (`a` UInt8) ENGINE = Merge(d, '^t$')", merge).empty
    assert not diff("CREATE TABLE d.m (`a` UInt8) ENGINE = Merge(d, '^u$')", merge).empty


def test_a_nested_column_is_the_array_columns_the_server_stores() -> None:
    """The server lists a Nested column as one ``name.field Array(T)`` column per field: no change, no drop."""
    live = (
        "CREATE TABLE d.n (`id` UInt64, `Events.At` Array(DateTime64(9)), `Events.Name` Array(LowCardinality(String))) "
        "ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192"
    )
    repo = (
        "CREATE TABLE d.n (`id` UInt64, `Events` Nested(At DateTime64(9), Name LowCardinality(String)) "
        "CODEC(ZSTD(1))) ENGINE = MergeTree ORDER BY id"
    )
    assert diff(repo, live).empty
    changed = diff(repo.replace("Name LowCardinality(String))", "Name LowCardinality(String), Level UInt8)"), live)
    assert changed.structural == ("column Events.Level added (its definition could not be read verbatim)",)


def test_a_dictionary_table_names_its_dictionary_quoted_or_not() -> None:
    live = "CREATE TABLE d.c (`code` String) ENGINE = Dictionary('d.codes')"
    assert diff("CREATE TABLE d.c (`code` String) ENGINE = Dictionary(d.codes)", live).empty
    assert not diff("CREATE TABLE d.c (`code` String) ENGINE = Dictionary(d.other)", live).empty
