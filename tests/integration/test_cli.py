"""The `chmv` command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chmv_assets.sql.meta import RECORD_TABLES

pytestmark = pytest.mark.worker_seconds(70)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DDL = ROOT / "examples" / "ddl"


def chmv(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chmv_assets.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_lineage_json():
    result = chmv("lineage", "--ddl-dir", str(EXAMPLE_DDL), "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"views", "tables", "functions", "kept", "layers", "loops"}
    views = {v["name"]: v for v in data["views"]}
    assert views["analytics.mv_events_weekly"]["depth"] == 3
    assert views["analytics.hourly_endpoint_stats_mv"]["trigger"] == "analytics.api_requests"


def test_lineage_mermaid_dot_and_impact():
    mermaid = chmv("lineage", "--ddl-dir", str(EXAMPLE_DDL), "--format", "mermaid")
    assert mermaid.returncode == 0 and mermaid.stdout.startswith("flowchart LR")
    assert '"analytics.events_weekly"' in mermaid.stdout
    dot = chmv("lineage", "--ddl-dir", str(EXAMPLE_DDL), "--format", "dot")
    assert dot.returncode == 0 and dot.stdout.startswith("digraph chmv {")
    assert '"analytics.mv_events_weekly" -> "analytics.events_weekly";' in dot.stdout
    impact = chmv("lineage", "--ddl-dir", str(EXAMPLE_DDL), "--impact", "analytics.events_daily")
    assert impact.stdout.split() == ["analytics.mv_events_weekly", "analytics.events_weekly"]


def test_default_database_override(tmp_path):
    (tmp_path / "a.sql").write_text(
        "CREATE TABLE s (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE TABLE t (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE MATERIALIZED VIEW v TO t AS SELECT x FROM s\n"
    )
    result = chmv("lineage", "--ddl-dir", str(tmp_path), "--default-database", "shop")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)["views"][0]
    assert (view["name"], view["target"], view["sources"]) == ("shop.v", "shop.t", ["shop.s"])


def test_a_dsns_secrets_are_never_printed(tmp_path):
    """A token in the DSN's query (clickhouse-connect's access_token) and a password: what chmv prints shows neither;
    on the embedded engine the query is the driver's, never part of the engine's path (nor of its lock's)."""
    (tmp_path / "a.sql").write_text(
        "CREATE TABLE s (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE TABLE t (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE MATERIALIZED VIEW v TO t AS SELECT x FROM s\n"
    )
    server = chmv("plan", "--ddl-dir", str(tmp_path), "--dsn", "https://u:pw@127.0.0.1:1/sales?access_token=t0k3n")
    assert server.returncode == 1, server.stderr
    assert "session database is 'sales' (https://127.0.0.1:1/sales?access_token=…)" in server.stderr
    embedded = chmv("plan", "--ddl-dir", str(tmp_path), "--dsn", f"chdb://{tmp_path / 'chdb'}?access_token=t0k3n")
    assert embedded.returncode == 3, embedded.stderr
    for result in (server, embedded):
        assert "t0k3n" not in result.stdout + result.stderr and "pw@" not in result.stderr
    assert not [p.name for p in tmp_path.iterdir() if "t0k3n" in p.name]


def test_bad_ddl_exits_2_printing_every_problem_and_deploys_nothing(tmp_path):
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "a.sql").write_text(
        "CREATE TABLE d.a (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE TABLE d.broken (x UInt64 ENGINE = MergeTree ORDER BY x;\n"
        "CREATE MATERIALIZED VIEW d.m1 TO d.nowhere AS SELECT x FROM d.a;\n"
        "CREATE MATERIALIZED VIEW d.m2 TO d.a AS SELECT x FROM d.ghost;\n"
    )
    (ddl / "b.sql").write_text("CREATE TABLE d.a (x String) ENGINE = MergeTree ORDER BY x;\n")
    result = chmv("lineage", "--ddl-dir", str(ddl))
    assert result.returncode == 2
    assert result.stdout == ""
    err = result.stderr
    assert err.startswith("4 problems in the DDL directory; nothing was deployed")
    assert f"{ddl / 'a.sql'}:2:" in err and "syntax error" in err
    assert f"{ddl / 'a.sql'}:3:1: d.m1 writes TO d.nowhere" in err
    assert f"{ddl / 'a.sql'}:4:" in err and "reads d.ghost" in err and 'external = ["d.ghost"]' in err
    assert f"{ddl / 'b.sql'}:1:1: d.a is defined again" in err
    assert err.count("fix: ") == 4

    engine = tmp_path / "engine"
    applied = chmv("apply", "--ddl-dir", str(ddl), "--dsn", f"chdb://{engine}")
    assert applied.returncode == 2 and "nothing was deployed" in applied.stderr
    assert not engine.exists()


