"""The preflight: every new or changed statement of a plan is run by the server in a scratch database first.

Before the first live object is touched, the objects a plan creates or changes are created with the same
structure in ``_chmv_preflight_<hash>_<database>`` (names rewritten through the parsed model, never by
searching the SQL text): the tables from their DDL, every MV a plan creates or changes over the scratch
copies of its sources and target (so the server analyzes its SELECT against the repo's tables), an
``INSERT … SELECT … LIMIT 0`` of each of those MVs' SELECT into its scratch target (the columns must exist
there and the types convert), and each in-place ALTER on an empty copy of the live table. A statement
the server refuses becomes a :class:`~chmv_assets.errors.DDLProblem` at its file and line, with the
object, the server's message and what to do, all raised together as a
:class:`~chmv_assets.errors.PreflightError`. The scratch databases are dropped in every case.

Everything runs on this server only: ``ON CLUSTER`` is dropped from the statements, and a ``Replicated*`` table is
checked as its plain family (the same structure, no Keeper path: a copy under the live table's path would register
as one more replica of it).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import SERVER_DATABASES, STREAM_ENGINES, MaterializedView, ObjectRef, SourceLocation
from chmv_assets.ddl.names import safe_name
from chmv_assets.ddl.sql_text import line_col, tokenize
from chmv_assets.ddl.twin import (
    DIMENSIONS_SETTING,
    REMOTE_ENGINES,
    databases_renamed,
    engine_of,
    null_stand_in_sql,
    version_tuple,
)
from chmv_assets.engine.lifecycle.plan import CHMV_PREFIX, Action, LifecyclePlan
from chmv_assets.engine.lifecycle.refusals import check_statement
from chmv_assets.engine.server_errors import Code, named_code
from chmv_assets.errors import ChmvError, DDLProblem, PreflightError
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.rebuild_sql import insert_sql, local_copy_sql
from chmv_assets.sql.rewrite import local_table_sql, renamed_select, renamed_statement

_LOG = logging.getLogger(__name__)

#: Hints per server error code: what to do about the statement the server refused.
HINTS = {
    Code.UNKNOWN_IDENTIFIER: "the SELECT reads a column its source does not have: add the column to the source's "
    "CREATE TABLE in the DDL directory (chmv plans the ALTER … ADD COLUMN) or fix the SELECT",
    Code.NO_SUCH_COLUMN_IN_TABLE: "a column is missing from the table the statement names: add it to that table's "
    "CREATE TABLE, or fix the statement",
    Code.THERE_IS_NO_COLUMN: "the MV's SELECT yields a column its target does not have: add it to the target's "
    "CREATE TABLE, or rename the SELECT's alias",
    Code.UNKNOWN_TABLE: "a table the statement needs is neither in the DDL directory nor on the server: add its "
    "CREATE TABLE, or create it and list it under external in chmv.toml",
    Code.UNKNOWN_FUNCTION: "the server does not know this function (its version?): use one it has",
    Code.TYPE_MISMATCH: "the types do not fit: make the SELECT yield the target column's type (CAST) or change the "
    "column's type",
    Code.CANNOT_CONVERT_TYPE: "the SELECT's column does not convert to the target column's type: CAST it, or change "
    "the target column",
    Code.ILLEGAL_TYPE_OF_ARGUMENT: "a function got an argument of a type it does not take: fix the expression",
    Code.NO_COMMON_TYPE: "the branches of the SELECT yield types with no common type: CAST them alike",
    Code.SYNTAX_ERROR: "the server cannot parse the statement: fix its syntax",
    Code.BAD_ARGUMENTS: "the server refused an argument of the statement: fix it as its message says",
    Code.ALTER_OF_COLUMN_IS_FORBIDDEN: "the server cannot change this column in place (a key column?): the plan "
    "must build a new version of the table; report this to chmv",
}
#: Hints that differ for a table's own statement (a DEFAULT, MATERIALIZED or TTL expression, not a SELECT).
TABLE_HINTS = {
    Code.UNKNOWN_IDENTIFIER: "an expression of the table (a DEFAULT, MATERIALIZED, TTL or key) names a column the table "
    "does not have: fix the expression or add the column",
}
DEFAULT_HINT = "fix the statement so the server accepts it (the message is the server's own); nothing was changed"
_CODE = re.compile(r"Code: \d+\.\s*DB::Exception:\s*")
_APPEND = re.compile(r"\bAPPEND\b", re.IGNORECASE)
_UNKNOWN = re.compile(r"(?:Unknown expression identifier|Missing columns:) [`']([^`']+)[`']")


@dataclass(frozen=True)
class PreflightReport:
    """What the preflight ran: its scratch databases, the objects and statements checked."""

    scratch: tuple[str, ...] = ()
    checked: tuple[str, ...] = ()
    statements: int = 0
    seconds: float = 0.0
    skipped: tuple[str, ...] = ()

    def describe(self) -> str:
        if not self.checked:
            return "preflight: nothing new or changed to check"
        text = (
            f"preflight: the server accepted {self.statements} statements for {len(self.checked)} objects "
            f"in {', '.join(self.scratch)} ({self.seconds:.1f}s)"
        )
        return "\n".join([text, *(f"  {s}" for s in self.skipped)])


def scratch_databases(plan: LifecyclePlan, databases: set[str]) -> dict[str, str]:
    """Per database, its scratch database: ``_chmv_preflight_<hash of the plan's statements>_<database>``."""
    digest = hashlib.sha1("\n".join(plan.statements()).encode()).hexdigest()[:8]
    return {d: f"{CHMV_PREFIX}preflight_{digest}_{safe_name(d)}" for d in sorted(databases)}


