"""Parse a DDL directory into a :class:`~chmv_assets.ddl.models.Project`.

Each ``.sql`` file is tokenized once and each statement parsed once with sqlglot's ClickHouse dialect.
Everything a later stage needs is derived here and frozen into the models; problems are collected
across the whole directory and raised together as one :class:`~chmv_assets.errors.DDLError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from chmv_assets.ddl.grains import TRUNCATION_FUNCTIONS
from chmv_assets.ddl.models import (
    AggregateCall,
    Column,
    Database,
    Dictionary,
    Engine,
    Fragment,
    MaterializedView,
    ObjectRef,
    OutputColumn,
    PartitionCall,
    Project,
    SourceLocation,
    SourceRole,
    SourceUse,
    Span,
    Table,
)
from chmv_assets.ddl.sql_text import (
    Statement,
    clauses,
    engine_string_arguments,
    item_end,
    line_col,
    on_cluster_span,
    select_start,
    split_statements,
    thread_parser,
    to_sql,
    tokenize,
)
from chmv_assets.ddl.ttl import parse_ttl
from chmv_assets.ddl.types import SPELLING
from chmv_assets.errors import DDLError, DDLProblem

logging.getLogger("sqlglot").setLevel(logging.ERROR)

#: Aggregate combinators, longest first so ``MergeState`` strips as one unit.
COMBINATORS = ("SimpleState", "MergeState", "OrDefault", "Resample", "Distinct", "ForEach", "OrNull",
               "State", "Merge", "Array", "If", "Map")  # fmt: skip
#: Aggregate function names chmv recognises under combinators.
AGGREGATES = {
    "count", "sum", "min", "max", "avg", "any", "anyLast", "anyHeavy", "argMin", "argMax", "uniq",
    "uniqExact", "uniqCombined", "uniqCombined64", "uniqHLL12", "uniqTheta", "quantile", "quantiles",
    "quantileExact", "quantileTiming", "quantileTDigest", "quantilesTDigest", "median", "groupArray",
    "groupUniqArray", "groupBitmap", "groupBitOr", "groupBitAnd", "topK", "sumMap", "minMap", "maxMap",
    "stddevPop", "stddevSamp", "varPop", "varSamp", "sumWithOverflow", "avgWeighted", "histogram",
    "entropy", "simpleLinearRegression", "first_value", "last_value", "countDistinct", "sequenceMatch",
    "windowFunnel", "retention", "deltaSum", "uniqUpTo",
}  # fmt: skip
_AGGREGATES_LOWER = {a.lower() for a in AGGREGATES}

def function_name(node: exp.Expression) -> str:
    """The ClickHouse spelling of a function call as written (``toStartOfHour``, ``sumState``)."""
    name = node.meta.get("clickhouse_name")
    if name:
        return name
    if isinstance(node, exp.Anonymous | exp.CombinedAggFunc | exp.CombinedParameterizedAgg | exp.AnonymousAggFunc):
        return node.name
    if isinstance(node, exp.ParameterizedAgg):
        return node.name
    return node.sql_name() if isinstance(node, exp.Func) else node.key


def split_combinators(name: str) -> tuple[str, tuple[str, ...]] | None:
    """``uniqMergeState`` → ``("uniq", ("Merge", "State"))``; None when not an aggregate."""
    if name in AGGREGATES or name.lower() in _AGGREGATES_LOWER:
        return name, ()
    for suffix in COMBINATORS:
        if name.endswith(suffix) and len(name) > len(suffix):
            inner = split_combinators(name[: -len(suffix)])
            if inner:
                parts = ("Merge", "State") if suffix == "MergeState" else (suffix,)
                return inner[0], (*inner[1], *parts)
    return None


@dataclass
class _Context:
    """Mutable state of one load: problems found so far and where each object was defined."""

    default_database: str
    problems: list[DDLProblem] = field(default_factory=list)

    def problem(self, file: str, line: int, column: int, message: str, hint: str = "") -> None:
        self.problems.append(DDLProblem(file, line, column, message, hint))


@dataclass(frozen=True)
class _Located:
    """A statement with its file, for turning statement offsets into file positions."""

    file: str
    file_text: str
    statement: Statement

    def position(self, offset: int) -> tuple[int, int]:
        return line_col(self.file_text, self.statement.offset + offset)

    def location(self) -> SourceLocation:
        return SourceLocation(file=self.file, line=self.statement.line, column=self.statement.column)


def load_project(
    ddl_dir: str | Path,
    *,
    default_database: str = "default",
    external: Iterable[str] = (),
) -> Project:
    """Read every ``.sql`` file below ``ddl_dir`` into an immutable :class:`Project`.

    Args:
        ddl_dir: Directory of version-controlled DDL; files are read in path order.
        default_database: Database for unqualified names.
        external: ``db.table`` names defined outside the directory that MVs may read.

    Raises:
        DDLError: With every problem found: syntax errors, unknown targets or sources, conflicting
            duplicate definitions. Nothing is returned (and so nothing deployed) for invalid DDL.
    """
    root = Path(ddl_dir)
    ctx = _Context(default_database)
    if not root.is_dir():
        raise DDLError([DDLProblem(str(root), 1, 1, "DDL directory not found", "pass --ddl-dir DIR")])
    files = sorted(p for p in root.rglob("*.sql") if p.is_file())
    if not files:
        ctx.problem(str(root), 1, 1, "no .sql files found", "put CREATE statements in .sql files")
    databases: dict[str, Database] = {}
    objects: dict[ObjectRef, Table | Dictionary | MaterializedView] = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            statements = list(split_statements(text))
        except TokenError as err:
            ctx.problem(str(path), 1, 1, f"cannot tokenize: {err}", "close the string or comment")
            continue
        for statement in statements:
            located = _Located(str(path), text, statement)
            parsed = _parse_statement(located, ctx)
            if parsed is None:
                continue
            if isinstance(parsed, Database):
                databases.setdefault(parsed.name, parsed)
                continue
            _register(parsed, objects, ctx)
    externals = tuple(_ref(name, ctx.default_database) for name in external)
    project = Project(
        ddl_dir=str(root),
        default_database=default_database,
        databases=tuple(databases.values()),
        tables={r: o for r, o in objects.items() if isinstance(o, Table)},
        dictionaries={r: o for r, o in objects.items() if isinstance(o, Dictionary)},
        views={r: o for r, o in objects.items() if isinstance(o, MaterializedView)},
        external=externals,
    )
    _check_references(project, ctx)
    from chmv_assets.ddl.lineage import LineageGraph

    cycle = LineageGraph(project).find_cycle()
    if cycle:
        view = next((project.views[r] for r in project.views if r.fqn in cycle), None)
        loc = view.location if view else SourceLocation(file=str(root), line=1)
        ctx.problem(loc.file, loc.line, loc.column, "cycle in the MV graph: " + " -> ".join(cycle),
                    "an MV must not write, directly or through a chain, into a table it reads")
    if ctx.problems:
        raise DDLError(ctx.problems)
    return project


def parse_statement(sql: str, *, default_database: str = "default",
                    origin: str = "<statement>") -> Table | Dictionary | MaterializedView | Database | None:  # fmt: skip
    """Parse one CREATE statement the way :func:`load_project` parses each statement of a file.

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
    ctx = _Context(default_database)
    try:
        statements = list(split_statements(sql))
    except TokenError as err:
        raise DDLError([DDLProblem(origin, 1, 1, f"cannot tokenize: {err}")]) from err
    if len(statements) != 1:
        raise DDLError([DDLProblem(origin, 1, 1, f"expected one statement, found {len(statements)}")])
    parsed = _parse_statement(_Located(origin, sql, statements[0]), ctx)
    if ctx.problems:
        raise DDLError(ctx.problems)
    return parsed