def test_apply_is_idempotent(tmp_path):
    dsn = f"chdb://{tmp_path / 'chdb'}"
    first = chmv("apply", "--ddl-dir", str(EXAMPLE_DDL), "--dsn", dsn)
    assert first.returncode == 0, first.stderr
    # 1 database, 16 tables, 10 MVs.
    assert "apply: 27 created, 0 already there" in first.stdout
    assert "created analytics.hourly_endpoint_stats_mv" in first.stdout
    second = chmv("apply", "--ddl-dir", str(EXAMPLE_DDL), "--dsn", dsn)
    assert second.returncode == 0, second.stderr
    assert "apply: 0 created, 27 already there" in second.stdout

    from resources.clickhouse import ClickHouseResource

    with ClickHouseResource(dsn=dsn).get_client() as client:
        rows = client.query(
            "SELECT name, engine FROM system.tables WHERE database = 'analytics' ORDER BY name"
        ).result_rows
        assert len(rows) == 26
        assert ("events_weekly", "AggregatingMergeTree") in rows
        assert ("mv_events_weekly", "MaterializedView") in rows
        meta = client.query("SELECT name FROM system.tables WHERE database = 'chmv_meta'").result_rows
        assert {r[0] for r in meta} == {t.ref.name for t in RECORD_TABLES} | {"leases"}  # a typed table per record kind


