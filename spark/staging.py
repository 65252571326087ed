"""Spark reads, cleans and stages landing-zone rows as Parquet; ClickHouse reads the staging with file().

Executors never open the embedded engine: they write Parquet to a staging folder; the driver then
runs one ClickHouse statement reading it (``file(path, Parquet, structure)``, typed with the source
table's own column types, so unsigned integers and timestamps land exactly as the source holds them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from clickhouse_connect.driver.binding import format_query_value

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import ObjectRef, Table
from chmv_assets.ddl.names import refs_slug
from chmv_assets.errors import LandingZoneError
from chmv_assets.sql.quoting import quote
from resources.state import default_state_dir

#: Environment variable for the staging root (must be readable by ClickHouse; default: <state dir>/staging).
STAGING_ENV = "CHMV_STAGING_DIR"
#: Column Spark adds to split a backfill's staging by target partition (``_chmv_p=YYYYMMDDHH``).
PARTITION_COLUMN = "_chmv_p"
#: Parquet codec of staging files (read once by ClickHouse on the same host).
STAGING_CODEC = "lz4_raw"


def staging_root() -> Path:
    return Path(os.environ.get(STAGING_ENV) or default_state_dir() / "staging").resolve()


def staging_dir(kind: str, refs: Sequence[ObjectRef], batch_id: str) -> Path:
    """A deterministic folder per load, so a killed run's leftovers are overwritten by its re-run.

    Args:
        kind: ``ingest`` or ``backfill``.
        refs: The objects the load is for (a source; a target and its source), named through ``refs_slug``
            so that distinct objects never share a folder.
        batch_id: The load's batch.
    """
    return staging_root() / kind / refs_slug(refs) / batch_id


def window_key(start: datetime) -> str:
    """Folder key of a partition window, as Spark's ``date_format(…, 'yyyyMMddHH')`` writes it."""
    return f"{start:%Y%m%d%H}"


def ts_literal(value: datetime) -> str:
    """A Spark/ClickHouse literal string for a naive UTC time (formatted from a datetime, never user text)."""
    return f"{value:%Y-%m-%d %H:%M:%S.%f}"


def stage(spark, files: Sequence[str], columns: Sequence[str], time_column: str, keys: Sequence[str],
          out_dir: Path, *, after: datetime | None = None, at_or_before: datetime | None = None,
          since: datetime | None = None, before: datetime | None = None,
          partition_grain: str | None = None) -> None:  # fmt: skip
    """Read ``files``, keep the rows in the time bounds, drop duplicates by ``keys``, write Parquet.

    Args:
        after / at_or_before: ``time > after`` and ``time <= at_or_before`` (watermark and cutoff).
        since / before: ``time >= since`` and ``time < before`` (a backfill's range).
        partition_grain: ``hour``/``day``/``month``: write one sub-folder per window of the time column.

    Raises:
        LandingZoneError: Spark could not read a file (corrupt data pages); the message names it.
    """
    from pyspark.sql import functions as F

    try:
        df = spark.read.parquet(*files).select(*[F.col(quote_spark(c)) for c in columns])
        unsigned = unsigned_64_columns(df, files[0])
        # Spark reads Parquet UINT64 as Decimal(20,0): hashing, shuffling and writing it goes through
        # BigDecimal. The same bits as a signed long dedup identically and ClickHouse's file() reads the
        # Int64 back into the UInt64 structure bit for bit, so stage them as longs (2x faster dedup).
        df = df.select(*[_as_signed_long(c) if c in unsigned else F.col(quote_spark(c)) for c in columns])
        ts = F.col(quote_spark(time_column))
        for value, op in ((after, "gt"), (at_or_before, "le"), (since, "ge"), (before, "lt")):
            if value is None:
                continue
            lit = F.lit(ts_literal(value)).cast("timestamp")
            df = df.filter({"gt": ts > lit, "le": ts <= lit, "ge": ts >= lit, "lt": ts < lit}[op])
        df = df.dropDuplicates(list(keys)) if keys else df.dropDuplicates()
        # Staging is read once, locally, by ClickHouse: cheap lz4 beats snappy's CPU on 2 cores.
        if partition_grain is not None:
            unit = Grain(partition_grain)  # Spark's date_trunc units spell hour, day and month as chmv does
            writer = df.withColumn(PARTITION_COLUMN, F.date_format(F.date_trunc(unit.value, ts), "yyyyMMddHH"))
            writer.write.mode("overwrite").option("compression", STAGING_CODEC).partitionBy(PARTITION_COLUMN) \
                .parquet(str(out_dir))
        else:
            df.write.mode("overwrite").option("compression", STAGING_CODEC).parquet(str(out_dir))
    except Exception as err:  # pyspark raises Py4J/Spark exceptions whose type depends on where it failed
        text = str(err)
        named = next((f for f in files if f in text or os.path.basename(f) in text), None)
        if named is None and "FAILED_READ_FILE" not in text and "Parquet" not in text:
            raise
        where = named or "one of " + ", ".join(files[:5]) + ("…" if len(files) > 5 else "")
        first = text.strip().splitlines()[0][:500] if text.strip() else type(err).__name__
        raise LandingZoneError(f"{where}: Spark could not read it ({first}); move the file out of the landing "
                               "zone or re-deliver it, then re-run the load") from err  # fmt: skip


def unsigned_64_columns(df, first_file: str) -> set[str]:
    """Columns Spark read as ``Decimal(20,0)`` because the Parquet column is UINT64 (checked in the footer)."""
    from pyspark.sql.types import DecimalType

    wide = {f.name for f in df.schema.fields
            if isinstance(f.dataType, DecimalType) and (f.dataType.precision, f.dataType.scale) == (20, 0)}  # fmt: skip
    if not wide:
        return set()
    schema = pq.read_schema(first_file)
    return {n for n in wide if n in schema.names and pa.types.is_uint64(schema.field(n).type)}


def _as_signed_long(name: str):
    """UINT64 value ``v`` as the signed long with the same bits (``v - 2**64`` from ``2**63`` on)."""
    from pyspark.sql import functions as F

    col = F.col(quote_spark(name))
    wrapped = (col - F.lit(str(2**64)).cast("decimal(21,0)")).cast("long")
    return F.coalesce(F.expr(f"try_cast({quote_spark(name)} AS BIGINT)"), wrapped).alias(name)


def quote_spark(name: str) -> str:
    """Backtick a column name for Spark's column resolver (names with dots or spaces)."""
    return "`" + name.replace("`", "``") + "`"


def staged_rows(folder: Path) -> int:
    """Rows in a staging folder, from the Parquet footers (no data read)."""
    return sum(pq.read_metadata(p).num_rows for p in folder.rglob("*.parquet")) if folder.is_dir() else 0


def staged_glob(folder: Path, key: str | None = None) -> str:
    """The glob ClickHouse reads: one window's sub-folder, every sub-folder, or the folder itself."""
    if key is not None:
        return str(folder / f"{PARTITION_COLUMN}={key}" / "*.parquet")
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
