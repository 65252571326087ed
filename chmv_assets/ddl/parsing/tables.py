"""A CREATE TABLE (and an MV's inner table) from sqlglot's tree: columns, engine and what it reads through, the
verbatim clauses (PARTITION BY, ORDER BY, TTL, SETTINGS…) and their spans."""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp
from sqlglot.tokens import Token

from chmv_assets.ddl.models import Column, Engine, Fragment, ObjectRef, Span, Table
from chmv_assets.ddl.parsing.context import Context, Located
from chmv_assets.ddl.parsing.partition_by import partition_call, partition_elements
from chmv_assets.ddl.parsing.trees import (
    function_name,
    is_real_table,
    name_span,
    properties,
    span,
    table_ref,
    written_ref,
)
from chmv_assets.ddl.sql_text import clauses, engine_string_arguments, item_end, on_cluster_span, to_sql
from chmv_assets.ddl.ttl import parse_ttl
from chmv_assets.ddl.types import SPELLING


def parse_table(
    node: exp.Create, located: Located, ctx: Context, description: str | None, tokens: list[Token]
) -> Table:
    """A CREATE TABLE: ``CREATE TABLE t AS other`` and the tables its engine reads through too."""
    schema = node.this
    target = schema.this if isinstance(schema, exp.Schema) else schema
    ref = table_ref(target, ctx.default_database)
    columns = column_definitions(schema, located.statement.text, tokens)
    table = table_properties(node, located, ref, columns, description, tokens, name_span(target))
    source = node.expression
    update: dict[str, object] = {}
    if isinstance(source, exp.Table) and is_real_table(source):  # CREATE TABLE t AS other
        update = {"as_table": table_ref(source, ctx.default_database), "as_table_span": name_span(source)}
    reads = _engine_reads(table.engine, ref)
    if reads:
        update["reads"] = reads
    return table.model_copy(update=update) if update else table


def column_definitions(
    schema: exp.Expr | None, text: str = "", tokens: list[Token] | None = None
) -> tuple[Column, ...]:
    """The column definitions of a schema; with the statement's ``text`` and ``tokens``, each one verbatim too."""
    if not isinstance(schema, exp.Schema):
        return ()
    columns = []
    for col in schema.expressions:
        if not isinstance(col, exp.ColumnDef):
            continue
        definition = None
        start = col.this.meta.get("start") if isinstance(col.this, exp.Identifier) else None
        if tokens is not None and start is not None:
            definition = text[start : item_end(tokens, start)]
        default_kind = default_expr = comment = None
        for constraint in col.args.get("constraints") or []:
            kind = constraint.args.get("kind")
            if isinstance(kind, exp.DefaultColumnConstraint):
                default_kind, default_expr = "DEFAULT", to_sql(kind.this)
            elif isinstance(kind, exp.ComputedColumnConstraint):
                default_kind = "MATERIALIZED" if kind.args.get("persisted") else "ALIAS"
                default_expr = to_sql(kind.this)
            elif isinstance(kind, exp.CommentColumnConstraint):
                comment = kind.this.name
        col_type = col.args.get("kind")
        type_sql = to_sql(col_type) if col_type else ""
        columns.append(spelled_column(col.name, type_sql, (default_kind, default_expr), comment, definition))
    return tuple(columns)


def spelled_column(
    name: str, type_sql: str, default: tuple[str | None, str | None], comment: str | None, definition: str | None
) -> Column:
    """A column, its type spelled as the server spells it (:data:`~chmv_assets.ddl.types.SPELLING`).

    Args:
        default: Its DEFAULT, MATERIALIZED, ALIAS or EPHEMERAL and the expression, or ``(None, None)``.
    """
    return Column(
        name=name,
        type=SPELLING.get(type_sql, type_sql),
        default_kind=default[0],
        default_expression=default[1],
        comment=comment,
        definition=definition,
    )


