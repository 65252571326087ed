"""The lifecycle planner: diff the DDL directory against the live server into a :class:`LifecyclePlan`.

Reads the server in a handful of queries whatever the number of objects (:func:`read_state`: databases,
``system.tables``, ``system.columns``, ``system.parts``, and the server's own formatting of every repo
statement and SELECT in one round trip), then decides per object, in topological order (seed 003), what
``chmv apply`` will do (see :mod:`chmv_assets.engine.lifecycle.plan`). Nothing is changed on the server.

A table whose formatted statement equals the live one is unchanged without being parsed again; only
tables that differ are parsed on both sides and compared clause by clause
(:mod:`chmv_assets.engine.lifecycle.table_diff`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import Dictionary, KeptKind, KeptObject, MaterializedView, ObjectRef, Table
from chmv_assets.ddl.names import safe_name
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.partitioning import (
    PartitionScheme,
    PartitionWindow,
    TargetPartitioning,
    target_reach,
)
from chmv_assets.engine.catalog import KeptState, existing_objects, read_kept
from chmv_assets.engine.clock import calendar_mismatch, session_zone
from chmv_assets.engine.drift import (
    LiveObject,
    describe_foreign,
    foreign_writers,
    format_queries,
    read_live,
    select_changed,
    select_diff,
)
from chmv_assets.engine.lifecycle import journal
from chmv_assets.engine.lifecycle.plan import (
    ACCESS_LAYER,
    CHMV_PREFIX,
    Action,
    Change,
    LifecyclePlan,
    PartitionEstimate,
    Rederive,
)
from chmv_assets.engine.lifecycle.refusals import refused_views
from chmv_assets.engine.lifecycle.table_diff import TableDiff, diff_table, same_text
from chmv_assets.engine.parts import read_partitions
from chmv_assets.engine.rebuild.planner import (
    Observations,
    downstream_targets,
    feedback_cause,
    feedback_reads,
    observe,
    plan_rebuild,
    triggers_of,
)
from chmv_assets.errors import ChmvError, DDLError, ForeignRowsRefused
from chmv_assets.sql.cluster import (
    alter_table_sql,
    drop_view_sql,
    modify_query_sql,
    on_cluster,
    version_keeper_path,
)
from chmv_assets.sql.meta import APPLY_JOURNAL, LEGACY_WATERMARKS, META_DATABASE
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.rewrite import renamed_statement
from chmv_assets.sql.server_form import server_select

_EPOCH = datetime(1970, 1, 1)


def next_version_ref(ref: ObjectRef) -> ObjectRef:
    """The table (or MV) built beside ``ref`` for its new version: ``_chmv_next_<name>``, deterministic."""
    return ObjectRef(database=ref.database, name=f"{CHMV_PREFIX}next_{safe_name(ref.name.lstrip('.'))}")


def old_version_ref(ref: ObjectRef) -> ObjectRef:
    """Where the replaced version of ``ref`` is kept after the swap: ``_chmv_old_<name>``."""
    return ObjectRef(database=ref.database, name=f"{CHMV_PREFIX}old_{safe_name(ref.name.lstrip('.'))}")


@dataclass(frozen=True)
class PartStats:
    """Active parts of one partition: rows and the time range of the partition key (None if not a time)."""

    partition: str
    rows: int
    start: datetime | None
    end: datetime | None


@dataclass(frozen=True)
class ServerState:
    """What the planner reads from the server.

    Attributes:
        databases: Databases that exist.
        live: Objects of the project's databases.
        formatted: The server's single-line formatting of the repo statement of every table and dictionary
            that exists live.
        selects: The server's formatting of the repo SELECT of every MV and plain view that exists live.
        parts: Active parts per table, by partition.
        kept: What the server has of the functions, access control and named collections of the DDL.
        kept_formatted: The server's single-line formatting of their repo statements, by kind and name.
        foreign: Per target, the MVs on the server (any database) that write into it and that the DDL does not
            define (:func:`chmv_assets.engine.drift.foreign_writers`).
    """

    databases: frozenset[str]
    live: dict[ObjectRef, LiveObject]
    formatted: dict[ObjectRef, str | None] = field(default_factory=dict)
    selects: dict[ObjectRef, str | None] = field(default_factory=dict)
    parts: dict[ObjectRef, tuple[PartStats, ...]] = field(default_factory=dict)
    kept: KeptState = field(default_factory=KeptState)
    kept_formatted: dict[tuple[KeptKind, str], str | None] = field(default_factory=dict)
    foreign: dict[ObjectRef, tuple[ObjectRef, ...]] = field(default_factory=dict)

    def rows(self, ref: ObjectRef) -> int:
        return sum(p.rows for p in self.parts.get(ref, ()))


def project_databases(loaded: LoadedProject) -> set[str]:
    """Every database the DDL directory creates or puts an object in."""
    project = loaded.project
    refs = [*project.tables, *project.views, *project.dictionaries]
    return {d.name for d in project.databases} | {r.database for r in refs}


def read_state(client: Client, loaded: LoadedProject) -> ServerState:
    """Read the server once for a plan (six queries for any number of objects)."""
    project = loaded.project
    databases = frozenset(r[0] for r in client.query("SELECT name FROM system.databases").result_rows)
    wanted = project_databases(loaded) & databases
    live = read_live(client, wanted)
    tables = [t for r, t in project.tables.items() if r in live]
    dictionaries = [d for r, d in project.dictionaries.items() if r in live]
    views: list[MaterializedView | KeptObject] = [v for r, v in project.views.items() if r in live]
    views += [v for r, v in project.loop_views.items() if r in live]  # compared to refuse a change to them
    views += [v for r, v in project.plain_views.items() if r in live]
    others = [k for k in project.kept if k.kind != KeptKind.VIEW]
    kept = read_kept(client, others) if others else KeptState()
    modeled_objects: list[Table | Dictionary] = [*tables, *dictionaries]
    texts = [o.statement for o in (*modeled_objects, *others)]
    formatted_all = format_queries(client, texts, single_line=True) if texts else []
    selects_all = format_queries(client, [server_select(v, project) for v in views]) if views else []
    modeled = len(tables) + len(dictionaries)
    formatted = {o.ref: f for o, f in zip(modeled_objects, formatted_all[:modeled], strict=True)}
    kept_formatted = {(k.kind, k.name): f for k, f in zip(others, formatted_all[modeled:], strict=True)}
    selects = {v.ref: f for v, f in zip(views, selects_all, strict=True) if v.ref is not None}
    foreign = foreign_writers(client, project, project.targets)
    return ServerState(databases, live, formatted, selects, read_parts(client, wanted), kept, kept_formatted, foreign)


def read_parts(
    client: Client, databases: Iterable[str], tables: Iterable[ObjectRef] | None = None
) -> dict[ObjectRef, tuple[PartStats, ...]]:
    """Rows and partition-key time range of the active parts of every table in ``databases`` (or only of ``tables``
    of them), by partition (:func:`chmv_assets.engine.parts.read_partitions`, one query)."""
    databases = set(databases)
    if tables is None:
        found = read_partitions(client, databases=databases)
    else:
        found = read_partitions(
            client, sorted((t for t in set(tables) if t.database in databases), key=lambda r: r.fqn)
        )
    out: dict[ObjectRef, tuple[PartStats, ...]] = {}
    for ref, partitions in found.items():
        stats = [PartStats(p.value, p.rows, *(p.window() or (None, None))) for p in partitions]
        if stats:
            out[ref] = tuple(sorted(stats, key=lambda s: (s.start or _EPOCH, s.partition)))
    return out


def plan_lifecycle(
    client: Client, loaded: LoadedProject, *, allow_drop: bool = False, root: Path | None = None
) -> LifecyclePlan:
    """Diff the DDL directory against the server and plan; nothing is changed.

    Args:
        client: An open client.
        loaded: The parsed DDL directory.
        allow_drop: Plan drops of objects and columns the DDL no longer has (else they are notes).
        root: The landing zone, for the rebuild planner's engine choice per partition.

    Raises:
        DDLError: An MV chmv would have to create with POPULATE or OR REPLACE (with the reason and the fix).
    """
    return plan_from_state(read_state(client, loaded), loaded, client=client, allow_drop=allow_drop, root=root)


def plan_from_state(
    state: ServerState,
    loaded: LoadedProject,
    *,
    client: Client | None = None,
    allow_drop: bool = False,
    root: Path | None = None,
) -> LifecyclePlan:
    """The plan against a server state already read (:func:`read_state`), or written down (a snapshot of a cluster).

    Args:
        state: What the server has.
        loaded: The parsed DDL directory.
        client: Reads what a re-derivation needs (each partition's source rows, the target's oldest row); without
            one, ``state`` must hold no rows for the sources of a changed target.
        allow_drop: See :func:`plan_lifecycle`.
        root: See :func:`plan_lifecycle`.

    Raises:
        DDLError: As :func:`plan_lifecycle`.
        ChmvError: A re-derivation to plan and no client to read it with.
    """
    return _Planner(client, loaded, state, allow_drop, root).plan()


class _Planner:
    """One planning pass: the state read, the changes found so far."""

    def __init__(
        self, client: Client | None, loaded: LoadedProject, state: ServerState, allow_drop: bool, root: Path | None
    ):
        self._client = client
        self.loaded = loaded
        self.project = loaded.project
        self.state = state
        self.allow_drop = allow_drop
        self.root = root
        self.layer = loaded.graph.depth  # MV hops from the raw sources: sources 0, their targets 1, …
        self.changes: list[Change] = []
        self.notes: list[str] = []
        self.new_versions: dict[ObjectRef, Change] = {}
        self.rederived: set[ObjectRef] = set()
        self.live_tables: dict[ObjectRef, Table] = {}  # the server's CREATE of the tables compared, parsed

    @property
    def client(self) -> Client:
        if self._client is None:
            raise ChmvError("planning this re-derivation reads the server: plan with a client")
        return self._client

    # -- the pass -------------------------------------------------------------------------------------

    def plan(self) -> LifecyclePlan:
        self._databases()
        for ref, table in self.project.tables.items():
            self._table(ref, table, self.state.live.get(ref))
        for ref, dictionary in self.project.dictionaries.items():
            self._dictionary(ref, dictionary, self.state.live.get(ref))
        for ref, view in self.project.views.items():
            self._view(ref, view, self.state.live.get(ref))
        self._loops()
        for obj in self.project.kept:
            self._kept_statement(obj)
        self._finish_new_versions()
        self._downstream()
        self._unfinished()
        self._extras()
        self._refuse_unrunnable_views()
        changes = sorted(self.changes, key=self._position())
        if self._client is not None and (calendar := calendar_mismatch(self._client, self.loaded.config.timezone)):
            self.notes.append(f"timezone: {calendar}")
        findings = tuple(
            f"{t.fqn}: {describe_foreign(t, views)}"
            for t, views in sorted(self.state.foreign.items(), key=lambda kv: kv[0].fqn)
        )
        return LifecyclePlan(self.project.ddl_dir, tuple(changes), tuple(self.notes), self.allow_drop, findings)

    def _databases(self) -> None:
        """The databases of the DDL the server does not have are created."""
        for database in self.project.databases:
            if database.name not in self.state.databases:
                self.changes.append(
                    Change(
                        Action.CREATE_DATABASE,
                        ObjectRef(database=database.name, name=""),
                        "database",
                        -1,
                        statements=(database.statement,),
                        location=str(database.location),
                    )
                )

    def _dictionary(self, ref: ObjectRef, dictionary: Dictionary, live: LiveObject | None) -> None:
        """A dictionary is created when missing; one that differs from the server's is left to be replaced by hand."""
        if live is None:
            self.changes.append(
                Change(
                    Action.CREATE,
                    ref,
                    "dictionary",
                    self._layer(ref),
                    statements=(dictionary.statement,),
                    location=str(dictionary.location),
                )
            )
        elif not same_text(self.state.formatted.get(ref), live.create_query):
            self.changes.append(
                Change(
                    Action.MANUAL,
                    ref,
                    "dictionary",
                    self._layer(ref),
                    reasons=("the dictionary's definition differs from the server's",),
                    location=str(dictionary.location),
                    blocked="chmv does not change dictionaries: CREATE OR REPLACE DICTIONARY it by hand",
                )
            )

    def _refuse_unrunnable_views(self) -> None:
        """The MVs the plan creates or replaces that the server would refuse to run (raises :class:`DDLError`)."""
        refused = refused_views(
            self.project.views[c.ref]
            for c in self.changes
            if c.kind == "view" and c.action in (Action.CREATE, Action.RECREATE_VIEW)
        )
        refused += refused_views(self.project.views[v] for c in self.changes for v, _ in c.views)
        if refused:
            raise DDLError(refused)

    def _position(self) -> Callable[[Change], tuple]:
        """The order changes apply in: creations and changes layer by layer (databases, tables, dictionaries, views;
        within a layer what an object reads first), then the drops (the writers first, tables last)."""
        order = {a: i for i, a in enumerate(Action)}
        kinds = {"database": 0, "table": 1, "dictionary": 2, "plain view": 2.5, "view": 3}
        kinds |= {kept_change_kind(k): k.deploy_rank for k in KeptKind if k != KeptKind.VIEW}
        drops = {"view": 0, "column": 1, "dictionary": 2, "table": 3}  # stop the writers first, tables last

        topological = {n: i for i, layer in enumerate(self.loaded.graph.layers) for n in layer}
        project = self.project
        over_dictionaries = {r for r, t in project.tables.items() if any(s in project.dictionaries for s in t.reads)}

        def position(c: Change) -> tuple:
            if c.action == Action.DROP:
                return (1, drops.get(c.kind, 4), -c.layer, c.ref.fqn)
            # a Dictionary(d) table after its dictionary (both in the layer of what the dictionary loads)
            kind = 2.2 if c.kind == "table" and c.ref in over_dictionaries else kinds.get(c.kind, 4)
            # within a layer, what an object reads first (a Distributed after its local table, AS other after other)
            return (0, c.layer, kind, order[c.action], topological.get(c.ref.fqn, 0), c.ref.fqn)

        return position

    def _layer(self, ref: ObjectRef) -> int:
        view = self.project.views.get(ref)
        if view is not None:  # an MV is shown (and applied) with the table it writes
            layer = self.layer.get(view.writes_to.fqn, self.layer.get(ref.fqn, 0))
            # and after what it reads against the flow (its dedup or feedback reads): the server needs them to exist
            feedback = [self.layer.get(s, 0) for s, v in self.loaded.graph.feedback if v == ref.fqn]
            return max([layer, *feedback])
        return self.layer.get(ref.fqn, 0)

    # -- tables ---------------------------------------------------------------------------------------

    def _table(self, ref: ObjectRef, table: Table, live: LiveObject | None) -> None:
        location = str(table.location)
        if live is None:
            self.changes.append(
                Change(Action.CREATE, ref, "table", self._layer(ref), statements=(table.statement,), location=location)
            )
            return
        if table.engine is not None and table.engine.name == "View":
            return  # a plain view: its SELECT is read at query time, nothing to migrate
        if live.engine in ("MaterializedView", "View") or _is_dictionary(live):  # (a Dictionary(d) table is a table)
            self.changes.append(_another_kind(ref, "table", self._layer(ref), location, live.engine, "a table"))
            return
        formatted = self.state.formatted.get(ref)
        if same_text(formatted, live.create_query):
            return
        diff = self._diff(ref, table, formatted, live)
        if diff is None or diff.empty:
            return
        if diff.structural:
            self._structural(ref, diff, location)
            return
        if diff.in_place:
            self._in_place(ref, table, diff, location)
        for clause, reason in diff.drops:
            self._dropped_column(ref, table, clause, reason, location)

    def _structural(self, ref: ObjectRef, diff: TableDiff, location: str) -> None:
        """A change ``ALTER`` cannot make: a target written by MVs gets a new version re-derived from its sources;
        a source table is left to be migrated by hand."""
        if ref in set(self.project.targets) and self.project.views_into(ref):
            self.new_versions[ref] = Change(
                Action.NEW_VERSION,
                ref,
                "table",
                self._layer(ref),
                reasons=diff.structural + tuple(r for _, r in diff.in_place),
                location=location,
                next_ref=next_version_ref(ref),
            )
            return
        self.changes.append(
            Change(
                Action.MANUAL,
                ref,
                "table",
                self._layer(ref),
                reasons=diff.structural,
                location=location,
                blocked="a source table's rows cannot be re-derived from history: "
                "migrate it by hand (or make it the target of an MV)",
            )
        )

    def _in_place(self, ref: ObjectRef, table: Table, diff: TableDiff, location: str) -> None:
        """The changes one ``ALTER TABLE`` makes in place."""
        clauses = ", ".join(c for c, _ in diff.in_place)
        self.changes.append(
            Change(
                Action.ALTER,
                ref,
                "table",
                self._layer(ref),
                reasons=tuple(r for _, r in diff.in_place),
                statements=(alter_table_sql(ref, clauses, table.on_cluster),),
                location=location,
                clauses=tuple(c for c, _ in diff.in_place),
            )
        )

    def _dropped_column(self, ref: ObjectRef, table: Table, clause: str, reason: str, location: str) -> None:
        """A column the DDL no longer has: dropped with ``--allow-drop``, else kept (noted)."""
        if not self.allow_drop:
            self.notes.append(f"{ref.fqn}: {reason}; kept (--allow-drop drops it)")
            return
        self.changes.append(
            Change(
                Action.DROP,
                ref,
                "column",
                self._layer(ref),
                reasons=(reason,),
                statements=(alter_table_sql(ref, clause, table.on_cluster),),
                location=location,
                clauses=(clause,),
            )
        )

    def _diff(self, ref: ObjectRef, table: Table, formatted: str | None, live: LiveObject) -> TableDiff | None:
        try:
            repo_formatted = parse_statement(
                formatted or table.statement,
                default_database=ref.database,
                origin=f"{table.location} (formatted by the server)",
            )
            live_model = parse_statement(live.create_query, default_database=ref.database, origin=f"{ref.fqn} (server)")
        except DDLError as err:
            self.notes.append(f"{ref.fqn}: not compared ({err.problems[0].message if err.problems else err})")
            return None
        if not isinstance(repo_formatted, Table) or not isinstance(live_model, Table):
            return None
        if not repo_formatted.columns and table.as_table is not None:
            # `CREATE TABLE t AS other`: its columns are other's (compared there); the server lists them in t's CREATE
            repo_formatted = repo_formatted.model_copy(update={"columns": live_model.columns})
            table = table.model_copy(update={"columns": live_model.columns})
        self.live_tables[ref] = live_model
        return diff_table(table, repo_formatted, live_model)

    # -- views ----------------------------------------------------------------------------------------

    def _view(self, ref: ObjectRef, view: MaterializedView, live: LiveObject | None) -> None:
        location = str(view.location)
        target = view.writes_to
        if target in self.new_versions:
            return  # fed by its own copy beside the new version (_finish_new_versions)
        if live is None:
            change = Change(
                Action.CREATE, ref, "view", self._layer(ref), statements=(view.statement,), location=location
            )
            self.changes.append(self._with_rederive(change, target, why="new MV"))
            return
        if live.engine != "MaterializedView":
            self.changes.append(_another_kind(ref, "view", self._layer(ref), location, live.engine, "an MV"))
            return
        repo_select = self.state.selects.get(ref)
        changed = select_changed(repo_select or view.select_sql, live.select)
        diff = select_diff(repo_select or view.select_sql, live.select) if changed else ""
        statements: tuple[str, ...]
        if view.target is not None and live.target is not None and live.target != view.target:
            statements = (drop_view_sql(ref, view.on_cluster), view.statement)
            change = Change(
                Action.RECREATE_VIEW,
                ref,
                "view",
                self._layer(ref),
                location=location,
                diff=diff,
                reasons=(f"TO target {live.target.fqn} → {view.target.fqn}",),
                statements=statements,
            )
            self.changes.append(self._with_rederive(change, target, why="new TO target"))
        elif changed and view.refreshable:
            statements = (drop_view_sql(ref, view.on_cluster), view.statement)
            change = Change(
                Action.RECREATE_VIEW,
                ref,
                "view",
                self._layer(ref),
                location=location,
                diff=diff,
                reasons=("the SELECT of a refreshable MV changed",),
                statements=statements,
            )
            self.changes.append(self._with_rederive(change, target, why="SELECT changed"))
        elif changed:
            statements = (modify_query_sql(ref, view.select_sql, view.on_cluster),)
            change = Change(
                Action.MODIFY_QUERY,
                ref,
                "view",
                self._layer(ref),
                location=location,
                diff=diff,
                reasons=("the SELECT changed",),
                statements=statements,
            )
            self.changes.append(self._with_rederive(change, target, why="SELECT changed"))

    def _loops(self) -> None:
        """The MVs of each trigger loop (left out of the project, :class:`~chmv_assets.ddl.models.TriggerLoop`): a
        change that would create or change one is refused, alone (the apply makes every other change); a loop the
        server already runs is a note."""
        for loop in self.project.loops:
            blocked = (
                loop.problem().message + ": chmv never deploys a trigger loop; break it (read that table through JOIN "
                "or IN: a read never fires the MV) and apply again"
            )
            refused = 0
            for view in loop.views:
                live = self.state.live.get(view.ref)
                if live is None:
                    reason = "missing on the server: creating it would deploy the loop"
                elif (
                    live.engine != "MaterializedView"
                    or (view.target is not None and live.target != view.target)
                    or select_changed(self.state.selects.get(view.ref) or view.select_sql, live.select)
                ):
                    reason = "differs from the server's: changing it would deploy the loop"
                else:
                    continue
                refused += 1
                self.changes.append(
                    Change(
                        Action.REFUSED,
                        view.ref,
                        "view",
                        self.layer.get(view.writes_to.fqn, 0),
                        reasons=(reason,),
                        location=str(view.location),
                        blocked=blocked,
                    )
                )
            if not refused:
                self.notes.append(
                    f"{loop.views[0].ref.fqn}: the server runs the trigger loop {' -> '.join(loop.cycle)} as the DDL "
                    "defines it: every insert into it fails (TOO_DEEP_RECURSION); break it in the DDL"
                )

    def _finish_new_versions(self) -> None:
        """Each new version: its CREATE beside the target, a copy of every MV writing it, the re-derivation."""
        for ref, change in self.new_versions.items():
            table = self.project.tables[ref]
            assert change.next_ref is not None
            names = {ref: change.next_ref}
            pairs, reasons = [], list(change.reasons)
            for view in self.project.views_into(ref):
                beside = next_version_ref(view.ref)
                names[view.ref] = beside
                pairs.append((view.ref, beside))
                live = self.state.live.get(view.ref)
                if live is not None and select_changed(
                    self.state.selects.get(view.ref) or view.select_sql, live.select
                ):
                    reasons.append(f"the SELECT of {view.ref.fqn} changed")
            # Built ON CLUSTER where the DDL says so (the statement as written), under a Keeper path of its own.
            keeper_path = version_keeper_path(table, self.live_tables.get(ref))
            statements = [renamed_statement(table, names, keeper_path=keeper_path)]
            statements += [renamed_statement(self.project.views[v], names) for v, _ in pairs]
            new = Change(
                Action.NEW_VERSION,
                ref,
                "table",
                change.layer,
                reasons=tuple(reasons),
                statements=tuple(statements),
                location=change.location,
                views=tuple(pairs),
                next_ref=change.next_ref,
            )
            self.changes.append(self._with_rederive(new, ref, why="new version", writes=change.next_ref))

    def _downstream(self) -> None:
        """Targets reading a re-derived target (a chain): their partitions are re-derived too, in order."""
        changed = sorted(self.rederived, key=lambda r: self.layer.get(r.fqn, 0))
        for ref in changed:
            for down in downstream_targets(self.loaded, ref):
                if down in self.rederived or down in self.new_versions:
                    continue
                change = Change(
                    Action.REDERIVE,
                    down,
                    "table",
                    self._layer(down),
                    reasons=(f"it reads {ref.fqn}, whose rows change",),
                    location=str(self.project.tables[down].location) if down in self.project.tables else None,
                )
                change = self._with_rederive(change, down, why=f"upstream {ref.fqn} changed")
                if change.rederive is not None:
                    self.changes.append(change)

    def _unfinished(self) -> None:
        """The re-derivations an earlier apply started and did not finish (its journal): a target whose new SELECT
        is live while some of its partitions still hold rows of the old one is a pending change, with the partitions
        left, until an apply finishes it (unless this plan re-derives the target anyway)."""
        if self._client is None or not existing_objects(self._client, [APPLY_JOURNAL.ref, LEGACY_WATERMARKS]):
            return
        for entry in journal.unfinished(self._client):
            target = entry.target
            if entry.kind != "rederive" or target in self.rederived or target in self.new_versions:
                continue
            done = journal.rederived(self._client, target, entry.version)
            blocked: str | None
            try:
                rederive = self._rederive(target, None, new_version=False)
            except ChmvError as err:
                rederive, blocked = None, f"the history of {target.fqn} cannot be planned: {err}"
            else:
                blocked = self._foreign_block(target)
            left = ""
            if rederive is not None:
                steps = tuple(s for s in rederive.plan.steps if (s.key or "all") not in done)
                rederive = replace(
                    rederive,
                    plan=replace(rederive.plan, steps=steps),
                    partitions=tuple(p for p in rederive.partitions if (p.partition or "all") not in done),
                )
                keys = [s.key or "(whole table)" for s in steps]
                left = f"{len(keys)} partition{'s' if len(keys) != 1 else ''} left" + (
                    f" ({', '.join(keys[:8])}{f' and {len(keys) - 8} more' if len(keys) > 8 else ''})" if keys else ""
                )
            reason = (
                f"an earlier apply (plan {entry.plan_id}) put a new SELECT live and stopped before re-deriving all of "
                f"{target.fqn}'s history: {len(done)} partition{'s' if len(done) != 1 else ''} re-derived, "
                f"{left or 'nothing left to read (the apply records it finished)'}; until then those partitions mix "
                "rows of the old SELECT and the new"
            )
            self.rederived.add(target)
            self.changes.append(
                Change(
                    Action.REDERIVE,
                    target,
                    "table",
                    self._layer(target),
                    reasons=(reason,),
                    location=str(self.project.tables[target].location) if target in self.project.tables else None,
                    rederive=rederive,
                    blocked=blocked,
                    unfinished=True,
                )
            )

    # -- re-derivation --------------------------------------------------------------------------------

    def _with_rederive(self, change: Change, target: ObjectRef, *, why: str, writes: ObjectRef | None = None) -> Change:
        """``change`` with the re-derivation of ``target``'s history, when its sources hold rows."""
        if target in self.rederived:
            return change
        feedback = feedback_reads(self.loaded, target)
        if feedback:  # its history cannot be recomputed through its SELECT: kept as it is, as a stream's target's
            kept = f"its history is kept as it is: {feedback_cause(target, feedback)}"
            return _replace(change, reasons=(*change.reasons, kept))
        try:
            rederive = self._rederive(target, writes, new_version=change.action == Action.NEW_VERSION)
        except ChmvError as err:
            return _replace(change, blocked=f"the history of {target.fqn} cannot be planned: {err}")
        if rederive is None:
            return change
        self.rederived.add(target)
        blocked = change.blocked
        if rederive.lost_rows and not self.allow_drop:
            blocked = (
                f"the new version would not have {rederive.lost_rows:,} rows of {target.fqn} that its sources "
                "no longer hold (see the kept partitions); --allow-drop accepts losing them"
            )
        return _replace(change, rederive=rederive, blocked=self._foreign_block(target) or blocked)

    def _foreign_block(self, target: ObjectRef) -> str | None:
        """Why re-deriving ``target`` is blocked by MVs outside the DDL writing into it (None: it is not, or
        ``--allow-drop`` accepts losing their rows)."""
        foreign = self.state.foreign.get(target, ())
        if not foreign or self.allow_drop:
            return None
        names = ", ".join(v.fqn for v in foreign)
        return (
            f"{names}, not in the DDL directory, write{'s' if len(foreign) == 1 else ''} into {target.fqn}: "
            "re-deriving its history would replace those rows with nothing (see the findings); add "
            f"{names} to the DDL directory, or --allow-drop accepts losing its rows"
        )

    def _rederive(self, target: ObjectRef, writes: ObjectRef | None, *, new_version: bool) -> Rederive | None:
        project, state = self.project, self.state
        views = project.views_into(target)
        if feedback_reads(self.loaded, target):  # not recomputable through its SELECT: kept as it is
            return None
        # A stream (Kafka, S3Queue…) is never read: reading consumes. A target fed by one keeps its history as it is.
        triggers = [s for s in triggers_of(project, target) if not project.is_stream(s)]
        if not views or not triggers or not any(state.rows(s) for s in triggers):
            return None
        scheme = self.loaded.partitioning(target)
        # a key part's partitions are re-derived with the whole table (each partition of the shadow swapped in)
        if any(v.refreshable for v in views) or scheme.grain is None or scheme.keyed:
            windows: list[PartitionWindow | None] = [None]
        else:
            windows = list(self._windows(target, scheme, triggers))
        windows, kept = self._derivable(target, triggers, windows, self._reach(target, scheme, triggers))
        observations = (
            observe(self.client, self.loaded, target, root=self.root)
            if target in state.live
            else Observations(live=target, zone=session_zone(self._client) if self._client is not None else "")
        )
        if writes is not None:
            observations = Observations(
                live=writes, oldest=observations.oldest, now=observations.now, zone=observations.zone
            )
        plan = plan_rebuild(  # a new version, not live yet, cannot wait for open partitions
            self.loaded,
            target,
            windows,
            observations,
            engine="auto",
            root=self.root,
            defer_open=not new_version,
            one_read=True,  # the apply reads the partitions in batches sized to a hold of the gates
        )
        reach = self._reach(target, scheme, triggers)
        estimates = tuple(
            PartitionEstimate(
                step.key, str(step.engine), _rounded(self._rows(triggers, step.window, reach)), step.reason
            )
            for step in plan.steps
        )
        outside, lost = self._kept(target, windows, new_version, kept)
        return Rederive(target, plan, estimates, outside, lost)

    def _windows(
        self, target: ObjectRef, scheme: TargetPartitioning, triggers: list[ObjectRef]
    ) -> list[PartitionWindow]:
        """The partitions of ``target`` that its triggers hold rows for (from their parts' time ranges)."""
        assert scheme.grain is not None
        since: datetime | None = None
        until: datetime | None = None
        for source in triggers:
            parts = [p for p in self.state.parts.get(source, ()) if p.rows]
            if not parts:
                continue
            low: datetime | None
            high: datetime | None
            spans = [(p.start, p.end) for p in parts if p.start is not None and p.end is not None]
            if len(spans) == len(parts):
                low, high = min(s for s, _ in spans), max(e for _, e in spans) - timedelta(seconds=1)
            else:
                low, high = self._source_range(target, scheme, source)
                if low is None or high is None:
                    raise ChmvError(
                        f"the time range of {source.fqn} is unknown (its partition key is not a time "
                        "and the MV's partition column is not a truncation of one of its columns)"
                    )
            # The target's partition column truncates the trigger's time (toMonday(day) of 2026-08-01 is in July).
            low -= target_reach(self.project, target, scheme, source)
            since = low if since is None else min(since, low)
            until = high if until is None else max(until, high)
        if since is None or until is None:
            return []
        # the parts' times are wall clocks; the windows are named in the calendar, from the first the sources hold
        assert scheme.time is not None
        first = scheme.time.floor(since, scheme.zone)
        return scheme.time.windows_between(first, since, until, scheme.zone)

    def _reach(self, target: ObjectRef, scheme: PartitionScheme, triggers: list[ObjectRef]) -> dict[ObjectRef, int]:
        """Per trigger, how far past a window's end its rows may still map into the window, in seconds
        (:func:`~chmv_assets.ddl.partitioning.target_reach`)."""
        if scheme.grain is None:
            return {}
        return {s: int(target_reach(self.project, target, scheme, s).total_seconds()) for s in triggers}

    def _derivable(
        self,
        target: ObjectRef,
        triggers: list[ObjectRef],
        windows: list[PartitionWindow | None],
        reach: dict[ObjectRef, int],
    ) -> tuple[list[PartitionWindow | None], list[PartitionWindow | None]]:
        """The windows the sources hold rows for; and those where only the target does (rebuilt, they would empty)."""
        keep: list[PartitionWindow | None] = []
        skip: list[PartitionWindow | None] = []
        for window in windows:
            source_rows = self._rows(triggers, window, reach)
            if source_rows is None or source_rows > 0:
                keep.append(window)
            elif self._rows([target], window):
                skip.append(window)
        return keep, skip

    def _source_range(
        self, target: ObjectRef, scheme: PartitionScheme, source: ObjectRef
    ) -> tuple[datetime | None, datetime | None]:
        """Oldest and newest value of the trigger column that the target's partition column truncates."""
        for view in self.project.views_into(target):
            out = view.output(scheme.column) if scheme.column else None
            if view.trigger == source and out is not None and out.truncation is not None:
                column = quote(out.truncation[0])
                low, high = self.client.query(
                    f"SELECT min({column}), max({column}) FROM {qualified(source)}"
                ).result_rows[0]
                return _as_datetime(low), _as_datetime(high)
        return None, None

    def _rows(
        self, tables: list[ObjectRef], window: PartitionWindow | None, reach: dict[ObjectRef, int] | None = None
    ) -> float | None:
        """Rows of ``tables`` whose time falls in ``window`` (extended by ``reach`` seconds per table), estimated
        from the parts' time ranges by proportional overlap; None when a part's range is unknown."""
        total = 0.0
        for table in tables:
            # the parts' times are wall clocks: so is the window here
            start = window.wall_start if window is not None else None
            end = window.wall_end if window is not None else None
            end = end + timedelta(seconds=(reach or {}).get(table, 0)) if end is not None else None
            for part in self.state.parts.get(table, ()):
                if window is None:
                    total += part.rows
                elif part.start is None or part.end is None:
                    return None
                else:
                    assert start is not None and end is not None
                    overlap = (min(part.end, end) - max(part.start, start)).total_seconds()
                    span = (part.end - part.start).total_seconds() or 1.0
                    total += part.rows * max(0.0, overlap) / span
        return total

    def _kept(
        self,
        target: ObjectRef,
        windows: list[PartitionWindow | None],
        new_version: bool,
        skipped: list[PartitionWindow | None],
    ) -> tuple[tuple[str, ...], int]:
        """Partitions of the live target outside the re-derived ones (the sources no longer hold their rows)."""
        if windows and windows[0] is None:
            return (), 0
        derived = [w for w in windows if w is not None]

        def outside_all(p: PartStats) -> bool:
            return all(p.end <= w.wall_start or p.start >= w.wall_end for w in derived)  # type: ignore[operator]

        outside = [
            p
            for p in self.state.parts.get(target, ())
            if p.start is not None and p.end is not None and p.rows and outside_all(p)
        ]
        if not outside:
            return (), 0
        rows = sum(p.rows for p in outside)
        fate = "would be lost by the swap" if new_version else "keep their rows as derived by the old SELECT"
        note = (
            f"{len(outside)} partition(s) of {target.fqn} ({outside[0].partition} … {outside[-1].partition}, "
            f"{rows:,} rows) lie outside what the sources hold and {fate}"
        )
        return (note,), rows if new_version else 0

    # -- statements chmv keeps as written ---------------------------------------------------------------

    def _kept_statement(self, obj: KeptObject) -> None:
        """Created when missing; reported (``manual``) when the server's differs: chmv does not change them."""
        label = kept_change_kind(obj.kind)
        ref = obj.ref or ObjectRef(database="", name=obj.name)
        layer = self._kept_layer(obj)
        if obj.kind == KeptKind.VIEW:
            self._kept_view(obj, ref, label, layer)
            return
        kept = self.state.kept
        if obj.kind in kept.unreadable:
            self.notes.append(
                f"{obj.label}: not compared: the server's {obj.kind}s cannot be read ({kept.unreadable[obj.kind]})"
            )
        elif obj.kind == KeptKind.GRANT:
            if not _granted(obj, kept, self.state.kept_formatted.get((obj.kind, obj.name))):
                self._kept_created(obj, ref, label, layer, reasons=("not granted on the server",))
        else:
            self._kept_named(obj, ref, label, layer)

    def _kept_view(self, obj: KeptObject, ref: ObjectRef, label: str, layer: int) -> None:
        """A plain view chmv keeps as written: created when missing, compared by its SELECT."""
        live = self.state.live.get(ref)
        if live is None:
            self._kept_created(obj, ref, label, layer)
        elif live.engine != "View":
            self.changes.append(_another_kind(ref, label, layer, str(obj.location), live.engine, "a view"))
        elif select_changed(self.state.selects.get(ref) or obj.select_sql or "", live.select):
            self._kept_changed(obj, ref, label, layer, select_diff(self.state.selects.get(ref) or "", live.select))

    def _kept_named(self, obj: KeptObject, ref: ObjectRef, label: str, layer: int) -> None:
        """A function, user, role, policy… (one statement may name several): created when the server has none of
        them, left to be completed by hand when it has some, compared by its statement when it has all."""
        kept = self.state.kept
        existing = kept.existing.get(obj.kind, frozenset())
        present = [n for n in obj.names if n in existing]
        key = obj.name if obj.kind in (KeptKind.ROW_POLICY, KeptKind.MASKING_POLICY) else None
        if (key is not None and key not in existing) or (key is None and not present):
            self._kept_created(obj, ref, label, layer)
            return
        if key is None and len(present) < len(obj.names):
            missing = ", ".join(n for n in obj.names if n not in existing)
            self.changes.append(
                Change(
                    Action.MANUAL,
                    ref,
                    label,
                    layer,
                    location=str(obj.location),
                    reasons=(f"the server has only some of them; missing: {missing}",),
                    blocked=f"create the missing {obj.kind}s by hand",
                )
            )
            return
        live_text = kept.statements.get((obj.kind, obj.name))
        if live_text is not None and not same_kept(
            obj.kind, self.state.kept_formatted.get((obj.kind, obj.name)) or obj.statement, live_text
        ):
            self._kept_changed(obj, ref, label, layer, "")

    def _kept_created(
        self, obj: KeptObject, ref: ObjectRef, label: str, layer: int, *, reasons: tuple[str, ...] = ()
    ) -> None:
        self.changes.append(
            Change(
                Action.CREATE,
                ref,
                label,
                layer,
                statements=(obj.statement,),
                location=str(obj.location),
                reasons=reasons,
            )
        )

    def _kept_changed(self, obj: KeptObject, ref: ObjectRef, label: str, layer: int, diff: str) -> None:
        how = (
            "CREATE OR REPLACE VIEW"
            if obj.kind == KeptKind.VIEW
            else ("CREATE OR REPLACE FUNCTION" if obj.kind == KeptKind.FUNCTION else f"ALTER {obj.kind.keyword}")
        )
        self.changes.append(
            Change(
                Action.MANUAL,
                ref,
                label,
                layer,
                location=str(obj.location),
                diff=diff,
                reasons=(f"the {obj.kind}'s definition differs from the server's",),
                blocked=f"chmv does not change a {obj.kind}: apply it by hand ({how} …)",
            )
        )

    def _kept_layer(self, obj: KeptObject) -> int:
        """Functions and named collections before the databases, views in their lineage layer, access control last."""
        if obj.kind == KeptKind.VIEW and obj.ref is not None:
            return self.layer.get(obj.ref.fqn, 0)
        if obj.kind.deploy_rank < 0:
            return -2
        return ACCESS_LAYER

    # -- objects the DDL no longer has ----------------------------------------------------------------

    def _extras(self) -> None:
        project = self.project
        known = set(project.tables) | set(project.views) | set(project.dictionaries) | set(project.external)
        known |= set(project.plain_views) | set(project.loop_views)
        extras = sorted(
            (
                o
                for r, o in self.state.live.items()
                if r not in known and r.database != META_DATABASE and not r.name.startswith(".inner")
            ),
            key=lambda o: (o.engine != "MaterializedView", o.ref.fqn),
        )
        for obj in extras:
            ref = obj.ref
            if ref.name.startswith(f"{CHMV_PREFIX}old_"):
                what = "the version a new version replaced"
            elif ref.name.startswith(CHMV_PREFIX):
                continue  # shadows and beside objects of chmv's own runs: they clean up after themselves
            else:
                what = f"a {obj.engine} the DDL does not define"
            if not self.allow_drop:
                self.notes.append(f"{ref.fqn}: {what}; kept (--allow-drop drops it)")
                continue
            kind = (
                "dictionary"
                if _is_dictionary(obj)
                else {"MaterializedView": "view", "View": "view"}.get(obj.engine, "table")
            )
            keyword = {"view": "VIEW", "dictionary": "DICTIONARY"}.get(kind, "TABLE")
            # An old version is dropped where its target lives; of another object the DDL says nothing: this server.
            cluster = next(
                (
                    t.on_cluster
                    for t in project.tables.values()
                    if ref.name.startswith(old_version_ref(t.ref).name + "_") and t.ref.database == ref.database
                ),
                None,
            )
            self.changes.append(
                Change(
                    Action.DROP,
                    ref,
                    kind,
                    0,
                    reasons=(what,),
                    statements=(f"DROP {keyword} IF EXISTS {qualified(ref)}{on_cluster(cluster)} SYNC",),
                )
            )


