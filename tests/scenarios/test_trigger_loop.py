"""A real trigger loop in the DDL (MVs firing on what they write) is one problem naming its MVs, and only the loop is
left out: lineage prints the rest with the loop marked, ``chmv plan`` / ``chmv apply`` refuse the loop's MVs alone and
deploy everything else, the code location builds every other asset (docs/any-schema.md, "Every MV ClickHouse
accepts")."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import textwrap
from pathlib import Path

import pytest
from dagster import AssetKey

from chmv_assets.cli import main
from chmv_assets.ddl.loader import load
from chmv_assets.engine.lifecycle.plan import Action
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.orchestration.definitions import build_definitions
from resources.clickhouse import ClickHouseResource

pytestmark = pytest.mark.worker_seconds(15)

#: ok_mv reads the loop's table through IN (a read: never fires it); y_to_z fires on the loop's table.
LOOP = """
CREATE DATABASE {db} ENGINE = Atomic;
CREATE TABLE {db}.src (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE {db}.x (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE {db}.y (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW {db}.x_to_y TO {db}.y AS SELECT ts, k FROM {db}.x;
CREATE MATERIALIZED VIEW {db}.y_to_x TO {db}.x AS SELECT ts, k + 1 AS k FROM {db}.y;
CREATE TABLE {db}.ok (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW {db}.ok_mv TO {db}.ok AS SELECT ts, k FROM {db}.src WHERE k IN (SELECT k FROM {db}.x);
CREATE TABLE {db}.z (ts DateTime, k UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE MATERIALIZED VIEW {db}.y_to_z TO {db}.z AS SELECT ts, k FROM {db}.y;
"""


def chmv(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def ddl_dir(root: Path, db: str, text: str = LOOP) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.sql").write_text(textwrap.dedent(text.format(db=db)))
    (root / "chmv.toml").write_text(f'default_database = "{db}"\n')
    return root


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> ClickHouseResource:
    """One embedded engine for the module; each test works in a database of its own."""
    return ClickHouseResource(dsn=f"chdb://{tmp_path_factory.mktemp('loop') / 'chdb'}")


def names(client, db: str) -> set[str]:
    rows = client.query(f"SELECT name FROM system.tables WHERE database = '{db}'").result_rows
    return {r[0] for r in rows}


def test_lineage_plan_and_apply_leave_the_loop_out_and_do_the_rest(engine, tmp_path: Path) -> None:
    ddl = ddl_dir(tmp_path / "ddl", "lp")
    code, out, err = chmv("lineage", "--ddl-dir", str(ddl), "--format", "json")
    data = json.loads(out)
    assert code == 2 and sorted(v["name"] for v in data["views"]) == ["lp.ok_mv", "lp.y_to_z"]
    assert [v["name"] for v in data["loops"][0]["views"]] == ["lp.x_to_y", "lp.y_to_x"]
    assert err.startswith("1 problem in the DDL directory; its MVs are left out, the rest is loaded\n")
    assert "(a trigger loop: lp.x_to_y at a.sql:6, lp.y_to_x at a.sql:7)" in err

    dsn = engine.resolved_dsn
    code, out, _ = chmv("plan", "--ddl-dir", str(ddl), "--dsn", dsn)
    assert code == 3 and "2 refused (a trigger loop; the rest is applied)" in out, out
    assert "✗ lp.x_to_y: refused, the rest is applied (view of a trigger loop)" in out
    code, out, err = chmv("apply", "--ddl-dir", str(ddl), "--dsn", dsn)
    assert code == 2, out + err
    assert "refused (a trigger loop, not deployed): lp.x_to_y, lp.y_to_x" in out and "cycle in the MV graph" in err
    with engine.get_client() as client:
        assert names(client, "lp") == {"src", "ok", "ok_mv", "x", "y", "z", "y_to_z"}
        client.command("INSERT INTO lp.src VALUES ('2026-06-01 10:00:00', 1)")  # no TOO_DEEP_RECURSION: no loop
        client.command("INSERT INTO lp.x VALUES ('2026-06-01 10:00:00', 1)")
        client.command("INSERT INTO lp.y VALUES ('2026-06-01 10:00:00', 2)")
        client.command("INSERT INTO lp.src VALUES ('2026-06-01 11:00:00', 1)")
        assert client.query("SELECT count() FROM lp.ok").result_rows == [(1,)]  # read through IN
        assert client.query("SELECT k FROM lp.z").result_rows == [(2,)]  # fired on the loop's table
    code, out, _ = chmv("plan", "--ddl-dir", str(ddl), "--dsn", dsn)  # what is left: the loop, refused
    assert code == 3 and out.startswith(f"chmv plan of {ddl}: 2 changes (2 refused)"), out


def test_a_loop_the_server_runs_is_a_note_and_a_change_to_it_is_refused(engine, tmp_path: Path) -> None:
    """The server may run the loop already (made by hand): chmv leaves it as it is, says so, refuses to change it."""
    ddl = ddl_dir(tmp_path / "ddl", "lh")
    with engine.get_client() as client:
        for statement in LOOP.format(db="lh").split(";"):
            if statement.strip():
                client.command(statement)
        plan = plan_lifecycle(client, load(ddl))
        assert plan.changes == ()
        assert any("the server runs the trigger loop lh.x -> lh.x_to_y" in n for n in plan.notes), plan.notes
        changed = ddl_dir(tmp_path / "changed", "lh", LOOP.replace("k + 1 AS k", "k + 2 AS k"))
        (change,) = plan_lifecycle(client, load(changed)).changes
    assert (change.action, change.ref.fqn, change.statements) == (Action.REFUSED, "lh.y_to_x", ())
    assert change.reasons == ("differs from the server's: changing it would deploy the loop",)


def test_the_code_location_builds_every_other_asset_and_names_the_loop(engine, tmp_path: Path, caplog) -> None:
    loaded = load(ddl_dir(tmp_path / "ddl", "lj"))
    with caplog.at_level(logging.WARNING, logger="chmv_assets.orchestration.definitions"):
        defs = build_definitions(loaded, clickhouse=engine)
    assert "cycle in the MV graph: lj.x -> lj.x_to_y -> lj.y -> lj.y_to_x -> lj.x" in caplog.text
    graph = defs.get_repository_def().asset_graph
    materializable = {k for k in graph.get_all_asset_keys() if graph.get(k).is_materializable}
    assert materializable == {AssetKey(["lj", "ok"]), AssetKey(["lj", "z"])}  # the loop's targets are not targets
    assert graph.get(AssetKey(["lj", "z"])).parent_keys == {AssetKey(["lj", "y"])}
    result = defs.get_job_def("chmv_apply").execute_in_process(raise_on_error=False)
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    description = failure.event_specific_data.user_failure_data.description
    assert "refused (a trigger loop, not deployed): lj.x_to_y, lj.y_to_x" in description
    assert "cycle in the MV graph" in description
    with engine.get_client() as client:  # everything else was applied
        assert names(client, "lj") == {"src", "ok", "ok_mv", "x", "y", "z", "y_to_z"}
