"""Asset checks of chmv, the Dagster side: parity, part-count growth, drift, lint, server health.

The check logic (a client in, plain results out, no Dagster) is in the engine's health room:
``chmv_assets.engine.health`` (``parity``, ``part_counts``, ``schema_drift``, ``lint``, their ``verdicts``; the fix of
a drifting target is ``chmv_assets.engine.lifecycle.drift_fix``). Here are the Dagster check definitions:
``asset_checks.definitions`` (part counts, lint), ``asset_checks.health_checks`` (server health) and
``asset_checks.inline`` (parity and drift: they gate downstream assets, so they are declared on the target ops
themselves and evaluated right after each target's materialization); the check names are ``asset_checks.names``.
"""
