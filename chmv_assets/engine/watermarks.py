"""Ingestion watermarks in ``chmv_meta.ingestion_watermarks``: how far the landing zone's loads into a source have got,
advanced only after their insert committed.

One record per change of a source's watermark (:mod:`chmv_assets.engine.records`: the highest version wins). A load
writes two: ``loading`` (its intent, the watermark unchanged) before it inserts, and ``committed`` (the advanced
watermark) after the insert returned. A run that finds ``loading`` as the latest record knows the previous load died
during its insert and repairs before moving on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine import records
from chmv_assets.sql.meta import INGESTION_WATERMARKS

LOADING = "loading"
COMMITTED = "committed"


@dataclass(frozen=True)
class Watermark:
    """The latest record of one source's ingestion watermark.

    Attributes:
        source: The source table the landing zone loads into.
        last_processed_ts: Newest event time loaded (naive UTC), None if nothing was loaded yet.
        batch_id: The load that wrote this record.
        status: ``loading`` (a load was under way and did not commit) or ``committed``.
        rows: Rows the load inserted.
        version: Monotonic per source; the highest wins.
    """

    source: ObjectRef
    last_processed_ts: datetime | None
    batch_id: str
    status: str
    rows: int
    version: int

    @property
    def interrupted(self) -> bool:
        """True when the last load wrote its intent but never committed (it died during the insert)."""
        return self.status == LOADING


def read_watermark(client: Client, source: ObjectRef) -> Watermark | None:
    """The latest record of ``source``'s watermark, or None if there is none."""
    found = records.latest(client, INGESTION_WATERMARKS, {"source": source.fqn})
    if found is None:
        return None
    return Watermark(source, found["watermark"], found["batch_id"], found["status"], int(found["rows"]), found.version)


def read_watermarks(client: Client) -> dict[str, datetime | None]:
    """Every source's latest watermark, by the source's ``database.name`` (one query)."""
    return {r["source"]: r["watermark"] for r in records.current(client, INGESTION_WATERMARKS)}


def write_watermark(
    client: Client,
    source: ObjectRef,
    *,
    last_processed_ts: datetime | None,
    batch_id: str,
    status: str,
    rows: int = 0,
    previous: Watermark | None = None,
) -> Watermark:
    """Append a record of ``source``'s watermark with a version above ``previous`` (and above the clock)."""
    values = {
        "source": source.fqn,
        "watermark": last_processed_ts,
        "batch_id": batch_id,
        "status": status,
        "rows": rows,
    }
    version = records.append(client, INGESTION_WATERMARKS, values, after=previous.version if previous else 0)
    return Watermark(source, last_processed_ts, batch_id, status, rows, version)


def begin_load(client: Client, source: ObjectRef, batch_id: str, previous: Watermark | None) -> Watermark:
    """Record the intent of a load (the watermark does not move)."""
    return write_watermark(
        client,
        source,
        last_processed_ts=previous.last_processed_ts if previous else None,
        batch_id=batch_id,
        status=LOADING,
        previous=previous,
    )


def commit_load(
    client: Client,
    source: ObjectRef,
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
        source,
        last_processed_ts=max(candidates) if candidates else None,
        batch_id=batch_id,
        status=COMMITTED,
        rows=rows,
        previous=previous,
    )
