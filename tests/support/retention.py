"""Helpers of the retention tests: the example project with a TTL on a source, and sources that lose old rows."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.sql.quoting import qualified

from support.paths import EXAMPLE_DDL

RAW_EVENTS, EVENTS_AGG = (
    ObjectRef(database="analytics", name="raw_events"),
    ObjectRef(database="analytics", name="events_agg"),
)
EVENTS_DAILY = ObjectRef(database="analytics", name="events_daily")
AUGUST, SEPTEMBER = window_at(datetime(2026, 8, 1), "month"), window_at(datetime(2026, 9, 1), "month")
#: What each way of losing old source rows does to analytics.raw_events (the demo data starts 2026-08-01).
RETENTION = {
    "drop_partition": "ALTER TABLE analytics.raw_events DROP PARTITION 202608",
    "delete": "ALTER TABLE analytics.raw_events DELETE WHERE timestamp < '2026-08-10 00:00:00'",
    "lightweight_delete": "DELETE FROM analytics.raw_events WHERE timestamp < '2026-08-10 00:00:00'",
    "ttl": "OPTIMIZE TABLE analytics.raw_events FINAL",  # applies the TTL of ttl_project
}


def ttl_back_to(column: str, moment: datetime) -> str:
    """``TTL column + INTERVAL n MINUTE`` that deletes rows before ``moment`` (to the minute) when applied now."""
    minutes = int((datetime.now(UTC).replace(tzinfo=None) - moment).total_seconds() // 60)
    return f"TTL {column} + INTERVAL {minutes} MINUTE"


def ddl_with_ttl(tmp_path: Path, source_file: str, order_by: str, ttl: str) -> Path:
    """A copy of the example DDL whose source table (the statement ending with ``order_by``) has ``ttl``."""
    ddl = tmp_path / "ddl"
    shutil.copytree(EXAMPLE_DDL, ddl)
    path = ddl / source_file
    text = path.read_text(encoding="utf-8")
    assert order_by in text
    path.write_text(text.replace(order_by, f"{order_by.rstrip(';')}\n{ttl};", 1), encoding="utf-8")
    return ddl


def raw_events_ttl_project(tmp_path: Path, ttl: str | None = None) -> LoadedProject:
    """The example project with a TTL on analytics.raw_events (default: deleting rows before about 2026-08-10)."""
    ttl = ttl or ttl_back_to("timestamp", datetime(2026, 8, 10))
    return load(ddl_with_ttl(tmp_path, "60_raw_events.sql", "ORDER BY (event_type, timestamp);", ttl))


def count(client, table: ObjectRef, where: str = "") -> int:
    return int(client.command(f"SELECT count() FROM {qualified(table)}" + (f" WHERE {where}" if where else "")))
