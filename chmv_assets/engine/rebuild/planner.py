"""The rebuild planner: what to do to rebuild partitions of a target, decided once, as frozen printable data.

One planner serves every caller (the target assets, the sensors' runs, the CLI, ``chmv apply``'s re-derivations, the
repair of an interrupted load). It takes a target, its partitions and options, plus the few facts it needs from
the server (:func:`observe`: the physical table and the coverage facts, one statement), and decides per
partition, from where its truth lives (:mod:`chmv_assets.engine.rebuild.coverage`), everything the steps and the
executor then only read:

- the engine (:func:`choose_engine`, the one rule): ``clickhouse`` (the MVs' own SELECT over the source table),
  ``spark`` (over landing-zone rows that Spark stages, united with the source rows after the ingestion cutoff), or
  ``refresh`` (a refreshable MV: the server recomputes it);
- the relation that stands in for each trigger source in the MV's SELECT, and the trigger rows its read covers
  (those whose arrival during the read races it);
- the shadow table, named for this run, and the statement creating it; the swap (``REPLACE PARTITION`` of the
  partition — ``DROP PARTITION`` if the shadow has none of its rows —, ``tuple()`` for an unpartitioned target or an
  MV's inner table, each partition of a partitioned table rebuilt whole, ``SYSTEM REFRESH VIEW``; never ``EXCHANGE``)
  and the predicate of the partition's rows; the race rules;
- the write gates to hold, and the targets further down a chain that read this one;
- who writes the triggers (:mod:`chmv_assets.ddl.writers`): a partition still open to writers chmv does not control
  is deferred until it closes (unless forced), a stream consumer writing an open partition is paused for its swap;
- a refusal, where neither the source table nor the landing zone holds a partition whose target rows a
  rebuild would lose (unless forced), or where the trigger is a stream (never read), and the shrink guard the
  executor applies before a swap.

:mod:`chmv_assets.engine.rebuild.executor` runs a plan; Spark is only a provider of staged rows there.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Literal, cast

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.config import PacingConfig, RebuildSettings
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef, Project, Table
from chmv_assets.ddl.partitioning import PartitionWindow, TargetPartitioning, target_reach, window_reach
from chmv_assets.ddl.writers import SourceWriters
from chmv_assets.engine.catalog import live_table
from chmv_assets.engine.clock import session_zone, wall_now
from chmv_assets.engine.drift import describe_foreign, foreign_writers, pending_refusals
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.ingest.cutoff import source_min_time
from chmv_assets.engine.pacing.backoff import backoff
from chmv_assets.engine.rebuild.coverage import (
    Coverage,
    Facts,
    Holding,
    SourceCoverage,
    Verdict,
    WindowCoverage,
    assess,
    probe,
)
from chmv_assets.engine.rebuild.rows import RowSource, rows_from
from chmv_assets.errors import ChmvError
from chmv_assets.sql.rebuild_sql import (
    TriggerRange,
    covered_rows,
    create_shadow_sql,
    partition_filter,
    partition_tuple,
    range_column,
    shadow_ref,
    trigger_range,
)

EngineOption = Literal["auto", "clickhouse", "spark", "file"]


class Engine(StrEnum):
    """Where the rows of a rebuilt partition come from."""

    CLICKHOUSE = "clickhouse"
    """The MVs' own SELECT over the source table's rows of the window."""
    SPARK = "spark"
    """The MVs' own SELECT over landing-zone rows staged by Spark (<= cutoff) and source rows (> cutoff)."""
    FILE = "file"
    """The MVs' own SELECT over landing-zone rows read by ClickHouse's ``file()`` (<= cutoff) and source rows."""
    REFRESH = "refresh"
    """A refreshable MV: ``SYSTEM REFRESH VIEW`` + ``SYSTEM WAIT VIEW``."""
    REFUSED = "refused"
    """Nothing: neither the source table nor the landing zone holds the partition's rows (see the reason)."""
    DEFERRED = "deferred"
    """Nothing yet: the partition is still open to writers chmv does not control; rebuilt once it closes."""


class Swap(StrEnum):
    """How the shadow replaces the live data (never ``EXCHANGE TABLES``: an MV without TO points at its inner table by
    UUID, so the old one would be dropped from under it, and an exchange is not replicated)."""

    REPLACE_PARTITION = "replace_partition"
    """``ALTER TABLE … REPLACE PARTITION <the step's partition> FROM shadow`` (``DROP PARTITION`` when the shadow holds
    none of its rows); ``tuple()`` for an unpartitioned target or an MV's inner table."""
    REPLACE_EACH_PARTITION = "replace_each_partition"
    """The whole of a partitioned table: every partition of the shadow replaces the live one and the live ones the
    shadow lacks are dropped, in one ``ALTER`` (the partitions listed from the parts when it swaps)."""
    REFRESH = "refresh"
    """The server refreshes the MV itself; no shadow."""
    NONE = "none"
    """A refused or deferred step: the live partition is left as it is."""


#: The longest pause between two reads of a raced partition.
MAX_BACKOFF_SECONDS = 30.0


@dataclass(frozen=True)
class RaceRules:
    """How often a partition that writes raced is read again, how long a read waits for inserts already running,
    and how the fills respect the server (``pacing``: :mod:`chmv_assets.engine.pacing.pacer`); see
    :mod:`chmv_assets.engine.rebuild.steps`."""

    attempts: int = 4
    backoff_seconds: float = 1.0
    insert_wait_seconds: float = 60.0
    pacing: PacingConfig = PacingConfig()

    @classmethod
    def of(cls, settings: RebuildSettings, pacing: PacingConfig | None = None) -> RaceRules:
        rules = (settings.race_attempts, settings.race_backoff_seconds, settings.insert_wait_seconds)
        return cls(*rules, pacing or PacingConfig())

    def pause(self, attempt: int) -> float:
        """Seconds to wait before read ``attempt`` (2, 3, …): doubling from ``backoff_seconds`` up to
        :data:`MAX_BACKOFF_SECONDS` (:func:`~chmv_assets.engine.pacing.backoff.backoff`)."""
        return backoff(attempt - 1, self.backoff_seconds, MAX_BACKOFF_SECONDS)

    def describe(self) -> str:
        return (
            f"a read that writes raced is read again (not swapped, or swapped and read again): up to {self.attempts} "
            f"reads, the pause between them doubling from {self.backoff_seconds:g} s; inserts already running into "
            f"the sources are awaited up to {self.insert_wait_seconds:g} s"
        )


