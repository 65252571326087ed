"""Dagster side of the Spark pipeline: one daily-partitioned ingestion asset per source table."""

import os
import sys
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AssetSelection,
    BackfillPolicy,
    Definitions,
    MaterializeResult,
    TimeWindowPartitionsDefinition,
    define_asset_job,
    multi_asset,
)
from dagster_pyspark import LazyPySparkResource

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.landing import ingested_sources, landing_dir
from chmv_assets.engine.loads.load import ingest
from chmv_assets.orchestration.partitions import partitions_definition
from chmv_assets.orchestration.run_logs import forward_engine_logs
from chmv_assets.orchestration.translator import ChmvTranslator, daily_partitioning
from resources.clickhouse import CLICKHOUSE_POOL, ClickHouseResource
from spark.session import session_of, spark_conf
from spark.staging import SparkStager

#: Name of the ingestion job (every source; select assets to load some).
INGEST_JOB = "chmv_ingest"


def ingestion_partitions(loaded: LoadedProject) -> TimeWindowPartitionsDefinition:
    """One partition per landing-zone arrival day (``date=YYYY-MM-DD`` folders): the daily targets' definition."""
    daily = partitions_definition(daily_partitioning(loaded))
    assert isinstance(daily, TimeWindowPartitionsDefinition)
    return daily


def build_ingestion_asset(loaded: LoadedProject, ref: ObjectRef, translator: ChmvTranslator) -> AssetsDefinition:
    """The source table as an asset: materializing day D loads the files that arrived on D (past the watermark)."""
    base = translator.get_asset_spec(loaded, ref)
    spec = base.replace_attributes(
        partitions_def=ingestion_partitions(loaded),
        kinds={"spark", "clickhouse", "table"},
        description=(base.description or "")
        + "\n\nLoaded from the landing zone by Spark: rows newer than the watermark minus the late tolerance, "
        "deduplicated by key, inserted once per batch (idempotent), watermark advanced after the insert.",
    )

    @multi_asset(
        specs=[spec],
        name=f"ingest_{'__'.join(spec.key.path)}",
        backfill_policy=BackfillPolicy.single_run(),
        pool=CLICKHOUSE_POOL,
        required_resource_keys={"clickhouse", "pyspark"},
    )
    def _ingest(context: AssetExecutionContext) -> MaterializeResult:
        clickhouse: ClickHouseResource = context.resources.clickhouse
        days = set(context.partition_keys) if context.has_partition_key else None
        with forward_engine_logs(context):
            result = ingest(
                SparkStager(session_of(context.resources.pyspark)),
                clickhouse,
                loaded,
                ref,
                root=landing_dir(loaded),
                days=days,
            )
        return MaterializeResult(
            asset_key=spec.key,
            metadata={
                "chmv/batch_id": result.batch_id,
                "chmv/files": result.files,
                "chmv/rows_read": result.rows_read,
                "chmv/rows_staged": result.rows_staged,
                "chmv/rows_inserted": result.rows_inserted,
                "chmv/duplicates_dropped": result.rows_read - result.rows_staged,
                "chmv/watermark_before": str(result.watermark_before),
                "chmv/watermark_after": str(result.watermark_after),
                "chmv/lower_bound": str(result.lower_bound),
                "chmv/repaired_partitions": ", ".join(result.repaired) or "none",
                "chmv/seconds": round(result.seconds, 3),
            },
        )

    return _ingest


def pyspark_resource(master: str | None = None, extra: dict[str, Any] | None = None) -> LazyPySparkResource:
    """dagster-pyspark's lazy resource with chmv's settings: no JVM starts until an asset needs Spark."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return LazyPySparkResource(spark_config=spark_conf(master, extra))


def build_spark_definitions(loaded: LoadedProject, translator: ChmvTranslator) -> Definitions:
    """Ingestion assets (one per source with an event-time column), the ingestion job and the ``pyspark`` resource.

    Empty when no landing zone is configured (``[ingestion] landing_dir``, ``$CHMV_LANDING_DIR`` or an
    existing ``<state dir>/landing``): the sources then stay external assets and targets rebuild in
    ClickHouse only.
    """
    sources = ingested_sources(loaded)
    if not sources:
        return Definitions()
    assets = [build_ingestion_asset(loaded, ref, translator) for ref in sources]
    job = define_asset_job(
        INGEST_JOB,
        selection=AssetSelection.assets(*[a.key for a in assets]),
        partitions_def=ingestion_partitions(loaded),
        description="Load the landing zone into the source tables (Spark), firing the live MVs.",
    )
    return Definitions(assets=assets, jobs=[job], resources={"pyspark": pyspark_resource()})
