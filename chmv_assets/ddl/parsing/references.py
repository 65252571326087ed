"""Every name the DDL uses is defined somewhere: in the directory, declared external, or the server's own."""

from __future__ import annotations

from collections.abc import Sequence

from chmv_assets.ddl.models import SERVER_DATABASES, MaterializedView, ObjectRef, Project, Span
from chmv_assets.ddl.parsing.context import Context


class _Known(set[ObjectRef]):
    """The objects a reference may name: those of the DDL, the external ones, and every server's own tables."""

    def __contains__(self, ref: object) -> bool:
        return super().__contains__(ref) or (isinstance(ref, ObjectRef) and ref.database in SERVER_DATABASES)


def check_references(project: Project, ctx: Context) -> None:
    """Every TO target, source, dictionary and DEPENDS ON must be defined in the directory or declared external."""
    known = _Known(
        set(project.tables)
        | set(project.views)
        | set(project.dictionaries)
        | set(project.external)
        | set(project.plain_views)
    )
    for plain in project.plain_views.values():
        for source in plain.sources:
            if source.ref not in known:
                ctx.at(
                    plain.location,
                    f"view {plain.ref} reads {source.ref.fqn}, which is defined nowhere in the DDL directory",
                    f"add CREATE TABLE {source.ref.fqn} (…), or declare it external in chmv.toml "
                    f'(external = ["{source.ref.fqn}"])',
                )
    for view in project.views.values():
        loc = view.location
        if view.target is not None and view.target not in project.tables and view.target not in project.external:
            ctx.at(
                loc,
                f"{view.ref.fqn} writes TO {view.target.fqn}, which is defined nowhere in the DDL directory",
                f"add CREATE TABLE {view.target.fqn} (…) to a .sql file, or list it under external",
            )
        for source in view.sources:
            if source.ref not in known:
                line, column = _offset_position(view, source.spans)
                ctx.problem(
                    loc.file,
                    line,
                    column,
                    f"{view.ref.fqn} reads {source.ref.fqn}, which is defined nowhere in the DDL directory",
                    f"add CREATE TABLE {source.ref.fqn} (…), or declare it external in chmv.toml "
                    f'(external = ["{source.ref.fqn}"])',
                )
        for lookup in view.dictionaries:
            if lookup not in known:
                ctx.at(
                    loc,
                    f"{view.ref.fqn} uses dictionary {lookup.fqn}, which is defined nowhere",
                    f"add CREATE DICTIONARY {lookup.fqn} (…), or declare it external in chmv.toml",
                )
        for other in view.depends_on:
            if other not in known:
                ctx.at(
                    loc,
                    f"{view.ref.fqn} DEPENDS ON {other.fqn}, which is defined nowhere in the DDL directory (the "
                    "server accepts it and never refreshes the MV: its status stays MissingDependencies)",
                    f"add the refreshable MV {other.fqn}, fix the name, or declare it external in chmv.toml "
                    f'(external = ["{other.fqn}"])',
                )
    for dictionary in project.dictionaries.values():
        src = dictionary.source_table
        if src is not None and src not in known:
            ctx.at(
                dictionary.location,
                f"dictionary {dictionary.ref.fqn} loads from {src.fqn}, which is defined nowhere",
                "add the table, or declare it external in chmv.toml",
            )


def _offset_position(view: MaterializedView, spans: Sequence[Span]) -> tuple[int, int]:
    """File line and column of the first span of a name in the view's SELECT."""
    loc = view.location
    if not spans:
        return loc.line, loc.column
    statement_offset = len(view.statement) - len(view.select_sql) + spans[0].start
    before = view.statement[:statement_offset]
    line = loc.line + before.count("\n")
    column = (statement_offset - before.rfind("\n")) if "\n" in before else loc.column + statement_offset
    return line, column
