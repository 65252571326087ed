"""Immutable models of a parsed DDL directory.

Every later stage (lineage, partitions, backfill SQL, checks, lint) reads these models; no stage parses
SQL text again. Executable SQL fragments are kept verbatim from the source files, with character spans
of the identifiers that later stages substitute, because a sqlglot round trip rewrites ClickHouse
functions (``toStartOfHour`` becomes ``dateTrunc``) and may change result types.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.types import ClickHouseType, nested_fields, parse_type
from chmv_assets.errors import DDLProblem


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


#: Databases every server has (its own tables): never defined in the DDL nor declared external.
SERVER_DATABASES = frozenset({"system", "information_schema", "INFORMATION_SCHEMA"})


class ObjectRef(_Frozen):
    """A database object, by its exact (unquoted) database and name."""

    database: str
    name: str

    @property
    def fqn(self) -> str:
        """``database.name``, unquoted, as used in JSON output and asset keys."""
        return f"{self.database}.{self.name}"

    def __str__(self) -> str:
        return self.fqn

    # Refs key every mapping of a project: compare and hash the two strings, not through pydantic.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ObjectRef):
            return NotImplemented
        return self.database == other.database and self.name == other.name

    def __hash__(self) -> int:
        return hash((self.database, self.name))


class SourceLocation(_Frozen):
    """Where a statement starts in the DDL directory."""

    file: str
    line: int
    column: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class Span(_Frozen):
    """A half-open character range ``[start, end)`` inside a verbatim SQL fragment."""

    start: int
    end: int


class Fragment(_Frozen):
    """A verbatim SQL fragment with the spans of the identifiers it references.

    Attributes:
        sql: The text exactly as written in the DDL file.
        column_spans: For each column name referenced in ``sql``, the spans where it occurs.
    """

    sql: str
    column_spans: tuple[tuple[str, tuple[Span, ...]], ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        """The column names the fragment references."""
        return tuple(name for name, _ in self.column_spans)

    def substitute(self, replacements: Mapping[str, str]) -> str:
        """Return the fragment with every reference to a column replaced by a parenthesized SQL text.

        Args:
            replacements: Column name to replacement SQL. Columns not named are left as written.
        """
        edits = sorted(
            (span, f"({replacements[name]})")
            for name, spans in self.column_spans
            if name in replacements
            for span in spans
        )
        return splice(self.sql, [(span.start, span.end, text) for span, text in edits])


def splice(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Replace non-overlapping ``[start, end)`` ranges of ``text``; ranges may come in any order."""
    out, cursor = [], 0
    for start, end, replacement in sorted(edits):
        out.append(text[cursor:start])
        out.append(replacement)
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


class Column(_Frozen):
    """A column of a table, dictionary or inner MV table."""

    name: str
    type: str
    default_kind: str | None = None
    default_expression: str | None = None
    comment: str | None = None
    definition: str | None = None
    """The column definition exactly as written (``a UInt32 DEFAULT 0 COMMENT 'x'``): what ``ADD COLUMN`` runs."""

    @property
    def data_type(self) -> ClickHouseType:
        """The parsed type (:mod:`chmv_assets.ddl.types`); ``type`` keeps the spelling used in DDL output."""
        return parse_type(self.type)


def stored_columns(columns: tuple[Column, ...]) -> tuple[Column, ...]:
    """The columns as the server stores and lists them: a ``Nested`` column as one ``name.field Array(T)`` column per
    field (``flatten_nested``, the default; their definitions are the Nested column's, not theirs)."""
    found: list[Column] = []
    for column in columns:
        fields = nested_fields(column.type)
        if fields is None:
            found.append(column)
        else:
            found += [Column(name=f"{column.name}.{name}", type=f"Array({type_})") for name, type_ in fields]
    return tuple(found)


#: Engines that consume a stream (a broker, a queue, a directory of files): every SELECT from such a table consumes
#: messages that its consumer MV then never sees, and a second table of the same settings is a second consumer of the
#: same group. chmv never reads them (parity, coverage, rebuilds, the preflight); the table a consumer MV writes into is
#: the source that can be read.
STREAM_ENGINES = frozenset({"Kafka", "RabbitMQ", "NATS", "S3Queue", "AzureQueue", "FileLog", "RedisStreams", "MQTT"})


