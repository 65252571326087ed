"""A CREATE DICTIONARY from sqlglot's tree: its columns, key, and the ClickHouse table it loads from."""

from __future__ import annotations

from sqlglot import exp

from chmv_assets.ddl.models import Dictionary, ObjectRef
from chmv_assets.ddl.parsing.context import Context, Located
from chmv_assets.ddl.parsing.tables import column_definitions
from chmv_assets.ddl.parsing.trees import name_span, table_ref
from chmv_assets.ddl.sql_text import to_sql


def parse_dictionary(node: exp.Create, located: Located, ctx: Context, description: str | None) -> Dictionary:
    schema = node.this
    ref = table_ref(schema.this, ctx.default_database)
    source_table = None
    for prop in node.find_all(exp.DictProperty):
        if _text(prop.this).upper() != "SOURCE" or _text(prop.args.get("kind")).upper() != "CLICKHOUSE":
            continue
        settings = {_text(s.this).upper(): _text(s.args["value"]) for s in prop.find_all(exp.DictSubProperty)}
        if "TABLE" in settings and "QUERY" not in settings:
            source_table = ObjectRef(database=settings.get("DB") or ctx.default_database, name=settings["TABLE"])
    key = node.find(exp.PrimaryKey)
    return Dictionary(
        ref=ref,
        columns=column_definitions(schema),
        source_table=source_table,
        primary_key=", ".join(to_sql(e) for e in key.expressions) if key else None,
        description=description,
        statement=located.statement.text,
        location=located.location(),
        name_span=name_span(schema.this),
    )


def _text(value: exp.Expr | str | None) -> str:
    """The name of a node, or a plain string as sqlglot stores some dictionary properties."""
    if value is None:
        return ""
    return value if isinstance(value, str) else value.name
