"""Schema drift: the live objects (system.tables, system.columns) vs the repo DDL.

Three queries for any number of targets: objects, columns, and the server's own formatting of every
MV SELECT (``formatQuery``), so a SELECT that differs only in whitespace or keyword case is no drift.
:func:`read_live` and :func:`format_queries` are also what the lifecycle planner
(:mod:`chmv_assets.engine.lifecycle.plan`) reads the server with.
"""

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import Column, MaterializedView, ObjectRef, Project, stored_columns
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.types import canonical_type
from chmv_assets.errors import DDLError
from chmv_assets.sql.server_form import same_structure, server_select


@dataclass(frozen=True)
class DriftItem:
    """One difference between the repo and the server.

    Attributes:
        object: ``db.name``.
        kind: ``missing_object``, ``missing_column``, ``extra_column``, ``type_changed``, ``select_changed``,
            ``target_changed``, ``foreign_writer`` (an MV the DDL does not define writes into the target).
        repo: What the DDL says.
        live: What the server has.
    """

    object: str
    kind: str
    repo: str = ""
    live: str = ""
    diff: str = ""

    def __str__(self) -> str:
        return f"{self.object}: {self.kind} (repo: {self.repo or '-'}; live: {self.live or '-'})"


def normalize_type(type_sql: str) -> str:
    """One spelling per column type (``INT`` → ``Int32``, whitespace ignored): :func:`~chmv_assets.ddl.types.canonical_type`."""
    return canonical_type(type_sql)


@dataclass(frozen=True)
class LiveObject:
    """One object on the server, as ``system.tables`` and ``system.columns`` describe it.

    Attributes:
        ref: ``database.name``.
        engine: ``MergeTree``, ``MaterializedView``, ``Dictionary`` …
        create_query: The server's ``create_table_query`` (its own formatting, one line).
        select: The server's formatting of an MV's SELECT (``formatQuery(as_select)``), empty otherwise.
        columns: ``(name, type)`` in table order.
        target: An MV's TO table (or its inner table), None otherwise.
        comment: The table comment.
    """

    ref: ObjectRef
    engine: str
    create_query: str = ""
    select: str = ""
    columns: tuple[tuple[str, str], ...] = ()
    target: ObjectRef | None = None
    comment: str = ""

    def column_types(self) -> dict[str, str]:
        return dict(self.columns)


def read_live(
    client: Client, databases: Iterable[str], *, columns: bool = True, names: Iterable[ObjectRef] | None = None
) -> dict[ObjectRef, LiveObject]:
    """Every object of ``databases`` on the server, in two queries (``system.tables``, ``system.columns``).

    Args:
        columns: Read ``system.columns`` too (else every object's ``columns`` is empty: one query).
        names: Only these objects (of ``databases``).
    """
    databases = sorted(set(databases))
    if not databases:
        return {}
    where = "database IN {dbs:Array(String)}"
    parameters: dict[str, object] = {"dbs": databases}
    if names is not None:
        where += " AND (database, name) IN {refs:Array(Tuple(String, String))}"
        parameters["refs"] = sorted({(r.database, r.name) for r in names})
    found: dict[ObjectRef, list[tuple[str, str]]] = {}
    if columns:
        for d, t, name, type_ in client.query(
            "SELECT database, table, name, type FROM system.columns WHERE database IN {dbs:Array(String)} "
            "ORDER BY database, table, position",
            parameters={"dbs": databases},
        ).result_rows:
            found.setdefault(ObjectRef(database=d, name=t), []).append((name, type_))
    live = {}
    for d, n, engine, query, formatted, target_db, target_name, comment in client.query(
        "SELECT database, name, engine, create_table_query, formatQueryOrNull(as_select), target_database, "
        f"target_table, comment FROM system.tables WHERE {where}",
        parameters=parameters,
    ).result_rows:
        ref = ObjectRef(database=d, name=n)
        target = ObjectRef(database=target_db, name=target_name) if target_name else None
        live[ref] = LiveObject(
            ref, engine, query or "", formatted or "", tuple(found.get(ref, ())), target, comment or ""
        )
    return live


def format_queries(client: Client, queries: Sequence[str], *, single_line: bool = False) -> list[str | None]:
    """The server's own formatting of each query (None where it does not parse), in one round trip."""
    if not queries:
        return []
    function = "formatQuerySingleLineOrNull" if single_line else "formatQueryOrNull"
    return list(
        client.query(
            f"SELECT arrayMap(q -> {function}(q), {{queries:Array(String)}})", parameters={"queries": list(queries)}
        ).result_rows[0][0]
    )


