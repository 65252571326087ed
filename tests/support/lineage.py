"""What the engine itself records of the MVs it runs, and chmv's lineage of the same DDL, in one shape to compare.

The engine's record, per MV (nothing of chmv's parsing is used):

- its target: ``system.tables.target_database/target_table`` (an inner table, ``.inner_id.…``/``.inner.…``: None);
- its trigger: the table whose ``dependencies_database/dependencies_table`` list it (the table whose inserts fire
  it; none for a refreshable MV);
- what its SELECT reads: every table of the analyzer's resolved query tree of its ``as_select``
  (``EXPLAIN QUERY TREE``: CTEs, aliases and default databases resolved, table functions apart), ``system.one`` of a
  SELECT without FROM left out (chmv: it reads nothing);
- what it ``DEPENDS ON``: the names the server prints in its ``create_table_query`` (resolved and qualified there);

and per dictionary, the table it loads from (``loading_dependencies_database/loading_dependencies_table``).

Used by the peer corpus (``tests/scenarios/test_peer_corpus.py``) and the replay of ClickHouse's own stateless
tests (``benchmarks/replay_stateless.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from chmv_assets.ddl.models import SERVER_DATABASES, Project


@dataclass(frozen=True)
class MvRecord:
    """One MV's lineage: where it writes, what fires it, what it reads, what it waits for."""

    target: str | None
    trigger: frozenset[str]
    reads: frozenset[str] | None
    depends_on: tuple[str, ...] = ()


_DEPENDS = re.compile(
    r"\bREFRESH\b.*?\bDEPENDS ON (?P<names>.+?)(?= (?:APPEND|SETTINGS|TO|ENGINE|EMPTY|DEFINER|SQL|AS|COMMENT)\b| \()",
    re.S,
)
_TABLE = re.compile(r"^\s*TABLE id: \d+(?:, alias: [^,]+)?, table_name: (?P<name>.+)$", re.M)


def user_databases(client) -> list[str]:
    """Every database but the server's own."""
    rows = client.query("SELECT name FROM system.databases").result_rows
    return sorted(r[0] for r in rows if r[0] not in SERVER_DATABASES and r[0] != "_temporary_and_external_tables")


def engine_records(client, databases: Iterable[str]) -> tuple[dict[str, MvRecord], dict[str, str | None]]:
    """What the engine records of the MVs and dictionaries of ``databases``: per MV (``db.name``) its record, per
    dictionary the table it loads from (None: another source)."""
    databases = sorted(set(databases))
    if not databases:
        return {}, {}
    rows = client.query(
        "SELECT database, name, engine, target_database, target_table, dependencies_database, dependencies_table, "
        "loading_dependencies_database, loading_dependencies_table, as_select, create_table_query "
        "FROM system.tables WHERE database IN {dbs:Array(String)}",
        parameters={"dbs": databases},
    ).result_rows
    triggers: dict[str, set[str]] = {}  # the server's own tables fire MVs too (system.one, system.tables…)
    for database, name, dep_dbs, dep_names in client.query(
        "SELECT database, name, dependencies_database, dependencies_table FROM system.tables "
        "WHERE notEmpty(dependencies_table)"
    ).result_rows:
        for dep_db, dep_name in zip(dep_dbs, dep_names, strict=True):
            triggers.setdefault(f"{dep_db}.{dep_name}", set()).add(f"{database}.{name}")
    views: dict[str, MvRecord] = {}
    dictionaries: dict[str, str | None] = {}
    for database, name, engine, target_db, target_name, _, _, load_dbs, load_names, as_select, create in rows:
        fqn = f"{database}.{name}"
        if engine == "Dictionary" and create.startswith("CREATE DICTIONARY"):
            loads = [f"{d}.{n}" for d, n in zip(load_dbs, load_names, strict=True)]
            dictionaries[fqn] = loads[0] if len(loads) == 1 else None
        if engine != "MaterializedView":
            continue
        inner = target_name.startswith((".inner", ".tmp.inner"))
        views[fqn] = MvRecord(
            target=None if inner else f"{target_db}.{target_name}",
            trigger=frozenset(triggers.get(fqn, ())),
            reads=_reads(client, as_select),
            depends_on=_depends_on(create),
        )
    return views, dictionaries