class Engine(_Frozen):
    """A table engine with its arguments as written.

    Attributes:
        argument_columns: The column names the arguments reference, in written order (the summed
            columns of ``SummingMergeTree((a, b))``, the version column of ``ReplacingMergeTree(v)``).
    """

    name: str
    arguments: tuple[str, ...] = ()
    argument_columns: tuple[str, ...] = ()
    keeper_path: str | None = None
    """A ``Replicated*`` engine's Keeper path when written as its first argument (the string's value: macros such
    as ``{shard}`` unexpanded); None for other engines and for the server's default path (no arguments)."""
    replica_name: str | None = None
    """The replica name written as the second argument (``{replica}``), with ``keeper_path``."""

    @property
    def replicated(self) -> bool:
        """A ``Replicated*`` engine: its data lives on every replica registered under one Keeper path."""
        return self.name.startswith("Replicated")

    @property
    def family_arguments(self) -> tuple[str, ...]:
        """The arguments of the engine itself, after the Keeper path and replica name when written
        (``ver`` of ``ReplicatedReplacingMergeTree('/p', '{replica}', ver)``), in their positions."""
        return self.arguments[2:] if self.keeper_path is not None else self.arguments

    @property
    def family(self) -> str:
        """The MergeTree family member without the Replicated/Shared prefix (``AggregatingMergeTree``)."""
        for prefix in ("Replicated", "Shared"):
            if self.name.startswith(prefix) and self.name != prefix + "MergeTree":
                return self.name[len(prefix) :]
        return self.name.replace("Replicated", "").replace("Shared", "") or self.name

    @property
    def is_stream(self) -> bool:
        """A stream engine (:data:`STREAM_ENGINES`): reading the table consumes messages."""
        return self.name in STREAM_ENGINES


class Database(_Frozen):
    """A ``CREATE DATABASE`` statement."""

    name: str
    engine: str | None = None
    statement: str
    location: SourceLocation


class PartitionCall(_Frozen):
    """A PARTITION BY (or one element of a tuple PARTITION BY) that is one function of one column (``toYYYYMM(ts)``),
    such a function with constant arguments (``toStartOfInterval(ts, INTERVAL 6 HOUR)``, ``toStartOfWeek(d, 1)``,
    ``intDiv(toUnixTimestamp(ts), 3600)``) or one bare column.

    Attributes:
        function: The function as written in ClickHouse (``toYYYYMM``), None for a bare column.
        column: The column it reads.
        arguments: Its constant arguments after the column, as written (``("6 HOUR",)`` for an interval,
            ``("3600",)``, ``("1",)``).
        inner: A one-argument function the column goes through first (``toUnixTimestamp`` of
            ``intDiv(toUnixTimestamp(ts), 3600)``), None when the column is the function's own argument.
    """

    function: str | None
    column: str
    arguments: tuple[str, ...] = ()
    inner: str | None = None


class PartitionElement(_Frozen):
    """One element of a PARTITION BY: the whole expression, or one item of a tuple (``(toYYYYMM(day), region)``).

    Attributes:
        span: Where the element is in :attr:`Table.partition_by`'s text.
        call: The element as a function of one column or a bare column (:class:`PartitionCall`), None for any other
            expression (``cityHash64(k) % 4``).
    """

    span: Span
    call: PartitionCall | None = None


class TtlAction(StrEnum):
    """What a table TTL rule does to the rows whose time has come."""

    DELETE = "delete"
    """The rows are deleted (the default action)."""
    GROUP_BY = "group_by"
    """The rows are rolled up (``GROUP BY … SET …``): the originals are gone."""
    MOVE = "move"
    """The rows move to another disk or volume: still there."""
    RECOMPRESS = "recompress"
    """The rows are recompressed: still there."""

    @property
    def removes_rows(self) -> bool:
        return self in (TtlAction.DELETE, TtlAction.GROUP_BY)


