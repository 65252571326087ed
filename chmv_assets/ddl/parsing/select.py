"""An MV's (or a plain view's) SELECT facts from sqlglot's tree (:class:`~chmv_assets.ddl.select_facts.SelectFacts`):
sources and their roles, trigger, joins, lookups, outputs, aggregates, truncations, GROUP BY.

sqlglot's counterpart is its optimizer's scope analysis; where sqlglot cannot read the SELECT, ClickHouse's query
tree yields the same facts (:mod:`chmv_assets.ddl.query_tree`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sqlglot import exp

from chmv_assets.ddl.grains import TRUNCATION_FUNCTIONS, Grain
from chmv_assets.ddl.models import AggregateCall, ObjectRef, OutputColumn, SourceRole, Span
from chmv_assets.ddl.parsing.trees import function_name, is_real_table, table_ref, written_ref
from chmv_assets.ddl.select_facts import (
    AGGREGATES,
    SelectFacts,
    SourceUses,
    is_dictionary_function,
    source_role,
    split_combinators,
)
from chmv_assets.ddl.sql_text import to_sql


def analyze_select(query: exp.Expr, default_database: str, base: int) -> SelectFacts:
    """Derive sources, trigger, dictionaries, aggregates and outputs of an MV's SELECT.

    Args:
        query: The parsed SELECT (or UNION).
        default_database: For unqualified names.
        base: Offset of the SELECT text in the statement; spans are made relative to it.
    """
    nodes = _Nodes(query)
    ctes = {cte.alias: cte.this for cte in nodes.ctes}
    trigger_node = _leftmost_table(query, ctes)
    trigger = table_ref(trigger_node, default_database) if trigger_node is not None else None

    branch_heads = set()
    if isinstance(query, exp.SetOperation):
        for branch in _union_branches(query):
            head = _leftmost_table(branch, ctes)
            if head is not None:
                branch_heads.add(id(head))
    # Where the insert block stands in: the left-most FROM of the query and of every UNION branch.
    block_positions = {*branch_heads, *([id(trigger_node)] if trigger_node is not None else [])}

    uses = SourceUses()
    joins = [j for j in nodes.joins if (j.args.get("kind") or "").upper() != "ARRAY"]
    joined: list[ObjectRef] = []
    for join in joins:
        joined.extend(_real_tables(join.this, ctes, default_database))
    for table in nodes.tables:
        if not is_real_table(table):
            continue  # table function: numbers(), url(), file() …
        if not table.db and table.name in ctes:
            continue  # CTE name, not a table
        ref = table_ref(table, default_database)
        ident = table.this
        first = table.args["db"] if table.args.get("db") is not None else ident
        named = "start" in first.meta and "end" in ident.meta
        uses.add(
            ref,
            source_role(ref, trigger, id(table) in branch_heads),
            Span(start=first.meta["start"] - base, end=ident.meta["end"] + 1 - base) if named else None,
            aliased=table.args.get("alias") is not None,
            block=id(table) in block_positions,
        )
    _in_tables(nodes, ctes, uses, default_database, base)

    dictionaries = []
    for func in nodes.funcs:
        if is_dictionary_function(function_name(func)) and func.expressions:
            first_arg = func.expressions[0]
            if isinstance(first_arg, exp.Literal) and first_arg.is_string:
                dictionaries.append(written_ref(first_arg.name, default_database))

    select = _first_select(query)
    group = select.args.get("group") if select is not None else None
    group_by = tuple(to_sql(e) for e in group.expressions) if group else ()
    aliases = _alias_map(select, nodes.tables if select is query else None, default_database)
    outputs, aggregates = [], []
    for projection in select.expressions if select is not None else ():
        name = projection.alias_or_name
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        is_aggregate = False
        parts = _Nodes(inner)
        for func in parts.funcs:
            if func.find_ancestor(exp.Subquery, exp.Select) is not select:
                continue  # an aggregate inside a scalar subquery does not aggregate the MV's rows
            split = split_combinators(function_name(func))
            if split and (isinstance(func, exp.AggFunc) or split[1] or function_name(func) in AGGREGATES):
                is_aggregate = True
                if func is inner or parts.funcs[0] is func:
                    aggregates.append(
                        AggregateCall(output=name, function=function_name(func), base=split[0], combinators=split[1])
                    )
                break
        outputs.append(
            OutputColumn(
                name=name,
                expression=to_sql(inner),
                source_columns=tuple(_column_sources(parts.columns, aliases, trigger)),
                truncation=_truncation(inner),
                is_aggregate=is_aggregate,
            )
        )
    return SelectFacts(
        sources=uses.sources(),
        trigger=trigger,
        dictionaries=tuple(dict.fromkeys(dictionaries)),
        group_by=group_by,
        aggregates=tuple(aggregates),
        outputs=tuple(outputs),
        has_join=bool(joins),
        joined=tuple(dict.fromkeys(joined)),
        self_join=trigger is not None and trigger in joined,
        has_order_by=any(s.args.get("order") is not None for s in _selects(query)),
        functions=tuple(dict.fromkeys(function_name(f) for f in nodes.funcs)),
    )


class _Nodes:
    """The nodes of a tree that the SELECT analysis reads, by kind, collected in one breadth-first walk
    (the order of ``find_all`` for each kind)."""

    def __init__(self, root: exp.Expr):
        self.root = root
        self.tables: list[exp.Table] = []
        self.funcs: list[exp.Func] = []
        self.columns: list[exp.Column] = []
        self.joins: list[exp.Join] = []
        self.ctes: list[exp.CTE] = []
        self.ins: list[exp.In] = []
        for node in root.bfs():
            if isinstance(node, exp.Column):
                self.columns.append(node)
            elif isinstance(node, exp.Func):
                self.funcs.append(node)
            elif isinstance(node, exp.In) and isinstance(node.args.get("field"), exp.Column):
                self.ins.append(node)
            elif isinstance(node, exp.Table):
                self.tables.append(node)
            elif isinstance(node, exp.Join):
                self.joins.append(node)
            elif isinstance(node, exp.CTE):
                self.ctes.append(node)


def _leftmost_table(query: exp.Expr, ctes: dict[str, exp.Expr]) -> exp.Table | None:
    """The table whose inserts trigger the MV: the left-most FROM, through subqueries and CTEs."""
    while True:
        if isinstance(query, exp.SetOperation | exp.Subquery):
            query = query.this
            continue
        from_ = query.args.get("from_") if isinstance(query, exp.Select) else None
        if from_ is None:
            return None
        source = from_.this
        if isinstance(source, exp.Final):  # FROM t FINAL
            source = source.this
        if isinstance(source, exp.Subquery):
            query = source.this
            continue
        if isinstance(source, exp.Table) and is_real_table(source):
            if not source.db and source.name in ctes:
                query = ctes[source.name]
                continue
            return source
        return None


def _in_tables(nodes: _Nodes, ctes: dict[str, exp.Expr], uses: SourceUses, default_database: str, base: int) -> None:
    """Tables named as the right side of IN (``k IN db.allowed``): read whole; an alias is not allowed there."""
    if not nodes.ins:
        return
    aliases = {a.alias for a in nodes.root.find_all(exp.Alias)}
    for node in nodes.ins:
        column = node.args["field"]
        qualifier = column.args.get("table")
        if qualifier is None and (column.name in ctes or column.name in aliases):
            continue  # a CTE or an alias of the query, not a table
        ref = ObjectRef(database=qualifier.name if qualifier is not None else default_database, name=column.name)
        first = qualifier if qualifier is not None else column.this
        named = "start" in first.meta and "end" in column.this.meta
        uses.add(
            ref,
            SourceRole.READ_WHOLE,
            Span(start=first.meta["start"] - base, end=column.this.meta["end"] + 1 - base) if named else None,
            aliased=True,
            block=False,
        )


def _real_tables(node: exp.Expr, ctes: dict[str, exp.Expr], default_database: str) -> list[ObjectRef]:
    """Real tables a FROM/JOIN item reads: itself, or the tables inside a subquery or a CTE it names."""
    if isinstance(node, exp.Table):
        if not is_real_table(node):
            return []
        if node.db or node.name not in ctes:
            return [table_ref(node, default_database)]
        node = ctes[node.name]
    return [
        table_ref(t, default_database)
        for t in node.find_all(exp.Table)
        if is_real_table(t) and not (not t.db and t.name in ctes)
    ]


def _union_branches(query: exp.Expr) -> list[exp.Expr]:
    if isinstance(query, exp.SetOperation):
        return [*_union_branches(query.this), *_union_branches(query.expression)]
    return [query]


def _selects(query: exp.Expr) -> list[exp.Select]:
    return [b for b in _union_branches(query) if isinstance(b, exp.Select)]


def _first_select(query: exp.Expr) -> exp.Select | None:
    selects = _selects(query)
    return selects[0] if selects else None


def _alias_map(
    select: exp.Select | None, tables: list[exp.Table] | None, default_database: str
) -> dict[str, ObjectRef]:
    """Alias (and name) to table of the tables in ``select``; ``tables``: those tables when already collected."""
    mapping: dict[str, ObjectRef] = {}
    if select is None:
        return mapping
    for table in tables if tables is not None else select.find_all(exp.Table):
        if is_real_table(table):
            ref = table_ref(table, default_database)
            mapping[table.alias or table.name] = ref
            mapping.setdefault(table.name, ref)
    return mapping


def _column_sources(
    columns: Iterable[exp.Column], aliases: dict[str, ObjectRef], trigger: ObjectRef | None
) -> Iterator[tuple[str, str]]:
    for column in columns:
        qualifier = column.table
        ref = aliases.get(qualifier) if qualifier else trigger
        if ref is not None:
            yield (ref.fqn, column.name)


def _truncation(node: exp.Expr) -> tuple[str, Grain | None] | None:
    if isinstance(node, exp.Column):
        return (node.name, None)
    if isinstance(node, exp.Func):
        grain = TRUNCATION_FUNCTIONS.get(function_name(node))
        args = [a for a in node.iter_expressions() if not isinstance(a, exp.Var | exp.Literal)]
        if grain and len(args) == 1 and isinstance(args[0], exp.Column):
            return (args[0].name, grain)
    return None
