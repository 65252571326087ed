"""One statement to its model: sqlglot reads it; where it cannot, ClickHouse's own parser does (docs/any-schema.md,
"Reading any ClickHouse DDL"); a statement chmv keeps without modelling it becomes a
:class:`~chmv_assets.ddl.models.KeptObject`."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import Token

from chmv_assets.ddl.models import StatementModel
from chmv_assets.ddl.parsing.context import Context, Located
from chmv_assets.ddl.parsing.databases import database_from_tokens, parse_database
from chmv_assets.ddl.parsing.dictionaries import parse_dictionary
from chmv_assets.ddl.parsing.kept import KEPT_KINDS, kept
from chmv_assets.ddl.parsing.server import ask
from chmv_assets.ddl.parsing.set_aside import Unreadable, patched, readable, report_unreadable
from chmv_assets.ddl.parsing.tables import parse_table
from chmv_assets.ddl.parsing.trees import properties, read_with_sqlglot, release
from chmv_assets.ddl.parsing.views import parse_view, server_view
from chmv_assets.ddl.sql_text import split_statements, statement_kind, tokenize
from chmv_assets.errors import DDLError, DDLProblem

#: Kinds chmv models: what sqlglot reads, or ClickHouse's own parser where sqlglot cannot.
MODELED_KINDS = frozenset({"table", "materialized view", "database", "dictionary"})


def parse_statement(
    sql: str, *, default_database: str = "default", origin: str = "<statement>"
) -> StatementModel | None:
    """Parse one CREATE statement the way :func:`~chmv_assets.ddl.parsing.project.load_project` parses each statement
    of a file.

    For statements that do not come from the DDL directory, such as the server's own
    ``create_table_query``, so they are read by the same parser as the repo's DDL.

    Args:
        sql: One statement (a trailing semicolon is allowed).
        default_database: For unqualified names.
        origin: Where the statement comes from, for error messages.

    Returns:
        The model, or None for a statement chmv ignores (``USE``, ``SET``).

    Raises:
        DDLError: The statement does not parse or is not one chmv models.
    """
    ctx = Context(default_database)
    try:
        statements = list(split_statements(sql))
    except TokenError as err:
        raise DDLError([DDLProblem(origin, 1, 1, f"cannot tokenize: {err}")]) from err
    if len(statements) != 1:
        raise DDLError([DDLProblem(origin, 1, 1, f"expected one statement, found {len(statements)}")])
    parsed = read_statement(Located(origin, sql, statements[0]), ctx)
    if ctx.problems:
        raise DDLError(ctx.problems)
    return parsed


def read_statement(located: Located, ctx: Context) -> StatementModel | None:
    """The model of one statement of a file; None, with the problem recorded, for one chmv cannot read or does not
    model (and for ``USE`` and ``SET``, which it ignores)."""
    stmt = located.statement
    text = stmt.text
    try:
        tokens = tokenize(text)
    except TokenError as err:
        ctx.at(located.location(), f"cannot tokenize: {err}", "close the string or comment")
        return None
    kind = statement_kind(tokens)
    if kind.kind in KEPT_KINDS:
        return kept(located, ctx, tokens, kind)
    node, tokens, populate, error = read_with_sqlglot(text, tokens)
    if isinstance(node, exp.Create) and kind.kind in MODELED_KINDS:
        try:
            return _model(node, located, ctx, tokens, populate)
        finally:
            release(node)
    if isinstance(node, exp.Use | exp.Set):
        return None
    if node is not None:
        release(node)
    if kind.kind == "materialized view":
        try:
            return server_view(located, ctx, tokens, populate, error)
        except Unreadable as err:
            report_unreadable(located, ctx, err)
            return None
    if ask(located, ctx, "ast", text, error) is None:
        return None
    if kind.kind not in MODELED_KINDS:
        words = " ".join(text.split()[:3])
        ctx.at(
            located.location(),
            f"unsupported statement: {words} …",
            "the DDL directory declares objects: CREATE DATABASE/TABLE/DICTIONARY/[MATERIALIZED] VIEW/FUNCTION, "
            "access control (users, roles, grants, row policies, quotas, settings profiles), named "
            "collections; run one-off statements (INSERT, ALTER, DROP…) by hand",
        )
        return None
    try:
        if kind.kind == "database":
            return database_from_tokens(located, tokens, kind)
        created, populate, reduced = readable(text, tokens)
    except Unreadable as err:
        report_unreadable(located, ctx, err)
        return None
    try:
        return patched(_model(created, located, ctx, tokens, populate), text, reduced)
    finally:
        release(created)


def _model(
    node: exp.Create, located: Located, ctx: Context, tokens: list[Token], populate: bool
) -> StatementModel | None:
    """The model of a parsed CREATE statement (None, with a problem recorded, for one chmv does not model)."""
    kind = (node.args.get("kind") or "").upper()
    description = "\n".join(c for c in located.statement.comments if c) or None
    if kind in ("SCHEMA", "DATABASE"):
        return parse_database(node, located)
    if kind == "TABLE":
        return parse_table(node, located, ctx, description, tokens)
    if kind == "DICTIONARY":
        return parse_dictionary(node, located, ctx, description)
    if kind == "VIEW" and exp.MaterializedProperty in properties(node):
        return parse_view(node, located, ctx, description, populate, tokens)
    ctx.at(
        located.location(),
        f"unsupported CREATE {kind}",
        "the DDL directory declares objects: CREATE DATABASE/TABLE/DICTIONARY/[MATERIALIZED] VIEW/FUNCTION, "
        "access control, named collections",
    )
    return None
