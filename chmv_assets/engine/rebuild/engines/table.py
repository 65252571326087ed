"""The ``clickhouse`` engine: the MVs' own SELECT over the source table's rows of the window (``refresh``: the server
recomputes a refreshable MV). Nothing to make ready; the steps sharing a shadow are read together
(:func:`~chmv_assets.engine.rebuild.steps.run_steps`)."""

from __future__ import annotations

from collections.abc import Sequence

from clickhouse_connect.driver.client import Client

from chmv_assets.engine.rebuild.engines.base import EngineRun, StepResult
from chmv_assets.engine.rebuild.planner import PartitionStep
from chmv_assets.engine.rebuild.steps import run_steps
from chmv_assets.errors import NoRoomUnderGate


class SourceTable:
    """The source table, read as it is under the gates."""

    def prepare(self, run: EngineRun, steps: Sequence[PartitionStep]) -> _Fill:
        return _Fill(run)


class _Fill:
    def __init__(self, run: EngineRun):
        self.plan, self.project = run.plan, run.loaded.project

    def run(self, client: Client, steps: list[PartitionStep], damaged: frozenset[str | None]) -> list[StepResult]:
        of = {s.key: s for s in steps}
        try:
            rebuilt = run_steps(client, self.project, self.plan, steps, damaged=damaged)
        except NoRoomUnderGate as busy:
            busy.done = [StepResult.of(self.plan, of[r.partition], r) for r in busy.done]
            raise
        return [StepResult.of(self.plan, step, r) for step, r in zip(steps, rebuilt, strict=True)]

    def close(self) -> None:
        pass


ENGINE = SourceTable()
