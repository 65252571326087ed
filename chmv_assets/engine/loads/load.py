"""Watermarked ingestion: landing-zone rows newer than ``watermark - tolerance`` into a ClickHouse source table.

One load of one source:

1. under the source's gate, read the watermark ``W`` (``L = W - late tolerance``);
2. the stager (Spark: :class:`spark.staging.SparkStager`) reads the landing files that can hold rows with event
   time ``> L``, keeps those rows, drops duplicates by the source's dedup key and writes them to a staging folder
   (executors never open ClickHouse);
3. under the gate again: write the ``loading`` intent, then ``INSERT … SELECT FROM file(staging)`` of the
   staged rows with event time ``> L`` (``L`` re-read now) that the source does not hold yet (anti-join on the
   dedup key over the same window, :func:`chmv_assets.sql.ingest_sql.anti_join_insert_sql`): one insert, or one
   per run of at most the pacer's partitions per insert (days, hours where a table the insert writes is
   partitioned by hour), in time order, each paced
   (:mod:`chmv_assets.engine.pacing.pacer`: it waits while a partition the insert writes — of the source or a target
   its MVs write, found from the insert's event-time span — is near its part limits, and retries a "Too many parts"
   refusal that wrote nothing). The live MVs fire on these inserts. Then the watermark
   advances to the newest staged event time (``committed``), only after the last insert returned; a load that gives
   up waiting commits what its finished inserts loaded (every staged row up to the last one's end) and says so.

The anti-join is the batch's idempotency: replaying a batch, or re-running after a kill between the
insert and the commit, inserts nothing that is already there. The insert carries a query_id derived from the
source and the batch (:func:`chmv_assets.engine.statements.statement_id`): a client killed during it leaves it
running on a server, so the next load first waits for its own batch's and an interrupted batch's insert to end
(else its anti-join would not see their rows yet and insert them again). (Measured on chdb 26.9: an
``insert_deduplication_token`` skips the source block, but the MVs still fire on it, so a token alone
would double-count the targets.) A load that died *during* its insert (``loading`` is the latest
record) may have left a block in the source whose MV output was not written; the re-run completes the
insert and then rebuilds the target partitions the batch touched (``repair``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from chmv_assets import settings
from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef, Table
from chmv_assets.ddl.partitioning import target_reach
from chmv_assets.engine.clients import ClientFactory
from chmv_assets.engine.clock import server_zone, session_zone, wall
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.ingest import staging_area as staging
from chmv_assets.engine.ingest.cutoff import (
    crash_point,
    current_watermark,
    cutoff_of,
    source_gate,
)
from chmv_assets.engine.pacing.pacer import Pacer, chunks, pacer_for, written_by_insert
from chmv_assets.engine.rebuild.executor import Stager, repair_interrupted_load
from chmv_assets.engine.rebuild.planner import windows_covering
from chmv_assets.engine.statements import chunk_id, statement_id, wait_for_orphans
from chmv_assets.engine.watermarks import begin_load, commit_load
from chmv_assets.errors import LandingZoneError, ServerBusy
from chmv_assets.sql.ingest_sql import (
    anti_join_insert_sql,
    count_sql,
    in_run,
    newest_sql,
    past_lower_bound,
    span_sql,
    staged_stats_sql,
    staged_units_sql,
    time_unit,
)
from chmv_assets.sql.rebuild_sql import partition_tuple

_LOG = logging.getLogger(__name__)

#: Settings of the load's INSERT: a batch may span several source partitions.
INSERT_SETTINGS = {"max_partitions_per_insert_block": 0, "insert_deduplicate": 0}


@dataclass
class IngestResult:
    """What one load did (materialization metadata)."""

    source: str
    batch_id: str
    files: int
    rows_read: int
    rows_staged: int
    rows_inserted: int
    watermark_before: datetime | None
    watermark_after: datetime | None
    lower_bound: datetime | None
    repaired: list[str] = field(default_factory=list)
    seconds: float = 0.0


def batch_id_of(source: ObjectRef, lower: datetime | None, files: list[landing.LandingFile]) -> str:
    """Deterministic id: same source, lower bound and files (path, size, mtime) give the same batch."""
    digest = hashlib.sha1(f"{source.fqn}|{lower}".encode())
    for item in files:
        stat = os.stat(item.path)
        digest.update(f"|{item.path}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def ingest(
    stager: Stager,
    clickhouse: ClientFactory,
    loaded: LoadedProject,
    source: ObjectRef,
    *,
    root: Path | None = None,
    days: set[str] | None = None,
) -> IngestResult:
    """Load the landing-zone rows of ``source`` newer than its watermark (minus the late tolerance).

    Args:
        stager: The provider of staged rows (Spark: ``spark.staging.SparkStager``): stages the landing files, and
            the partitions a repair rebuilds from the landing zone.
        clickhouse: The resource (clients are opened per step, after the gate).
        root: Landing zone root; default from the configuration.
        days: Only landing files of these arrival days (``YYYY-MM-DD``), for a partitioned asset.

    Raises:
        LandingZoneError: A file is corrupt or has the wrong schema (the watermark does not move and
            nothing is inserted).
    """
    started = time.monotonic()
    root = root or landing.landing_dir(loaded)
    if root is None:
        raise LandingZoneError(
            f"no landing zone configured: set [ingestion] landing_dir in chmv.toml or ${settings.LANDING_DIR.name}"
        )
    table = loaded.project.table(source)
    if table is None:
        raise LandingZoneError(f"{source.fqn} is not defined in the DDL directory")
    tcol = landing.time_column(loaded, source)
    tolerance = loaded.config.ingestion.late_tolerance_minutes

    with (
        source_gate([source], holder=f"ingestion of {source.fqn}: reading its watermark"),
        clickhouse.get_client() as client,
    ):
        mark = current_watermark(client, source, tcol)
    lower = cutoff_of(mark, tolerance)
    files = landing.list_files(root, source, arrived_after=lower, days=days)
    columns, rows_read = landing.check_files(files, table)
    keys = landing.dedup_keys(loaded, source, columns)
    batch_id = batch_id_of(source, lower, files)
    _LOG.info(
        f"{source.fqn}: batch {batch_id}, {len(files)} files, {rows_read} rows, watermark "
        f"{mark.last_processed_ts if mark else None}, loading event time > {lower}"
    )
    folder = staging.staging_dir("ingest", [source], batch_id)
    if files:
        crash_point("ingest:before_stage")
        stager([f.path for f in files], columns, tcol, keys, folder, after=lower)
    rows_staged = staging.staged_rows(folder)
    crash_point("ingest:staged")

    repaired: list[str] = []
    holder = f"ingestion of {source.fqn}, batch {batch_id}: inserting {rows_staged} staged rows"
    with source_gate([source], holder=holder), clickhouse.get_client() as client:
        mark = current_watermark(client, source, tcol)
        lower = cutoff_of(mark, tolerance)
        before = mark.last_processed_ts if mark else None
        interrupted = mark is not None and mark.interrupted
        earlier = {batch_id, *([mark.batch_id] if interrupted and mark is not None else [])}
        waited = wait_for_orphans(
            client, [insert_id(source, b) for b in earlier], timeout=loaded.config.rebuild.insert_wait_seconds
        )
        if waited:
            _LOG.info(
                f"{source.fqn}: waited for the insert of an interrupted load still running on the server: {waited}"
            )
        intent = begin_load(client, source, batch_id, mark)
        crash_point("ingest:intent")
        inserted, newest, oldest = 0, None, None
        if rows_staged:
            load = _Load(pacer_for(client, loaded.config.pacing), loaded, table, folder, columns, tcol, keys)
            try:
                inserted, newest, oldest = load.insert(client, lower, insert_id(source, batch_id))
            except ServerBusy as busy:
                if busy.written:  # left `loading`: the next load completes the insert and repairs its MVs' output
                    raise
                # what the finished inserts loaded stays loaded (every staged row up to the last one's end)
                rows, newest = load.done
                commit_load(client, source, batch_id, newest=newest, rows=rows, previous=intent)
                done = f"{rows} rows, every staged row up to {newest}" if newest else "nothing"
                raise ServerBusy(
                    f"{busy}\n{source.fqn}: this load inserted {done}; the watermark says so and the next load takes "
                    "the rest"
                ) from busy
        crash_point("ingest:inserted")
        if interrupted:
            _LOG.info(f"{source.fqn}: the previous load died during its insert; rebuilding the partitions it touched")
            repaired = repair_interrupted_load(
                client,
                loaded,
                source,
                since=lower or oldest,
                until=newest or before,
                cutoff=lower,
                root=root,
                stager=stager,
            )
        committed = commit_load(client, source, batch_id, newest=newest, rows=inserted, previous=intent)
        crash_point("ingest:committed")
    staging.remove(folder)
    result = IngestResult(
        source.fqn,
        batch_id,
        len(files),
        rows_read,
        rows_staged,
        inserted,
        before,
        committed.last_processed_ts,
        lower,
        repaired,
        time.monotonic() - started,
    )
    _LOG.info(
        f"{source.fqn}: batch {batch_id} inserted {inserted} of {rows_staged} staged rows; watermark "
        f"{before} -> {committed.last_processed_ts}"
    )
    return result


def insert_id(source: ObjectRef, batch_id: str) -> str:
    """The query_id of a batch's insert: the same on every host and every re-run of the batch."""
    return statement_id("ingest", source.fqn, batch_id)


