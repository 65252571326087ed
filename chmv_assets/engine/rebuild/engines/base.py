"""What a rebuild engine is to the executor: it makes its partitions' rows ready, then reads and swaps them.

An engine reads one place (:class:`~chmv_assets.engine.rebuild.rows.RowSource`: the planner's ``READS``) and fills the
partitions the planner gave it. The executor (:mod:`chmv_assets.engine.rebuild.executor`) holds the run (its gates and
client: :class:`~chmv_assets.engine.rebuild.hold.RunHold`, its leases, the consumers paused around the swaps, the
records of deferred and damaged partitions) and hands each engine its steps: :meth:`RebuildEngine.prepare` makes their
rows ready (nothing for the source table; cutoffs and Spark's staging for the landing zone), then the executor runs
:meth:`Fill.run` under the hold (again after a wait for room on the server, with the steps left) and
:meth:`Fill.close` at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.rebuild.hold import RunHold
from chmv_assets.engine.rebuild.planner import PartitionStep, RebuildPlan
from chmv_assets.engine.rebuild.steps import RebuildResult


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
    """What one step did (materialization metadata).

    Attributes:
        cutoffs: Per trigger, the ingestion cutoff its rows were split at (a fill from the landing zone): the
            verification of the partition reads the lake at the same cutoffs.
    """

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
    cutoffs: tuple[tuple[ObjectRef, datetime | None], ...] = ()

    @classmethod
    def of(cls, plan: RebuildPlan, step: PartitionStep, r: RebuildResult) -> StepResult:
        """The result of a step that read no landing rows."""
        return cls(
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


@dataclass(frozen=True)
class EngineRun:
    """What an engine is handed: the plan, the run's hold and what reading the landing zone takes.

    Attributes:
        stager: The provider of staged rows (Spark), for an engine that stages them.
        cutoffs: Fixed cutoffs per trigger, instead of reading the watermarks (the repair of a load).
        owner: Who runs it (``dagster run <id>``, ``chmv rebuild``).
        on_swapped: Told of each partition's result as it is swapped in for good (the run's progress:
            :class:`~chmv_assets.engine.rebuild.progress.Tally`); every engine calls :meth:`swapped` right then.
    """

    plan: RebuildPlan
    loaded: LoadedProject
    hold: RunHold
    stager: Stager | None = None
    cutoffs: Mapping[ObjectRef, datetime | None] | None = None
    owner: str = "chmv"
    on_swapped: Callable[[StepResult], None] | None = None

    def swapped(self, result: StepResult) -> StepResult:
        """``result``'s partition is swapped in for good: the run is told (:attr:`on_swapped`); the result."""
        if self.on_swapped is not None:
            self.on_swapped(result)
        return result


class Fill(Protocol):
    """An engine's partitions made ready: read and swapped under the hold."""

    def run(self, client: Client, steps: list[PartitionStep], damaged: frozenset[str | None]) -> list[StepResult]:
        """Read and swap ``steps`` on ``client`` (the run holds the gates and the leases): results in order, each
        handed to :meth:`EngineRun.swapped` as its partition is swapped in.

        ``damaged``: partitions an earlier hold of the run swapped in while writes raced them
        (:func:`~chmv_assets.engine.rebuild.steps.run_steps`). A :class:`~chmv_assets.errors.NoRoomUnderGate` raised
        carries in ``done`` the results of the steps swapped before it."""
        ...

    def close(self) -> None:
        """Remove what :meth:`RebuildEngine.prepare` left (staging)."""
        ...


class RebuildEngine(Protocol):
    """One way to fill partitions from a place their rows come from."""

    def prepare(self, run: EngineRun, steps: Sequence[PartitionStep]) -> Fill:
        """Make the rows of ``steps`` ready (the run's hold is taken; an engine may release it for work that must not
        hold the gates, such as Spark's)."""
        ...
