"""Deploy a project's DDL: create what is missing, in dependency order, idempotently."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.lineage import LineageGraph
from chmv_assets.ddl.models import Project
from chmv_assets.engine.guardrails import check_statement, refused_views
from chmv_assets.errors import DDLError
from chmv_assets.sql.meta import meta_ddl_for


@dataclass
class ApplyResult:
    """What ``chmv apply`` did."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)


def deployment_order(project: Project) -> list[tuple[str, str]]:
    """``(fqn, statement)`` in deploy order: databases, tables, dictionaries, then MVs.

    Tables and dictionaries follow the lineage layers (a dictionary after the table it loads from);
    MVs are created downstream first, so that no insert flows into a target before the MVs reading
    that target are attached.
    """
    graph = LineageGraph(project)
    order = [node for layer in graph.layers for node in layer]
    by_name = {r.fqn: t for r, t in project.tables.items()}
    dictionaries = {r.fqn: d for r, d in project.dictionaries.items()}
    views = {r.fqn: v for r, v in project.views.items()}
    steps = [(db.name, db.statement) for db in project.databases]
    steps += [(n, by_name[n].statement) for n in order if n in by_name]
    steps += [(n, dictionaries[n].statement) for n in order if n in dictionaries]
    steps += [(n, views[n].statement) for n in reversed(order) if n in views]
    return steps


def apply(client: Client, project: Project, log: Callable[[str], None] | None = None) -> ApplyResult:
    """Create every database, table, dictionary and MV of the project that does not exist yet.

    Existing objects are left as they are (drift is reported by the drift check, not overwritten).

    Raises:
        DDLError: An MV to create has POPULATE or OR REPLACE (refused with the reason and the alternative);
            nothing is created.
    """
    say = log or (lambda _msg: None)
    result = ApplyResult()
    databases = {row[0] for row in client.query("SELECT name FROM system.databases").result_rows}
    objects = {f"{d}.{n}" for d, n in client.query("SELECT database, name FROM system.tables").result_rows}
    refused = refused_views(v for r, v in project.views.items() if r.fqn not in objects)
    if refused:
        raise DDLError(refused)
    for sql in meta_ddl_for(project):
        client.command(sql)
    for name, statement in deployment_order(project):
        exists = name in databases if "." not in name else name in objects
        if exists:
            result.existing.append(name)
            continue
        client.command(check_statement(statement))
        say(f"created {name}")
        result.created.append(name)
        (databases if "." not in name else objects).add(name)
    return result