def drift_report(client: Client, project: Project, targets: Iterable[ObjectRef]) -> dict[ObjectRef, list[DriftItem]]:
    """Per target, the drift of the target, the MVs writing it and the tables they read, and the MVs the DDL does
    not define that write into it (:func:`foreign_writers`, kind ``foreign_writer``).

    Args:
        client: An open client.
        project: The parsed DDL (the repo side).
        targets: The MV targets to examine.
    """
    targets = list(targets)
    by_target = {t: involved_objects_of(project, t) for t in targets}
    objects = {o for objs in by_target.values() for o in objs}
    live = read_live(client, {o.database for o in objects})
    if not objects:
        return {t: [] for t in targets}
    views = [project.views[o] for o in sorted(objects, key=str) if o in project.views and o in live]
    formatted = format_queries(client, [server_select(v, project) for v in views])  # as the server stores it
    repo_selects = {v.ref: f or v.select_sql for v, f in zip(views, formatted, strict=True)}
    cache = {obj: _object_drift(project, obj, live.get(obj), repo_selects.get(obj)) for obj in objects}
    foreign = foreign_writers(client, project, targets)
    return {
        t: [item for o in by_target[t] for item in cache[o]] + [foreign_item(v, t) for v in foreign.get(t, ())]
        for t in targets
    }


def foreign_writers(
    client: Client, project: Project, targets: Iterable[ObjectRef]
) -> dict[ObjectRef, tuple[ObjectRef, ...]]:
    """Per target (only those written so), the MVs on the server, in any database, that write into it and that the
    DDL directory does not define: another team's MV, a leftover. One query (``system.tables``' ``target_database``
    and ``target_table``) for any number of targets; chmv's own objects (``_chmv_…``) are not counted.

    A rebuild replaces a partition with what the DDL's MVs yield: the rows such an MV wrote would be lost, and nothing
    chmv reads can recompute them (the rebuild planner refuses unless forced: :func:`describe_foreign`).
    """
    refs = sorted({(t.database, t.name) for t in targets})
    if not refs:
        return {}
    found: dict[ObjectRef, list[ObjectRef]] = {}
    for database, name, target_database, target_table in client.query(
        "SELECT database, name, target_database, target_table FROM system.tables "
        "WHERE engine = 'MaterializedView' AND (target_database, target_table) IN {refs:Array(Tuple(String, String))} "
        "ORDER BY database, name",
        parameters={"refs": refs},
    ).result_rows:
        view = ObjectRef(database=database, name=name)
        if view in project.views or name.startswith("_chmv_"):
            continue
        found.setdefault(ObjectRef(database=target_database, name=target_table), []).append(view)
    return {t: tuple(vs) for t, vs in found.items()}


def foreign_item(view: ObjectRef, target: ObjectRef) -> DriftItem:
    """The drift item of an MV the DDL does not define that writes into ``target``."""
    return DriftItem(
        view.fqn, "foreign_writer", repo="not in the DDL directory", live=f"MaterializedView writing {target.fqn}"
    )


def describe_foreign(target: ObjectRef, views: Sequence[ObjectRef]) -> str:
    """Why a rebuild of ``target`` is refused while MVs the DDL does not define write into it, and what to do."""
    names = ", ".join(v.fqn for v in views)
    one = len(views) == 1
    return (
        f"{names} {'writes' if one else 'write'} into {target.fqn} on the server and "
        f"{'is' if one else 'are'} not in the DDL directory (a writer outside the DDL: another team's MV?): a rebuild "
        "replaces the partition with what the DDL's MVs yield, so the rows it wrote would be lost, and nothing chmv "
        f"reads can recompute them. To proceed: add {names} to the DDL directory (its rows are then rebuilt with the "
        "others' through its own SELECT), or drop it if it should not write there (`chmv plan --allow-drop` lists the "
        "drop where it lives in a database of the DDL), or rebuild with force (run config force: true, chmv rebuild "
        "--force) to replace its rows with nothing"
    )


def apply_pending(client: Client, project: Project, targets: Iterable[ObjectRef]) -> dict[ObjectRef, list[DriftItem]]:
    """Per target, the MVs writing it whose live SELECT or TO differs from the DDL directory: a change waiting for
    ``chmv apply``.

    Parity and rebuilds recompute a target with the MVs' SELECT of the DDL directory; while such a change is pending,
    the live MV runs another one, and history recomputed with the repository's SELECT would disagree with every row
    the live MV writes (and a parity failure would be false). Two queries for any number of targets: the MVs' rows
    of ``system.tables`` and the server's formatting of their repository SELECT. A missing MV is no pending change
    here (drift reports it); a refreshable MV recomputes with its live SELECT and is left out.
    """
    targets = list(targets)
    views = {v.ref: v for t in targets for v in project.views_into(t) if not v.refreshable}
    pending: dict[ObjectRef, list[DriftItem]] = {t: [] for t in targets}
    if not views:
        return pending
    live = read_live(client, {r.database for r in views}, columns=False, names=views)
    present = [v for ref, v in views.items() if ref in live and live[ref].engine == "MaterializedView"]
    texts = format_queries(client, [server_select(v, project) for v in present])  # as the server stores it
    formatted = dict(zip((v.ref for v in present), texts, strict=True))
    for view in present:
        items = _object_drift(project, view.ref, live[view.ref], formatted[view.ref] or view.select_sql)
        pending[view.writes_to] += [i for i in items if i.kind in ("select_changed", "target_changed")]
    return pending


