"""Row-count parity per partition, MV-aware: the target partition vs the MVs' own SELECT over the same window.

What is compared depends on the target's engine, derived from the parsed model:

- MergeTree (pass-through, routing, plain aggregates): rows.
- SummingMergeTree: the sums of the summed columns, and the number of distinct keys.
- AggregatingMergeTree: ``fMerge`` of the additive ``AggregateFunction(f, …)`` columns (sum, count), and
  the number of distinct keys.
- ReplacingMergeTree / Collapsing: rows of the target read ``FINAL`` vs distinct keys of the recompute.

A trigger source that deduplicates itself (ReplacingMergeTree) is read ``FINAL`` for the recompute,
so duplicates the MV counted twice show up as an overcount. Both sides read only the partition: the
target through its PARTITION BY, the source through backfill_sql's pruning range.

The recompute reads the rows a rebuild would: where they come from is the one answer of
:func:`~chmv_assets.engine.rebuild.rows.rows_from` on the partition's coverage (:mod:`chmv_assets.engine.rebuild.coverage`),
or, for a partition just rebuilt, the place its fill read (:func:`verify_rebuilt`). From the landing zone (a trigger
that no longer holds the partition: a TTL, a dropped partition, a DELETE), the MV's SELECT runs over the landing rows up
to the ingestion cutoff and the table's rows after it, read as the fill reads them
(:mod:`chmv_assets.engine.ingest.lake_read`); from neither, the partition is reported "not verifiable" with the reason —
never failed because the source was truncated. Where the source may have lost rows its counts cannot show (a DELETE it
recorded since the window's start, :attr:`~chmv_assets.engine.rebuild.coverage.WindowCoverage.deletions`), the
recompute still reads it, and a target that holds MORE than it yields is reported not verifiable, not as a
mismatch a rebuild from the source would fix (that rebuild is shrink-guarded and would be refused); a target that
holds less is a mismatch as ever.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project, Table
from chmv_assets.ddl.partitioning import PartitionScheme, PartitionWindow
from chmv_assets.engine import races
from chmv_assets.engine.catalog import existing_objects, live_table
from chmv_assets.engine.clock import session_zone, wall_now
from chmv_assets.engine.drift import DriftItem, apply_pending, describe_pending, involved_objects_of
from chmv_assets.engine.health.verdicts import SELF_DEDUP_ENGINES, Measure, ParityResult
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.ingest.lake_read import lake_read, lake_span, read_cutoff
from chmv_assets.engine.rebuild.coverage import WindowCoverage, observe_coverage
from chmv_assets.engine.rebuild.engines import StepResult
from chmv_assets.engine.rebuild.planner import (
    READS,
    Engine,
    RebuildPlan,
    describe_feedback,
    feedback_reads,
    spark_capable,
    streamed_triggers,
    triggers_of,
)
from chmv_assets.engine.rebuild.rows import RowsFrom, RowSource, rows_from
from chmv_assets.engine.rebuild.steps import RECOMPUTE_SETTINGS, race_ranges
from chmv_assets.errors import ChmvError
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.rebuild_sql import partition_expression, partition_filter, range_select

#: Aggregate functions whose -Merge over a whole partition equals the -Merge of the recompute exactly.
ADDITIVE = {"sum", "count", "sumWithOverflow", "sumKahan"}


def measures_for(table: Table, views: Sequence[MaterializedView] = ()) -> list[tuple[str, str, str]]:
    """``(name, expression on the target, expression on the recompute)`` for the target's engine.

    Only figures that do not depend on how the inserts were batched: an MV fires per insert block, so a GROUP BY MV
    into a plain MergeTree (``views``: the MVs writing ``table``) writes one row per group per block, and its row
    count depends on the batching; its additive measures and its distinct groups do not (:func:`grouped_measures`).
    """
    family = table.engine.family if table.engine is not None else "MergeTree"
    keys = table.order_by or "tuple()"  # verbatim: executed as written
    key_names = set(table.order_by_columns)
    if family in SELF_DEDUP_ENGINES:
        return [("rows (FINAL)", "count()", f"uniqExact({keys})")]
    if family == "AggregatingMergeTree":
        out = []
        for column in table.columns:
            state = column.data_type.aggregate
            if state is not None and state.function in ADDITIVE:
                name = quote(column.name)
                expr = f"sum({name})" if state.simple else f"{state.function}Merge({name})"
                label = f"sum({column.name})" if state.simple else f"{state.function}Merge({column.name})"
                out.append((label, expr, expr))
        return [*out, ("distinct keys", f"uniqExact({keys})", f"uniqExact({keys})")]
    if family == "SummingMergeTree":
        explicit = set(table.engine.argument_columns if table.engine else ())
        out = []
        for column in table.columns:
            if column.name in key_names or not column.data_type.is_numeric:
                continue
            if explicit and column.name not in explicit:
                continue
            expr = f"sum({quote(column.name)})"
            out.append((f"sum({column.name})", expr, expr))
        return [*out, ("distinct keys", f"uniqExact({keys})", f"uniqExact({keys})")]
    return grouped_measures(table, views) or [("rows", "count()", "count()")]


def grouped_measures(table: Table, views: Sequence[MaterializedView]) -> list[tuple[str, str, str]]:
    """The batching-invariant figures of a target that aggregating MVs write into a non-aggregating engine; empty
    when some MV writing it does not aggregate (its rows are the measure).

    Per target column that every MV writes from an additive aggregate alone (``count()``, ``sum(x)``, ``countIf``…),
    its sum; then the number of distinct groups, read on the columns the MVs write without aggregating (each a
    function of the GROUP BY keys).
    """
    if not views or not all(v.group_by or v.aggregates for v in views):
        return []
    columns = [c.name for c in table.columns]
    additive = [c for c in columns if all(_additive_output(v, c) for v in views)]
    plain = [c for c in columns if c not in additive and all(_plain_output(v, c) for v in views)]
    out = [(f"sum({c})", f"sum({quote(c)})", f"sum({quote(c)})") for c in additive]
    if plain:
        groups = f"uniqExact(tuple({', '.join(quote(c) for c in plain)}))"
        out.append((f"distinct groups ({', '.join(plain)})", groups, groups))
    return out


def _additive_output(view: MaterializedView, column: str) -> bool:
    """``column`` of the MV's output is one additive aggregate call and nothing else (``count() AS n``)."""
    calls = [a for a in view.aggregates if a.output == column]
    output = view.output(column)
    if len(calls) != 1 or output is None or calls[0].is_state or calls[0].base not in ADDITIVE:
        return False
    text = output.expression.replace(" ", "").lower()
    head = calls[0].function.lower() + "("
    if not text.startswith(head):
        return False
    depth = 0
    for position, char in enumerate(text[len(head) - 1 :], start=len(head) - 1):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return position == len(text) - 1  # the call's own parenthesis closes the expression
    return False