@dataclass(frozen=True)
class TriggerRelation:
    """What stands in for one trigger source inside the MV's SELECT for one partition.

    Attributes:
        source: The trigger table.
        kind: ``source_window`` (the table, pruned to the window), ``source`` (the whole table),
            ``lake_then_source`` (staged landing rows <= the cutoff UNION ALL table rows > the cutoff).
        predicate: The trigger rows the partition's read covers, on the source's own columns (the MVs' pruning
            range, :func:`~chmv_assets.sql.rebuild_sql.trigger_predicate`), when one is derivable: the rows whose
            arrival during the read races it (None: any row).
        staged_per_window: Spark writes one staging folder per partition window (else one for the range).
    """

    source: ObjectRef
    kind: Literal["source_window", "source", "lake_then_source"]
    predicate: str | None = None
    staged_per_window: bool = False

    def describe(self) -> str:
        if self.kind == "lake_then_source":
            split = "per partition" if self.staged_per_window else "for the whole range"
            return f"{self.source.fqn}: landing rows <= cutoff (staged by Spark, {split}) ∪ table rows > cutoff"
        if self.kind == "source_window":
            return f"{self.source.fqn} WHERE {self.predicate}"
        return f"{self.source.fqn} (whole table)"


@dataclass(frozen=True)
class PartitionStep:
    """The rebuild of one partition (or of a whole unpartitioned target).

    Attributes:
        shadow: The table the partition is rebuilt into; the steps of a plan that share one are read together
            (one read of their trigger rows per MV: a plan made with ``one_read``).
        guard: Why the source table may not hold the partition entirely (set when coverage was observed and
            does not say it does, or says a DELETE may have touched it, and the plan is not forced): the executor
            then refuses a swap that would leave fewer rows, or a smaller total of a measure, than the live partition
            holds (:mod:`chmv_assets.engine.rebuild.shrink_guard`). None: no such check.
    """

    window: PartitionWindow | None
    engine: Engine
    swap: Swap
    shadow: ObjectRef | None
    relations: tuple[TriggerRelation, ...]
    reason: str
    guard: str | None = None
    closes_at: datetime | None = None
    """When the partition closes to writers chmv does not control (its window's end, how far past it rows still map
    into it, and ``[writers] close_after_minutes``); None for an unpartitioned target, which never closes."""
    pause: tuple[ObjectRef, ...] = ()
    """Stream consumer MVs paused around the step's read and swap (the partition is open and they write it)."""
    # What the statements of the step read from the plan, derived from the target's DDL, the window and the shadow
    # (so no part of a plan's identity: two steps alike in the fields above are alike in these).
    partition: str | None = field(default=None, compare=False)
    """The partition the swap replaces (:attr:`Swap.REPLACE_PARTITION`): ``tuple(<PARTITION BY on the partition>)``,
    ``tuple()`` for an unpartitioned target or an MV's inner table."""
    partition_filter: str | None = field(default=None, compare=False)
    """The predicate on the target's columns that holds for exactly the partition's rows (in the shadow and the live
    table: the counts and the shrink guard); None: the whole table."""
    create_shadow: str | None = field(default=None, compare=False)
    """The statement creating the shadow, on this server (a ``Replicated*`` target's shadow gets a Keeper path of its
    own or the plain family: :func:`~chmv_assets.sql.rebuild_sql.create_shadow_sql`)."""
    reads: tuple[tuple[ObjectRef, TriggerRange], ...] = field(default=(), compare=False)
    """Per MV writing the target, the trigger rows its read of the window covers (its pruning predicate:
    :func:`~chmv_assets.sql.rebuild_sql.trigger_range`); the fill reads them from here. Empty: the whole table."""

    def reads_of(self, view: ObjectRef) -> TriggerRange | None:
        """The rows ``view``'s read of the window covers, as planned (None: the whole table)."""
        return dict(self.reads).get(view)

    @property
    def key(self) -> str | None:
        return self.window.key if self.window else None