def test_rebuild_plans_then_runs_through_the_planner(tmp_path, example):
    from support.engines import make_engine

    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    dsn = ["--dsn", f"chdb://{tmp_path / 'chdb'}"]
    with engine.get_client() as client:
        before = client.query(
            "SELECT hour, endpoint, sumMerge(request_count) FROM analytics.hourly_endpoint_stats "
            "WHERE toDate(hour) = '2026-08-03' GROUP BY hour, endpoint ORDER BY hour, endpoint"
        ).result_rows
        client.command("ALTER TABLE analytics.hourly_endpoint_stats DROP PARTITION tuple(toDate('2026-08-03'))")
    target = ["--ddl-dir", str(EXAMPLE_DDL), "--target", "analytics.hourly_endpoint_stats"]
    dry = chmv("rebuild", *target, "--partition", "2026-08-03", *dsn, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "| 2026-08-03 | clickhouse | analytics.api_requests WHERE `timestamp` >=" in dry.stdout
    assert "_chmv_shadow_hourly_endpoint_stats_20260803" in dry.stdout and "replace_partition" in dry.stdout
    with engine.get_client() as client:  # the dry run changed nothing
        assert (
            int(client.command("SELECT count() FROM analytics.hourly_endpoint_stats WHERE toDate(hour) = '2026-08-03'"))
            == 0
        )
    run = chmv("rebuild", *target, "--partition", "2026-08-03", *dsn)
    assert run.returncode == 0, run.stderr
    assert "rebuild: analytics.hourly_endpoint_stats 2026-08-03: clickhouse, replace" in run.stdout
    with engine.get_client() as client:
        after = client.query(
            "SELECT hour, endpoint, sumMerge(request_count) FROM analytics.hourly_endpoint_stats "
            "WHERE toDate(hour) = '2026-08-03' GROUP BY hour, endpoint ORDER BY hour, endpoint"
        ).result_rows
    assert after == before and before


def test_rebuild_bad_input_names_what_to_do(tmp_path):
    dsn = ["--dsn", f"chdb://{tmp_path / 'chdb'}", "--dry-run"]
    unknown = chmv("rebuild", "--ddl-dir", str(EXAMPLE_DDL), "--target", "analytics.nope", *dsn)
    assert unknown.returncode == 1 and "analytics.nope is not an MV target" in unknown.stderr
    assert "analytics.events_daily" in unknown.stderr  # the targets there are
    bad_key = chmv(
        "rebuild", "--ddl-dir", str(EXAMPLE_DDL), "--target", "analytics.events_agg", "--partition", "2026-08-03", *dsn
    )
    assert bad_key.returncode == 1 and "no month window starts there in UTC; the one holding it: 2026-08-01" in (
        bad_key.stderr
    )
    assert "analytics.events_agg" in bad_key.stderr and "a key is a window's first day, YYYY-MM-DD" in bad_key.stderr


def test_plan_prints_the_ordered_plan_with_an_exit_code_ci_can_branch_on(tmp_path):
    from support.lifecycle import CHANGED_FILTER, copy_ddl, edit

    dsn = ["--dsn", f"chdb://{tmp_path / 'chdb'}"]
    fresh = chmv("plan", "--ddl-dir", str(EXAMPLE_DDL), *dsn, "--format", "json")
    assert fresh.returncode == 3, fresh.stderr  # everything is to be created
    data = json.loads(fresh.stdout)
    assert data["status"] == "changes" and data["exit_code"] == 3
    assert [c["action"] for c in data["changes"][:2]] == ["create_database", "create"]
    assert chmv("apply", "--ddl-dir", str(EXAMPLE_DDL), *dsn).returncode == 0
    again = chmv("plan", "--ddl-dir", str(EXAMPLE_DDL), *dsn)
    assert again.returncode == 0, again.stderr
    assert "no changes: the server matches the DDL directory" in again.stdout

    ddl = copy_ddl(tmp_path / "repo")
    edit(ddl, *CHANGED_FILTER)
    changed = chmv("plan", "--ddl-dir", str(ddl), *dsn)
    assert changed.returncode == 3, changed.stderr
    assert "~ analytics.errors_mv: MODIFY QUERY" in changed.stdout
    assert "ALTER TABLE `analytics`.`errors_mv` MODIFY QUERY SELECT timestamp, level, payload" in changed.stdout
    markdown = chmv("plan", "--ddl-dir", str(ddl), *dsn, "--format", "markdown")
    assert markdown.returncode == 3 and markdown.stdout.startswith("**chmv plan** of ")

    (ddl / "bad.sql").write_text("CREATE TABLE analytics.broken (x UInt64 ENGINE = MergeTree ORDER BY x;\n")
    invalid = chmv("plan", "--ddl-dir", str(ddl), *dsn, "--format", "json")
    assert invalid.returncode == 2 and "syntax error" in invalid.stderr
    assert json.loads(invalid.stdout)["status"] == "invalid"
    assert "exit codes (for CI)" in chmv("plan", "--help").stdout


def test_apply_runs_the_preflight_first_an_mv_reading_a_missing_column_deploys_nothing(tmp_path):
    # The case of issue 10: valid DDL (lineage passes) whose MV reads a column its source lacks. apply used to
    # print a traceback and leave three tables created and no MV.
    from support.lifecycle import SHOP

    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "shop.sql").write_text(SHOP)
    assert chmv("lineage", "--ddl-dir", str(ddl)).returncode == 0
    dsn = f"chdb://{tmp_path / 'chdb'}"
    applied = chmv("apply", "--ddl-dir", str(ddl), "--dsn", dsn)
    assert applied.returncode == 2, applied.stderr
    assert "Traceback" not in applied.stderr and applied.stdout == ""
    assert applied.stderr.startswith(
        "1 problem found by the server's preflight (in a scratch database); nothing was changed"
    )
    assert (
        f"{ddl / 'shop.sql'}:7:8: shop.by_customer_mv: the server refused it: Unknown expression identifier `customer_id`"
        in applied.stderr
    )
    assert "fix: the SELECT reads a column its source does not have" in applied.stderr
    planned = chmv("plan", "--ddl-dir", str(ddl), "--dsn", dsn)
    assert planned.returncode == 2 and "customer_id" in planned.stderr

    from resources.clickhouse import ClickHouseResource

    with ClickHouseResource(dsn=dsn).get_client() as client:
        databases = {r[0] for r in client.query("SELECT name FROM system.databases").result_rows}
    assert databases == {"default", "system", "information_schema", "INFORMATION_SCHEMA"}  # nothing was created


