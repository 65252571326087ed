"""The SparkSession chmv uses (settings for a small machine); the dagster-pyspark resource is in spark.assets."""

from __future__ import annotations

import os
import sys
from typing import Any

from chmv_assets import settings


def spark_conf(master: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Settings for a small machine: few shuffle partitions, UTC, Parquet timestamps ClickHouse reads.

    Args:
        master: ``spark.master``; default ``$CHMV_SPARK_MASTER`` or ``local[*]``.
        extra: More settings, applied last.
    """
    conf: dict[str, Any] = {
        "spark.master": master or settings.spark_master(),
        "spark.app.name": "chmv",
        # 2 cores: a handful of shuffle partitions beats the default 200 by far on batches of this size.
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.sql.adaptive.enabled": "true",
        # Loads pass explicit file lists (hundreds to thousands of hourly files): list them on the driver
        # instead of a Spark job with one task per path (seconds on a cold JVM).
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.sources.partitionOverwriteMode": "static",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.driver.bindAddress": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "spark.driver.host": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "spark.executorEnv.PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    conf.update(extra or {})
    return conf


def get_spark_session(master: str | None = None, extra: dict[str, Any] | None = None):
    """Create (or reuse, when one is active) the SparkSession; PYSPARK_PYTHON defaults to this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in spark_conf(master, extra).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def session_of(resource: Any):
    """The SparkSession of a dagster-pyspark resource (lazy or eager), with chmv's log level."""
    session = resource.spark_session
    session.sparkContext.setLogLevel("ERROR")
    return session