def _plain_output(view: MaterializedView, column: str) -> bool:
    output = view.output(column)
    return output is not None and not output.is_aggregate


def parity_sql(
    loaded: LoadedProject,
    target: ObjectRef,
    window: PartitionWindow | None,
    live: ObjectRef | None = None,
    *,
    zone: str,
    trigger_relations: Mapping[ObjectRef, str] | None = None,
) -> str:
    """One query returning two rows, ``('actual', m0, m1, …)`` and ``('expected', m0, m1, …)``.

    Args:
        zone: The session's time zone (:func:`chmv_assets.engine.clock.session_zone`): the window's wall clock.
        trigger_relations: Per trigger, a relation to recompute from instead of the table (the landing zone's).
    """
    project = loaded.project
    table = project.table(target)
    if table is None:
        raise ChmvError(f"{target.fqn} is not defined in the DDL directory")
    views = project.views_into(target)
    scheme = loaded.partitioning(target)
    if not scheme.partitioned:
        window = None
    actual_cols, expected_cols = _measure_columns(table, views)
    target_where = ""
    if window is not None and table.partition_by is not None:
        target_where = f" WHERE {partition_filter(table, scheme, window, zone=zone)}"
    union = _recomputes(project, views, table, scheme, [window], trigger_relations, zone=zone)
    return (
        f"SELECT 'actual' AS side, {actual_cols} FROM {_read(table, live or target)}{target_where} "
        f"UNION ALL SELECT 'expected' AS side, {expected_cols} FROM ({union})"
    )


def partitions_parity_sql(
    loaded: LoadedProject,
    target: ObjectRef,
    windows: Sequence[PartitionWindow],
    live: ObjectRef | None = None,
    *,
    zone: str,
) -> str:
    """:func:`parity_sql` of several partitions in one query: rows ``(side, partition, m0, m1, …)`` per partition.

    The target is read once for all of them and the MVs' own SELECT recomputed once over the span of the windows
    (:func:`~chmv_assets.sql.rebuild_sql.range_select`: each partition gets the rows of its own recompute); both
    sides are grouped by the target's PARTITION BY. The recompute's output is not filtered to the windows (the
    server would evaluate that filter on every source row): it may hold partitions the span's edges reach, which
    the caller ignores. The trigger relations are the tables (read ``FINAL`` where they deduplicate themselves), as
    in :func:`parity_sql` without ``trigger_relations``.
    """
    project = loaded.project
    table = project.table(target)
    if table is None or table.partition_by is None:
        raise ChmvError(f"{target.fqn} is not a partitioned table defined in the DDL directory")
    views = project.views_into(target)
    scheme = loaded.partitioning(target)
    actual_cols, expected_cols = _measure_columns(table, views)
    key = f"({table.partition_by.sql})"
    keep = " OR ".join(f"{key} = ({partition_expression(table, scheme, w, zone=zone)})" for w in windows)
    union = _recomputes(project, views, table, scheme, windows, None, zone=zone, only_windows=False)
    return (
        f"SELECT 'actual' AS side, {key} AS _chmv_partition, {actual_cols} FROM {_read(table, live or target)} "
        f"WHERE {keep} GROUP BY _chmv_partition UNION ALL SELECT 'expected' AS side, {key} AS _chmv_partition, "
        f"{expected_cols} FROM ({union}) GROUP BY _chmv_partition"
    )


