"""The one rebuild path: one run observes, plans, fills and swaps, and verifies what it rebuilt, on one hold.

A run (:func:`run_rebuild`: the Dagster target ops, recovery's runs, ``chmv rebuild``) takes its hold once
(:class:`~chmv_assets.engine.rebuild.hold.RunHold`: the write gates of the target's triggers, then one client) and,
on it: observes the server (the coverage probed once, the changes waiting for ``chmv apply`` read once) and plans
(:func:`~chmv_assets.engine.rebuild.planner.observe_and_plan`: frozen, printable data); records the partitions the
plan defers; takes a lease per partition on the server (:mod:`chmv_assets.engine.rebuild.leases`: one run per
partition, whatever the hosts; a killed run's shadows are dropped first); hands each engine its partitions
(:mod:`chmv_assets.engine.rebuild.engines`: the source table's, the landing zone's through Spark), stream consumers
writing an open partition paused around its swap (:mod:`chmv_assets.engine.rebuild.consumers`); then releases the
gates and verifies what it rebuilt on the same client (the caller's verifier: parity,
:func:`chmv_assets.engine.health.parity.verify_rebuilt`). :func:`run_plan` is that sequence for a plan made
before (``chmv apply``'s batches, under gates it holds; the repair of a load).

The hold is let go only where it must not be kept: while Spark stages landing rows (no gate held during Spark work),
while a read that found no room on the server under the gates (:class:`~chmv_assets.errors.NoRoomUnderGate`, nothing of
that read is left) waits for room without them, and while another run holds a partition's lease; the run takes it
again after. So ingestion into the sources is never held by a rebuild waiting for merges, Spark or another run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Generic, TypeVar

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import PartitionWindow
from chmv_assets.engine.catalog import live_table
from chmv_assets.engine.clients import ClientFactory
from chmv_assets.engine.clock import session_zone, wall_now
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.ingest.cutoff import current_watermark, cutoff_of, source_gate
from chmv_assets.engine.pacing.pacer import pacer_for
from chmv_assets.engine.rebuild import consumers, deferrals, leases
from chmv_assets.engine.rebuild.deferrals import Deferral
from chmv_assets.engine.rebuild.engines import ENGINES, EngineRun, RebuildEngine, Stager, StepResult
from chmv_assets.engine.rebuild.hold import RunHold
from chmv_assets.engine.rebuild.leases import Holder, rebuild_lease
from chmv_assets.engine.rebuild.planner import (
    Engine,
    EngineOption,
    Observations,
    PartitionStep,
    RaceRules,
    RebuildPlan,
    downstream_targets,
    observe_and_plan,
    plan_from_source,
    plan_rebuild,
    triggers_of,
    windows_covering,
)
from chmv_assets.engine.rebuild.progress import Progress, RunReport, Tally
from chmv_assets.engine.rebuild.steps import with_damage, written_partitions
from chmv_assets.engine.statements import kill_filling
from chmv_assets.errors import ChmvError, LeaseHeld, NoRoomUnderGate, RebuildDeferred, RebuildRefused, ServerBusy
from chmv_assets.sql.rebuild_sql import drop_shadow_sql, run_of_shadow, shadows_pattern

__all__ = [
    "Progress",
    "RebuildRun",
    "RunReport",
    "Stager",
    "StepResult",
    "Verifier",
    "execute",
    "plan_for",
    "rebuild_partitions",
    "repair_interrupted_load",
    "run_plan",
    "run_rebuild",
]

_LOG = logging.getLogger(__name__)

V = TypeVar("V")

#: What verifies a run's rebuilt partitions, on the run's client once the gates are released: the plan and its
#: results in, its verdicts out (:func:`chmv_assets.engine.health.parity.verify_rebuilt`).
Verifier = Callable[[Client, RebuildPlan, Sequence[StepResult]], V]


@dataclass(frozen=True)
class RebuildRun(Generic[V]):
    """What one run did: its plan, a result per partition rebuilt (in the plan's order), and its verifier's verdicts
    (None: not verified)."""

    plan: RebuildPlan
    results: list[StepResult]
    verified: V | None = None


def run_rebuild(
    clickhouse: ClientFactory,
    loaded: LoadedProject,
    target: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    *,
    engine: EngineOption = "auto",
    root: Path | None = None,
    stager: Stager | None = None,
    force: bool = False,
    owner: str = "chmv",
    engines: Mapping[str | None, str] | None = None,
    verify: Verifier[V] | None = None,
    report: RunReport | None = None,
) -> RebuildRun[V]:
    """The one rebuild path: plan and run the rebuild of ``windows`` of ``target`` on one hold, exact while ingestion
    keeps loading its sources, then verify what it rebuilt (see the module).

    Args:
        clickhouse: Opens the run's client (once, after the gates; again only where the hold is let go).
        windows: The partitions (``[None]`` for an unpartitioned target).
        engine: ``auto``, ``clickhouse`` or ``spark`` (see :func:`chmv_assets.engine.rebuild.planner.plan_rebuild`).
        root: Landing zone root; default from the configuration.
        stager: Provider of staged landing rows; needed only if a step uses Spark.
        force: Rebuild partitions coverage refuses from the source, and swap even where it shrinks them; rebuild
            partitions still open to writers chmv does not control now.
        owner: Who runs it (named to another run that waits for one of its partitions).
        engines: Per partition key, the engine decided before (a recovery run's verdict): pinned, not chosen again.
        verify: Verifies the rebuilt partitions on the run's client (the Dagster op's checks, ``chmv rebuild``'s
            parity); None: not verified.
        report: Told of the plan, then of each partition as it is swapped in, with the run's progress (the Dagster
            op's materialization per partition: :class:`~chmv_assets.engine.rebuild.progress.RunReport`).

    Raises:
        RebuildRefused: A partition's rows live neither in the source table nor in the landing zone.
        ShrinkRefused: A rebuilt partition would hold fewer rows than the live one (earlier ones stay swapped).
        RebuildDeferred, LeaseHeld, RacedWrites: see :func:`run_plan`.
    """
    root = root or landing.landing_dir(loaded)
    gates = triggers_of(loaded.project, target)
    with RunHold(clickhouse, gates, f"{owner}: rebuild of {target.fqn}") as hold:
        plan = observe_and_plan(
            hold.client, loaded, target, windows, engine=engine, root=root, force=force, engines=engines
        )
        return run_plan(plan, loaded, hold, stager=stager, owner=owner, verify=verify, report=report)


def rebuild_partitions(
    clickhouse: ClientFactory,
    loaded: LoadedProject,
    target: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    *,
    engine: EngineOption = "auto",
    root: Path | None = None,
    stager: Stager | None = None,
    force: bool = False,
    owner: str = "chmv",
) -> tuple[RebuildPlan, list[StepResult]]:
    """:func:`run_rebuild` without a verifier: the plan and its results."""
    run: RebuildRun[None] = run_rebuild(
        clickhouse, loaded, target, windows, engine=engine, root=root, stager=stager, force=force, owner=owner
    )
    return run.plan, run.results


def plan_for(
    clickhouse: ClientFactory,
    loaded: LoadedProject,
    target: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    *,
    engine: EngineOption = "auto",
    root: Path | None = None,
    force: bool = False,
    one_read: bool = False,
    engines: Mapping[str | None, str] | None = None,
) -> RebuildPlan:
    """Observe the server (under the trigger gates, coverage included) and plan; nothing is changed (``chmv rebuild
    --dry-run``).

    A plan may refuse partitions (``plan.refused``); :func:`execute` then raises before changing anything.
    ``one_read`` and ``engines`` (engines decided before, per partition) as in
    :func:`~chmv_assets.engine.rebuild.planner.plan_rebuild`.
    """
    gates = triggers_of(loaded.project, target)
    with source_gate(gates, holder=f"planning the rebuild of {target.fqn}"), clickhouse.get_client() as client:
        return observe_and_plan(
            client, loaded, target, windows, engine=engine, root=root, force=force, one_read=one_read, engines=engines
        )


def execute(
    plan: RebuildPlan,
    loaded: LoadedProject,
    clickhouse: ClientFactory | None = None,
    *,
    client: Client | None = None,
    stager: Stager | None = None,
    cutoffs: dict[ObjectRef, datetime | None] | None = None,
    owner: str = "chmv",
) -> list[StepResult]:
    """Run every step of a plan made before (:func:`run_plan`, on a hold of its own or on the caller's ``client``);
    results in the plan's partition order.

    Args:
        clickhouse: Opens the run's client, after the gates (unless ``client`` is given); with ``client`` too, it
            renews the leases from a thread of its own.
        client: An open client whose gates the caller already holds (``chmv apply``, the repair of a load).
        stager, cutoffs, owner: As :func:`run_plan`.
    """
    hold = RunHold(clickhouse, plan.gates, f"{owner}: rebuild of {plan.target.fqn} (run {plan.run})", client=client)
    with hold:
        return run_plan(plan, loaded, hold, stager=stager, cutoffs=cutoffs, owner=owner).results


def run_plan(
    plan: RebuildPlan,
    loaded: LoadedProject,
    hold: RunHold,
    *,
    stager: Stager | None = None,
    cutoffs: Mapping[ObjectRef, datetime | None] | None = None,
    owner: str = "chmv",
    verify: Verifier[V] | None = None,
    report: RunReport | None = None,
) -> RebuildRun[V]:
    """Run every step of ``plan`` on the run's ``hold``, then verify what was rebuilt: the one sequence of every
    caller's rebuild; results in the plan's partition order.

    The partitions run under a lease each on the server, every read is checked for racing writes
    (:mod:`chmv_assets.engine.rebuild.steps`), stream consumers writing an open partition are paused around its swap,
    and deferred partitions are recorded for recovery (:mod:`chmv_assets.engine.rebuild.deferrals`). ``verify`` runs
    once every partition is swapped, on the hold's client with the gates released (a caller's gates stay held:
    ``chmv apply`` verifies a batch under the hold that rebuilt it).

    Args:
        plan: From the planner.
        loaded: The project the plan was made from.
        hold: The run's hold (taken, or taken here).
        stager: Provider of staged rows for Spark steps.
        cutoffs: Fixed cutoffs per trigger for Spark steps, instead of reading the watermarks.
        owner: Who runs it, as another run waiting for a partition is told (``dagster run <id>``, ``chmv rebuild``).
        verify: Verifies the partitions rebuilt (:data:`Verifier`); its verdicts are the run's ``verified``.
        report: Told of the plan (refused plans are not run, nor told), then of each partition as it is swapped in for good,
            with the run's :class:`~chmv_assets.engine.rebuild.progress.Progress` (also logged: ``k/n partitions,
            elapsed, ~time left``). A partition that fails, is refused or deferred is never reported swapped.

    Raises:
        RebuildRefused: The plan refuses partitions (nothing is run).
        RebuildDeferred: Every partition of the plan is deferred (recorded; nothing else is run).
        LeaseHeld: Another run holds a partition (nothing is run).
        ShrinkRefused: A step's swap would shrink its partition (see :mod:`chmv_assets.engine.rebuild.shrink_guard`).
        RacedWrites: Writes kept racing a partition through every read (see :mod:`chmv_assets.engine.rebuild.steps`);
            the partitions an attempt swapped in while a write raced it are recorded for recovery (as deferrals due
            now: :mod:`chmv_assets.engine.rebuild.deferrals`).
    """
    _LOG.info(plan.describe())
    if plan.refused:
        raise RebuildRefused(plan.refusal())
    if report is not None:
        report.planned(plan)
    runnable = _record_deferrals(plan, hold)
    results: list[StepResult] = []
    verified: V | None = None
    try:
        with _leased(plan, loaded, hold, runnable, owner, results):
            tally = Tally(plan.target.fqn, len(runnable), report)
            run = EngineRun(plan, loaded, hold, stager, cutoffs, owner, tally.swapped)
            for engine, steps in _by_engine(runnable):
                results += _fill(run, engine, steps)
            if verify is not None:
                hold.release_gates()
                with hold.get_client() as client:
                    verified = verify(client, plan, _ordered(plan, results))
    except ChmvError as failed:
        if not failed.damaged:
            raise
        raise _record_damage(plan, hold, failed) from None
    return RebuildRun(plan, _ordered(plan, results), verified)


def _ordered(plan: RebuildPlan, results: list[StepResult]) -> list[StepResult]:
    order = {s.key: i for i, s in enumerate(plan.steps)}
    return sorted(results, key=lambda r: order.get(r.partition, 0))


def _by_engine(steps: Sequence[PartitionStep]) -> list[tuple[RebuildEngine, list[PartitionStep]]]:
    """The steps per engine implementation, in :data:`~chmv_assets.engine.rebuild.engines.ENGINES`' order."""
    groups: dict[int, tuple[RebuildEngine, list[PartitionStep]]] = {}
    order = {id(engine): i for i, engine in reversed(list(enumerate(ENGINES.values())))}
    for step in steps:
        engine = ENGINES.get(Engine(step.engine))
        if engine is None:
            raise ChmvError(f"{step.key or '(whole table)'}: no engine runs {step.engine!r} partitions")
        groups.setdefault(id(engine), (engine, []))[1].append(step)
    return [groups[k] for k in sorted(groups, key=lambda k: order[k])]


