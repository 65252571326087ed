"""Compare a table of the DDL directory with the same table on the server, clause by clause.

Both sides are the server's own formatting of a CREATE statement (``formatQuerySingleLine`` of the repo
statement, ``create_table_query`` of the live table) read by chmv's parser, so spelling never counts as a
change (``INTERVAL 5 YEAR`` is ``toIntervalYear(5)`` on both sides). What runs is taken verbatim from the
repo statement: a column's definition, the TTL, the SETTINGS clause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chmv_assets.ddl.models import Column, Table, stored_columns
from chmv_assets.ddl.types import canonical_type, converts_in_place
from chmv_assets.sql.quoting import quote, string_literal

#: Settings the server adds to every MergeTree table that does not set them.
SERVER_DEFAULT_SETTINGS = {"index_granularity": "8192"}


@dataclass(frozen=True)
class TableDiff:
    """How a live table differs from the repo.

    Attributes:
        in_place: ``(ALTER clause, reason)`` the server applies in place, in order.
        structural: Reasons the table needs a new version (what cannot change in place).
        drops: ``(ALTER clause, reason)`` that remove something the DDL no longer has (``--allow-drop``).
    """

    in_place: tuple[tuple[str, str], ...] = ()
    structural: tuple[str, ...] = ()
    drops: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.in_place or self.structural or self.drops)


def same_text(repo_formatted: str | None, live_create_query: str) -> bool:
    """The cheap test first: the two formatted statements are equal (``IF NOT EXISTS`` and server defaults aside)."""
    if not repo_formatted:
        return False
    repo = " ".join(repo_formatted.split())
    for prefix in ("CREATE TABLE IF NOT EXISTS ", "CREATE DICTIONARY IF NOT EXISTS "):
        if repo.startswith(prefix):
            repo = prefix.replace("IF NOT EXISTS ", "") + repo[len(prefix) :]
    live = " ".join(live_create_query.split())
    if "index_granularity" not in repo:
        live = live.replace(" SETTINGS index_granularity = 8192", "")
    return repo == live


def _canon(text: str | None) -> str:
    return " ".join((text or "").split())


def diff_table(repo: Table, repo_formatted: Table, live: Table) -> TableDiff:
    """Differences of ``live`` from the repo, as ALTER clauses or reasons for a new version.

    Args:
        repo: The table as parsed from the DDL directory (verbatim text of what runs).
        repo_formatted: The repo statement formatted by the server, parsed.
        live: The server's ``create_table_query``, parsed.
    """
    structural = _engine_and_keys(repo_formatted, live)
    in_place: list[tuple[str, str]] = []
    drops = _columns(repo, repo_formatted, live, in_place, structural)
    in_place += _table_clauses(repo, repo_formatted, live)
    return TableDiff(tuple(in_place), tuple(structural), tuple(drops))


def _engine_and_keys(a: Table, b: Table) -> list[str]:
    """What only a new version changes: the engine, PARTITION BY, ORDER BY, PRIMARY KEY (``a`` the repo's, ``b``
    the live one). A ``Replicated*`` table's Keeper path and replica name belong to the deployment, not to the
    schema: the server shows its default path where the repo writes none, and a new version chmv swapped in has a
    path of its own."""
    structural = []
    a_engine = (a.engine.name, _arguments(a.engine.family_arguments)) if a.engine else None
    b_engine = (b.engine.name, _arguments(b.engine.family_arguments)) if b.engine else None
    if a_engine != b_engine:
        structural.append(f"engine {_engine_text(b)} → {_engine_text(a)}")
    for clause, left, right in (
        (
            "PARTITION BY",
            b.partition_by.sql if b.partition_by else None,
            a.partition_by.sql if a.partition_by else None,
        ),
        ("ORDER BY", b.order_by, a.order_by),
        ("PRIMARY KEY", b.primary_key or b.order_by, a.primary_key or a.order_by),
    ):
        explicit = clause != "PRIMARY KEY" or a.primary_key or b.primary_key
        if explicit and _canon(left) != _canon(right):
            structural.append(f"{clause} {_canon(left) or '(none)'} → {_canon(right) or '(none)'}")
    return structural


def _columns(
    repo: Table, a: Table, b: Table, in_place: list[tuple[str, str]], structural: list[str]
) -> list[tuple[str, str]]:
    """The columns added and changed (into ``in_place`` or ``structural``), and the drops of those the DDL no longer
    has (``a`` the repo's formatted by the server, ``b`` the live one)."""
    keys = set(a.order_by_columns) | set(b.order_by_columns)
    for partition_by in (a.partition_by, b.partition_by):  # every column of the partition key (a tuple's too)
        if partition_by is not None:
            keys.update(partition_by.columns)
    live_columns = {c.name: c for c in b.columns}
    repo_columns = {c.name: c for c in stored_columns(repo.columns)}
    previous: str | None = None
    for column in stored_columns(a.columns):
        original = repo_columns.get(column.name)
        definition = original.definition if original is not None and original.definition else None
        current = live_columns.get(column.name)
        if current is None:
            if definition is None:
                structural.append(f"column {column.name} added (its definition could not be read verbatim)")
            else:
                after = f" AFTER {quote(previous)}" if previous else " FIRST"
                in_place.append((f"ADD COLUMN {definition}{after}", f"column {column.name} added: {column.type}"))
        else:
            _column_change(column, current, definition, column.name in keys, in_place, structural)
        previous = column.name
    return [
        (f"DROP COLUMN {quote(name)}", f"column {name} {column.type} is not in the DDL")
        for name, column in live_columns.items()
        if name not in repo_columns
    ]


def _table_clauses(repo: Table, a: Table, b: Table) -> list[tuple[str, str]]:
    """TTL, SETTINGS and comment changes, in place (``a`` the repo's formatted by the server, ``b`` the live one)."""
    in_place = []
    if _canon(a.ttl) != _canon(b.ttl):
        if repo.ttl:
            in_place.append((f"MODIFY TTL {repo.ttl}", f"TTL {_canon(b.ttl) or '(none)'} → {_canon(a.ttl)}"))
        else:
            in_place.append(("REMOVE TTL", f"TTL {_canon(b.ttl)} removed"))
    live_settings = dict(b.settings_map)
    changed = [k for k, v in a.settings_map if live_settings.get(k, SERVER_DEFAULT_SETTINGS.get(k)) != v]
    if changed and repo.settings:
        in_place.append((f"MODIFY SETTING {repo.settings}", "settings " + ", ".join(changed) + " changed"))
    if (a.description or "") != (b.description or ""):
        in_place.append((f"MODIFY COMMENT {string_literal(a.description or '')}", "table comment changed"))
    return in_place


def _column_change(
    repo: Column,
    live: Column,
    definition: str | None,
    in_key: bool,
    in_place: list[tuple[str, str]],
    structural: list[str],
) -> None:
    """Append what changes one column: a MODIFY COLUMN that keeps every value, or a reason for a new version."""
    name = quote(repo.name)
    if repo.type != live.type and not (repo.type and live.type and _same_type(repo.type, live.type)):
        if in_key or not converts_in_place(live.type, repo.type):
            why = (
                "a sorting or partition key column"
                if in_key and converts_in_place(live.type, repo.type)
                else "the values do not convert in place"
            )
            structural.append(f"column {repo.name} {live.type} → {repo.type} ({why})")
            return
        if definition is None:
            structural.append(f"column {repo.name} {live.type} → {repo.type} (definition not readable verbatim)")
            return
        in_place.append((f"MODIFY COLUMN {definition}", f"column {repo.name} {live.type} → {repo.type}"))
        return
    default_changed = (repo.default_kind, repo.default_expression) != (live.default_kind, live.default_expression)
    if default_changed:
        if repo.default_kind is None:
            in_place.append(
                (f"MODIFY COLUMN {name} REMOVE {live.default_kind}", f"column {repo.name}: {live.default_kind} removed")
            )
        elif definition is not None:
            in_place.append((f"MODIFY COLUMN {definition}", f"column {repo.name}: {repo.default_kind} changed"))
    comment_changed = (repo.comment or "") != (live.comment or "")
    redefined = (
        not default_changed
        and not comment_changed
        and _codecs(_canon(repo.definition), repo.type) != _codecs(_canon(live.definition), live.type)
    )
    if redefined and definition is not None:  # a codec or a column TTL: both sides are the server's formatting
        in_place.append((f"MODIFY COLUMN {definition}", f"column {repo.name}: definition changed"))
    if comment_changed:
        if repo.comment:
            in_place.append(
                (f"COMMENT COLUMN {name} {string_literal(repo.comment)}", f"column {repo.name}: comment changed")
            )
        else:
            in_place.append((f"MODIFY COLUMN {name} REMOVE COMMENT", f"column {repo.name}: comment removed"))


#: Bytes of a value of each fixed-width type: what ``Delta``, ``DoubleDelta`` and ``Gorilla`` take when written bare.
_WIDTHS = {
    **dict.fromkeys(("UInt8", "Int8", "Bool", "Enum8"), 1),
    **dict.fromkeys(("UInt16", "Int16", "Date", "Enum16"), 2),
    **dict.fromkeys(("UInt32", "Int32", "Float32", "DateTime", "Date32", "IPv4", "Decimal32"), 4),
    **dict.fromkeys(("UInt64", "Int64", "Float64", "DateTime64", "Decimal64"), 8),
}
_WIDTH_CODECS = re.compile(r"\b(Gorilla|Delta|DoubleDelta)\((\d+)\)")
_WORD = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)'")
_STATE_VERSION = re.compile(r"\bAggregateFunction\(\s*\d+\s*,\s*")


