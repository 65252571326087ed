"""Jobs of the code location: deploy the DDL (``chmv apply`` from the UI)."""


from dagster import JobDefinition, OpExecutionContext, job, op

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.apply import apply
from resources.clickhouse import ClickHouseResource


def build_jobs(loaded: LoadedProject) -> list[JobDefinition]:
    """``chmv_apply``: create every missing database, table, dictionary and MV in dependency order."""

    @op(name="apply_ddl", pool="clickhouse")
    def apply_ddl(context: OpExecutionContext, clickhouse: ClickHouseResource) -> None:
        with clickhouse.get_client() as client:
            result = apply(client, loaded.project, log=context.log.info)
        context.log.info(f"created {len(result.created)} objects, {len(result.existing)} already existed")

    @job(name="chmv_apply", description="Create what is missing of the DDL directory, in dependency order.")
    def chmv_apply() -> None:
        apply_ddl()

    return [chmv_apply]
