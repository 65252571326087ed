"""Partition backfills of an MV target: from the landing zone through Spark, or from the source in ClickHouse.

Spark engine, per target and range of partitions (the protocol is in README, "Backfill protocol"):

1. under the trigger source's gate, read its ingestion watermark and take the cutoff
   ``C = watermark - late tolerance``; no row with event time ``<= C`` can be inserted into the
   source any more;
2. Spark reads the landing files that can hold the range's rows with event time ``<= C``, applies
   the ingestion's cleaning (dedup by key) and writes Parquet staging, one folder per partition;
3. under the gate again, per partition: ClickHouse runs the MV's OWN SELECT over
   ``file(staging) UNION ALL (source rows with event time > C)`` into a shadow table and replaces
   the partition (``chmv_assets.engine.rebuild``). The source table is not re-inserted, so sibling MVs
   on it do not fire.

ClickHouse engine: the same rebuild reading the source table, also under the gate.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.ddl.partitioning import PartitionWindow, partition_scheme, windows_between
from chmv_assets.engine import landing
from chmv_assets.engine.clients import ClientFactory
from chmv_assets.engine.gates import (
    crash_point,
    current_watermark,
    cutoff_of,
    source_gate,
    source_min_time,
)
from chmv_assets.engine.rebuild import rebuild
from chmv_assets.engine.watermarks import COMMITTED, read_watermark, write_watermark
from chmv_assets.errors import ChmvError, LandingZoneError
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.rebuild_sql import source_range_predicate
from spark import staging

Engine = Literal["auto", "clickhouse", "spark"]


@dataclass
class BackfillResult:
    """One partition of one backfill (materialization metadata)."""

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


@dataclass
class _Staged:
    """Spark's output for one trigger source of a backfill."""

    source: ObjectRef
    folder: Path
    columns: list[str]
    cutoff: datetime | None
    per_window: bool
    rows_read: int


def triggers_of(project: Project, target: ObjectRef) -> list[ObjectRef]:
    """Distinct trigger tables of the MVs writing ``target``."""
    return list(dict.fromkeys(v.trigger for v in project.views_into(target) if v.trigger is not None))


def spark_capable(loaded: LoadedProject, target: ObjectRef, root: Path | None) -> bool:
    """A landing zone exists and every trigger of the target has an event-time column configured."""
    triggers = triggers_of(loaded.project, target)
    ingestible = set(landing.ingestible_sources(loaded))
    return root is not None and bool(triggers) and all(t in ingestible for t in triggers)


def choose_engine(client: Client, loaded: LoadedProject, target: ObjectRef, window: PartitionWindow | None,
                  root: Path | None) -> str:  # fmt: skip
    """``spark`` when the source table no longer holds the window, else ``clickhouse``.

    The source no longer holds it when its oldest row is after the window start and the landing zone
    has files that arrived between the two (rows the source has lost to its TTL).
    """
    if not spark_capable(loaded, target, root):
        return "clickhouse"
    assert root is not None
    for source in triggers_of(loaded.project, target):
        oldest = source_min_time(client, source, landing.time_column(loaded, source))
        if oldest is None:
            return "spark"
        start = window.start if window is not None else _first_landing(root, source)
        if start is None or oldest <= start:
            continue
        # The source starts inside (or after) the window: spark only if the lake holds earlier rows of it.
        held_from = oldest.replace(minute=0, second=0, microsecond=0)
        if landing.list_files(root, source, arrived_after=start, arrived_before=held_from):
            return "spark"
    return "clickhouse"


def _first_landing(root: Path, source: ObjectRef) -> datetime | None:
    files = landing.list_files(root, source)
    return min((f.first_arrival for f in files), default=None)


