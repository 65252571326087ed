"""The Dagster layer: translator, partitions definitions, assets, sensors, jobs and the Definitions builder."""
