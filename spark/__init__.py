"""The PySpark side of chmv: landing-zone ingestion and partition backfills."""


from dagster import Definitions

from chmv_assets.loader import LoadedProject
from chmv_assets.translator import ChmvTranslator


def build_spark_definitions(loaded: LoadedProject, translator: ChmvTranslator) -> Definitions:
    """Ingestion assets (one per source with an event-time column), the ingestion job and the ``pyspark`` resource.

    Empty when no landing zone is configured (``[ingestion] landing_dir``, ``$CHMV_LANDING_DIR`` or an
    existing ``<state dir>/landing``): the sources then stay external assets and targets rebuild in
    ClickHouse only.
    """
    from dagster import AssetSelection, define_asset_job

    from spark.assets import INGEST_JOB, build_ingestion_asset, ingestion_partitions
    from spark.landing import ingested_sources
    from spark.session import pyspark_resource

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
