"""The landing zone read by ClickHouse itself (``file()``), for checks that compare a target with the lake.

A Spark rebuild of a partition reads the trigger's landing rows up to the ingestion cutoff (deduplicated by
the ingestion keys) and the source table's rows after it. :func:`lake_relation` builds the same relation
as one ClickHouse subquery, read-only (the watermark is read, never established), so parity can check a
partition the source no longer holds against the truth the rebuild would use, without Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import window_instant
from chmv_assets.engine.clock import session_zone
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.ingest import staging_area as staging
from chmv_assets.engine.ingest.cutoff import cutoff_of
from chmv_assets.engine.watermarks import read_watermark
from chmv_assets.sql.quoting import quote
from chmv_assets.sql.rebuild_sql import staged_relation
from chmv_assets.sql.time_sql import UTC_INSTANT, column_zone, time_sql


@dataclass(frozen=True)
class LakeRelation:
    """A relation standing in for a trigger table: landing rows <= cutoff ∪ table rows > cutoff.

    Attributes:
        sql: The parenthesized subquery.
        files: Landing files it reads.
        cutoff: The ingestion cutoff (None: no watermark yet, the landing zone alone).
    """

    sql: str
    files: int
    cutoff: datetime | None

    def describe(self, source: ObjectRef) -> str:
        split = f"<= {self.cutoff:%Y-%m-%d %H:%M:%S}, the table's after it" if self.cutoff else "all of them"
        return f"{source.fqn}: {self.files} landing files (rows {split})"


def lake_relation(
    client: Client, loaded: LoadedProject, source: ObjectRef, lo: datetime, hi: datetime, root: Path
) -> LakeRelation | None:
    """The lake's rows of ``source`` with event time in ``[lo, hi)``, as the rebuild would read them.

    Returns None when the landing zone has no file that can hold such rows.
    """
    table = loaded.project.table(source)
    if table is None:
        return None
    lateness = timedelta(minutes=loaded.config.ingestion.max_lateness_minutes)
    # the landing zone's times are naive wall clocks; [lo, hi) may be a window's bounds (instants)
    wall_lo, wall_hi = lo.replace(tzinfo=None), hi.replace(tzinfo=None)
    files = landing.list_files(root, source, arrived_after=wall_lo, arrived_before=wall_hi + lateness)
    if not files:
        return None
    columns, _rows = landing.check_files(files, table)
    keys = landing.dedup_keys(loaded, source, columns)
    tcol = landing.time_column(loaded, source)
    column = table.column(tcol)
    tolerance = loaded.config.ingestion.late_tolerance_minutes
    cutoff = cutoff_of(read_watermark(client, source), tolerance)
    days = sorted({f.day for f in files})
    # Day folders are ``date=YYYY-MM-DD``: brace alternatives of digits and dashes only.
    folder = f"date={days[0]:%Y-%m-%d}" if len(days) == 1 else "date={" + ",".join(f"{d:%Y-%m-%d}" for d in days) + "}"
    glob = str(root / source.fqn / folder / "*.parquet")
    type_sql = column.type if column else "DateTime"
    zone = session_zone(client)  # a naive [lo, hi) is the session's wall clock; the cutoff a UTC instant
    own = column_zone(type_sql, zone)
    low, high = (time_sql(window_instant(t, own), type_sql, zone) for t in (lo, hi))
    bounds = [f"{quote(tcol)} >= {low}", f"{quote(tcol)} < {high}"]
    if cutoff is not None:
        bounds.append(f"{quote(tcol)} <= {time_sql(cutoff.replace(tzinfo=UTC), UTC_INSTANT)}")
    cols = ", ".join(quote(c) for c in columns)
    lake = (
        f"(SELECT {cols} FROM {staging.file_relation(glob, table, columns)} WHERE {' AND '.join(bounds)} "
        f"LIMIT 1 BY {', '.join(quote(k) for k in keys)})"
    )
    return LakeRelation(staged_relation(source, lake, columns, tcol, cutoff), len(files), cutoff)
