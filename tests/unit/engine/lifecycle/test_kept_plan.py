"""Plans of the statements chmv keeps as written, from a server state written down (no server here: access control
exists on a server only): created when missing, in dependency order; 'apply by hand' when the server's differs."""

from __future__ import annotations

from chmv_assets.ddl.models import KeptKind
from chmv_assets.engine.catalog import KeptState
from chmv_assets.engine.drift import LiveObject
from chmv_assets.engine.lifecycle.plan import ACCESS_LAYER, Action
from chmv_assets.engine.lifecycle.planner import ServerState, plan_from_state, same_kept

from support.ddl import load_ddl, ref

DDL = """
CREATE DATABASE IF NOT EXISTS d;
CREATE TABLE d.t (a UInt64, k String) ENGINE = MergeTree ORDER BY a;
CREATE FUNCTION IF NOT EXISTS clean ON CLUSTER main AS (p) -> lower(p);
CREATE NAMED COLLECTION broker AS kafka_broker_list = 'k:9092', kafka_format = 'JSONEachRow';
CREATE VIEW d.v AS SELECT a FROM d.t WHERE a > 0;
CREATE ROLE IF NOT EXISTS reader, writer;
CREATE USER IF NOT EXISTS analyst IDENTIFIED WITH sha256_password BY 'secret' DEFAULT ROLE reader;
GRANT SELECT ON d.t TO reader, analyst;
CREATE ROW POLICY tenant ON d.t FOR SELECT USING k = currentUser() TO reader;
"""


def state(
    loaded,
    *,
    live_kept: KeptState | None = None,
    view_select: str = "SELECT a FROM d.t WHERE a > 0",
    with_view: bool = True,
) -> ServerState:
    table = loaded.project.tables[ref("d.t")]
    live = {table.ref: LiveObject(table.ref, "MergeTree", table.statement, "", (("a", "UInt64"), ("k", "String")))}
    if with_view:
        live[ref("d.v")] = LiveObject(ref("d.v"), "View", "CREATE VIEW d.v (`a` UInt64) AS …", view_select)
    kept = {(k.kind, k.name): k.statement for k in loaded.project.kept}  # as the server formats them:
    kept[(KeptKind.FUNCTION, "clean")] = "CREATE FUNCTION IF NOT EXISTS clean ON CLUSTER main AS p -> lower(p)"
    return ServerState(
        frozenset({"d"}),
        live,
        {table.ref: table.statement},
        {ref("d.v"): "SELECT a FROM d.t WHERE a > 0"},
        kept=live_kept or KeptState(),
        kept_formatted=kept,
    )


def same_server(loaded) -> KeptState:
    """What a server shows when everything of the DDL exists as written (it hides a user's password)."""
    existing = {
        KeptKind.FUNCTION: frozenset({"clean"}),
        KeptKind.NAMED_COLLECTION: frozenset({"broker"}),
        KeptKind.ROLE: frozenset({"reader", "writer"}),
        KeptKind.USER: frozenset({"analyst", "default"}),
        KeptKind.GRANT: frozenset({"reader", "analyst"}),
        KeptKind.ROW_POLICY: frozenset({"tenant ON d.t"}),
    }
    statements = {
        (KeptKind.FUNCTION, "clean"): "CREATE FUNCTION clean AS p -> lower(p)",
        (KeptKind.NAMED_COLLECTION, "broker"): "CREATE NAMED COLLECTION broker AS kafka_broker_list = '[HIDDEN]', "
        "kafka_format = '[HIDDEN]'",
        (KeptKind.ROLE, "reader, writer"): "CREATE ROLE reader, writer",
        (KeptKind.USER, "analyst"): "CREATE USER analyst IDENTIFIED WITH sha256_password DEFAULT ROLE reader",
        (
            KeptKind.ROW_POLICY,
            "tenant ON d.t",
        ): "CREATE ROW POLICY tenant ON d.t FOR SELECT USING k = currentUser() TO reader",
        (KeptKind.GRANT, "reader"): "GRANT SELECT ON d.t TO reader",
        (KeptKind.GRANT, "analyst"): "GRANT SELECT ON d.t TO analyst\nGRANT reader TO analyst",
    }
    return KeptState(existing=existing, statements=statements)


