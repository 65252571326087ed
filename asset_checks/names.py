"""The names of chmv's asset checks (one ``AssetCheckKey`` name per check, on every target or source)."""

PARITY = "chmv_parity"
PARTS = "chmv_part_count"
DRIFT = "chmv_schema_drift"
LINT = "chmv_lint"
HEALTH = "chmv_health"
