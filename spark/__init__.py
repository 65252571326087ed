"""The PySpark side of chmv: landing-zone ingestion and the staged rows of lake backfills (Dagster only in spark.assets)."""
