"""Run steps of a rebuild plan, each atomically: shadow table, the MVs' own SELECTs, partition swap."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef, Project, Table
from chmv_assets.ddl.partitioning import PartitionWindow
from chmv_assets.engine.catalog import live_table
from chmv_assets.engine.guard import check_shrink
from chmv_assets.engine.planner import Engine, PartitionStep, RebuildPlan, Swap, plan_from_source
from chmv_assets.errors import ShrinkRefused
from chmv_assets.sql.quoting import qualified
from chmv_assets.sql.rebuild_sql import (
    create_shadow_sql,
    drop_shadow_sql,
    insert_sql,
    partition_expression,
    range_select,
    shadow_ref,
    span_holds_all_sql,
    span_of,
    swap_sql,
    swaps_sql,
    view_select,
)

#: Settings for inserts into a shadow table: one rebuild may write many partitions of an unpartitioned asset.
SHADOW_INSERT_SETTINGS = {"max_partitions_per_insert_block": 0, "insert_deduplicate": 0}


@dataclass
class RebuildResult:
    """What one rebuild did, for materialization metadata."""

    target: str
    partition: str | None
    method: str
    rows_written: int
    seconds: float
    statements: list[str] = field(default_factory=list)


def rebuild(client: Client, project: Project, target: ObjectRef, window: PartitionWindow | None, *,
            log: Callable[[str], None] | None = None) -> RebuildResult:  # fmt: skip
    """Rebuild one partition of ``target`` (or all of it) from its source tables, and swap it in.

    The planner's ClickHouse-engine plan of one partition, run on ``client``; see :func:`run_step`.
    """
    plan = plan_from_source(project, target, [window], live_table(client, project, target))
    return run_step(client, project, plan, plan.steps[0], log=log)


def run_step(client: Client, project: Project, plan: RebuildPlan, step: PartitionStep, *,
             trigger_relation: Callable[[ObjectRef], str | None] | None = None,
             log: Callable[[str], None] | None = None) -> RebuildResult:  # fmt: skip
    """Rebuild the partition of ``step`` from the MVs that write the target, then swap it in.

    Every MV writing into the target (a fan-in has several) runs its own SELECT over the trigger rows
    of the window into the step's shadow table (the target's structure); the shadow then replaces the
    target partition in one ``ALTER TABLE … REPLACE PARTITION`` (``EXCHANGE TABLES`` for an
    unpartitioned target). Readers see the old partition or the new one, never a mix. Refreshable
    MVs are refreshed by the server instead.

    Args:
        client: An open client (the caller holds the plan's gates).
        project: The parsed DDL.
        plan: The plan the step belongs to.
        step: The partition to rebuild.
        trigger_relation: Per trigger table, a relation to read instead (staged lake rows and the cutoff union).
        log: Progress sink.

    Raises:
        ShrinkRefused: The step is guarded, the plan not forced, and the shadow holds fewer rows than the
            live partition (the shadow is dropped; nothing is swapped).
    """
    say = log or (lambda _msg: None)
    started = time.monotonic()
    target = plan.target
    views = project.views_into(target)
    statements: list[str] = []

    def run(sql: str, settings: dict | None = None) -> None:
        statements.append(sql)
        client.command(sql, settings=settings)

    if step.swap == Swap.REFRESH:
        for view in views:
            run(f"SYSTEM REFRESH VIEW {qualified(view.ref)}")
            run(f"SYSTEM WAIT VIEW {qualified(view.ref)}")
        rows = int(client.command(f"SELECT count() FROM {qualified(target)}"))
        return RebuildResult(target.fqn, None, "refresh", rows, time.monotonic() - started, statements)

    table = project.table(target)
    assert table is not None and step.shadow is not None
    window, shadow, live = step.window, step.shadow, plan.live
    run(drop_shadow_sql(shadow))
    try:
        run(create_shadow_sql(shadow, live, table))
        for view in views:
            relation = trigger_relation(view.trigger) if trigger_relation and view.trigger else None
            select = view_select(view, project, table, plan.scheme, window, trigger_relation=relation)
            say(f"{view.ref.fqn}: running the MV's own SELECT into {shadow.fqn}")
            run(insert_sql(shadow, view, select), SHADOW_INSERT_SETTINGS)
        rows = int(client.command(f"SELECT count() FROM {qualified(shadow)}"))
        if step.guard and not plan.force:  # the last line of defence, before anything is swapped
            new, old = check_shrink(client, table, plan, step)
            say(f"{target.fqn} {step.key or '(whole table)'}: shrink guard passed ({new:,} rows rebuilt, {old:,} live)")
        partition = swapped_partition(table, plan, step)
        run(swap_sql(live, shadow, partition, empty=rows == 0))
        method = "exchange" if partition is None else "drop" if rows == 0 else "replace"
        say(f"{target.fqn} {step.key or '(whole table)'}: {method}, {rows} rows")
    finally:
        run(drop_shadow_sql(shadow))
    return RebuildResult(target.fqn, step.key, method, rows, time.monotonic() - started, statements)


def swapped_partition(table: Table, plan: RebuildPlan, step: PartitionStep) -> str | None:
    """The partition ``step``'s swap replaces, as the planner decided its swap: None for ``EXCHANGE TABLES``,
    ``tuple()`` for the one partition of an unpartitioned ``Replicated*`` target (see
    :func:`~chmv_assets.sql.rebuild_sql.swap_sql`), else the window's partition."""
    if step.swap == Swap.EXCHANGE:
        return None
    if step.window is None:
        return "tuple()"
    return f"tuple({partition_expression(table, plan.scheme, step.window)})"


def run_steps(client: Client, project: Project, plan: RebuildPlan, steps: Sequence[PartitionStep], *,
              log: Callable[[str], None] | None = None) -> list[RebuildResult]:  # fmt: skip
    """Rebuild the partitions of ``steps`` with one read of their trigger rows, then swap each in; results in order.

    Every MV writing the target runs its own SELECT once over the trigger rows of all the windows
    (:func:`~chmv_assets.sql.rebuild_sql.range_select`: each partition gets the rows :func:`run_step` would
    give it) into one shadow; each partition then passes its shrink guard, and those that passed replace the live
    ones in one ``ALTER`` (:func:`~chmv_assets.sql.rebuild_sql.swaps_sql`: ``REPLACE PARTITION`` each, metadata
    only; ``DROP PARTITION`` if it is empty), in order. The shadow may also
    hold partitions the read's edges reach (past the last window, by a truncation's grain): they are not
    swapped, and go with the shadow. Where the trigger's part metadata says every row of it is inside the read's
    span, the read has no time predicate. Readers see each partition old or new, never a mix. Steps that are not
    ClickHouse-engine partition swaps go through :func:`run_step`.

    Args:
        client: An open client (the caller holds the plan's gates for the whole call).
        project: The parsed DDL.
        plan: The plan the steps belong to.
        steps: Partitions of ``plan``.
        log: Progress sink.

    Raises:
        ShrinkRefused: A guarded partition of an unforced plan would shrink: it and the later ones are not
            swapped (the earlier ones are), the shadow is dropped.
    """
    say = log or (lambda _msg: None)
    grouped = [s for s in steps if s.engine == Engine.CLICKHOUSE and s.swap == Swap.REPLACE_PARTITION]
    alone = {i: run_step(client, project, plan, step, log=say) for i, step in enumerate(steps) if step not in grouped}
    if not grouped:
        return list(alone.values())
    results: list[RebuildResult] = []
    started = time.monotonic()
    table = project.table(plan.target)
    assert table is not None and table.partition_by is not None
    shadow, live = shadow_ref(plan.live, "range"), plan.live
    windows = [s.window for s in grouped if s.window is not None]
    assert len(windows) == len(grouped)  # a partition swap has a window
    statements: list[str] = []

    def run(sql: str, settings: dict | None = None) -> None:
        statements.append(sql)
        client.command(sql, settings=settings)

    run(drop_shadow_sql(shadow))
    try:
        run(create_shadow_sql(shadow, live, table))
        for view in project.views_into(plan.target):
            say(f"{view.ref.fqn}: running the MV's own SELECT over {len(windows)} partitions into {shadow.fqn}")
            holds_all = span_holds_all_sql(view, project, plan.scheme, span_of(windows))
            whole = holds_all is not None and bool(client.query(holds_all).result_rows[0][0])
            select = range_select(view, project, table, plan.scheme, windows, only_windows=False, prune=not whole)
            run(insert_sql(shadow, view, select), SHADOW_INSERT_SETTINGS)
        values = [partition_expression(table, plan.scheme, w) for w in windows]
        counts = client.query(  # every partition's rows in one scan of the shadow
            "SELECT " + ", ".join(f"countIf(({table.partition_by.sql}) = ({v}))" for v in values)
            + f" FROM {qualified(shadow)}"
        ).result_rows[0]  # fmt: skip
        read, shared = time.monotonic() - started, list(statements)
        passed: list[tuple[PartitionStep, str, int]] = []  # (step, partition, rows) of the guards passed
        refused: ShrinkRefused | None = None
        for step, value, rows in zip(grouped, values, counts, strict=True):
            if step.guard and not plan.force:
                try:
                    new, old = check_shrink(client, table, plan, step, shadow=shadow)
                except ShrinkRefused as error:
                    refused = error  # the partitions before it are swapped, it and the later ones are not
                    break
                say(f"{plan.target.fqn} {step.key}: shrink guard passed ({new:,} rows rebuilt, {old:,} live)")
            passed.append((step, f"tuple({value})", rows))
        if passed:
            begun = time.monotonic()
            sql = swaps_sql(live, shadow, [(partition, rows == 0) for _, partition, rows in passed])
            run(sql)
            # The shared read and the one swap statement are counted once, with the first partition.
            seconds = time.monotonic() - begun + read
            for step, _, rows in passed:
                method = "drop" if rows == 0 else "replace"
                say(f"{plan.target.fqn} {step.key}: {method}, {rows} rows")
                first = step is passed[0][0]
                results.append(RebuildResult(plan.target.fqn, step.key, method, rows, seconds if first else 0.0,
                                             [*shared, sql] if first else []))  # fmt: skip
        if refused is not None:
            raise refused
    finally:
        run(drop_shadow_sql(shadow))
    swapped = iter(results)
    return [alone[i] if i in alone else next(swapped) for i in range(len(steps))]
