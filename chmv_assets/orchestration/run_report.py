"""A target's rebuild in a Dagster run, reported partition by partition: one run, many partitions, each reported.

A range run (a single-run backfill) rebuilds its partitions one after the other on the one rebuild path
(:func:`~chmv_assets.engine.rebuild.executor.run_rebuild`), which tells a :class:`PartitionEvents` of each partition as
it is swapped in (:class:`~chmv_assets.engine.rebuild.progress.RunReport`). Each one is recorded right then as that
partition's ``AssetMaterialization`` (``context.log_event``), with its figures and the run's progress (``k/n``, elapsed,
an estimate of the time left), so the UI shows it materialized while the rest of the range goes on.

A partition that fails, is refused, or comes after a failure is never recorded: the run fails naming them, and Dagster
marks every partition the run planned and did not materialize as failed (Dagster 1.x: a planned partition without a
materialization in a failed run); those recorded stay materialized. A deferred partition (still open to writers chmv
does not control) is logged and recorded as an ``AssetObservation`` saying so, never as a materialization: the run
succeeds and Dagster shows it missing until recovery rebuilds it once it closes.

Once every partition is recorded the op yields the asset's output all the same, without a materialization of its own
(:func:`~chmv_assets.orchestration.dagster_compat.output_without_materialization`): the steps of the run that depend on
the target (a downstream target's op, the checks' op) run as before, and each partition has one materialization. A
run with a deferred partition yields no output (as before: the steps downstream of it are skipped).

A re-run of the same range rebuilds every partition again: a swap replaces its partition whole
(``REPLACE PARTITION``), so a partition an interrupted run swapped in is rebuilt idempotently, never skipped (nothing
proves it unchanged since: a write or a late row may have reached its sources).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    MetadataValue,
    Output,
)

from chmv_assets.engine.rebuild.executor import Progress, StepResult
from chmv_assets.engine.rebuild.planner import RebuildPlan
from chmv_assets.orchestration.dagster_compat import output_without_materialization


class PartitionEvents:
    """The events of one target's rebuild in a run, one per partition as it is swapped in (see the module).

    Args:
        context: The op's context.
        key: The target's asset key.
    """

    def __init__(self, context: AssetExecutionContext, key: AssetKey) -> None:
        self.context, self.key = context, key
        self.plan: RebuildPlan | None = None
        self.materialized: list[str | None] = []

    def planned(self, plan: RebuildPlan) -> None:
        """The plan: each deferred partition logged and observed as deferred (not materialized)."""
        self.plan = plan
        if not plan.deferred:
            return
        self.context.log.warning(
            f"{plan.deferral()}\nNot materialized by this run: recovery requests each once it closes."
        )
        for step in plan.deferred:
            self.context.log_event(
                AssetObservation(
                    asset_key=self.key,
                    partition=step.key,
                    metadata={
                        "chmv/deferred": step.reason,
                        "chmv/closes_at": str(step.closes_at or ""),
                        "chmv/run": plan.run,
                    },
                    description=f"deferred, not materialized by this run: {step.reason}",
                )
            )

    def swapped(self, result: StepResult, progress: Progress) -> None:
        """One partition swapped in: its materialization recorded now, with its metadata (:func:`partition_metadata`)."""
        assert self.plan is not None
        self.context.log_event(
            AssetMaterialization(
                asset_key=self.key,
                partition=result.partition,
                metadata=partition_metadata(self.plan, result, progress),
            )
        )
        self.materialized.append(result.partition)

    def finished(self) -> Iterator[Output]:
        """What the op yields once the rebuild has returned: the asset's output, recording no materialization (each
        partition's is recorded), unless a partition was deferred."""
        assert self.plan is not None
        if not self.plan.deferred:
            yield output_without_materialization(self.context.assets_def, self.key)

    def failed(self, partitions: Sequence[str | None]) -> str:
        """What the failure of the rebuild of ``partitions`` (the run's) says of them: how many were materialized, and
        which were not."""
        if list(partitions) == [None]:
            return ""
        deferred = {s.key for s in self.plan.deferred} if self.plan is not None else set()
        done = set(self.materialized)
        missing = [p for p in partitions if p not in done and p not in deferred]
        text = f" Materialized by this run: {len(done)} of {len(partitions)} partitions"
        text += f" ({_keys([p for p in partitions if p in done])})." if done else "."
        if missing:
            text += f" Not materialized: {_keys(missing)}."
        if deferred:
            text += f" Deferred: {_keys([p for p in partitions if p in deferred])}."
        return text + " A run of the same range rebuilds each partition again (a swap replaces its partition whole)."


def _keys(keys: Sequence[str | None], shown: int = 10) -> str:
    named = [k or "(whole table)" for k in keys]
    return ", ".join(named[:shown]) + (f" and {len(named) - shown} more" if len(named) > shown else "")


def partition_metadata(plan: RebuildPlan, result: StepResult, progress: Progress) -> dict:
    """A partition's materialization metadata: what its rebuild did (engine, method, rows, seconds, statements), its
    lines of the plan, and the run's progress when it was swapped in (``k/n``, elapsed, an estimate of the time left)."""
    row = (
        f"| {result.partition or 'all'} | {result.engine} | {result.method} | {result.rows_staged} | "
        f"{result.rows_written} | {result.cutoff or ''} | {result.batch_id} |"
    )
    table = (
        "| partition | engine | swap | landing rows staged | rows written | cutoff | batch id |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    return {
        "chmv/engine_path": result.engine,
        "chmv/method": result.method,
        "chmv/rows_read": result.rows_read,
        "chmv/rows_staged": result.rows_staged,
        "chmv/rows_written": result.rows_written,
        "chmv/seconds": round(result.seconds, 3),
        "chmv/cutoff": str(result.cutoff or ""),
        "chmv/batch_id": result.batch_id,
        "chmv/attempts": result.attempts,
        "chmv/partitions": progress.total,
        "chmv/partitions_done": progress.done,
        "chmv/run_progress": progress.describe(),
        "chmv/elapsed_seconds": round(progress.elapsed, 3),
        "chmv/estimated_seconds_left": round(progress.seconds_left, 3),
        "chmv/run": plan.run,
        "chmv/plan": MetadataValue.md(plan.describe([result.partition])),
        "chmv/deferred": MetadataValue.md(plan.deferral() if plan.deferred else "none"),
        "chmv/progress": MetadataValue.md(table + row),
        # a read shared by several partitions: the first of them carries its statements
        "chmv/statements": MetadataValue.md("```sql\n" + ";\n".join(result.statements) + "\n```"),
    }
