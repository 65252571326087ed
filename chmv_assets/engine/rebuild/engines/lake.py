"""What every engine reading the landing zone shares: the cutoffs, fixed under the gates, and the lake's reads of the
steps' windows (:func:`~chmv_assets.engine.ingest.lake_read.lake_read`, the one read of the lake: a fill's rows are
parity's)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.ingest.cutoff import current_watermark, cutoff_of
from chmv_assets.engine.ingest.lake_read import LakeRead, lake_read, lake_span
from chmv_assets.engine.rebuild.engines.base import EngineRun
from chmv_assets.engine.rebuild.planner import PartitionStep


def cutoffs(run: EngineRun, steps: Sequence[PartitionStep]) -> dict[ObjectRef, datetime | None]:
    """Per trigger, ``watermark - tolerance``, read under the run's gates (a first watermark is established if there
    is none: the end of the steps' windows, else the landing zone's newest file); the run's fixed ones if given."""
    if run.cutoffs is not None:
        return dict(run.cutoffs)
    client: Client = run.hold.client  # the gates: no load can move a watermark meanwhile
    plan, loaded = run.plan, run.loaded
    tolerance = loaded.config.ingestion.late_tolerance_minutes
    windows = [s.window for s in steps]
    ends = [w.wall_end for w in windows if w is not None and w.wall_end is not None]
    found = {}
    for source in plan.gates:
        files = landing.list_files(plan.landing_root, source) if plan.landing_root else []
        newest = max((f.last_arrival for f in files), default=None)
        establish = max(ends) if ends and len(ends) == len(windows) else newest
        if establish is not None:
            establish += timedelta(minutes=tolerance)
        mark = current_watermark(client, source, landing.time_column(loaded, source), establish_at=establish)
        found[source] = cutoff_of(mark, tolerance)
    return found


def reads(
    run: EngineRun, steps: Sequence[PartitionStep], cutoffs: Mapping[ObjectRef, datetime | None]
) -> dict[ObjectRef, LakeRead]:
    """Per trigger, the lake's read of the steps' windows (:func:`~chmv_assets.engine.ingest.lake_read.lake_span`)
    up to its cutoff."""
    plan = run.plan
    assert plan.landing_root is not None
    windows = [s.window for s in steps]
    found = {}
    for relation in steps[0].relations:
        source = relation.source
        span = lake_span(run.loaded, plan.target, source, windows, plan.zone or "UTC")
        since, before = span if span is not None else (None, None)
        found[source] = lake_read(
            run.loaded, source, plan.landing_root, since=since, before=before, cutoff=cutoffs.get(source)
        )
    return found


def batch_id(run: EngineRun, steps: Sequence[PartitionStep], cutoffs: Mapping[ObjectRef, datetime | None]) -> str:
    """The fill's batch: named by the target, the partitions and the cutoffs (a re-run of the same is the same)."""
    marks = sorted((k.fqn, str(v)) for k, v in cutoffs.items())
    return hashlib.sha1(f"{run.plan.target.fqn}|{[s.key for s in steps]}|{marks}".encode()).hexdigest()[:16]