class TtlRule(_Frozen):
    """One rule of a table's TTL clause, parsed at load time (column TTLs only reset values: not rules here).

    A row's time has come when ``f(column) + interval <= now()``.

    Attributes:
        expression: The rule's time expression as sqlglot renders it, for display only (never executed).
        column: The one column the time expression reads, when it is ``column``, ``column + interval`` or
            ``f(column) + interval`` with ``f`` a monotone truncation (``toDate``, ``toStartOfHour``…); else None.
        truncation: The grain of ``f`` (``toDate`` → day), None for the bare column.
        interval: ``(count, unit)`` of a constant interval (``(90, "DAY")``; a bare number added to a
            DateTime counts seconds, to a Date days), None when the expression is not of that form.
        action: What happens to the rows.
        condition: The ``WHERE`` of a conditional rule (sqlglot rendering): only matching rows are affected.
    """

    expression: str
    column: str | None = None
    truncation: Grain | None = None
    interval: tuple[int, str] | None = None
    action: TtlAction = TtlAction.DELETE
    condition: str | None = None


class Table(_Frozen):
    """A ``CREATE TABLE`` statement (or the implicit inner table of an MV without ``TO``).

    Clauses are kept verbatim for execution (``order_by``, ``settings``, ``partition_by``); what the
    checks and sensors read from them is derived from the parsed clause at parse time.

    Attributes:
        partition_call: The PARTITION BY as a function of one column, None for any other expression (a tuple too).
        partition_elements: The PARTITION BY's elements: one, or the items of a tuple (``(toYYYYMM(day), region)``,
            ``tuple(…)``), in written order; empty without a PARTITION BY.
        order_by_columns: The columns the ORDER BY (sorting key) reads, in written order.
        settings_map: The table's ``SETTINGS name = value`` pairs, values unquoted.
        ttl: The table TTL clause, verbatim (for display and metadata).
        ttl_rules: The table TTL clause, parsed: one rule per comma-separated expression.
    """

    ref: ObjectRef
    columns: tuple[Column, ...]
    engine: Engine | None
    partition_by: Fragment | None = None
    partition_call: PartitionCall | None = None
    partition_elements: tuple[PartitionElement, ...] = ()
    order_by: str | None = None
    order_by_columns: tuple[str, ...] = ()
    primary_key: str | None = None
    ttl: str | None = None
    ttl_rules: tuple[TtlRule, ...] = ()
    settings: str | None = None
    settings_map: tuple[tuple[str, str], ...] = ()
    on_cluster: str | None = None
    description: str | None = None
    statement: str
    location: SourceLocation
    name_span: Span | None = Field(default=None, description="Span of the table's name in ``statement``.")
    cluster_span: Span | None = Field(
        default=None,
        description="Span of `` ON CLUSTER name`` in ``statement`` (the space before it included), None without one.",
    )
    keeper_path_span: Span | None = Field(
        default=None,
        description="Span of the Keeper path literal (quotes included) of a ``Replicated*`` engine in ``statement``.",
    )
    as_table: ObjectRef | None = Field(
        default=None, description="The table whose structure ``CREATE TABLE t AS other`` copies (None without one)."
    )
    as_table_span: Span | None = Field(default=None, description="Span of ``as_table``'s name in ``statement``.")
    reads: tuple[ObjectRef, ...] = Field(
        default=(),
        description="Tables its engine reads or writes through: a Distributed's or a Buffer's table, a Merge's tables "
        "of the DDL whose names match, a Dictionary engine's dictionary.",
    )

    def column(self, name: str) -> Column | None:
        """The column called ``name``, or None."""
        return next((c for c in self.columns if c.name == name), None)

    def setting(self, name: str) -> str | None:
        """The value of the table setting ``name`` from its SETTINGS clause, or None."""
        return next((value for key, value in self.settings_map if key == name), None)

    @property
    def row_retention(self) -> tuple[TtlRule, ...]:
        """The TTL rules that remove rows (delete or roll up), in written order."""
        return tuple(rule for rule in self.ttl_rules if rule.action.removes_rows)


