"""sqlglot's tree of one statement, and what every reader asks of its nodes.

sqlglot's ClickHouse dialect parses the tokens :mod:`chmv_assets.ddl.sql_text` made once; a statement it cannot read
is read with its unknown parts set aside (:mod:`.set_aside`) or by ClickHouse's own parser (:mod:`.server`). The
models keep no node: each tree is released (:func:`release`) once read.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from chmv_assets.ddl.models import ObjectRef, Span
from chmv_assets.ddl.sql_text import security_spans, thread_parser, tokenize

logging.getLogger("sqlglot").setLevel(logging.ERROR)


class SqlglotRead(NamedTuple):
    """sqlglot's parse of a statement.

    Attributes:
        node: The tree; None if sqlglot failed or read only a command.
        tokens: The tokens the tree was read from (what was blanked for sqlglot is blank in them too).
        populate: The statement has POPULATE (blanked for sqlglot, offsets kept).
        error: sqlglot's error, when it failed.
    """

    node: exp.Expr | None
    tokens: list[Token]
    populate: bool
    error: ParseError | None


def read_with_sqlglot(text: str, tokens: list[Token]) -> SqlglotRead:
    """sqlglot's parse of a statement, with what it cannot read but needs not know blanked (offsets kept): a
    ``DEFINER = u SQL SECURITY …`` clause and POPULATE."""
    populate = False
    security = security_spans(tokens)
    if security:  # sqlglot fails on `DEFINER = u SQL SECURITY DEFINER` (a TypeError): blank it, offsets kept
        for start, end in security:
            text = blank(text, start, end)
        tokens = tokenize(text)
    try:
        node = parse_tokens(tokens, text)
        if isinstance(node, exp.Command):
            # sqlglot cannot parse `… POPULATE AS SELECT`: blank the keyword (offsets stay valid) and retry.
            keyword = next(
                (
                    t
                    for t, after in zip(tokens, tokens[1:], strict=False)
                    if t.token_type == TokenType.VAR
                    and t.text.upper() == "POPULATE"
                    and after.token_type == TokenType.ALIAS
                ),
                None,
            )
            if keyword is not None:
                populate = True
                blanked = blank(text, keyword.start, keyword.end + 1)
                tokens = tokenize(blanked)
                node = parse_tokens(tokens, blanked)
    except ParseError as err:
        return SqlglotRead(None, tokens, populate, err)
    except (TypeError, AttributeError, ValueError, IndexError, KeyError, RecursionError) as err:
        # sqlglot's own defect on a statement it does not expect: ClickHouse's parser reads it instead
        return SqlglotRead(None, tokens, populate, ParseError(f"sqlglot failed: {type(err).__name__}: {err}"))
    if isinstance(node, exp.Command):
        release(node)
        return SqlglotRead(None, tokens, populate, None)
    return SqlglotRead(node, tokens, populate, None)


def parse_tokens(tokens: list[Token], text: str) -> exp.Expr:
    """Parse one statement from its tokens (tokenized once, shared with the clause extraction)."""
    parsed = thread_parser().parse(tokens, text)
    if not parsed or parsed[0] is None:
        raise ParseError("No expression was parsed from the statement")
    return parsed[0]


def release(tree: exp.Expr) -> None:
    """Unlink every node from its parent, so reference counting frees the tree as soon as it is dropped.

    Each node points to its parent, so a parse tree is a reference cycle: without this, the trees of every
    statement of a directory wait for the cyclic garbage collector, which then traverses them all (a fifth
    of a cold load of 1,000 MVs, benchmarks/bench_definitions.py). The models keep no node.
    """
    for node in tree.walk():
        node.parent = None


def blank(text: str, start: int, end: int, replacement: str = "") -> str:
    """``text`` with ``[start, end)`` replaced by ``replacement`` padded with spaces: every offset stays valid."""
    return text[:start] + replacement.ljust(end - start) + text[end:]


def describe(error: ParseError) -> str:
    """The first line of sqlglot's error."""
    first = error.errors[0] if error.errors else {}
    return str(first.get("description") or error).splitlines()[0]


def function_name(node: exp.Expr) -> str:
    """The ClickHouse spelling of a function call as written (``toStartOfHour``, ``sumState``)."""
    name = node.meta.get("clickhouse_name")
    if name:
        return name
    if isinstance(
        node,
        exp.Anonymous
        | exp.CombinedAggFunc
        | exp.CombinedParameterizedAgg
        | exp.AnonymousAggFunc
        | exp.ParameterizedAgg,
    ):
        return node.name
    return node.sql_name() if isinstance(node, exp.Func) else node.key


def properties(node: exp.Create) -> dict[type[exp.Expr], exp.Expr]:
    """The CREATE's own properties by type, the first of each: what ``node.find`` returns, without walking
    the columns and the SELECT (an MV's SELECT may have SETTINGS and ORDER BY of its own)."""
    found = node.args.get("properties")
    return {type(p): p for p in reversed(found.expressions)} if found is not None else {}


def is_real_table(table: exp.Table) -> bool:
    """A table named by an identifier, not a table function (``numbers()``, ``url()``, ``file()`` …)."""
    return isinstance(table.this, exp.Identifier)


def table_ref(table: exp.Table, default_database: str) -> ObjectRef:
    return ObjectRef(database=table.db or default_database, name=table.name)


def written_ref(name: str, default_database: str) -> ObjectRef:
    """The object a name written as text names (``db.t``, ``t``; quotes stripped)."""
    database, _, table = name.rpartition(".")
    return ObjectRef(database=(database or default_database).strip('`"'), name=table.strip('`"'))


def name_span(table: exp.Expr | None) -> Span | None:
    """Span of a (possibly qualified) table name as written, ``db.name`` or ``name``, quotes included."""
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None
    first = table.args["db"] if table.args.get("db") is not None else table.this
    if "start" not in first.meta or "end" not in table.this.meta:
        return None
    return Span(start=first.meta["start"], end=table.this.meta["end"] + 1)


def span(bounds: tuple[int, int] | None) -> Span | None:
    return Span(start=bounds[0], end=bounds[1]) if bounds is not None else None
