"""Helpers of the lifecycle tests: a private copy of the example DDL to edit, and a snapshot of the server."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_DDL = ROOT / "examples" / "ddl"


def copy_ddl(root: Path) -> Path:
    """A copy of ``examples/ddl`` under ``root``, to edit."""
    ddl = root / "ddl"
    shutil.copytree(EXAMPLE_DDL, ddl)
    return ddl


def edit(ddl: Path, file: str, old: str, new: str) -> None:
    """Replace ``old`` (which must occur exactly once) with ``new`` in ``ddl/file``."""
    path = ddl / file
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {file}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def snapshot(client) -> list[tuple]:
    """Every database, object (with its CREATE statement) and active row count: equal before and after = unchanged."""
    tables = client.query(
        "SELECT t.database, t.name, t.create_table_query, p.rows FROM system.tables AS t LEFT JOIN "
        "(SELECT database, table, sum(rows) AS rows FROM system.parts WHERE active GROUP BY database, table) AS p "
        "ON p.database = t.database AND p.table = t.name WHERE t.database NOT IN ('system', 'INFORMATION_SCHEMA', "
        "'information_schema') ORDER BY t.database, t.name"
    ).result_rows
    databases = client.query("SELECT name FROM system.databases ORDER BY name").result_rows
    return [*databases, *tables]


# The edits of the example DDL the lifecycle tests use, one per change kind.
ADD_COLUMN = ("40_all_events.sql",
              "CREATE TABLE IF NOT EXISTS analytics.audit_log (timestamp DateTime, payload String)",
              "CREATE TABLE IF NOT EXISTS analytics.audit_log (timestamp DateTime, payload String, "
              "source_ip String DEFAULT '' COMMENT 'who')")  # fmt: skip
CHANGED_FILTER = ("40_all_events.sql", "WHERE level = 'error';", "WHERE level IN ('error', 'warn');")
NEW_TTL = ("40_all_events.sql", "TTL timestamp + INTERVAL 10 YEAR", "TTL timestamp + INTERVAL 11 YEAR")
NEW_SORT_KEY = ("60_raw_events.sql", "ORDER BY (event_date, event_hour, event_type, user_id);",
                "ORDER BY (event_type, event_date, event_hour, user_id);")  # fmt: skip
TOP_OF_CHAIN_SELECT = ("60_raw_events.sql", "    sum(duration_ms) AS sum_duration_ms\nFROM analytics.raw_events",
                       "    sum(duration_ms * 2) AS sum_duration_ms\nFROM analytics.raw_events")  # fmt: skip
SELECT_CHANGE = ("10_api_requests.sql", "uniqState(user_id) AS unique_users",
                 "uniqState(user_id + 0) AS unique_users")  # fmt: skip

# Valid DDL (lineage passes) whose MV reads a column its source lacks: the preflight's case of issue 10.
SHOP = """\
CREATE DATABASE IF NOT EXISTS shop ENGINE = Atomic;
CREATE TABLE shop.orders (ts DateTime, amount UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE shop.daily (day Date, total UInt64) ENGINE = SummingMergeTree ORDER BY day;
CREATE TABLE shop.by_customer (customer UInt64, total UInt64) ENGINE = SummingMergeTree ORDER BY customer;
-- Revenue per customer: reads a column orders does not have.
CREATE MATERIALIZED VIEW shop.by_customer_mv TO shop.by_customer AS
SELECT customer_id AS customer, sum(amount) AS total FROM shop.orders GROUP BY customer;
"""
