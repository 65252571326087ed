"""Lint rules of seed 001 on the parsed model: the example is clean, each bad pattern is named with its fix."""

from __future__ import annotations

from pathlib import Path

from conftest import EXAMPLE_DDL

from chmv_assets.ddl.loader import load
from chmv_assets.engine.health.lint import lint_project

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