class Dictionary(_Frozen):
    """A ``CREATE DICTIONARY`` statement and the table it loads from, when it is a ClickHouse table."""

    ref: ObjectRef
    columns: tuple[Column, ...]
    source_table: ObjectRef | None = None
    primary_key: str | None = None
    description: str | None = None
    statement: str
    location: SourceLocation
    name_span: Span | None = Field(default=None, description="Span of the dictionary's name in ``statement``.")


class SourceRole(StrEnum):
    """How an MV reads a source table."""

    TRIGGER = "trigger"
    """The left-most FROM table: its insert blocks fire the MV, and only the block is visible."""
    READ_WHOLE = "read_whole"
    """Joined or looked up (JOIN, IN-subquery, scalar subquery): read in full at every insert."""
    UNION_BRANCH = "union_branch"
    """The left-most FROM table of another UNION ALL branch."""


class SourceUse(_Frozen):
    """A real table that the MV's SELECT reads, and where it is named in the SELECT text."""

    ref: ObjectRef
    role: SourceRole
    spans: tuple[Span, ...] = Field(default=(), description="Spans of the table name in select_sql.")
    has_alias: tuple[bool, ...] = ()
    block: tuple[bool, ...] = Field(
        default=(),
        description="Per span: the insert block stands here (left-most FROM of the query or a UNION branch). "
        "Other mentions (a JOIN or subquery on the same table) read the whole table, as in ClickHouse.",
    )


class AggregateCall(_Frozen):
    """An aggregate function call in the MV's SELECT list."""

    output: str
    function: str
    base: str
    combinators: tuple[str, ...] = ()

    @property
    def is_state(self) -> bool:
        return bool(self.combinators) and self.combinators[-1] == "State"


class OutputColumn(_Frozen):
    """A column of the MV's SELECT list.

    Attributes:
        name: Output name (alias, or the column name for a bare column).
        expression: sqlglot rendering, for display and lineage only; never executed.
        source_columns: ``(table fqn, column)`` pairs the expression reads, where derivable.
        truncation: For range pruning, ``(source column, granularity)`` when the expression is a
            monotone truncation of one trigger column (``toStartOfHour(ts)`` → ``("ts", "hour")``,
            a bare column → ``(col, None)``).
        is_aggregate: The expression contains an aggregate function.
    """

    name: str
    expression: str
    source_columns: tuple[tuple[str, str], ...] = ()
    truncation: tuple[str, Grain | None] | None = None
    is_aggregate: bool = False


