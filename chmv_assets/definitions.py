"""The chmv code location: assets, checks, sensors and resources for one DDL directory.

``dagster dev`` (workspace.yaml) and Dagster+ (dagster_cloud.yaml) load ``defs`` from this module.
The DDL directory comes from ``$CHMV_DDL_DIR`` (default: the example project); nothing here opens
ClickHouse, so loading the code location never contends for the embedded engine.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions, EnvVar, in_process_executor

from chmv_assets.assets import build_chmv_assets
from chmv_assets.jobs import build_jobs
from chmv_assets.loader import LoadedProject, gc_paused, load
from chmv_assets.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

EXAMPLE_DDL_DIR = Path(__file__).resolve().parents[1] / "examples" / "ddl"


def build_definitions(
    loaded: LoadedProject,
    *,
    clickhouse: ClickHouseResource | None = None,
    translator: ChmvTranslator | None = None,
) -> Definitions:
    """Assemble the code location for a parsed project.

    Args:
        loaded: The parsed DDL directory and its configuration.
        clickhouse: The resource; default: ``$CHMV_CLICKHOUSE_DSN`` or the embedded engine.
        translator: Hooks for asset keys, groups, partitions and metadata.
    """
    translator = translator or ChmvTranslator()
    clickhouse = clickhouse or default_clickhouse()
    with gc_paused():
        return _assemble(loaded, clickhouse, translator)


def _assemble(loaded: LoadedProject, clickhouse: ClickHouseResource, translator: ChmvTranslator) -> Definitions:
    from asset_checks import build_asset_checks
    from chmv_assets.sensors import build_sensors
    from spark import build_spark_definitions

    spark = build_spark_definitions(loaded, translator)
    return Definitions.merge(
        Definitions(
            assets=build_chmv_assets(loaded, translator),
            asset_checks=build_asset_checks(loaded, translator),
            sensors=build_sensors(loaded, translator),
            jobs=build_jobs(loaded),
            resources={"clickhouse": clickhouse},
            # The embedded engine serves one process at a time: steps in subprocesses would only queue for
            # it, each paying ~5 s of start-up (code location load); a run's steps execute in its process.
            executor=in_process_executor if clickhouse.is_embedded else None,
        ),
        spark,
    )


def default_clickhouse() -> ClickHouseResource:
    """The embedded engine, or a server when ``CHMV_CLICKHOUSE_DSN`` is set (password from ``CLICKHOUSE_PASSWORD``)."""
    dsn = os.environ.get("CHMV_CLICKHOUSE_DSN")
    if dsn and not dsn.startswith("chdb:"):
        return ClickHouseResource(dsn=dsn, username=os.environ.get("CLICKHOUSE_USER"), password=EnvVar("CLICKHOUSE_PASSWORD"))
    return ClickHouseResource(dsn=dsn)


defs = build_definitions(load(os.environ.get("CHMV_DDL_DIR") or EXAMPLE_DDL_DIR))
