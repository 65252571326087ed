"""A CREATE MATERIALIZED VIEW: its CREATE part from sqlglot's tree (TO target or inner table, REFRESH and DEPENDS ON,
POPULATE, ON CLUSTER), its SELECT kept verbatim with its facts, from sqlglot's tree or ClickHouse's query tree."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Token

from chmv_assets.ddl.models import Column, MaterializedView, ObjectRef
from chmv_assets.ddl.parsing.context import Context, Located
from chmv_assets.ddl.parsing.select import analyze_select
from chmv_assets.ddl.parsing.server import ask, ask_all
from chmv_assets.ddl.parsing.set_aside import patched, readable
from chmv_assets.ddl.parsing.tables import column_definitions, table_properties
from chmv_assets.ddl.parsing.trees import name_span, properties, release, span, table_ref
from chmv_assets.ddl.query_tree import analyze_query_tree
from chmv_assets.ddl.select_facts import SelectFacts
from chmv_assets.ddl.sql_text import on_cluster_span, select_start, to_sql, tokenize, trailing_comment

NO_SELECT_HINT = "write CREATE MATERIALIZED VIEW … TO target AS SELECT …"


def parse_view(
    node: exp.Create,
    located: Located,
    ctx: Context,
    description: str | None,
    populate: bool,
    tokens: list[Token],
    *,
    facts: SelectFacts | None = None,
    select: tuple[int, int] | None = None,
) -> MaterializedView | None:
    """An MV from sqlglot's tree; with ``facts`` (and ``select``: the SELECT's offset and length in the statement)
    the SELECT was read by ClickHouse's parser, and the tree is the CREATE part's only."""
    stmt = located.statement
    schema = node.this
    view_table = schema.this if isinstance(schema, exp.Schema) else schema
    ref = table_ref(view_table, ctx.default_database)
    props = properties(node)
    to = props.get(exp.ToTableProperty)
    target = table_ref(to.this, ctx.default_database) if to is not None else None
    refresh = props.get(exp.AutoRefreshProperty)
    cluster = props.get(exp.OnCluster)
    query = node.expression
    start = select_start(tokens)
    if query is None or start is None:
        ctx.at(located.location(), f"materialized view {ref.fqn} has no AS SELECT", NO_SELECT_HINT)
        return None
    analysis = facts if facts is not None else analyze_select(query, ctx.default_database, start)
    inner_table = None
    if target is None:
        inner_columns = column_definitions(schema, stmt.text, tokens) or tuple(
            Column(name=c.name, type="") for c in analysis.outputs
        )
        inner_table = table_properties(node, located, ref, inner_columns, description, tokens)
    select_sql = stmt.text[start:] if select is None else stmt.text[select[0] : select[0] + select[1]]
    return MaterializedView(
        ref=ref,
        target=target,
        inner_table=inner_table,
        refreshable=refresh is not None,
        refresh_schedule=to_sql(refresh).removeprefix("REFRESH ").strip() if refresh is not None else None,
        depends_on=_depends_on(refresh, ctx.default_database),
        populate=populate,
        on_cluster=cluster.this.name if cluster is not None else None,
        sources=analysis.sources,
        trigger=analysis.trigger,
        dictionaries=analysis.dictionaries,
        group_by=analysis.group_by,
        aggregates=analysis.aggregates,
        output_columns=analysis.outputs,
        has_join=analysis.has_join,
        joined_tables=analysis.joined,
        self_join=analysis.self_join,
        has_order_by=analysis.has_order_by,
        functions=analysis.functions,
        select_sql=select_sql,
        select_at=start if select is not None and start + len(select_sql) < len(stmt.text) else None,
        description=description,
        statement=stmt.text,
        location=located.location(),
        or_replace=bool(node.args.get("replace")),
        name_span=name_span(view_table),
        target_span=name_span(to.this) if to is not None else None,
        cluster_span=span(on_cluster_span(tokens)) if cluster is not None else None,
    )


def _depends_on(refresh: exp.Expr | None, default_database: str) -> tuple[ObjectRef, ...]:
    """What ``REFRESH … DEPENDS ON a, db.b`` names, each once (unqualified: the default database, as the server
    resolves it against the current database)."""
    if refresh is None:
        return ()
    refs = (table_ref(t, default_database) for t in refresh.expressions if isinstance(t, exp.Table))
    return tuple(dict.fromkeys(refs))


def server_view(
    located: Located, ctx: Context, tokens: list[Token], populate: bool, error: ParseError | None = None
) -> MaterializedView | None:
    """An MV whose SELECT sqlglot cannot read: its CREATE part read by sqlglot (with ``SELECT 1`` for a SELECT), the
    SELECT's facts from ClickHouse's query tree of it (:mod:`chmv_assets.ddl.query_tree`).

    Raises:
        Unreadable: sqlglot cannot read the CREATE part even with its unknown parts set aside.
    """
    stmt = located.statement
    text = stmt.text
    start = select_start(tokens)
    if start is None:
        if ask(located, ctx, "ast", text, error) is None:
            return None  # the server's own message says what is wrong
        ctx.at(located.location(), "materialized view has no AS SELECT", NO_SELECT_HINT)
        return None
    comment = trailing_comment(tokens)
    select_sql = text[start : comment[0] if comment else len(text)].rstrip()
    answers = ask_all(located, ctx, [("ast", text, 0), ("tree", select_sql, start)], error)
    if answers is None:
        return None
    facts = analyze_query_tree(answers[1], select_sql, ctx.default_database)
    header = text[:start] + "SELECT 1"
    node, header_populate, reduced = readable(header, tokenize(header))
    description = comment[1] if comment else "\n".join(c for c in stmt.comments if c) or None
    try:
        view = parse_view(
            node,
            located,
            ctx,
            description,
            populate or header_populate,
            tokens,
            facts=facts,
            select=(start, len(select_sql)),
        )
    finally:
        release(node)
    return patched(view, text, reduced)