def preflight(client: Client, loaded: LoadedProject, plan: LifecyclePlan) -> PreflightReport:
    """Run every new or changed statement of ``plan`` in scratch databases; raise if the server refuses any.

    Raises:
        PreflightError: With a problem per refused statement (file, line, object, the server's message, a fix).
    """
    started = time.monotonic()
    run = _Preflight(client, loaded, plan)
    if not run.objects:
        return PreflightReport()
    try:
        problems = run.check()
    finally:
        run.drop_scratch()
    if problems:
        raise PreflightError(problems)
    report = PreflightReport(
        tuple(run.scratch.values()),
        tuple(sorted(r.fqn for r in run.objects)),
        run.count,
        time.monotonic() - started,
        (*run.skipped, *_version_note(client, loaded)),
    )
    _LOG.info(report.describe())
    return report


def _version_note(client: Client, loaded: LoadedProject) -> list[str]:
    """On a server (not the local twin), when chmv.toml's ``server_version`` is not its version (``SELECT version()``):
    what to set, so the embedded engine behaves like this server."""
    configured = loaded.config.server_version
    if loaded.project.twin or configured is None:
        return []
    version = str(client.query("SELECT version()").result_rows[0][0])
    if version_tuple(version)[:2] == version_tuple(configured)[:2]:
        return []
    major_minor = ".".join(map(str, version_tuple(version)[:2]))
    return [f'chmv.toml: server_version = "{configured}", but this server runs {version}: set "{major_minor}"']


def _existing_functions(client: Client, names: set[str]) -> set[str]:
    if not names:
        return set()
    rows = client.query(
        "SELECT name FROM system.functions WHERE name IN {names:Array(String)}", parameters={"names": sorted(names)}
    ).result_rows
    return {r[0] for r in rows}


def _existing(client: Client, refs: set[ObjectRef]) -> set[ObjectRef]:
    if not refs:
        return set()
    rows = client.query(
        "SELECT database, name FROM system.tables WHERE (database, name) IN {refs:Array(Tuple(String, String))}",
        parameters={"refs": [(r.database, r.name) for r in refs]},
    ).result_rows
    return {ObjectRef(database=d, name=n) for d, n in rows}


