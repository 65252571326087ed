"""The one executor of rebuild plans (see :mod:`chmv_assets.engine.rebuild.planner`; docs/rebuilds.md, "Backfill protocol").

ClickHouse steps: under the gates of the target's trigger sources, each partition is rebuilt from the
source table into its shadow and swapped in.

Spark steps, per target and range of partitions:

1. under the trigger sources' gates, read each one's ingestion watermark and take the cutoff
   ``C = watermark - late tolerance``; no row with event time ``<= C`` can be inserted into the
   source any more;
2. the stager (Spark) reads the landing files that can hold the range's rows with event time ``<= C``,
   applies the ingestion's cleaning (dedup by key) and writes Parquet staging, one folder per partition
   where the plan says so; nothing else of the rebuild runs in Spark;
3. under the gates again, per partition: ClickHouse runs the MV's OWN SELECT over
   ``file(staging) UNION ALL (source rows with event time > C)`` into the shadow and swaps it in.
   The source table is not re-inserted, so sibling MVs on it do not fire.

The gates are held for the read and the swap only: a read that finds no room on the server under them (pacing:
merges behind, parts near their limits) releases them (:class:`~chmv_assets.errors.NoRoomUnderGate`, nothing of that
read is left), waits for room without them and reads again, so ingestion into the sources is never held by a
rebuild waiting for merges.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import Column, ObjectRef
from chmv_assets.ddl.partitioning import PartitionWindow, window_instant
from chmv_assets.engine.catalog import live_table
from chmv_assets.engine.clients import ClientFactory
from chmv_assets.engine.clock import session_zone, wall_now
from chmv_assets.engine.drift import pending_refusals
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.ingest import staging_area as staging
from chmv_assets.engine.ingest.cutoff import crash_point, current_watermark, cutoff_of, source_gate
from chmv_assets.engine.pacing.pacer import pacer_for
from chmv_assets.engine.rebuild import backfills, consumers, deferrals, leases
from chmv_assets.engine.rebuild.backfills import Backfill
from chmv_assets.engine.rebuild.deferrals import Deferral
from chmv_assets.engine.rebuild.leases import Holder, rebuild_lease
from chmv_assets.engine.rebuild.planner import (
    Engine,
    EngineOption,
    Observations,
    PartitionStep,
    RaceRules,
    RebuildPlan,
    downstream_targets,
    observe,
    plan_from_source,
    plan_rebuild,
    triggers_of,
    windows_covering,
)
from chmv_assets.engine.rebuild.steps import RebuildResult, run_step, run_steps, with_damage, written_partitions
from chmv_assets.engine.statements import kill_filling
from chmv_assets.errors import (
    ChmvError,
    LandingZoneError,
    NoRoomUnderGate,
    RebuildDeferred,
    RebuildRefused,
    ServerBusy,
)
from chmv_assets.sql.rebuild_sql import drop_shadow_sql, run_of_shadow, shadows_pattern, staged_relation, window_zone

_LOG = logging.getLogger(__name__)


class Stager(Protocol):
    """A provider of staged landing rows (``spark.staging.SparkStager``): reads files, filters, dedups, writes Parquet."""

    def __call__(
        self,
        files: Sequence[str],
        columns: Sequence[str],
        time_column: str,
        keys: Sequence[str],
        out_dir: Path,
        **bounds: Any,
    ) -> None: ...


@dataclass
class StepResult:
    """What one step did (materialization metadata)."""

    target: str
    partition: str | None
    engine: str
    method: str
    rows_staged: int
    rows_written: int
    cutoff: datetime | None
    batch_id: str
    seconds: float
    rows_read: int = 0
    statements: list[str] = field(default_factory=list)
    attempts: int = 1


@dataclass
class _Staged:
    """The stager's output for one trigger source of a plan."""

    source: ObjectRef
    folder: Path
    columns: list[str]
    cutoff: datetime | None
    per_window: bool
    rows_read: int
    grain: str | None = None  # the windows' (a folder per UTC window of it: staging_area.window_keys)
    zone: str = "UTC"  # the zone whose instants the windows' bounds are, for this source's rows


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
    """Plan and run the rebuild of ``windows`` of ``target``, exact while ingestion keeps loading its sources.

    Args:
        clickhouse: Opens clients (per step group, after taking the gates).
        windows: The partitions (``[None]`` for an unpartitioned target).
        engine: ``auto``, ``clickhouse`` or ``spark`` (see :func:`chmv_assets.engine.rebuild.planner.plan_rebuild`).
        root: Landing zone root; default from the configuration.
        stager: Provider of staged landing rows; needed only if a step uses Spark.
        force: Rebuild partitions coverage refuses from the source, and swap even where it shrinks them; rebuild
            partitions still open to writers chmv does not control now.
        owner: Who runs it (named to another run that waits for one of its partitions).

    Raises:
        RebuildRefused: A partition's rows live neither in the source table nor in the landing zone.
        ShrinkRefused: A rebuilt partition would hold fewer rows than the live one (earlier ones stay swapped).
        RebuildDeferred, LeaseHeld, RacedWrites: see :func:`execute`.
    """
    root = root or landing.landing_dir(loaded)
    plan = plan_for(clickhouse, loaded, target, windows, engine=engine, root=root, force=force)
    return plan, execute(plan, loaded, clickhouse, stager=stager, owner=owner)


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
    """Observe the server (under the trigger gates, coverage included) and plan; nothing is changed.

    A plan may refuse partitions (``plan.refused``); :func:`execute` then raises before changing anything.
    ``one_read`` and ``engines`` (engines decided before, per partition) as in
    :func:`~chmv_assets.engine.rebuild.planner.plan_rebuild`.
    """
    gates = triggers_of(loaded.project, target)
    with source_gate(gates, holder=f"planning the rebuild of {target.fqn}"), clickhouse.get_client() as client:
        observations = observe(client, loaded, target, engine=engine, root=root, windows=windows)
        observations = replace(observations, pending=pending_refusals(client, loaded.project, target))
    return plan_rebuild(
        loaded, target, windows, observations, engine=engine, root=root, force=force, one_read=one_read, engines=engines
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
    """Run every step of ``plan``; results in the plan's partition order.

    The partitions run under a lease each on the server (:mod:`chmv_assets.engine.rebuild.leases`: one run per partition,
    whatever the hosts; a killed run's shadows are dropped first), every read is checked for racing writes
    (:mod:`chmv_assets.engine.rebuild.steps`), stream consumers writing an open partition are paused around its swap
    (:mod:`chmv_assets.engine.rebuild.consumers`), and deferred partitions are recorded for recovery
    (:mod:`chmv_assets.engine.rebuild.deferrals`).

    Args:
        plan: From the planner.
        loaded: The project the plan was made from.
        clickhouse: Opens a client per group of steps, after the gates (unless ``client`` is given); with ``client``
            too, it renews the leases from a thread of its own.
        client: An open client whose gates the caller already holds (``chmv apply``, the repair of a load).
        stager: Provider of staged rows for Spark steps.
        cutoffs: Fixed cutoffs per trigger for Spark steps, instead of reading the watermarks.
        owner: Who runs it, as another run waiting for a partition is told (``dagster run <id>``, ``chmv rebuild``).

    Raises:
        RebuildRefused: The plan refuses partitions (nothing is run).
        RebuildDeferred: Every partition of the plan is deferred (recorded; nothing else is run).
        LeaseHeld: Another run holds a partition (nothing is run).
        ShrinkRefused: A step's swap would shrink its partition (see :mod:`chmv_assets.engine.rebuild.shrink_guard`).
        RacedWrites: Writes kept racing a partition through every read (see :mod:`chmv_assets.engine.rebuild.steps`);
            the partitions an attempt swapped in while a write raced it are recorded for recovery (as deferrals due
            now: :mod:`chmv_assets.engine.rebuild.deferrals`).
    """
    if client is None and clickhouse is None:
        raise ValueError("execute needs a client factory or an open client")
    _LOG.info(plan.describe())
    if plan.refused:
        raise RebuildRefused(plan.refusal())
    connect: ClientFactory | None = _Open(client) if client is not None else clickhouse
    assert connect is not None
    runnable = _record_deferrals(plan, connect)
    settings = loaded.config.rebuild
    results: list[StepResult] = []
    try:
        with leases.holding(
            connect,
            [rebuild_lease(plan.live.fqn, s.key) for s in runnable],
            Holder(owner, plan.run),
            ttl=settings.lease_ttl_seconds,
            wait=settings.lease_wait_seconds,
            renewer=clickhouse,
            on_held=lambda c: _tidy(c, loaded, plan),
            on_release=lambda c: _settled(c, plan, results),
        ):
            results += _run_direct(plan, loaded, runnable, clickhouse, client, owner)
            spark_steps = [s for s in runnable if s.engine == Engine.SPARK]
            if spark_steps:
                results += _run_spark(plan, loaded, spark_steps, cutoffs, stager, clickhouse, client, owner)
    except ChmvError as failed:
        if not failed.damaged:
            raise
        raise _record_damage(plan, connect, failed) from None
    order = {s.key: i for i, s in enumerate(plan.steps)}
    return sorted(results, key=lambda r: order.get(r.partition, 0))


def _record_deferrals(plan: RebuildPlan, connect: ClientFactory) -> list[PartitionStep]:
    """Record the plan's deferred partitions for recovery; the steps to run now.

    Raises:
        RebuildDeferred: Every partition of the plan is deferred.
    """
    if plan.deferred:
        with connect.get_client() as c:
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


def _record_damage(plan: RebuildPlan, connect: ClientFactory, failed: ChmvError) -> ChmvError:
    """Record the partitions a raced swap may have damaged (``failed.damaged``, whatever else stopped the run) as
    deferrals due now, so recovery rebuilds them (and the next successful rebuild of each settles it,
    :func:`_settled`); the error, saying so."""
    keys = [key or "all" for key in failed.damaged]
    with connect.get_client() as c:
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


class _Open:
    """A client factory over one open client, which stays open after each use (a caller's)."""

    def __init__(self, client: Client):
        self.client = client

    @contextmanager
    def get_client(self, *, lock_timeout_seconds: float | None = None) -> Iterator[Client]:
        yield self.client


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


def _run_direct(
    plan: RebuildPlan,
    loaded: LoadedProject,
    steps: Sequence[PartitionStep],
    clickhouse: ClientFactory | None,
    client: Client | None,
    owner: str = "chmv",
) -> list[StepResult]:
    """The steps that read the source table (or refresh), under the gates, stream consumers paused where open; those
    that share a shadow read together (:func:`~chmv_assets.engine.rebuild.steps.run_steps`)."""
    direct = [s for s in steps if s.engine != Engine.SPARK]
    if not direct:
        return []

    def run(c: Client, todo: list[PartitionStep], damaged: frozenset[str | None]) -> list[StepResult]:
        of = {s.key: s for s in todo}
        with _paused(c, loaded, plan, todo):
            try:
                rebuilt = run_steps(c, loaded.project, plan, todo, damaged=damaged)
            except NoRoomUnderGate as busy:
                busy.done = [_direct_result(plan, of[r.partition], r) for r in busy.done]
                raise
        return [_direct_result(plan, step, r) for step, r in zip(todo, rebuilt, strict=True)]

    return _gated(plan, clickhouse, client, direct, run, f"{owner}: rebuild of {plan.target.fqn}")


def _gated(
    plan: RebuildPlan,
    clickhouse: ClientFactory | None,
    client: Client | None,
    steps: Sequence[PartitionStep],
    run: Callable[[Client, list[PartitionStep], frozenset[str | None]], list[StepResult]],
    owner: str,
) -> list[StepResult]:
    """``run`` the steps under the plan's gates, held for the reads and swaps only: a read that finds no room on the
    server under them (pacing would wait) releases them, waits for room without them, and the steps left run again
    under them (read from scratch: nothing read under the earlier hold is used).

    With ``client`` the caller holds the gates (``chmv apply``, a load's repair): the steps run on it, paced as
    every insert.

    A partition a hold swapped in while writes raced it stays damaged through the next holds until one swaps it in
    clean (``run``'s third argument); an error names it in ``damaged``."""
    if client is not None:
        return run(client, list(steps), frozenset())
    assert clickhouse is not None
    results: list[StepResult] = []
    left = list(steps)
    damaged: set[str | None] = set()
    started = time.monotonic()
    names = ", ".join(g.fqn for g in plan.gates) or "(none)"
    while True:
        holder = f"{owner} {_keys(left)} (run {plan.run}): reading the sources and swapping"
        with source_gate(plan.gates, holder=holder), clickhouse.get_client() as c:
            try:
                with pacer_for(c, plan.races.pacing).unhurried(f"the write gates of {names}"):
                    return results + run(c, left, frozenset(damaged))
            except NoRoomUnderGate as busy:
                results += busy.done
                done = {r.partition for r in busy.done}
                damaged = (damaged | set(busy.damaged)) - done
                left = [s for s in left if s.key not in done]
                _LOG.info(f"{busy}; {_keys(left)} left")
        if time.monotonic() - started > plan.races.pacing.max_wait_seconds:
            no_room = ServerBusy(
                f"{plan.target.fqn} {_keys(left)}: the server had no room for the read under the write gates of "
                f"{names} for [pacing] max_wait_seconds={plan.races.pacing.max_wait_seconds:g}; nothing of these "
                "partitions was written now. Run it again once merges have caught up."
            )
            raise with_damage(no_room, sorted(damaged, key=str))
        with clickhouse.get_client() as c:  # no gate held: ingestion into the sources goes on meanwhile
            pacer_for(c, plan.races.pacing).wait_for_room(
                f"{plan.target.fqn} {_keys(left)}: waiting without the write gates of {names}",
                [plan.live],
                written_partitions(c, plan.live, left),
            )


def _keys(steps: Sequence[PartitionStep]) -> str:
    keys = [s.key or "(whole table)" for s in steps]
    return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def _direct_result(plan: RebuildPlan, step: PartitionStep, r: RebuildResult) -> StepResult:
    return StepResult(
        plan.target.fqn,
        r.partition,
        str(step.engine),
        r.method,
        rows_staged=0,
        rows_written=r.rows_written,
        cutoff=None,
        batch_id="",
        seconds=r.seconds,
        statements=r.statements,
        attempts=r.attempts,
    )


@contextmanager
def _paused(client: Client, loaded: LoadedProject, plan: RebuildPlan, steps: Sequence[PartitionStep]) -> Iterator[None]:
    """The stream consumers writing an open partition of ``steps`` paused for the block."""
    paused = tuple(dict.fromkeys(c for s in steps for c in s.pause))
    if not paused:
        yield
        return
    with consumers.paused(client, loaded.project, paused, plan.run):
        yield


def _run_spark(
    plan: RebuildPlan,
    loaded: LoadedProject,
    steps: Sequence[PartitionStep],
    cutoffs: dict[ObjectRef, datetime | None] | None,
    stager: Stager | None,
    clickhouse: ClientFactory | None,
    client: Client | None,
    owner: str = "chmv",
) -> list[StepResult]:
    """The steps that read the landing zone: cutoffs under the gates, Spark staging without them, then the swaps."""
    if stager is None:
        raise ChmvError(
            f"{plan.target.fqn}: {len(steps)} partition(s) need Spark (the landing zone), "
            "but no Spark session is configured; give the run the pyspark resource"
        )
    assert plan.landing_root is not None
    _LOG.info(f"{plan.target.fqn}: {len(steps)} partition(s) from the landing zone (spark engine)")
    if cutoffs is None:
        with _session(plan, clickhouse, client, f"{owner}: reading the cutoffs of {plan.target.fqn}") as c:
            cutoffs = _read_cutoffs(c, loaded, plan, steps)
    return _run_spark_steps(plan, loaded, steps, cutoffs, stager, clickhouse, client, owner)


@contextmanager
def _session(
    plan: RebuildPlan, clickhouse: ClientFactory | None, client: Client | None, holder: str = ""
) -> Iterator[Client]:
    """The plan's gates and a client: the caller's (gates already held) or a new one opened after the gates."""
    if client is not None:
        yield client
        return
    assert clickhouse is not None
    with source_gate(plan.gates, holder=holder), clickhouse.get_client() as opened:
        yield opened


def _read_cutoffs(
    client: Client, loaded: LoadedProject, plan: RebuildPlan, steps: Sequence[PartitionStep]
) -> dict[ObjectRef, datetime | None]:
    """Per trigger, ``watermark - tolerance`` (a first watermark is established if there is none)."""
    tolerance = loaded.config.ingestion.late_tolerance_minutes
    windows = [s.window for s in steps]
    ends = [w.wall_end for w in windows if w is not None and w.wall_end is not None]
    cutoffs = {}
    for source in plan.gates:
        files = landing.list_files(plan.landing_root, source) if plan.landing_root else []
        newest = max((f.last_arrival for f in files), default=None)
        establish = max(ends) if ends and len(ends) == len(windows) else newest
        if establish is not None:
            establish += timedelta(minutes=tolerance)
        mark = current_watermark(client, source, landing.time_column(loaded, source), establish_at=establish)
        cutoffs[source] = cutoff_of(mark, tolerance)
    return cutoffs


def _run_spark_steps(
    plan: RebuildPlan,
    loaded: LoadedProject,
    steps: Sequence[PartitionStep],
    cutoffs: dict[ObjectRef, datetime | None],
    stager: Stager,
    clickhouse: ClientFactory | None,
    client: Client | None,
    owner: str = "chmv",
) -> list[StepResult]:
    """Stage each trigger's lake rows (Spark, no gate held), then swap each partition under the gates (the cutoffs
    stay true while they are released: a watermark never goes back)."""
    marks = sorted((k.fqn, str(v)) for k, v in cutoffs.items())
    batch_id = hashlib.sha1(f"{plan.target.fqn}|{[s.key for s in steps]}|{marks}".encode()).hexdigest()[:16]
    windows = [s.window for s in steps]
    staged = {
        r.source: _stage_source(
            loaded, plan, r.source, r.staged_per_window, windows, cutoffs.get(r.source), batch_id, stager
        )
        for r in steps[0].relations
    }
    crash_point("backfill:staged")
    cutoff = min((v for v in cutoffs.values() if v is not None), default=None)

    def run(c: Client, todo: list[PartitionStep], damaged: frozenset[str | None]) -> list[StepResult]:
        swapped: list[StepResult] = []
        with _paused(c, loaded, plan, todo):
            for step in todo:
                try:
                    swapped.append(_swap_staged(c, loaded, plan, step, staged, cutoff, batch_id, damaged))
                except NoRoomUnderGate as busy:
                    busy.done = swapped
                    raise
        return swapped

    results = _gated(plan, clickhouse, client, steps, run, f"{owner}: rebuild of {plan.target.fqn} from the lake")
    for st in staged.values():
        staging.remove(st.folder)
    return results


def _swap_staged(
    client: Client,
    loaded: LoadedProject,
    plan: RebuildPlan,
    step: PartitionStep,
    staged: dict[ObjectRef, _Staged],
    cutoff: datetime | None,
    batch_id: str,
    damaged: frozenset[str | None] = frozenset(),
) -> StepResult:
    """One Spark step: the MVs' SELECT over its staged rows and the source's after the cutoff, swapped in; its
    record (:mod:`chmv_assets.engine.rebuild.backfills`) kept."""
    started = time.monotonic()
    target = plan.target
    relations = {s: _relation(loaded, s, st, step.window) for s, st in staged.items()}
    r = run_step(client, loaded.project, plan, step, trigger_relation=relations.get, damaged=damaged)
    rows_staged = sum(staging.staged_rows(f) for st in staged.values() for f in _window_folders(st, step.window))
    backfills.record(client, Backfill(target, step.key or backfills.WHOLE, cutoff, batch_id, r.rows_written))
    _LOG.info(
        f"{target.fqn} {step.key or '(whole table)'}: {r.method}, {rows_staged} landing rows staged, "
        f"{r.rows_written} rows written, cutoff {cutoff}"
    )
    crash_point("backfill:swapped")
    return StepResult(
        target.fqn,
        step.key,
        str(step.engine),
        r.method,
        rows_staged,
        r.rows_written,
        cutoff,
        batch_id,
        time.monotonic() - started,
        sum(s.rows_read for s in staged.values()),
        r.statements,
        r.attempts,
    )


def _stage_source(
    loaded: LoadedProject,
    plan: RebuildPlan,
    source: ObjectRef,
    per_window: bool,
    windows: Sequence[PartitionWindow | None],
    cutoff: datetime | None,
    batch_id: str,
    stager: Stager,
) -> _Staged:
    table = loaded.project.table(source)
    if table is None:
        raise LandingZoneError(f"{source.fqn} is not defined in the DDL directory")
    assert plan.landing_root is not None
    tcol = landing.time_column(loaded, source)
    lateness = timedelta(minutes=loaded.config.ingestion.max_lateness_minutes)
    # the landing zone's event times are UTC (naive): the windows' instants, in the zone their rows are computed in
    zone = _window_zone(loaded, plan, table.column(tcol))
    since = min(_utc(w.start, zone) for w in windows if w is not None and w.start) if per_window else None
    before = max(_utc(w.end, zone) for w in windows if w is not None and w.end) if per_window else None
    upper = min(t for t in (before, cutoff) if t is not None) if (before or cutoff) else None
    files = landing.list_files(
        plan.landing_root, source, arrived_after=since, arrived_before=upper + lateness if upper is not None else None
    )
    columns, rows_read = landing.check_files(files, table)
    keys = landing.dedup_keys(loaded, source, columns)
    folder = staging.staging_dir("backfill", [plan.target, source], batch_id)
    _LOG.info(
        f"{plan.target.fqn}: Spark stages {source.fqn} from {len(files)} landing files ({rows_read} rows), "
        f"event time in [{since}, {before}) UTC and <= cutoff {cutoff}"
    )
    if files:
        stager(
            [f.path for f in files],
            columns,
            tcol,
            keys,
            folder,
            at_or_before=cutoff,
            since=since,
            before=before,
            partition_grain=plan.scheme.grain if per_window else None,
        )
    grain = str(plan.scheme.grain) if per_window and plan.scheme.grain is not None else None
    return _Staged(source, folder, columns, cutoff, per_window, rows_read, grain, zone)


def _window_zone(loaded: LoadedProject, plan: RebuildPlan, column: Column | None) -> str:
    """The zone the rows of a trigger (its time column ``column``) map into the plan's windows in (:func:`~chmv_assets.sql.rebuild_sql.window_zone`:
    the target column's, else the trigger column's, else the session's); UTC where the session is not known."""
    if not plan.zone:
        return "UTC"
    return window_zone(loaded.project.table(plan.target), plan.scheme, column, plan.zone)


def _utc(bound: datetime, zone: str) -> datetime:
    """A window bound as the naive UTC time the landing zone's event times are compared with."""
    return window_instant(bound, zone).astimezone(UTC).replace(tzinfo=None)


def _window_keys(st: _Staged, window: PartitionWindow | None) -> list[str] | None:
    """The staging sub-folders of ``window`` (None: the whole staging folder)."""
    if not st.per_window or window is None or window.start is None or window.end is None or st.grain is None:
        return None
    return staging.window_keys(window_instant(window.start, st.zone), window_instant(window.end, st.zone), st.grain)


def _window_folders(st: _Staged, window: PartitionWindow | None) -> list[Path]:
    keys = _window_keys(st, window)
    return staging.window_folders(st.folder, keys) if keys is not None else [st.folder]


def _relation(loaded: LoadedProject, source: ObjectRef, st: _Staged, window: PartitionWindow | None) -> str:
    """``(landing rows <= cutoff UNION ALL source rows > cutoff)`` standing in for the trigger table."""
    table = loaded.project.table(source)
    assert table is not None
    keys = _window_keys(st, window)
    if keys is not None:
        glob = staging.staged_glob(st.folder, keys)
    elif st.per_window:
        glob = str(st.folder / "*" / "*.parquet")
    else:
        glob = staging.staged_glob(st.folder)
    lake = staging.file_relation(glob, table, st.columns)
    return staged_relation(source, lake, st.columns, landing.time_column(loaded, source), st.cutoff)


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
