"""The staging area: Parquet folders that Spark writes and ClickHouse reads with ``file()`` (no Spark here).

Executors never open the embedded engine: they write Parquet to a staging folder; the driver then
runs one ClickHouse statement reading it (``file(path, Parquet, structure)``, typed with the source
table's own column types, so unsigned integers and timestamps land exactly as the source holds them).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
from clickhouse_connect.driver.binding import format_query_value

from chmv_assets import settings
from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import ObjectRef, Table
from chmv_assets.ddl.names import refs_slug
from chmv_assets.sql.quoting import quote

#: Column Spark adds to split a backfill's staging by window (``_chmv_p=YYYYMMDDHH``): the start of the UTC hour, day
#: or month of each row's event time (the landing zone's times are UTC; Spark's session is in UTC).
PARTITION_COLUMN = "_chmv_p"


def staging_root() -> Path:
    """Where staged rows go (:func:`chmv_assets.settings.staging_dir`: must be readable by ClickHouse)."""
    return settings.staging_dir()


def staging_dir(kind: str, refs: Sequence[ObjectRef], batch_id: str) -> Path:
    """A deterministic folder per load, so a killed run's leftovers are overwritten by its re-run.

    Args:
        kind: ``ingest`` or ``backfill``.
        refs: The objects the load is for (a source; a target and its source), named through ``refs_slug``
            so that distinct objects never share a folder.
        batch_id: The load's batch.
    """
    return staging_root() / kind / refs_slug(refs) / batch_id


def window_keys(start: datetime, end: datetime, grain: str) -> list[str]:
    """The folders a partition window ``[start, end)`` (instants, aware) reads: the key of every UTC window of ``grain``
    meeting it, as Spark's ``date_format(date_trunc(grain, ts), 'yyyyMMddHH')`` names the folder of a row (one for a
    UTC calendar; a New York day meets two UTC days, a Kolkata hour two UTC hours). The two 01:00 hours of a fall-back
    night are two UTC hours: each window reads its own folder."""
    unit = Grain(grain)
    low, high = start.astimezone(UTC).replace(tzinfo=None), end.astimezone(UTC).replace(tzinfo=None)
    cursor, keys = unit.floor(low), []
    while cursor < high:
        keys.append(f"{cursor:%Y%m%d%H}")
        cursor = unit.next_start(cursor)
    return keys


def ts_literal(value: datetime) -> str:
    """A Spark/ClickHouse literal string for a naive UTC time (formatted from a datetime, never user text)."""
    return f"{value:%Y-%m-%d %H:%M:%S.%f}"


def staged_rows(folder: Path) -> int:
    """Rows in a staging folder, from the Parquet footers (no data read)."""
    return sum(pq.read_metadata(p).num_rows for p in folder.rglob("*.parquet")) if folder.is_dir() else 0


def window_folders(folder: Path, keys: Sequence[str]) -> list[Path]:
    """The sub-folders of ``keys`` (:func:`window_keys`)."""
    return [folder / f"{PARTITION_COLUMN}={key}" for key in keys]


def staged_glob(folder: Path, keys: Sequence[str] | None = None) -> str:
    """The glob ClickHouse reads: the sub-folders of ``keys`` (a window's: :func:`window_keys`; one missing holds no
    row), or the folder itself."""
    if keys:
        alternatives = keys[0] if len(keys) == 1 else "{" + ",".join(keys) + "}"  # digits only: no glob escapes
        return str(folder / f"{PARTITION_COLUMN}={alternatives}" / "*.parquet")
    return str(folder / "*.parquet")


def structure(table: Table, columns: Sequence[str]) -> str:
    """``file()`` structure of the staged columns, typed like the source table."""
    types = {c.name: c.type for c in table.columns}
    return ", ".join(f"{quote(name)} {types[name]}" for name in columns)


def file_relation(glob: str, table: Table, columns: Sequence[str]) -> str:
    """``file('<glob>', Parquet, '<structure>')`` with both strings escaped as SQL literals."""
    return f"file({format_query_value(glob)}, Parquet, {format_query_value(structure(table, columns))})"


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