def _fill(run: EngineRun, engine: RebuildEngine, steps: list[PartitionStep]) -> list[StepResult]:
    """``engine``'s partitions: made ready, then read and swapped under the hold, stream consumers paused."""
    fill = engine.prepare(run, steps)
    try:

        def swap(c: Client, todo: list[PartitionStep], damaged: frozenset[str | None]) -> list[StepResult]:
            with _paused(c, run.loaded, run.plan, todo):
                return fill.run(c, todo, damaged)

        return _gated(run.plan, run.hold, steps, swap, run.owner)
    finally:
        fill.close()


def _record_deferrals(plan: RebuildPlan, hold: RunHold) -> list[PartitionStep]:
    """Record the plan's deferred partitions for recovery; the steps to run now.

    Raises:
        RebuildDeferred: Every partition of the plan is deferred.
    """
    if plan.deferred:
        with hold.get_client() as c:
            deferrals.record(
                c, [Deferral(plan.target, s.key or "all", s.closes_at or datetime.max, s.reason) for s in plan.deferred]
            )
        _LOG.info(plan.deferral())
    runnable = [s for s in plan.steps if s.engine != Engine.DEFERRED]
    if not runnable:
        raise RebuildDeferred(
            plan.deferral() + "\nNothing was rebuilt now; recovery requests each partition once it "
            "closes (or rebuild it now with force)."
        )
    return runnable