def kept_change_kind(kind: KeptKind) -> str:
    """The ``kind`` of a :class:`Change` of a kept statement (``plain view``, not ``view``: that is an MV)."""
    return "plain view" if kind == KeptKind.VIEW else str(kind)


_OPTIONAL_WORDS = re.compile(r"\s+IF NOT EXISTS\b|\bOR REPLACE\s+|\s+ON CLUSTER\s+(?:'[^']*'|`[^`]*`|\S+)")
_IDENTIFIED = re.compile(r"\s+(?:NOT\s+)?IDENTIFIED\b.*?(?=\s+(?:HOST|DEFAULT|SETTINGS|GRANTEES|VALID|IN)\b|$)")
_KEYS = re.compile(r"(\w+)\s*=")


def same_kept(kind: KeptKind, repo: str, live: str) -> bool:
    """Whether the server's statement of a kept object says what the DDL's does (both as the server formats them).

    ``IF NOT EXISTS``, ``OR REPLACE`` and ``ON CLUSTER`` are ignored; a user's credentials (the server does not show
    them) too; a named collection is compared by its keys (the server hides its values).
    """

    def norm(text: str) -> str:
        text = _OPTIONAL_WORDS.sub("", " ".join(text.split()))
        if kind == KeptKind.USER:
            text = _IDENTIFIED.sub("", text)
        return text.rstrip(";").strip()

    if kind == KeptKind.NAMED_COLLECTION:
        return sorted(_KEYS.findall(repo.partition(" AS ")[2])) == sorted(_KEYS.findall(live.partition(" AS ")[2]))
    return norm(repo) == norm(live)


