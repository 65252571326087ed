"""A DDL directory to an immutable :class:`~chmv_assets.ddl.models.Project`.

Each ``.sql`` file is tokenized once and each statement read once (:mod:`.statements`). Problems are collected across
the whole directory and raised together as one :class:`~chmv_assets.errors.DDLError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sqlglot.errors import TokenError

from chmv_assets.ddl.lineage import trigger_loops
from chmv_assets.ddl.models import (
    Database,
    Dictionary,
    KeptKind,
    KeptObject,
    MaterializedView,
    ObjectRef,
    Project,
    SourceLocation,
    Table,
)
from chmv_assets.ddl.parsing.context import Context, Located
from chmv_assets.ddl.parsing.references import check_references
from chmv_assets.ddl.parsing.statements import read_statement
from chmv_assets.ddl.parsing.trees import written_ref
from chmv_assets.ddl.sql_text import split_statements
from chmv_assets.errors import DDLError, DDLProblem

#: An object of the directory that SELECTs and engines name.
Modeled = Table | Dictionary | MaterializedView


def load_project(
    ddl_dir: str | Path,
    *,
    default_database: str = "default",
    external: Iterable[str] = (),
) -> Project:
    """Read every ``.sql`` file below ``ddl_dir`` into an immutable :class:`Project`.

    Args:
        ddl_dir: Directory of version-controlled DDL; files are read in path order.
        default_database: Database for unqualified names.
        external: ``db.table`` names defined outside the directory that MVs may read.

    Raises:
        DDLError: With every problem found: syntax errors, unknown targets or sources, conflicting
            duplicate definitions. Nothing is returned (and so nothing deployed) for invalid DDL.
    """
    root = Path(ddl_dir)
    ctx = Context(default_database)
    if not root.is_dir():
        raise DDLError([DDLProblem(str(root), 1, 1, "DDL directory not found", "pass --ddl-dir DIR")])
    files = sorted(p for p in root.rglob("*.sql") if p.is_file())
    if not files:
        ctx.problem(str(root), 1, 1, "no .sql files found", "put CREATE statements in .sql files")
    databases: dict[str, Database] = {}
    objects: dict[ObjectRef, Modeled] = {}
    kept: dict[tuple[KeptKind, str], KeptObject] = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            statements = list(split_statements(text))
        except TokenError as err:
            ctx.problem(str(path), 1, 1, f"cannot tokenize: {err}", "close the string or comment")
            continue
        for statement in statements:
            parsed = read_statement(Located(str(path), text, statement), ctx)
            if parsed is None:
                continue
            if isinstance(parsed, Database):
                databases.setdefault(parsed.name, parsed)
                continue
            if isinstance(parsed, KeptObject):
                _register_kept(parsed, kept, objects, ctx)
                continue
            _register(parsed, objects, ctx)
    externals = tuple(written_ref(name, ctx.default_database) for name in external)
    project = Project(
        ddl_dir=str(root),
        default_database=default_database,
        databases=tuple(databases.values()),
        tables={r: o for r, o in objects.items() if isinstance(o, Table)},
        dictionaries={r: o for r, o in objects.items() if isinstance(o, Dictionary)},
        views={r: o for r, o in objects.items() if isinstance(o, MaterializedView)},
        kept=tuple(kept.values()),
        external=externals,
    )
    check_references(project, ctx)
    project = _without_loops(project, ctx)
    if ctx.problems:
        raise DDLError(ctx.problems)
    return project


def _without_loops(project: Project, ctx: Context) -> Project:
    """The project with the MVs of each real trigger loop left out (kept in ``loops``: one problem each, naming the
    loop and each MV's ``file:line``, raised only with other problems; everything else loads). A loop of tables
    alone (inserts through Buffer or Distributed tables into each other) has nothing to leave out: a problem."""
    loops, bare = trigger_loops(project)
    for part in bare:
        root = Path(project.ddl_dir)
        table = next((project.tables[r] for r in project.tables if r.fqn in part), None)
        ctx.at(
            table.location if table is not None else SourceLocation(file=str(root), line=1),
            "cycle in the table graph: " + ", ".join(sorted(part)) + " write into each other",
            "an insert must not reach, through Buffer or Distributed tables, the table it started from: break the loop",
        )
    if not loops:
        return project
    for loop in loops:
        p = loop.problem()
        ctx.problem(p.file, p.line, p.column, p.message, p.hint)
    left_out = {r for loop in loops for r in loop.refs}
    views = {r: v for r, v in project.views.items() if r not in left_out}
    # a new model, not model_copy: that would carry the cached properties of the project with the loops (its indexes)
    fields = {name: getattr(project, name) for name in Project.model_fields}
    loaded = Project(**(fields | {"views": views, "loops": tuple(loops)}))
    if len(ctx.problems) == len(loops):  # only loops: the rest loads, the loops are the project's to tell
        del ctx.problems[:]
    return loaded


def _register_kept(
    obj: KeptObject, kept: dict[tuple[KeptKind, str], KeptObject], objects: dict[ObjectRef, Modeled], ctx: Context
) -> None:
    if obj.ref is not None and obj.ref in objects:
        ctx.at(
            obj.location,
            f"{obj.ref.fqn} is defined again as a {obj.kind} (first at {objects[obj.ref].location})",
            "keep one definition; rename one of them if both are meant",
        )
        return
    previous = kept.get((obj.kind, obj.name))
    if previous is None:
        kept[(obj.kind, obj.name)] = obj
    elif _normalize(previous.statement) != _normalize(obj.statement):
        ctx.at(
            obj.location,
            f"{obj.label} is defined again with a different definition (first at {previous.location})",
            "keep one definition",
        )


def _register(obj: Modeled, objects: dict[ObjectRef, Modeled], ctx: Context) -> None:
    previous = objects.get(obj.ref)
    if previous is None:
        objects[obj.ref] = obj
        return
    if _normalize(previous.statement) != _normalize(obj.statement):
        ctx.at(
            obj.location,
            f"{obj.ref.fqn} is defined again with a different definition (first at {previous.location})",
            "keep one definition; rename one of them if both are meant",
        )


def _normalize(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").lower()