def _measure_columns(table: Table, views: Sequence[MaterializedView]) -> tuple[str, str]:
    """The measures (:func:`measures_for`) as the target's side and the recompute's side select them."""
    measures = measures_for(table, views)
    actual = ", ".join(f"toFloat64({a}) AS m{i}" for i, (_, a, _e) in enumerate(measures))
    expected = ", ".join(f"toFloat64({e}) AS m{i}" for i, (_, _a, e) in enumerate(measures))
    return actual, expected


def _read(table: Table, ref: ObjectRef) -> str:
    """The target's side as readers see it (``FINAL`` where its engine deduplicates)."""
    final = " FINAL" if table.engine is not None and table.engine.family in SELF_DEDUP_ENGINES else ""
    return f"{qualified(ref)}{final}"


def _recomputes(
    project: Project,
    views: Sequence[MaterializedView],
    table: Table,
    scheme: PartitionScheme,
    windows: Sequence[PartitionWindow | None],
    trigger_relations: Mapping[ObjectRef, str] | None,
    *,
    zone: str,
    only_windows: bool = True,
) -> str:
    """Every MV's own SELECT over ``windows`` (:func:`~chmv_assets.sql.rebuild_sql.range_select`), ``UNION ALL``: each
    trigger read ``FINAL`` where it deduplicates itself, or from ``trigger_relations``."""
    recomputes = []
    for view in views:
        relation = None
        trigger = view.trigger
        source = project.table(trigger) if trigger else None
        if trigger and source is not None and source.engine is not None and source.engine.family in SELF_DEDUP_ENGINES:
            relation = f"{qualified(trigger)} FINAL"
        if trigger and trigger_relations and trigger in trigger_relations:
            relation = trigger_relations[trigger]
        select = range_select(
            view, project, table, scheme, windows, zone=zone, trigger_relation=relation, only_windows=only_windows
        )
        recomputes.append(f"({select})")
    return " UNION ALL ".join(recomputes)


@dataclass(frozen=True)
class Decided:
    """Where a partition's rows come from, decided before its check (the rebuild that filled it, or the plan's
    coverage): parity recomputes from there without observing coverage again.

    Attributes:
        rows: The answer (:func:`~chmv_assets.engine.rebuild.rows.rows_from`, or the place the fill read).
        cutoffs: Per trigger, the cutoff the fill split the lake's rows from the table's at (a fill from the landing
            zone); None: read now.
    """

    rows: RowsFrom
    cutoffs: tuple[tuple[ObjectRef, datetime | None], ...] | None = None


def parity_for_partitions(
    client: Client,
    loaded: LoadedProject,
    target_ref: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    *,
    now: datetime | None = None,
    root: Path | None = None,
    live: ObjectRef | None = None,
    coverage_first: bool = True,
    pending: Sequence[DriftItem] | None = None,
    decided: Mapping[str | None, Decided] | None = None,
) -> list[ParityResult]:
    """:func:`parity_for_partition` of each window (in order), the source's partitions compared in one query.

    Checked against writes (:func:`_against_writes`): a partition whose sources received rows of its window while it
    was compared is compared again. Args and the rest as :func:`_parity_for_partitions`.
    """
    return _against_writes(
        client,
        loaded,
        target_ref,
        windows,
        lambda ws: _parity_for_partitions(
            client,
            loaded,
            target_ref,
            ws,
            now=now,
            root=root,
            live=live,
            coverage_first=coverage_first,
            pending=pending,
            decided=decided,
        ),
    )


