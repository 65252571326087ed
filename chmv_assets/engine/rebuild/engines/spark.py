"""The ``spark`` engine: the MVs' own SELECT over the landing zone's rows up to the ingestion cutoff, read, cleaned
and staged by Spark (the provider of staged rows), united with the source table's rows after the cutoff
(docs/rebuilds.md, "Backfill protocol").

1. under the run's gates, each trigger's cutoff is fixed (:func:`~chmv_assets.engine.rebuild.engines.lake.cutoffs`);
2. the gates and the engine are released, and Spark stages each trigger's lake read
   (:class:`~chmv_assets.engine.ingest.lake_read.LakeRead`): one folder per UTC window of the grain where each
   partition's rows are exactly those of its window (``staged_per_window``), else one for the range;
3. under the gates again, per partition, the MVs' SELECT reads ``file(staging) UNION ALL (table rows > cutoff)`` into
   its shadow and swaps it in; the partition's cutoff, batch and rows are kept in ``chmv_meta.backfills``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import PartitionWindow, window_instant
from chmv_assets.engine.ingest import staging_area as staging
from chmv_assets.engine.ingest.cutoff import crash_point
from chmv_assets.engine.ingest.lake_read import LakeRead
from chmv_assets.engine.rebuild import backfills
from chmv_assets.engine.rebuild.backfills import Backfill
from chmv_assets.engine.rebuild.engines import lake
from chmv_assets.engine.rebuild.engines.base import EngineRun, StepResult
from chmv_assets.engine.rebuild.planner import PartitionStep
from chmv_assets.engine.rebuild.steps import run_step
from chmv_assets.errors import ChmvError, NoRoomUnderGate
from chmv_assets.sql.rebuild_sql import window_zone

_LOG = logging.getLogger(__name__)


@dataclass
class _Staged:
    """The stager's output for one trigger source of a plan."""

    source: ObjectRef
    read: LakeRead
    folder: Path
    per_window: bool
    grain: str | None = None  # the windows' (a folder per UTC window of it: staging_area.window_keys)
    zone: str = "UTC"  # the zone whose instants the windows' bounds are, for this source's rows

    @property
    def rows_read(self) -> int:
        return self.read.rows

    def keys(self, window: PartitionWindow | None) -> list[str] | None:
        """The staging sub-folders of ``window`` (None: the whole staging folder)."""
        if not self.per_window or window is None or window.start is None or window.end is None or self.grain is None:
            return None
        start, end = window_instant(window.start, self.zone), window_instant(window.end, self.zone)
        return staging.window_keys(start, end, self.grain)

    def folders(self, window: PartitionWindow | None) -> list[Path]:
        keys = self.keys(window)
        return staging.window_folders(self.folder, keys) if keys is not None else [self.folder]

    def relation(self, run: EngineRun, window: PartitionWindow | None) -> str:
        """``(landing rows <= cutoff UNION ALL source rows > cutoff)`` standing in for the trigger table."""
        table = run.loaded.project.table(self.source)
        assert table is not None
        keys = self.keys(window)
        if keys is not None:
            glob = staging.staged_glob(self.folder, keys)
        elif self.per_window:
            glob = str(self.folder / "*" / "*.parquet")
        else:
            glob = staging.staged_glob(self.folder)
        return self.read.relation(staging.file_relation(glob, table, self.read.columns))


class Spark:
    """The landing zone's rows, staged by Spark."""

    def prepare(self, run: EngineRun, steps: Sequence[PartitionStep]) -> _Fill:
        plan = run.plan
        if run.stager is None:
            raise ChmvError(
                f"{plan.target.fqn}: {len(steps)} partition(s) need Spark (the landing zone), "
                "but no Spark session is configured; give the run the pyspark resource"
            )
        _LOG.info(f"{plan.target.fqn}: {len(steps)} partition(s) from the landing zone (spark engine)")
        cutoffs = lake.cutoffs(run, steps)
        run.hold.release()  # Spark's work holds neither the gates nor the engine (the cutoffs stay true meanwhile)
        batch = lake.batch_id(run, steps, cutoffs)
        reads = lake.reads(run, steps, cutoffs)
        staged = {
            r.source: _stage(run, r.source, reads[r.source], r.staged_per_window, batch) for r in steps[0].relations
        }
        crash_point("backfill:staged")
        return _Fill(run, staged, cutoffs, batch)


