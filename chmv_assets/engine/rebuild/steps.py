"""Run steps of a rebuild plan, each atomically and exactly under racing writes: shadow, the MVs' own SELECTs, swap.

A batch of steps (one partition is a batch of one) is read once into a shadow and each partition is swapped in.
Every read is watched for writes that race it (:mod:`chmv_assets.engine.races`): a partition whose sources received
rows of its window during the read is not swapped, and one that received them between the read and the end of its
swap is swapped and read again; up to ``[rebuild] race_attempts`` reads, with a growing pause between them. What still
races after the last attempt is reported (:class:`~chmv_assets.errors.RacedWrites`), never swapped silently.

What a step does was decided by the planner (:mod:`chmv_assets.engine.rebuild.planner`): the shadow and its engine,
the swap and its partition, the trigger rows each read covers, the shrink guard, the race rules; this module reads
the plan and runs it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project
from chmv_assets.ddl.partitioning import PartitionScheme, PartitionWindow
from chmv_assets.engine import races
from chmv_assets.engine.catalog import live_table
from chmv_assets.engine.clients import command_int
from chmv_assets.engine.clock import session_zone
from chmv_assets.engine.ingest.cutoff import crash_point
from chmv_assets.engine.pacing.pacer import chunks, pacer_for
from chmv_assets.engine.parts import read_partitions
from chmv_assets.engine.rebuild import foreign_rows
from chmv_assets.engine.rebuild.planner import PartitionStep, RebuildPlan, Swap, plan_from_source
from chmv_assets.engine.rebuild.shrink_guard import check_shrink
from chmv_assets.engine.statements import statement_id
from chmv_assets.errors import NOT_SWAPPED, ChmvError, ForeignRowsRefused, NoRoomUnderGate, RacedWrites, ShrinkRefused
from chmv_assets.sql.quoting import qualified, string_literal
from chmv_assets.sql.rebuild_sql import (
    TriggerRange,
    drop_shadow_sql,
    insert_sql,
    range_select,
    span_holds_all_sql,
    span_of,
    span_range,
    swaps_sql,
    trigger_predicate,
)

_LOG = logging.getLogger(__name__)

#: Settings an MV's SELECT is evaluated with, by a rebuild's fill and by parity's recompute alike (a SELECT may read
#: settings: both must see the same ones): one rebuild may write many partitions of an unpartitioned asset.
RECOMPUTE_SETTINGS = {"max_partitions_per_insert_block": 0}
#: Settings for inserts into a shadow table.
SHADOW_INSERT_SETTINGS = {**RECOMPUTE_SETTINGS, "insert_deduplicate": 0}


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
    loaded: LoadedProject,
    target: ObjectRef,
    window: PartitionWindow | None,
) -> RebuildResult:
    """Rebuild one partition of ``target`` (or all of it) from its source tables, and swap it in.

    The planner's ClickHouse-engine plan of one partition, run on ``client``; see :func:`run_steps`.
    """
    project = loaded.project
    plan = plan_from_source(loaded, target, [window], live_table(client, project, target), zone=session_zone(client))
    return run_step(client, project, plan, plan.steps[0])


def run_step(
    client: Client,
    project: Project,
    plan: RebuildPlan,
    step: PartitionStep,
    *,
    trigger_relation: Callable[[PartitionStep, ObjectRef], str | None] | None = None,
    damaged: Collection[str | None] = (),
) -> RebuildResult:
    """Rebuild the partition of ``step``: :func:`run_steps` of a batch of one."""
    return run_steps(client, project, plan, [step], trigger_relation=trigger_relation, damaged=damaged)[0]


#: Told of each partition as it is swapped in for good (its step and its result), while the batch goes on.
OnSwapped = Callable[[PartitionStep, RebuildResult], None]


def run_steps(
    client: Client,
    project: Project,
    plan: RebuildPlan,
    steps: Sequence[PartitionStep],
    *,
    trigger_relation: Callable[[PartitionStep, ObjectRef], str | None] | None = None,
    damaged: Collection[str | None] = (),
    on_swapped: OnSwapped | None = None,
) -> list[RebuildResult]:
    """Rebuild the partitions of ``steps`` in batches: one read of a batch's trigger rows, then each partition
    swapped in; results in order.

    Every MV writing into the target (a fan-in has several) runs its own SELECT once over the trigger rows of the
    batch's windows (:func:`~chmv_assets.sql.rebuild_sql.range_select`: each partition gets the rows it would get
    alone) into the batch's shadow (the target's structure); each partition then passes its shrink guard, and
    those that passed replace the live ones in one ``ALTER`` (:func:`~chmv_assets.sql.rebuild_sql.swaps_sql`:
    ``REPLACE PARTITION`` each, metadata only; ``DROP PARTITION`` if it is empty; ``tuple()`` for an unpartitioned
    target), in order. Readers see each partition old or new, never a mix. The shadow of several windows may also
    hold partitions the read's edges reach (past the last window, by a truncation's grain): they are not swapped,
    and go with the shadow; where the trigger's part metadata says every row of it is inside the read's span, the
    read has no time predicate. A partition a write raced is read again (with the others raced in the same read).
    The steps that share a shadow form a batch (the planner's choice: a plan made with ``one_read``); every other
    step is a batch of one; a refreshable MV is refreshed by the server. Batches run in the order of their first
    step.

    Args:
        client: An open client (the caller holds the plan's gates and leases for the whole call).
        project: The parsed DDL.
        plan: The plan the steps belong to.
        steps: Partitions of ``plan``.
        trigger_relation: Per step and trigger table, a relation to read instead (the lake's rows and the table's after
            the cutoff: :mod:`chmv_assets.engine.rebuild.engines`).
        damaged: Keys of partitions an earlier hold of this run swapped in while writes raced it (see
            :attr:`~chmv_assets.errors.ChmvError.damaged`): damaged until a read of them is swapped in clean.
        on_swapped: Told of each partition once it is swapped in clean (no later read of the run changes it), right
            then: a run's progress, partition by partition.

    Raises:
        ShrinkRefused: A guarded partition would shrink: it and the later ones of its batch are not swapped (the
            earlier ones are), the shadow is dropped.
        ForeignRowsRefused: A partition holds rows its rebuild does not yield (:mod:`.foreign_rows`): likewise.
        RacedWrites: Writes kept racing partitions through every read (the others are swapped).
        NoRoomUnderGate: No room on the server for a read under the gates; ``damaged`` names the partitions of this
            run left damaged so far (the caller reads the rest again, passing them back).

    Every error raised names in ``damaged`` the partitions this run may have left damaged.
    """
    batches: dict[object, list[int]] = {}
    for i, step in enumerate(steps):
        batches.setdefault(step.shadow if step.shadow is not None else i, []).append(i)
    done: dict[int, RebuildResult] = {}
    for batch in batches.values():
        group = [steps[i] for i in batch]
        try:
            if group[0].swap == Swap.REFRESH:
                results = [_refresh(client, project, plan)]
                if on_swapped is not None:
                    on_swapped(group[0], results[0])
            else:
                results = _Races(_Read(client, project, plan, trigger_relation), damaged, on_swapped).run(group)
        except NoRoomUnderGate as busy:  # the caller waits without the gates and reads the rest again
            busy.done = [done[i] for i in sorted(done)]
            raise
        done.update(zip(batch, results, strict=True))
    return [done[i] for i in range(len(steps))]


def _refresh(client: Client, project: Project, plan: RebuildPlan) -> RebuildResult:
    """``SYSTEM REFRESH VIEW`` and ``SYSTEM WAIT VIEW`` of every refreshable MV writing the target."""
    started, statements = time.monotonic(), []
    for view in project.views_into(plan.target):
        for sql in (f"SYSTEM REFRESH VIEW {qualified(view.ref)}", f"SYSTEM WAIT VIEW {qualified(view.ref)}"):
            statements.append(sql)
            client.command(sql)
    rows = command_int(client, f"SELECT count() FROM {qualified(plan.target)}")
    return RebuildResult(plan.target.fqn, None, "refresh", rows, time.monotonic() - started, statements)


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
    """Per trigger, per window, the source rows whose arrival races a read of the window: those mapping into it
    (:func:`~chmv_assets.sql.rebuild_sql.trigger_predicate`, as the planner puts in each step's relations), any row
    (None) for a whole table or where a range cannot be derived (:func:`chmv_assets.engine.races.raced_windows`
    counts them in the parts written since the read)."""
    views = project.views_into(target)
    ranges: dict[ObjectRef, list[str | None]] = {}
    for trigger in dict.fromkeys(v.trigger for v in views if v.trigger is not None):
        readers = [v for v in views if v.trigger == trigger]
        ranges[trigger] = [trigger_predicate(readers, project, scheme, window, zone=zone) for window in windows]
    return ranges


def _planned_ranges(steps: Sequence[PartitionStep]) -> dict[ObjectRef, list[str | None]]:
    """:func:`race_ranges` of ``steps`` as their plan says (each relation's predicate)."""
    ranges: dict[ObjectRef, list[str | None]] = {}
    for index, step in enumerate(steps):
        for relation in step.relations:
            ranges.setdefault(relation.source, [None] * len(steps))[index] = relation.predicate
    return ranges


@dataclass
class _Shadow:
    """One read into a shadow: its rows per step, and the statements that filled it."""

    ref: ObjectRef
    rows: list[int]
    statements: list[str]
    seconds: float
    partitions: list[list[str]] = field(default_factory=list)
    """Per step, the shadow's partition ids holding its rows (what its swap replaces in the live table)."""


class _Read:
    """How a batch of steps is read into its shadow: one insert per MV (:func:`range_select`) and,
    for several windows, per run of at most the pacer's partitions per insert. Every fill is paced
    (:mod:`chmv_assets.engine.pacing.pacer`)."""

    def __init__(
        self,
        client: Client,
        project: Project,
        plan: RebuildPlan,
        trigger_relation: Callable[[PartitionStep, ObjectRef], str | None] | None = None,
    ):
        self.client, self.project, self.plan = client, project, plan
        self.trigger_relation = trigger_relation
        self.pacer = pacer_for(client, plan.races.pacing)
        table = project.table(plan.target)
        assert table is not None
        self.table = table
        self.views = project.views_into(plan.target)
        self.partitions: dict[ObjectRef, list[str]] | None = None  # of the live target, those the batch swaps in

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
            self.pacer.run(paced, run, watch=[self.plan.live], partitions=self.partitions)

    def fill(self, steps: Sequence[PartitionStep]) -> _Shadow:
        """The shadow of ``steps``, filled by every MV's own SELECT (the caller drops it)."""
        started = time.monotonic()
        plan, statements = self.plan, list[str]()
        shadow, create = steps[0].shadow, steps[0].create_shadow
        assert shadow is not None and create is not None
        # room on the server before the shadow exists: a run that gives up waiting leaves nothing behind; only the
        # partitions the swaps replace hold it (the shadow is chmv's alone)
        self.partitions = written_partitions(self.client, plan.live, steps)
        self.pacer.wait_for_room(f"{plan.target.fqn} {_label(steps[0].window)}: fill", [plan.live], self.partitions)
        self.statement(drop_shadow_sql(shadow), statements, "drop")
        self.statement(create, statements, "create")
        crash_point("rebuild:shadow_created")
        windows = [s.window for s in steps]
        runs = self._runs(list(steps))
        # one window's output is kept to its partition; so is each run's of several (the edge partitions one run's
        # read reaches are another run's: both in one shadow would count their rows twice)
        kept = len(windows) == 1 or len(runs) > 1
        try:
            for view in self.views:
                _LOG.info(self._reading(view, shadow, windows, runs))
                for number, run in enumerate(runs, start=1):
                    number_text = f" {number}/{len(runs)}" if len(windows) > 1 else ""
                    self._insert(view, shadow, run, number_text, kept, statements)
                    crash_point("rebuild:mid_fill")
        except NoRoomUnderGate:  # read again once the server has room: nothing of this read is left behind
            self.statement(drop_shadow_sql(shadow), statements, "drop")
            raise
        rows, partitions = self._rows(shadow, steps, kept)
        return _Shadow(shadow, rows, statements, time.monotonic() - started, partitions)

    def _runs(self, steps: list[PartitionStep]) -> list[list[PartitionStep]]:
        """The steps cut into runs of at most the pacer's partitions per insert (one step: itself)."""
        if len(steps) == 1 or not self.pacer.rules.enabled:
            return [steps]
        return chunks(steps, self.pacer.partitions_per_insert())

    def _reading(
        self, view: MaterializedView, shadow: ObjectRef, windows: list[PartitionWindow | None], runs: list
    ) -> str:
        if len(windows) == 1:
            return f"{view.ref.fqn}: running the MV's own SELECT into {shadow.fqn}"
        split = f" ({len(runs)} inserts of at most {len(runs[0])} partitions)" if len(runs) > 1 else ""
        return f"{view.ref.fqn}: running the MV's own SELECT over {len(windows)} partitions into {shadow.fqn}{split}"

    def _insert(
        self,
        view: MaterializedView,
        shadow: ObjectRef,
        run: list[PartitionStep],
        number: str,
        kept: bool,
        statements: list[str],
    ) -> None:
        """One paced ``INSERT INTO shadow SELECT`` of the MV over the windows of ``run``, pruned and kept as the plan
        says (each step's :attr:`~chmv_assets.engine.rebuild.planner.PartitionStep.reads` and partition filter)."""
        relation = self.trigger_relation(run[0], view.trigger) if self.trigger_relation and view.trigger else None
        windows = [s.window for s in run]
        planned = [s.reads_of(view.ref) for s in run]
        ranges = None if any(r is None for r in planned) else [r for r in planned if r is not None]
        filters = [s.partition_filter for s in run]
        keep = None if any(f is None for f in filters) else [f for f in filters if f is not None]
        prune = relation is not None or len(run) == 1 or not self._holds_all(view, windows, ranges)
        select = range_select(
            view,
            self.project,
            self.table,
            self.plan.scheme,
            windows,
            zone=self.plan.zone,
            trigger_relation=relation,
            only_windows=kept,
            prune=prune,
            ranges=ranges,
            keep=keep,
        )
        keys = _label(windows[0]) if len(run) == 1 else f"{_label(windows[0])}..{_label(windows[-1])}"
        what = f"{self.plan.target.fqn} {keys}: {view.ref.fqn}'s fill{number}"
        self.statement(insert_sql(shadow, view, select), statements, "fill", SHADOW_INSERT_SETTINGS, paced=what)

    def _holds_all(
        self, view: MaterializedView, run: list[PartitionWindow | None], ranges: list[TriggerRange] | None
    ) -> bool:
        """The trigger's part metadata says every row of it is inside the span of the windows of ``run`` (their
        planned ranges: :func:`~chmv_assets.sql.rebuild_sql.span_range`)."""
        span = span_of(run)  # type: ignore[arg-type]
        bounds = span_range(ranges, run) if ranges is not None else None  # type: ignore[arg-type]
        sql = span_holds_all_sql(view, self.project, self.plan.scheme, span, zone=self.plan.zone, bounds=bounds)
        return sql is not None and bool(self.client.query(sql).result_rows[0][0])

    def _rows(self, shadow: ObjectRef, steps: Sequence[PartitionStep], kept: bool) -> tuple[list[int], list[list[str]]]:
        """Each step's rows in the shadow and the shadow's partition ids holding them: the shadow's, where it holds
        one step's only; else by partition, in one scan."""
        if len(steps) == 1 and (kept or steps[0].partition_filter is None):
            found = read_partitions(self.client, [shadow]).get(shadow, [])
            rows = command_int(self.client, f"SELECT count() FROM {qualified(shadow)}")
            return [rows], [[p.partition_id for p in found if p.rows]]
        filters = [s.partition_filter for s in steps]
        assert all(filters)
        per_partition = self.client.query(
            "SELECT _partition_id, "
            + ", ".join(f"countIf({f})" for f in filters)
            + f" FROM {qualified(shadow)} GROUP BY _partition_id"
        ).result_rows
        counts = [sum(int(r[i + 1]) for r in per_partition) for i in range(len(steps))]
        return counts, [[str(r[0]) for r in per_partition if r[i + 1]] for i in range(len(steps))]


def written_partitions(
    client: Client, live: ObjectRef, steps: Sequence[PartitionStep]
) -> dict[ObjectRef, list[str]] | None:
    """The ``partition_id``s of ``live`` the swaps of ``steps`` replace (the server computes them from each step's
    partition value), or None where a step swaps the whole table or every partition of it (then all of them count)."""
    values = [s.partition for s in steps]
    if any(s.swap != Swap.REPLACE_PARTITION for s in steps) or any(
        v is None or not v.startswith("tuple(") or v == "tuple()" for v in values
    ):
        return None
    named = [v for v in values if v is not None]  # every one (the check above)
    ids = client.query("SELECT [" + ", ".join(f"partitionId{v.removeprefix('tuple')}" for v in named) + "]")
    return {live: [str(i) for i in ids.result_rows[0][0]]}


def _label(window: PartitionWindow | None) -> str:
    return window.key if window is not None else "(whole table)"


class _Races:
    """Reads, swaps and, for a partition a write raced, reads again (see the module)."""

    def __init__(self, read: _Read, damaged: Collection[str | None] = (), on_swapped: OnSwapped | None = None):
        self.read, self.plan = read, read.plan
        self.rules = read.plan.races
        self.damaged_before = set(damaged)
        self.on_swapped = on_swapped

    def run(self, steps: Sequence[PartitionStep]) -> list[RebuildResult]:
        plan = self.plan
        done: dict[int, RebuildResult] = {}
        pending = list(range(len(steps)))
        why = ""
        # swapped while a write raced them, in any attempt (or an earlier hold of the run), not swapped clean since
        damaged = {i for i, step in enumerate(steps) if step.key in self.damaged_before}
        for attempt in range(1, self.rules.attempts + 1):
            if attempt > 1:
                pause = self.rules.pause(attempt)
                _LOG.info(
                    f"{plan.target.fqn}: {why}; reading {self._keys(steps, pending)} again in {pause:.1f}s "
                    f"(attempt {attempt} of {self.rules.attempts})"
                )
                time.sleep(pause)
            group = [steps[i] for i in pending]
            try:
                seen, unsettled = self._settled_watch()
                if unsettled:
                    why = unsettled
                    continue
                outcome = self._attempt(group, seen, attempt)
            except NoRoomUnderGate as busy:  # the caller reads again: the damage so far goes with it
                busy.damaged = tuple(steps[i].key for i in sorted(damaged))
                raise
            for index, result in zip(pending, outcome.results, strict=True):
                if result is not None:
                    done[index] = result
                    damaged.discard(index)  # a clean read swapped in: what an earlier swap lost is back
                    if self.on_swapped is not None:  # for good: a partition done is never read again
                        self.on_swapped(steps[index], result)
            damaged |= {pending[i] for i in outcome.swapped_raced}
            pending = [pending[i] for i in outcome.raced]
            if outcome.refused is not None:
                raise with_damage(outcome.refused, [steps[i].key for i in sorted(damaged)])
            if not pending:
                return [done[i] for i in range(len(steps))]
            why = f"writes raced the read of {self._keys(steps, pending)}" + (
                " after its swap (a row's MV output may have gone with the old partition, or landed after it and "
                "count twice)"
                if outcome.swapped_raced
                else " (not swapped)"
            )
        raise self._raced(steps, pending, sorted(damaged), done, why)

    def _raced(
        self, steps: Sequence[PartitionStep], pending: list[int], damaged: list[int], done: dict, why: str
    ) -> RacedWrites:
        """The error of partitions writes raced through every attempt: which of them an earlier attempt swapped in
        while a write raced it (they may have lost rows and need a rebuild) and which were never swapped."""
        plan = self.plan
        untouched = [i for i in pending if i not in damaged]
        state = []
        if damaged:
            state.append(
                f"it may have lost rows in {self._keys(steps, damaged)}: a read was swapped in while writes raced it, "
                "so rows written then may miss their MV output, or count twice; they need a rebuild"
            )
        if untouched:
            state.append(f"no read of {self._keys(steps, untouched)} was swapped in: as it was")
        return RacedWrites(
            f"{plan.target.fqn} {self._keys(steps, pending)}: {why}, through {self.rules.attempts} attempts; "
            f"{'; '.join(state)}. Writers chmv does not control keep inserting rows of this window: rebuild it when "
            "they pause, or list the source under [writers] chmv if only chmv writes it. Partitions already swapped: "
            f"{', '.join(done[i].partition or '(all)' for i in sorted(done)) or 'none'}.",
            damaged=tuple(steps[i].key for i in damaged),
        )

    def _settled_watch(self) -> tuple[races.Watch, str]:
        """The triggers' watch, once every block committed before it has reached the MVs; else why not.

        What is queued on its way into the watched tables is flushed first (not a race then); after the watch, the
        flush again waits for one a background thread was running (a Buffer's, an asynchronous insert's: their blocks
        commit before their MV output, in no process list), and the inserts running into them are awaited.
        """
        client, watched = self.read.client, self.plan.watched
        races.flush_pending(client, watched)
        seen = races.watch(client, self.plan.gates)
        failed = races.flush_pending(client, watched)
        if failed:
            return seen, (
                f"what is on its way into its sources could not be flushed: {'; '.join(failed)} (grant chmv OPTIMIZE "
                "on those Buffer tables and SYSTEM FLUSH ASYNC INSERT QUEUE)"
            )
        running = races.wait_for_inserts(client, watched, self.rules.insert_wait_seconds)
        if running:
            return seen, (
                f"inserts into its sources were still running ({'; '.join(r.describe() for r in running[:3])})"
            )
        return seen, ""

    @staticmethod
    def _keys(steps: Sequence[PartitionStep], indices: Sequence[int]) -> str:
        keys = [steps[i].key or "(whole table)" for i in indices]
        return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

    def _attempt(self, group: list[PartitionStep], seen: races.Watch, attempt: int) -> _Outcome:
        """One read of ``group``, swapped where no write raced it; which steps to read again."""
        read = self.read
        ranges = _planned_ranges(group)
        shadow = read.fill(group)
        crash_point("rebuild:filled")
        outcome = _Outcome(results=[None] * len(group))
        try:
            before = set(races.raced_windows(read.client, seen, ranges))
            passed = self._guarded(group, shadow, before, outcome)
            after: set[int] = set()
            if passed:
                begun = time.monotonic()
                swapping = races.shadow_parts(
                    read.client, shadow.ref, [p for i, _ in passed for p in shadow.partitions[i]]
                )
                self._swap(group, shadow, passed)
                crash_point("rebuild:swapped")
                since = races.after_swap(read.client, self.plan.live, swapping)
                after = set(races.raced_windows(read.client, seen, ranges))
                landed = set(races.landed(read.client, since))  # MV output of a block read: it would count twice
                after |= {i for i in range(len(group)) if landed & set(shadow.partitions[i])}
                after &= {i for i, _ in passed}
                seconds = time.monotonic() - begun + shadow.seconds
                kept = [(i, rows) for i, rows in passed if i not in after]
                self._results(group, shadow, kept, seconds, attempt, outcome)
            outcome.raced = sorted(before | after)
            outcome.swapped_raced = sorted(after)
        finally:  # the results' statements end with it
            read.statement(drop_shadow_sql(shadow.ref), shadow.statements, "drop")
        return outcome

    def _guarded(
        self, group: list[PartitionStep], shadow: _Shadow, raced: set[int], outcome: _Outcome
    ) -> list[tuple[int, int]]:
        """``(index in group, rows)`` of the steps no write raced whose shrink guard (where the plan set one) and
        foreign rows check (where the plan has one: :func:`.foreign_rows.checked`) passed, in order up to the first
        they stopped (``outcome.refused``: it and the later ones are not swapped)."""
        read, plan = self.read, self.plan
        passed: list[tuple[int, int]] = []
        for i, (step, rows) in enumerate(zip(group, shadow.rows, strict=True)):
            if i in raced:
                continue
            if step.guard:
                try:
                    new, old = check_shrink(read.client, read.table, plan, step, shadow=shadow.ref)
                except ShrinkRefused as error:
                    outcome.refused = error
                    break
                _LOG.info(
                    f"{plan.target.fqn} {_label(step.window)}: shrink guard passed ({new:,} rows rebuilt, {old:,} live)"
                )
            if foreign_rows.checked(plan):
                try:
                    foreign_rows.check_foreign_rows(
                        read.client, read.project, read.table, plan, step, shadow=shadow.ref
                    )
                except ForeignRowsRefused as error:
                    outcome.refused = error
                    break
            passed.append((i, rows))
        return passed

    def _swap(self, group: list[PartitionStep], shadow: _Shadow, passed: list[tuple[int, int]]) -> None:
        """Swap the partitions of ``passed`` in, in one ``ALTER``, as their steps say."""
        read, plan = self.read, self.plan
        if group[0].swap == Swap.REPLACE_EACH_PARTITION:
            swaps = whole_table_swaps(read.client, plan.live, shadow.ref)
        else:
            swaps = [(group[i].partition, rows == 0) for i, rows in passed]  # type: ignore[misc]
        if swaps:  # a whole table that is empty on both sides has nothing to swap
            read.statement(swaps_sql(plan.live, shadow.ref, swaps), shadow.statements, "swap")

    def _results(
        self,
        group: list[PartitionStep],
        shadow: _Shadow,
        swapped: list[tuple[int, int]],
        seconds: float,
        attempt: int,
        outcome: _Outcome,
    ) -> None:
        """The results of the partitions swapped that no write raced since: the shared read and the one swap
        statement are counted once, with the first of them."""
        target = self.plan.target.fqn
        for n, (i, rows) in enumerate(swapped):
            method = "drop" if rows == 0 else "replace"
            again = f" (attempt {attempt})" if attempt > 1 else ""
            _LOG.info(f"{target} {_label(group[i].window)}: {method}, {rows} rows{again}")
            statements = shadow.statements if n == 0 else []
            outcome.results[i] = RebuildResult(
                target, group[i].key, method, rows, seconds if n == 0 else 0.0, statements, attempt
            )


def with_damage(error: ChmvError, keys: Sequence[str | None]) -> ChmvError:
    """``error``, naming ``keys`` as the partitions the run may have left damaged (a swap raced by a write in an
    earlier attempt), in its message and its ``damaged``: a refusal of one partition never hides the damage of
    another (issue 25, class 2)."""
    keys = [k for k in keys if k not in error.damaged]
    if not keys:
        return error
    error.damaged = (*error.damaged, *keys)
    named = ", ".join(k or "(whole table)" for k in keys)
    text = str(error).replace(NOT_SWAPPED, "This attempt swapped nothing (see below for an earlier one).")
    error.args = (
        f"{text} Earlier in this run, a read of {named} was swapped in while writes raced it: it may have lost rows "
        "or hold some twice, and needs a rebuild.",
        *error.args[1:],
    )
    return error


@dataclass
class _Outcome:
    results: list[RebuildResult | None]
    raced: list[int] = field(default_factory=list)
    swapped_raced: list[int] = field(default_factory=list)  # swapped, then found raced
    refused: ShrinkRefused | ForeignRowsRefused | None = None