def _register(obj: Table | Dictionary | MaterializedView, objects: dict, ctx: _Context) -> None:
    previous = objects.get(obj.ref)
    if previous is None:
        objects[obj.ref] = obj
        return
    if _normalize(previous.statement) != _normalize(obj.statement):
        loc = obj.location
        ctx.problem(loc.file, loc.line, loc.column,
                    f"{obj.ref.fqn} is defined again with a different definition (first at {previous.location})",
                    "keep one definition; rename one of them if both are meant")  # fmt: skip


def _normalize(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").lower()


def _ref(name: str, default_database: str) -> ObjectRef:
    database, _, table = name.rpartition(".")
    return ObjectRef(database=(database or default_database).strip("`\""), name=table.strip("`\""))


def _parse_tokens(tokens, text: str) -> exp.Expression:
    """Parse one statement from its tokens (tokenized once, shared with the clause extraction)."""
    parsed = thread_parser().parse(tokens, text)
    if not parsed or parsed[0] is None:
        raise ParseError("No expression was parsed from the statement")
    return parsed[0]


def _table_ref(table: exp.Table, default_database: str) -> ObjectRef:
    return ObjectRef(database=table.db or default_database, name=table.name)


def _name_span(table: exp.Expression | None) -> Span | None:
    """Span of a (possibly qualified) table name as written, ``db.name`` or ``name``, quotes included."""
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None
    first = table.args["db"] if table.args.get("db") is not None else table.this
    if "start" not in first.meta or "end" not in table.this.meta:
        return None
    return Span(start=first.meta["start"], end=table.this.meta["end"] + 1)


def _parse_statement(located: _Located, ctx: _Context) -> Table | Dictionary | MaterializedView | Database | None:
    stmt = located.statement
    text, populate = stmt.text, False
    try:
        tokens = tokenize(text)
        node = _parse_tokens(tokens, text)
        if isinstance(node, exp.Command):
            # sqlglot cannot parse `… POPULATE AS SELECT`: blank the keyword (offsets stay valid) and retry.
            keyword = next((t for t, after in zip(tokens, tokens[1:], strict=False)
                            if t.token_type == TokenType.VAR and t.text.upper() == "POPULATE"
                            and after.token_type == TokenType.ALIAS), None)  # fmt: skip
            if keyword is not None:
                populate = True
                blanked = text[: keyword.start] + " " * (keyword.end + 1 - keyword.start) + text[keyword.end + 1 :]
                tokens = tokenize(blanked)
                node = _parse_tokens(tokens, blanked)
    except ParseError as err:
        first = err.errors[0] if err.errors else {}
        line, col = first.get("line") or 1, first.get("col") or 1
        col = max(1, col - len(first.get("highlight") or "x") + 1)  # sqlglot points at the token's end
        abs_line = stmt.line + line - 1
        abs_col = stmt.column + col - 1 if line == 1 else col
        ctx.problem(located.file, abs_line, abs_col, f"syntax error: {first.get('description', err)}",
                    "fix the statement; chmv reads ClickHouse SQL with sqlglot's clickhouse dialect")
        return None
    if isinstance(node, exp.Command) or not isinstance(node, exp.Create):
        if isinstance(node, exp.Command) or not isinstance(node, exp.Use | exp.Set):
            ctx.problem(located.file, stmt.line, stmt.column,
                        f"unsupported statement: {text.split(None, 3)[:3]}",
                        "the DDL directory holds CREATE DATABASE/TABLE/DICTIONARY/MATERIALIZED VIEW only")
        return None
    try:
        return _model(node, located, ctx, tokens, populate)
    finally:
        _release(node)


def _release(tree: exp.Expression) -> None:
    """Unlink every node from its parent, so reference counting frees the tree as soon as it is dropped.

    Each node points to its parent, so a parse tree is a reference cycle: without this, the trees of every
    statement of a directory wait for the cyclic garbage collector, which then traverses them all (a fifth
    of a cold load of 1,000 MVs, benchmarks/bench_definitions.py). The models keep no node.
    """
    for node in tree.walk():
        node.parent = None


def _model(node: exp.Create, located: _Located, ctx: _Context, tokens,
           populate: bool) -> Table | Dictionary | MaterializedView | Database | None:  # fmt: skip
    """The model of a parsed CREATE statement (None, with a problem recorded, for one chmv does not model)."""
    stmt, text = located.statement, located.statement.text
    kind = (node.args.get("kind") or "").upper()
    description = "\n".join(c for c in stmt.comments if c) or None
    props = _properties(node)
    if kind in ("SCHEMA", "DATABASE"):
        engine = props.get(exp.EngineProperty)
        return Database(name=node.this.name, engine=to_sql(engine.this) if engine and engine.this else None,
                        statement=text, location=located.location())  # fmt: skip
    if kind == "TABLE":
        return _parse_table(node, located, ctx, description, tokens)
    if kind == "DICTIONARY":
        return _parse_dictionary(node, located, ctx, description)
    if kind == "VIEW" and exp.MaterializedProperty in props:
        return _parse_view(node, located, ctx, description, populate, tokens)
    if kind == "VIEW":
        # A plain view reads its tables at query time: it is a readable object, not a pipeline step.
        target = node.this.this if isinstance(node.this, exp.Schema) else node.this
        return Table(ref=_table_ref(target, ctx.default_database), columns=(), engine=Engine(name="View"),
                     description=description, statement=text, location=located.location())  # fmt: skip
    ctx.problem(located.file, stmt.line, stmt.column, f"unsupported CREATE {kind}",
                "the DDL directory holds CREATE DATABASE/TABLE/DICTIONARY/MATERIALIZED VIEW only")
    return None


def _columns(schema: exp.Expression | None, text: str = "", tokens=None) -> tuple[Column, ...]:
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
        columns.append(Column(name=col.name, type=SPELLING.get(type_sql, type_sql), default_kind=default_kind,
                              default_expression=default_expr, comment=comment, definition=definition))  # fmt: skip
    return tuple(columns)


def _properties(node: exp.Create) -> dict[type[exp.Expression], exp.Expression]:
    """The CREATE's own properties by type, the first of each: what ``node.find`` returns, without walking
    the columns and the SELECT (an MV's SELECT may have SETTINGS and ORDER BY of its own)."""
    properties = node.args.get("properties")
    return {type(p): p for p in reversed(properties.expressions)} if properties is not None else {}


def _engine(props: dict[type[exp.Expression], exp.Expression]) -> Engine | None:
    prop = props.get(exp.EngineProperty)
    if prop is None:
        return None
    value = prop.this
    if isinstance(value, exp.Func | exp.Anonymous):
        name, arguments = function_name(value), list(value.expressions)
        keeper = [a.this for a in arguments[:2] if isinstance(a, exp.Literal) and a.is_string]
        explicit = name.startswith("Replicated") and len(keeper) == 2
        return Engine(name=name, arguments=tuple(to_sql(a) for a in arguments),
                      argument_columns=_column_names(arguments), keeper_path=keeper[0] if explicit else None,
                      replica_name=keeper[1] if explicit else None)  # fmt: skip
    return Engine(name=value.name if isinstance(value, exp.Identifier | exp.Var | exp.Column) else to_sql(value))


def _fragment(located: _Located, span: tuple[int, int], prop: exp.Expression | None) -> Fragment:
    """A verbatim clause with the spans of the columns it references, relative to the fragment."""
    start, end = span
    spans: dict[str, list[Span]] = {}
    for column in prop.find_all(exp.Column) if prop is not None else ():
        meta = column.this.meta if isinstance(column.this, exp.Identifier) else {}
        if "start" in meta and column.args.get("table") is None:
            spans.setdefault(column.name, []).append(Span(start=meta["start"] - start, end=meta["end"] + 1 - start))
    return Fragment(sql=located.statement.text[start:end],
                    column_spans=tuple((name, tuple(s)) for name, s in spans.items()))  # fmt: skip


def _column_names(nodes) -> tuple[str, ...]:
    """Distinct unqualified column names referenced by ``nodes``, in written order."""
    return tuple(dict.fromkeys(c.name for n in nodes if n is not None for c in n.find_all(exp.Column, bfs=False)))


def _partition_call(prop: exp.PartitionedByProperty | None) -> PartitionCall | None:
    """``f(col)`` or a bare ``col`` (parentheses ignored); None for anything else (several arguments, a tuple…)."""
    node = prop.this if prop is not None else None
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column) and not node.table:
        return PartitionCall(function=None, column=node.name)
    if not isinstance(node, exp.Func):
        return None
    # sqlglot adds the unit of a truncation it recognises (toStartOfHour → TimestampTrunc(unit=HOUR)).
    arguments = [v for k, v in node.args.items() if v is not None and not (k == "unit" and isinstance(v, exp.Var))]
    flat = [a for arg in arguments for a in (arg if isinstance(arg, list) else [arg]) if isinstance(a, exp.Expression)]
    if len(flat) == 1 and isinstance(flat[0], exp.Column) and not flat[0].table:
        return PartitionCall(function=function_name(node), column=flat[0].name)
    return None