def verify_rebuilt(
    client: Client,
    loaded: LoadedProject,
    plan: RebuildPlan,
    results: Sequence[StepResult],
    *,
    live: ObjectRef | None = None,
) -> list[ParityResult]:
    """The parity of every partition of a rebuild run, in one batch (:func:`parity_for_partitions`): the verification
    of what was rebuilt, for every caller (:data:`chmv_assets.engine.rebuild.executor.Verifier`).

    Each partition rebuilt is recomputed from the place its fill read (the source table; the landing zone at the
    fill's cutoffs), one deferred from the one answer on the plan's coverage; nothing is observed again (the plan's
    coverage probe and drift read stand: a plan with changes waiting for ``chmv apply`` rebuilds nothing).

    Args:
        live: The table to compare instead of the plan's (a new version ``chmv apply`` builds: its changes are the
            ones applied). Default: the plan's physical table.
    """
    rebuilt = {r.partition: r for r in results}
    decided: dict[str | None, Decided] = {}
    lake_usable = spark_capable(loaded, plan.target, plan.landing_root)
    for step in plan.steps:
        covered = plan.coverage.at(step.window) if plan.coverage is not None else None
        doubt = covered.deletions if covered is not None else None
        source = READS.get(step.engine)
        result = rebuilt.get(step.key)
        if source is not None and result is not None:
            rows = RowsFrom(source, f"rebuilt from the {source}: {step.reason}", doubt=doubt, covered=covered)
            decided[step.key] = Decided(rows, result.cutoffs if source == RowSource.LAKE else None)
        elif covered is not None:
            decided[step.key] = Decided(rows_from(covered, lake_usable=lake_usable, root=plan.landing_root))
    windows = [s.window for s in plan.steps if s.engine != Engine.REFUSED]
    return parity_for_partitions(
        client,
        loaded,
        plan.target,
        windows,
        root=plan.landing_root,
        live=live or plan.live,
        pending=(),
        decided=decided,
    )


def _parity_for_partitions(
    client: Client,
    loaded: LoadedProject,
    target_ref: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    *,
    now: datetime | None = None,
    root: Path | None = None,
    live: ObjectRef | None = None,
    coverage_first: bool = True,
    pending: Sequence[DriftItem] | None = None,
    decided: Mapping[str | None, Decided] | None = None,
) -> list[ParityResult]:
    """:func:`parity_for_partition` of each window (in order), the source's partitions compared in one query.

    One existence check, one coverage probe of every window and one :func:`partitions_parity_sql` for the windows
    whose rows come from the source table, instead of a probe and a recompute per window. A window whose recompute
    reads the landing zone or that is not verifiable, a single window and an unpartitioned target are checked one by
    one (each on the answer already made).

    Args:
        As :func:`parity_for_partition`, with the partitions ``windows``, and
        coverage_first: Observe coverage before the recompute (as a rebuild would). False (the parity sweep):
            recompute from the source tables first and observe coverage only for the partitions where the target
            holds MORE than the source yields, the one case a truncated source can explain; a match or a
            shortfall of the target is a verdict without it, so a sweep reads each changed partition about once.
        pending: The target's changes waiting for ``chmv apply`` (:func:`chmv_assets.engine.drift.apply_pending`),
            when the caller read them for several targets at once; None: read here.
        decided: Per partition key, where its rows come from, decided before (:func:`verify_rebuilt`): not observed.
    """
    windows = list(windows)
    decided = dict(decided or {})
    waiting = apply_pending_note(client, loaded, target_ref, live, pending)
    if waiting:
        tolerance = loaded.config.parity.tolerance
        return [
            ParityResult(target_ref.fqn, w.key if w else None, tolerance=tolerance, unverifiable=waiting)
            for w in windows
        ]
    project = loaded.project
    table = project.table(target_ref)
    one_by_one = (
        len(windows) < 2
        or table is None
        or table.partition_by is None
        or any(w is None for w in windows)
        or any(v.refreshable for v in project.views_into(target_ref))
        or _one_by_one(loaded.partitioning(target_ref))
    )
    if one_by_one:
        return _parity_each(
            client,
            loaded,
            target_ref,
            windows,
            now=now,
            root=root,
            live=live,
            coverage_first=coverage_first,
            pending=(),
            decided=decided,
        )
    assert table is not None
    config = loaded.config.parity
    involved = involved_objects_of(loaded.project, target_ref)
    missing = set(involved) - existing_objects(client, involved) - set(project.dictionaries)
    if missing:
        names = tuple(sorted(m.fqn for m in missing))
        return [
            ParityResult(target_ref.fqn, w.key if w else None, tolerance=config.tolerance, missing=names)
            for w in windows
        ]
    now = now or wall_now(client)  # the server's wall clock, as the windows (chmv_assets.engine.clock)
    root = root if root is not None else landing.landing_dir(loaded)
    notes: tuple[str, ...] = ()
    results: dict[str | None, ParityResult] = {}
    try:
        live = live or live_table(client, project, target_ref)
    except (ClickHouseError, ChmvError):  # each window reports the failure
        return _parity_each(client, loaded, target_ref, windows, now=now, root=root, pending=())
    undecided = [w for w in windows if w is not None and w.key not in decided]
    if coverage_first and undecided:
        try:
            coverage = observe_coverage(client, loaded, target_ref, live, undecided, root)
            usable = root is not None and spark_capable(loaded, target_ref, root)
            for window in undecided:
                covered = coverage.at(window)
                if covered is not None:
                    decided[window.key] = Decided(rows_from(covered, lake_usable=usable, root=root))
        except (ClickHouseError, ChmvError) as err:  # coverage is an aid here: without it, check as before
            notes = (f"coverage not observed ({str(err).strip().splitlines()[0][:200]})",)
    elsewhere = [
        w for w in windows if w is not None and w.key in decided and decided[w.key].rows.source != RowSource.TABLE
    ]
    for window in elsewhere:  # the landing zone's rows, or not verifiable: one by one
        results[window.key] = _parity_each(
            client, loaded, target_ref, [window], now=now, root=root, live=live, pending=(), decided=decided
        )[0]
    by_source = [w for w in windows if w is not None and w.key not in results]
    scheme = loaded.partitioning(target_ref)
    sql, rows = "", {}  # (side, partition key) -> figures
    try:
        if by_source:
            zone = session_zone(client)
            sql = partitions_parity_sql(loaded, target_ref, by_source, live, zone=zone)
            values = client.query(
                "SELECT " + ", ".join(partition_expression(table, scheme, w, zone=zone) for w in by_source)
            ).result_rows[0]
            keys = dict(zip(values, (w.key for w in by_source), strict=True))
            kinds = {type(v) for v in values}
            for side, value, *figures in client.query(sql, settings=RECOMPUTE_SETTINGS).result_rows:
                if value in keys:
                    rows[(side, keys[value])] = figures
                elif side == "actual" or type(value) not in kinds:  # never compare nothing with nothing
                    raise ChmvError(f"the parity query returned partition {value!r}, none of the checked ones")
    except (ClickHouseError, ChmvError) as err:  # a failing recompute is a parity failure with its reason
        for window in by_source:
            results[window.key] = ParityResult(
                target_ref.fqn, window.key, tolerance=config.tolerance, error=_first_line(err), sql=sql
            )
        by_source = []
    names = tuple(name for name, _a, _e in measures_for(table, project.views_into(target_ref)))
    for window in by_source:
        actual = rows.get(("actual", window.key)) or (0.0,) * len(names)
        expected = rows.get(("expected", window.key)) or (0.0,) * len(names)
        measures = tuple(
            Measure(n, float(e or 0), float(a or 0)) for n, e, a in zip(names, expected, actual, strict=True)
        )
        in_grace = window.wall_end is not None and window.wall_end > now - timedelta(minutes=config.grace_minutes)
        answer = decided.get(window.key)
        results[window.key] = _doubted(
            ParityResult(target_ref.fqn, window.key, measures, config.tolerance, in_grace, sql=sql, notes=notes),
            answer.rows.doubt if answer is not None else None,
        )
        if not coverage_first and results[window.key].holds_more:
            results[window.key] = _parity_each(
                client, loaded, target_ref, [window], now=now, root=root, live=live, pending=()
            )[0]
    return [results[w.key if w else None] for w in windows]


