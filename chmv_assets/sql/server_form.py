"""A view's SELECT as the server stores it, to compare the DDL's with the live one.

When ClickHouse creates a materialized or plain view it rewrites the SELECT it keeps (``system.tables.as_select``):
an unqualified table gets its database (``FROM t`` → ``FROM db.t``) and every SQL function of ``CREATE FUNCTION``
is expanded into its body (``path_section(p)`` → ``splitByChar('/', …)[2]``). :func:`server_select` applies the same
rewrites to the SELECT of the DDL, so that the server's formatting of both (``formatQuery``) differs only where the
DDL does: right after ``chmv apply``, ``chmv plan`` finds no change.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from chmv_assets.ddl.models import KeptObject, MaterializedView, Project, splice
from chmv_assets.ddl.sql_text import tokenize
from chmv_assets.sql.quoting import quote

#: How deep SQL functions may call each other before the expansion stops (the server refuses recursion anyway).
MAX_DEPTH = 16


def server_select(view: MaterializedView | KeptObject, project: Project) -> str:
    """``view``'s SELECT with its unqualified tables qualified and the project's SQL functions expanded."""
    sql = view.select_sql or ""
    edits = []
    for use in view.sources:
        for span in use.spans:
            # in a FROM clause, as the name stands there (alone, `system` would read as the SYSTEM statement)
            if not any(t.token_type == TokenType.DOT for t in tokenize(f"SELECT 1 FROM {sql[span.start : span.end]}")):
                edits.append((span.start, span.start, f"{quote(use.ref.database)}."))
    sql = splice(sql, edits) if edits else sql
    functions = sql_functions(project)
    return expand_functions(sql, functions) if functions else sql


def sql_functions(project: Project) -> dict[str, tuple[tuple[str, ...], str]]:
    """The project's SQL functions: name → (parameters, body as written)."""
    found = {}
    for name, function in project.functions.items():
        parts = function_parts(function.statement)
        if parts is not None:
            found[name] = parts
    return found


def function_parts(statement: str) -> tuple[tuple[str, ...], str] | None:
    """``CREATE FUNCTION f AS (a, b) -> body`` → ``(("a", "b"), "body")``; None if it is not of that shape."""
    tokens = tokenize(statement)
    arrow = next((i for i, t in enumerate(tokens) if t.token_type == TokenType.ARROW), None)
    alias = next((i for i, t in enumerate(tokens) if t.token_type == TokenType.ALIAS), None)
    if arrow is None or alias is None or alias > arrow:
        return None
    params = tuple(t.text for t in tokens[alias + 1 : arrow] if t.token_type in (TokenType.VAR, TokenType.IDENTIFIER))
    return params, statement[tokens[arrow].end + 1 :].strip()


