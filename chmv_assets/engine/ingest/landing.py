"""The landing zone: Parquet files by source and arrival time, found and checked before Spark reads them.

Layout (as ``chmv_assets.demo_data.write_landing_zone`` and a lake loader write it)::

    <root>/<db.table>/date=YYYY-MM-DD/hour=HH.parquet      # rows that ARRIVED in that hour

A row never arrives before its event time, so the rows with event time ``> t`` are all in files
that arrived at or after ``t``'s hour; files are pruned by path before anything is opened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from chmv_assets import settings
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import Column, ObjectRef, Table
from chmv_assets.errors import LandingZoneError

_DATE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_HOUR = re.compile(r"^hour=(\d{1,2})")


@dataclass(frozen=True)
class LandingFile:
    """One Parquet file and the hour it arrived in (None when its name has no ``hour=``)."""

    path: str
    day: datetime
    hour: datetime | None

    @property
    def first_arrival(self) -> datetime:
        return self.hour or self.day

    @property
    def last_arrival(self) -> datetime:
        return (self.hour + timedelta(hours=1)) if self.hour else self.day + timedelta(days=1)


def landing_dir(loaded: LoadedProject) -> Path | None:
    """``ingestion.landing_dir``, else ``$CHMV_LANDING_DIR``, else ``<state dir>/landing`` if it exists."""
    configured = loaded.config.ingestion.landing_dir or settings.landing_dir()
    if configured:
        path = Path(configured)
        if not path.is_absolute():
            path = Path(loaded.config.ddl_dir) / path
        return path.resolve()
    fallback = settings.state_dir() / "landing"
    return fallback if fallback.is_dir() else None


def ingestible_sources(loaded: LoadedProject) -> list[ObjectRef]:
    """Source tables that have an event-time column configured and are defined in the DDL."""
    return list(loaded.time_columns)


def time_column(loaded: LoadedProject, source: ObjectRef) -> str:
    """The configured event-time column of ``source``.

    Raises:
        LandingZoneError: No ``[ingestion.time_columns]`` entry for it.
    """
    column = loaded.config.ingestion.time_columns.get(source.fqn)
    if column is None:
        raise LandingZoneError(
            f"{source.fqn} has no event-time column: add it under [ingestion.time_columns] in chmv.toml"
        )
    return column


def list_files(
    root: Path,
    source: ObjectRef,
    *,
    arrived_after: datetime | None = None,
    arrived_before: datetime | None = None,
    days: set[str] | None = None,
) -> list[LandingFile]:
    """Files of ``source`` whose arrival hour can hold rows arriving in ``[arrived_after, arrived_before)``.

    Args:
        days: Only these ``YYYY-MM-DD`` folders (the ingestion asset's partitions).
    """
    folder = root / source.fqn
    if not folder.is_dir():
        return []
    files = []
    for day_dir in sorted(folder.iterdir()):
        match = _DATE.match(day_dir.name)
        if not match or not day_dir.is_dir() or (days is not None and match.group(1) not in days):
            continue
        try:
            day = datetime.strptime(match.group(1), "%Y-%m-%d")
        except ValueError as err:
            raise LandingZoneError(
                f"{day_dir}: not a calendar date ({err}); rename the folder to the day its files "
                "arrived (date=YYYY-MM-DD) or move it out of the landing zone"
            ) from err
        for path in sorted(day_dir.glob("*.parquet")):
            hour_match = _HOUR.match(path.name)
            if hour_match and int(hour_match.group(1)) > 23:
                raise LandingZoneError(
                    f"{path}: hour={hour_match.group(1)} is not an hour of the day (00-23); "
                    "rename the file to the hour it arrived"
                )
            hour = day + timedelta(hours=int(hour_match.group(1))) if hour_match else None
            item = LandingFile(str(path), day, hour)
            if arrived_after is not None and item.last_arrival <= arrived_after:
                continue
            if arrived_before is not None and item.first_arrival >= arrived_before:
                continue
            files.append(item)
    return files


def insertable_columns(table: Table) -> list[Column]:
    """Columns an INSERT may name (not MATERIALIZED/ALIAS)."""
    return [c for c in table.columns if c.default_kind not in ("MATERIALIZED", "ALIAS")]


_COMPATIBLE = {
    "int": (pa.types.is_integer, pa.types.is_decimal),
    "float": (pa.types.is_floating, pa.types.is_integer, pa.types.is_decimal),
    "string": (
        pa.types.is_string,
        pa.types.is_large_string,
        pa.types.is_binary,
        pa.types.is_large_binary,
        pa.types.is_dictionary,
    ),
    "time": (pa.types.is_timestamp, pa.types.is_date),
}


def _family(column: Column) -> str | None:
    """Which Arrow types a column of this ClickHouse type accepts (a key of ``_COMPATIBLE``)."""
    parsed = column.data_type
    if parsed.is_integer:
        return "int"
    if parsed.is_float or parsed.is_decimal:
        return "float"
    if parsed.is_string:
        return "string"
    if parsed.is_time:
        return "time"
    return None


def check_files(files: list[LandingFile], table: Table) -> tuple[list[str], int]:
    """Read every file's footer and check it against the source table; return the columns to load and rows.

    Raises:
        LandingZoneError: A file is not readable Parquet, lacks a column the table needs, or has a
            column whose type cannot be converted; the message names the file.
    """
    columns = insertable_columns(table)
    names: list[str] | None = None
    total = 0
    for item in files:
        try:
            meta = pq.read_metadata(item.path)
            schema = meta.schema.to_arrow_schema()
        except (OSError, pa.ArrowException) as err:
            raise LandingZoneError(
                f"{item.path}: not a readable Parquet file ({err}); move it out of the landing "
                "zone or re-deliver it, then re-run the load"
            ) from err
        present = []
        for column in columns:
            if column.name not in schema.names:
                if column.default_kind is None:
                    raise LandingZoneError(
                        f"{item.path}: column {column.name!r} ({column.type}) of {table.ref.fqn} "
                        f"is missing (file has {', '.join(schema.names)}); fix the file's schema"
                    )
                continue
            family = _family(column)
            arrow_type = schema.field(column.name).type
            if family and not any(check(arrow_type) for check in _COMPATIBLE[family]):
                raise LandingZoneError(
                    f"{item.path}: column {column.name!r} is {arrow_type}, which does not convert "
                    f"to {column.type} of {table.ref.fqn}; fix the file's schema"
                )
            present.append(column.name)
        if names is None:
            names = present
        elif present != names:
            raise LandingZoneError(
                f"{item.path}: has columns {present}, other files of the load have {names}; "
                "re-deliver it with the same schema"
            )
        total += meta.num_rows
    return names or [c.name for c in columns], total


def ingested_sources(loaded: LoadedProject) -> list[ObjectRef]:
    """Sources materialized by a Spark ingestion asset: ingestible ones, when a landing zone is configured."""
    return ingestible_sources(loaded) if loaded.time_columns and landing_dir(loaded) is not None else []


def is_ingested(loaded: LoadedProject, source: ObjectRef) -> bool:
    """``source`` is among :func:`ingested_sources` (the landing zone is looked up only for an ingestible source)."""
    return source in loaded.time_columns and landing_dir(loaded) is not None


def dedup_keys(loaded: LoadedProject, source: ObjectRef, columns: list[str]) -> list[str]:
    """The configured dedup key of ``source`` (default: every loaded column)."""
    keys = loaded.config.ingestion.dedup_keys.get(source.fqn) or list(columns)
    missing = [k for k in keys if k not in columns]
    if missing:
        raise LandingZoneError(
            f"dedup key {missing} of {source.fqn} is not among the loaded columns {columns}; "
            "fix [ingestion.dedup_keys] in chmv.toml"
        )
    return keys