def describe_pending(items: Iterable[DriftItem], ddl_dir: str | None = None) -> str:
    """The refusal of a rebuild or a parity check while changes wait for ``chmv apply``, naming each change."""
    changes = []
    for item in items:
        if item.kind == "target_changed":
            changes.append(f"{item.object} writes to {item.live} on the server, to {item.repo} in the DDL")
        else:
            changes.append(f"{item.object}'s live SELECT differs from the DDL (live: {item.live}; DDL: {item.repo})")
    where = f" --ddl-dir {ddl_dir}" if ddl_dir else ""
    return (
        "apply pending: " + "; ".join(changes) + ". The live MV runs another SELECT than the DDL directory, so its "
        "history is neither checked nor recomputed with the DDL's SELECT until the change is applied: run the "
        f"chmv_apply job (or `chmv plan{where}`, then `chmv apply{where}`), which re-derives the history with the new "
        "SELECT; or revert the DDL file"
    )


def pending_refusals(client: Client, project: Project, target: ObjectRef) -> tuple[str, ...]:
    """The rebuild planner's refusal of ``target`` while a change of its MVs waits for ``chmv apply`` (empty: none)."""
    items = apply_pending(client, project, [target])[target]
    return (describe_pending(items, str(project.ddl_dir)),) if items else ()


def select_changed(repo_select: str | None, live_select: str) -> bool:
    """The server's formatting of the repo SELECT differs from the live one (whitespace, a ``;`` and redundant
    parentheses aside: :func:`~chmv_assets.sql.server_form.same_structure`)."""
    if repo_select is None or not live_select or _canon(repo_select) == _canon(live_select):
        return False
    return not same_structure(repo_select, live_select)


def select_diff(repo_select: str, live_select: str) -> str:
    """A unified diff of two formatted SELECTs, live → repo."""
    return "\n".join(
        difflib.unified_diff(live_select.splitlines(), repo_select.splitlines(), "live", "repo", lineterm="")
    )


def involved_objects_of(project: Project, target: ObjectRef) -> list[ObjectRef]:
    objects = [target]
    for view in project.views_into(target):
        objects.append(view.ref)
        objects.extend(view.source_refs)
        objects.extend(view.dictionaries)
    return list(dict.fromkeys(objects))


def _object_drift(
    project: Project, obj: ObjectRef, live: LiveObject | None, repo_select: str | None
) -> list[DriftItem]:
    if live is None:
        kind = "view" if obj in project.views else "dictionary" if obj in project.dictionaries else "table"
        return [DriftItem(obj.fqn, "missing_object", repo=f"{kind} defined in the DDL", live="does not exist")]
    items: list[DriftItem] = []
    view = project.views.get(obj)
    if view is not None and live.engine == "MaterializedView":
        if repo_select is not None and select_changed(repo_select, live.select):
            items.append(
                DriftItem(
                    obj.fqn,
                    "select_changed",
                    repo=_one_line(repo_select),
                    live=_one_line(live.select),
                    diff=select_diff(repo_select, live.select),
                )
            )
        live_target = live.target
        if live_target is None:
            live_view = _live_view(live.create_query, obj)
            live_target = live_view.target if live_view is not None else None
        if view.target is not None and live_target is not None and live_target != view.target:
            items.append(DriftItem(obj.fqn, "target_changed", repo=view.target.fqn, live=live_target.fqn))
        return items
    columns = live.column_types()
    repo_columns: tuple[Column, ...] = ()
    table = project.table(obj)
    if table is not None:
        repo_columns = table.columns
    elif obj in project.dictionaries:
        repo_columns = project.dictionaries[obj].columns
    if not repo_columns:
        return items  # an external table: existence is all the repo knows
    repo = {c.name: c.type for c in stored_columns(repo_columns)}  # a Nested column: its Array columns
    for name, type_ in repo.items():
        if name not in columns:
            items.append(DriftItem(obj.fqn, "missing_column", repo=f"{name} {type_}", live="absent"))
        elif type_ and normalize_type(type_) != normalize_type(columns[name]):
            items.append(DriftItem(obj.fqn, "type_changed", repo=f"{name} {type_}", live=f"{name} {columns[name]}"))
    for name, type_ in columns.items():
        if name not in repo:
            items.append(DriftItem(obj.fqn, "extra_column", repo="absent", live=f"{name} {type_}"))
    return items


def _live_view(create_query: str, obj: ObjectRef) -> MaterializedView | None:
    """The server's CREATE statement of an MV, read by the same parser as the DDL directory (None if it cannot)."""
    try:
        parsed = parse_statement(create_query, default_database=obj.database, origin=f"{obj.fqn} (server)")
    except DDLError:
        return None
    return parsed if isinstance(parsed, MaterializedView) else None


def _canon(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";")


def _one_line(sql: str) -> str:
    text = _canon(sql)
    return text if len(text) <= 200 else text[:197] + "..."