def _granted(grant: KeptObject, kept: KeptState, formatted: str | None) -> bool:
    """Every grantee of a GRANT exists and the server shows each of them the privileges on the object granted."""
    text = _OPTIONAL_WORDS.sub("", " ".join((formatted or grant.statement).split()))
    what = text.split(" TO ", 1)[0]
    existing = kept.existing.get(KeptKind.GRANT, frozenset())
    return all(
        g in existing
        and any(line.startswith(what) for line in kept.statements.get((KeptKind.GRANT, g), "").splitlines())
        for g in grant.names
    )


def _replace(change: Change, **values) -> Change:
    return replace(change, **values)


def _rounded(value: float | None) -> int | None:
    return None if value is None else round(value)


def _as_datetime(value) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    return datetime(value.year, value.month, value.day)


def root_sources(loaded: LoadedProject, target: ObjectRef) -> set[ObjectRef]:
    """Every table whose inserts reach ``target`` through MVs: its triggers, and theirs up a chain.

    Holding these tables' write gates stops every insert that could change ``target`` (an upstream target is
    written only by MVs fired from inserts into its own sources).
    """
    project, found, queue = loaded.project, set(), [target]
    targets = set(project.targets)
    while queue:
        for source in triggers_of(project, queue.pop()):
            if source not in found:
                found.add(source)
                if source in targets:
                    queue.append(source)
    return found


