"""What exists on the server: the physical table of a target, which objects are deployed, and which of the statements
chmv keeps as written (functions, access control, named collections) the server has."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from chmv_assets.ddl.models import KeptKind, KeptObject, ObjectRef, Project
from chmv_assets.errors import ChmvError
from chmv_assets.sql.quoting import quote


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


#: Per kind of statement chmv keeps (views excepted: they are tables), the system table listing what exists, the column
#: naming it and the column holding its statement (None: the server shows none).
_KEPT_CATALOG: dict[KeptKind, tuple[str, str, str | None]] = {
    KeptKind.FUNCTION: ("system.functions", "name", "create_query"),
    KeptKind.NAMED_COLLECTION: ("system.named_collections", "name", "create_query"),
    KeptKind.ROLE: ("system.roles", "name", None),
    KeptKind.USER: ("system.users", "name", None),
    KeptKind.SETTINGS_PROFILE: ("system.settings_profiles", "name", None),
    KeptKind.QUOTA: ("system.quotas", "name", None),
    KeptKind.ROW_POLICY: ("system.row_policies", "name", None),
    KeptKind.GRANT: ("system.grants", "coalesce(user_name, role_name)", None),
    KeptKind.WORKLOAD: ("system.workloads", "name", "create_query"),
    KeptKind.RESOURCE: ("system.resources", "name", "create_query"),
}


@dataclass(frozen=True)
class KeptState:
    """What the server has of the statements chmv keeps (views excepted: :func:`chmv_assets.engine.drift.read_live`).

    Attributes:
        existing: Per kind, the names that exist (a row policy: ``p ON db.t``; a grant: its grantees).
        statements: The server's statement of an object, where it shows one (functions, named collections): by kind
            and name; for access control, ``SHOW CREATE`` of each object of the DDL that exists; for grants,
            ``SHOW GRANTS`` of each grantee, one statement per line.
        unreadable: Per kind, why the server could not be read (the user lacks ``SHOW USERS``…).
    """

    existing: dict[KeptKind, frozenset[str]] = field(default_factory=dict)
    statements: dict[tuple[KeptKind, str], str] = field(default_factory=dict)
    unreadable: dict[KeptKind, str] = field(default_factory=dict)


_SHOW = {
    KeptKind.ROLE: "ROLE",
    KeptKind.USER: "USER",
    KeptKind.SETTINGS_PROFILE: "SETTINGS PROFILE",
    KeptKind.QUOTA: "QUOTA",
    KeptKind.ROW_POLICY: "ROW POLICY",
}


def read_kept(client: Client, kept: Iterable[KeptObject]) -> KeptState:
    """What the server has of ``kept``: one query per kind present (two for access control: the names, then the
    statements of those that exist), none for a kind the DDL does not use."""
    by_kind: dict[KeptKind, list[KeptObject]] = {}
    for obj in kept:
        if obj.kind in _KEPT_CATALOG:
            by_kind.setdefault(obj.kind, []).append(obj)
    state = KeptState()
    for kind, objects in by_kind.items():
        table, name, statement = _KEPT_CATALOG[kind]
        where = " WHERE origin = 'SQLUserDefined'" if kind == KeptKind.FUNCTION else ""
        try:
            rows = client.query(f"SELECT {name}, {statement or 'NULL'} FROM {table}{where}").result_rows
            existing = frozenset(str(r[0]) for r in rows)
            state.existing[kind] = existing
            state.statements.update({(kind, str(r[0])): r[1] for r in rows if r[1]})
            if kind in _SHOW:
                for obj in objects:
                    if obj.names and set(obj.names) <= existing:
                        shown = client.query(f"SHOW CREATE {_SHOW[kind]} {obj.name}").result_rows
                        state.statements[(kind, obj.name)] = "\n".join(str(r[0]) for r in shown)
            elif kind == KeptKind.GRANT:
                for grantee in sorted({g for obj in objects for g in obj.names} & existing):
                    shown = client.query(f"SHOW GRANTS FOR {quote(grantee)}").result_rows
                    state.statements[(kind, grantee)] = "\n".join(str(r[0]) for r in shown)
        except ClickHouseError as err:
            state.unreadable[kind] = " ".join(str(err).split())[:300]
    return state
