"""A CREATE DATABASE: its name and engine, from sqlglot's tree or, where sqlglot cannot read it, from its words."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from chmv_assets.ddl.models import Database
from chmv_assets.ddl.parsing.context import Located
from chmv_assets.ddl.parsing.set_aside import Unreadable
from chmv_assets.ddl.parsing.trees import properties
from chmv_assets.ddl.sql_text import StatementKind, names_after, to_sql


def parse_database(node: exp.Create, located: Located) -> Database:
    engine = properties(node).get(exp.EngineProperty)
    return Database(
        name=node.this.name,
        engine=to_sql(engine.this) if engine and engine.this else None,
        statement=located.statement.text,
        location=located.location(),
    )


def database_from_tokens(located: Located, tokens: list[Token], kind: StatementKind) -> Database:
    """A CREATE DATABASE sqlglot cannot read: its name and engine from its words.

    Raises:
        Unreadable: No name after ``CREATE DATABASE``.
    """
    names = names_after(tokens, kind.name_at)
    if not names:
        raise Unreadable("no database name")
    engine = next(
        (
            tokens[i + 2].text if tokens[i + 1].token_type == TokenType.EQ else tokens[i + 1].text
            for i, t in enumerate(tokens[:-2])
            if t.text.upper() == "ENGINE"
        ),
        None,
    )
    return Database(name=names[0][0][-1], engine=engine, statement=located.statement.text, location=located.location())
