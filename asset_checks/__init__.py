"""Asset checks of chmv: parity, part-count growth, drift, lint.

The check logic (a client in, plain results out, no Dagster) is in ``parity``, ``parts``, ``drift`` and
``lint``; the Dagster check definitions are in ``asset_checks.definitions`` (part counts, lint) and
``asset_checks.inline`` (parity and drift: they gate downstream assets, so they are declared on the
target ops themselves and evaluated right after each target's materialization).
"""
