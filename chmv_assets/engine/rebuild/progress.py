"""A run's progress, partition by partition: how many are swapped in, since when, and an estimate of the time left.

The executor (:func:`~chmv_assets.engine.rebuild.executor.run_plan`) counts every partition as it is swapped in (a
:class:`Tally`), logs ``k/n partitions, elapsed, ~time left`` and hands the caller's :class:`RunReport` the partition's
result with its :class:`Progress` right then (the Dagster op records the partition's materialization; the engine layer
knows nothing of Dagster).

The estimate is the mean wall time per partition swapped so far times the partitions left: the run's own pace,
measured from the start of its fills (after its plan and leases), waits for room on the server and Spark's staging
included. It assumes the partitions left cost what the ones done did (a range whose partitions grow, or one whose
first engine stages rows for the rest, is under- or over-estimated until the pace settles), and it leaves out the
verification that follows the last swap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from chmv_assets.engine.rebuild.engines.base import StepResult
from chmv_assets.engine.rebuild.planner import RebuildPlan

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """Where a run stands once a partition is swapped in.

    Attributes:
        done: Partitions swapped in so far, this one included.
        total: Partitions the run fills (its plan's, less those deferred).
        elapsed: Seconds since the run began filling.
    """

    done: int
    total: int
    elapsed: float

    @property
    def left(self) -> int:
        """Partitions still to fill."""
        return max(self.total - self.done, 0)

    @property
    def seconds_left(self) -> float:
        """The estimate of the time left: the mean seconds per partition so far times the partitions left."""
        if self.done <= 0:
            return 0.0
        return self.elapsed / self.done * self.left

    def describe(self) -> str:
        """``k/n partitions, <elapsed> elapsed, ~<left> left``."""
        text = f"{self.done}/{self.total} partitions, {duration(self.elapsed)} elapsed"
        return text + (f", ~{duration(self.seconds_left)} left" if self.left else ", done")


def duration(seconds: float) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``2h07m``: a duration as a person reads it in a log line."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class RunReport(Protocol):
    """What a caller of the one rebuild path is told while a run goes (the Dagster op: one materialization per
    partition, as it is swapped in)."""

    def planned(self, plan: RebuildPlan) -> None:
        """The run's plan, before any partition is filled (its deferred partitions are left to recovery)."""
        ...

    def swapped(self, result: StepResult, progress: Progress) -> None:
        """A partition swapped in for good (no later read of the run changes it), with the run's progress."""
        ...


class Tally:
    """Counts a run's partitions as they are swapped in, logs the progress and tells the caller's report."""

    def __init__(
        self, target: str, total: int, report: RunReport | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.target, self.total, self.report, self.clock = target, total, report, clock
        self.started = clock()
        self.done = 0

    def swapped(self, result: StepResult) -> None:
        """One more partition swapped in."""
        self.done += 1
        progress = Progress(self.done, self.total, self.clock() - self.started)
        _LOG.info(f"{self.target} {result.partition or '(whole table)'}: swapped in; {progress.describe()}")
        if self.report is not None:
            self.report.swapped(result, progress)