@contextmanager
def _leased(
    plan: RebuildPlan,
    loaded: LoadedProject,
    hold: RunHold,
    steps: Sequence[PartitionStep],
    owner: str,
    results: Sequence[StepResult],
) -> Iterator[None]:
    """The leases of ``steps`` held for the block, renewed from a thread of their own, and released at its end with
    the deferrals of what was rebuilt settled (:func:`_settled`); a killed run's leftovers tidied once they are held
    (:func:`_tidy`)."""
    settings = loaded.config.rebuild
    me = Holder(owner, plan.run)
    held = _claim(
        hold,
        [rebuild_lease(plan.live.fqn, s.key) for s in steps],
        me,
        settings.lease_ttl_seconds,
        settings.lease_wait_seconds,
    )
    try:
        _tidy(hold.client, loaded, plan)
        with leases.renewed(hold.clickhouse, held, me, settings.lease_ttl_seconds):
            yield
    finally:
        if held:
            with hold.get_client() as c:
                try:
                    _settled(c, plan, results)
                finally:
                    leases.release(c, held, me)


def _claim(hold: RunHold, keys: list[str], me: Holder, ttl: float, wait: float) -> dict[str, int]:
    """The leases ``keys``, claimed on the hold's client; where another run holds one, waited for without the hold
    (that run may need the gates to finish) on a client of its own, up to ``wait`` seconds (a caller's hold is
    kept: it waits on it)."""
    if hold.given:
        return leases.acquire(hold.client, keys, me, ttl=ttl, wait=wait)
    try:
        return leases.acquire(hold.client, keys, me, ttl=ttl, wait=0)
    except LeaseHeld:
        hold.release()
    assert hold.clickhouse is not None
    with hold.clickhouse.get_client() as client:
        return leases.acquire(client, keys, me, ttl=ttl, wait=wait)


