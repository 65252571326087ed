"""Asset checks of chmv: parity, part-count growth, drift, lint.

The check logic (a client in, plain results out, no Dagster) is in ``parity``, ``parts``, ``drift`` and
``lint``; the Dagster check definitions are in ``asset_checks.definitions``.
"""