def backfill(spark, clickhouse: ClientFactory, loaded: LoadedProject, target: ObjectRef,
             windows: Sequence[PartitionWindow | None], *, engine: Engine = "auto", root: Path | None = None,
             log: Callable[[str], None] | None = None) -> list[BackfillResult]:  # fmt: skip
    """Rebuild partitions of ``target`` exactly, while ingestion keeps loading its sources.

    Args:
        spark: A SparkSession, or a zero-argument factory of one (called only if a partition needs Spark).
        windows: The partitions (``[None]`` for an unpartitioned target).
        engine: ``spark``, ``clickhouse`` or ``auto`` (spark when the source does not hold the window).
        root: Landing zone root; default from the configuration.
    """
    say = log or (lambda _msg: None)
    root = root or landing.landing_dir(loaded)
    triggers = triggers_of(loaded.project, target)
    if engine == "auto":
        with source_gate(triggers), clickhouse.get_client() as client:
            choice = {w.key if w else None: choose_engine(client, loaded, target, w, root) for w in windows}
    else:
        choice = {w.key if w else None: engine for w in windows}
    by_spark = [w for w in windows if choice[w.key if w else None] == "spark"]
    by_clickhouse = [w for w in windows if choice[w.key if w else None] == "clickhouse"]
    results: list[BackfillResult] = []
    if by_clickhouse:
        say(f"{target.fqn}: {len(by_clickhouse)} partition(s) from the source table (clickhouse engine)")
        with source_gate(triggers), clickhouse.get_client() as client:
            for window in by_clickhouse:
                started = time.monotonic()
                r = rebuild(client, loaded.project, target, window, log=say)
                results.append(BackfillResult(target.fqn, r.partition, "clickhouse", r.method, 0, r.rows_written,
                                              None, "", time.monotonic() - started, 0, r.statements))  # fmt: skip
    if by_spark:
        if callable(spark):  # a factory: the session starts only when a partition needs it
            spark = spark()
        if spark is None or not spark_capable(loaded, target, root):
            raise ChmvError(f"{target.fqn}: the spark engine needs a landing zone and [ingestion.time_columns] for "
                            f"{', '.join(t.fqn for t in triggers)}; configure them or use engine=clickhouse")  # fmt: skip
        assert root is not None
        say(f"{target.fqn}: {len(by_spark)} partition(s) from the landing zone (spark engine)")
        with source_gate(triggers), clickhouse.get_client() as client:
            cutoffs = _cutoffs(client, loaded, triggers, by_spark, root)
        results += _spark_backfill(spark, clickhouse, None, loaded, target, by_spark, cutoffs, root, say)
    order = {(w.key if w else None): i for i, w in enumerate(windows)}
    return sorted(results, key=lambda r: order.get(r.partition, 0))


def _cutoffs(client: Client, loaded: LoadedProject, triggers: list[ObjectRef],
             windows: Sequence[PartitionWindow | None], root: Path) -> dict[ObjectRef, datetime | None]:  # fmt: skip
    """Per trigger, ``watermark - tolerance`` (a first watermark is established if there is none)."""
    tolerance = loaded.config.ingestion.late_tolerance_minutes
    ends = [w.end for w in windows if w is not None]
    cutoffs = {}
    for source in triggers:
        files = landing.list_files(root, source)
        newest = max((f.last_arrival for f in files), default=None)
        establish = max(ends) if ends and None not in windows else newest
        if establish is not None:
            establish += timedelta(minutes=tolerance)
        mark = current_watermark(client, source, landing.time_column(loaded, source), establish_at=establish)
        cutoffs[source] = cutoff_of(mark, tolerance)
    return cutoffs