def table_properties(
    node: exp.Create,
    located: Located,
    ref: ObjectRef,
    columns: tuple[Column, ...],
    description: str | None,
    tokens: list[Token],
    name: Span | None = None,
) -> Table:
    """The table a CREATE's properties describe (a table's, or an MV's inner table's)."""
    text = located.statement.text
    spans = clauses(tokens)

    def verbatim(phrase: str) -> str | None:
        found = spans.get(phrase)
        return text[found[0] : found[1]] if found else None

    props = properties(node)
    partition_span = spans.get("PARTITION BY")
    partition_prop = props.get(exp.PartitionedByProperty)
    cluster = props.get(exp.OnCluster)
    comment = props.get(exp.SchemaCommentProperty)
    engine = _engine(props)
    keeper = engine_string_arguments(tokens) if engine is not None and engine.keeper_path is not None else []
    ttl = props.get(exp.MergeTreeTTL)
    return Table(
        ref=ref,
        columns=columns,
        engine=engine,
        partition_by=_fragment(located, partition_span, partition_prop) if partition_span else None,
        partition_call=partition_call(partition_prop) if partition_span else None,
        partition_elements=partition_elements(partition_span, partition_prop, tokens) if partition_span else (),
        order_by=verbatim("ORDER BY"),
        order_by_columns=_column_names([props.get(exp.Order)]),
        primary_key=verbatim("PRIMARY KEY"),
        ttl=verbatim("TTL"),
        ttl_rules=parse_ttl(ttl if isinstance(ttl, exp.MergeTreeTTL) else None, columns),
        settings=verbatim("SETTINGS"),
        settings_map=_settings(props.get(exp.SettingsProperty)),
        on_cluster=cluster.this.name if cluster is not None else None,
        description=(comment.this.name if comment is not None else None) or description,
        statement=text,
        location=located.location(),
        name_span=name,
        cluster_span=span(on_cluster_span(tokens)) if cluster is not None else None,
        keeper_path_span=span(keeper[0]) if len(keeper) >= 2 else None,
    )


def _engine(props: dict[type[exp.Expr], exp.Expr]) -> Engine | None:
    prop = props.get(exp.EngineProperty)
    if prop is None:
        return None
    value = prop.this
    if isinstance(value, exp.Func | exp.Anonymous):
        name, arguments = function_name(value), list(value.expressions)
        keeper = [a.this for a in arguments[:2] if isinstance(a, exp.Literal) and a.is_string]
        explicit = name.startswith("Replicated") and len(keeper) == 2
        return Engine(
            name=name,
            arguments=tuple(to_sql(a) for a in arguments),
            argument_columns=_column_names(arguments),
            keeper_path=keeper[0] if explicit else None,
            replica_name=keeper[1] if explicit else None,
        )
    if isinstance(value, exp.Null):  # ENGINE = Null
        return Engine(name="Null")
    return Engine(name=value.name if isinstance(value, exp.Identifier | exp.Var | exp.Column) else to_sql(value))


def _fragment(located: Located, bounds: tuple[int, int], prop: exp.Expr | None) -> Fragment:
    """A verbatim clause with the spans of the columns it references, relative to the fragment."""
    start, end = bounds
    spans: dict[str, list[Span]] = {}
    for column in prop.find_all(exp.Column) if prop is not None else ():
        meta = column.this.meta if isinstance(column.this, exp.Identifier) else {}
        if "start" in meta and column.args.get("table") is None:
            spans.setdefault(column.name, []).append(Span(start=meta["start"] - start, end=meta["end"] + 1 - start))
    return Fragment(
        sql=located.statement.text[start:end], column_spans=tuple((name, tuple(s)) for name, s in spans.items())
    )


def _column_names(nodes: Iterable[exp.Expr | None]) -> tuple[str, ...]:
    """Distinct unqualified column names referenced by ``nodes``, in written order."""
    return tuple(dict.fromkeys(c.name for n in nodes if n is not None for c in n.find_all(exp.Column, bfs=False)))


def _settings(prop: exp.Expr | None) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in prop.expressions if prop is not None else ():
        if isinstance(item, exp.EQ):
            value = item.expression
            pairs.append((item.this.name, value.name if isinstance(value, exp.Literal) else to_sql(value)))
    return tuple(pairs)


def _engine_reads(engine: Engine | None, ref: ObjectRef) -> tuple[ObjectRef, ...]:
    """What a table's engine reads or writes through: ``Distributed(cluster, db, t…)``, ``Buffer(db, t, …)``,
    ``Dictionary(d)`` (a Merge's tables are matched against the project by :mod:`chmv_assets.ddl.lineage`)."""
    if engine is None:
        return ()
    args = [_unquote_argument(a, ref.database) for a in engine.arguments]
    if engine.name == "Distributed" and len(args) >= 3:
        return (ObjectRef(database=args[1], name=args[2]),)
    if engine.name == "Buffer" and len(args) >= 2:
        return (ObjectRef(database=args[0], name=args[1]),)
    if engine.name == "Dictionary" and args:
        return (written_ref(args[0], ref.database),)
    return ()


def _unquote_argument(text: str, database: str) -> str:
    """An engine argument naming a database or a table: an identifier or a string; ``currentDatabase()`` too."""
    if text.replace(" ", "").lower() in ("currentdatabase()", "current_database()"):
        return database
    return text.strip().strip("'`\"")