def _reads(client, select: str) -> frozenset[str] | None:
    """The tables of the analyzer's resolved query tree of ``select`` (``db.name`` as printed there: unquoted, as
    chmv names them); None when the engine cannot analyze it now."""
    try:
        tree = client.query(f"EXPLAIN QUERY TREE {select}").result_rows
    except Exception:  # noqa: BLE001 (a table it reads was dropped since: the engine cannot say)
        return None
    text = "\n".join(str(r[0]) for r in tree)
    found = {m["name"] for m in _TABLE.finditer(text)}
    if "system.one" in found and not re.search(r"\bone\b", select):
        found.discard("system.one")  # a SELECT without FROM: the engine reads system.one, the SELECT reads nothing
    return frozenset(found)


def _depends_on(create: str) -> tuple[str, ...]:
    match = _DEPENDS.search(create)
    if match is None:
        return ()
    return tuple(n.strip().replace("`", "") for n in match["names"].split(","))


def chmv_records(project: Project) -> tuple[dict[str, MvRecord], dict[str, str | None]]:
    """chmv's lineage of the same objects, in the engine's shape: per MV its TO target (None: an inner table), its
    trigger edge (none for a refreshable MV: it fires on its schedule), its sources, its DEPENDS ON; per dictionary
    the table it loads from."""
    views = {
        v.ref.fqn: MvRecord(
            target=v.target.fqn if v.target is not None else None,
            trigger=frozenset({v.trigger.fqn}) if v.trigger is not None and not v.refreshable else frozenset(),
            reads=frozenset(r.fqn for r in v.source_refs),
            depends_on=tuple(d.fqn for d in v.depends_on),
        )
        for v in project.views.values()
    }
    dictionaries = {
        d.ref.fqn: d.source_table.fqn if d.source_table is not None else None for d in project.dictionaries.values()
    }
    return views, dictionaries


def differences(engine: dict[str, MvRecord], chmv: dict[str, MvRecord]) -> dict[str, list[str]]:
    """Per MV, what chmv's lineage says differently from the engine's record (empty lists left out). A read set the
    engine cannot give now (None) is not compared."""
    found: dict[str, list[str]] = {}
    for name in sorted(set(engine) | set(chmv)):
        mine, theirs = chmv.get(name), engine.get(name)
        if mine is None or theirs is None:
            found[name] = ["not read by chmv" if mine is None else "not on the engine"]
            continue
        diffs = []
        for field in ("target", "trigger", "depends_on"):
            if getattr(mine, field) != getattr(theirs, field):
                diffs.append(f"{field}: chmv {_show(getattr(mine, field))}, engine {_show(getattr(theirs, field))}")
        if theirs.reads is not None and mine.reads != theirs.reads:
            diffs.append(f"reads: chmv {_show(mine.reads)}, engine {_show(theirs.reads)}")
        if diffs:
            found[name] = diffs
    return found


def engine_loops(engine: dict[str, MvRecord]) -> set[str]:
    """The MVs on a loop of the engine's own record: an MV whose target reaches, through triggers, back to it."""
    fires: dict[str, set[str]] = {}  # table → the MVs an insert into it fires
    for mv, record in engine.items():
        for table in record.trigger:
            fires.setdefault(table, set()).add(mv)
    looped = set()
    for start in engine:
        seen, queue = set(), [start]
        while queue:
            current = queue.pop()
            for mv in fires.get(engine[current].target or current, ()):  # (an inner table: the MV's own name)
                if mv == start:
                    looped.add(start)
                elif mv not in seen:
                    seen.add(mv)
                    queue.append(mv)
    return looped


def _show(value) -> str:
    if isinstance(value, frozenset | tuple):
        return "[" + ", ".join(sorted(value)) + "]"
    return str(value)
