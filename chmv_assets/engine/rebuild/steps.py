"""Run steps of a rebuild plan, each atomically and exactly under racing writes: shadow, the MVs' own SELECTs, swap.

Every read is watched for writes that race it (:mod:`chmv_assets.engine.races`): a partition whose sources received
rows of its window during the read is not swapped, and one that received them between the read and the end of its
swap is swapped and read again; up to ``[rebuild] race_attempts`` reads, with a growing pause between them. What still
races after the last attempt is reported (:class:`~chmv_assets.errors.RacedWrites`), never swapped silently.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.config import PacingConfig, RebuildSettings
from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project, Table
from chmv_assets.ddl.partitioning import PartitionScheme, PartitionWindow
from chmv_assets.engine import races
from chmv_assets.engine.catalog import live_table
from chmv_assets.engine.clock import session_zone
from chmv_assets.engine.pacing.pacer import chunks, pacer_for
from chmv_assets.engine.parts import read_partitions
from chmv_assets.engine.rebuild.planner import Engine, PartitionStep, RebuildPlan, Swap, plan_from_source
from chmv_assets.engine.rebuild.shrink_guard import check_shrink
from chmv_assets.engine.statements import statement_id
from chmv_assets.errors import RacedWrites, ShrinkRefused
from chmv_assets.sql.quoting import qualified, string_literal
from chmv_assets.sql.rebuild_sql import (
    create_shadow_sql,
    drop_shadow_sql,
    insert_sql,
    partition_filter,
    partition_tuple,
    range_select,
    shadow_ref,
    source_range_predicate,
    span_holds_all_sql,
    span_of,
    swaps_sql,
    view_select,
)

_LOG = logging.getLogger(__name__)

#: Settings for inserts into a shadow table: one rebuild may write many partitions of an unpartitioned asset.
SHADOW_INSERT_SETTINGS = {"max_partitions_per_insert_block": 0, "insert_deduplicate": 0}
#: The longest pause between two reads of a raced partition.
MAX_BACKOFF_SECONDS = 30.0


@dataclass(frozen=True)
class RaceRules:
    """How often a raced partition is read again, how long a read waits for inserts already running, and how the
    fills respect the server (``pacing``: :mod:`chmv_assets.engine.pacing.pacer`)."""

    attempts: int = 4
    backoff_seconds: float = 1.0
    insert_wait_seconds: float = 60.0
    pacing: PacingConfig = PacingConfig()

    @classmethod
    def of(cls, settings: RebuildSettings, pacing: PacingConfig | None = None) -> RaceRules:
        rules = (settings.race_attempts, settings.race_backoff_seconds, settings.insert_wait_seconds)
        return cls(*rules, pacing or PacingConfig())

    def pause(self, attempt: int) -> float:
        """Seconds to wait before read ``attempt`` (2, 3, …): doubling from ``backoff_seconds``, ±25 % jitter."""
        base = min(MAX_BACKOFF_SECONDS, self.backoff_seconds * 2 ** max(0, attempt - 2))
        return base * random.uniform(0.75, 1.25)


@dataclass
class RebuildResult:
    """What one rebuild did, for materialization metadata."""

    target: str
    partition: str | None
    method: str
    rows_written: int
    seconds: float
    statements: list[str] = field(default_factory=list)
    attempts: int = 1


def rebuild(
    client: Client,
    project: Project,
    target: ObjectRef,
    window: PartitionWindow | None,
) -> RebuildResult:
    """Rebuild one partition of ``target`` (or all of it) from its source tables, and swap it in.

    The planner's ClickHouse-engine plan of one partition, run on ``client``; see :func:`run_step`.
    """
    plan = plan_from_source(project, target, [window], live_table(client, project, target), zone=session_zone(client))
    return run_step(client, project, plan, plan.steps[0])


def run_step(
    client: Client,
    project: Project,
    plan: RebuildPlan,
    step: PartitionStep,
    *,
    trigger_relation: Callable[[ObjectRef], str | None] | None = None,
    rules: RaceRules = RaceRules(),
) -> RebuildResult:
    """Rebuild the partition of ``step`` from the MVs that write the target, then swap it in.

    Every MV writing into the target (a fan-in has several) runs its own SELECT over the trigger rows of the window
    into the step's shadow table (the target's structure); the shadow then replaces the target partition in one
    ``ALTER TABLE … REPLACE PARTITION`` (``tuple()`` for an unpartitioned target). Readers see the old partition or
    the new one, never a mix. Refreshable MVs are refreshed by the server instead. The read is watched for racing
    writes (see the module).

    Args:
        client: An open client (the caller holds the plan's gates and lease).
        project: The parsed DDL.
        plan: The plan the step belongs to.
        step: The partition to rebuild.
        trigger_relation: Per trigger table, a relation to read instead (staged lake rows and the cutoff union).
        rules: Reads of a raced partition.

    Raises:
        ShrinkRefused: The step is guarded, the plan not forced, and the shadow holds fewer rows than the
            live partition (the shadow is dropped; nothing is swapped).
        RacedWrites: Writes kept racing every read.
    """
    if step.swap == Swap.REFRESH:
        started, statements = time.monotonic(), []
        for view in project.views_into(plan.target):
            for sql in (f"SYSTEM REFRESH VIEW {qualified(view.ref)}", f"SYSTEM WAIT VIEW {qualified(view.ref)}"):
                statements.append(sql)
                client.command(sql)
        rows = int(client.command(f"SELECT count() FROM {qualified(plan.target)}"))
        return RebuildResult(plan.target.fqn, None, "refresh", rows, time.monotonic() - started, statements)
    read = _Read(client, project, plan, one_read=False, trigger_relation=trigger_relation, pacing=rules.pacing)
    return _Races(read, rules).run([step])[0]


def run_steps(
    client: Client,
    project: Project,
    plan: RebuildPlan,
    steps: Sequence[PartitionStep],
    *,
    rules: RaceRules = RaceRules(),
) -> list[RebuildResult]:
    """Rebuild the partitions of ``steps`` with one read of their trigger rows, then swap each in; results in order.

    Every MV writing the target runs its own SELECT once over the trigger rows of all the windows
    (:func:`~chmv_assets.sql.rebuild_sql.range_select`: each partition gets the rows :func:`run_step` would
    give it) into one shadow; each partition then passes its shrink guard, and those that passed replace the live
    ones in one ``ALTER`` (:func:`~chmv_assets.sql.rebuild_sql.swaps_sql`: ``REPLACE PARTITION`` each, metadata
    only; ``DROP PARTITION`` if it is empty), in order. The shadow may also
    hold partitions the read's edges reach (past the last window, by a truncation's grain): they are not
    swapped, and go with the shadow. Where the trigger's part metadata says every row of it is inside the read's
    span, the read has no time predicate. Readers see each partition old or new, never a mix. A partition a write
    raced is read again (alone with the others raced in the same read). Steps that are not ClickHouse-engine
    partition swaps go through :func:`run_step`.

    Args:
        client: An open client (the caller holds the plan's gates and leases for the whole call).
        project: The parsed DDL.
        plan: The plan the steps belong to.
        steps: Partitions of ``plan``.
        rules: Reads of raced partitions.

    Raises:
        ShrinkRefused: A guarded partition of an unforced plan would shrink: it and the later ones are not
            swapped (the earlier ones are), the shadow is dropped.
        RacedWrites: Writes kept racing partitions through every read (the others are swapped).
    """
    grouped = [s for s in steps if s.engine == Engine.CLICKHOUSE and s.swap == Swap.REPLACE_PARTITION and _timed(s)]
    alone = {i: run_step(client, project, plan, s, rules=rules) for i, s in enumerate(steps) if s not in grouped}
    if not grouped:
        return list(alone.values())
    read = _Read(client, project, plan, one_read=True, pacing=rules.pacing)
    results = iter(_Races(read, rules).run(grouped))
    return [alone[i] if i in alone else next(results) for i in range(len(steps))]


def swapped_partition(table: Table, plan: RebuildPlan, step: PartitionStep) -> str:
    """The partition ``step``'s swap replaces: the partition's PARTITION BY value (its window's and its key's,
    :func:`~chmv_assets.sql.rebuild_sql.partition_tuple`), ``tuple()`` for an unpartitioned target (an MV's inner table
    too: never an exchange, see :class:`~chmv_assets.engine.rebuild.planner.Swap`). A whole-table step of a partitioned target
    swaps each partition instead (:func:`whole_table_swaps`)."""
    return partition_tuple(table, plan.scheme, step.window, zone=plan.zone)


def _timed(step: PartitionStep) -> bool:
    """A step of a time window (several of them are read together); a partition of a key alone is read alone."""
    return step.window is not None and step.window.timed


def whole_table_swaps(client: Client, live: ObjectRef, shadow: ObjectRef) -> list[tuple[str, bool]]:
    """Every partition of a whole-table rebuild of a partitioned table, as ``(PARTITION ID '…', empty)`` swaps: those
    of the shadow replace the live ones, the live ones the shadow does not have are dropped."""
    held = read_partitions(client, [live, shadow])
    in_shadow = {p.partition_id for p in held[shadow]}
    every = sorted(in_shadow | {p.partition_id for p in held[live]})
    return [(f"ID {string_literal(pid)}", pid not in in_shadow) for pid in every]


def race_ranges(
    project: Project,
    target: ObjectRef,
    scheme: PartitionScheme,
    windows: Sequence[PartitionWindow | None],
    *,
    zone: str,
) -> dict[ObjectRef, list[str | None]]:
    """Per trigger, per window, the source rows whose arrival races a read of the window: those mapping into it (the
    pruning range of each MV reading the trigger, OR-ed), any row (None) for a whole table or where a range cannot be
    derived (:func:`chmv_assets.engine.races.raced_windows` counts them in the parts written since the read)."""
    views = project.views_into(target)
    ranges: dict[ObjectRef, list[str | None]] = {}
    for trigger in dict.fromkeys(v.trigger for v in views if v.trigger is not None):
        readers = [v for v in views if v.trigger == trigger]
        ranges[trigger] = [_race_range(project, scheme, readers, window, zone) for window in windows]
    return ranges


def _race_range(
    project: Project,
    scheme: PartitionScheme,
    views: Sequence[MaterializedView],
    window: PartitionWindow | None,
    zone: str,
) -> str | None:
    if window is None or not scheme.partitioned:
        return None
    predicates = [source_range_predicate(v, project, scheme, window, zone=zone) for v in views]
    if any(p is None for p in predicates):
        return None
    return " OR ".join(f"({p})" for p in dict.fromkeys(predicates))


@dataclass
class _Shadow:
    """One read into a shadow: its rows per step, and the statements that filled it."""

    ref: ObjectRef
    rows: list[int]
    statements: list[str]
    seconds: float


class _Read:
    """How a group of steps is read into one shadow: one step alone (:func:`view_select`, its own shadow) or several
    with one read (:func:`range_select`, a shadow for the range, one insert per MV and per run of at most the pacer's
    partitions per insert). Every fill is paced (:mod:`chmv_assets.engine.pacing.pacer`)."""

    def __init__(
        self,
        client: Client,
        project: Project,
        plan: RebuildPlan,
        *,
        one_read: bool,
        trigger_relation: Callable[[ObjectRef], str | None] | None = None,
        pacing: PacingConfig | None = None,
    ):
        self.client, self.project, self.plan = client, project, plan
        self.one_read = one_read
        self.trigger_relation = trigger_relation
        self.pacer = pacer_for(client, pacing)
        table = project.table(plan.target)
        assert table is not None
        self.table = table
        self.views = project.views_into(plan.target)

    def statement(
        self, sql: str, statements: list[str], kind: str, settings: dict | None = None, *, paced: str | None = None
    ) -> None:
        """Run ``sql``; an insert named by ``paced`` waits for the server's room and retries its refusals first."""
        statements.append(sql)
        query_id = statement_id("rebuild", self.plan.run, self.plan.live.fqn, kind, str(len(statements)))

        def run() -> None:
            self.client.command(sql, settings={**(settings or {}), "query_id": query_id})

        if paced is None:
            run()
        else:  # the live target's part counts hold it (the shadow is new: only chmv writes it)
            self.pacer.run(paced, run, watch=[self.plan.live])

    def fill(self, steps: Sequence[PartitionStep]) -> _Shadow:
        """The shadow of ``steps``, filled by every MV's own SELECT (the caller drops it)."""
        started = time.monotonic()
        plan, table, statements = self.plan, self.table, []
        shadow = shadow_ref(plan.live, "range", plan.run) if self.one_read else steps[0].shadow
        assert shadow is not None
        # room on the server before the shadow exists: a run that gives up waiting leaves nothing behind
        self.pacer.wait_for_room(f"{plan.target.fqn} {steps[0].key or '(whole table)'}: fill", [plan.live])
        self.statement(drop_shadow_sql(shadow), statements, "drop")
        self.statement(create_shadow_sql(shadow, plan.live, table), statements, "create")
        if not self.one_read:
            step = steps[0]
            for view in self.views:
                relation = self.trigger_relation(view.trigger) if self.trigger_relation and view.trigger else None
                select = view_select(
                    view, self.project, table, plan.scheme, step.window, zone=plan.zone, trigger_relation=relation
                )
                _LOG.info(f"{view.ref.fqn}: running the MV's own SELECT into {shadow.fqn}")
                what = f"{plan.target.fqn} {step.key or '(whole table)'}: {view.ref.fqn}'s fill"
                self.statement(insert_sql(shadow, view, select), statements, "fill", SHADOW_INSERT_SETTINGS, paced=what)
            rows = [int(self.client.command(f"SELECT count() FROM {qualified(shadow)}"))]
            return _Shadow(shadow, rows, statements, time.monotonic() - started)
        windows = [s.window for s in steps if s.window is not None]
        assert table.partition_by is not None and len(windows) == len(steps)
        # at most the pacer's partitions per insert; runs of them keep only their own partitions (the edge partitions
        # one run's read reaches are another run's: both in one shadow would count their rows twice)
        runs = chunks(windows, self.pacer.partitions_per_insert()) if self.pacer.rules.enabled else [windows]
        for view in self.views:
            split = f" ({len(runs)} inserts of at most {len(runs[0])} partitions)" if len(runs) > 1 else ""
            _LOG.info(
                f"{view.ref.fqn}: running the MV's own SELECT over {len(windows)} partitions into {shadow.fqn}{split}"
            )
            for number, run in enumerate(runs, start=1):
                holds_all = span_holds_all_sql(view, self.project, plan.scheme, span_of(run), zone=plan.zone)
                whole = holds_all is not None and bool(self.client.query(holds_all).result_rows[0][0])
                alone = len(runs) > 1  # keep its own partitions only
                select = range_select(
                    view, self.project, table, plan.scheme, run, zone=plan.zone, only_windows=alone, prune=not whole
                )
                what = f"{plan.target.fqn} {run[0].key}..{run[-1].key}: {view.ref.fqn}'s fill {number}/{len(runs)}"
                self.statement(insert_sql(shadow, view, select), statements, "fill", SHADOW_INSERT_SETTINGS, paced=what)
        filters = [partition_filter(table, plan.scheme, w, zone=plan.zone) for w in windows]
        counts = self.client.query(  # every partition's rows in one scan of the shadow
            "SELECT " + ", ".join(f"countIf({f})" for f in filters) + f" FROM {qualified(shadow)}"
        ).result_rows[0]
        return _Shadow(shadow, [int(c) for c in counts], statements, time.monotonic() - started)

    def watched_names(self) -> list[str]:
        """The tables whose inserts reach the triggers: the names running inserts are matched against."""
        roots = {r for w in self.plan.writers for r in (w.source, *w.roots)} or set(self.plan.gates)
        return sorted({r.name for r in roots})


class _Races:
    """Reads, swaps and, for a partition a write raced, reads again (see the module)."""

    def __init__(self, read: _Read, rules: RaceRules):
        self.read, self.rules = read, rules
        self.plan = read.plan

    def run(self, steps: Sequence[PartitionStep]) -> list[RebuildResult]:
        read, plan = self.read, self.plan
        done: dict[int, RebuildResult] = {}
        pending = list(range(len(steps)))
        why = ""
        swapped_raced = False
        for attempt in range(1, self.rules.attempts + 1):
            if attempt > 1:
                pause = self.rules.pause(attempt)
                _LOG.info(
                    f"{plan.target.fqn}: {why}; reading {self._keys(steps, pending)} again in {pause:.1f}s "
                    f"(attempt {attempt} of {self.rules.attempts})"
                )
                time.sleep(pause)
            group = [steps[i] for i in pending]
            seen = races.watch(read.client, plan.gates)
            running = races.wait_for_inserts(read.client, read.watched_names(), self.rules.insert_wait_seconds)
            if running:
                why = f"inserts into its sources were still running ({'; '.join(r.describe() for r in running[:3])})"
                swapped_raced = False
                continue
            outcome = self._attempt(group, seen, attempt)
            for index, result in zip(pending, outcome.results, strict=True):
                if result is not None:
                    done[index] = result
            pending = [pending[i] for i in outcome.raced]
            if outcome.refused is not None:
                raise outcome.refused
            if not pending:
                return [done[i] for i in range(len(steps))]
            swapped_raced = outcome.swapped_raced
            why = f"writes raced the read of {self._keys(steps, pending)}" + (
                " after its swap (a row's MV output may have gone with the old partition)"
                if swapped_raced
                else " (not swapped)"
            )
        state = (
            "the last read was swapped: rows written during it may miss their MV output until the partition is "
            "rebuilt again (the parity sweep and recovery will see it)"
            if swapped_raced
            else "the last read was not swapped: the live partition is as it was"
        )
        raise RacedWrites(
            f"{plan.target.fqn} {self._keys(steps, pending)}: {why}, through {self.rules.attempts} attempts; {state}. "
            "Writers chmv does not control keep inserting rows of this window: rebuild it when they pause, or list "
            "the source under [writers] chmv if only chmv writes it. Partitions already swapped: "
            f"{', '.join(done[i].partition or '(all)' for i in sorted(done)) or 'none'}."
        )

    @staticmethod
    def _keys(steps: Sequence[PartitionStep], indices: Sequence[int]) -> str:
        keys = [steps[i].key or "(whole table)" for i in indices]
        return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

    def _attempt(self, group: list[PartitionStep], seen: races.Watch, attempt: int) -> _Outcome:
        """One read of ``group``, swapped where no write raced it; which steps to read again."""
        read, plan = self.read, self.plan
        table = read.table
        ranges = race_ranges(read.project, plan.target, plan.scheme, [s.window for s in group], zone=plan.zone)
        shadow = read.fill(group)
        outcome = _Outcome(results=[None] * len(group))
        try:
            before = set(races.raced_windows(read.client, seen, ranges))
            passed: list[tuple[int, str, int]] = []  # (index in group, partition, rows) of the guards passed
            for i, (step, rows) in enumerate(zip(group, shadow.rows, strict=True)):
                if i in before:
                    continue
                if step.guard and not plan.force:
                    try:
                        new, old = check_shrink(read.client, table, plan, step, shadow=shadow.ref)
                    except ShrinkRefused as error:
                        outcome.refused = error  # the partitions before it are swapped, it and the later ones not
                        break
                    _LOG.info(
                        f"{plan.target.fqn} {step.key or '(whole table)'}: shrink guard passed ({new:,} rows rebuilt, "
                        f"{old:,} live)"
                    )
                passed.append((i, swapped_partition(table, plan, step), rows))
            after: set[int] = set()
            if passed:
                begun = time.monotonic()
                swaps = [(partition, rows == 0) for _, partition, rows in passed]
                if group[0].window is None and table.partition_by is not None:  # the whole of a partitioned table
                    swaps = whole_table_swaps(read.client, plan.live, shadow.ref)
                if swaps:  # a whole table that is empty on both sides has nothing to swap
                    read.statement(swaps_sql(plan.live, shadow.ref, swaps), shadow.statements, "swap")
                swapped = {i for i, _, _ in passed}
                after = set(races.raced_windows(read.client, seen, ranges)) & swapped
                seconds = time.monotonic() - begun + shadow.seconds
                first = True
                for i, _, rows in passed:
                    if i in after:
                        continue
                    method = "drop" if rows == 0 else "replace"
                    _LOG.info(
                        f"{plan.target.fqn} {group[i].key or '(whole table)'}: {method}, {rows} rows"
                        + (f" (attempt {attempt})" if attempt > 1 else "")
                    )
                    # The shared read and the one swap statement are counted once, with the first partition.
                    outcome.results[i] = RebuildResult(
                        plan.target.fqn,
                        group[i].key,
                        method,
                        rows,
                        seconds if first else 0.0,
                        shadow.statements if first else [],
                        attempt,
                    )
                    first = False
            outcome.raced = sorted(before | after)
            outcome.swapped_raced = bool(after)
        finally:  # the results' statements end with it
            read.statement(drop_shadow_sql(shadow.ref), shadow.statements, "drop")
        return outcome


@dataclass
class _Outcome:
    results: list[RebuildResult | None]
    raced: list[int] = field(default_factory=list)
    swapped_raced: bool = False
    refused: ShrinkRefused | None = None
