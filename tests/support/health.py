"""Helpers of the health tests: the golden health statements, bound to the clustered fixture's replicated tables."""

from __future__ import annotations

import difflib
import os
import re

from chmv_assets.ddl.loader import load
from chmv_assets.sql.health_sql import (
    bind,
    limits_sql,
    load_sql,
    merges_sql,
    mutations_sql,
    optimize_sql,
    readonly_sql,
    replication_sql,
    table_settings_sql,
    views_state_sql,
)
from chmv_assets.sql.parts_sql import partitions_sql
from chmv_assets.sql.quoting import string_literal

from support import paths

GOLDEN = paths.GOLDEN / "health"
CLUSTERED = paths.SCHEMAS / "clustered"
UPDATE_ENV = "CHMV_UPDATE_GOLDEN"


def bound(sql: str, parameters: dict) -> str:
    """``sql`` with its ``{name:Type}`` parameters written as literals (what the server executes)."""

    def literal(match: re.Match) -> str:
        value = parameters[match.group(1)]
        if isinstance(value, list):
            return "[" + ", ".join(string_literal(v) for v in value) + "]"
        return str(value)

    return re.sub(r"\{(\w+):[^}]+\}", literal, sql)


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: run with {UPDATE_ENV}=1, then read it"
    golden = path.read_text(encoding="utf-8")
    if text != golden:
        diff = "\n".join(difflib.unified_diff(golden.splitlines(), text.splitlines(), "golden", "now", lineterm=""))
        raise AssertionError(f"{name} differs from what the code renders ({UPDATE_ENV}=1 rewrites it):\n{diff}")


def replicated():
    project = load(CLUSTERED).project  # the DDL as written: Replicated* engines
    tables = sorted((r for r, t in project.tables.items() if t.engine and t.engine.replicated), key=lambda r: r.fqn)
    return project, tables


def statements() -> dict[str, str]:
    """Every golden file's text: one titled statement per check, bound to the clustered fixture's tables."""
    project, tables = replicated()
    params = bind(tables)
    views = sorted(project.views, key=lambda r: r.fqn)

    def section(title: str, sql: str) -> str:
        return f"-- {title}\n{sql};\n"

    return {
        "replication.sql": section(
            "replication of the Replicated* tables: queue, oldest entry, lag, replicas",
            bound(replication_sql(), params),
        ),
        "read_only.sql": section("read-only replicas and tables on read-only disks", bound(readonly_sql(), params)),
        "mutations.sql": section("mutations not done, oldest first", bound(mutations_sql(), params)),
        "views.sql": section(
            "the MVs of the DDL directory: live or detached (neither: missing)", bound(views_state_sql(), bind(views))
        ),
        "pacing.sql": "\n".join(
            [
                section(
                    "the server's limits and each table's own SETTINGS (once per session)",
                    bound(limits_sql(tables=True), params),
                ),
                section("each table's own SETTINGS (the part-count check)", bound(table_settings_sql(), params)),
                section(
                    "a look before an insert, on a server (chmv's running writes counted)",
                    bound(load_sql(running=True), params),
                ),
                section("merges and mutations running (the part-count check)", bound(merges_sql(), params)),
            ]
        ),
        "maintenance.sql": "\n".join(
            [
                section(
                    "the partitions of collapsing targets (closed ones holding several parts are merged)",
                    bound(partitions_sql(), params),
                ),
                section("merging one of them", optimize_sql(tables[0], "202608")),
            ]
        ),
    }
