"""The ``clickhouse`` engine: the MVs' own SELECT over the source table's rows of the window (``refresh``: the server
recomputes a refreshable MV). Nothing to make ready; the steps sharing a shadow are read together
(:func:`~chmv_assets.engine.rebuild.steps.run_steps`)."""

from __future__ import annotations

from collections.abc import Sequence

from clickhouse_connect.driver.client import Client

from chmv_assets.engine.rebuild.engines.base import EngineRun, StepResult
from chmv_assets.engine.rebuild.planner import PartitionStep
from chmv_assets.engine.rebuild.steps import RebuildResult, run_steps
from chmv_assets.errors import NoRoomUnderGate


class SourceTable:
    """The source table, read as it is under the gates."""

    def prepare(self, run: EngineRun, steps: Sequence[PartitionStep]) -> _Fill:
        return _Fill(run)


class _Fill:
    def __init__(self, run: EngineRun):
        self.run_, self.plan, self.project = run, run.plan, run.loaded.project

    def run(self, client: Client, steps: list[PartitionStep], damaged: frozenset[str | None]) -> list[StepResult]:
        swapped: dict[str | None, StepResult] = {}  # each partition's result, reported as it is swapped in

        def report(step: PartitionStep, r: RebuildResult) -> None:
            swapped[r.partition] = self.run_.swapped(StepResult.of(self.plan, step, r))

        try:
            rebuilt = run_steps(client, self.project, self.plan, steps, damaged=damaged, on_swapped=report)
        except NoRoomUnderGate as busy:
            busy.done = [swapped[r.partition] for r in busy.done]
            raise
        return [swapped[r.partition] for r in rebuilt]

    def close(self) -> None:
        pass


ENGINE = SourceTable()
