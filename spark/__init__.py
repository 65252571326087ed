"""The PySpark side of chmv: landing-zone ingestion and partition backfills."""

from __future__ import annotations

from dagster import Definitions

from chmv_assets.loader import LoadedProject
from chmv_assets.translator import ChmvTranslator


def build_spark_definitions(loaded: LoadedProject, translator: ChmvTranslator) -> Definitions:
    """Spark-backed assets and resources (filled in by the Spark issue)."""
    return Definitions()