class _Preflight:
    def __init__(self, client: Client, loaded: LoadedProject, plan: LifecyclePlan):
        self.client = client
        self.project = loaded.project
        self.graph = loaded.graph
        self.count = 0
        self.views: list[MaterializedView] = []
        self.tables: set[ObjectRef] = set()
        self.alters: list[tuple[ObjectRef, tuple[str, ...]]] = []
        self.dictionaries: set[ObjectRef] = set()
        self._changed(plan)
        skipped = self._views_unchecked()
        for view in self.views:  # the MV runs over the repo's structure of what it reads and writes
            self.tables.update(
                r for r in (view.target, *view.source_refs) if r is not None and r.database not in SERVER_DATABASES
            )  # the server's own tables (system.*) are read where they are
        self.tables |= self._read_by_views(self.tables)
        skipped += self._plain_views_unchecked()
        self.skipped = tuple(skipped)
        self.views = [v for v in self.views if not any(s.startswith(f"{v.ref.fqn}:") for s in skipped)]
        self.objects = self.tables | self.dictionaries | {v.ref for v in self.views} | {r for r, _ in self.alters}
        databases = {r.database for r in self.objects}
        self.scratch = scratch_databases(plan, databases)
        self.names = {r: ObjectRef(database=self.scratch[r.database], name=r.name) for r in self.objects}
        self.failed: set[ObjectRef] = set()
        self.problems: list[DDLProblem] = []

    def _changed(self, plan: LifecyclePlan) -> None:
        """The tables, dictionaries, MVs and ``ALTER`` clauses the plan creates or changes."""
        plain = self.project.plain_views
        for change in plan.changes:
            ref = change.ref
            if change.action in (Action.CREATE, Action.NEW_VERSION) and (ref in self.project.tables or ref in plain):
                self.tables.add(ref)
            elif change.action == Action.CREATE and ref in self.project.dictionaries:
                self.dictionaries.add(ref)
            elif (
                change.action in (Action.CREATE, Action.MODIFY_QUERY, Action.RECREATE_VIEW)
                and ref in self.project.views
            ):
                self.views.append(self.project.views[ref])
            if change.action == Action.NEW_VERSION:
                self.views += [self.project.views[v] for v, _ in change.views]
            if change.clauses:
                self.alters.append((ref, change.clauses))

    def _views_unchecked(self) -> list[str]:
        """Why MVs cannot be checked: one whose dictGet names a dictionary that does not exist yet cannot be analyzed
        anywhere but live; nor one calling a SQL function of the DDL that does not exist yet (a function has no
        database to scratch in)."""
        live_dictionaries = _existing(self.client, {d for v in self.views for d in v.dictionaries})
        live_functions = _existing_functions(self.client, self._functions_called())
        skipped = []
        for view in self.views:
            missing = [d.fqn for d in view.dictionaries if d not in live_dictionaries]
            missing += [f"function {f}" for f in self._functions_of(view) if f not in live_functions]
            if missing:
                skipped.append(f"{view.ref.fqn}: not checked, it uses what does not exist yet ({', '.join(missing)})")
        return skipped

    def _plain_views_unchecked(self) -> list[str]:
        """Why plain views (dropped from the tables to check) and the MVs reading them cannot be checked: a plain view
        that looks up a dictionary that does not exist yet cannot be created outside the live database (its dictGet
        names the live dictionary)."""
        plain = self.project.plain_views
        lookups = {d for r in self.tables if r in plain for d in plain[r].reads if d in self.project.dictionaries}
        live_lookups = _existing(self.client, lookups)
        skipped = []
        for ref in sorted((r for r in self.tables if r in plain), key=lambda r: r.fqn):
            missing = [d.fqn for d in plain[ref].reads if d in lookups and d not in live_lookups]
            if missing:
                skipped.append(f"{ref.fqn}: not checked, it uses what does not exist yet ({', '.join(missing)})")
                self.tables.discard(ref)
                for view in self.views:
                    if ref in view.source_refs:
                        skipped.append(f"{view.ref.fqn}: not checked, it reads {ref.fqn}, which was not checked")
        return skipped

    def _functions_of(self, view: MaterializedView) -> list[str]:
        """The SQL functions of the DDL an MV calls, directly or through the functions and plain views it reads."""
        functions = self.project.functions
        found, queue = [], [*view.functions]
        queue += [
            f for r in view.source_refs if r in self.project.plain_views for f in self.project.plain_views[r].functions
        ]
        while queue:
            name = queue.pop()
            if name in functions and name not in found:
                found.append(name)
                queue += list(functions[name].functions)
        return found

    def _functions_called(self) -> set[str]:
        return {f for v in self.views for f in self._functions_of(v)}

    def _read_by_views(self, refs: set[ObjectRef]) -> set[ObjectRef]:
        """What the plain views among ``refs`` read, and what those read, to build them in the scratch database."""
        plain, found, queue = self.project.plain_views, set(), [r for r in refs if r in self.project.plain_views]
        while queue:
            for source in plain[queue.pop()].reads:
                if source not in refs and source not in found:
                    found.add(source)
                    if source in plain:
                        queue.append(source)
        return found

    # -- running ------------------------------------------------------------------------------------

    def check(self) -> list[DDLProblem]:
        self._refreshable_homes()
        self.drop_scratch()
        for database in self.scratch.values():
            self._run(f"CREATE DATABASE {quote(database)} ENGINE = Atomic")
        order = {n: i for i, layer in enumerate(self.graph.layers) for n in layer}
        dictionaries = self.project.dictionaries
        checked = {v.ref for v in self.views}  # an MV read by another is created as an MV, its inner table with it
        tables = sorted((r for r in self.tables if r not in checked), key=lambda r: (order.get(r.fqn, 0), r.fqn))
        table = self.project.tables.get
        late = [r for r in tables if (t := table(r)) is not None and any(s in dictionaries for s in t.reads)]
        for ref in tables:
            if ref not in late:
                self._table(ref)
        for ref in sorted(self.dictionaries, key=lambda r: r.fqn):
            dictionary = dictionaries[ref]
            self._try(
                ref, dictionary.location, databases_renamed(renamed_statement(dictionary, self.names), self.scratch)
            )
        for ref in late:  # a Dictionary(d) table: after its dictionary
            self._table(ref)
        for view in sorted(self.views, key=lambda v: (order.get(v.ref.fqn, 0), v.ref.fqn)):  # what an MV reads first
            self._view(view)
        for ref, clauses in self.alters:
            self._alter(ref, clauses)
        return self.problems

    def _refreshable_homes(self) -> None:
        """A refreshable MV that replaces its rows (not APPEND) lives in an Atomic or Replicated database: the server
        refuses it in any other (the embedded engine's ``default`` is one, an ``Overlay``). The scratch databases are
        Atomic, so it is checked here against the database it goes into: the live one, or the DDL's CREATE DATABASE."""
        views = [v for v in self.views if v.refreshable and not _APPEND.search(v.refresh_schedule or "")]
        if not views:
            return
        live = {str(n): str(e) for n, e in self.client.query("SELECT name, engine FROM system.databases").result_rows}
        declared = {d.name: (d.engine or "Atomic").split("(")[0].strip() for d in self.project.databases}
        for view in views:
            database = view.ref.database
            engine = live.get(database) or declared.get(database)
            if engine is None or engine in ("Atomic", "Replicated"):
                continue
            self.failed.add(view.ref)
            loc = view.location
            embedded = " (the embedded engine's `default` database is one)" if engine == "Overlay" else ""
            self.problems.append(
                DDLProblem(
                    loc.file,
                    loc.line,
                    loc.column,
                    f"{view.ref.fqn}: the server would refuse it: refreshable materialized views (except with APPEND) "
                    f"only support Atomic and Replicated database engines, but database {database} has engine "
                    f"{engine}{embedded}",
                    "put the MV in a database of its own created with ENGINE = Atomic (CREATE DATABASE … ENGINE = "
                    "Atomic in the DDL directory), or make it REFRESH … APPEND TO a table",
                )
            )

    def drop_scratch(self) -> None:
        for database in self.scratch.values():
            self._run(f"DROP DATABASE IF EXISTS {quote(database)} SYNC")

    def _table(self, ref: ObjectRef) -> None:
        table = self.project.tables.get(ref)
        plain = self.project.plain_views.get(ref)
        if plain is not None:
            if not any(r in self.failed for r in plain.reads):
                self._try(ref, plain.location, renamed_statement(plain, self.names, local=True))
            return
        if (
            table is not None
            and table.engine is not None
            and (table.engine.is_stream or table.engine.name in REMOTE_ENGINES)
        ):
            # Never a second consumer of a stream (nor a connection to a remote system): a Null table of its columns.
            self._try(ref, table.location, null_stand_in_sql(table, qualified(self.names[ref])))
            return
        if table is not None:  # a database its engine names (Merge, Buffer…): the scratch one
            self._try(
                ref,
                table.location,
                databases_renamed(local_table_sql(table, self.names[ref], self.names), self.scratch),
            )
            return
        # Not defined in the DDL (external, or an MV's inner table): an empty table of the live one's columns, engine
        # Null (a copy of its engine could be one more consumer of a stream, or replica under the same Keeper path).
        if _existing(self.client, {ref}):
            self._try(ref, None, f"CREATE TABLE {qualified(self.names[ref])} AS {qualified(ref)} ENGINE = Null")

    def _view(self, view: MaterializedView) -> None:
        needs = [r for r in (view.target, *view.source_refs) if r is not None]
        if any(r in self.failed for r in needs):
            return  # the server already refused what it reads or writes; that problem is reported
        if not self._try(view.ref, view.location, renamed_statement(view, self.names, local=True)):
            return
        if view.target is None or view.refreshable or any(c.name.endswith("*") for c in view.output_columns):
            return  # a `SELECT *`: its columns are the source's, matched to the target's by the CREATE above
        # The SELECT's output must fit the target: the columns exist there and the types convert.
        select = renamed_select(view, self.names)
        columns = ", ".join(quote(c.name) for c in view.output_columns)
        self._try(
            view.ref,
            view.location,
            insert_sql(self.names[view.target], view, f"SELECT {columns} FROM ({select}) LIMIT 0"),
        )

    def _alter(self, ref: ObjectRef, clauses: tuple[str, ...]) -> None:
        clone = ObjectRef(database=self.scratch[ref.database], name=f"{CHMV_PREFIX}alter_{safe_name(ref.name)}")
        table = self.project.tables.get(ref)
        where = table.location if table is not None else None
        copy = (
            local_copy_sql(clone, ref, table)
            if table is not None
            else f"CREATE TABLE {qualified(clone)} AS {qualified(ref)}"
        )
        if not self._try(ref, where, copy):
            return
        self._try(ref, where, f"ALTER TABLE {qualified(clone)} {', '.join(clauses)}")

    def _try(self, ref: ObjectRef, location: SourceLocation | None, sql: str) -> bool:
        try:
            self._run(sql)
        except ClickHouseError as err:
            self.failed.add(ref)
            self.problems.append(self._problem(ref, location, err))
            return False
        return True

    def _run(self, sql: str) -> None:
        engine = engine_of(sql) if sql.lstrip()[:6].upper() == "CREATE" else None
        if engine in STREAM_ENGINES:  # a second consumer of the same group on a server; on chdb, a bricked engine
            raise ChmvError(f"chmv bug: the preflight was about to create a {engine} table: {sql[:200]}")
        self.count += 1
        self.client.command(check_statement(sql))

    def _problem(self, ref: ObjectRef, location: SourceLocation | None, err: Exception) -> DDLProblem:
        text = " ".join(str(err).split())
        match = _CODE.search(text)
        message = text[match.end() :] if match else text
        message = re.sub(r"\s*\(version [^)]*\)\.?$", "", message)
        for database, scratch in self.scratch.items():
            message = message.replace(quote(scratch), quote(database)).replace(scratch, database)
        code = named_code(err)
        hints = HINTS if ref in self.project.views else {**HINTS, **TABLE_HINTS}
        hint = _server_hint(message, hints.get(code, DEFAULT_HINT) if code else DEFAULT_HINT, self.project.twin)
        loc = location or SourceLocation(file=self.project.ddl_dir, line=1)
        line, column = loc.line, loc.column
        unknown = _UNKNOWN.search(message)
        view = self.project.views.get(ref)
        if unknown and view is not None:
            line, column = _position(view, unknown.group(1)) or (line, column)
        return DDLProblem(loc.file, line, column, f"{ref.fqn}: the server refused it: {message}", hint)


