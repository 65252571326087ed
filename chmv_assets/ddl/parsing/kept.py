"""Statements chmv keeps as written without modelling them (docs/any-schema.md, "Statements chmv keeps as written"):
SQL functions, plain views, named collections, access control; with what they read and call."""

from __future__ import annotations

import re
from typing import TypedDict

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from chmv_assets.ddl.models import KeptKind, KeptObject, ObjectRef, SourceLocation, Span
from chmv_assets.ddl.parsing.context import Context, Located
from chmv_assets.ddl.parsing.select import analyze_select
from chmv_assets.ddl.parsing.server import ask, ask_all
from chmv_assets.ddl.parsing.trees import read_with_sqlglot, release, span
from chmv_assets.ddl.query_tree import analyze_query_tree
from chmv_assets.ddl.sql_text import (
    StatementKind,
    names_after,
    nesting,
    on_cluster_span,
    select_start,
    trailing_comment,
)

#: Statements chmv keeps as written, by the kind their first words say.
KEPT_KINDS = {k.value: k for k in KeptKind}
#: Words after which a GRANT's grantees end.
_GRANT_END = frozenset({"WITH", "SETTINGS"})
_AST_FUNCTION = re.compile(r"^\s*Function (\S+)", re.MULTILINE)


def kept(located: Located, ctx: Context, tokens: list[Token], kind: StatementKind) -> KeptObject | None:
    """A statement chmv keeps without modelling it: a plain view, a function, access control, a named collection."""
    stmt = located.statement
    text = stmt.text
    what = KEPT_KINDS[kind.kind or ""]
    cluster = span(on_cluster_span(tokens))
    common = _Common(
        statement=text,
        location=located.location(),
        description="\n".join(c for c in stmt.comments if c) or None,
        on_cluster=_cluster_name(text, cluster),
        cluster_span=cluster,
    )
    if what == KeptKind.VIEW:
        return _plain_view(located, ctx, tokens, kind, common)
    answer = ask(located, ctx, "ast", text, None)
    if answer is None:
        return None
    functions = tuple(dict.fromkeys(f for f in _AST_FUNCTION.findall(answer) if f not in ("lambda", "tuple")))
    names = names_after(tokens, kind.name_at)
    if what == KeptKind.GRANT:
        grantees, reads = _grant_parts(tokens, ctx.default_database)
        return KeptObject(kind=what, name=" ".join(text.split()), names=grantees, reads=reads, **common)
    if not names:
        ctx.at(located.location(), f"cannot find the name of this {what}", "write CREATE <kind> name …")
        return None
    listed = tuple(".".join(parts) for parts, _s, _e in names)
    name_span = Span(start=names[0][1], end=names[0][2])
    if what in (KeptKind.ROW_POLICY, KeptKind.MASKING_POLICY):
        reads = _policy_tables(tokens, ctx.default_database)
        return KeptObject(
            kind=what,
            name=f"{listed[0]} ON {', '.join(r.fqn for r in reads)}",
            names=listed[:1],
            reads=reads,
            name_span=name_span,
            **common,
        )
    if what == KeptKind.FUNCTION:
        return KeptObject(
            kind=what,
            name=listed[0],
            names=listed[:1],
            functions=functions[1:] if functions else (),
            name_span=name_span,
            **common,
        )
    return KeptObject(kind=what, name=", ".join(listed), names=listed, name_span=name_span, **common)


class _Common(TypedDict):
    """What every kept statement has: its text, place, comment and ``ON CLUSTER``."""

    statement: str
    location: SourceLocation
    description: str | None
    on_cluster: str | None
    cluster_span: Span | None


def _plain_view(
    located: Located, ctx: Context, tokens: list[Token], kind: StatementKind, common: _Common
) -> KeptObject | None:
    stmt = located.statement
    text = stmt.text
    names = names_after(tokens, kind.name_at)
    start = select_start(tokens)
    if not names or start is None:
        ctx.at(located.location(), "a view needs a name and AS SELECT", "write CREATE VIEW db.name AS SELECT …")
        return None
    parts, name_start, name_end = names[0]
    ref = ObjectRef(database=".".join(parts[:-1]) or ctx.default_database, name=parts[-1])
    comment = trailing_comment(tokens)
    select_sql = text[start : comment[0] if comment else len(text)].rstrip()
    node, _tokens, _populate, error = read_with_sqlglot(text, tokens)
    if isinstance(node, exp.Create) and node.expression is not None and comment is None:
        try:
            facts = analyze_select(node.expression, ctx.default_database, start)
        finally:
            release(node)
    else:
        if node is not None:
            release(node)
        answers = ask_all(located, ctx, [("ast", text, 0), ("tree", select_sql, start)], error)
        if answers is None:
            return None
        facts = analyze_query_tree(answers[1], select_sql, ctx.default_database)
    if comment is not None:
        common = {**common, "description": comment[1]}
    return KeptObject(
        kind=KeptKind.VIEW,
        name=ref.fqn,
        names=(ref.fqn,),
        ref=ref,
        reads=tuple(dict.fromkeys([*(u.ref for u in facts.sources), *facts.dictionaries])),
        functions=facts.functions,
        sources=facts.sources,
        select_sql=select_sql,
        select_at=start,
        name_span=Span(start=name_start, end=name_end),
        **common,
    )


def _cluster_name(text: str, cluster: Span | None) -> str | None:
    if cluster is None:
        return None
    words = text[cluster.start : cluster.end].split()
    return words[-1].strip("'\"`") if words else None


def _grant_parts(tokens: list[Token], default_database: str) -> tuple[tuple[str, ...], tuple[ObjectRef, ...]]:
    """A GRANT's grantees (after its depth-0 TO) and the tables it names (after ON, not ``db.*``)."""
    grantees: list[str] = []
    reads: list[ObjectRef] = []
    for i, token, depth in nesting(tokens):
        if depth == 0 and token.token_type == TokenType.ON and not _cluster_at(tokens, i):
            reads.extend(_named_tables(tokens, i + 1, default_database))
        elif depth == 0 and token.text.upper() == "TO":
            for other in tokens[i + 1 :]:
                if other.text.upper() in _GRANT_END:
                    break
                if other.token_type != TokenType.COMMA:
                    grantees.append(other.text)
            break
    return tuple(grantees), tuple(reads)


def _cluster_at(tokens: list[Token], i: int) -> bool:
    """Token ``i`` is the ON of ``ON CLUSTER``."""
    return i + 1 < len(tokens) and tokens[i + 1].text.upper() == "CLUSTER"


def _policy_tables(tokens: list[Token], default_database: str) -> tuple[ObjectRef, ...]:
    """The tables a row policy is ON."""
    for i, token in enumerate(tokens):
        if token.token_type == TokenType.ON and not _cluster_at(tokens, i):
            return _named_tables(tokens, i + 1, default_database)
    return ()


def _named_tables(tokens: list[Token], i: int, default_database: str) -> tuple[ObjectRef, ...]:
    """The comma-separated tables named from token ``i``."""
    return tuple(
        ObjectRef(database=".".join(parts[:-1]) or default_database, name=parts[-1])
        for parts, _s, _e in names_after(tokens, i)
    )
