"""CREATE statements with objects renamed through the parsed model: the name, an MV's TO target, its sources.

The lifecycle builds objects beside the live ones (a new version of a target, the MVs that feed it) and
validates a plan in a scratch database: both need the repo's own statement under another name. The
names are replaced at the spans the parser recorded (never by searching the SQL text), so a column,
a string or a comment that happens to spell a table name is left alone, and everything else of the
statement runs exactly as written.
"""

from __future__ import annotations

from collections.abc import Mapping

from chmv_assets.ddl.models import Dictionary, MaterializedView, ObjectRef, Span, Table, splice
from chmv_assets.errors import ChmvError
from chmv_assets.sql.quoting import qualified, quote


def renamed_statement(obj: Table | MaterializedView | Dictionary, names: Mapping[ObjectRef, ObjectRef]) -> str:
    """``obj.statement`` with every object in ``names`` renamed to its value.

    Renamed: the object's own name; an MV's TO target; every table an MV's SELECT reads (an alias named
    like the old table is added where the SELECT had none, so ``old.column`` references still resolve).
    Not renamed: dictionaries named in ``dictGet`` strings and a dictionary's SOURCE (they keep pointing at
    the live objects).

    Raises:
        ChmvError: A name to replace has no recorded span (a statement not read by chmv's parser).
    """
    edits: list[tuple[int, int, str]] = []

    def rename(ref: ObjectRef, span: Span | None, what: str) -> None:
        if ref not in names:
            return
        if span is None:
            raise ChmvError(f"cannot rename {what} {ref.fqn} in the statement of {obj.ref.fqn}: no position recorded")
        edits.append((span.start, span.end, qualified(names[ref])))

    rename(obj.ref, obj.name_span, "the object")
    if isinstance(obj, MaterializedView):
        if obj.target is not None:
            rename(obj.target, obj.target_span, "the TO target")
        offset = obj.select_offset
        for use in obj.sources:
            if use.ref not in names:
                continue
            for span, aliased in zip(use.spans, use.has_alias or (False,) * len(use.spans), strict=True):
                text = qualified(names[use.ref]) if aliased else f"{qualified(names[use.ref])} AS {quote(use.ref.name)}"
                edits.append((offset + span.start, offset + span.end, text))
    return splice(obj.statement, edits)
