"""A CREATE that ClickHouse accepts and sqlglot cannot read, read by sqlglot with the parts it cannot read set aside.

What is set aside is blanked, so every offset stays valid: a column's clauses after its type (its type too, if that is
the part: read as ``String``), another item of the column list (an index, a projection, a constraint), or a clause of
the statement. The columns set aside are read from their verbatim definitions (:func:`patched`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from chmv_assets.ddl.models import Column, MaterializedView, StatementModel, Table
from chmv_assets.ddl.parsing.context import Context, Located
from chmv_assets.ddl.parsing.tables import spelled_column
from chmv_assets.ddl.parsing.trees import blank, describe, read_with_sqlglot, release
from chmv_assets.ddl.sql_text import CLAUSE_STOPS, TABLE_CLAUSES, nesting, tokenize

#: Words that end a column's type in its definition (the clauses after it).
_COLUMN_CLAUSES = frozenset(
    {
        "DEFAULT",
        "MATERIALIZED",
        "ALIAS",
        "EPHEMERAL",
        "CODEC",
        "TTL",
        "COMMENT",
        "STATISTICS",
        "SETTINGS",
        "PRIMARY",
        "NOT",
        "NULL",
    }
)
_DEFAULT_KINDS = frozenset({"DEFAULT", "MATERIALIZED", "ALIAS", "EPHEMERAL"})
#: Words that start a CREATE's clause at depth 0 (a clause sqlglot cannot read is set aside up to the next one): the
#: clauses chmv keeps verbatim, those a dictionary, ``ON CLUSTER``, ``UUID`` and ``CLONE`` add; not POPULATE (blanked
#: for sqlglot, never a clause to set aside).
_STATEMENT_CLAUSES = frozenset((CLAUSE_STOPS - {"POPULATE"}) | {"RANGE", "ON", "UUID", "CLONE"} | set(TABLE_CLAUSES))


_M = TypeVar("_M", bound=StatementModel | None)


class Unreadable(Exception):
    """A statement ClickHouse accepts that sqlglot cannot read even with its unknown parts set aside."""


def report_unreadable(located: Located, ctx: Context, err: Unreadable) -> None:
    ctx.at(
        located.location(),
        f"chmv cannot read this statement, which ClickHouse accepts: {err}",
        "report it to chmv with the statement; meanwhile write the clause another way",
    )


@dataclass(frozen=True)
class Item:
    """A column definition of a CREATE's column list: its span, its type's span, and whether it defines a column."""

    start: int
    end: int
    type_start: int
    type_end: int
    name: str
    column: bool


def _column_items(tokens: list[Token]) -> list[Item]:
    """The items of the CREATE's column list (the first parenthesis at depth 0, before ENGINE or AS)."""
    opening = None
    for i, token in enumerate(tokens):
        word = token.text.upper()
        if token.token_type == TokenType.L_PAREN:
            opening = i
            break
        if word in ("ENGINE", "AS", "TO", "PRIMARY", "SOURCE"):
            return []
    if opening is None:
        return []
    items, begin = [], opening + 1
    for i, token, depth in nesting(tokens[opening:]):
        if (depth == 1 and token.token_type == TokenType.COMMA) or depth == 0:
            if opening + i > begin:
                items.append(_item(tokens[begin : opening + i]))
            begin = opening + i + 1
            if depth == 0:
                break
    return items


def _item(tokens: list[Token]) -> Item:
    name = tokens[0].text
    column = name.upper() not in ("INDEX", "PROJECTION", "CONSTRAINT", "PRIMARY", "STATISTICS") or len(tokens) < 2
    type_end = tokens[-1].end + 1
    for _i, token, depth in nesting(tokens[1:]):
        if depth == 0 and token.text.upper() in _COLUMN_CLAUSES:
            type_end = token.start
            break
    type_start = tokens[1].start if len(tokens) > 1 else tokens[0].end + 1
    type_end = max(type_start, min(type_end, tokens[-1].end + 1))
    return Item(tokens[0].start, tokens[-1].end + 1, type_start, type_end, name, column)