class _Load:
    """The inserts of one batch: as many as the pacer's partitions per insert require, each paced."""

    def __init__(
        self,
        pacer: Pacer,
        loaded: LoadedProject,
        table: Table,
        folder: Path,
        columns: list[str],
        tcol: str,
        keys: list[str],
    ):
        self.pacer, self.loaded, self.table, self.folder = pacer, loaded, table, folder
        self.columns, self.tcol, self.keys = columns, tcol, keys
        self.watch = written_by_insert(loaded.project, table.ref)
        self.unit = "Hour" if hourly(loaded, self.watch) else "Day"
        #: (rows, newest event time) the finished inserts loaded
        self.done: tuple[int, datetime | None] = (0, None)

    def insert(self, client, lower: datetime | None, query_id: str) -> tuple[int, datetime | None, datetime | None]:
        """Insert the staged rows past ``lower`` the source does not hold; (rows inserted, newest and oldest staged
        event time)."""
        ref, tcol = self.table.ref, self.tcol
        window = past_lower_bound(tcol, lower)
        params: dict = {
            "path": staging.staged_glob(self.folder),
            "structure": staging.structure(self.table, self.columns),
        }
        stats = client.query(staged_stats_sql(tcol), parameters=params).result_rows[0]
        # the staged rows' days (hours where a table it writes is partitioned by hour), cut into runs of at most the
        # partitions one insert may write
        unit = time_unit(tcol, self.unit)
        limit = self.pacer.partitions_per_insert() if self.pacer.rules.enabled else 0
        units = [int(u) for (u,) in client.query(staged_units_sql(unit, window), parameters=params).result_rows]
        runs = chunks(units, limit)
        if len(runs) > 1:
            _LOG.info(
                f"{ref.fqn}: {len(units)} {self.unit.lower()}s of rows, in {len(runs)} inserts of at most {limit}"
            )
        inserted = 0
        for number, run in enumerate(runs, start=1):
            where = window if len(runs) == 1 else in_run(window, unit, run[0], run[-1])
            counted = count_sql(ref, where)
            before = int(client.query(counted, parameters=params).result_rows[0][0])
            sql = anti_join_insert_sql(ref, self.columns, self.keys, where, window)
            settings = {**INSERT_SETTINGS, "query_id": chunk_id(query_id, number)}

            def statement(sql: str = sql, settings: dict = settings) -> None:
                client.command(sql, parameters=params, settings=settings)

            def unchanged(before: int = before, counted: str = counted) -> bool:
                return int(client.query(counted, parameters=params).result_rows[0][0]) == before

            what = f"{ref.fqn}: insert {number}/{len(runs)} of the batch"
            if self.pacer.rules.enabled:
                oldest, newest = client.query(span_sql(tcol, where), parameters=params).result_rows[0]
                partitions = self.written(client, oldest, newest)
            else:
                partitions = None
            self.pacer.run(what, statement, watch=self.watch, partitions=partitions, unchanged=unchanged)
            inserted += int(client.query(counted, parameters=params).result_rows[0][0]) - before
            if number < len(runs):  # where a later insert that gives up leaves the load
                end = client.query(newest_sql(tcol, where), parameters=params)
                self.done = (inserted, end.result_rows[0][0])
        return inserted, (stats[1] if stats[0] else None), (stats[2] if stats[0] else None)

    def written(self, client, oldest: datetime | None, newest: datetime | None) -> dict[ObjectRef, list[str]] | None:
        """The partitions (``partition_id``) of each table the insert writes that rows of event time
        ``[oldest, newest]`` go to: the source's, each target's by its partition windows (as far as its MVs move a row
        past a window, :func:`~chmv_assets.ddl.partitioning.target_reach`; a week more further down a chain). A table
        whose partitions do not follow a time window (a key part, none) is left out: all of its partitions count."""
        zone = server_zone(client)
        since, until = wall(oldest, zone), wall(newest, zone)
        if since is None or until is None:
            return None
        project, source = self.loaded.project, self.table.ref
        first = datetime.strptime(self.loaded.config.partition_start, "%Y-%m-%d")
        values: list[tuple[ObjectRef, str]] = []
        for ref in self.watch:
            table = project.table(ref)
            if table is None:
                continue
            scheme = self.loaded.partitioning(ref)
            if ref == source:
                margin = timedelta(0)
            elif any(v.trigger == source for v in project.views_into(ref)):
                margin = target_reach(project, ref, scheme, source)
            else:
                margin = timedelta(days=7) + target_reach(project, ref, scheme)
            windows = windows_covering(self.loaded, ref, since - margin, until)
            if since - margin < first or not windows or any(w is None for w in windows):  # windows chmv cannot name
                continue
            for window in windows:
                value = partition_tuple(table, scheme, window, zone=session_zone(client))
                if value != "tuple()":
                    values.append((ref, f"partitionId{value.removeprefix('tuple')}"))
        if not values:
            return None
        ids = client.query("SELECT [" + ", ".join(v for _, v in values) + "]").result_rows[0][0]
        written: dict[ObjectRef, list[str]] = {}
        for (ref, _), pid in zip(values, ids, strict=True):
            written.setdefault(ref, []).append(str(pid))
        return written


def hourly(loaded: LoadedProject, tables: list[ObjectRef]) -> bool:
    """Whether a partition of one of ``tables`` may hold less than a day: partitioned by windows shorter than a day,
    or by anything else than time windows alone (a key part: then an hour is the safe unit), as its partitioning says
    (:meth:`~chmv_assets.ddl.loader.LoadedProject.partitioning`)."""
    for ref in tables:
        partitioning = loaded.partitioning(ref)
        if not partitioning.partitioned:
            continue
        if partitioning.grain is None or partitioning.keyed or partitioning.grain.order < Grain.DAY.order:
            return True
    return False
