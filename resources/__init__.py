"""Dagster resources of chmv."""

from resources.clickhouse import ClickHouseResource, default_state_dir

__all__ = ["ClickHouseResource", "default_state_dir"]
