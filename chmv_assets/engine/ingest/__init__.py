"""Ingestion from the landing zone: the cutoff, the landing zone, the staging area, the lake read by ClickHouse."""