def _one_by_one(scheme: PartitionScheme) -> bool:
    """Partitions checked one by one: without a time part, or with a key part (each partition its own recompute,
    pruned by its key where the MVs pass the key on)."""
    return scheme.grain is None or scheme.keyed


def parity_for_partition(
    client: Client,
    loaded: LoadedProject,
    target_ref: ObjectRef,
    window: PartitionWindow | None,
    *,
    now: datetime | None = None,
    root: Path | None = None,
    live: ObjectRef | None = None,
) -> ParityResult:
    """Compare one target partition with what its MVs' own SELECT yields over the same source window: the
    :func:`parity_for_partitions` of a batch of one.

    Where the source no longer holds the partition, the recompute reads the landing zone as a rebuild
    would, or the partition is reported not verifiable (see the module docstring).

    Args:
        client: An open client.
        loaded: The parsed project.
        target_ref: The MV target.
        window: The partition (None: the whole table).
        now: The current time (the server's wall clock, naive) for the grace period; default: the clock.
        root: The landing zone; default: the configured one (``landing.landing_dir``).
        live: The table to compare instead of the target's own (a new version built beside it).

    Returns:
        The figures; a missing object or a failing query is reported in the result, never raised.
    """
    return parity_for_partitions(client, loaded, target_ref, [window], now=now, root=root, live=live)[0]


#: Comparisons of a partition whose sources keep receiving rows of its window during them, before it is reported
#: not verifiable for now (the sweep compares it again once its sources change, or stop changing).
RACE_CHECKS = 3
#: Longest wait, before a comparison, for inserts already running into its sources (their blocks may not have reached
#: the MVs yet: the target would lack what the recompute counts); ``[rebuild] insert_wait_seconds`` when shorter.
INSERT_WAIT_SECONDS = 10.0


