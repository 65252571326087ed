"""A job over a chain split across two target ops, rebuilt for a child process (multi-process executor).

``tests/integration/asset_checks/test_inline.py`` runs it (as ``support.chain_split``) through ``build_reconstructable_job``: each step runs in its own
process with its own hash seed, as in ``dagster dev``, so a check op that Dagster splits into subsets
would show there (a check evaluated twice, another not at all).
"""

from __future__ import annotations

from dagster import AssetKey, AssetSelection, Definitions, JobDefinition, define_asset_job, multiprocess_executor

from chmv_assets.ddl.loader import load
from chmv_assets.orchestration.definitions import build_definitions
from resources.clickhouse import ClickHouseResource

JOB = "chain_split"
KEYS = (AssetKey(["chain", "t1"]), AssetKey(["chain", "t2"]))


def chain_split_job(ddl_dir: str, dsn: str) -> JobDefinition:
    """The job selecting both chain targets (and so their checks); daily partitioned like them."""
    loaded = load(ddl_dir)
    defs = Definitions.merge(
        build_definitions(loaded, clickhouse=ClickHouseResource(dsn=dsn)),
        # each step in its own process (the code location runs steps in-process on the embedded engine)
        Definitions(
            jobs=[define_asset_job(JOB, selection=AssetSelection.assets(*KEYS), executor_def=multiprocess_executor)]
        ),
    )
    return defs.resolve_job_def(JOB)