def test_populate_and_or_replace_are_refused_with_the_reason_and_the_alternative(tmp_path):
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "a.sql").write_text(
        "CREATE DATABASE IF NOT EXISTS g ENGINE = Atomic;\n"
        "CREATE TABLE g.src (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE TABLE g.t (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE MATERIALIZED VIEW g.p ENGINE = MergeTree ORDER BY x POPULATE AS SELECT x FROM g.src;\n"
        "CREATE OR REPLACE MATERIALIZED VIEW g.r TO g.t AS SELECT x FROM g.src;\n"
    )
    dsn = ["--dsn", f"chdb://{tmp_path / 'chdb'}"]
    for command in ("plan", "apply"):
        result = chmv(command, "--ddl-dir", str(ddl), *dsn)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert f"{ddl / 'a.sql'}:4:1: g.p: POPULATE is refused: " in result.stderr
        assert (
            "fix: remove POPULATE (and give the MV a TO table): chmv fills the target's history itself" in result.stderr
        )
        assert f"{ddl / 'a.sql'}:5:1: g.r: CREATE OR REPLACE MATERIALIZED VIEW is refused: " in result.stderr
        assert "ClickHouse #108726" in result.stderr and "MODIFY QUERY" in result.stderr

    from resources.clickhouse import ClickHouseResource

    with ClickHouseResource(dsn=dsn[1]).get_client() as client:
        assert not client.query("SELECT name FROM system.databases WHERE name = 'g'").result_rows


def test_unqualified_ddl_lands_in_the_default_database_of_a_fresh_server(tmp_path):
    """The DDL runs verbatim: once `shop` exists every session of the apply uses it, so `orders` is shop.orders (on a
    fresh server the session opened in `default`, where it used to land; the next plan then failed)."""
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "shop.sql").write_text(
        "CREATE DATABASE shop;\n"
        "CREATE TABLE orders (ts DateTime, amount UInt64) ENGINE = MergeTree ORDER BY ts;\n"
        "CREATE TABLE daily (day Date, total UInt64) ENGINE = SummingMergeTree ORDER BY day;\n"
        "CREATE MATERIALIZED VIEW daily_mv TO daily AS SELECT toDate(ts) AS day, sum(amount) AS total FROM orders "
        "GROUP BY day;\n"
    )
    (ddl / "chmv.toml").write_text('default_database = "shop"\n')
    dsn = f"chdb://{tmp_path / 'chdb'}"
    applied = chmv("apply", "--ddl-dir", str(ddl), "--dsn", dsn)
    assert applied.returncode == 0, applied.stderr
    from resources.clickhouse import ClickHouseResource

    with ClickHouseResource(dsn=dsn).get_client() as client:
        names = client.query(
            "SELECT database, name FROM system.tables WHERE name IN ('orders', 'daily', 'daily_mv') ORDER BY name"
        ).result_rows
    assert names == [("shop", "daily"), ("shop", "daily_mv"), ("shop", "orders")]
    again = chmv("plan", "--ddl-dir", str(ddl), "--dsn", dsn)
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr
