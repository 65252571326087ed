"""Parse a DDL directory into a :class:`~chmv_assets.ddl.models.Project`.

Each ``.sql`` file is tokenized once and each statement parsed once with sqlglot's ClickHouse dialect.
Everything a later stage needs is derived here and frozen into the models; problems are collected
across the whole directory and raised together as one :class:`~chmv_assets.errors.DDLError`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from chmv_assets.ddl.grains import TRUNCATION_FUNCTIONS
from chmv_assets.ddl.models import (
    SERVER_DATABASES,
    AggregateCall,
    Column,
    Database,
    Dictionary,
    Engine,
    Fragment,
    KeptKind,
    KeptObject,
    MaterializedView,
    ObjectRef,
    OutputColumn,
    PartitionCall,
    PartitionElement,
    Project,
    SourceLocation,
    SourceRole,
    SourceUse,
    Span,
    Table,
)
from chmv_assets.ddl.query_tree import analyze_query_tree
from chmv_assets.ddl.select_facts import (  # noqa: F401 (COMBINATORS: re-exported)
    AGGREGATES,
    COMBINATORS,
    SelectFacts,
    is_dictionary_function,
    split_combinators,
)
from chmv_assets.ddl.server_grammar import Refusal, server_grammar
from chmv_assets.ddl.sql_text import (
    Statement,
    StatementKind,
    clauses,
    engine_string_arguments,
    item_end,
    line_col,
    names_after,
    on_cluster_span,
    security_spans,
    select_start,
    split_statements,
    statement_kind,
    thread_parser,
    to_sql,
    tokenize,
    trailing_comment,
    tuple_items,
)
from chmv_assets.ddl.ttl import parse_ttl
from chmv_assets.ddl.types import SPELLING
from chmv_assets.errors import DDLError, DDLProblem, ParserUnavailable

logging.getLogger("sqlglot").setLevel(logging.ERROR)

#: Statements chmv keeps as written (docs/any-schema.md), by the kind their first words say.
KEPT_KINDS = {k.value: k for k in KeptKind}
#: Kinds chmv models: what sqlglot reads, or ClickHouse's own parser where sqlglot cannot.
MODELED_KINDS = frozenset({"table", "materialized view", "database", "dictionary"})


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
    kept: dict[tuple[KeptKind, str], KeptObject] = {}
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
            if isinstance(parsed, KeptObject):
                _register_kept(parsed, kept, objects, ctx)
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
        kept=tuple(kept.values()),
        external=externals,
    )
    _check_references(project, ctx)
    project = _without_loops(project, ctx)
    if ctx.problems:
        raise DDLError(ctx.problems)
    return project


def _without_loops(project: Project, ctx: _Context) -> Project:
    """The project with the MVs of each real trigger loop left out (kept in ``loops``: one problem each, naming the
    loop and each MV's ``file:line``, raised only with other problems; everything else loads). A loop of tables
    alone (inserts through Buffer or Distributed tables into each other) has nothing to leave out: a problem."""
    from chmv_assets.ddl.lineage import trigger_loops

    loops, bare = trigger_loops(project)
    for part in bare:
        root = Path(project.ddl_dir)
        table = next((project.tables[r] for r in project.tables if r.fqn in part), None)
        loc = table.location if table is not None else SourceLocation(file=str(root), line=1)
        ctx.problem(
            loc.file,
            loc.line,
            loc.column,
            "cycle in the table graph: " + ", ".join(sorted(part)) + " write into each other",
            "an insert must not reach, through Buffer or Distributed tables, the table it started from: break the loop",
        )
    if not loops:
        return project
    for loop in loops:
        p = loop.problem()
        ctx.problem(p.file, p.line, p.column, p.message, p.hint)
    left_out = {r for loop in loops for r in loop.refs}
    views = {r: v for r, v in project.views.items() if r not in left_out}
    # a new model, not model_copy: that would carry the cached properties of the project with the loops (its indexes)
    fields = {name: getattr(project, name) for name in Project.model_fields}
    loaded = Project(**(fields | {"views": views, "loops": tuple(loops)}))
    if len(ctx.problems) == len(loops):  # only loops: the rest loads, the loops are the project's to tell
        del ctx.problems[:]
    return loaded


def parse_statement(
    sql: str, *, default_database: str = "default", origin: str = "<statement>"
) -> Table | Dictionary | MaterializedView | Database | KeptObject | None:
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


def _register_kept(obj: KeptObject, kept: dict, objects: dict, ctx: _Context) -> None:
    loc = obj.location
    if obj.ref is not None and obj.ref in objects:
        ctx.problem(
            loc.file,
            loc.line,
            loc.column,
            f"{obj.ref.fqn} is defined again as a {obj.kind} (first at {objects[obj.ref].location})",
            "keep one definition; rename one of them if both are meant",
        )
        return
    previous = kept.get((obj.kind, obj.name))
    if previous is None:
        kept[(obj.kind, obj.name)] = obj
    elif _normalize(previous.statement) != _normalize(obj.statement):
        ctx.problem(
            loc.file,
            loc.line,
            loc.column,
            f"{obj.label} is defined again with a different definition (first at {previous.location})",
            "keep one definition",
        )


def _register(obj: Table | Dictionary | MaterializedView, objects: dict, ctx: _Context) -> None:
    previous = objects.get(obj.ref)
    if previous is None:
        objects[obj.ref] = obj
        return
    if _normalize(previous.statement) != _normalize(obj.statement):
        loc = obj.location
        ctx.problem(
            loc.file,
            loc.line,
            loc.column,
            f"{obj.ref.fqn} is defined again with a different definition (first at {previous.location})",
            "keep one definition; rename one of them if both are meant",
        )


def _normalize(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").lower()


def _ref(name: str, default_database: str) -> ObjectRef:
    database, _, table = name.rpartition(".")
    return ObjectRef(database=(database or default_database).strip('`"'), name=table.strip('`"'))


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


def _parse_statement(
    located: _Located, ctx: _Context
) -> Table | Dictionary | MaterializedView | Database | KeptObject | None:
    """The model of one statement: sqlglot reads it; where it cannot, ClickHouse's own parser does (docs/any-schema.md,
    "Reading any ClickHouse DDL"); a statement chmv keeps without modelling it becomes a :class:`KeptObject`."""
    stmt = located.statement
    text = stmt.text
    try:
        tokens = tokenize(text)
    except TokenError as err:
        ctx.problem(located.file, stmt.line, stmt.column, f"cannot tokenize: {err}", "close the string or comment")
        return None
    kind = statement_kind(tokens)
    if kind.kind in KEPT_KINDS:
        return _kept(located, ctx, tokens, kind)
    node, tokens, populate, error = _sqlglot(text, tokens)
    if isinstance(node, exp.Create) and kind.kind in MODELED_KINDS:
        try:
            return _model(node, located, ctx, tokens, populate)
        finally:
            _release(node)
    if isinstance(node, exp.Use | exp.Set):
        return None
    if node is not None:
        _release(node)
    if kind.kind == "materialized view":
        try:
            return _server_view(located, ctx, tokens, populate, error)
        except _Unreadable as err:
            ctx.problem(
                located.file,
                stmt.line,
                stmt.column,
                f"chmv cannot read this statement, which ClickHouse accepts: {err}",
                "report it to chmv with the statement; meanwhile write the clause another way",
            )
            return None
    if _ask_server(located, ctx, "ast", text, error) is None:
        return None
    if kind.kind not in MODELED_KINDS:
        words = " ".join(text.split()[:3])
        ctx.problem(
            located.file,
            stmt.line,
            stmt.column,
            f"unsupported statement: {words} …",
            "the DDL directory declares objects: CREATE DATABASE/TABLE/DICTIONARY/[MATERIALIZED] VIEW/FUNCTION, "
            "access control (users, roles, grants, row policies, quotas, settings profiles), named "
            "collections; run one-off statements (INSERT, ALTER, DROP…) by hand",
        )
        return None
    try:
        if kind.kind == "database":
            return _database_from_tokens(located, tokens, kind)
        node, populate, reduced = _readable(text, tokens)
    except _Unreadable as err:
        ctx.problem(
            located.file,
            stmt.line,
            stmt.column,
            f"chmv cannot read this statement, which ClickHouse accepts: {err}",
            "report it to chmv with the statement; meanwhile write the clause another way",
        )
        return None
    try:
        return _patched(_model(node, located, ctx, tokens, populate), located.statement.text, reduced)
    finally:
        _release(node)


def _sqlglot(text: str, tokens) -> tuple[exp.Expression | None, list, bool, ParseError | None]:
    """sqlglot's parse of a statement: the tree (None if it failed or only read a command), the tokens the tree was
    read from, whether the statement has POPULATE (blanked for sqlglot, offsets kept), and sqlglot's error."""
    populate = False
    security = security_spans(tokens)
    if security:  # sqlglot fails on `DEFINER = u SQL SECURITY DEFINER` (a TypeError): blank it, offsets kept
        for start, end in security:
            text = _blank(text, start, end)
        tokens = tokenize(text)
    try:
        node = _parse_tokens(tokens, text)
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
                blanked = text[: keyword.start] + " " * (keyword.end + 1 - keyword.start) + text[keyword.end + 1 :]
                tokens = tokenize(blanked)
                node = _parse_tokens(tokens, blanked)
    except ParseError as err:
        return None, tokens, populate, err
    except (TypeError, AttributeError, ValueError, IndexError, KeyError, RecursionError) as err:
        # sqlglot's own defect on a statement it does not expect: ClickHouse's parser reads it instead
        return None, tokens, populate, ParseError(f"sqlglot failed: {type(err).__name__}: {err}")
    if isinstance(node, exp.Command):
        _release(node)
        return None, tokens, populate, None
    return node, tokens, populate, None


def _ask_server(
    located: _Located, ctx: _Context, question: str, sql: str, error: ParseError | None, offset: int = 0
) -> str | None:
    """ClickHouse's answer (``ast`` or ``tree``) about ``sql`` (at ``offset`` in the statement); None, with the
    problem recorded, when the server refuses it or cannot be asked."""
    answers = _ask_all(located, ctx, [(question, sql, offset)], error)
    return answers[0] if answers is not None else None


def _ask_all(
    located: _Located, ctx: _Context, questions: list[tuple[str, str, int]], error: ParseError | None
) -> list[str] | None:
    """ClickHouse's answers to ``(question, sql, offset in the statement)`` in one round trip; None, with the first
    refusal recorded as a problem, when the server refuses one or cannot be asked."""
    stmt = located.statement
    try:
        answers = server_grammar().ask(*((question, sql) for question, sql, _offset in questions))
    except ParserUnavailable as err:
        why = f"sqlglot: {_describe(error)}; " if error is not None else ""
        ctx.problem(
            located.file,
            stmt.line,
            stmt.column,
            f"cannot read this statement ({why}ClickHouse's parser could not be asked: {err})",
            "check that chdb is installed in chmv's environment (it is a dependency of chmv)",
        )
        return None
    for (_question, _sql, offset), answer in zip(questions, answers, strict=True):
        if not isinstance(answer, Refusal):
            continue
        line, column = (
            located.position(offset + answer.offset) if answer.offset is not None else (stmt.line, stmt.column)
        )
        message = _shorter(answer.message)
        if message.startswith("Syntax error"):
            message = "syntax error" + message.removeprefix("Syntax error")
        ctx.problem(
            located.file,
            line,
            column,
            f"the server refused it: {message}",
            "fix the statement (the message is ClickHouse's own parser's: the server would refuse it too)",
        )
        return None
    return [a for a in answers if isinstance(a, str)]


def _describe(error: ParseError) -> str:
    first = error.errors[0] if error.errors else {}
    return str(first.get("description") or error).splitlines()[0]


def _shorter(message: str) -> str:
    """The server's message with its list of expected tokens cut after a few."""
    head, sep, expected = message.partition("Expected one of: ")
    if not sep:
        return message
    names = expected.split(", ")
    return head + sep + (", ".join(names[:6]) + ", …" if len(names) > 6 else expected)


class _Unreadable(Exception):
    """A statement ClickHouse accepts that sqlglot cannot read even with its unknown parts set aside."""


# -- statements sqlglot cannot read: ClickHouse's own parser ---------------------------------------------------------

#: Words that end a column's type in its definition (the clauses after it).
_COLUMN_CLAUSES = frozenset(
    {
        "DEFAULT",
        "MATERIALIZED",
        "ALIAS",
        "EPHEMERAL",
        "CODEC",
        "TTL",
        "COMMENT",
        "STATISTICS",
        "SETTINGS",
        "PRIMARY",
        "NOT",
        "NULL",
    }
)
_DEFAULT_KINDS = frozenset({"DEFAULT", "MATERIALIZED", "ALIAS", "EPHEMERAL"})
#: Words that start a CREATE's clause at depth 0 (a clause sqlglot cannot read is set aside up to the next one).
_STATEMENT_CLAUSES = frozenset(
    {
        "ENGINE",
        "PARTITION",
        "ORDER",
        "PRIMARY",
        "SAMPLE",
        "TTL",
        "SETTINGS",
        "COMMENT",
        "SOURCE",
        "LAYOUT",
        "LIFETIME",
        "RANGE",
        "TO",
        "REFRESH",
        "EMPTY",
        "AS",
        "DEFINER",
        "SQL",
        "ON",
        "UUID",
        "CLONE",
        "ORDER BY",
        "PARTITION BY",
        "PRIMARY KEY",
        "SAMPLE BY",
    }
)


@dataclass(frozen=True)
class _Item:
    """A column definition of a CREATE's column list: its span, its type's span, and whether it defines a column."""

    start: int
    end: int
    type_start: int
    type_end: int
    name: str
    column: bool


def _column_items(tokens) -> list[_Item]:
    """The items of the CREATE's column list (the first parenthesis at depth 0, before ENGINE or AS)."""
    opening = None
    for i, token in enumerate(tokens):
        word = token.text.upper()
        if token.token_type == TokenType.L_PAREN:
            opening = i
            break
        if word in ("ENGINE", "AS", "TO", "PRIMARY", "SOURCE"):
            return []
    if opening is None:
        return []
    items, depth, begin = [], 0, opening + 1
    for i in range(opening, len(tokens)):
        kind = tokens[i].token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        if (depth == 1 and kind == TokenType.COMMA) or depth == 0:
            if i > begin:
                items.append(_item(tokens[begin:i]))
            begin = i + 1
            if depth == 0:
                break
    return items


def _item(tokens) -> _Item:
    name = tokens[0].text
    column = name.upper() not in ("INDEX", "PROJECTION", "CONSTRAINT", "PRIMARY", "STATISTICS") or len(tokens) < 2
    depth, type_end = 0, tokens[-1].end + 1
    for token in tokens[1:]:
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and token.text.upper() in _COLUMN_CLAUSES:
            type_end = token.start
            break
    type_start = tokens[1].start if len(tokens) > 1 else tokens[0].end + 1
    type_end = max(type_start, min(type_end, tokens[-1].end + 1))
    return _Item(tokens[0].start, tokens[-1].end + 1, type_start, type_end, name, column)


def _readable(text: str, tokens) -> tuple[exp.Create, bool, dict[str, _Item]]:
    """sqlglot's tree of a CREATE that ClickHouse accepts, with the parts sqlglot cannot read set aside (blanked, so
    offsets stay valid): a column's clauses after its type (its type too, if that is the part), another item of the
    column list, or a clause of the statement. Returns the tree, POPULATE, and the columns set aside (by name).

    Raises:
        _Unreadable: Nothing left to set aside, and sqlglot still fails.
    """
    current, reduced, items = text, {}, _column_items(tokens)
    last_error = "sqlglot reads it as an unknown command"
    for _attempt in range(64):
        node, _tokens, populate, error = _sqlglot(current, tokenize(current))
        if isinstance(node, exp.Create):
            return node, populate, reduced
        if node is not None:
            _release(node)
        if error is not None:
            last_error = _describe(error)
        offset = _error_offset(error, current) if error is not None else None
        edited = _set_aside(current, tokens, items, reduced, offset)
        if edited is None or edited == current:
            raise _Unreadable(last_error)
        current = edited
    raise _Unreadable(last_error)


def _error_offset(error: ParseError, text: str) -> int | None:
    first = error.errors[0] if error.errors else {}
    line, col = first.get("line"), first.get("col")
    if not line or not col:
        return None
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    if line > len(starts):
        return None
    return max(0, starts[line - 1] + col - len(first.get("highlight") or "x"))


def _blank(text: str, start: int, end: int, replacement: str = "") -> str:
    return text[:start] + replacement.ljust(end - start) + text[end:]


def _set_aside(text: str, tokens, items: list[_Item], reduced: dict[str, _Item], offset: int | None) -> str | None:
    """``text`` with the next part sqlglot cannot read blanked; None when there is nothing left to set aside."""
    if offset is None:  # no position: try each column definition alone
        for item in items:
            if item.name in reduced or not item.column:
                continue
            probe = f"CREATE TABLE _chmv_probe ({text[item.start : item.end]}) ENGINE = Memory"
            node, _t, _p, _e = _sqlglot(probe, tokenize(probe))
            if node is None:
                offset = item.start
                break
            _release(node)
        else:
            return None
    for index, item in enumerate(items):
        if not item.start <= offset <= item.end:
            continue
        if not item.column:  # an index, a projection, a constraint: set aside with the comma before it
            start = text.rfind(",", 0, item.start) if index else item.start
            return _blank(text, start if start >= 0 else item.start, item.end)
        reduced[item.name] = item
        if offset < item.type_end and text[item.type_start : item.type_end].strip() != "String":
            # the type is what sqlglot cannot read (``Object('json')``): read it as String; the model keeps it as written
            return _blank(
                text, item.type_start, item.type_end, "String" if item.type_end - item.type_start >= 6 else ""
            )
        if text[item.type_end : item.end].strip():
            return _blank(text, item.type_end, item.end)
        return None
    return _without_clause(text, tokens, offset)


def _without_clause(text: str, tokens, offset: int) -> str | None:
    """``text`` with the depth-0 clause around ``offset`` blanked (up to the next clause), or None."""
    depth, start = 0, None
    for i, token in enumerate(tokens):
        kind = token.token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and i > 2 and token.text.upper() in _STATEMENT_CLAUSES:
            if start is not None and token.start > offset:
                return _blank(text, start, token.start)
            if token.start <= offset:
                start = token.start
    return _blank(text, start, len(text)) if start is not None and start <= offset else None


def _patched(model, text: str, reduced: dict[str, _Item]):
    """The model with the columns set aside for sqlglot read from their verbatim definitions."""
    if not reduced or not isinstance(model, Table | MaterializedView):
        return model
    table = model if isinstance(model, Table) else model.inner_table
    if table is None:
        return model
    columns = tuple(_verbatim_column(text, reduced[c.name]) if c.name in reduced else c for c in table.columns)
    table = table.model_copy(update={"columns": columns})
    return table if isinstance(model, Table) else model.model_copy(update={"inner_table": table})


def _verbatim_column(text: str, item: _Item) -> Column:
    """A column from its definition as written (type, DEFAULT/MATERIALIZED/ALIAS/EPHEMERAL expression, COMMENT)."""
    definition = text[item.start : item.end]
    kind = expression = comment = None
    tokens = tokenize(text[item.type_end : item.end])
    depth, current, begin = 0, None, 0
    clauses: dict[str, str] = {}
    for i, token in enumerate([*tokens, None]):
        if token is not None and token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token is not None and token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif token is None or (depth == 0 and token.text.upper() in _COLUMN_CLAUSES):
            if current is not None and i > begin:
                clauses.setdefault(
                    current, text[item.type_end + tokens[begin].start : item.type_end + tokens[i - 1].end + 1]
                )
            if token is not None:
                current, begin = token.text.upper(), i + 1
    for word in _DEFAULT_KINDS:
        if word in clauses:
            kind, expression = word, clauses[word]
    if "COMMENT" in clauses:
        comment = clauses["COMMENT"].strip().strip("'")
    type_sql = " ".join(text[item.type_start : item.type_end].split())
    return Column(
        name=item.name,
        type=SPELLING.get(type_sql, type_sql),
        default_kind=kind,
        default_expression=expression,
        comment=comment,
        definition=definition,
    )


def _server_view(
    located: _Located, ctx: _Context, tokens, populate: bool, error: ParseError | None = None
) -> MaterializedView | None:
    """An MV whose SELECT sqlglot cannot read: its CREATE part read by sqlglot (with ``SELECT 1`` for a SELECT), the
    SELECT's facts from ClickHouse's query tree of it (:mod:`chmv_assets.ddl.query_tree`)."""
    stmt = located.statement
    text = stmt.text
    start = select_start(tokens)
    if start is None:
        if _ask_server(located, ctx, "ast", text, error) is None:
            return None  # the server's own message says what is wrong
        ctx.problem(
            located.file,
            stmt.line,
            stmt.column,
            "materialized view has no AS SELECT",
            "write CREATE MATERIALIZED VIEW … TO target AS SELECT …",
        )
        return None
    comment = trailing_comment(tokens)
    select_sql = text[start : comment[0] if comment else len(text)].rstrip()
    answers = _ask_all(located, ctx, [("ast", text, 0), ("tree", select_sql, start)], error)
    if answers is None:
        return None
    facts = analyze_query_tree(answers[1], select_sql, ctx.default_database)
    header = text[:start] + "SELECT 1"
    node, header_populate, reduced = _readable(header, tokenize(header))
    description = comment[1] if comment else "\n".join(c for c in stmt.comments if c) or None
    try:
        view = _parse_view(
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
        _release(node)
    return _patched(view, text, reduced) if view is not None else None


def _database_from_tokens(located: _Located, tokens, kind: StatementKind) -> Database | None:
    """A CREATE DATABASE sqlglot cannot read: its name and engine from its words."""
    names = names_after(tokens, kind.name_at)
    if not names:
        raise _Unreadable("no database name")
    engine = next(
        (
            tokens[i + 2].text if tokens[i + 1].token_type == TokenType.EQ else tokens[i + 1].text
            for i, t in enumerate(tokens[:-2])
            if t.text.upper() == "ENGINE"
        ),
        None,
    )
    return Database(name=names[0][0][-1], engine=engine, statement=located.statement.text, location=located.location())


# -- statements chmv keeps as written ------------------------------------------------------------------------------

#: Words after which a GRANT's grantees end.
_GRANT_END = frozenset({"WITH", "SETTINGS"})
_AST_FUNCTION = re.compile(r"^\s*Function (\S+)", re.MULTILINE)


def _kept(located: _Located, ctx: _Context, tokens, kind: StatementKind) -> KeptObject | None:
    """A statement chmv keeps without modelling it: a plain view, a function, access control, a named collection."""
    stmt = located.statement
    text = stmt.text
    what = KEPT_KINDS[kind.kind]  # type: ignore[index]
    description = "\n".join(c for c in stmt.comments if c) or None
    cluster = _span(on_cluster_span(tokens))
    on_cluster = _cluster_name(text, cluster)
    common = {
        "statement": text,
        "location": located.location(),
        "description": description,
        "on_cluster": on_cluster,
        "cluster_span": cluster,
    }
    if what == KeptKind.VIEW:
        return _plain_view(located, ctx, tokens, kind, common)
    answer = _ask_server(located, ctx, "ast", text, None)
    if answer is None:
        return None
    functions = tuple(dict.fromkeys(f for f in _AST_FUNCTION.findall(answer) if f not in ("lambda", "tuple")))
    names = names_after(tokens, kind.name_at)
    if what == KeptKind.GRANT:
        grantees, reads = _grant_parts(tokens, ctx.default_database)
        return KeptObject(kind=what, name=" ".join(text.split()), names=grantees, reads=reads, **common)
    if not names:
        ctx.problem(
            located.file, stmt.line, stmt.column, f"cannot find the name of this {what}", "write CREATE <kind> name …"
        )
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


def _plain_view(located: _Located, ctx: _Context, tokens, kind: StatementKind, common: dict) -> KeptObject | None:
    stmt = located.statement
    text = stmt.text
    names = names_after(tokens, kind.name_at)
    start = select_start(tokens)
    if not names or start is None:
        ctx.problem(
            located.file,
            stmt.line,
            stmt.column,
            "a view needs a name and AS SELECT",
            "write CREATE VIEW db.name AS SELECT …",
        )
        return None
    parts, name_start, name_end = names[0]
    ref = ObjectRef(database=".".join(parts[:-1]) or ctx.default_database, name=parts[-1])
    comment = trailing_comment(tokens)
    select_sql = text[start : comment[0] if comment else len(text)].rstrip()
    node, _tokens, _populate, error = _sqlglot(text, tokens)
    if isinstance(node, exp.Create) and node.expression is not None and comment is None:
        try:
            facts = _analyze_select(node.expression, ctx.default_database, start)
        finally:
            _release(node)
    else:
        if node is not None:
            _release(node)
        answers = _ask_all(located, ctx, [("ast", text, 0), ("tree", select_sql, start)], error)
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


def _cluster_name(text: str, span: Span | None) -> str | None:
    if span is None:
        return None
    words = text[span.start : span.end].split()
    return words[-1].strip("'\"`") if words else None


def _grant_parts(tokens, default_database: str) -> tuple[tuple[str, ...], tuple[ObjectRef, ...]]:
    """A GRANT's grantees (after its depth-0 TO) and the tables it names (after ON, not ``db.*``)."""
    grantees: list[str] = []
    reads: list[ObjectRef] = []
    depth = 0
    for i, token in enumerate(tokens):
        kind = token.token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and kind == TokenType.ON and not _cluster_at(tokens, i):
            for parts, _s, _e in names_after(tokens, i + 1):
                reads.append(ObjectRef(database=".".join(parts[:-1]) or default_database, name=parts[-1]))
        elif depth == 0 and token.text.upper() == "TO":
            for other in tokens[i + 1 :]:
                if other.text.upper() in _GRANT_END:
                    break
                if other.token_type != TokenType.COMMA:
                    grantees.append(other.text)
            break
    return tuple(grantees), tuple(reads)


def _cluster_at(tokens, i: int) -> bool:
    """Token ``i`` is the ON of ``ON CLUSTER``."""
    return i + 1 < len(tokens) and tokens[i + 1].text.upper() == "CLUSTER"


def _policy_tables(tokens, default_database: str) -> tuple[ObjectRef, ...]:
    """The tables a row policy is ON."""
    for i, token in enumerate(tokens):
        if token.token_type == TokenType.ON and not _cluster_at(tokens, i):
            return tuple(
                ObjectRef(database=".".join(p[:-1]) or default_database, name=p[-1])
                for p, _s, _e in names_after(tokens, i + 1)
            )
    return ()


def _release(tree: exp.Expression) -> None:
    """Unlink every node from its parent, so reference counting frees the tree as soon as it is dropped.

    Each node points to its parent, so a parse tree is a reference cycle: without this, the trees of every
    statement of a directory wait for the cyclic garbage collector, which then traverses them all (a fifth
    of a cold load of 1,000 MVs, benchmarks/bench_definitions.py). The models keep no node.
    """
    for node in tree.walk():
        node.parent = None


def _model(
    node: exp.Create, located: _Located, ctx: _Context, tokens, populate: bool
) -> Table | Dictionary | MaterializedView | Database | None:
    """The model of a parsed CREATE statement (None, with a problem recorded, for one chmv does not model)."""
    stmt, text = located.statement, located.statement.text
    kind = (node.args.get("kind") or "").upper()
    description = "\n".join(c for c in stmt.comments if c) or None
    props = _properties(node)
    if kind in ("SCHEMA", "DATABASE"):
        engine = props.get(exp.EngineProperty)
        return Database(
            name=node.this.name,
            engine=to_sql(engine.this) if engine and engine.this else None,
            statement=text,
            location=located.location(),
        )
    if kind == "TABLE":
        return _parse_table(node, located, ctx, description, tokens)
    if kind == "DICTIONARY":
        return _parse_dictionary(node, located, ctx, description)
    if kind == "VIEW" and exp.MaterializedProperty in props:
        return _parse_view(node, located, ctx, description, populate, tokens)
    ctx.problem(
        located.file,
        stmt.line,
        stmt.column,
        f"unsupported CREATE {kind}",
        "the DDL directory declares objects: CREATE DATABASE/TABLE/DICTIONARY/[MATERIALIZED] VIEW/FUNCTION, "
        "access control, named collections",
    )
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
        columns.append(
            Column(
                name=col.name,
                type=SPELLING.get(type_sql, type_sql),
                default_kind=default_kind,
                default_expression=default_expr,
                comment=comment,
                definition=definition,
            )
        )
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


def _fragment(located: _Located, span: tuple[int, int], prop: exp.Expression | None) -> Fragment:
    """A verbatim clause with the spans of the columns it references, relative to the fragment."""
    start, end = span
    spans: dict[str, list[Span]] = {}
    for column in prop.find_all(exp.Column) if prop is not None else ():
        meta = column.this.meta if isinstance(column.this, exp.Identifier) else {}
        if "start" in meta and column.args.get("table") is None:
            spans.setdefault(column.name, []).append(Span(start=meta["start"] - start, end=meta["end"] + 1 - start))
    return Fragment(
        sql=located.statement.text[start:end], column_spans=tuple((name, tuple(s)) for name, s in spans.items())
    )


def _column_names(nodes) -> tuple[str, ...]:
    """Distinct unqualified column names referenced by ``nodes``, in written order."""
    return tuple(dict.fromkeys(c.name for n in nodes if n is not None for c in n.find_all(exp.Column, bfs=False)))


def _partition_call(prop: exp.PartitionedByProperty | None) -> PartitionCall | None:
    """``f(col)`` or a bare ``col`` (parentheses ignored); None for anything else (several arguments, a tuple…)."""
    call = _element_call(prop.this) if prop is not None else None
    return call if call is not None and not call.arguments and call.inner is None else None


def _element_call(node: exp.Expression | None) -> PartitionCall | None:
    """One PARTITION BY element as a function of one column (:class:`PartitionCall`): ``f(col)``, ``f(col, constants…)``,
    ``f(g(col), constants…)`` or a bare ``col`` (parentheses ignored); None for anything else."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column) and not node.table:
        return PartitionCall(function=None, column=node.name)
    if not isinstance(node, exp.Func) or isinstance(node, exp.Tuple | exp.Struct):
        return None
    flat = _call_arguments(node)
    if not flat:
        return None
    first, rest = flat[0], flat[1:]
    constants = [_constant(a) for a in rest]
    if any(c is None for c in constants):
        return None
    inner = None
    if isinstance(first, exp.Func) and not isinstance(first, exp.Column):
        inner_args = _call_arguments(first)
        if len(inner_args) != 1 or not rest:  # f(g(col)) alone is not a shape chmv reads
            return None
        inner, first = function_name(first), inner_args[0]
    if not isinstance(first, exp.Column) or first.table:
        return None
    return PartitionCall(
        function=function_name(node),
        column=first.name,
        arguments=tuple(constants),  # type: ignore[arg-type]
        inner=inner,
    )


def _call_arguments(node: exp.Func) -> list[exp.Expression]:
    """A call's arguments in written order; sqlglot adds the unit of a truncation it recognises (toStartOfHour →
    TimestampTrunc(unit=HOUR)), which is not an argument."""
    arguments = [v for k, v in node.args.items() if v is not None and not (k == "unit" and isinstance(v, exp.Var))]
    return [a for arg in arguments for a in (arg if isinstance(arg, list) else [arg]) if isinstance(a, exp.Expression)]


def _constant(node: exp.Expression) -> str | None:
    """A constant argument as written: a number, a string's value, ``6 HOUR`` of ``INTERVAL 6 HOUR``; None otherwise."""
    if isinstance(node, exp.Literal):
        return str(node.this)
    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal) and node.unit is not None:
        return f"{node.this.this} {node.unit.name.upper()}"
    return None


def _partition_elements(
    span: tuple[int, int], prop: exp.PartitionedByProperty | None, tokens
) -> tuple[PartitionElement, ...]:
    """The PARTITION BY's elements (the items of a tuple, or the whole), spans relative to the clause's text."""
    items = tuple_items(tokens, *span)
    node = prop.this if prop is not None else None
    while isinstance(node, exp.Paren):
        node = node.this
    tupled = isinstance(node, exp.Tuple | exp.Struct) and (len(items) != 1 or items[0] != span)
    nodes = list(node.expressions) if tupled else [node]  # type: ignore[union-attr]
    calls = [_element_call(n) for n in nodes] if len(nodes) == len(items) else [None] * len(items)
    return tuple(
        PartitionElement(span=Span(start=a - span[0], end=b - span[0]), call=call)
        for (a, b), call in zip(items, calls, strict=True)
    )


def _settings(prop: exp.SettingsProperty | None) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in prop.expressions if prop is not None else ():
        if isinstance(item, exp.EQ):
            value = item.expression
            pairs.append((item.this.name, value.name if isinstance(value, exp.Literal) else to_sql(value)))
    return tuple(pairs)


def _table_properties(
    node: exp.Create, located: _Located, ref: ObjectRef, columns, description, tokens, name_span: Span | None = None
) -> Table:
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
        partition_elements=_partition_elements(partition_span, partition_prop, tokens) if partition_span else (),
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
    table = _table_properties(node, located, ref, columns, description, tokens, _name_span(target))
    source = node.expression
    update: dict = {}
    if isinstance(source, exp.Table) and _is_real_table(source):  # CREATE TABLE t AS other
        update = {"as_table": _table_ref(source, ctx.default_database), "as_table_span": _name_span(source)}
    reads = _engine_reads(table.engine, ref)
    if reads:
        update["reads"] = reads
    return table.model_copy(update=update) if update else table


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
        return (_ref(args[0], ref.database),)
    return ()


def _unquote_argument(text: str, database: str) -> str:
    """An engine argument naming a database or a table: an identifier or a string; ``currentDatabase()`` too."""
    if text.replace(" ", "").lower() in ("currentdatabase()", "current_database()"):
        return database
    return text.strip().strip("'`\"")


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
    return Dictionary(
        ref=ref,
        columns=_columns(schema),
        source_table=source_table,
        primary_key=", ".join(to_sql(e) for e in key.expressions) if key else None,
        description=description,
        statement=located.statement.text,
        location=located.location(),
        name_span=_name_span(schema.this),
    )


def _parse_view(
    node: exp.Create,
    located: _Located,
    ctx: _Context,
    description: str | None,
    populate: bool,
    tokens,
    *,
    facts: SelectFacts | None = None,
    select: tuple[int, int] | None = None,
) -> MaterializedView | None:
    """An MV from sqlglot's tree; with ``facts`` (and ``select``: the SELECT's offset and length in the statement)
    the SELECT was read by ClickHouse's parser, and the tree is the CREATE part's only."""
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
        ctx.problem(
            located.file,
            stmt.line,
            stmt.column,
            f"materialized view {ref.fqn} has no AS SELECT",
            "write CREATE MATERIALIZED VIEW … TO target AS SELECT …",
        )
        return None
    analysis = facts if facts is not None else _analyze_select(query, ctx.default_database, start)
    inner_table = None
    if target is None:
        inner_columns = _columns(schema, stmt.text, tokens) or tuple(
            Column(name=c.name, type="") for c in analysis.outputs
        )
        inner_table = _table_properties(node, located, ref, inner_columns, description, tokens)
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
        name_span=_name_span(view_table),
        target_span=_name_span(to.this) if to is not None else None,
        cluster_span=_span(on_cluster_span(tokens)) if cluster is not None else None,
    )


def _depends_on(refresh: exp.Expression | None, default_database: str) -> tuple[ObjectRef, ...]:
    """What ``REFRESH … DEPENDS ON a, db.b`` names, each once (unqualified: the default database, as the server
    resolves it against the current database)."""
    if refresh is None:
        return ()
    refs = (_table_ref(t, default_database) for t in refresh.expressions if isinstance(t, exp.Table))
    return tuple(dict.fromkeys(refs))


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
        if isinstance(source, exp.Final):  # FROM t FINAL
            source = source.this
        if isinstance(source, exp.Subquery):
            query = source.this
            continue
        if isinstance(source, exp.Table) and _is_real_table(source):
            if not source.db and source.name in ctes:
                query = ctes[source.name]
                continue
            return source
        return None


def _analyze_select(query: exp.Expression, default_database: str, base: int) -> SelectFacts:
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
    _in_tables(nodes, ctes, uses, default_database, base)
    sources = tuple(
        SourceUse(
            ref=r, role=u["role"], spans=tuple(u["spans"]), has_alias=tuple(u["aliased"]), block=tuple(u["block"])
        )
        for r, u in sorted(uses.items(), key=lambda kv: kv[1]["role"] != SourceRole.TRIGGER)
    )
    self_join = trigger is not None and trigger in joined

    dictionaries = []
    for func in nodes.funcs:
        if is_dictionary_function(function_name(func)) and func.expressions:
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
        functions=tuple(dict.fromkeys(function_name(f) for f in nodes.funcs)),
    )


def _in_tables(nodes: _Nodes, ctes: dict, uses: dict, default_database: str, base: int) -> None:
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
        entry = uses.setdefault(ref, {"role": SourceRole.READ_WHOLE, "spans": [], "aliased": [], "block": []})
        first = qualifier if qualifier is not None else column.this
        if "start" in first.meta and "end" in column.this.meta:
            entry["spans"].append(Span(start=first.meta["start"] - base, end=column.this.meta["end"] + 1 - base))
            entry["aliased"].append(True)
            entry["block"].append(False)


class _Nodes:
    """The nodes of a tree that the SELECT analysis reads, by kind, collected in one breadth-first walk
    (the order of ``find_all`` for each kind)."""

    def __init__(self, root: exp.Expression):
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


def _alias_map(
    select: exp.Select | None, tables: list[exp.Table] | None, default_database: str
) -> dict[str, ObjectRef]:
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


class _Known(set):
    """The objects a reference may name: those of the DDL, the external ones, and every server's own tables."""

    def __contains__(self, ref: object) -> bool:
        return super().__contains__(ref) or (isinstance(ref, ObjectRef) and ref.database in SERVER_DATABASES)


def _check_references(project: Project, ctx: _Context) -> None:
    """Every TO target, source and dictionary must be defined in the directory or declared external."""
    known = _Known(
        set(project.tables)
        | set(project.views)
        | set(project.dictionaries)
        | set(project.external)
        | set(project.plain_views)
    )
    for plain in project.plain_views.values():
        for source in plain.sources:
            if source.ref not in known:
                loc = plain.location
                ctx.problem(
                    loc.file,
                    loc.line,
                    loc.column,
                    f"view {plain.ref} reads {source.ref.fqn}, which is defined nowhere in the DDL directory",
                    f"add CREATE TABLE {source.ref.fqn} (…), or declare it external in chmv.toml "
                    f'(external = ["{source.ref.fqn}"])',
                )
    for view in project.views.values():
        loc = view.location
        if view.target is not None and view.target not in project.tables and view.target not in project.external:
            ctx.problem(
                loc.file,
                loc.line,
                loc.column,
                f"{view.ref.fqn} writes TO {view.target.fqn}, which is defined nowhere in the DDL directory",
                f"add CREATE TABLE {view.target.fqn} (…) to a .sql file, or list it under external",
            )
        for source in view.sources:
            if source.ref not in known:
                line, column = _offset_position(view, source.spans)
                ctx.problem(
                    loc.file,
                    line,
                    column,
                    f"{view.ref.fqn} reads {source.ref.fqn}, which is defined nowhere in the DDL directory",
                    f"add CREATE TABLE {source.ref.fqn} (…), or declare it external in chmv.toml "
                    f'(external = ["{source.ref.fqn}"])',
                )
        for dictionary in view.dictionaries:
            if dictionary not in known:
                ctx.problem(
                    loc.file,
                    loc.line,
                    loc.column,
                    f"{view.ref.fqn} uses dictionary {dictionary.fqn}, which is defined nowhere",
                    f"add CREATE DICTIONARY {dictionary.fqn} (…), or declare it external in chmv.toml",
                )
        for other in view.depends_on:
            if other not in known:
                ctx.problem(
                    loc.file,
                    loc.line,
                    loc.column,
                    f"{view.ref.fqn} DEPENDS ON {other.fqn}, which is defined nowhere in the DDL directory (the "
                    "server accepts it and never refreshes the MV: its status stays MissingDependencies)",
                    f"add the refreshable MV {other.fqn}, fix the name, or declare it external in chmv.toml "
                    f'(external = ["{other.fqn}"])',
                )
    for dictionary in project.dictionaries.values():
        src = dictionary.source_table
        if src is not None and src not in known:
            loc = dictionary.location
            ctx.problem(
                loc.file,
                loc.line,
                loc.column,
                f"dictionary {dictionary.ref.fqn} loads from {src.fqn}, which is defined nowhere",
                "add the table, or declare it external in chmv.toml",
            )


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
