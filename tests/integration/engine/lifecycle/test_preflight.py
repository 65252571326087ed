"""The preflight: the server checks every new or changed statement in a scratch database before anything live."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.lifecycle.preflight import preflight
from chmv_assets.errors import PreflightError
from resources.clickhouse import ClickHouseResource

from support.engines import make_engine
from support.lifecycle import ADD_COLUMN, CHANGED_FILTER, NEW_SORT_KEY, SHOP, copy_ddl, edit, snapshot


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, example):
    return make_engine(tmp_path_factory.mktemp("preflight") / "chdb", example, rows=2_000)


def test_an_mv_reading_a_column_its_source_lacks_is_refused_at_the_column_and_nothing_is_touched(
    tmp_path: Path,
) -> None:
    (tmp_path / "ddl").mkdir()
    (tmp_path / "ddl" / "shop.sql").write_text(SHOP)
    loaded = load(tmp_path / "ddl")  # the DDL itself is valid: lineage passes
    with ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}").get_client() as client:
        before = snapshot(client)
        plan = plan_lifecycle(client, loaded)
        with pytest.raises(PreflightError) as caught:
            preflight(client, loaded, plan)
        assert snapshot(client) == before  # no shop database, no scratch database left
    (problem,) = caught.value.problems
    assert (problem.file, problem.line, problem.column) == (str(tmp_path / "ddl" / "shop.sql"), 7, 8)
    assert problem.message.startswith(
        "shop.by_customer_mv: the server refused it: Unknown expression identifier `customer_id`"
    )
    assert "_chmv_preflight" not in problem.message and "(UNKNOWN_IDENTIFIER)" in problem.message
    assert problem.hint.startswith("the SELECT reads a column its source does not have")
    assert str(caught.value).startswith(
        "1 problem found by the server's preflight (in a scratch database); nothing was changed"
    )


def test_changed_statements_are_checked_on_copies_and_a_refused_alter_points_at_its_table(
    deployed, tmp_path: Path
) -> None:
    ddl = copy_ddl(tmp_path)
    for change in (CHANGED_FILTER, NEW_SORT_KEY, ADD_COLUMN):
        edit(ddl, *change)
    loaded = load(ddl)
    with deployed.get_client() as client:
        before = snapshot(client)
        report = preflight(client, loaded, plan_lifecycle(client, loaded))
        assert snapshot(client) == before
    assert {"analytics.errors_mv", "analytics.events_agg", "analytics.mv_events_agg", "analytics.audit_log"} <= set(
        report.checked
    )
    assert report.scratch and all(s.startswith("_chmv_preflight_") for s in report.scratch)

    edit(ddl, "40_all_events.sql", "source_ip String DEFAULT ''", "source_ip String DEFAULT nope")
    loaded = load(ddl)
    with deployed.get_client() as client, pytest.raises(PreflightError) as caught:
        preflight(client, loaded, plan_lifecycle(client, loaded))
    (problem,) = caught.value.problems
    assert (Path(problem.file).name, problem.line) == ("40_all_events.sql", 23)
    assert problem.message.startswith("analytics.audit_log: the server refused it:") and "nope" in problem.message
    assert problem.hint.startswith("an expression of the table")


def test_a_refreshable_or_chained_fresh_deploy_passes(tmp_path: Path, example) -> None:
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "r.sql").write_text(
        textwrap.dedent("""\
        CREATE DATABASE IF NOT EXISTS r ENGINE = Atomic;
        CREATE TABLE r.src (ts DateTime, v UInt64) ENGINE = MergeTree ORDER BY ts;
        CREATE TABLE r.snap (n UInt64) ENGINE = MergeTree ORDER BY n;
        CREATE MATERIALIZED VIEW r.snap_mv REFRESH EVERY 1 HOUR TO r.snap AS SELECT count() AS n FROM r.src;
    """)
    )
    loaded = load(ddl)
    with ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}").get_client() as client:
        report = preflight(client, loaded, plan_lifecycle(client, loaded))
        assert "r.snap_mv" in report.checked
        assert not client.query("SELECT name FROM system.databases WHERE name LIKE '\\_chmv%'").result_rows


ORDERED = """\
CREATE DATABASE IF NOT EXISTS o ENGINE = Atomic;
CREATE TABLE o.codes (code String, name String) ENGINE = MergeTree ORDER BY code;
CREATE DICTIONARY o.code_names (code String, name String) PRIMARY KEY code
    SOURCE(CLICKHOUSE(TABLE 'codes' DB 'o')) LIFETIME(0) LAYOUT(COMPLEX_KEY_HASHED());