def _record_damage(plan: RebuildPlan, hold: RunHold, failed: ChmvError) -> ChmvError:
    """Record the partitions a raced swap may have damaged (``failed.damaged``, whatever else stopped the run) as
    deferrals due now, so recovery rebuilds them (and the next successful rebuild of each settles it,
    :func:`_settled`); the error, saying so."""
    keys = [key or "all" for key in failed.damaged]
    with hold.get_client() as c:
        now = wall_now(c)
        reason = f"raced writes: a swap may have lost rows (run {plan.run})"
        deferrals.record(c, [Deferral(plan.target, key, now, reason) for key in keys])
    _LOG.warning(f"{plan.target.fqn}: recorded for recovery, may have lost rows: {', '.join(keys)}")
    failed.args = (
        f"{failed} Recorded for recovery: the recovery sensor rebuilds {', '.join(keys)}; a rebuild by hand settles "
        "the record too.",
        *failed.args[1:],
    )
    return failed


def _tidy(client: Client, loaded: LoadedProject, plan: RebuildPlan) -> None:
    """What interrupted runs left behind, once this run holds its leases: their shadows of this table (and the
    statements still filling them, on a server) are dropped, and stream consumers they paused are resumed."""
    shadows = [
        str(r[0])
        for r in client.query(
            "SELECT name FROM system.tables WHERE database = {db:String} AND match(name, {pattern:String})",
            parameters={"db": plan.live.database, "pattern": shadows_pattern(plan.live)},
        ).result_rows
    ]
    runs = leases.live_runs(client, "rebuild:") | {plan.run} if shadows or plan.consumers else {plan.run}
    stale = [ObjectRef(database=plan.live.database, name=s) for s in shadows if run_of_shadow(s) not in runs]
    if stale:
        kill_filling(client, [s.name for s in stale])
        for shadow in stale:
            client.command(drop_shadow_sql(shadow))
        _LOG.info(f"dropped {len(stale)} shadow(s) left by interrupted runs: {', '.join(s.name for s in stale)}")
    consumers.resume_leftovers(client, loaded.project, plan.consumers, runs)


