"""Engine operations: functions that take a clickhouse-connect Client (apply, rebuild, gates, watermarks, staleness, recovery); no Dagster."""