def _spark_backfill(spark, clickhouse: ClientFactory | None, client: Client | None, loaded: LoadedProject,
                    target: ObjectRef, windows: Sequence[PartitionWindow | None],
                    cutoffs: dict[ObjectRef, datetime | None], root: Path,
                    say: Callable[[str], None]) -> list[BackfillResult]:  # fmt: skip
    """Stage with Spark, then swap each partition under the gates (opening a client unless one is given)."""
    keys = [w.key if w else None for w in windows]
    marks = sorted((k.fqn, str(v)) for k, v in cutoffs.items())
    batch_id = hashlib.sha1(f"{target.fqn}|{keys}|{marks}".encode()).hexdigest()[:16]
    staged = {}
    for source, cutoff in cutoffs.items():
        staged[source] = _stage_source(spark, loaded, target, source, windows, cutoff, root, batch_id, say)
    crash_point("backfill:staged")
    results: list[BackfillResult] = []
    triggers = list(cutoffs)

    def swap(c: Client) -> None:
        for window in windows:
            started = time.monotonic()
            key = window.key if window else None
            relations = {s: _relation(loaded, s, st, window) for s, st in staged.items()}
            r = rebuild(c, loaded.project, target, window, trigger_relation=relations.get, log=say)
            rows_staged = sum(staging.staged_rows(_window_folder(st, window)) for st in staged.values())
            cutoff = min((v for v in cutoffs.values() if v is not None), default=None)
            previous = read_watermark(c, f"backfill:{target.fqn}", key or "all")
            write_watermark(c, f"backfill:{target.fqn}", key or "all", last_processed_ts=cutoff, batch_id=batch_id,
                            status=COMMITTED, rows=r.rows_written, previous=previous)  # fmt: skip
            say(f"{target.fqn} {key or '(whole table)'}: {r.method}, {rows_staged} landing rows staged, "
                f"{r.rows_written} rows written, cutoff {cutoff}")  # fmt: skip
            results.append(BackfillResult(target.fqn, key, "spark", r.method, rows_staged, r.rows_written, cutoff,
                                          batch_id, time.monotonic() - started,
                                          sum(s.rows_read for s in staged.values()), r.statements))  # fmt: skip
            crash_point("backfill:swapped")

    if client is not None:
        swap(client)
    else:
        assert clickhouse is not None
        with source_gate(triggers), clickhouse.get_client() as c:
            swap(c)
    for st in staged.values():
        staging.remove(st.folder)
    return results


def _per_window_ok(loaded: LoadedProject, target: ObjectRef, source: ObjectRef,
                   windows: Sequence[PartitionWindow | None]) -> bool:  # fmt: skip
    """Whether each partition's trigger rows are exactly the rows whose event time falls in its window."""
    if any(w is None for w in windows):
        return False
    project = loaded.project
    table = project.table(target)
    if table is None:
        return False
    views = project.views_into(target)
    scheme = partition_scheme(table, views)
    if scheme.grain not in ("hour", "day", "month") or scheme.column is None:
        return False
    tcol = landing.time_column(loaded, source)
    for view in views:
        if view.trigger != source:
            continue
        out = view.output(scheme.column)
        if out is None or out.truncation is None or out.truncation[0] != tcol:
            return False
        grain = out.truncation[1]
        if grain is not None and not grain.within(scheme.grain):
            return False
        if source_range_predicate(view, project, scheme, windows[0]) is None:  # type: ignore[arg-type]
            return False
    return True


def _stage_source(spark, loaded: LoadedProject, target: ObjectRef, source: ObjectRef,
                  windows: Sequence[PartitionWindow | None], cutoff: datetime | None, root: Path, batch_id: str,
                  say: Callable[[str], None]) -> _Staged:  # fmt: skip
    table = loaded.project.table(source)
    if table is None:
        raise LandingZoneError(f"{source.fqn} is not defined in the DDL directory")
    tcol = landing.time_column(loaded, source)
    per_window = _per_window_ok(loaded, target, source, windows)
    lateness = timedelta(minutes=loaded.config.ingestion.max_lateness_minutes)
    since = min(w.start for w in windows if w is not None) if per_window else None
    before = max(w.end for w in windows if w is not None) if per_window else None
    upper = min(t for t in (before, cutoff) if t is not None) if (before or cutoff) else None
    files = landing.list_files(root, source, arrived_after=since,
                               arrived_before=upper + lateness if upper is not None else None)  # fmt: skip
    columns, rows_read = landing.check_files(files, table)
    keys = landing.dedup_keys(loaded, source, columns)
    folder = staging.staging_dir("backfill", [target, source], batch_id)
    say(f"{target.fqn}: Spark stages {source.fqn} from {len(files)} landing files ({rows_read} rows), "
        f"event time in [{since}, {before}) and <= cutoff {cutoff}")  # fmt: skip
    if files:
        staging.stage(spark, [f.path for f in files], columns, tcol, keys, folder, at_or_before=cutoff,
                      since=since, before=before, partition_grain=_scheme_grain(loaded, target) if per_window else None)  # fmt: skip
    return _Staged(source, folder, columns, cutoff, per_window, rows_read)


