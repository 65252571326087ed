"""Lint rules of seed 001 on the parsed model: the example is clean, each bad pattern is named with its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.engine.health.lint import RULES, lint_project

from support.paths import EXAMPLE_DDL

BAD_DDL = """
CREATE DATABASE IF NOT EXISTS shop ENGINE = Atomic;
CREATE TABLE shop.orders (ts DateTime, order_id UInt64, user_id UInt64, amount UInt64)
ENGINE = ReplacingMergeTree() PARTITION BY toYYYYMM(ts) ORDER BY order_id;
CREATE TABLE shop.users (user_id UInt64, country String) ENGINE = MergeTree ORDER BY user_id;
CREATE TABLE shop.revenue (day Date, revenue AggregateFunction(sum, UInt64), n AggregateFunction(count))
ENGINE = AggregatingMergeTree() PARTITION BY toYYYYMM(day) ORDER BY day;
CREATE MATERIALIZED VIEW shop.revenue_mv TO shop.revenue AS
SELECT toDate(ts) AS day, sumState(amount) AS revenue, count() AS n FROM shop.orders GROUP BY day ORDER BY day;
CREATE TABLE shop.by_country (ts DateTime, country String, amount UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW shop.by_country_mv TO shop.by_country AS
SELECT o.ts AS ts, u.country AS country, o.amount AS amount FROM shop.orders AS o JOIN shop.users AS u ON o.user_id = u.user_id;
CREATE MATERIALIZED VIEW shop.inner_mv ENGINE = MergeTree ORDER BY ts POPULATE AS SELECT ts, amount FROM shop.orders;
"""


def test_example_project_is_clean_with_default_budgets_but_its_group_by_into_a_merge_tree(example) -> None:
    findings = lint_project(example)  # all_events feeds exactly 3 MVs: within the default budget
    assert [(f.rule, f.subject) for f in findings] == [("group_by_into_merge_tree", "analytics.mv_events_agg")]
    assert "GROUP BY event_date, event_hour, event_type, user_id" in findings[0].reason
    assert "SummingMergeTree" in findings[0].fix


def test_tighter_budgets_warn_with_reason_and_fix() -> None:
    loaded = load(EXAMPLE_DDL, lint={"max_views_per_source": 2, "max_chain_depth": 2})
    rules = {(f.rule, f.subject) for f in lint_project(loaded)}
    assert ("write_amplification", "analytics.errors_mv") in rules
    assert ("chain_depth", "analytics.mv_events_weekly") in rules


def test_bad_patterns_are_found(tmp_path: Path) -> None:
    (tmp_path / "shop.sql").write_text(BAD_DDL)
    findings = lint_project(load(tmp_path))
    by_rule = {f.rule: f for f in findings}
    assert {
        "join_instead_of_dictget",
        "dedup_source_additive_aggregate",
        "order_by_in_select",
        "no_to_clause",
        "populate",
        "aggregating_without_state",
    } <= set(by_rule)
    assert "counted twice" in by_rule["dedup_source_additive_aggregate"].reason
    assert "dictGet" in by_rule["join_instead_of_dictget"].fix
    assert "n (AggregateFunction(count))" in by_rule["aggregating_without_state"].reason
    assert by_rule["order_by_in_select"].location.endswith("shop.sql:8:1")
    # an MV's findings in the rules' order, the MVs in definition order
    assert [(f.rule, f.subject) for f in findings] == [
        ("dedup_source_additive_aggregate", "shop.revenue_mv"),
        ("order_by_in_select", "shop.revenue_mv"),
        ("aggregating_without_state", "shop.revenue_mv"),
        ("join_instead_of_dictget", "shop.by_country_mv"),
        ("no_to_clause", "shop.inner_mv"),
        ("populate", "shop.inner_mv"),
    ]


def test_an_mv_reading_a_stream_is_told_that_chmv_never_reads_it(tmp_path: Path) -> None:
    (tmp_path / "q.sql").write_text("""
CREATE DATABASE IF NOT EXISTS q ENGINE = Atomic;
CREATE TABLE q.queue (ts DateTime, v UInt64) ENGINE = Kafka SETTINGS kafka_broker_list = 'k:9092',
    kafka_topic_list = 't', kafka_group_name = 'g', kafka_format = 'JSONEachRow';
CREATE TABLE q.landed (ts DateTime, v UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW q.consumer TO q.landed AS SELECT ts, v FROM q.queue;
""")
    (finding,) = [f for f in lint_project(load(tmp_path)) if f.rule == "stream_source"]
    assert finding.subject == "q.consumer" and "reads the stream table q.queue (Kafka)" in finding.reason
    assert "q.landed is not parity-checked or rebuilt from it" in finding.reason and "landing zone" in finding.fix


#: Tables every rule's row may read: a source, a dimension and a plain MergeTree target.
PRELUDE = """CREATE DATABASE IF NOT EXISTS s ENGINE = Atomic;
CREATE TABLE s.src (ts DateTime, k UInt64, v UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY k;
CREATE TABLE s.dim (k UInt64, name String) ENGINE = MergeTree ORDER BY k;
CREATE TABLE s.out (ts DateTime, k UInt64, v UInt64) ENGINE = MergeTree ORDER BY k;
"""
KAFKA = (
    "ENGINE = Kafka SETTINGS kafka_broker_list = 'k:9092', kafka_topic_list = 't', kafka_group_name = 'g', "
    "kafka_format = 'JSONEachRow'"
)
GROUP_BY_FIX = (
    "make the target a SummingMergeTree ORDER BY the group keys (sums merge per key) or an AggregatingMergeTree with "
    "-State columns, and read it with GROUP BY (sum(), -Merge); chmv's parity compares its sums and distinct groups, "
    "which batching does not change."
)

#: One row per rule: the DDL after PRELUDE that breaks it (and nothing else), the budgets, and every finding as
#: (MV, reason, fix), word for word. Adding a rule is one object in ``lint.RULES`` and one row here.
RULE_ROWS = [
    pytest.param(
        "join_instead_of_dictget",
        "CREATE MATERIALIZED VIEW s.mv TO s.out AS SELECT ts, src.k AS k, v FROM s.src JOIN s.dim ON src.k = dim.k;",
        {},
        [
            (
                "s.mv",
                "JOINs s.dim: the whole right table is read on every insert block.",
                "load the dimension into a dictionary and look it up with dictGet().",
            )
        ],
        id="join_instead_of_dictget",
    ),
    pytest.param(
        "self_join_on_trigger",
        "CREATE MATERIALIZED VIEW s.mv TO s.out AS\n"
        "SELECT a.ts AS ts, a.k AS k, b.v AS v FROM s.src AS a JOIN s.src AS b ON a.k = b.k;",
        {},
        [
            (
                "s.mv",
                "joins its trigger s.src with itself: both sides see only the inserted block, so matches from earlier "
                "inserts are silently missed.",
                "join against a separate target table, or aggregate in the target (AggregatingMergeTree).",
            )
        ],
        id="self_join_on_trigger",
    ),
    pytest.param(
        "write_amplification",
        "CREATE MATERIALIZED VIEW s.mv TO s.out AS SELECT ts, k, v FROM s.src;\n"
        "CREATE MATERIALIZED VIEW s.mv2 TO s.out AS SELECT ts, k, v FROM s.src;",
        {"max_views_per_source": 1},
        [
            (
                mv,
                "s.src feeds 2 MVs (budget 1): every insert is written 3 times and each write makes parts to merge.",
                "combine MVs into wider targets, or raise lint.max_views_per_source in chmv.toml if intended.",
            )
            for mv in ("s.mv", "s.mv2")
        ],
        id="write_amplification",
    ),
    pytest.param(
        "dedup_source_additive_aggregate",
        "CREATE TABLE s.orders (ts DateTime, k UInt64, v UInt64) ENGINE = ReplacingMergeTree ORDER BY k;\n"
        "CREATE TABLE s.sums (k UInt64, v UInt64) ENGINE = SummingMergeTree ORDER BY k;\n"
        "CREATE MATERIALIZED VIEW s.mv TO s.sums AS SELECT k, sum(v) AS v FROM s.orders GROUP BY k;",
        {},
        [
            (
                "s.mv",
                "s.orders is a ReplacingMergeTree but the MV aggregates with sum: the MV fires on every insert, so "
                "duplicates are counted twice and the source's later dedup never reaches the target.",
                "deduplicate before the MV (insert dedup tokens), use argMaxState/uniqState, or a ReplacingMergeTree "
                "target.",
            )
        ],
        id="dedup_source_additive_aggregate",
    ),
    pytest.param(
        "stream_source",
        f"CREATE TABLE s.queue (ts DateTime, k UInt64, v UInt64) {KAFKA};\n"
        "CREATE MATERIALIZED VIEW s.mv TO s.out AS SELECT ts, k, v FROM s.queue;",
        {},
        [
            (
                "s.mv",
                "reads the stream table s.queue (Kafka): chmv never reads a stream (a SELECT consumes messages this MV "
                "then never sees), so s.out is not parity-checked or rebuilt from it and holds the only copy of those "
                "rows; partitions of the targets further down that are still open pause this consumer for their swap.",
                "keep the stream's messages somewhere chmv can read them (land them in the landing zone, or keep s.out "
                "a MergeTree with the raw rows and no TTL shorter than you need) and check the targets that read it; "
                "join a stream with nothing (its other side would consume it too).",
            )
        ],
        id="stream_source",
    ),
    pytest.param(
        "no_to_clause",
        "CREATE MATERIALIZED VIEW s.mv ENGINE = MergeTree ORDER BY k AS SELECT ts, k, v FROM s.src;",
        {},
        [
            (
                "s.mv",
                "has no TO table: its inner table cannot be altered, backfilled or swapped independently.",
                "create the target table explicitly and use CREATE MATERIALIZED VIEW … TO target.",
            )
        ],
        id="no_to_clause",
    ),
    pytest.param(
        "populate",
        "CREATE MATERIALIZED VIEW s.mv TO s.out POPULATE AS SELECT ts, k, v FROM s.src;",
        {},
        [
            (
                "s.mv",
                "uses POPULATE: rows inserted while it populates are lost or doubled.",
                "create the MV without POPULATE and backfill partitions (chmv rebuild).",
            )
        ],
        id="populate",
    ),
    pytest.param(
        "chain_depth",
        "CREATE TABLE s.out2 (ts DateTime, k UInt64, v UInt64) ENGINE = MergeTree ORDER BY k;\n"
        "CREATE MATERIALIZED VIEW s.mv TO s.out AS SELECT ts, k, v FROM s.src;\n"
        "CREATE MATERIALIZED VIEW s.mv2 TO s.out2 AS SELECT ts, k, v FROM s.out;",
        {"max_chain_depth": 1},
        [
            (
                "s.mv2",
                "sits at depth 2 of an MV chain (limit 1): a bug upstream silently corrupts every hop below.",
                "prefer independent MVs on the source over a chain, or raise lint.max_chain_depth.",
            )
        ],
        id="chain_depth",
    ),
    pytest.param(
        "order_by_in_select",
        "CREATE MATERIALIZED VIEW s.mv TO s.out AS SELECT ts, k, v FROM s.src ORDER BY k;",
        {},
        [
            (
                "s.mv",
                "has ORDER BY in its SELECT: it has no effect, the target keeps its own sort order.",
                "remove the ORDER BY; set the target's ORDER BY instead.",
            )
        ],
        id="order_by_in_select",
    ),
    pytest.param(
        "group_by_into_merge_tree",
        "CREATE MATERIALIZED VIEW s.mv TO s.out AS SELECT max(ts) AS ts, k, sum(v) AS v FROM s.src GROUP BY k;",
        {},
        [
            (
                "s.mv",
                "aggregates (GROUP BY k) into s.out, a plain MergeTree: the MV runs per insert block, so each block "
                "writes its own row per group; the table holds partial aggregates whose number depends on how the "
                "inserts were batched, and a reader that counts rows or takes one row per group is wrong.",
                GROUP_BY_FIX,
            )
        ],
        id="group_by_into_merge_tree",
    ),
    pytest.param(
        "aggregating_without_state",
        "CREATE TABLE s.agg (k UInt64, v AggregateFunction(sum, UInt64)) ENGINE = AggregatingMergeTree ORDER BY k;\n"
        "CREATE MATERIALIZED VIEW s.mv TO s.agg AS SELECT k, sum(v) AS v FROM s.src GROUP BY k;",
        {},
        [
            (
                "s.mv",
                "writes v (AggregateFunction(sum, UInt64)) without a -State function: raw values in an "
                "AggregateFunction column corrupt the aggregate.",
                "write v with the matching -State combinator (e.g. sumState(x)).",
            )
        ],
        id="aggregating_without_state",
    ),
]


@pytest.mark.parametrize(("rule", "ddl", "budgets", "expected"), RULE_ROWS)
def test_each_rule_finds_its_pattern_alone_with_its_reason_and_fix(
    tmp_path: Path, rule: str, ddl: str, budgets: dict, expected: list[tuple[str, str, str]]
) -> None:
    (tmp_path / "s.sql").write_text(PRELUDE + ddl + "\n")
    findings = lint_project(load(tmp_path, lint=budgets))
    assert [(f.rule, f.subject, f.reason, f.fix) for f in findings] == [(rule, *e) for e in expected]
    assert all(f.location.startswith(str(tmp_path / "s.sql")) for f in findings)


def test_every_rule_has_its_row_and_a_name_of_its_own() -> None:
    ids = [rule.id for rule in RULES]
    assert len(set(ids)) == len(ids)
    assert ids == [row.id for row in RULE_ROWS]  # one row per rule, in the rules' order
    assert all(rule.checks and rule.message and rule.fix for rule in RULES)