def expand_functions(sql: str, functions: Mapping[str, tuple[tuple[str, ...], str]], depth: int = 0) -> str:
    """``sql`` with every call of ``functions`` replaced by the function's body, its parameters by the arguments.

    Parentheses are added only where an expression that is not atomic lands inside another (``p * 2`` of ``a + b``):
    the server keeps written parentheses when it formats, and its own expansion writes none where they are not needed.
    """
    if depth > MAX_DEPTH:
        return sql
    tokens = tokenize(sql)
    edits: list[tuple[int, int, str]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        call = (
            token.text in functions
            and i + 1 < len(tokens)
            and tokens[i + 1].token_type == TokenType.L_PAREN
            and (i == 0 or tokens[i - 1].token_type != TokenType.DOT)
        )
        if not call:
            i += 1
            continue
        close, arguments = _call(tokens, i + 1, sql)
        params, body = functions[token.text]
        values = {p: expand_functions(a, functions, depth + 1) for p, a in zip(params, arguments, strict=False)}
        expanded = expand_functions(_bind(body, values), functions, depth + 1)
        whole = _alone(tokens, i, close)
        edits.append((token.start, tokens[close].end + 1, expanded if whole or _atomic(expanded) else f"({expanded})"))
        i = close + 1
    return splice(sql, edits) if edits else sql


#: Tokens after which an expression stands alone (a whole argument, a whole SELECT item or condition).
_BEFORE_ALONE = frozenset(
    {
        TokenType.L_PAREN,
        TokenType.COMMA,
        TokenType.SELECT,
        TokenType.WHERE,
        TokenType.PREWHERE,
        TokenType.HAVING,
        TokenType.GROUP_BY,
        TokenType.ORDER_BY,
        TokenType.DISTINCT,
        TokenType.L_BRACKET,
    }
)
#: Tokens before which an expression stands alone.
_AFTER_ALONE = frozenset(
    {
        TokenType.R_PAREN,
        TokenType.COMMA,
        TokenType.ALIAS,
        TokenType.FROM,
        TokenType.WHERE,
        TokenType.PREWHERE,
        TokenType.GROUP_BY,
        TokenType.ORDER_BY,
        TokenType.HAVING,
        TokenType.LIMIT,
        TokenType.SETTINGS,
        TokenType.UNION,
        TokenType.R_BRACKET,
    }
)


def _alone(tokens, first: int, last: int) -> bool:
    """Tokens ``first``…``last`` are a whole argument, SELECT item or condition (no operator binds them)."""
    before = tokens[first - 1].token_type if first > 0 else None
    after = tokens[last + 1].token_type if last + 1 < len(tokens) else None
    return (before is None or before in _BEFORE_ALONE) and (after is None or after in _AFTER_ALONE)


def _atomic(text: str) -> bool:
    """A name, a literal, a call or an element of one (``f(x)``, ``f(x)[2]``), or a parenthesized expression."""
    tokens = tokenize(text)
    if len(tokens) <= 1:
        return True
    i = 0
    while i < len(tokens) and tokens[i].token_type in (TokenType.VAR, TokenType.IDENTIFIER, TokenType.DOT):
        i += 1
    if i == len(tokens):
        return True  # a qualified name
    while i < len(tokens) and tokens[i].token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
        close, _args = _call(tokens, i, text)
        i = close + 1
    return i == len(tokens)


def _call(tokens, opening: int, sql: str) -> tuple[int, list[str]]:
    """The index of the parenthesis closing the call at ``opening``, and its arguments as written."""
    depth, start, arguments = 0, tokens[opening].end + 1, []
    for j in range(opening, len(tokens)):
        kind = tokens[j].token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
            if depth == 0:
                if sql[start : tokens[j].start].strip():
                    arguments.append(sql[start : tokens[j].start].strip())
                return j, arguments
        elif kind == TokenType.COMMA and depth == 1:
            arguments.append(sql[start : tokens[j].start].strip())
            start = tokens[j].end + 1
    return len(tokens) - 1, arguments


def _bind(body: str, values: Mapping[str, str]) -> str:
    """``body`` with each parameter replaced by its argument (parenthesized where an operator binds it)."""
    tokens = tokenize(body)
    edits = []
    for i, t in enumerate(tokens):
        if t.text not in values or t.token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            continue
        if i > 0 and tokens[i - 1].token_type == TokenType.DOT:
            continue
        value = values[t.text]
        edits.append((t.start, t.end + 1, value if _alone(tokens, i, i) or _atomic(value) else f"({value})"))
    return splice(body, edits) if edits else body


def same_structure(left: str, right: str) -> bool:
    """Whether two SELECTs as the server formatted them differ only in redundant parentheses.

    The server keeps the parentheses its own rewrites wrote: ``ALTER TABLE … MODIFY QUERY`` stores an expanded SQL
    function's body parenthesized (``(splitByChar(…)[2]) AS section``) where ``CREATE`` stores it bare. Both are parsed
    (sqlglot, ClickHouse dialect), every parenthesis that groups nothing is dropped and every operation is
    parenthesized: the texts are the same query when these canonical forms are equal (``(a + b) * c`` and
    ``a + (b * c)`` stay apart). False when either does not parse. For comparison only: nothing runs this text.
    """
    try:
        return _structure(left) == _structure(right)
    except sqlglot.errors.SqlglotError:
        return False


def _structure(sql: str) -> str:
    tree = sqlglot.parse_one(sql, read="clickhouse")
    tree = tree.transform(lambda n: n.this if isinstance(n, exp.Paren) and not isinstance(n.this, _GROUPS) else n)
    return _grouped(tree).sql(dialect="clickhouse")


#: What a parenthesis holds that is not a redundant grouping (a subquery).
_GROUPS = (exp.Select, exp.Union, exp.Subquery)


def _grouped(node: exp.Expression) -> exp.Expression:
    """``node`` with every binary operation in it parenthesized, bottom up."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _grouped(value))
        elif isinstance(value, list):
            node.set(key, [_grouped(v) if isinstance(v, exp.Expression) else v for v in value])
    return exp.Paren(this=node) if isinstance(node, exp.Binary) else node