def _scheme_grain(loaded: LoadedProject, target: ObjectRef) -> str | None:
    table = loaded.project.table(target)
    assert table is not None
    return partition_scheme(table, loaded.project.views_into(target)).grain


def _window_folder(st: _Staged, window: PartitionWindow | None) -> Path:
    if st.per_window and window is not None:
        return st.folder / f"{staging.PARTITION_COLUMN}={staging.window_key(window.start)}"
    return st.folder


def _relation(loaded: LoadedProject, source: ObjectRef, st: _Staged, window: PartitionWindow | None) -> str:
    """``(landing rows <= cutoff UNION ALL source rows > cutoff)`` standing in for the trigger table."""
    table = loaded.project.table(source)
    assert table is not None
    cols = ", ".join(quote(c) for c in st.columns)
    if st.per_window and window is not None:
        glob = staging.staged_glob(st.folder, staging.window_key(window.start))
    elif st.per_window:
        glob = str(st.folder / "*" / "*.parquet")
    else:
        glob = staging.staged_glob(st.folder)
    landing_sql = f"SELECT {cols} FROM {staging.file_relation(glob, table, st.columns)}"
    if st.cutoff is None:
        return f"({landing_sql})"
    tcol = quote(landing.time_column(loaded, source))
    cutoff_sql = f"toDateTime64('{staging.ts_literal(st.cutoff)}', 6, 'UTC')"
    return f"({landing_sql} UNION ALL SELECT {cols} FROM {qualified(source)} WHERE {tcol} > {cutoff_sql})"


def windows_covering(loaded: LoadedProject, target: ObjectRef, since: datetime, until: datetime,
                     margin: timedelta = timedelta(0)) -> list[PartitionWindow | None]:  # fmt: skip
    """The partitions of ``target`` whose windows intersect ``[since - margin, until + margin]``."""
    table = loaded.project.table(target)
    scheme = partition_scheme(table, loaded.project.views_into(target)) if table is not None else None
    if scheme is None or scheme.grain is None:
        return [None]
    first = datetime.strptime(loaded.config.partition_start, "%Y-%m-%d")
    return list(windows_between(scheme.grain, first, since - margin, until + margin))


def repair(spark, client: Client, loaded: LoadedProject, source: ObjectRef, *, since: datetime | None,
           until: datetime | None, cutoff: datetime | None, root: Path,
           log: Callable[[str], None] | None = None) -> list[str]:  # fmt: skip
    """Rebuild what a load that died during its insert may have left inconsistent; the gate is held.

    The source now holds every row of the batch, but a block inserted just before the kill may be in
    the source without its MV output. Every partition of the source's direct targets that the batch's
    event-time range touches is rebuilt from the landing zone (``<= cutoff``) and the source (``> cutoff``);
    targets further down a chain are rebuilt from their upstream table (with one partition of margin).
    """
    say = log or (lambda _msg: None)
    if since is None or until is None:
        return []
    project = loaded.project
    done: list[str] = []
    direct = list(dict.fromkeys(v.writes_to for v in project.views_from(source) if v.trigger == source))
    for target in direct:
        windows = windows_covering(loaded, target, since, until)
        triggers = triggers_of(project, target)
        tolerance = loaded.config.ingestion.late_tolerance_minutes
        cutoffs = {t: cutoff if t == source else cutoff_of(current_watermark(
            client, t, landing.time_column(loaded, t)), tolerance) for t in triggers}  # fmt: skip
        _spark_backfill(spark, None, client, loaded, target, windows, cutoffs, root, say)
        done += [f"{target.fqn}/{w.key if w else 'all'}" for w in windows]
    graph = loaded.graph
    downstream = [n for n in graph.impact(source.fqn) if n not in {t.fqn for t in direct}]
    for fqn in sorted(downstream, key=lambda n: graph.depth.get(n, 0)):
        database, _, name = fqn.partition(".")
        ref = ObjectRef(database=database, name=name)
        if ref not in project.targets:
            continue
        for window in windows_covering(loaded, ref, since, until, margin=timedelta(days=7)):
            rebuild(client, project, ref, window, log=say)
            done.append(f"{fqn}/{window.key if window else 'all'}")
    return done