def _codecs(definition: str, type_sql: str) -> str:
    """A column definition as the DDL may write what the server writes out: ``Gorilla(8)`` as ``Gorilla`` when 8 is its
    type's width, ``AggregateFunction(1, sumMap, …)`` without the state's version."""
    definition = _STATE_VERSION.sub("AggregateFunction(", definition)  # the server writes a state's version
    base = re.sub(r"^(Nullable|LowCardinality)\((.*)\)$", r"\2", type_sql.strip()).split("(")[0]
    width = _WIDTHS.get(base)
    if width is None:
        return definition
    return _WIDTH_CODECS.sub(lambda m: m.group(1) if int(m.group(2)) == width else m.group(0), definition)


def _arguments(arguments: tuple[str, ...]) -> tuple[str, ...]:
    """Engine arguments with a quoted name unquoted (``Merge('db', …)``, ``Dictionary('db.d')``: the server quotes
    what the DDL may not)."""
    return tuple(m.group(1) if (m := _WORD.fullmatch(a.strip())) else a for a in arguments)


def _same_type(a: str, b: str) -> bool:
    return canonical_type(a) == canonical_type(b)


def _engine_text(table: Table) -> str:
    if table.engine is None:
        return "(none)"
    return f"{table.engine.name}({', '.join(table.engine.arguments)})"
