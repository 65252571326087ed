"""Helpers of the cluster tests: the ON CLUSTER / Replicated* fixture, a snapshot of what a replica shows, golden files.

No test here has a cluster: ``tests/unit/sql/golden/cluster/ddl`` is deployed nowhere, ``live.sql`` is what
``system.tables`` of one replica would show after ``chmv apply`` of it, and the plans are made from that snapshot
(:func:`chmv_assets.engine.lifecycle.planner.plan_from_state`) with the same code ``chmv plan`` runs against a server.
The statements chmv would send are written into golden files: reading them is the review.
"""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import MaterializedView, Table
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.sql_text import split_statements
from chmv_assets.engine.drift import LiveObject
from chmv_assets.engine.lifecycle.plan import LifecyclePlan
from chmv_assets.engine.lifecycle.planner import ServerState

from support.paths import GOLDEN

CLUSTER = GOLDEN / "cluster"
CLUSTER_DDL = CLUSTER / "ddl"
LIVE_SQL = CLUSTER / "live.sql"
#: Set to 1 to (re)write the golden files from what the code renders now; then read the diff before committing.
UPDATE_ENV = "CHMV_UPDATE_GOLDEN"


def copy_cluster_ddl(root: Path) -> Path:
    """A copy of the cluster fixture's DDL directory under ``root``, to edit."""
    ddl = root / "ddl"
    shutil.copytree(CLUSTER_DDL, ddl)
    return ddl


def load_cluster(ddl: Path = CLUSTER_DDL) -> LoadedProject:
    return load(ddl)


def live_state(loaded: LoadedProject, live_sql: str | None = None) -> ServerState:
    """The server state the planner would read from a replica holding ``live_sql`` (default ``live.sql``).

    The repo side is given as the server would format it: the repo statement itself (the fixture writes both sides
    in the same spelling, as the server's formatting makes them), and each MV's repo SELECT.
    """
    live: dict = {}
    for statement in split_statements(live_sql if live_sql is not None else LIVE_SQL.read_text(encoding="utf-8")):
        obj = parse_statement(statement.text, default_database="shop", origin="live.sql")
        if isinstance(obj, MaterializedView):
            live[obj.ref] = LiveObject(obj.ref, "MaterializedView", statement.text, obj.select_sql, (), obj.target)
        elif isinstance(obj, Table):
            assert obj.engine is not None
            columns = tuple((c.name, c.type) for c in obj.columns)
            live[obj.ref] = LiveObject(obj.ref, obj.engine.name, statement.text, "", columns)
    project = loaded.project
    formatted = {r: t.statement for r, t in project.tables.items() if r in live}
    selects = {r: v.select_sql for r, v in project.views.items() if r in live}
    return ServerState(frozenset({"shop"}), live, formatted, selects)


def render_plan(plan: LifecyclePlan) -> str:
    """Every change of a plan: its headline and reasons as comments, then each statement in full."""
    lines = [f"-- {plan.summary()}"]
    for change in plan.changes:
        lines += ["", f"-- {change.headline()}"]
        lines += [f"--   {reason}" for reason in change.reasons]
        if change.blocked:
            lines.append(f"--   BLOCKED: {change.blocked}")
        lines += [f"{sql};" for sql in change.statements]
    lines += [f"-- note: {note}" for note in plan.notes]
    return "\n".join(lines) + "\n"


def section(title: str, statements: list[str]) -> str:
    """A titled block of statements, each ending with ``;``."""
    return "\n".join([f"-- {title}", *(f"{sql};" for sql in statements)]) + "\n"


def assert_golden(name: str, text: str) -> None:
    """``text`` equals the golden file ``name`` (rewritten instead when ``CHMV_UPDATE_GOLDEN=1``)."""
    path = CLUSTER / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: run with {UPDATE_ENV}=1, then read it"
    golden = path.read_text(encoding="utf-8")
    if text != golden:
        diff = "\n".join(difflib.unified_diff(golden.splitlines(), text.splitlines(), "golden", "now", lineterm=""))
        raise AssertionError(f"{name} differs from what the code renders ({UPDATE_ENV}=1 rewrites it):\n{diff}")


def golden_statements() -> list[tuple[str, str]]:
    """``(golden file, statement)`` for every statement of every golden file."""
    found = []
    for path in sorted(CLUSTER.glob("*.sql")):
        if path.name == "live.sql":
            continue
        found += [(path.name, s.text) for s in split_statements(path.read_text(encoding="utf-8"))]
    return found
