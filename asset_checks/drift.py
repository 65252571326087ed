"""Schema drift: the live objects (system.tables, system.columns) vs the repo DDL, with a readable diff.

Three queries for any number of targets: objects, columns, and the server's own formatting of every
MV SELECT (``formatQuery``), so a SELECT that differs only in whitespace or keyword case is no drift.
"""

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.models import Column, ObjectRef, Project

_TYPE_ALIASES = {"int": "Int32", "integer": "Int32", "bigint": "Int64", "smallint": "Int16", "tinyint": "Int8",
                 "text": "String", "varchar": "String", "char": "String", "float": "Float32", "real": "Float32",
                 "double": "Float64", "bool": "Bool", "boolean": "Bool", "date": "Date", "datetime": "DateTime",
                 "string": "String", "uuid": "UUID"}  # fmt: skip
_TO = re.compile(r"MATERIALIZED\s+VIEW\s+\S+\s+TO\s+(\S+)", re.IGNORECASE)


@dataclass(frozen=True)
class DriftItem:
    """One difference between the repo and the server.

    Attributes:
        object: ``db.name``.
        kind: ``missing_object``, ``missing_column``, ``extra_column``, ``type_changed``, ``select_changed``,
            ``target_changed``.
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
    """A column type without whitespace, with SQL aliases mapped to ClickHouse names (``INT`` → ``Int32``)."""
    compact = re.sub(r"\s+", "", type_sql)
    return _TYPE_ALIASES.get(compact.lower(), compact).replace('"', "'")


def drift_report(client: Client, project: Project, targets: Iterable[ObjectRef]) -> dict[ObjectRef, list[DriftItem]]:
    """Per target, the drift of the target, the MVs writing it and the tables they read.

    Args:
        client: An open client.
        project: The parsed DDL (the repo side).
        targets: The MV targets to examine.
    """
    targets = list(targets)
    by_target = {t: involved_objects_of(project, t) for t in targets}
    objects = {o for objs in by_target.values() for o in objs}
    databases = sorted({o.database for o in objects})
    if not databases:
        return {t: [] for t in targets}
    live_objects = {
        ObjectRef(database=d, name=n): (engine, query or "", formatted or "")
        for d, n, engine, query, formatted in client.query(
            "SELECT database, name, engine, create_table_query, formatQueryOrNull(as_select) FROM system.tables "
            "WHERE database IN {dbs:Array(String)}",
            parameters={"dbs": databases},
        ).result_rows
    }
    live_columns: dict[ObjectRef, dict[str, str]] = {}
    for d, t, name, type_ in client.query(
        "SELECT database, table, name, type FROM system.columns WHERE database IN {dbs:Array(String)}",
        parameters={"dbs": databases},
    ).result_rows:
        live_columns.setdefault(ObjectRef(database=d, name=t), {})[name] = type_
    views = [project.views[o] for o in sorted(objects, key=str) if o in project.views and o in live_objects]
    repo_selects: dict[ObjectRef, str] = {}
    if views:
        formatted = client.query(
            "SELECT arrayMap(q -> formatQueryOrNull(q), {selects:Array(String)})",
            parameters={"selects": [v.select_sql for v in views]},
        ).result_rows[0][0]
        repo_selects = {v.ref: f or v.select_sql for v, f in zip(views, formatted, strict=True)}
    cache: dict[ObjectRef, list[DriftItem]] = {}
    for obj in objects:
        cache[obj] = _object_drift(project, obj, live_objects.get(obj), live_columns.get(obj, {}), repo_selects.get(obj))
    return {t: [item for o in by_target[t] for item in cache[o]] for t in targets}


def involved_objects_of(project: Project, target: ObjectRef) -> list[ObjectRef]:
    objects = [target]
    for view in project.views_into(target):
        objects.append(view.ref)
        objects.extend(view.source_refs)
        objects.extend(view.dictionaries)
    return list(dict.fromkeys(objects))


def _object_drift(project: Project, obj: ObjectRef, live: tuple[str, str, str] | None,
                  columns: dict[str, str], repo_select: str | None) -> list[DriftItem]:  # fmt: skip
    if live is None:
        kind = "view" if obj in project.views else "dictionary" if obj in project.dictionaries else "table"
        return [DriftItem(obj.fqn, "missing_object", repo=f"{kind} defined in the DDL", live="does not exist")]
    items: list[DriftItem] = []
    engine, create_query, live_select = live
    view = project.views.get(obj)
    if view is not None and engine == "MaterializedView":
        if repo_select is not None and live_select and _canon(repo_select) != _canon(live_select):
            diff = "\n".join(difflib.unified_diff(live_select.splitlines(), repo_select.splitlines(),
                                                  "live", "repo", lineterm=""))  # fmt: skip
            items.append(DriftItem(obj.fqn, "select_changed", repo=_one_line(repo_select),
                                   live=_one_line(live_select), diff=diff))  # fmt: skip
        match = _TO.search(create_query)
        if view.target is not None and match:
            live_target = match.group(1).replace("`", "")
            if live_target != view.target.fqn:
                items.append(DriftItem(obj.fqn, "target_changed", repo=view.target.fqn, live=live_target))
        return items
    repo_columns: tuple[Column, ...] = ()
    table = project.table(obj)
    if table is not None:
        repo_columns = table.columns
    elif obj in project.dictionaries:
        repo_columns = project.dictionaries[obj].columns
    if not repo_columns:
        return items  # an external table: existence is all the repo knows
    repo = {c.name: c.type for c in repo_columns}
    for name, type_ in repo.items():
        if name not in columns:
            items.append(DriftItem(obj.fqn, "missing_column", repo=f"{name} {type_}", live="absent"))
        elif type_ and normalize_type(type_) != normalize_type(columns[name]):
            items.append(DriftItem(obj.fqn, "type_changed", repo=f"{name} {type_}", live=f"{name} {columns[name]}"))
    for name, type_ in columns.items():
        if name not in repo:
            items.append(DriftItem(obj.fqn, "extra_column", repo="absent", live=f"{name} {type_}"))
    return items


def _canon(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip().rstrip(";")


def _one_line(sql: str) -> str:
    text = _canon(sql)
    return text if len(text) <= 200 else text[:197] + "..."


def drift_markdown(items: list[DriftItem]) -> str:
    """A table of the differences, and a unified diff per changed SELECT."""
    if not items:
        return "no drift: the server matches the DDL directory"
    lines = ["| object | drift | repo | live |", "|---|---|---|---|"]
    lines += [f"| {i.object} | {i.kind} | {i.repo.replace('|', '/')} | {i.live.replace('|', '/')} |" for i in items]
    for item in items:
        if item.diff:
            lines += ["", f"**{item.object}** SELECT (live → repo):", "```diff", item.diff, "```"]
    return "\n".join(lines)


__all__ = ["DriftItem", "drift_markdown", "drift_report", "involved_objects_of", "normalize_type"]