def _settings(prop: exp.SettingsProperty | None) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in prop.expressions if prop is not None else ():
        if isinstance(item, exp.EQ):
            value = item.expression
            pairs.append((item.this.name, value.name if isinstance(value, exp.Literal) else to_sql(value)))
    return tuple(pairs)


def _table_properties(node: exp.Create, located: _Located, ref: ObjectRef, columns, description, tokens,
                      name_span: Span | None = None) -> Table:  # fmt: skip
    text = located.statement.text
    spans = clauses(tokens)

    def verbatim(phrase: str) -> str | None:
        span = spans.get(phrase)
        return text[span[0] : span[1]] if span else None

    props = _properties(node)
    partition_span = spans.get("PARTITION BY")
    partition_prop = props.get(exp.PartitionedByProperty)
    cluster = props.get(exp.OnCluster)
    comment = props.get(exp.SchemaCommentProperty)
    engine = _engine(props)
    keeper = engine_string_arguments(tokens) if engine is not None and engine.keeper_path is not None else []
    return Table(
        ref=ref,
        columns=columns,
        engine=engine,
        partition_by=_fragment(located, partition_span, partition_prop) if partition_span else None,
        partition_call=_partition_call(partition_prop) if partition_span else None,
        order_by=verbatim("ORDER BY"),
        order_by_columns=_column_names([props.get(exp.Order)]),
        primary_key=verbatim("PRIMARY KEY"),
        ttl=verbatim("TTL"),
        ttl_rules=parse_ttl(props.get(exp.MergeTreeTTL), columns),
        settings=verbatim("SETTINGS"),
        settings_map=_settings(props.get(exp.SettingsProperty)),
        on_cluster=cluster.this.name if cluster is not None else None,
        description=(comment.this.name if comment is not None else None) or description,
        statement=text,
        location=located.location(),
        name_span=name_span,
        cluster_span=_span(on_cluster_span(tokens)) if cluster is not None else None,
        keeper_path_span=_span(keeper[0]) if len(keeper) >= 2 else None,
    )


def _span(bounds: tuple[int, int] | None) -> Span | None:
    return Span(start=bounds[0], end=bounds[1]) if bounds is not None else None


def _parse_table(node: exp.Create, located: _Located, ctx: _Context, description: str | None, tokens) -> Table:
    schema = node.this
    target = schema.this if isinstance(schema, exp.Schema) else schema
    ref = _table_ref(target, ctx.default_database)
    columns = _columns(schema, located.statement.text, tokens)
    return _table_properties(node, located, ref, columns, description, tokens, _name_span(target))


def _text(value: exp.Expression | str | None) -> str:
    """The name of a node, or a plain string as sqlglot stores some dictionary properties."""
    if value is None:
        return ""
    return value if isinstance(value, str) else value.name


def _parse_dictionary(node: exp.Create, located: _Located, ctx: _Context, description: str | None) -> Dictionary:
    schema = node.this
    ref = _table_ref(schema.this, ctx.default_database)
    source_table = None
    for prop in node.find_all(exp.DictProperty):
        if _text(prop.this).upper() != "SOURCE" or _text(prop.args.get("kind")).upper() != "CLICKHOUSE":
            continue
        settings = {_text(s.this).upper(): _text(s.args["value"]) for s in prop.find_all(exp.DictSubProperty)}
        if "TABLE" in settings and "QUERY" not in settings:
            source_table = ObjectRef(database=settings.get("DB") or ctx.default_database, name=settings["TABLE"])
    key = node.find(exp.PrimaryKey)
    return Dictionary(ref=ref, columns=_columns(schema), source_table=source_table,
                      primary_key=", ".join(to_sql(e) for e in key.expressions) if key else None,
                      description=description, statement=located.statement.text, location=located.location(),
                      name_span=_name_span(schema.this))  # fmt: skip


def _parse_view(node: exp.Create, located: _Located, ctx: _Context, description: str | None,
                populate: bool, tokens) -> MaterializedView | None:  # fmt: skip
    stmt = located.statement
    schema = node.this
    view_table = schema.this if isinstance(schema, exp.Schema) else schema
    ref = _table_ref(view_table, ctx.default_database)
    props = _properties(node)
    to = props.get(exp.ToTableProperty)
    target = _table_ref(to.this, ctx.default_database) if to is not None else None
    refresh = props.get(exp.AutoRefreshProperty)
    cluster = props.get(exp.OnCluster)
    query = node.expression
    start = select_start(tokens)
    if query is None or start is None:
        ctx.problem(located.file, stmt.line, stmt.column, f"materialized view {ref.fqn} has no AS SELECT",
                    "write CREATE MATERIALIZED VIEW … TO target AS SELECT …")
        return None
    analysis = _analyze_select(query, ctx.default_database, start)
    inner_table = None
    if target is None:
        inner_columns = _columns(schema, stmt.text, tokens) or tuple(Column(name=c.name, type="") for c in analysis.outputs)
        inner_table = _table_properties(node, located, ref, inner_columns, description, tokens)
    select_sql = stmt.text[start:]
    return MaterializedView(
        ref=ref,
        target=target,
        inner_table=inner_table,
        refreshable=refresh is not None,
        refresh_schedule=to_sql(refresh).removeprefix("REFRESH ").strip() if refresh is not None else None,
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
        select_sql=select_sql,
        description=description,
        statement=stmt.text,
        location=located.location(),
        or_replace=bool(node.args.get("replace")),
        name_span=_name_span(view_table),
        target_span=_name_span(to.this) if to is not None else None,
        cluster_span=_span(on_cluster_span(tokens)) if cluster is not None else None,
    )


@dataclass
class _SelectAnalysis:
    sources: tuple[SourceUse, ...]
    trigger: ObjectRef | None
    dictionaries: tuple[ObjectRef, ...]
    group_by: tuple[str, ...]
    aggregates: tuple[AggregateCall, ...]
    outputs: tuple[OutputColumn, ...]
    has_join: bool
    joined: tuple[ObjectRef, ...]
    self_join: bool
    has_order_by: bool


def _is_real_table(table: exp.Table) -> bool:
    return isinstance(table.this, exp.Identifier)


def _leftmost_table(query: exp.Expression, ctes: dict[str, exp.Expression]) -> exp.Table | None:
    """The table whose inserts trigger the MV: the left-most FROM, through subqueries and CTEs."""
    while True:
        if isinstance(query, exp.SetOperation):
            query = query.this
            continue
        if isinstance(query, exp.Subquery):
            query = query.this
            continue
        from_ = query.args.get("from_") if isinstance(query, exp.Select) else None
        if from_ is None:
            return None
        source = from_.this
        if isinstance(source, exp.Subquery):
            query = source.this
            continue
        if isinstance(source, exp.Table) and _is_real_table(source):
            if not source.db and source.name in ctes:
                query = ctes[source.name]
                continue
            return source
        return None


def _analyze_select(query: exp.Expression, default_database: str, base: int) -> _SelectAnalysis:
    """Derive sources, trigger, dictionaries, aggregates and outputs of an MV's SELECT.

    Args:
        query: The parsed SELECT (or UNION).
        default_database: For unqualified names.
        base: Offset of the SELECT text in the statement; spans are made relative to it.
    """
    nodes = _Nodes(query)
    ctes = {cte.alias: cte.this for cte in nodes.ctes}
    trigger_node = _leftmost_table(query, ctes)
    trigger = _table_ref(trigger_node, default_database) if trigger_node is not None else None

    branch_heads = set()
    if isinstance(query, exp.SetOperation):
        for branch in _union_branches(query):
            head = _leftmost_table(branch, ctes)
            if head is not None:
                branch_heads.add(id(head))
    # Where the insert block stands in: the left-most FROM of the query and of every UNION branch.
    block_positions = {*branch_heads, *([id(trigger_node)] if trigger_node is not None else [])}

    uses: dict[ObjectRef, dict] = {}
    joins = [j for j in nodes.joins if (j.args.get("kind") or "").upper() != "ARRAY"]
    has_join = bool(joins)
    joined: list[ObjectRef] = []
    for join in joins:
        joined.extend(_real_tables(join.this, ctes, default_database))
    for table in nodes.tables:
        if not _is_real_table(table):
            continue  # table function: numbers(), url(), file() …
        if not table.db and table.name in ctes:
            continue  # CTE name, not a table
        ref = _table_ref(table, default_database)
        if ref == trigger:
            role = SourceRole.TRIGGER
        elif id(table) in branch_heads:
            role = SourceRole.UNION_BRANCH
        else:
            role = SourceRole.READ_WHOLE
        entry = uses.setdefault(ref, {"role": role, "spans": [], "aliased": [], "block": []})
        ident = table.this
        first = table.args["db"] if table.args.get("db") is not None else ident
        if "start" in first.meta and "end" in ident.meta:
            entry["spans"].append(Span(start=first.meta["start"] - base, end=ident.meta["end"] + 1 - base))
            entry["aliased"].append(table.args.get("alias") is not None)
            entry["block"].append(id(table) in block_positions)
    sources = tuple(
        SourceUse(ref=r, role=u["role"], spans=tuple(u["spans"]), has_alias=tuple(u["aliased"]),
                  block=tuple(u["block"]))
        for r, u in sorted(uses.items(), key=lambda kv: kv[1]["role"] != SourceRole.TRIGGER)
    )
    self_join = trigger is not None and trigger in joined

    dictionaries = []
    for func in nodes.funcs:
        name = function_name(func).lower()
        if (name.startswith("dictget") or name == "dicthas") and func.expressions:
            first_arg = func.expressions[0]
            if isinstance(first_arg, exp.Literal) and first_arg.is_string:
                dictionaries.append(_ref(first_arg.name, default_database))

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
                    aggregates.append(AggregateCall(output=name, function=function_name(func),
                                                    base=split[0], combinators=split[1]))  # fmt: skip
                break
        outputs.append(OutputColumn(
            name=name,
            expression=to_sql(inner),
            source_columns=tuple(_column_sources(parts.columns, aliases, trigger)),
            truncation=_truncation(inner),
            is_aggregate=is_aggregate,
        ))  # fmt: skip
    return _SelectAnalysis(
        sources=sources,
        trigger=trigger,
        dictionaries=tuple(dict.fromkeys(dictionaries)),
        group_by=group_by,
        aggregates=tuple(aggregates),
        outputs=tuple(outputs),
        has_join=has_join,
        joined=tuple(dict.fromkeys(joined)),
        self_join=self_join,
        has_order_by=any(s.args.get("order") is not None for s in _selects(query)),
    )