def _against_writes(
    client: Client,
    loaded: LoadedProject,
    target: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    evaluate: Callable[[list[PartitionWindow | None]], list[ParityResult]],
) -> list[ParityResult]:
    """``evaluate(windows)``, watched as a rebuild's read is (:mod:`chmv_assets.engine.races`).

    The target and its recompute are read at slightly different moments, and a block's MV output lands just after the
    block: a row inserted during the comparison would show as a mismatch that is not one. So the triggers' parts and
    the target's own (a block committed just before the watch whose MV output lands during it) are noted before and
    looked at after; a partition that failed while rows of its window arrived is compared again, up to
    :data:`RACE_CHECKS` times, then reported not verifiable for now, never failed for it. A stream consumer's target is
    never compared (its trigger would be read, consuming messages).
    """
    project = loaded.project
    tolerance = loaded.config.parity.tolerance
    streams = streamed_triggers(loaded, target)
    reason = None
    if streams:
        reason = (
            f"its trigger {', '.join(s.fqn for s in streams)} is a stream table, which chmv never reads (a "
            "SELECT would consume its messages); the tables its consumer writes are checked further down"
        )
    elif feedback := feedback_reads(loaded, target):
        reason = describe_feedback(target, feedback)
    elif appending := [v.ref.fqn for v in project.views_into(target) if v.appends]:
        reason = (
            f"{', '.join(appending)} refresh{'es' if len(appending) == 1 else ''} with APPEND: the target keeps what "
            "each refresh's SELECT yielded then, which its SELECT now does not recompute (a materialization appends "
            "one more refresh)"
        )
    if reason is not None:
        return [
            ParityResult(target.fqn, w.key if w else None, tolerance=tolerance, unverifiable=reason) for w in windows
        ]
    table = project.table(target)
    triggers = triggers_of(project, target)
    if table is None or not triggers:
        return evaluate(list(windows))
    scheme = loaded.partitioning(target)
    names = sorted({r for t in triggers for r in (t, *loaded.writers(t).roots)}, key=lambda r: r.fqn)
    results: dict[int, ParityResult] = {}
    pending = list(range(len(windows)))
    last: dict[int, ParityResult] = {}
    for _ in range(RACE_CHECKS):
        seen = races.watch(client, [*triggers, target])
        races.wait_for_inserts(client, names, min(INSERT_WAIT_SECONDS, loaded.config.rebuild.insert_wait_seconds))
        checked = [windows[i] for i in pending]
        got = evaluate(checked)
        zone = session_zone(client)
        ranges = race_ranges(project, target, scheme, checked, zone=zone) | {
            target: _target_ranges(table, scheme, checked, zone)
        }
        raced = set(races.raced_windows(client, seen, ranges))
        last = dict(zip(pending, got, strict=True))
        results |= {i: r for n, (i, r) in enumerate(last.items()) if n not in raced or r.passed}
        pending = [i for n, i in enumerate(pending) if n in raced and not last[i].passed]
        if not pending:
            break
    for i in pending:
        results[i] = replace(
            last[i],
            unverifiable=(
                f"rows of its window kept arriving in its sources through {RACE_CHECKS} comparisons (writers chmv does "
                f"not control); compared again once they pause. Last: {last[i].describe()}"
            ),
        )
    return [results[i] for i in range(len(windows))]


def _target_ranges(
    table: Table, scheme: PartitionScheme, windows: Sequence[PartitionWindow | None], zone: str
) -> list[str | None]:
    """Per window, the target's own rows in it (None: any row). A block committed to a source before the watch can
    still be on its way to the target (its MV output lands after it, and an asynchronous insert's flush shows in no
    process list): its output arriving during the comparison races it as a source row would."""
    if table.partition_by is None or not scheme.partitioned:
        return [None for _ in windows]
    return [None if w is None else partition_filter(table, scheme, w, zone=zone) for w in windows]