#: A sentence of the server's message that says what to do.
_SERVER_FIX = re.compile(r"(?:^|(?<=[.:;] ))((?:Add|Set|Use|Remove|Change|Specify|Enable|Disable|Try|Consider)\b[^.]*)")


def _server_hint(message: str, hint: str, twin: bool) -> str:
    """The server's own advice, quoted, before chmv's hint; on the embedded engine (the local twin), with the setting
    that a server older than the embedded engine does not need, what to set in chmv.toml (on a server, its own
    version decides)."""
    found = _SERVER_FIX.search(message)
    if found is not None:
        hint = f"the server says: {found.group(1).strip()}; {hint}"
    if twin and DIMENSIONS_SETTING in message:
        hint += (
            '; a server older than 26.9 accepts this table: set server_version (its version, e.g. "24.8") in '
            "chmv.toml and the embedded engine accepts what that server accepts"
        )
    return hint


def _position(view: MaterializedView, identifier: str) -> tuple[int, int] | None:
    """File line and column of the first token of the MV's SELECT spelling ``identifier`` (the unknown column)."""
    try:
        tokens = tokenize(view.select_sql)
    except TokenError:
        return None
    token = next((t for t in tokens if t.text == identifier and t.token_type == TokenType.VAR), None)
    if token is None:
        return None
    offset = view.select_offset + token.start
    line, column = line_col(view.statement, offset)
    loc = view.location
    return loc.line + line - 1, (loc.column + column - 1) if line == 1 else column