class _Nodes:
    """The nodes of a tree that the SELECT analysis reads, by kind, collected in one breadth-first walk
    (the order of ``find_all`` for each kind)."""

    def __init__(self, root: exp.Expression):
        self.tables: list[exp.Table] = []
        self.funcs: list[exp.Func] = []
        self.columns: list[exp.Column] = []
        self.joins: list[exp.Join] = []
        self.ctes: list[exp.CTE] = []
        for node in root.bfs():
            if isinstance(node, exp.Column):
                self.columns.append(node)
            elif isinstance(node, exp.Func):
                self.funcs.append(node)
            elif isinstance(node, exp.Table):
                self.tables.append(node)
            elif isinstance(node, exp.Join):
                self.joins.append(node)
            elif isinstance(node, exp.CTE):
                self.ctes.append(node)


def _real_tables(node: exp.Expression, ctes: dict[str, exp.Expression], default_database: str) -> list[ObjectRef]:
    """Real tables a FROM/JOIN item reads: itself, or the tables inside a subquery or a CTE it names."""
    if isinstance(node, exp.Table):
        if not _is_real_table(node):
            return []
        if not node.db and node.name in ctes:
            node = ctes[node.name]
        else:
            return [_table_ref(node, default_database)]
    return [
        _table_ref(t, default_database)
        for t in node.find_all(exp.Table)
        if _is_real_table(t) and not (not t.db and t.name in ctes)
    ]


