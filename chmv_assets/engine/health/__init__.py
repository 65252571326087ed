"""Watching what is deployed: server health, staleness, the parity sweep's choice, recovery, maintenance."""
