"""Dagster side of the Spark pipeline: one daily-partitioned ingestion asset per source table."""


from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    BackfillPolicy,
    DailyPartitionsDefinition,
    MaterializeResult,
    multi_asset,
)

from chmv_assets.assets import CLICKHOUSE_POOL
from chmv_assets.loader import LoadedProject
from chmv_assets.models import ObjectRef
from chmv_assets.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource
from spark.ingest import ingest
from spark.landing import landing_dir
from spark.session import session_of

#: Name of the ingestion job (every source; select assets to load some).
INGEST_JOB = "chmv_ingest"


def ingestion_partitions(loaded: LoadedProject) -> DailyPartitionsDefinition:
    """One partition per landing-zone arrival day (``date=YYYY-MM-DD`` folders)."""
    return DailyPartitionsDefinition(start_date=loaded.config.partition_start, timezone=loaded.config.timezone,
                                     end_offset=1)  # fmt: skip


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
        result = ingest(session_of(context.resources.pyspark), clickhouse, loaded, ref, root=landing_dir(loaded),
                        days=days, log=context.log.info)  # fmt: skip
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