class MaterializedView(_Frozen):
    """A ``CREATE MATERIALIZED VIEW`` statement.

    Attributes:
        target: The ``TO`` table, or None for an MV that owns an inner table.
        inner_table: The implicit inner table (engine, PARTITION BY …) when ``target`` is None.
        select_sql: The SELECT text exactly as written: the only SQL chmv ever executes for this MV.
        sources: Every real table the SELECT reads, with its role and spans in ``select_sql``.
        trigger: The insert trigger (left-most FROM table), if any.
    """

    ref: ObjectRef
    target: ObjectRef | None
    inner_table: Table | None = None
    refreshable: bool = False
    refresh_schedule: str | None = None
    depends_on: tuple[ObjectRef, ...] = Field(
        default=(),
        description="What a refreshable MV's ``REFRESH … DEPENDS ON`` names (other refreshable MVs, as the server "
        "resolves them: unqualified names against the default database): it refreshes after them.",
    )
    populate: bool = False
    on_cluster: str | None = None
    sources: tuple[SourceUse, ...] = ()
    trigger: ObjectRef | None = None
    dictionaries: tuple[ObjectRef, ...] = ()
    group_by: tuple[str, ...] = ()
    aggregates: tuple[AggregateCall, ...] = ()
    output_columns: tuple[OutputColumn, ...] = ()
    has_join: bool = False
    joined_tables: tuple[ObjectRef, ...] = ()
    self_join: bool = False
    has_order_by: bool = False
    functions: tuple[str, ...] = Field(default=(), description="Every function the SELECT calls, as written.")
    select_sql: str
    select_at: int | None = Field(
        default=None,
        description="Where ``select_sql`` starts in ``statement`` when "
        "something follows it there (a trailing ``COMMENT``); None: it ends the statement.",
    )
    description: str | None = None
    statement: str
    location: SourceLocation
    or_replace: bool = False
    name_span: Span | None = Field(default=None, description="Span of the MV's name in ``statement``.")
    target_span: Span | None = Field(default=None, description="Span of the TO target's name in ``statement``.")
    cluster_span: Span | None = Field(
        default=None,
        description="Span of `` ON CLUSTER name`` in ``statement`` (the space before it included), None without one.",
    )

    @property
    def select_offset(self) -> int:
        """Where ``select_sql`` starts in ``statement`` (source spans are relative to ``select_sql``)."""
        return self.select_at if self.select_at is not None else len(self.statement) - len(self.select_sql)

    @property
    def writes_to(self) -> ObjectRef:
        """The table the MV writes to: its TO target, or the MV itself for an inner table."""
        return self.target or self.ref

    @property
    def appends(self) -> bool:
        """A refreshable MV with ``APPEND``: each refresh adds what its SELECT yields then to the target (which keeps
        every refresh's rows: its history is not what the SELECT yields now), instead of replacing it."""
        return self.refreshable and "APPEND" in (self.refresh_schedule or "").upper().split()

    @property
    def source_refs(self) -> tuple[ObjectRef, ...]:
        """Distinct source tables in order of first use."""
        return tuple(dict.fromkeys(s.ref for s in self.sources))

    def output(self, name: str) -> OutputColumn | None:
        return next((c for c in self.output_columns if c.name == name), None)


class KeptKind(StrEnum):
    """Kinds of statements chmv keeps verbatim without modelling them (docs/any-schema.md)."""

    FUNCTION = "function"
    VIEW = "view"
    """A plain (not materialized) view: read at query time."""
    NAMED_COLLECTION = "named collection"
    SETTINGS_PROFILE = "settings profile"
    ROLE = "role"
    USER = "user"
    QUOTA = "quota"
    ROW_POLICY = "row policy"
    MASKING_POLICY = "masking policy"
    GRANT = "grant"
    WORKLOAD = "workload"
    RESOURCE = "resource"

    @property
    def access_control(self) -> bool:
        """Users, roles and what is granted to them: the server's access control."""
        return self in _ACCESS_CONTROL

    @property
    def keyword(self) -> str:
        """The words after CREATE (``ROW POLICY``), or ``GRANT``."""
        return self.value.upper()

    @property
    def deploy_rank(self) -> int:
        """Order of deployment among kinds (a role before a user granted it, a function before a view calling it):
        negative ranks come before the databases and tables, positive ones after the MVs."""
        return _DEPLOY_RANK[self]


_ACCESS_CONTROL = frozenset(
    {
        KeptKind.SETTINGS_PROFILE,
        KeptKind.ROLE,
        KeptKind.USER,
        KeptKind.QUOTA,
        KeptKind.ROW_POLICY,
        KeptKind.MASKING_POLICY,
        KeptKind.GRANT,
    }
)
_DEPLOY_RANK = {
    KeptKind.NAMED_COLLECTION: -3,
    KeptKind.WORKLOAD: -3,
    KeptKind.RESOURCE: -3,
    KeptKind.FUNCTION: -2,
    KeptKind.VIEW: 0,
    KeptKind.SETTINGS_PROFILE: 1,
    KeptKind.ROLE: 2,
    KeptKind.USER: 3,
    KeptKind.QUOTA: 4,
    KeptKind.ROW_POLICY: 5,
    KeptKind.MASKING_POLICY: 5,
    KeptKind.GRANT: 6,
}


