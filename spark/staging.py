"""Spark reads, cleans and stages landing-zone rows as Parquet: the only job Spark does for chmv.

Executors never open the embedded engine: they write Parquet to a staging folder (chmv_assets.engine.ingest.staging_area)
that ClickHouse then reads with ``file()``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from chmv_assets.ddl.grains import Grain
from chmv_assets.engine.ingest.staging_area import PARTITION_COLUMN, ts_literal
from chmv_assets.errors import LandingZoneError

#: Parquet codec of staging files (read once by ClickHouse on the same host).
STAGING_CODEC = "lz4_raw"


def stage(
    spark,
    files: Sequence[str],
    columns: Sequence[str],
    time_column: str,
    keys: Sequence[str],
    out_dir: Path,
    *,
    after: datetime | None = None,
    at_or_before: datetime | None = None,
    since: datetime | None = None,
    before: datetime | None = None,
    partition_grain: str | None = None,
) -> None:
    """Read ``files``, keep the rows in the time bounds, drop duplicates by ``keys``, write Parquet.

    Args:
        after / at_or_before: ``time > after`` and ``time <= at_or_before`` (watermark and cutoff).
        since / before: ``time >= since`` and ``time < before`` (a backfill's range).
        partition_grain: ``hour``/``day``/``month``: write one sub-folder per UTC window of the time column (the
            session is in UTC; a partition window reads the folders it meets:
            :func:`chmv_assets.engine.ingest.staging_area.window_keys`).

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
            writer.write.mode("overwrite").option("compression", STAGING_CODEC).partitionBy(PARTITION_COLUMN).parquet(
                str(out_dir)
            )
        else:
            df.write.mode("overwrite").option("compression", STAGING_CODEC).parquet(str(out_dir))
    except Exception as err:  # pyspark raises Py4J/Spark exceptions whose type depends on where it failed
        text = str(err)
        named = next((f for f in files if f in text or os.path.basename(f) in text), None)
        if named is None and "FAILED_READ_FILE" not in text and "Parquet" not in text:
            raise
        where = named or "one of " + ", ".join(files[:5]) + ("…" if len(files) > 5 else "")
        first = text.strip().splitlines()[0][:500] if text.strip() else type(err).__name__
        raise LandingZoneError(
            f"{where}: Spark could not read it ({first}); move the file out of the landing "
            "zone or re-deliver it, then re-run the load"
        ) from err


def unsigned_64_columns(df, first_file: str) -> set[str]:
    """Columns Spark read as ``Decimal(20,0)`` because the Parquet column is UINT64 (checked in the footer)."""
    from pyspark.sql.types import DecimalType

    wide = {
        f.name
        for f in df.schema.fields
        if isinstance(f.dataType, DecimalType) and (f.dataType.precision, f.dataType.scale) == (20, 0)
    }
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


class SparkStager:
    """The Spark provider of staged rows for the rebuild executor; the session starts only when first needed.

    Args:
        spark: A SparkSession, or a zero-argument factory of one.
    """

    def __init__(self, spark: Any):
        self._spark = spark

    @property
    def session(self) -> Any:
        if callable(self._spark):
            self._spark = self._spark()
        return self._spark

    def __call__(
        self,
        files: Sequence[str],
        columns: Sequence[str],
        time_column: str,
        keys: Sequence[str],
        out_dir: Path,
        **bounds: Any,
    ) -> None:
        """Stage ``files`` into ``out_dir`` (see :func:`stage` for the bounds)."""
        stage(self.session, files, columns, time_column, keys, out_dir, **bounds)