@dataclass(frozen=True)
class RebuildPlan:
    """Everything a rebuild of partitions of one target will do, decided before anything runs.

    Attributes:
        target: The target asset's table (or inner-table MV).
        live: The table that physically holds the rows (the inner table of an MV without TO).
        scheme: The target's partitioning (the loaded project's: :meth:`LoadedProject.partitioning`).
        steps: One per partition, in the order given.
        gates: The trigger sources whose write gate every step holds (ingestion waits meanwhile).
        downstream: Targets further down a chain that read this one (rebuilt after it by callers
            that follow the chain; a Dagster run selects them itself).
        landing_root: The landing zone Spark steps read.
        cutoff_rule: How Spark steps split lake rows from source rows (fixed when they run, under the gate).
        coverage: Where the truth of each partition lives (None: not observed, as for a repair's plan).
        force: Refusals became rebuilds from the source and the executor's shrink guard is off.
        writers: Who writes each trigger (chmv, stream consumers, others).
        run: This run's token: it names the shadows (a run never reads another's), the leases and the statements.
        races: How a read that writes raced is read again (``[rebuild]`` and ``[pacing]`` of chmv.toml).
        zone: The session's time zone (:func:`chmv_assets.engine.clock.session_zone`): the windows are its wall clock
            where the partition column declares no zone, and every statement of the plan writes them so
            (:func:`chmv_assets.sql.time_sql.time_sql`). Empty: not known (writing a time value then raises).
    """

    target: ObjectRef
    live: ObjectRef
    scheme: TargetPartitioning
    steps: tuple[PartitionStep, ...]
    gates: tuple[ObjectRef, ...]
    downstream: tuple[ObjectRef, ...] = ()
    landing_root: Path | None = None
    cutoff_rule: str = ""
    notes: tuple[str, ...] = field(default=())
    coverage: Coverage | None = None
    force: bool = False
    writers: tuple[SourceWriters, ...] = ()
    run: str = ""
    races: RaceRules = RaceRules()
    zone: str = ""

    def steps_by(self, engine: Engine) -> tuple[PartitionStep, ...]:
        return tuple(s for s in self.steps if s.engine == engine)

    @property
    def consumers(self) -> tuple[ObjectRef, ...]:
        """The stream consumer MVs writing the triggers (paused around the swap of an open partition)."""
        return tuple(dict.fromkeys(c for w in self.writers for c in w.consumers))

    @property
    def watched(self) -> tuple[ObjectRef, ...]:
        """The tables whose inserts reach the triggers (a read waits for those running; default the gates)."""
        roots = {r for w in self.writers for r in (w.source, *w.roots)} or set(self.gates)
        return tuple(sorted(roots, key=lambda r: r.fqn))

    @property
    def refused(self) -> tuple[PartitionStep, ...]:
        """The partitions the plan refuses to rebuild (nothing of the plan runs while there are any)."""
        return self.steps_by(Engine.REFUSED)

    def refusal(self) -> str:
        """The message of a refused plan: every refused partition with the reason and what to do."""
        count = len(self.refused)
        head = (
            f"{self.target.fqn}: rebuild refused for {count} partition{'s' if count != 1 else ''}; nothing was changed"
        )
        return "\n".join([head, *(f"- {s.key or '(whole table)'}: {s.reason}" for s in self.refused)])

    @property
    def deferred(self) -> tuple[PartitionStep, ...]:
        """The partitions left until they close (writers chmv does not control still write them)."""
        return self.steps_by(Engine.DEFERRED)

    def deferral(self) -> str:
        """Which partitions wait, until when, and why."""
        count = len(self.deferred)
        head = (
            f"{self.target.fqn}: {count} partition{'s' if count != 1 else ''} deferred until "
            f"{'they close' if count != 1 else 'it closes'}"
        )
        return "\n".join([head, *(f"- {s.key}: {s.reason}" for s in self.deferred)])

    def describe(self, keys: Collection[str | None] | None = None) -> str:
        """A markdown rendering for run metadata, logs and ``chmv rebuild --dry-run``; with ``keys``, the rows of
        those partitions only (a partition's materialization: its own lines, whatever the size of the run)."""
        lines = [f"**Rebuild plan of `{self.target.fqn}`** (physical table `{self.live.fqn}`)", ""]
        lines += self._settings()
        if keys is not None:
            shown = sum(1 for s in self.steps if s.key in keys)
            lines.append(f"- partitions shown: {shown} of the run's {len(self.steps)} (the whole plan: the run's log)")
        lines += ["", "| partition | engine | reads | shadow | swap | why |", "|---|---|---|---|---|---|"]
        for step in self.steps:
            if keys is not None and step.key not in keys:
                continue
            reads = "; ".join(r.describe() for r in step.relations).replace("|", "/") or "-"
            shadow = f"`{step.shadow.fqn}`" if step.shadow else "-"
            reason = step.reason.replace("|", "/")
            lines.append(f"| {step.key or '(all)'} | {step.engine} | {reads} | {shadow} | {step.swap} | {reason} |")
        if self.coverage is not None:
            lines += [
                "",
                f"**Coverage** (where the truth of each partition lives, at {self.coverage.now})",
                "",
                self.coverage.describe(keys),
            ]
        if self.refused:
            lines += ["", "**Refused**", "", self.refusal()]
        if self.deferred:
            lines += ["", "**Deferred**", "", self.deferral()]
        return "\n".join(lines)

    def _settings(self) -> list[str]:
        """The plan's lines above its table of partitions."""
        lines = [f"- partitioning: {self.scheme.describe()}"]
        if self.zone and self.scheme.grain is not None:
            lines.append(
                f"- windows: wall clock of {self.zone} (the session's time zone) unless the column declares one"
            )
        lines.append("- gates held: " + (", ".join(f"`{g.fqn}`" for g in self.gates) or "none"))
        lines += [f"- writers: {w.describe()}" for w in self.writers]
        if self.cutoff_rule:
            lines.append(f"- cutoff: {self.cutoff_rule}")
        if self.downstream:
            lines.append("- downstream targets reading it: " + ", ".join(f"`{d.fqn}`" for d in self.downstream))
        lines += [f"- note: {n}" for n in self.notes]
        if self.force:
            lines.append("- force: refusals rebuild from the source table; a shrinking swap is not stopped")
        elif any(s.guard for s in self.steps):
            lines.append(
                "- shrink guard: a partition whose source may not hold it entirely is not swapped if "
                "the rebuild would leave fewer rows, or a smaller total of a measure, than it holds (force overrides)"
            )
        if self.coverage is not None and not self.force and any(s.shadow for s in self.steps):
            lines.append(
                "- foreign rows: a partition whose live rows include some the rebuild does not yield (a writer outside "
                "the DDL wrote them) is not swapped (force overrides)"
            )
        shared = len([s for s in self.steps if s.shadow]) - len({s.shadow for s in self.steps if s.shadow})
        if shared:
            lines.append(
                "- one read: the partitions sharing a shadow are read together (one read of their span per MV, in "
                "batches of what one hold of the gates may take), each partition swapped in from it"
            )
        shadowed = next((s for s in self.steps if s.create_shadow), None)
        if shadowed is not None:
            others = " (the other partitions' alike)" if len(self.steps) > 1 else ""
            lines.append(f"- shadow: `` {shadowed.create_shadow} ``{others}")
            lines.append(f"- races: {self.races.describe()}")
        return lines

    def __str__(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class Observations:
    """Facts from the server the planner needs (read by :func:`observe`, under the trigger gates).

    Attributes:
        live: The physical table of the target.
        oldest: Per trigger with an event-time column, its oldest row (None: the table is empty).
        coverage: The facts coverage is decided from (:func:`chmv_assets.engine.rebuild.coverage.probe`); None: not
            observed, and the planner decides on coverage estimated from ``oldest`` (:func:`_estimated`: a repair's
            plan, the lifecycle's re-derivations, hand-made plans).
        pending: Why every partition is refused whatever the options: the live MVs run another SELECT or TO than
            the DDL directory (:func:`chmv_assets.engine.drift.pending_refusals`, read by :func:`observe_and_plan`).
    """

    live: ObjectRef
    oldest: tuple[tuple[ObjectRef, datetime | None], ...] = ()
    coverage: Facts | None = None
    now: datetime | None = None
    """The server's wall clock (:mod:`chmv_assets.engine.clock`, as the windows): which partitions are still open to
    writers. None: not observed (nothing is
    deferred)."""
    pending: tuple[str, ...] = ()
    zone: str = ""
    """The session's time zone (:func:`chmv_assets.engine.clock.session_zone`), which the plan writes its windows in;
    empty: not observed (a plan of time windows then fails to render them)."""
    foreign: tuple[ObjectRef, ...] = ()
    """MVs on the server that the DDL directory does not define and that write into the target
    (:func:`chmv_assets.engine.drift.foreign_writers`): every partition is refused unless forced (a rebuild would
    replace their rows with nothing). Observed with the coverage (``windows``)."""

    def oldest_of(self, source: ObjectRef) -> datetime | None:
        return dict(self.oldest).get(source)


def triggers_of(project: Project, target: ObjectRef) -> list[ObjectRef]:
    """Distinct trigger tables of the MVs writing ``target``."""
    return list(dict.fromkeys(v.trigger for v in project.views_into(target) if v.trigger is not None))


def spark_capable(loaded: LoadedProject, target: ObjectRef, root: Path | None) -> bool:
    """A landing zone exists and every trigger of the target has an event-time column configured."""
    triggers = triggers_of(loaded.project, target)
    return root is not None and bool(triggers) and all(t in loaded.time_columns for t in triggers)


def downstream_targets(loaded: LoadedProject, target: ObjectRef) -> tuple[ObjectRef, ...]:
    """Targets that read ``target`` (directly or further down a chain), shallowest first."""
    graph, project = loaded.graph, loaded.project
    found = [t for n in graph.impact(target.fqn) if n != target.fqn and (t := project.target_named(n)) is not None]
    return tuple(sorted(found, key=lambda r: (graph.depth.get(r.fqn, 0), r.fqn)))


def observe(
    client: Client,
    loaded: LoadedProject,
    target: ObjectRef,
    *,
    engine: EngineOption = "auto",
    root: Path | None = None,
    windows: Sequence[PartitionWindow | None] | None = None,
) -> Observations:
    """Read what the planner needs: the physical table and, for ``windows``, the coverage facts (one statement).

    Without ``windows`` only each trigger's oldest row is read, when ``auto`` may pick Spark (no coverage). With
    ``windows``, the MVs the DDL does not define that write into the target too (one more query).
    """
    live, zone = live_table(client, loaded.project, target), session_zone(client)
    foreign: tuple[ObjectRef, ...] = ()
    if windows is not None:
        found = foreign_writers(client, loaded.project, {target, live})
        foreign = tuple(dict.fromkeys(v for ref in (target, live) for v in found.get(ref, ())))
    if streamed_triggers(loaded, target):  # never read: the plan refuses it
        return Observations(live=live, zone=zone, foreign=foreign)
    if windows is not None and not any(v.refreshable for v in loaded.project.views_into(target)):
        facts = probe(client, loaded, target, live, windows, root)
        oldest = tuple((source, stats.oldest) for source, stats in facts.tables)
        return Observations(live=live, oldest=oldest, coverage=facts, now=facts.now, zone=zone, foreign=foreign)
    now = wall_now(client)
    if engine != "auto" or not spark_capable(loaded, target, root):
        return Observations(live=live, now=now, zone=zone, foreign=foreign)
    oldest = tuple(
        (source, source_min_time(client, source, landing.time_column(loaded, source)))
        for source in triggers_of(loaded.project, target)
    )
    return Observations(live=live, oldest=oldest, now=now, zone=zone, foreign=foreign)


def observe_and_plan(
    client: Client,
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
    """Observe the server (:func:`observe`, the coverage probed once, and the changes waiting for ``chmv apply``:
    :func:`~chmv_assets.engine.drift.pending_refusals`, the drift read once) and plan (:func:`plan_rebuild`); nothing
    is changed. The caller holds the trigger gates (the observations stay true until its swaps under the same hold).
    """
    observations = observe(client, loaded, target, engine=engine, root=root, windows=windows)
    observations = replace(observations, pending=pending_refusals(client, loaded.project, target))
    return plan_rebuild(
        loaded, target, windows, observations, engine=engine, root=root, force=force, one_read=one_read, engines=engines
    )


def feedback_reads(loaded: LoadedProject, target: ObjectRef) -> list[tuple[ObjectRef, ObjectRef]]:
    """``(table, MV)`` of each MV writing ``target`` that reads a table its own output feeds (``target`` itself or a
    table downstream of it: a dedup or feedback read, lineage's ``feedback``). What such an MV wrote at each insert
    depended on what that table held then: its SELECT run now over the source yields something else (a dedup MV's
    ``NOT IN (SELECT … FROM target)``: nothing the target already holds)."""
    feedback = loaded.graph.feedback
    return [
        (source, view.ref)
        for view in loaded.project.views_into(target)
        for source in (*view.source_refs, *view.dictionaries)
        if (source.fqn, view.ref.fqn) in feedback
    ]


def feedback_cause(target: ObjectRef, reads: Sequence[tuple[ObjectRef, ObjectRef]]) -> str:
    """What makes ``target``'s history not recomputable through its MVs (:func:`feedback_reads`)."""
    pairs = "; ".join(f"{view.fqn} reads {source.fqn}" for source, view in reads)
    return (
        f"{pairs}, which its own output feeds (a dedup or feedback read): each insert's output depended on what that "
        f"table held then, and the SELECT run now over the source yields something else (a dedup MV's NOT IN: nothing "
        f"{target.fqn} already holds)"
    )


def describe_feedback(target: ObjectRef, reads: Sequence[tuple[ObjectRef, ObjectRef]]) -> str:
    """Why ``target``, written by MVs with feedback reads (:func:`feedback_reads`), is not recomputed through them."""
    return (
        f"{feedback_cause(target, reads)}, so chmv neither rebuilds nor checks {target.fqn} through it. To proceed: "
        "rebuild with force (run config force: true, chmv rebuild --force) where its SELECT over the source is what "
        "the target should hold now (an emptied target, say)"
    )


def streamed_triggers(loaded: LoadedProject, target: ObjectRef) -> list[ObjectRef]:
    """The triggers of ``target``'s MVs that are stream-engine tables (a consumer MV's target): never read."""
    return [t for t in triggers_of(loaded.project, target) if loaded.project.is_stream(t)]


def plan_rebuild(
    loaded: LoadedProject,
    target: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    observations: Observations,
    *,
    engine: EngineOption = "auto",
    root: Path | None = None,
    force: bool = False,
    defer_open: bool = True,
    run: str | None = None,
    one_read: bool = False,
    engines: Mapping[str | None, str] | None = None,
) -> RebuildPlan:
    """Decide the rebuild of ``windows`` of ``target``.

    Per partition, the engine (:func:`choose_engine`, from the coverage observed or, without it, estimated from the
    triggers' oldest rows): the source table where it holds the partition → ClickHouse; else the landing zone
    where it holds it → Spark; else, if the target partition holds rows the rebuild could lose → refused (the
    step says why and what to do), unless ``force``; else ClickHouse with the shrink guard. ``engine=clickhouse``/
    ``spark`` pin the engine but are refused alike where they would lose rows. Then the partitions still open to
    writers chmv does not control (:func:`_open_step`), the race rules, and the Spark steps' cutoff.

    Args:
        loaded: The parsed project.
        target: An MV target.
        windows: The partitions; ``[None]`` (or any window of an unpartitioned target) rebuilds the whole table.
        observations: From :func:`observe`.
        engine: ``auto``, ``clickhouse`` or ``spark``.
        root: The landing zone (``chmv_assets.engine.ingest.landing.landing_dir``).
        force: Rebuild refused partitions from the source table and let shrinking swaps through; rebuild open
            partitions under writers chmv does not control now (each read checked for racing writes).
        defer_open: Defer the partitions still open to writers chmv does not control (with the server's time
            observed); False rebuilds them now, race-checked (a new version, not yet live, cannot wait for them).
        run: The run's token (names shadows and leases); default a new one.
        one_read: Read the ClickHouse-engine partitions of time windows together, into one shadow (for a caller
            that runs them in batches sized to what one hold of the gates may take: ``chmv apply``); else each
            partition is read alone.
        engines: Per partition key (None: the whole table), the engine decided before (the recovery sensor's
            verdict, :class:`chmv_assets.engine.health.recovery.RebuildVerdict`): pinned as ``engine`` would pin it
            for all, so the engine is not chosen again; the coverage observed now may still refuse or guard it.

    Raises:
        ChmvError: The target is not written by an MV of the DDL, or ``spark`` was asked for a target
            whose triggers the landing zone does not cover.
    """
    _check_engine(loaded, target, engine, root)
    coverage = assess(loaded, target, windows, observations.coverage, root) if observations.coverage else None
    refusal = _target_refusal(loaded, target, observations)
    lake_usable = spark_capable(loaded, target, root)

    def choose(window: PartitionWindow | None) -> EngineChoice:
        if refusal is not None:
            return EngineChoice(Engine.REFUSED, refusal)
        covered = coverage.at(window) if coverage is not None else None
        if covered is None:
            covered = _estimated(loaded, target, window, observations, root)
        decided = (engines or {}).get(window.key if window is not None else None)
        if decided is not None:
            choice = choose_engine(
                cast(EngineOption, decided), covered, lake_usable=lake_usable, force=force, root=root
            )
            return replace(choice, reason=f"decided by the recovery sensor: {decided}; {choice.reason}")
        return choose_engine(engine, covered, lake_usable=lake_usable, force=force, root=root)

    plan = _assemble(
        loaded,
        target,
        windows,
        observations.live,
        choose=choose,
        per_window=lambda source, ws: staged_per_window(loaded, target, source, ws),
        zone=observations.zone,
        downstream=downstream_targets(loaded, target),
        root=root,
        run=run,
        races=RaceRules.of(loaded.config.rebuild, loaded.config.pacing),
        one_read=one_read,
    )
    writers = tuple(loaded.writers(source) for source in plan.gates)
    plan = replace(plan, coverage=coverage, force=force, writers=writers)
    if observations.now is not None:
        steps = tuple(_open_step(loaded, plan, s, observations.now, defer_open and not force) for s in plan.steps)
        plan = replace(plan, steps=steps)
    if observations.foreign:
        plan = _foreign_writers(plan, observations.foreign, force)
    feedback = feedback_reads(loaded, target)
    if feedback:
        plan = _refused_unless_forced(plan, describe_feedback(target, feedback), force, "a feedback read")
    return replace(plan, cutoff_rule=_cutoff_rule(loaded, plan))


def _foreign_writers(plan: RebuildPlan, views: tuple[ObjectRef, ...], force: bool) -> RebuildPlan:
    """MVs the DDL does not define write into the target: every step refused (their rows would be replaced with
    nothing), unless forced (then said in the plan's notes)."""
    return _refused_unless_forced(plan, describe_foreign(plan.target, views), force, "a writer outside the DDL")


def _refused_unless_forced(plan: RebuildPlan, why: str, force: bool, what: str) -> RebuildPlan:
    """Every step of ``plan`` refused for ``why``, unless forced (then said in the plan's notes, past ``what``)."""
    if force:
        return replace(plan, notes=(*plan.notes, f"forced past {what}: {why}"))
    steps = tuple(
        s if s.engine == Engine.REFUSED else PartitionStep(s.window, Engine.REFUSED, Swap.NONE, None, (), why)
        for s in plan.steps
    )
    return replace(plan, steps=steps)


def _check_engine(loaded: LoadedProject, target: ObjectRef, engine: EngineOption, root: Path | None) -> None:
    """A pinned engine reading the landing zone needs it to serve every trigger of the target."""
    if engine != "auto" and READS.get(Engine(engine)) == RowSource.LAKE and not spark_capable(loaded, target, root):
        triggers = ", ".join(t.fqn for t in triggers_of(loaded.project, target))
        raise ChmvError(
            f"{target.fqn}: the {engine} engine needs a landing zone and [ingestion.time_columns] for "
            f"{triggers}; configure them or use engine=clickhouse"
        )


def _target_refusal(loaded: LoadedProject, target: ObjectRef, observations: Observations) -> str | None:
    """Why every partition of ``target`` is refused whatever the options, if it is: the live MVs run another SELECT
    (history is never recomputed with a SELECT the live MV does not run), or a trigger is a stream."""
    if observations.pending:
        return "; ".join(observations.pending)
    streams = streamed_triggers(loaded, target)
    return _stream_refusal(loaded, streams) if streams else None


def _cutoff_rule(loaded: LoadedProject, plan: RebuildPlan) -> str:
    """How the steps of ``plan`` reading the landing zone split the lake's rows from the source's ("" without
    any)."""
    lake = {s.engine for s in plan.steps if READS.get(s.engine) == RowSource.LAKE}
    if not lake:
        return ""
    tolerance = loaded.config.ingestion.late_tolerance_minutes
    steps = "the Spark steps" if lake == {Engine.SPARK} else "the steps reading the landing zone"
    return f"per trigger, its ingestion watermark - {tolerance} min, read under its gate when {steps} start"


@dataclass(frozen=True)
class EngineChoice:
    """The engine of one partition, why, and the shrink guard of its swap (see :func:`choose_engine`)."""

    engine: Engine
    reason: str
    guard: str | None = None


#: The place each engine that fills partitions reads its rows from (:mod:`chmv_assets.engine.rebuild.rows`).
READS: dict[Engine, RowSource] = {
    Engine.CLICKHOUSE: RowSource.TABLE,
    Engine.SPARK: RowSource.LAKE,
    Engine.FILE: RowSource.LAKE,
}
#: The engine that reads each place where none is pinned (``engine=auto``).
READER: dict[RowSource, Engine] = {RowSource.TABLE: Engine.CLICKHOUSE, RowSource.LAKE: Engine.SPARK}


def choose_engine(
    asked: EngineOption, covered: WindowCoverage, *, lake_usable: bool, force: bool, root: Path | None
) -> EngineChoice:
    """The engine of one partition: the engine reading the place its rows come from
    (:func:`~chmv_assets.engine.rebuild.rows.rows_from`, the one rule; a pinned engine pins its place), refused where
    they come from neither."""
    pinned = Engine(asked) if asked != "auto" else None
    rows = rows_from(
        covered,
        reads=READS[pinned] if pinned is not None else None,
        asked=asked if pinned is not None else "",
        lake_usable=lake_usable,
        force=force,
        root=root,
    )
    if rows.source == RowSource.NEITHER:
        return EngineChoice(Engine.REFUSED, rows.reason)
    engine = pinned if pinned is not None and READS[pinned] == rows.source else READER[rows.source]
    return EngineChoice(engine, rows.reason, rows.guard)


def _estimated(
    loaded: LoadedProject,
    target: ObjectRef,
    window: PartitionWindow | None,
    observations: Observations,
    root: Path | None,
) -> WindowCoverage:
    """The coverage of ``window`` as far as a plan without the coverage probe sees it (``observed=False``: nothing of
    the target's rows is known).

    Where the landing zone serves every trigger, each trigger's oldest row (:attr:`Observations.oldest`, none: empty)
    says whether the table holds the window: it does unless it is empty, or its oldest row comes after the window's
    start (for the whole table: the landing zone's first file) while the landing zone holds files that arrived
    before it; and the landing zone, where every row of an ingested source arrived, holds it. Elsewhere nothing of
    the triggers was read.
    """
    usable = spark_capable(loaded, target, root)
    sources = []
    for source in triggers_of(loaded.project, target):
        if not usable:
            table = Verdict(Holding.UNKNOWN, f"{source.fqn} was not observed")
            lake = Verdict(Holding.UNKNOWN, "no landing zone for its triggers")
        else:
            assert root is not None
            table = _oldest_verdict(root, source, window, observations.oldest_of(source))
            lake = Verdict(Holding.ENTIRELY, f"{source.fqn} is loaded from the landing zone ({root / source.fqn})")
        sources.append(SourceCoverage(source, table, lake, observations.oldest_of(source)))
    return WindowCoverage(window, tuple(sources), observed=False)


def _oldest_verdict(root: Path, source: ObjectRef, window: PartitionWindow | None, oldest: datetime | None) -> Verdict:
    """Does ``source``, whose oldest row is ``oldest``, hold ``window`` (see :func:`_estimated`)."""
    if oldest is None:
        return Verdict(Holding.NONE, f"{source.fqn} is empty")
    start = window.wall_start if window is not None else _first_landing(root, source)
    if start is None or oldest <= start:
        return Verdict(Holding.ENTIRELY, f"{source.fqn} holds rows from {oldest}")
    held_from = oldest.replace(minute=0, second=0, microsecond=0)
    if landing.list_files(root, source, arrived_after=start, arrived_before=held_from):
        return Verdict(Holding.PARTLY, f"{source.fqn} holds rows from {oldest} only; the landing zone has earlier ones")
    return Verdict(Holding.ENTIRELY, f"{source.fqn} holds rows from {oldest}; the landing zone has none earlier")


def _first_landing(root: Path, source: ObjectRef) -> datetime | None:
    files = landing.list_files(root, source)
    return min((f.first_arrival for f in files), default=None)


def plan_from_source(
    loaded: LoadedProject,
    target: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    live: ObjectRef,
    *,
    zone: str,
    run: str | None = None,
    races: RaceRules = RaceRules(),
    one_read: bool = False,
) -> RebuildPlan:
    """A plan that rebuilds every partition from the source table (the ClickHouse engine), nothing observed; ``zone``
    is the session's time zone (:func:`chmv_assets.engine.clock.session_zone`), ``one_read`` as in
    :func:`plan_rebuild`."""
    return _assemble(
        loaded,
        target,
        windows,
        live,
        choose=lambda _w: EngineChoice(Engine.CLICKHOUSE, "from the source table"),
        per_window=lambda _s, _ws: False,
        zone=zone,
        run=run,
        races=races,
        one_read=one_read,
    )


def _assemble(
    loaded: LoadedProject,
    target: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    live: ObjectRef,
    *,
    choose: Callable[[PartitionWindow | None], EngineChoice],
    per_window: Callable[[ObjectRef, Sequence[PartitionWindow | None]], bool],
    zone: str,
    downstream: tuple[ObjectRef, ...] = (),
    root: Path | None = None,
    run: str | None = None,
    races: RaceRules = RaceRules(),
    one_read: bool = False,
) -> RebuildPlan:
    """The plan of ``windows``: a step per partition with the engine ``choose`` gives it (one refresh step for a
    refreshable MV)."""
    run = run or new_run_token()
    project = loaded.project
    views = project.views_into(target)
    if not views:
        raise ChmvError(f"{target.fqn} is not written by any materialized view in the DDL directory")
    table = project.table(target)
    refreshable = any(v.refreshable for v in views)
    if table is None and not refreshable:
        raise ChmvError(f"{target.fqn} is not defined in the DDL directory")
    scheme = loaded.partitioning(target)
    if refreshable:
        step = PartitionStep(None, Engine.REFRESH, Swap.REFRESH, None, (), "refreshable MV: the server recomputes it")
        return RebuildPlan(target, live, scheme, (step,), (), downstream, root, run=run, races=races, zone=zone)
    assert table is not None
    if not scheme.partitioned:
        windows = [None]
    triggers = tuple(triggers_of(project, target))

    def staged(source: ObjectRef) -> bool:
        return per_window(source, windows)

    steps = []
    for window in windows:
        choice = choose(window)
        if choice.engine == Engine.REFUSED:
            steps.append(PartitionStep(window, Engine.REFUSED, Swap.NONE, None, (), choice.reason))
            continue
        reads = _reads(project, target, scheme, window, zone=zone)
        relations = tuple(
            _relation(project, target, source, reads, lake=READS.get(choice.engine) == RowSource.LAKE, staged=staged)
            for source in triggers
        )
        step = _rebuild_step(table, live, scheme, window, choice, relations, run, one_read=one_read, zone=zone)
        steps.append(replace(step, reads=reads))
    return RebuildPlan(target, live, scheme, tuple(steps), triggers, downstream, root, run=run, races=races, zone=zone)


def _rebuild_step(
    table: Table,
    live: ObjectRef,
    scheme: TargetPartitioning,
    window: PartitionWindow | None,
    choice: EngineChoice,
    relations: tuple[TriggerRelation, ...],
    run: str,
    *,
    one_read: bool,
    zone: str,
) -> PartitionStep:
    """The step rebuilding ``window`` into a shadow and swapping it in: one partition replaced (``tuple()`` for an
    unpartitioned table, an MV's inner table too), or every partition of a partitioned table rebuilt whole.

    The shadow is the partition's own, or with ``one_read`` the plan's ``range`` shadow for a ClickHouse-engine
    partition of a time window (read with the others: one read per MV over their span); a refresh, the landing
    zone's, a whole table or a partition of a key alone is read alone."""
    whole = window is None and table.partition_by is not None
    shared = one_read and choice.engine == Engine.CLICKHOUSE and window is not None and window.timed
    shadow = shadow_ref(live, "range" if shared else (window.key if window else None), run)
    partitioned = window is not None and table.partition_by is not None and scheme.partitioned
    return PartitionStep(
        window,
        choice.engine,
        Swap.REPLACE_EACH_PARTITION if whole else Swap.REPLACE_PARTITION,
        shadow,
        relations,
        choice.reason,
        choice.guard,
        partition=None if whole else partition_tuple(table, scheme, window, zone=zone),
        partition_filter=partition_filter(table, scheme, window, zone=zone) if partitioned else None,  # type: ignore[arg-type]
        create_shadow=create_shadow_sql(shadow, live, table),
    )


def _reads(
    project: Project, target: ObjectRef, scheme: TargetPartitioning, window: PartitionWindow | None, *, zone: str
) -> tuple[tuple[ObjectRef, TriggerRange], ...]:
    """Per MV writing ``target``, the trigger rows its read of ``window`` covers (none for the whole table)."""
    if window is None or not scheme.partitioned:
        return ()
    return tuple(
        (v.ref, trigger_range(v, project, scheme, window, zone=zone))
        for v in project.views_into(target)
        if v.trigger is not None
    )


def _relation(
    project: Project,
    target: ObjectRef,
    source: ObjectRef,
    reads: tuple[tuple[ObjectRef, TriggerRange], ...],
    *,
    lake: bool,
    staged: Callable[[ObjectRef], bool],
) -> TriggerRelation:
    """What stands in for ``source`` in the read of the step's window, and the rows of it the read covers (those of
    its MVs' ``reads``)."""
    readers = {v.ref for v in project.views_into(target) if v.trigger == source}
    predicate = covered_rows([r for view, r in reads if view in readers]) if reads else None
    if lake:
        return TriggerRelation(source, "lake_then_source", predicate, staged_per_window=staged(source))
    return TriggerRelation(source, "source_window" if predicate else "source", predicate)


def new_run_token() -> str:
    """A run's token: 8 hex digits, in its shadows' names (``_chmv_shadow_<table>_<partition>_<token>``)."""
    return secrets.token_hex(4)


def reach(loaded: LoadedProject, target: ObjectRef, scheme: TargetPartitioning) -> timedelta:
    """How far past a window's end a trigger row may still map into the window (a week that starts in one month and
    ends in the next): :func:`chmv_assets.ddl.partitioning.target_reach`."""
    return target_reach(loaded.project, target, scheme)


def closes_at(
    loaded: LoadedProject, target: ObjectRef, scheme: TargetPartitioning, window: PartitionWindow | None
) -> datetime | None:
    """When no row of ``window`` can arrive any more from writers chmv does not control: the window's end, its
    :func:`reach` and ``[writers] close_after_minutes``. None for an unpartitioned target and a partition of a key alone
    (no time window: it never closes)."""
    end = window.wall_end if window is not None else None
    if end is None:
        return None
    return end + reach(loaded, target, scheme) + timedelta(minutes=loaded.config.writers.close_after_minutes)


def _open_step(
    loaded: LoadedProject, plan: RebuildPlan, step: PartitionStep, now: datetime, defer: bool
) -> PartitionStep:
    """A step of ``plan`` as the sources' writers allow at ``now``: a partition still open to writers chmv does not
    control is deferred (``defer``), a stream consumer writing it is paused for its swap, a closed one is unchanged."""
    if step.engine not in READS:  # refused, deferred, refreshed by the server
        return step
    closes = closes_at(loaded, plan.target, plan.scheme, step.window)
    if closes is not None and now >= closes:
        return step
    others = [w.source.fqn for w in plan.writers if w.uncontrolled]
    until = f"until {closes:%Y-%m-%d %H:%M}" if closes is not None else "(without a time window it never closes)"
    if others and defer and closes is not None:
        reason = (
            f"open {until}: {', '.join(others)} {'is' if len(others) == 1 else 'are'} written by others, whose "
            "rows a swap now could lose; rebuilt once it closes (recovery requests it then), or now with "
            "force (each read checked for racing writes)"
        )
        return PartitionStep(step.window, Engine.DEFERRED, Swap.NONE, None, (), reason, closes_at=closes)
    notes = []
    if others:
        notes.append(
            f"open {until} to writers chmv does not control ({', '.join(others)}): a read that races a "
            "write is not swapped, and read again"
        )
    if plan.consumers:
        notes.append(f"stream consumers {', '.join(c.fqn for c in plan.consumers)} paused for the swap")
    return replace(step, reason="; ".join([step.reason, *notes]), closes_at=closes, pause=plan.consumers)


def _stream_refusal(loaded: LoadedProject, streams: Sequence[ObjectRef]) -> str:
    """Why a stream consumer's target is never rebuilt from its trigger."""
    engines = ", ".join(f"{s.fqn} ({loaded.project.tables[s].engine.name})" for s in streams)  # type: ignore[union-attr]
    return (
        f"its trigger {engines} is a stream: chmv never reads one (a SELECT consumes messages its consumer then "
        "never sees), and the target holds the only copy of those rows; the tables it writes are the sources the "
        "targets further down are rebuilt from"
    )


def staged_per_window(
    loaded: LoadedProject, target: ObjectRef, source: ObjectRef, windows: Sequence[PartitionWindow | None]
) -> bool:
    """Whether each partition's trigger rows are exactly the rows whose event time falls in its window.

    Then Spark stages one folder per UTC window of the grain (and reads only the range's files), and each partition's
    SELECT reads the folders its window meets (:func:`chmv_assets.engine.ingest.staging_area.window_keys`); otherwise
    one folder for the whole range, and every partition's SELECT reads all of it.
    """
    if not windows or any(w is None for w in windows):
        return False
    project = loaded.project
    table = project.table(target)
    if table is None:
        return False
    views = project.views_into(target)
    scheme = loaded.partitioning(target)
    if scheme.grain not in ("hour", "day", "month") or scheme.column is None or scheme.keyed:
        return False
    tcol = landing.time_column(loaded, source)
    for view in views:
        if view.trigger != source:
            continue
        out = view.output(scheme.column)
        if out is None or out.truncation is None or out.truncation[0] != tcol:
            return False
        if window_reach(view, scheme):  # a window's rows lie past its end: they are not in its folder alone
            return False
        if range_column(view, project, scheme) is None:
            return False
    return True


def windows_covering(
    loaded: LoadedProject,
    target: ObjectRef,
    since: datetime,
    until: datetime,
    margin: timedelta = timedelta(0),
    values: Sequence[tuple[str, ...]] = (),
) -> list[PartitionWindow | None]:
    """The partitions of ``target`` whose windows intersect ``[since - margin, until + margin]``.

    A target with a key part has a partition per window (if any) and key value: those of ``values`` (the key values
    the caller knows of, e.g. from the server's partitions); without ``values``, ``[None]`` (the whole table), as for
    an unpartitioned target.
    """
    return loaded.partitioning(target).windows(since, until, margin, values)