class KeptObject(_Frozen):
    """A statement chmv does not model, kept as written: deployed in dependency order, created when missing, reported
    when it differs from the server (docs/any-schema.md, "Statements chmv keeps as written").

    Attributes:
        kind: What it creates.
        name: Its identity within its kind: a function's name, a view's ``db.name``, a row policy's ``p ON db.t``,
            the names of the users or roles it creates, a grant's text on one line.
        names: The entities it creates (``CREATE ROLE a, b`` creates two); a grant: its grantees.
        ref: A view's ``database.name`` (a database object that SELECTs may read); None for the other kinds.
        reads: The tables and views it reads or names: a view's sources, a row policy's tables, a grant's tables.
        functions: The functions it calls (a view's SELECT, a function's body), as written.
        sources: A view's sources with their spans in ``select_sql`` (renamed like an MV's for the preflight).
        select_sql: A view's SELECT, verbatim.
        select_at: Where ``select_sql`` starts in ``statement``.
    """

    kind: KeptKind
    name: str
    names: tuple[str, ...] = ()
    ref: ObjectRef | None = None
    reads: tuple[ObjectRef, ...] = ()
    functions: tuple[str, ...] = ()
    sources: tuple[SourceUse, ...] = ()
    select_sql: str | None = None
    select_at: int | None = None
    on_cluster: str | None = None
    description: str | None = None
    statement: str
    location: SourceLocation
    name_span: Span | None = None
    cluster_span: Span | None = Field(
        default=None, description="Span of `` ON CLUSTER name`` in ``statement``, None without one."
    )

    @property
    def label(self) -> str:
        """``function normalize_url``, ``view shop.v``: how plans and errors name it."""
        return f"{self.kind} {self.name}"


#: The model of one CREATE statement (:func:`chmv_assets.ddl.parsing.statements.parse_statement`).
StatementModel = Table | Dictionary | MaterializedView | Database | KeptObject


class StandIn(_Frozen):
    """What the local twin runs in place of a production object (:mod:`chmv_assets.ddl.twin`).

    Attributes:
        object: The object (``shop.orders_queue``, ``function f``, ``role reader``).
        production: What the DDL says (``Kafka``, ``ReplicatedMergeTree('/p', '{replica}')``, ``ON CLUSTER main``).
        local: What the embedded engine gets instead (``Null table …``), or ``not deployed``.
        why: What the stand-in is for, or why it is needed.
    """

    object: str
    production: str
    local: str
    why: str = ""

    def __str__(self) -> str:
        return f"{self.object}: {self.production} → {self.local}" + (f" ({self.why})" if self.why else "")


class TriggerLoop(_Frozen):
    """MVs that fire, directly or through a chain, on what they write: a real loop of trigger edges (an insert into
    any of its tables fires them again; the server refuses every insert into it, ``TOO_DEEP_RECURSION``).

    The loader leaves its MVs out of :attr:`Project.views` (nothing deploys, rebuilds or watches them) and keeps them
    here, for lineage to mark, the lifecycle plan to refuse and the definitions to name; everything else loads.

    Attributes:
        cycle: One cycle through the loop in data-flow order (``db.a -> db.mv -> db.b -> … -> db.a``), the first node
            repeated at the end.
        views: Every MV of the loop (of its strongly connected part of the graph), in file order.
    """

    cycle: tuple[str, ...]
    views: tuple[MaterializedView, ...]

    @property
    def refs(self) -> tuple[ObjectRef, ...]:
        return tuple(v.ref for v in self.views)

    def problem(self) -> DDLProblem:
        """The loop as one problem: the cycle and each MV at its ``file:line``, at the first MV's position."""
        loc = self.views[0].location
        where = ", ".join(f"{v.ref.fqn} at {Path(v.location.file).name}:{v.location.line}" for v in self.views)
        return DDLProblem(
            loc.file,
            loc.line,
            loc.column,
            "cycle in the MV graph: " + " -> ".join(self.cycle) + f" (a trigger loop: {where})",
            "an MV must not fire, directly or through a chain, on the table it writes (the server refuses every "
            "insert into such a loop: TOO_DEEP_RECURSION); read that table through JOIN or IN instead (a read never "
            "fires it), or break the loop. chmv leaves the loop's MVs out (not deployed, no assets) and loads the rest",
        )


