"""Deploy a project's DDL: create what is missing, in dependency order, idempotently."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.lineage import LineageGraph
from chmv_assets.ddl.models import KeptKind, Project
from chmv_assets.engine import records
from chmv_assets.engine.catalog import KeptState, read_kept
from chmv_assets.engine.lifecycle.refusals import check_statement, refused_views
from chmv_assets.errors import DDLError

_LOG = logging.getLogger(__name__)


@dataclass
class ApplyResult:
    """What ``chmv apply`` did."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Step:
    """One CREATE of a deployment.

    Attributes:
        name: How it is reported: a database's name, ``db.name``, or a kept statement's label (``function f``).
        statement: What runs.
        kept: The kept statement's kind (functions, access control…), None for databases and tables.
        key: What exists on the server when it was deployed: a database's name, ``db.name``, a kept statement's name.
    """

    name: str
    statement: str
    kept: KeptKind | None = None
    key: str = ""


def deployment_steps(project: Project) -> list[Step]:
    """Every CREATE of the project in deploy order.

    Named collections and functions first (a function before the functions and views calling it), then databases,
    tables, dictionaries and plain views following the lineage layers (a dictionary after the table it loads from, a
    view after what it reads, a ``Dictionary`` table after its dictionary); MVs downstream first, so that no insert
    flows into a target before the MVs reading that target are attached (an MV reading another MV's inner table after
    it); access control last (a role before the users and grants naming it).
    """
    graph = LineageGraph(project)
    order = [node for layer in graph.layers for node in layer]
    rank = {node: i for i, node in enumerate(order)}
    by_name = {r.fqn: t for r, t in project.tables.items()}
    readable = {r.fqn: d.statement for r, d in project.dictionaries.items()}
    readable |= {r.fqn: v.statement for r, v in project.plain_views.items()}
    views = {r.fqn: v for r, v in project.views.items()}
    kept = [k for k in project.kept if k.kind != KeptKind.VIEW]
    early = sorted(
        (k for k in kept if k.kind.deploy_rank < 0), key=lambda k: (rank.get(k.name, -1), k.kind.deploy_rank)
    )
    steps = [Step(k.label, k.statement, k.kind, k.name) for k in early]
    steps += [Step(db.name, db.statement, key=db.name) for db in project.databases]
    over_dictionaries = {r.fqn for r, t in project.tables.items() if any(s in project.dictionaries for s in t.reads)}
    steps += [Step(n, by_name[n].statement, key=n) for n in order if n in by_name and n not in over_dictionaries]
    steps += [Step(n, readable[n], key=n) for n in order if n in readable]
    steps += [Step(n, by_name[n].statement, key=n) for n in order if n in over_dictionaries]  # Dictionary(d) tables
    steps += [Step(n, views[n].statement, key=n) for n in downstream_first(order, project)]
    late = sorted((k for k in kept if k.kind.deploy_rank >= 0), key=lambda k: k.kind.deploy_rank)
    steps += [Step(k.label, k.statement, k.kind, k.name) for k in late]
    return steps


def downstream_first(order: list[str], project: Project) -> list[str]:
    """The MVs of ``order`` (topological), downstream first, except that an MV reading another MV of the project (its
    inner table: the server needs it to exist) comes after that one."""
    views = {r.fqn: v for r, v in project.views.items()}
    pending = [n for n in reversed(order) if n in views]
    reads = {n: {r.fqn for r in views[n].source_refs if r.fqn in views and r.fqn != n} for n in pending}
    done: list[str] = []
    placed: set[str] = set()
    while pending:
        ready = [n for n in pending if reads[n] <= placed] or pending[:1]  # (reads in a loop: as they come)
        done += ready
        placed.update(ready)
        pending = [n for n in pending if n not in placed]
    return done


def apply(client: Client, project: Project) -> ApplyResult:
    """Create every database, table, dictionary, MV and kept statement of the project that does not exist yet.

    Existing objects are left as they are (drift is reported by the drift check, not overwritten).

    Raises:
        DDLError: An MV to create has POPULATE or OR REPLACE (refused with the reason and the alternative);
            nothing is created.
    """
    result = ApplyResult()
    databases = {row[0] for row in client.query("SELECT name FROM system.databases").result_rows}
    objects = {f"{d}.{n}" for d, n in client.query("SELECT database, name FROM system.tables").result_rows}
    refused = refused_views(v for r, v in project.views.items() if r.fqn not in objects)
    if refused:
        raise DDLError(refused)
    kept = read_kept(client, [k for k in project.kept if k.kind != KeptKind.VIEW])
    records.ensure_records_for(client, project)  # chmv_meta, migrated from its legacy table
    use_default_database(client, project, databases)
    for step in deployment_steps(project):
        if step.kept is not None:
            exists = _kept_exists(step, kept)
        else:
            exists = step.key in (objects if "." in step.name else databases)
        if exists:
            result.existing.append(step.name)
            continue
        client.command(check_statement(step.statement))
        _LOG.info(f"created {step.name}")
        result.created.append(step.name)
        if step.kept is None:
            (objects if "." in step.name else databases).add(step.key)
            use_default_database(client, project, databases)
    return result


def use_default_database(client: Client, project: Project, databases: set[str]) -> None:
    """Open ``client``'s session in the project's ``default_database`` once it exists: the DDL runs verbatim, so an
    unqualified name in it must resolve where chmv's model says (not in ``default``, on a fresh server)."""
    name = project.default_database
    if name in databases and client.database != name:
        client.database = name


def _kept_exists(step: Step, kept: KeptState) -> bool:
    existing = kept.existing.get(step.kept, frozenset()) if step.kept is not None else frozenset()
    if step.kept in (KeptKind.GRANT,):
        return False  # granting again is harmless
    return step.key in existing or all(n in existing for n in step.key.split(", "))