CREATE TABLE o.code_table (code String, name String) ENGINE = Dictionary(o.code_names);
CREATE MATERIALIZED VIEW o.a_ticks REFRESH EVERY 1 HOUR (x UInt64) ENGINE = Memory AS SELECT number AS x FROM numbers(3);
CREATE MATERIALIZED VIEW o.b_scaled REFRESH EVERY 1 HOUR DEPENDS ON o.a_ticks (y UInt64) ENGINE = Memory AS
    SELECT x * 10 AS y FROM o.a_ticks;
CREATE TABLE o.totals (n UInt64) ENGINE = MergeTree ORDER BY n;
CREATE MATERIALIZED VIEW o.a_sum REFRESH EVERY 1 DAY TO o.totals AS SELECT sum(y) AS n FROM o.b_scaled;
"""


def test_a_dictionary_table_and_an_mv_reading_another_mv_are_made_after_what_they_name(tmp_path: Path) -> None:
    """The preflight and the apply create a ``Dictionary(d)`` table after its dictionary and an MV reading another
    MV's inner table after that MV (whatever their names' order), and the plan right after says "no changes" (the
    server lists the table with the ``Dictionary`` engine: it is a table, not a dictionary)."""
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "o.sql").write_text(ORDERED)
    loaded = load(ddl)
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with resource.get_client() as client:
        plan = plan_lifecycle(client, loaded)
        report = preflight(client, loaded, plan)
        assert {"o.code_table", "o.b_scaled", "o.a_sum"} <= set(report.checked)
        created = [c.ref.fqn for c in plan.changes]
        assert created.index("o.code_names") < created.index("o.code_table")
        assert created.index("o.a_ticks") < created.index("o.b_scaled") < created.index("o.a_sum")
    from chmv_assets.engine.lifecycle.apply import apply_plan

    apply_plan(resource, loaded, plan, parity=False)
    with resource.get_client() as client:
        assert plan_lifecycle(client, loaded).changes == ()


def test_a_refreshable_mv_in_a_database_the_server_refuses_it_in_is_refused_before_anything(tmp_path: Path) -> None:
    """The embedded engine's ``default`` database is no Atomic one: a refreshable MV that replaces its rows cannot go
    there (an APPEND one can). The scratch databases are Atomic: the preflight names the MV, the database and what to
    do before anything is created, instead of the apply failing half-way with the server's error."""
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "a.sql").write_text(
        "CREATE TABLE src (x UInt64) ENGINE = MergeTree ORDER BY x;\n"
        "CREATE TABLE snap (n UInt64) ENGINE = MergeTree ORDER BY n;\n"
        "CREATE MATERIALIZED VIEW snap_mv REFRESH EVERY 1 HOUR TO snap AS SELECT count() AS n FROM src;\n"
        "CREATE MATERIALIZED VIEW log_mv REFRESH EVERY 1 HOUR APPEND TO snap AS SELECT count() AS n FROM src;\n"
    )
    loaded = load(ddl)
    with ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}").get_client() as client:
        with pytest.raises(PreflightError) as info:
            preflight(client, loaded, plan_lifecycle(client, loaded))
        assert not client.query("SELECT name FROM system.tables WHERE database = 'default'").result_rows
    (problem,) = info.value.problems
    assert (Path(problem.file).name, problem.line) == ("a.sql", 3)
    assert problem.message.startswith("default.snap_mv: the server would refuse it: refreshable materialized views")
    assert "database default has engine Overlay" in problem.message and "ENGINE = Atomic" in problem.hint