def _union_branches(query: exp.Expression) -> list[exp.Expression]:
    if isinstance(query, exp.SetOperation):
        return [*_union_branches(query.this), *_union_branches(query.expression)]
    return [query]


def _selects(query: exp.Expression) -> list[exp.Select]:
    return [b for b in _union_branches(query) if isinstance(b, exp.Select)]


def _first_select(query: exp.Expression) -> exp.Select | None:
    selects = _selects(query)
    return selects[0] if selects else None


def _alias_map(select: exp.Select | None, tables: list[exp.Table] | None, default_database: str) -> dict[str, ObjectRef]:
    """Alias (and name) to table of the tables in ``select``; ``tables``: those tables when already collected."""
    mapping: dict[str, ObjectRef] = {}
    if select is None:
        return mapping
    for table in tables if tables is not None else select.find_all(exp.Table):
        if _is_real_table(table):
            ref = _table_ref(table, default_database)
            mapping[table.alias or table.name] = ref
            mapping.setdefault(table.name, ref)
    return mapping


def _column_sources(columns: Iterable[exp.Column], aliases: dict[str, ObjectRef], trigger: ObjectRef | None):
    for column in columns:
        qualifier = column.table
        ref = aliases.get(qualifier) if qualifier else trigger
        if ref is not None:
            yield (ref.fqn, column.name)


def _truncation(node: exp.Expression) -> tuple[str, str | None] | None:
    if isinstance(node, exp.Column):
        return (node.name, None)
    if isinstance(node, exp.Func):
        grain = TRUNCATION_FUNCTIONS.get(function_name(node))
        args = [a for a in node.iter_expressions() if not isinstance(a, exp.Var | exp.Literal)]
        if grain and len(args) == 1 and isinstance(args[0], exp.Column):
            return (args[0].name, grain)
    return None


def _check_references(project: Project, ctx: _Context) -> None:
    """Every TO target, source and dictionary must be defined in the directory or declared external."""
    known = set(project.tables) | set(project.views) | set(project.dictionaries) | set(project.external)
    for view in project.views.values():
        loc = view.location
        if view.target is not None and view.target not in project.tables and view.target not in project.external:
            ctx.problem(loc.file, loc.line, loc.column,
                        f"{view.ref.fqn} writes TO {view.target.fqn}, which is defined nowhere in the DDL directory",
                        f"add CREATE TABLE {view.target.fqn} (…) to a .sql file, or list it under external")  # fmt: skip
        for source in view.sources:
            if source.ref not in known:
                line, column = _offset_position(view, source.spans)
                ctx.problem(loc.file, line, column,
                            f"{view.ref.fqn} reads {source.ref.fqn}, which is defined nowhere in the DDL directory",
                            f"add CREATE TABLE {source.ref.fqn} (…), or declare it external in chmv.toml "
                            f"(external = [\"{source.ref.fqn}\"])")  # fmt: skip
        for dictionary in view.dictionaries:
            if dictionary not in known:
                ctx.problem(loc.file, loc.line, loc.column,
                            f"{view.ref.fqn} uses dictionary {dictionary.fqn}, which is defined nowhere",
                            f"add CREATE DICTIONARY {dictionary.fqn} (…), or declare it external in chmv.toml")  # fmt: skip
    for dictionary in project.dictionaries.values():
        src = dictionary.source_table
        if src is not None and src not in known:
            loc = dictionary.location
            ctx.problem(loc.file, loc.line, loc.column,
                        f"dictionary {dictionary.ref.fqn} loads from {src.fqn}, which is defined nowhere",
                        "add the table, or declare it external in chmv.toml")  # fmt: skip


def _offset_position(view: MaterializedView, spans: Sequence[Span]) -> tuple[int, int]:
    """File line and column of the first span of a name in the view's SELECT."""
    loc = view.location
    if not spans:
        return loc.line, loc.column
    statement_offset = len(view.statement) - len(view.select_sql) + spans[0].start
    before = view.statement[:statement_offset]
    line = loc.line + before.count("\n")
    column = (statement_offset - before.rfind("\n")) if "\n" in before else loc.column + statement_offset
    return line, column
