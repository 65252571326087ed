"""What exists on the server: the physical table of a target, and which objects are deployed."""

from __future__ import annotations

from collections.abc import Iterable

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.errors import ChmvError


def live_table(client: Client, project: Project, target: ObjectRef) -> ObjectRef:
    """The table that physically holds a target's rows: itself, or the inner table of an MV without TO."""
    view = project.views.get(target)
    if view is None or view.target is not None:
        return target
    rows = client.query(
        "SELECT inner_t.name FROM system.tables AS mv INNER JOIN system.tables AS inner_t "
        "ON inner_t.database = mv.database AND inner_t.name IN (concat('.inner_id.', toString(mv.uuid)), "
        "concat('.inner.', mv.name)) WHERE mv.database = {db:String} AND mv.name = {name:String}",
        parameters={"db": target.database, "name": target.name},
    ).result_rows
    if not rows:
        raise ChmvError(f"inner table of {target.fqn} not found: is the MV deployed? run `chmv apply`")
    return ObjectRef(database=target.database, name=rows[0][0])


def inner_table_names(views: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str], str]:
    """``(database, inner table) → MV name`` for MVs without TO given as ``(database, name, uuid)``: the inner table
    is ``.inner_id.<uuid>`` (Atomic databases) or ``.inner.<name>`` (Ordinary ones)."""
    names = {}
    for database, name, uuid in views:
        names[(database, f".inner_id.{uuid}")] = name
        names[(database, f".inner.{name}")] = name
    return names


def existing_objects(client: Client, refs: Iterable[ObjectRef]) -> set[ObjectRef]:
    """Which of ``refs`` exist on the server (tables, views, dictionaries), in one query."""
    refs = set(refs)
    if not refs:
        return set()
    rows = client.query(
        "SELECT database, name FROM system.tables WHERE database IN {dbs:Array(String)} AND name IN {names:Array(String)}",
        parameters={"dbs": sorted({r.database for r in refs}), "names": sorted({r.name for r in refs})},
    ).result_rows
    found = {ObjectRef(database=d, name=n) for d, n in rows}
    return refs & found
