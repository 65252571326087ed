"""Watermarks in ``chmv_meta.watermarks``: how far a load has got, advanced only after its insert committed.

The table (created by ``chmv apply``) is a ``ReplacingMergeTree(version)`` keyed by
``(source_id, target_table)``: every change is a new row with a higher version, and readers take the
row with the highest version, so a half-merged table never shows an older state.

A load writes two records: ``loading`` (its intent, the watermark unchanged) before it inserts, and
``committed`` (the advanced watermark) after the insert returned. A run that finds ``loading`` as the
latest record knows the previous load died during its insert and repairs before moving on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

from chmv_assets.sql.meta import WATERMARKS
from chmv_assets.sql.quoting import qualified
from chmv_assets.sql.time_sql import UTC_INSTANT, time_sql

#: Stored as ``last_processed_ts`` when nothing has been processed yet (the column is not Nullable).
EPOCH = datetime(1970, 1, 1)
LOADING = "loading"
COMMITTED = "committed"


@dataclass(frozen=True)
class Watermark:
    """The latest record of one ``(source_id, target_table)`` pair.

    Attributes:
        last_processed_ts: Newest event time loaded (naive UTC), None if nothing was loaded yet.
        batch_id: The load that wrote this record.
        status: ``loading`` (a load was under way and did not commit) or ``committed``.
        rows: Rows the load inserted.
        version: Monotonic per pair; the highest wins.
    """

    source_id: str
    target_table: str
    last_processed_ts: datetime | None
    batch_id: str
    status: str
    rows: int
    version: int

    @property
    def interrupted(self) -> bool:
        """True when the last load wrote its intent but never committed (it died during the insert)."""
        return self.status == LOADING


def _naive_utc(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def read_watermark(client: Client, source_id: str, target_table: str) -> Watermark | None:
    """The record with the highest version for the pair, or None if there is none."""
    rows = client.query(
        f"SELECT last_processed_ts, batch_id, status, rows, version FROM {qualified(WATERMARKS)} "
        "WHERE source_id = {source:String} AND target_table = {target:String} ORDER BY version DESC LIMIT 1",
        parameters={"source": source_id, "target": target_table},
    ).result_rows
    if not rows:
        return None
    ts, batch_id, status, count, version = rows[0]
    ts = _naive_utc(ts)
    return Watermark(source_id, target_table, None if ts <= EPOCH else ts, batch_id, status, int(count), int(version))


def write_watermark(
    client: Client,
    source_id: str,
    target_table: str,
    *,
    last_processed_ts: datetime | None,
    batch_id: str,
    status: str,
    rows: int = 0,
    previous: Watermark | None = None,
) -> Watermark:
    """Append a record with a version above ``previous`` (and above the clock, so versions never go back)."""
    version = max(time.time_ns(), (previous.version + 1) if previous else 0)
    ts = _naive_utc(last_processed_ts) if last_processed_ts else EPOCH
    client.command(
        f"INSERT INTO {qualified(WATERMARKS)} "
        "(source_id, target_table, last_processed_ts, batch_id, status, rows, version) VALUES "
        f"({{source:String}}, {{target:String}}, {time_sql(ts.replace(tzinfo=UTC), UTC_INSTANT)}, {{batch:String}}, "
        "{status:String}, {rows:UInt64}, {version:UInt64})",
        parameters={
            "source": source_id,
            "target": target_table,
            "batch": batch_id,
            "status": status,
            "rows": rows,
            "version": version,
        },
        settings={"insert_deduplicate": 0},
    )
    return Watermark(source_id, target_table, last_processed_ts, batch_id, status, rows, version)


def begin_load(
    client: Client, source_id: str, target_table: str, batch_id: str, previous: Watermark | None
) -> Watermark:
    """Record the intent of a load (the watermark does not move)."""
    return write_watermark(
        client,
        source_id,
        target_table,
        last_processed_ts=previous.last_processed_ts if previous else None,
        batch_id=batch_id,
        status=LOADING,
        previous=previous,
    )


def commit_load(
    client: Client,
    source_id: str,
    target_table: str,
    batch_id: str,
    *,
    newest: datetime | None,
    rows: int,
    previous: Watermark | None,
) -> Watermark:
    """Advance the watermark to ``newest`` (never backwards) once the load's insert has committed."""
    before = previous.last_processed_ts if previous else None
    candidates = [t for t in (before, newest) if t is not None]
    return write_watermark(
        client,
        source_id,
        target_table,
        last_processed_ts=max(candidates) if candidates else None,
        batch_id=batch_id,
        status=COMMITTED,
        rows=rows,
        previous=previous,
    )