def _parity_each(
    client: Client,
    loaded: LoadedProject,
    target_ref: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    *,
    now: datetime | None = None,
    root: Path | None = None,
    live: ObjectRef | None = None,
    coverage_first: bool = True,
    pending: Sequence[DriftItem] | None = None,
    decided: Mapping[str | None, Decided] | None = None,
) -> list[ParityResult]:
    """:func:`parity_for_partition` of each window, one by one (the catalog read once).

    Args:
        coverage_first: Observe coverage before each recompute (as a rebuild would). False (the parity
            sweep): recompute from the source first and observe coverage only for a partition where the
            target holds MORE than the source yields, the one case a truncated source can explain; a
            match or a shortfall of the target is a verdict without it, so a sweep reads each changed
            partition once.
        pending: As :func:`parity_for_partitions` (``()``: already checked by the caller).
        decided: As :func:`parity_for_partitions`: those windows are recomputed from there, not observed.

    Returns:
        One result per window, in order.
    """
    config = loaded.config.parity
    decided = decided or {}
    waiting = apply_pending_note(client, loaded, target_ref, live, pending)
    if waiting:
        return [
            ParityResult(target_ref.fqn, w.key if w else None, tolerance=config.tolerance, unverifiable=waiting)
            for w in windows
        ]
    involved = involved_objects_of(loaded.project, target_ref)
    missing = set(involved) - existing_objects(client, involved)
    missing -= set(loaded.project.dictionaries)  # dictionaries are checked by drift, parity does not read them
    if missing:
        return [
            ParityResult(
                target_ref.fqn,
                w.key if w else None,
                tolerance=config.tolerance,
                missing=tuple(sorted(m.fqn for m in missing)),
            )
            for w in windows
        ]
    now = now or wall_now(client)  # the server's wall clock, as the windows (chmv_assets.engine.clock)
    root = root if root is not None else landing.landing_dir(loaded)
    try:
        live = live or live_table(client, loaded.project, target_ref)
    except (ClickHouseError, ChmvError) as err:
        return [
            ParityResult(target_ref.fqn, w.key if w else None, tolerance=config.tolerance, error=_first_line(err))
            for w in windows
        ]
    results = []
    grace = timedelta(minutes=config.grace_minutes)
    for window in windows:
        in_grace = window is not None and window.wall_end is not None and window.wall_end > now - grace
        answer = decided.get(window.key if window is not None else None)
        if answer is not None:
            result = _parity(client, loaded, target_ref, window, live, root, in_grace, answer)
        elif coverage_first:
            result = _parity(client, loaded, target_ref, window, live, root, in_grace)
        else:
            result = _parity(client, loaded, target_ref, window, live, root, in_grace, _FROM_SOURCE)
            if result.holds_more:
                result = _parity(client, loaded, target_ref, window, live, root, in_grace)
        results.append(result)
    return results


def apply_pending_note(
    client: Client,
    loaded: LoadedProject,
    target: ObjectRef,
    live: ObjectRef | None,
    pending: Sequence[DriftItem] | None,
) -> str | None:
    """Why the target's parity cannot be judged now: its MVs run another SELECT or TO than the DDL directory.

    The recompute uses the DDL's SELECT; while the change waits for ``chmv apply``, the live MV writes what its own
    SELECT yields, so a mismatch would be a false failure (and a match a false pass). The drift check fails meanwhile,
    with the plan that fixes it. Not checked when ``live`` is given: the caller compares a table of its own (a new
    version that ``chmv apply`` builds with the new SELECT).
    """
    if live is not None:
        return None
    if pending is None:
        try:
            pending = apply_pending(client, loaded.project, [target])[target]
        except ClickHouseError:
            return None  # the server's catalog unreadable: the check reports its own failure
    return describe_pending(pending, str(loaded.project.ddl_dir)) if pending else None


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0][:500] if str(err).strip() else type(err).__name__


def _parity(
    client: Client,
    loaded: LoadedProject,
    target_ref: ObjectRef,
    window: PartitionWindow | None,
    live: ObjectRef,
    root: Path | None,
    in_grace: bool,
    answer: Decided | None = None,
) -> ParityResult:
    """One partition's parity, recomputed from where its rows come from (``answer``; default: the one answer on the
    coverage observed now, as a rebuild would decide)."""
    config = loaded.config.parity
    partition = window.key if window else None
    table = loaded.project.table(target_ref)
    assert table is not None
    sql = ""
    try:
        truth = _truth(client, loaded, target_ref, window, live, root, answer)
        if truth.unverifiable is not None:
            return ParityResult(
                target_ref.fqn,
                partition,
                tolerance=config.tolerance,
                in_grace=in_grace,
                unverifiable=truth.unverifiable,
            )
        relations = dict(truth.relations)
        sql = parity_sql(loaded, target_ref, window, live, zone=session_zone(client), trigger_relations=relations)
        rows = {row[0]: row[1:] for row in client.query(sql, settings=RECOMPUTE_SETTINGS).result_rows}
    except (ClickHouseError, ChmvError) as err:  # a failing recompute is a parity failure with its reason
        return ParityResult(target_ref.fqn, partition, tolerance=config.tolerance, error=_first_line(err), sql=sql)
    names = [name for name, _a, _e in measures_for(table, loaded.project.views_into(target_ref))]
    actual = rows.get("actual") or (0.0,) * len(names)
    expected = rows.get("expected") or (0.0,) * len(names)
    measures = tuple(Measure(n, float(e or 0), float(a or 0)) for n, e, a in zip(names, expected, actual, strict=True))
    return _doubted(
        ParityResult(
            target_ref.fqn,
            partition,
            measures,
            config.tolerance,
            in_grace,
            sql=sql,
            notes=truth.notes,
            truth=truth.label,
        ),
        truth.doubt,
    )


