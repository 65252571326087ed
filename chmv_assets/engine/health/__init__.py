"""Watching what is deployed: the checks' logic (parity, part counts, schema drift, lint and their verdicts), server
health, staleness, the parity sweep's choice, recovery, maintenance."""