def rederive_now(
    client: Client,
    loaded: LoadedProject,
    target: ObjectRef,
    *,
    writes: ObjectRef | None = None,
    new_version: bool = False,
    allow_drop: bool = False,
    root: Path | None = None,
) -> Rederive | None:
    """The re-derivation of ``target`` planned from the server as it is now (``chmv apply`` re-plans each one when
    it starts it, after the new SELECT receives the new rows, so partitions that appeared since ``chmv plan`` count).

    Args:
        writes: The table the rebuilt partitions go to (a new version beside the target); default the target.
        new_version: Partitions the sources cannot re-derive are lost by the swap (else they are kept).
    """
    databases = project_databases(loaded)
    # What a re-derivation reads of the live objects is whether the target exists (not their formatted queries,
    # which cost ~1 ms per object of the database), and the parts of the target and its triggers.
    live = {ref: LiveObject(ref, engine="") for ref in existing_objects(client, [target])}
    tables = {target, *triggers_of(loaded.project, target), *([writes] if writes is not None else [])}
    foreign = foreign_writers(client, loaded.project, [target]) if writes is None else {}
    state = ServerState(frozenset(databases), live, parts=read_parts(client, databases, tables), foreign=foreign)
    planner = _Planner(client, loaded, state, allow_drop, root)
    blocked = planner._foreign_block(target)  # an MV outside the DDL created since chmv plan
    if blocked is not None:
        raise ForeignRowsRefused(f"{target.fqn}: {blocked}; nothing of it was re-derived")
    return planner._rederive(target, writes, new_version=new_version)


def _is_dictionary(live: LiveObject) -> bool:
    """A dictionary on the server (a table of the ``Dictionary`` engine has that engine too, and is a table)."""
    return live.engine == "Dictionary" and live.create_query.lstrip().upper().startswith("CREATE DICTIONARY")


def _another_kind(ref: ObjectRef, kind: str, layer: int, location: str | None, live_engine: str, ddl: str) -> Change:
    """A manual change: the server holds a ``live_engine`` where the DDL defines ``ddl`` (``a table``, ``an MV``)."""
    return Change(
        Action.MANUAL,
        ref,
        kind,
        layer,
        location=location,
        reasons=(f"the server has a {live_engine} named {ref.fqn}; the DDL {ddl}",),
        blocked="rename or drop the server's object by hand",
    )