def _doubted(result: ParityResult, deletions: str | None) -> ParityResult:
    """``result``, unless the target holds more than a source that may have lost rows yields (``deletions``: why it
    may have): then not verifiable, with the figures and why (a rebuild from that source is shrink-guarded)."""
    if not deletions or result.truth != "source" or not result.holds_more:
        return result
    figures = "; ".join(f"{m.name}: expected {m.expected:g}, actual {m.actual:g}" for m in result.measures)
    return replace(
        result,
        unverifiable=(
            f"the target holds more than its source yields ({figures}), and the source may have lost rows of it "
            f"({deletions}); a rebuild from the source is shrink-guarded and would be refused (force accepts the loss)"
        ),
    )


@dataclass(frozen=True)
class _Truth:
    """What a partition's recompute reads: per trigger, a relation instead of the table (the lake's rows); or why
    there is nothing to recompute from."""

    relations: tuple[tuple[ObjectRef, str], ...] = ()
    label: str = "source"
    notes: tuple[str, ...] = ()
    unverifiable: str | None = None
    doubt: str | None = None


#: The source tables as they are (the sweep's first look, a refreshable MV).
_FROM_SOURCE = Decided(RowsFrom(RowSource.TABLE, "the source tables"))


def _truth(
    client: Client,
    loaded: LoadedProject,
    target: ObjectRef,
    window: PartitionWindow | None,
    live: ObjectRef,
    root: Path | None,
    answer: Decided | None = None,
) -> _Truth:
    """What to recompute the partition from: where its rows come from (``answer``, else the one answer on its coverage
    observed now: :func:`~chmv_assets.engine.rebuild.rows.rows_from`) — the source tables; the landing zone, read as
    a fill reads it (:mod:`chmv_assets.engine.ingest.lake_read`: the same files, bounds, cutoff and dedup); or
    neither, with why it is not verifiable."""
    if answer is None:
        if any(v.refreshable for v in loaded.project.views_into(target)):
            return _Truth()
        try:
            coverage = observe_coverage(client, loaded, target, live, [window], root)
        except (ClickHouseError, ChmvError) as err:  # coverage is an aid here: without it, check as before
            return _Truth(notes=(f"coverage not observed ({str(err).strip().splitlines()[0][:200]})",))
        covered = coverage.at(window) or (coverage.windows[0] if coverage.windows else None)
        if covered is None:
            return _Truth()
        usable = root is not None and spark_capable(loaded, target, root)
        answer = Decided(rows_from(covered, lake_usable=usable, root=root))
    rows, covered = answer.rows, answer.rows.covered
    if rows.source == RowSource.TABLE:
        return _Truth(doubt=rows.doubt)
    if rows.source == RowSource.NEITHER:
        assert covered is not None
        return _Truth(
            unverifiable=(
                f"the source no longer holds it ({covered.table_reasons()}) and the landing zone does not either "
                f"({covered.lake_reasons()}); the rebuild would refuse it too"
            )
        )
    return _lake_truth(client, loaded, target, window, root, answer, covered)


def _lake_truth(
    client: Client,
    loaded: LoadedProject,
    target: ObjectRef,
    window: PartitionWindow | None,
    root: Path | None,
    answer: Decided,
    covered: WindowCoverage | None,
) -> _Truth:
    """The recompute of a partition whose rows come from the landing zone: each trigger's lake read, inline."""
    if root is None:
        return _Truth(
            unverifiable=f"its rows come from the landing zone, and none is configured ({answer.rows.reason})"
        )
    cutoffs = dict(answer.cutoffs) if answer.cutoffs is not None else None
    relations, notes = [], []
    if covered is not None and covered.loss_observed:
        notes.append(f"the source no longer holds it ({covered.table_reasons()})")
    else:
        notes.append(answer.rows.reason)
    zone = session_zone(client)
    for source in triggers_of(loaded.project, target):
        span = lake_span(loaded, target, source, [window], zone)
        since, before = span if span is not None else (None, None)
        cutoff = cutoffs[source] if cutoffs is not None and source in cutoffs else read_cutoff(client, loaded, source)
        read = lake_read(loaded, source, root, since=since, before=before, cutoff=cutoff)
        if not read.files:
            reasons = covered.table_reasons() if covered is not None else answer.rows.reason
            return _Truth(unverifiable=f"the landing zone has no file of {source.fqn} for it; {reasons}")
        table = loaded.project.table(source)
        assert table is not None
        relations.append((source, read.relation(read.inline(table))))
        notes.append(read.describe())
    return _Truth(tuple(relations), "landing zone", tuple(notes))
