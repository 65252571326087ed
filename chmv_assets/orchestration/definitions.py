"""Assemble the chmv Definitions for one parsed DDL directory: assets, checks, sensors, jobs, resources.

Nothing here opens ClickHouse, so loading the code location never contends for the embedded engine.
"""

from __future__ import annotations

import logging

from dagster import Definitions, in_process_executor

from asset_checks.definitions import build_asset_checks
from chmv_assets.ddl.loader import LoadedProject, gc_paused, loop_report, require_views, twin_of
from chmv_assets.orchestration.assets import build_chmv_assets
from chmv_assets.orchestration.health_sensor import build_health_sensor
from chmv_assets.orchestration.jobs import build_jobs
from chmv_assets.orchestration.live_state import build_live_state_sensor
from chmv_assets.orchestration.maintenance import build_maintenance
from chmv_assets.orchestration.sensors import build_sensors, rebuild_jobs
from chmv_assets.orchestration.sweep import build_sweep
from chmv_assets.orchestration.translator import ChmvTranslator, translated
from resources.clickhouse import ClickHouseResource, clickhouse_from_env, for_project
from spark.assets import build_spark_definitions

_LOG = logging.getLogger(__name__)


def build_definitions(
    loaded: LoadedProject,
    *,
    clickhouse: ClickHouseResource | None = None,
    translator: ChmvTranslator | None = None,
) -> Definitions:
    """Assemble the code location for a parsed project.

    Args:
        loaded: The parsed DDL directory and its configuration.
        clickhouse: The resource; default: ``$CHMV_CLICKHOUSE_DSN`` or the embedded engine. Its sessions are
            opened in the project's ``default_database`` (:func:`resources.clickhouse.for_project`).
        translator: Hooks for asset keys, groups, partitions and metadata; its ``get_partitioning`` partitions the
            project every asset, check, sensor and job reads (:func:`~chmv_assets.orchestration.translator.translated`).

    A trigger loop of the DDL (:attr:`~chmv_assets.ddl.models.Project.loops`) is left out: its MVs (and the targets
    only they write) get no asset, check or sensor; a warning names it, and everything else is built.

    Raises:
        DDLError: The DDL directory defines no materialized view (or only MVs of trigger loops).
        ChmvError: The resource names another session database than the project's ``default_database``.
    """
    require_views(loaded)
    if loaded.project.loops:  # left out of the project: no assets, checks or sensors for them; the rest is built
        _LOG.warning(loop_report(loaded.project))
    translator = translator or ChmvTranslator()
    config = loaded.config
    clickhouse = for_project(
        clickhouse or default_clickhouse(),
        config.default_database,
        where=f"{config.ddl_dir}/chmv.toml",
        server_version=config.server_version,
    )
    if clickhouse.is_embedded:  # what the embedded engine runs: the local twin of the DDL (docs/any-schema.md)
        loaded = twin_of(loaded)
    loaded = translated(loaded, translator)  # its partitioning hook: for the Dagster half and the SQL half alike
    with gc_paused():
        return _assemble(loaded, clickhouse, translator)


def resolved(defs: Definitions) -> Definitions:
    """``defs`` with its repository resolved now, while the cyclic collector is paused (Dagster memoizes it).

    Resolving builds as many objects again as :func:`build_definitions`; collection passes over them cost ~0.13 s of
    a warm load at 1,000 MVs. For the code location's own ``defs``: a ``dg`` project's component is not resolved here,
    as Dagster resolves a copy of it (``Definitions.with_definition_metadata_update``).
    """
    with gc_paused():
        defs.get_repository_def()
    return defs


def _assemble(loaded: LoadedProject, clickhouse: ClickHouseResource, translator: ChmvTranslator) -> Definitions:
    spark = build_spark_definitions(loaded, translator)
    sweep_sensor, sweep_job = build_sweep(loaded, translator)
    (apply_job,) = build_jobs(loaded)
    maintenance_sensor, maintain_job = build_maintenance(loaded)
    return Definitions.merge(
        Definitions(
            assets=build_chmv_assets(loaded, translator),
            asset_checks=build_asset_checks(loaded, translator),
            sensors=[
                *build_sensors(loaded, translator, apply_job),
                build_live_state_sensor(loaded, translator),
                sweep_sensor,
                build_health_sensor(loaded, translator),
                maintenance_sensor,
            ],
            # The sensors' rebuild jobs are listed too: Definitions.with_definition_metadata_update (what a
            # dg project applies to a component's defs) copies a job that only sensors name once per sensor,
            # and two sensors naming one job then fail as "Duplicate definition found for unresolved job".
            jobs=[
                apply_job,
                sweep_job,
                maintain_job,
                *{id(j): j for j in rebuild_jobs(loaded, translator).values()}.values(),
            ],
            resources={"clickhouse": clickhouse},
            # The embedded engine serves one process at a time: steps in subprocesses would only queue for
            # it, each paying ~5 s of start-up (code location load); a run's steps execute in its process.
            executor=in_process_executor if clickhouse.is_embedded else None,
        ),
        spark,
    )


def default_clickhouse() -> ClickHouseResource:
    """The embedded engine, or a server when ``CHMV_CLICKHOUSE_DSN`` is set (:func:`resources.clickhouse.clickhouse_from_env`:
    the DSN, ``CLICKHOUSE_USER`` and ``CLICKHOUSE_PASSWORD`` as ``EnvVar``, so the UI shows their names)."""
    return clickhouse_from_env()