class Project(_Frozen):
    """A parsed DDL directory: every object by reference, and the configuration it was read with.

    Attributes:
        twin: The local twin of the directory (:mod:`chmv_assets.ddl.twin`): what the embedded engine runs, with
            ``stand_ins`` for what needs a cluster, Keeper or a remote system. False: the DDL as written (a server).
    """

    ddl_dir: str
    default_database: str
    databases: tuple[Database, ...] = ()
    tables: Mapping[ObjectRef, Table] = Field(default_factory=dict)
    dictionaries: Mapping[ObjectRef, Dictionary] = Field(default_factory=dict)
    views: Mapping[ObjectRef, MaterializedView] = Field(default_factory=dict)
    kept: tuple[KeptObject, ...] = Field(default=(), description="Statements chmv keeps as written, in file order.")
    external: tuple[ObjectRef, ...] = ()
    extra: Mapping[str, Any] = Field(default_factory=dict)
    twin: bool = False
    stand_ins: tuple[StandIn, ...] = ()
    loops: tuple[TriggerLoop, ...] = Field(
        default=(),
        description="Trigger loops of the DDL: their MVs are not in ``views`` (see :class:`TriggerLoop`).",
    )

    @cached_property
    def loop_views(self) -> dict[ObjectRef, MaterializedView]:
        """The MVs left out of ``views`` because they are part of a trigger loop, by reference."""
        return {v.ref: v for loop in self.loops for v in loop.views}

    def table(self, ref: ObjectRef) -> Table | None:
        """The table (or inner MV table) that holds ``ref``'s rows."""
        if ref in self.tables:
            return self.tables[ref]
        view = self.views.get(ref)
        return view.inner_table if view else None

    @cached_property
    def plain_views(self) -> dict[ObjectRef, KeptObject]:
        """The plain views, by ``database.name``."""
        return {k.ref: k for k in self.kept if k.kind == KeptKind.VIEW and k.ref is not None}

    @cached_property
    def functions(self) -> dict[str, KeptObject]:
        """The SQL functions (``CREATE FUNCTION``), by name."""
        return {k.name: k for k in self.kept if k.kind == KeptKind.FUNCTION}

    def is_stream(self, ref: ObjectRef) -> bool:
        """``ref`` is a table of a stream engine (Kafka, RabbitMQ, NATS, S3Queue, …): never read it."""
        table = self.tables.get(ref)
        return table is not None and table.engine is not None and table.engine.is_stream

    def views_into(self, target: ObjectRef) -> tuple[MaterializedView, ...]:
        """Insert-triggered and refreshable MVs writing into ``target`` (several for a fan-in)."""
        return self._views_by_target.get(target, ())

    def views_from(self, source: ObjectRef) -> tuple[MaterializedView, ...]:
        """MVs triggered by inserts into ``source``."""
        return self._views_by_trigger.get(source, ())

    @cached_property
    def _views_by_target(self) -> dict[ObjectRef, tuple[MaterializedView, ...]]:
        index: dict[ObjectRef, list[MaterializedView]] = {}
        for view in self.views.values():
            index.setdefault(view.writes_to, []).append(view)
        return {ref: tuple(views) for ref, views in index.items()}

    @cached_property
    def _views_by_trigger(self) -> dict[ObjectRef, tuple[MaterializedView, ...]]:
        index: dict[ObjectRef, list[MaterializedView]] = {}
        for view in self.views.values():
            if view.trigger is not None:
                index.setdefault(view.trigger, []).append(view)
        return {ref: tuple(views) for ref, views in index.items()}

    @cached_property
    def targets(self) -> tuple[ObjectRef, ...]:
        """Every table an MV writes to, in definition order, each once."""
        return tuple(self._views_by_target)

    def target_named(self, fqn: str) -> ObjectRef | None:
        """The MV target whose ``database.name`` is ``fqn`` (lineage nodes are named so), or None."""
        return self._targets_by_fqn.get(fqn)

    @cached_property
    def _targets_by_fqn(self) -> dict[str, ObjectRef]:
        return {t.fqn: t for t in self.targets}
