"""CREATE statements with objects renamed through the parsed model: the name, an MV's TO target, its sources.

The lifecycle builds objects beside the live ones (a new version of a target, the MVs that feed it) and
validates a plan in a scratch database: both need the repo's own statement under another name. The
names are replaced at the spans the parser recorded (never by searching the SQL text), so a column,
a string or a comment that happens to spell a table name is left alone, and everything else of the
statement runs exactly as written.
"""

from __future__ import annotations

from collections.abc import Mapping

from chmv_assets.ddl.models import Dictionary, KeptObject, MaterializedView, ObjectRef, Span, Table, splice
from chmv_assets.errors import ChmvError
from chmv_assets.sql.cluster import storage_clauses
from chmv_assets.sql.quoting import qualified, quote, string_literal


def renamed_statement(
    obj: Table | MaterializedView | Dictionary | KeptObject,
    names: Mapping[ObjectRef, ObjectRef],
    *,
    keeper_path: str | None = None,
    local: bool = False,
) -> str:
    """``obj.statement`` with every object in ``names`` renamed to its value.

    Renamed: the object's own name; an MV's TO target; the table ``CREATE TABLE t AS other`` copies; every table an
    MV's or a plain view's SELECT reads (an alias named like the old table is added where the SELECT had none, so
    ``old.column`` references still resolve).
    Not renamed: dictionaries named in ``dictGet`` strings and a dictionary's SOURCE (they keep pointing at
    the live objects). Everything else is kept as written, ``ON CLUSTER`` included.

    Args:
        obj: The parsed object.
        names: Old name → new name.
        keeper_path: A table's ``Replicated*`` Keeper path replaced by this one (a new version beside the live
            table needs its own: :func:`chmv_assets.sql.cluster.version_keeper_path`); the replica name and the
            engine's own parameters stay as written.
        local: Drop the statement's ``ON CLUSTER`` clause (an object checked on this server only).

    Raises:
        ChmvError: A name or a clause to replace has no recorded span (a statement not read by chmv's parser).
    """
    label = obj.ref.fqn if obj.ref is not None else getattr(obj, "name", "")
    edits: list[tuple[int, int, str]] = []
    if keeper_path is not None:
        if not isinstance(obj, Table) or obj.keeper_path_span is None:
            raise ChmvError(f"cannot give {label} a Keeper path of its own: its engine has no written path")
        edits.append((obj.keeper_path_span.start, obj.keeper_path_span.end, string_literal(keeper_path)))
    cluster_span = obj.cluster_span if isinstance(obj, Table | MaterializedView | KeptObject) else None
    if local and cluster_span is not None:
        edits.append((cluster_span.start, cluster_span.end, ""))

    def rename(ref: ObjectRef, span: Span | None, what: str) -> None:
        if ref not in names:
            return
        if span is None:
            raise ChmvError(f"cannot rename {what} {ref.fqn} in the statement of {label}: no position recorded")
        edits.append((span.start, span.end, qualified(names[ref])))

    if obj.ref is not None:
        rename(obj.ref, obj.name_span, "the object")
    if isinstance(obj, Table) and obj.as_table is not None:
        rename(obj.as_table, obj.as_table_span, "the table copied")
    if isinstance(obj, MaterializedView | KeptObject):
        if isinstance(obj, MaterializedView) and obj.target is not None:
            rename(obj.target, obj.target_span, "the TO target")
        offset = obj.select_offset if isinstance(obj, MaterializedView) else obj.select_at or 0
        for use in obj.sources:
            if use.ref not in names:
                continue
            for span, aliased in zip(use.spans, use.has_alias or (False,) * len(use.spans), strict=True):
                text = qualified(names[use.ref]) if aliased else f"{qualified(names[use.ref])} AS {quote(use.ref.name)}"
                edits.append((offset + span.start, offset + span.end, text))
    return splice(obj.statement, edits)


def renamed_select(view: MaterializedView, names: Mapping[ObjectRef, ObjectRef]) -> str:
    """The MV's ``select_sql`` reading the tables renamed in ``names`` (aliases added as in :func:`renamed_statement`)."""
    edits = []
    for use in view.sources:
        if use.ref not in names:
            continue
        for span, aliased in zip(use.spans, use.has_alias or (False,) * len(use.spans), strict=True):
            text = qualified(names[use.ref]) if aliased else f"{qualified(names[use.ref])} AS {quote(use.ref.name)}"
            edits.append((span.start, span.end, text))
    return splice(view.select_sql, edits)


def local_table_sql(table: Table, ref: ObjectRef, names: Mapping[ObjectRef, ObjectRef] | None = None) -> str:
    """A CREATE of ``table``'s structure named ``ref`` that shares nothing with it: no replica path, no cluster.

    A plain engine keeps the repo statement with only the name changed; a ``Replicated*`` engine (whose
    replica path would be the live table's) or an ``ON CLUSTER`` statement is rebuilt from the model's
    verbatim parts: each column's definition (or ``AS other`` for a table that copies another's), the engine
    family with its own arguments (the path and the replica name dropped when they are string literals), and the
    PARTITION BY, ORDER BY, PRIMARY KEY, TTL and SETTINGS clauses as written.

    Args:
        names: Other objects renamed too (the table ``AS other`` copies, when it is built beside as well).
    """
    names = {**(names or {}), table.ref: ref}
    engine = table.engine
    replicated = engine is not None and engine.replicated
    if not replicated and not table.on_cluster:
        return renamed_statement(table, names)
    if any(c.definition is None for c in table.columns):
        raise ChmvError(f"{table.ref.fqn}: a column definition could not be read verbatim")
    if table.columns:
        structure = "(" + ", ".join(c.definition or "" for c in table.columns) + ")"
    elif table.as_table is not None:
        structure = f"AS {qualified(names.get(table.as_table, table.as_table))}"
    else:
        raise ChmvError(f"{table.ref.fqn}: neither its columns nor the table it copies are written")
    clauses = []
    if engine is not None:
        args = list(engine.family_arguments)
        clauses.append(f"ENGINE = {engine.family if replicated else engine.name}({', '.join(args)})")
    clauses += storage_clauses(table)
    return f"CREATE TABLE {qualified(ref)} {structure} " + " ".join(clauses)
