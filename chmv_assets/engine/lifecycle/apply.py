"""Run a lifecycle plan (``chmv apply``): every change with zero gap while the sources keep receiving rows.

Every writer into a source holds its write gate (:func:`chmv_assets.engine.ingest.cutoff.source_gate`, docs/rebuilds.md,
"Backfill protocol"); apply takes the gates of every table whose inserts reach a target (its sources up the
chain) around each step that must not interleave with an insert. A hold (the gates, then one client) carries on
into the next steps while they need no other gate and the hold is younger than ``batch_seconds``: ingestion waits
about that long at worst, and the engine is opened once per hold, not per step (an embedded engine costs ~0.1 s
to open). A young hold needing another gate tries it and carries on if it is free; it never waits for a gate with
the engine open (a writer holding the gate waits for the engine): then it is released and the gates taken first.
``chmv apply`` hands the apply the client it planned with, as its first hold. The steps:

- **in place** (``alter``, creations, drops): the statement, as planned.
- **new SELECT** (``modify_query``, ``recreate_view``, a new MV on a source that holds rows): under the gates,
  ``ALTER TABLE mv MODIFY QUERY`` (or drop + create, never ``CREATE OR REPLACE``): from this cut-in every new
  row goes through the new SELECT. Then the target's history is re-derived through the rebuild planner and
  executor in batches of partitions, each batch under one hold of the gates (about ``batch_seconds``, at least
  one partition): the MV's new SELECT over every source row of the batch's windows, read once, into one shadow
  (:func:`chmv_assets.engine.rebuild.steps.run_steps`), each partition then swapped in with ``REPLACE PARTITION``. A
  row that arrived before the batch's rebuild is in the rebuild's read, a row that arrives after it goes
  through the new SELECT, and none can arrive in between: each row is counted once (seed 002's cutoff, with
  the gate as the cutoff).
- **new version**: ``_chmv_next_<target>`` is created beside the target and, under the gates, a copy of each
  MV writing the target is created TO it (``_chmv_next_<mv>``): it receives every new row from then on. Its
  history is re-derived as above, and each partition's parity with the new SELECT over the same source rows,
  in the same hold (a batch's partitions in one recompute), must pass (else apply stops, the old version stays
  live). The cut-over, under the gates:
  ``EXCHANGE TABLES target AND _chmv_next_<target>``, then ``MODIFY QUERY`` of each MV to its new SELECT and
  ``DROP VIEW`` of its copy; the old version is kept as ``_chmv_old_<target>_<time>``.

**How MVs follow an EXCHANGE** (measured on chdb 26.9, Atomic database): an MV resolves both its TO target
and its source **by name** at insert time, not by UUID: after ``EXCHANGE TABLES t AND t2`` an MV ``TO t``
writes into the table now called ``t``, and an MV reading ``FROM t`` fires on inserts into the table now
called ``t`` (``RENAME t TO t3`` makes inserts fail: "Target table 'd.t' … doesn't exist"). So the swap
needs no MV to be re-pointed: the live MV ``TO target`` writes into the new version from the exchange on,
which is why its ``MODIFY QUERY`` runs in the same gated step, and MVs further down a chain read the new
version at once (their partitions are then re-derived, upstream first).

Progress is journaled in ``chmv_meta`` (:mod:`chmv_assets.engine.lifecycle.journal`): a re-derivation is recorded before
its cut-in and marked done after its last partition; a new version records ``building`` and ``swapped``. An
apply killed at any step leaves the journal behind; the next apply finishes what it names (drops a half-built
version and builds it again, completes a cut-over, re-derives a target whose SELECT changed) before the rest.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine import races, records
from chmv_assets.engine.catalog import existing_objects
from chmv_assets.engine.clients import ClientFactory
from chmv_assets.engine.health.parity import verify_rebuilt
from chmv_assets.engine.ingest.cutoff import crash_point, source_gate
from chmv_assets.engine.lifecycle import journal
from chmv_assets.engine.lifecycle.deploy import use_default_database
from chmv_assets.engine.lifecycle.plan import Action, Change, LifecyclePlan, Rederive
from chmv_assets.engine.lifecycle.planner import (
    next_version_ref,
    old_version_ref,
    rederive_now,
    root_sources,
)
from chmv_assets.engine.lifecycle.refusals import check_statement
from chmv_assets.engine.parts import read_partitions
from chmv_assets.engine.rebuild import deferrals
from chmv_assets.engine.rebuild.deferrals import Deferral
from chmv_assets.engine.rebuild.executor import Stager, StepResult, Verifier, run_plan
from chmv_assets.engine.rebuild.hold import RunHold
from chmv_assets.engine.rebuild.planner import Engine, PartitionStep, RebuildPlan, downstream_targets, triggers_of
from chmv_assets.engine.rebuild.steps import race_ranges
from chmv_assets.engine_logs import quiet
from chmv_assets.errors import ChmvError, EngineBusyError
from chmv_assets.sql.lifecycle_sql import cut_over_sql, discard_beside_sql, finish_swap_sql, keep_old_sql

_LOG = logging.getLogger(__name__)

#: Changes after which the target's history is re-derived with the new SELECT.
REDERIVING = (Action.CREATE, Action.MODIFY_QUERY, Action.RECREATE_VIEW, Action.REDERIVE)


class LifecycleError(ChmvError):
    """Apply stopped: a blocked change, or a partition whose parity failed (the old version stays live)."""


@dataclass
class ApplyReport:
    """What an apply did."""

    done: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    partitions: dict[str, int] = field(default_factory=dict)
    parity_checked: int = 0
    seconds: float = 0.0

    def describe(self) -> str:
        rebuilt = sum(self.partitions.values())
        text = (
            f"apply: {len(self.done)} changes made, {rebuilt} partitions re-derived in {len(self.partitions)} "
            f"targets, {self.parity_checked} parity checks passed ({self.seconds:.1f}s)"
        )
        if self.resumed:
            text += "; resumed: " + ", ".join(self.resumed)
        if self.refused:
            text += "; refused (a trigger loop, not deployed): " + ", ".join(self.refused)
        return text


def plan_id(plan: LifecyclePlan) -> str:
    """A short id of a plan: the hash of its statements."""
    return hashlib.sha1("\n".join(plan.statements()).encode()).hexdigest()[:12]


def apply_plan(
    clickhouse: ClientFactory,
    loaded: LoadedProject,
    plan: LifecyclePlan,
    *,
    parity: bool = True,
    stager: Stager | None = None,
    root: Path | None = None,
    pause: Callable[[str], None] | None = None,
    batch_seconds: float = 2.0,
    check_in_place: bool = False,
    opened: tuple[Client, ExitStack] | None = None,
) -> ApplyReport:
    """Make every change of ``plan`` (already checked by the preflight), finishing a killed apply's work first.

    Args:
        clickhouse: Opens clients; one per hold, taken after the hold's write gates.
        loaded: The project planned from.
        plan: From :func:`chmv_assets.engine.lifecycle.planner.plan_lifecycle`.
        parity: Verify the rebuilt partitions of a new version before its swap (:meth:`_Apply._verify`: the parity
            check against the new SELECT over the same source rows); a failure stops the apply, the old version
            stays live. False: they are swapped in unverified.
        stager: Spark staging for partitions the rebuild planner reads from the landing zone.
        root: The landing zone.
        pause: Called at every point between steps, after the apply released its gates and client there (tests
            interleave inserts); without it, a hold carries on across those points while it is young.
        batch_seconds: How long one hold of the gates lasts at most (at least one step or batch of partitions):
            ingestion waits that long at worst, and the engine is opened once per hold, not per step or partition.
        check_in_place: Verify the partitions re-derived in place too (they are not gating a swap; the target
            asset's own parity check covers them; the check recomputes the SELECT, doubling the work).
        opened: The client the caller planned with, and the stack that closes it (``ExitStack.pop_all()``): the
            apply takes both over as its first hold (the engine is not opened again after the plan and preflight)
            and closes them. While a client is open a gate is only tried, never waited for (a writer holding it
            waits for the engine): a busy gate closes the client first, then the gates are taken and a client
            opened again, in the writers' order.

    Raises:
        LifecycleError: The plan has blocked changes (nothing is done), or a parity check failed. (Its refused
            changes, the MVs of a trigger loop, are not made and hold nothing back: they are in the report.)
    """
    if plan.blocked:
        if opened is not None:
            opened[1].close()
        raise LifecycleError("nothing was changed: " + "; ".join(f"{c.name}: {c.blocked}" for c in plan.blocked))
    apply = _Apply(clickhouse, loaded, plan, parity, stager, root, pause, batch_seconds, check_in_place)
    if opened is not None:
        apply.hold = _Hold(frozenset(), opened[0], opened[1], time.monotonic())
    return apply.run()


class _Apply:
    def __init__(
        self,
        clickhouse: ClientFactory,
        loaded: LoadedProject,
        plan: LifecyclePlan,
        parity: bool,
        stager: Stager | None,
        root: Path | None,
        pause: Callable[[str], None] | None,
        batch_seconds: float = 2.0,
        check_in_place: bool = False,
    ):
        self.clickhouse = clickhouse
        self.loaded = loaded
        self.project = loaded.project
        self.plan = plan
        self.parity = parity
        self.stager = stager
        self.root = root
        self.id = plan_id(plan)
        self.report = ApplyReport()
        self.rederived: set[ObjectRef] = set()
        #: Per target re-derived in place, the version of its pending journal record (its partitions done go under it)
        self.progress: dict[ObjectRef, int] = {}
        self.batch_seconds = batch_seconds
        self.check_in_place = check_in_place
        self.pause_hook = pause
        self.hold: _Hold | None = None

    def run(self) -> ApplyReport:
        started = time.monotonic()
        try:
            # The first hold takes the gates of the first change that needs any, for that change to carry on in it.
            first = next((g for c in self.plan.changes if (g := self._gates_for(c))), frozenset())
            with self._gated(None, *first) as client:
                records.ensure_records_for(client, self.project)  # chmv_meta, migrated from its legacy table
                entries = journal.unfinished(client)
            self._resume(entries)
            for change in self.plan.changes:
                if change.action == Action.REFUSED:  # an MV of a trigger loop: never deployed, the rest is
                    _LOG.warning(f"{change.headline()}: {change.blocked}")
                    self.report.refused.append(change.name)
                    continue
                self._change(change)
                self.report.done.append(f"{change.action} {change.ref.fqn}")
        finally:
            self._release()
        self.report.seconds = time.monotonic() - started
        _LOG.info(self.report.describe())
        return self.report

    # -- holds ----------------------------------------------------------------------------------------

    def _gates_of(self, target: ObjectRef) -> frozenset[ObjectRef]:
        """The write gates of every table whose inserts reach ``target`` (its sources up the chain)."""
        return frozenset(root_sources(self.loaded, target) | set(triggers_of(self.project, target)))

    def _gates_for(self, change: Change) -> frozenset[ObjectRef]:
        """The gates ``change`` is made under (none for a table or database made in place)."""
        if change.action == Action.NEW_VERSION:
            return self._gates_of(change.ref)
        view = self.project.views.get(change.ref) if change.kind == "view" else None
        if view is None and change.action != Action.REDERIVE:
            return frozenset()
        return self._gates_of(view.writes_to if view is not None else change.ref)

    @contextmanager
    def _gated(self, target: ObjectRef | None, *extra: ObjectRef) -> Iterator[Client]:
        """A client under the write gates of everything whose inserts reach ``target`` (and ``extra``).

        The current hold if it holds those gates and is younger than ``batch_seconds``; else it is released and a
        new one taken: the gates first, then the client (always in that order, the order of every writer).
        """
        gates = frozenset(extra) | (self._gates_of(target) if target is not None else frozenset())
        hold = self.hold
        if hold is not None and hold.age < self.batch_seconds and not gates <= hold.gates:
            self._try_gates(hold, gates - hold.gates)
        if hold is None or not gates <= hold.gates or hold.age >= self.batch_seconds:
            self._release()
            stack = ExitStack()
            try:
                stack.enter_context(source_gate(gates, holder=f"chmv apply {self.id}"))
                client = stack.enter_context(self.clickhouse.get_client())
            except BaseException:
                stack.close()
                raise
            hold = self.hold = _Hold(gates, client, stack, time.monotonic())
        yield hold.client

    @staticmethod
    def _try_gates(hold: _Hold, gates: frozenset[ObjectRef]) -> None:
        """Add ``gates`` to ``hold`` if none is held elsewhere (tried, not waited for: the hold has a client open)."""
        try:
            hold.stack.enter_context(source_gate(gates, timeout=0))
        except EngineBusyError:
            return  # a writer holds one: the caller releases the hold and waits for the gates without a client
        hold.gates |= gates

    def _release(self) -> None:
        """Close the client and release the gates of the current hold, if any."""
        hold, self.hold = self.hold, None
        if hold is not None:
            hold.stack.close()

    def pause(self, point: str) -> None:
        """A point between steps: with a ``pause`` hook, the hold is released and the hook called (tests insert rows
        there); without one the hold carries on while it is young."""
        if self.pause_hook is not None:
            self._release()
            self.pause_hook(point)

    # -- steps ----------------------------------------------------------------------------------------

    def _run(self, client: Client, sql: str) -> None:
        _LOG.info(f"  {' '.join(sql.split())[:200]}")
        client.command(check_statement(sql))

    def _change(self, change: Change) -> None:
        _LOG.info(change.headline())
        action = change.action
        if action == Action.NEW_VERSION:
            self._new_version(change)
            return
        if action == Action.MANUAL:
            raise LifecycleError(f"{change.ref.fqn}: {change.blocked}")
        if change.unfinished:  # an earlier apply's re-derivation: its cut-in is done, what is left is re-derived
            self._finish_rederive(change.ref)
            return
        if action == Action.DROP and not self.plan.allow_drop:
            raise LifecycleError(f"{change.ref.fqn}: a drop in a plan made without --allow-drop")
        view = self.project.views.get(change.ref) if change.kind == "view" else None
        target = view.writes_to if view is not None else change.ref
        if view is None and action != Action.REDERIVE:
            with self._gated(None) as client:
                for sql in change.statements:
                    self._run(client, sql)
                if change.kind == "database" and action == Action.CREATE_DATABASE:
                    use_default_database(client, self.project, {change.ref.database})
            if action in (Action.CREATE, Action.CREATE_DATABASE):
                _LOG.info(f"created {change.name}")
            return
        # The cut-in: the new SELECT takes every row from here on; no insert can land during it, so the rows the
        # sources hold now are exactly the history to re-derive (journaled first, for a killed apply to resume).
        with self._gated(target) as client:
            history = action in REDERIVING and self._has_rows(client, target)
            if history:
                for ref in (target, *downstream_targets(self.loaded, target)):
                    self.progress[ref] = journal.record(client, "rederive", ref, journal.PENDING, self.id)
            for sql in change.statements:
                self._run(client, sql)
        if action == Action.CREATE:
            _LOG.info(f"created {change.ref.fqn}")
        self._changed(target)
        crash_point("lifecycle:cut_in")
        self.pause(f"cut-in {change.ref.fqn}")
        if history:
            self._rederive(target)

    def _changed(self, target: ObjectRef) -> None:
        """``target``'s rows change from now on: it and the chain below must be re-derived (again)."""
        self.rederived -= {target, *downstream_targets(self.loaded, target)}

    def _has_rows(self, client: Client, target: ObjectRef) -> bool:
        """Whether any table whose inserts reach ``target`` holds rows (its history is not empty)."""
        sources = root_sources(self.loaded, target) | set(triggers_of(self.project, target))
        if not sources:
            return False
        held = read_partitions(client, sorted(sources, key=lambda s: s.fqn))
        return any(p.rows for partitions in held.values() for p in partitions)

    def _rederive(
        self,
        target: ObjectRef,
        *,
        writes: ObjectRef | None = None,
        only: set[str] | None = None,
        skip: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """Re-derive ``target``'s history (the partitions ``only`` names, if given; not those of ``skip``) in batches
        of partitions, each batch under one hold of the gates and read from the source once, each partition checked;
        planned in the first hold. In place, each batch is journaled once swapped (what an interrupted apply leaves
        is then known: ``chmv plan`` names it, the next apply re-derives only that)."""
        if target in self.rederived and writes is None:
            return
        batches = _Batches(self.batch_seconds)
        with self._gated(target) as client:  # the plan's gates (the target's triggers) are among these
            rederive = rederive_now(
                client,
                self.loaded,
                target,
                writes=writes,
                new_version=writes is not None,
                allow_drop=self.plan.allow_drop,
                root=self.root,
            )
            if rederive is not None and (only is not None or skip):

                def wanted(key: str | None) -> bool:
                    return (only is None or (key or "all") in only) and (key or "all") not in skip

                steps = tuple(s for s in rederive.plan.steps if wanted(s.key))
                rederive = replace(
                    rederive,
                    plan=replace(rederive.plan, steps=steps),
                    partitions=tuple(p for p in rederive.partitions if wanted(p.partition)),
                )
            if rederive is not None:
                if rederive.lost_rows and not self.plan.allow_drop:
                    raise LifecycleError(
                        f"{target.fqn}: the new version would lose {rederive.lost_rows:,} rows its "
                        "sources no longer hold; the old version stays live (--allow-drop accepts "
                        "it)"
                    )
                _LOG.info(f"  re-derive {target.fqn} into {rederive.plan.live.fqn}: {rederive.summary()}")
                if rederive.plan.deferred:  # open to writers chmv does not control: recovery rebuilds them once closed
                    deferrals.record(
                        client,
                        [
                            Deferral(target, s.key or "all", s.closes_at or datetime.max, s.reason)
                            for s in rederive.plan.deferred
                        ],
                    )
                    _LOG.info(f"  {rederive.plan.deferral()}")
                batches.start(rederive)
                self._batch(client, target, rederive.plan, batches)
            if batches.done:
                self._rederived(client, target, writes)
        while not batches.done:
            assert rederive is not None  # batches only start with a re-derivation
            self.pause(f"rebuilt {rederive.plan.live.fqn} up to {batches.last}")
            with self._gated(target) as client:
                self._batch(client, target, rederive.plan, batches)
                if batches.done:
                    self._rederived(client, target, writes)
        if rederive is not None:
            self.pause(f"rebuilt {rederive.plan.live.fqn} up to {batches.last}")
            self.report.partitions[target.fqn] = len(rederive.plan.steps)

    def _rederived(self, client: Client, target: ObjectRef, writes: ObjectRef | None) -> None:
        """The last partition is in (in place: the re-derivation is done; a new version is done at its cut-over)."""
        if writes is None:
            self.rederived.add(target)
            self.progress.pop(target, None)
            journal.record(client, "rederive", target, journal.DONE, self.id)

    def _finish_rederive(self, target: ObjectRef) -> None:
        """The re-derivation of ``target`` an earlier apply journaled and did not finish: the partitions it did not
        record as done (all of them if nothing was recorded), then done."""
        with self._gated(target) as client:
            entry = next((e for e in journal.unfinished(client) if e.kind == "rederive" and e.target == target), None)
            if entry is None:  # finished meanwhile
                return
            self.progress[target] = entry.version
            done = journal.rederived(client, target, entry.version)
        _LOG.info(
            f"resuming the re-derivation of {target.fqn} (an earlier apply stopped"
            + (f"; {len(done)} partitions were done)" if done else ")")
        )
        self._rederive(target, skip=done)

    def _batch(self, client: Client, target: ObjectRef, plan: RebuildPlan, batches: _Batches) -> None:
        """The partitions that fit in this hold of the gates (the caller holds them: nothing can insert meanwhile),
        each group read from the source once; a new version's partitions are checked before its cut-over (in
        place, the target's own parity check runs as usual): the one sequence of a rebuild run
        (:func:`~chmv_assets.engine.rebuild.executor.run_plan`), on the apply's hold."""
        assert self.hold is not None  # the caller's
        while (steps := batches.take(self.hold)) is not None:
            started = time.monotonic()
            batch = replace(plan, steps=steps)
            owner = f"chmv apply {self.id}"
            hold = RunHold(self.clickhouse, plan.gates, owner, client=client)
            with quiet():  # the batch's own messages are details: the apply reports the re-derivation
                run_plan(batch, self.loaded, hold, stager=self.stager, owner=owner, verify=self._verifier(target))
            if plan.live == target and target in self.progress:
                journal.record_rederived(
                    client, target, self.progress[target], [s.key or "all" for s in steps], self.id
                )
            batches.ran(steps, time.monotonic() - started)
            for _ in steps:
                crash_point("lifecycle:partition")

    def _verifier(self, target: ObjectRef) -> Verifier[None] | None:
        """How an apply verifies what it rebuilt: the parity of the partitions just rebuilt into a new version (and
        in place with ``check_in_place``), against the new SELECT over the same source rows, in one recompute under
        the same hold of the gates (:func:`~chmv_assets.engine.health.parity.verify_rebuilt`); each must pass, else
        the apply stops before the swap (the old version stays live)."""
        if not self.parity:
            return None

        def verify(client: Client, plan: RebuildPlan, results: Sequence[StepResult]) -> None:
            if not (self.check_in_place or plan.live != target):
                return
            checked = replace(plan, steps=tuple(s for s in plan.steps if s.engine != Engine.REFRESH))
            if not checked.steps:
                return
            for result in verify_rebuilt(client, self.loaded, checked, results):
                if not result.within_tolerance:
                    raise LifecycleError(f"parity failed, apply stopped: {result.describe()}")
                self.report.parity_checked += 1

        return verify

    # -- new versions ---------------------------------------------------------------------------------

    def _new_version(self, change: Change) -> None:
        target, beside = change.ref, change.next_ref
        assert beside is not None
        with self._gated(target) as client:  # from the copies on, they feed the new version with every new row
            journal.record(client, "new_version", target, journal.BUILDING, self.id)
            for sql in discard_beside_sql(self.project, target, beside, change.views):  # a killed apply's leftover
                self._run(client, sql)
            for sql in change.statements:
                self._run(client, sql)
            if self._has_rows(client, target):  # the chain below re-derives from the new version once swapped
                for ref in downstream_targets(self.loaded, target):
                    self.progress[ref] = journal.record(client, "rederive", ref, journal.PENDING, self.id)
        crash_point("lifecycle:cut_in")
        self.pause(f"cut-in {beside.fqn}")
        self._rederive(target, writes=beside)
        self.pause(f"built {beside.fqn}")
        self._cut_over(change)
        self.rederived.add(target)

    def _cut_over(self, change: Change) -> None:
        """Under the gates: exchange, each MV to its new SELECT, the copies dropped; the old version kept aside."""
        target, beside = change.ref, change.next_ref
        assert beside is not None
        with self._gated(target, target) as client:
            live_views = existing_objects(client, [v for v, _ in change.views])
            exchange, *views = cut_over_sql(self.project, target, beside, change.views, live_views)
            seen = races.watch(client, triggers_of(self.project, target))
            self._run(client, exchange)
            crash_point("lifecycle:exchanged")
            for sql in views:
                self._run(client, sql)
            raced = self._raced_partitions(client, target, seen)
            journal.record(client, "new_version", target, journal.SWAPPED, self.id)
            version = journal.record(client, "rederive", target, journal.PENDING if raced else journal.DONE, self.id)
            if raced:
                self.progress[target] = version
            self._keep_old(beside, target, client)
        self._changed(target)
        if raced:  # writers chmv does not hold: their rows went through the old SELECT into the new version
            _LOG.info(
                f"  rows reached {target.fqn} between the exchange and its new SELECT in {', '.join(raced)}: "
                "re-deriving those partitions"
            )
            self._rederive(target, only=set(raced))

    def _raced_partitions(self, client: Client, target: ObjectRef, seen: races.Watch) -> list[str]:
        """The partitions of ``target`` whose sources received rows since ``seen`` (none under chmv's gates)."""
        if not races.new_parts(client, seen):
            return []
        rederive = rederive_now(client, self.loaded, target, root=self.root)
        if rederive is None:
            return []
        steps = rederive.plan.steps
        plan = rederive.plan
        raced = races.raced_windows(
            client, seen, race_ranges(self.project, target, plan.scheme, [s.window for s in steps], zone=plan.zone)
        )
        return [steps[i].key or "all" for i in raced]

    def _keep_old(self, beside: ObjectRef, target: ObjectRef, client: Client | None = None) -> None:
        """The replaced version renamed aside (on ``client`` if given), then the new version's journal done."""
        if client is None:
            with self._gated(None) as opened:
                self._keep_old(beside, target, opened)
            return
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
        old = ObjectRef(database=target.database, name=f"{old_version_ref(target).name}_{stamp}")
        if existing_objects(client, [beside]):
            self._run(client, keep_old_sql(self.project, target, beside, old))
            _LOG.info(f"  the replaced version of {target.fqn} is kept as {old.fqn} (chmv plan --allow-drop drops it)")
        journal.record(client, "new_version", target, journal.DONE, self.id)

    # -- a killed apply's work ------------------------------------------------------------------------

    def _resume(self, entries: list[journal.Entry]) -> None:
        """Finish what a killed apply left in the journal; what this plan re-derives anyway waits for the plan."""
        if not entries:
            return
        versions = {c.ref for c in self.plan.changes if c.action == Action.NEW_VERSION}
        todo = {e.target for e in entries if e.kind == "rederive"}
        for entry in entries:
            target = entry.target
            if entry.kind != "new_version" or (entry.phase == journal.BUILDING and target in versions):
                continue  # a version still to build is built again from scratch by the plan
            if entry.phase == journal.SWAPPED:
                self._keep_old(next_version_ref(target), target)
            else:  # killed inside the cut-over: the exchange is done, the MVs may not be
                self._finish_swap(target)
                todo |= {target, *downstream_targets(self.loaded, target)}
            self.report.resumed.append(f"the cut-over of {target.fqn}")
        planned = self._planned_rederivations()
        depth = self.loaded.graph.depth
        for target in sorted(todo - planned, key=lambda r: (depth.get(r.fqn, 0), r.fqn)):  # upstream first
            self._finish_rederive(target)
            self.report.resumed.append(f"the re-derivation of {target.fqn}")

    def _planned_rederivations(self) -> set[ObjectRef]:
        """Targets this plan re-derives: those whose SELECT or version changes, and the chains below them."""
        planned = set()
        for change in self.plan.changes:
            if change.action in (Action.NEW_VERSION, Action.REDERIVE):
                planned.add(change.ref)
            elif change.kind == "view" and change.action in REDERIVING:
                planned.add(self.project.views[change.ref].writes_to)
        return planned | {d for t in planned for d in downstream_targets(self.loaded, t)}

    def _finish_swap(self, target: ObjectRef) -> None:
        """A killed cut-over: the copies dropped, the MVs on their new SELECT, the replaced version kept aside."""
        views = self.project.views_into(target)
        with self._gated(target, target) as client:
            live = existing_objects(client, [v.ref for v in views])
            for sql in finish_swap_sql(self.project, target, [(v.ref, next_version_ref(v.ref)) for v in views], live):
                self._run(client, sql)
            for ref in (target, *downstream_targets(self.loaded, target)):  # rows of the old SELECT since the kill
                self.progress[ref] = journal.record(client, "rederive", ref, journal.PENDING, self.id)
            self._keep_old(next_version_ref(target), target, client)
        self._changed(target)


@dataclass
class _Hold:
    """The write gates held and the client opened after them, for as many steps as fit (see :meth:`_Apply._gated`)."""

    gates: frozenset[ObjectRef]
    client: Client
    stack: ExitStack
    since: float
    groups: int = 0

    @property
    def age(self) -> float:
        return time.monotonic() - self.since


class _Batches:
    """Which partitions of a re-derivation to rebuild next: as many as one hold of the gates may take.

    A hold lasts about ``seconds`` at most (at least one group per hold). Each group is as many partitions as the
    rate (source rows per second) says fit in the rest of the hold: the rate measured by the groups so far, or
    before the first one :data:`PRIOR_ROWS_PER_SECOND` where the plan estimated every partition's rows (one group
    for a history that fits in one hold: the source is read once); with a row count unknown the first group is
    one partition, which measures the rate. A group is read from the source once
    (:func:`chmv_assets.engine.rebuild.steps.run_steps`).
    """

    #: The rate assumed before the first group is measured: a third of what one MV inserts on the embedded engine
    #: on two cores (~3M rows/s measured), so only an MV several times heavier overruns its first hold.
    PRIOR_ROWS_PER_SECOND = 1_000_000.0

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.steps: list[PartitionStep] = []
        self.weights: dict[str | None, float] = {}
        self.rate: float | None = None
        self.last: str = "(all)"

    def start(self, rederive: Rederive) -> None:
        """Every partition of ``rederive`` that is not deferred, weighed by the source rows it reads (the mean where
        unknown)."""
        self.steps = [s for s in rederive.plan.steps if s.engine != Engine.DEFERRED]
        known = [p.rows for p in rederive.partitions if p.rows]
        default = sum(known) / len(known) if known else 1.0
        self.weights = {p.partition: float(p.rows or default) for p in rederive.partitions}
        if rederive.partitions and len(known) == len(rederive.partitions):
            self.rate = self.PRIOR_ROWS_PER_SECOND

    @property
    def done(self) -> bool:
        return not self.steps

    def take(self, hold: _Hold) -> tuple[PartitionStep, ...] | None:
        """The next group in ``hold``, or None when the hold is over (its time is spent, or nothing is left)."""
        if not self.steps or (hold.groups and hold.age >= self.seconds):
            return None
        count = 1
        if self.rate is not None:
            budget = (self.seconds - hold.age) * self.rate
            weight = self.weights.get(self.steps[0].key, 1.0)
            while count < len(self.steps) and weight + self.weights.get(self.steps[count].key, 1.0) <= budget:
                weight += self.weights.get(self.steps[count].key, 1.0)
                count += 1
        group, self.steps = tuple(self.steps[:count]), self.steps[count:]
        self.last = group[-1].key or "(all)"
        hold.groups += 1
        return group

    def ran(self, group: tuple[PartitionStep, ...], seconds: float) -> None:
        """A group took ``seconds``: the rate of the next ones."""
        self.rate = sum(self.weights.get(s.key, 1.0) for s in group) / max(seconds, 1e-3)