def _settled(client: Client, plan: RebuildPlan, results: Sequence[StepResult]) -> None:
    """Deferrals of the partitions this run rebuilt are done."""
    done = deferrals.settle(client, plan.target, [r.partition for r in results])
    if done:
        _LOG.info(f"{plan.target.fqn}: deferred partitions now rebuilt: {', '.join(done)}")


def _gated(
    plan: RebuildPlan,
    hold: RunHold,
    steps: Sequence[PartitionStep],
    run: Callable[[Client, list[PartitionStep], frozenset[str | None]], list[StepResult]],
    owner: str,
) -> list[StepResult]:
    """``run`` the steps on the hold, its gates held for the reads and swaps only: a read that finds no room on the
    server under them (pacing would wait) releases the hold, waits for room without it, and the steps left run again
    under it (read from scratch: nothing read under the earlier hold is used).

    With a caller's hold (``chmv apply``, a load's repair) the steps run on its client, paced as every insert.

    A partition a hold swapped in while writes raced it stays damaged through the next holds until one swaps it in
    clean (``run``'s third argument); an error names it in ``damaged``."""
    if hold.given:
        return run(hold.client, list(steps), frozenset())
    assert hold.clickhouse is not None
    results: list[StepResult] = []
    left = list(steps)
    damaged: set[str | None] = set()
    started = time.monotonic()
    names = ", ".join(g.fqn for g in plan.gates) or "(none)"
    while True:
        if not hold.held:
            hold.holder = f"{owner} {_keys(left)} (run {plan.run}): reading the sources and swapping"
        client = hold.client
        try:
            with pacer_for(client, plan.races.pacing).unhurried(f"the write gates of {names}"):
                return results + run(client, left, frozenset(damaged))
        except NoRoomUnderGate as busy:
            results += busy.done
            done = {r.partition for r in busy.done}
            damaged = (damaged | set(busy.damaged)) - done
            left = [s for s in left if s.key not in done]
            _LOG.info(f"{busy}; {_keys(left)} left")
        hold.release()
        if time.monotonic() - started > plan.races.pacing.max_wait_seconds:
            no_room = ServerBusy(
                f"{plan.target.fqn} {_keys(left)}: the server had no room for the read under the write gates of "
                f"{names} for [pacing] max_wait_seconds={plan.races.pacing.max_wait_seconds:g}; nothing of these "
                "partitions was written now. Run it again once merges have caught up."
            )
            raise with_damage(no_room, sorted(damaged, key=str))
        with hold.clickhouse.get_client() as c:  # no gate held: ingestion into the sources goes on meanwhile
            pacer_for(c, plan.races.pacing).wait_for_room(
                f"{plan.target.fqn} {_keys(left)}: waiting without the write gates of {names}",
                [plan.live],
                written_partitions(c, plan.live, left),
            )


