"""The ``file`` engine: the MVs' own SELECT over the landing zone's rows read by ClickHouse's ``file()`` itself (the
lake read parity recomputes from), up to the ingestion cutoff, united with the source table's rows after it; no Spark.

Under the run's gates the cutoffs are fixed (:func:`~chmv_assets.engine.rebuild.engines.lake.cutoffs`), then each
partition's MVs read its :class:`~chmv_assets.engine.ingest.lake_read.LakeRead` inline into its shadow, which is
swapped in; its cutoff, batch and rows are kept in ``chmv_meta.backfills`` as a Spark step's are.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.lake_read import lake_read, lake_span
from chmv_assets.engine.rebuild import backfills
from chmv_assets.engine.rebuild.backfills import Backfill
from chmv_assets.engine.rebuild.engines import lake
from chmv_assets.engine.rebuild.engines.base import EngineRun, StepResult
from chmv_assets.engine.rebuild.planner import PartitionStep
from chmv_assets.engine.rebuild.steps import run_step
from chmv_assets.errors import NoRoomUnderGate


class LakeFile:
    """The landing zone's rows, read by ClickHouse."""

    def prepare(self, run: EngineRun, steps: Sequence[PartitionStep]) -> _Fill:
        cutoffs = lake.cutoffs(run, steps)
        return _Fill(run, cutoffs, lake.batch_id(run, steps, cutoffs))


class _Fill:
    def __init__(self, run: EngineRun, cutoffs: dict[ObjectRef, datetime | None], batch: str):
        self.run_, self.cutoffs, self.batch = run, cutoffs, batch
        self.cutoff = min((v for v in cutoffs.values() if v is not None), default=None)

    def relation(self, step: PartitionStep, source: ObjectRef) -> str:
        run = self.run_
        assert run.plan.landing_root is not None
        span = lake_span(run.loaded, run.plan.target, source, [step.window], run.plan.zone or "UTC")
        since, before = span if span is not None else (None, None)
        read = lake_read(
            run.loaded, source, run.plan.landing_root, since=since, before=before, cutoff=self.cutoffs.get(source)
        )
        return read.relation(read.inline(run.loaded.project.tables[source]))

    def run(self, client: Client, steps: list[PartitionStep], damaged: frozenset[str | None]) -> list[StepResult]:
        done: list[StepResult] = []
        for step in steps:
            started = time.monotonic()
            plan = self.run_.plan
            try:
                r = run_step(
                    client, self.run_.loaded.project, plan, step, trigger_relation=self.relation, damaged=damaged
                )
            except NoRoomUnderGate as busy:
                busy.done = done
                raise
            backfills.record(
                client, Backfill(plan.target, step.key or backfills.WHOLE, self.cutoff, self.batch, r.rows_written)
            )
            cutoffs = tuple(sorted(self.cutoffs.items(), key=lambda kv: kv[0].fqn))
            done.append(
                self.run_.swapped(
                    StepResult(
                        plan.target.fqn,
                        step.key,
                        str(step.engine),
                        r.method,
                        0,
                        r.rows_written,
                        self.cutoff,
                        self.batch,
                        time.monotonic() - started,
                        statements=r.statements,
                        attempts=r.attempts,
                        cutoffs=cutoffs,
                    )
                )
            )
        return done

    def close(self) -> None:
        pass


ENGINE = LakeFile()