def readable(text: str, tokens: list[Token]) -> tuple[exp.Create, bool, dict[str, Item]]:
    """sqlglot's tree of a CREATE that ClickHouse accepts, with the parts sqlglot cannot read set aside. Returns the
    tree, POPULATE, and the columns set aside (by name).

    Raises:
        Unreadable: Nothing left to set aside, and sqlglot still fails.
    """
    current, items = text, _column_items(tokens)
    reduced: dict[str, Item] = {}
    last_error = "sqlglot reads it as an unknown command"
    for _attempt in range(64):
        node, _tokens, populate, error = read_with_sqlglot(current, tokenize(current))
        if isinstance(node, exp.Create):
            return node, populate, reduced
        if node is not None:
            release(node)
        if error is not None:
            last_error = describe(error)
        offset = _error_offset(error, current) if error is not None else None
        edited = _set_aside(current, tokens, items, reduced, offset)
        if edited is None or edited == current:
            raise Unreadable(last_error)
        current = edited
    raise Unreadable(last_error)


def _error_offset(error: ParseError, text: str) -> int | None:
    first = error.errors[0] if error.errors else {}
    line, col = first.get("line"), first.get("col")
    if not line or not col:
        return None
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    if line > len(starts):
        return None
    return max(0, starts[line - 1] + col - len(first.get("highlight") or "x"))


def _set_aside(
    text: str, tokens: list[Token], items: list[Item], reduced: dict[str, Item], offset: int | None
) -> str | None:
    """``text`` with the next part sqlglot cannot read blanked; None when there is nothing left to set aside."""
    if offset is None:  # no position: try each column definition alone
        for item in items:
            if item.name in reduced or not item.column:
                continue
            probe = f"CREATE TABLE _chmv_probe ({text[item.start : item.end]}) ENGINE = Memory"
            node = read_with_sqlglot(probe, tokenize(probe)).node
            if node is None:
                offset = item.start
                break
            release(node)
        else:
            return None
    for index, item in enumerate(items):
        if not item.start <= offset <= item.end:
            continue
        if not item.column:  # an index, a projection, a constraint: set aside with the comma before it
            start = text.rfind(",", 0, item.start) if index else item.start
            return blank(text, start if start >= 0 else item.start, item.end)
        reduced[item.name] = item
        if offset < item.type_end and text[item.type_start : item.type_end].strip() != "String":
            # the type is what sqlglot cannot read (``Object('json')``): read it as String; the model keeps it as written
            return blank(text, item.type_start, item.type_end, "String" if item.type_end - item.type_start >= 6 else "")
        if text[item.type_end : item.end].strip():
            return blank(text, item.type_end, item.end)
        return None
    return _without_clause(text, tokens, offset)


def _without_clause(text: str, tokens: list[Token], offset: int) -> str | None:
    """``text`` with the depth-0 clause around ``offset`` blanked (up to the next clause), or None."""
    start = None
    for i, token, depth in nesting(tokens):
        if depth == 0 and i > 2 and token.text.upper() in _STATEMENT_CLAUSES:
            if start is not None and token.start > offset:
                return blank(text, start, token.start)
            if token.start <= offset:
                start = token.start
    return blank(text, start, len(text)) if start is not None and start <= offset else None


def patched(model: _M, text: str, reduced: dict[str, Item]) -> _M:
    """The model with the columns set aside for sqlglot read from their verbatim definitions (a table's, an MV's
    inner table's)."""
    if isinstance(model, Table) and reduced:
        columns = tuple(_verbatim_column(text, reduced[c.name]) if c.name in reduced else c for c in model.columns)
        return model.model_copy(update={"columns": columns})
    if isinstance(model, MaterializedView) and model.inner_table is not None and reduced:
        return model.model_copy(update={"inner_table": patched(model.inner_table, text, reduced)})
    return model


def _verbatim_column(text: str, item: Item) -> Column:
    """A column from its definition as written (type, DEFAULT/MATERIALIZED/ALIAS/EPHEMERAL expression, COMMENT)."""
    definition = text[item.start : item.end]
    kind = expression = comment = None
    tokens = tokenize(text[item.type_end : item.end])
    current, begin = None, 0
    clauses: dict[str, str] = {}

    def close(i: int) -> None:  # the clause ``current`` ends before token ``i``
        if current is not None and i > begin:
            clauses.setdefault(
                current, text[item.type_end + tokens[begin].start : item.type_end + tokens[i - 1].end + 1]
            )

    for i, token, depth in nesting(tokens):
        if depth == 0 and token.text.upper() in _COLUMN_CLAUSES:
            close(i)
            current, begin = token.text.upper(), i + 1
    close(len(tokens))
    for word in _DEFAULT_KINDS:
        if word in clauses:
            kind, expression = word, clauses[word]
    if "COMMENT" in clauses:
        comment = clauses["COMMENT"].strip().strip("'")
    type_sql = " ".join(text[item.type_start : item.type_end].split())
    return spelled_column(item.name, type_sql, (kind, expression), comment, definition)