def _stage(run: EngineRun, source: ObjectRef, read: LakeRead, per_window: bool, batch: str) -> _Staged:
    """Spark stages ``read`` into the batch's folder of ``source`` (nothing where the landing zone has no file)."""
    plan, project = run.plan, run.loaded.project
    folder = staging.staging_dir("backfill", [plan.target, source], batch)
    grain = str(plan.scheme.grain) if per_window and plan.scheme.grain is not None else None
    # the landing zone's event times are UTC: the windows' instants, in the zone their rows are computed in
    column = project.tables[source].column(read.time_column)
    zone = window_zone(project.table(plan.target), plan.scheme, column, plan.zone) if plan.zone else "UTC"
    _LOG.info(
        f"{plan.target.fqn}: Spark stages {source.fqn} from {len(read.files)} landing files ({read.rows} rows), "
        f"event time in [{read.since}, {read.before}) and <= cutoff {read.cutoff} UTC"
    )
    if read.files:
        assert run.stager is not None
        run.stager(
            list(read.files),
            list(read.columns),
            read.time_column,
            list(read.keys),
            folder,
            **read.staged_bounds(),
            partition_grain=plan.scheme.grain if per_window else None,
        )
    return _Staged(source, read, folder, per_window, grain, zone)


class _Fill:
    def __init__(
        self, run: EngineRun, staged: dict[ObjectRef, _Staged], cutoffs: dict[ObjectRef, datetime | None], batch: str
    ):
        self.run_, self.staged, self.cutoffs, self.batch = run, staged, cutoffs, batch
        self.cutoff = min((v for v in cutoffs.values() if v is not None), default=None)

    def relation(self, step: PartitionStep, source: ObjectRef) -> str | None:
        staged = self.staged.get(source)
        return staged.relation(self.run_, step.window) if staged is not None else None

    def run(self, client: Client, steps: list[PartitionStep], damaged: frozenset[str | None]) -> list[StepResult]:
        swapped: list[StepResult] = []
        for step in steps:
            try:
                swapped.append(self.run_.swapped(self._swap(client, step, damaged)))
            except NoRoomUnderGate as busy:
                busy.done = swapped
                raise
        return swapped

    def _swap(self, client: Client, step: PartitionStep, damaged: frozenset[str | None]) -> StepResult:
        """One step: the MVs' SELECT over its staged rows and the source's after the cutoff, swapped in; its record
        (:mod:`chmv_assets.engine.rebuild.backfills`) kept."""
        started = time.monotonic()
        run, target = self.run_, self.run_.plan.target
        r = run_step(client, run.loaded.project, run.plan, step, trigger_relation=self.relation, damaged=damaged)
        rows_staged = sum(staging.staged_rows(f) for st in self.staged.values() for f in st.folders(step.window))
        backfills.record(client, Backfill(target, step.key or backfills.WHOLE, self.cutoff, self.batch, r.rows_written))
        _LOG.info(
            f"{target.fqn} {step.key or '(whole table)'}: {r.method}, {rows_staged} landing rows staged, "
            f"{r.rows_written} rows written, cutoff {self.cutoff}"
        )
        crash_point("backfill:swapped")
        return StepResult(
            target.fqn,
            step.key,
            str(step.engine),
            r.method,
            rows_staged,
            r.rows_written,
            self.cutoff,
            self.batch,
            time.monotonic() - started,
            sum(s.rows_read for s in self.staged.values()),
            r.statements,
            r.attempts,
            tuple(sorted(self.cutoffs.items(), key=lambda kv: kv[0].fqn)),
        )

    def close(self) -> None:
        for staged in self.staged.values():
            staging.remove(staged.folder)


ENGINE = Spark()
