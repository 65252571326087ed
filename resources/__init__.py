"""Resources of chmv: the ClickHouse resource (Dagster), the embedded-engine lock and the state directory."""