def _keys(steps: Sequence[PartitionStep]) -> str:
    keys = [s.key or "(whole table)" for s in steps]
    return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


@contextmanager
def _paused(client: Client, loaded: LoadedProject, plan: RebuildPlan, steps: Sequence[PartitionStep]) -> Iterator[None]:
    """The stream consumers writing an open partition of ``steps`` paused for the block."""
    paused = tuple(dict.fromkeys(c for s in steps for c in s.pause))
    if not paused:
        yield
        return
    with consumers.paused(client, loaded.project, paused, plan.run):
        yield


def repair_interrupted_load(
    client: Client,
    loaded: LoadedProject,
    source: ObjectRef,
    *,
    since: datetime | None,
    until: datetime | None,
    cutoff: datetime | None,
    root: Path,
    stager: Stager,
) -> list[str]:
    """Rebuild what a load that died during its insert may have left inconsistent; the caller holds the gate.

    The source now holds every row of the batch, but a block inserted just before the kill may be in
    the source without its MV output. Every partition of the source's direct targets that the batch's
    event-time range touches is rebuilt from the landing zone (``<= cutoff``) and the source (``> cutoff``);
    targets further down a chain are rebuilt from their upstream table (with one week of margin).
    """
    if since is None or until is None:
        return []
    project = loaded.project
    tolerance = loaded.config.ingestion.late_tolerance_minutes
    done: list[str] = []
    direct = list(dict.fromkeys(v.writes_to for v in project.views_from(source) if v.trigger == source))
    for target in direct:
        windows = windows_covering(loaded, target, since, until)
        observed = Observations(live=live_table(client, project, target), zone=session_zone(client))
        plan = plan_rebuild(loaded, target, windows, observed, engine="spark", root=root)
        cutoffs = {
            t: cutoff
            if t == source
            else cutoff_of(current_watermark(client, t, landing.time_column(loaded, t)), tolerance)
            for t in plan.gates
        }
        execute(plan, loaded, client=client, stager=stager, cutoffs=cutoffs)
        done += [f"{target.fqn}/{s.key or 'all'}" for s in plan.steps]
    chained = {d for t in direct for d in downstream_targets(loaded, t)} - set(direct)
    for ref in sorted(chained, key=lambda r: (loaded.graph.depth.get(r.fqn, 0), r.fqn)):
        windows = windows_covering(loaded, ref, since, until, margin=timedelta(days=7))
        races = RaceRules.of(loaded.config.rebuild, loaded.config.pacing)
        live, zone = live_table(client, project, ref), session_zone(client)
        plan = plan_from_source(loaded, ref, windows, live, zone=zone, races=races)
        execute(plan, loaded, client=client)
        done += [f"{ref.fqn}/{s.key or 'all'}" for s in plan.steps]
    return done