def test_a_server_without_them_gets_each_created_in_dependency_order(tmp_path):
    loaded = load_ddl(tmp_path, DDL)
    plan = plan_from_state(state(loaded, with_view=False), loaded)
    created = [(c.kind, c.name) for c in plan.changes if c.action == Action.CREATE]
    assert created == [
        ("named collection", "broker"),
        ("function", "clean"),
        ("plain view", "d.v"),
        ("role", "reader, writer"),
        ("user", "analyst"),
        ("row policy", "tenant ON d.t"),
        ("grant", "GRANT SELECT ON d.t TO reader, analyst"),
    ]
    assert {c.layer for c in plan.changes if c.kind in ("role", "user", "grant", "row policy")} == {ACCESS_LAYER}
    text = plan.describe()
    assert text.index("functions and named collections") < text.index("layer 0") < text.index("access control")
    assert "+ clean: create function" in text and "CREATE FUNCTION IF NOT EXISTS clean ON CLUSTER main" in text


def test_a_server_with_them_as_written_has_no_change(tmp_path):
    loaded = load_ddl(tmp_path, DDL)
    plan = plan_from_state(state(loaded, live_kept=same_server(loaded)), loaded)
    assert plan.changes == () and plan.notes == ()


def test_what_differs_is_for_a_human_to_apply(tmp_path):
    loaded = load_ddl(tmp_path, DDL)
    server = same_server(loaded)
    server.statements[(KeptKind.FUNCTION, "clean")] = "CREATE FUNCTION clean AS p -> upper(p)"
    server.statements[(KeptKind.NAMED_COLLECTION, "broker")] = (
        "CREATE NAMED COLLECTION broker AS kafka_broker_list = '[HIDDEN]'"
    )
    server.existing[KeptKind.ROLE] = frozenset({"reader"})
    server.statements[(KeptKind.GRANT, "analyst")] = "GRANT reader TO analyst"
    plan = plan_from_state(state(loaded, live_kept=server, view_select="SELECT a FROM d.t"), loaded)
    by_name = {c.name: c for c in plan.changes}
    assert by_name["clean"].action == Action.MANUAL and "CREATE OR REPLACE FUNCTION" in by_name["clean"].blocked
    assert by_name["broker"].action == Action.MANUAL  # a named collection is compared by its keys
    assert by_name["d.v"].action == Action.MANUAL and "+SELECT a FROM d.t WHERE a > 0" in by_name["d.v"].diff
    assert (
        by_name["reader, writer"].action == Action.MANUAL and "missing: writer" in by_name["reader, writer"].reasons[0]
    )
    assert by_name["GRANT SELECT ON d.t TO reader, analyst"].action == Action.CREATE  # not granted to analyst yet
    assert "analyst" not in by_name and "tenant ON d.t" not in by_name
    assert plan.blocked and plan.exit_code == 3


def test_what_the_server_does_not_let_chmv_read_is_a_note(tmp_path):
    loaded = load_ddl(tmp_path, DDL)
    server = same_server(loaded)
    server.unreadable[KeptKind.USER] = "Not enough privileges (ACCESS_DENIED)"
    plan = plan_from_state(state(loaded, live_kept=server), loaded)
    assert plan.changes == ()
    assert plan.notes == (
        "user analyst: not compared: the server's users cannot be read (Not enough privileges (ACCESS_DENIED))",
    )


def test_same_kept_ignores_what_the_server_rewrites():
    assert same_kept(
        KeptKind.FUNCTION, "CREATE FUNCTION IF NOT EXISTS f ON CLUSTER 'c' AS x -> x", "CREATE FUNCTION f AS x -> x"
    )
    assert same_kept(
        KeptKind.USER,
        "CREATE USER u IDENTIFIED WITH plaintext_password BY 'p' DEFAULT ROLE r",
        "CREATE USER u IDENTIFIED WITH plaintext_password DEFAULT ROLE r",
    )
    assert not same_kept(KeptKind.USER, "CREATE USER u DEFAULT ROLE r", "CREATE USER u DEFAULT ROLE s")
