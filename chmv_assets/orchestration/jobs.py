"""Jobs of the code location: deploy the DDL (``chmv apply`` from the UI), showing the plan first."""

from dagster import Failure, In, JobDefinition, MetadataValue, Nothing, OpExecutionContext, Out, Output, job, op

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.apply import apply
from chmv_assets.engine.landing import landing_dir
from chmv_assets.engine.lifecycle_planner import plan_lifecycle
from chmv_assets.engine.preflight import preflight
from chmv_assets.errors import DDLError
from resources.clickhouse import ClickHouseResource


def build_jobs(loaded: LoadedProject) -> list[JobDefinition]:
    """``chmv_apply``: the lifecycle plan as markdown metadata, then the preflight, then the apply."""

    @op(name="plan_ddl", pool="clickhouse", out=Out(Nothing))
    def plan_ddl(context: OpExecutionContext, clickhouse: ClickHouseResource):
        with clickhouse.get_client() as client:
            plan = plan_lifecycle(client, loaded, root=landing_dir(loaded))
        context.log.info(plan.describe())
        yield Output(None, metadata={"chmv/plan": MetadataValue.md(plan.describe(markdown=True)),
                                     "chmv/changes": len(plan.changes), "chmv/summary": plan.summary()})  # fmt: skip

    @op(name="apply_ddl", pool="clickhouse", ins={"planned": In(Nothing)})
    def apply_ddl(context: OpExecutionContext, clickhouse: ClickHouseResource) -> None:
        try:
            with clickhouse.get_client() as client:
                plan = plan_lifecycle(client, loaded, root=landing_dir(loaded))
                preflight(client, loaded, plan, log=context.log.info)  # before anything live is touched
                result = apply(client, loaded.project, log=context.log.info)
        except DDLError as err:  # refused DDL is the user's to fix: say what and where, no traceback
            raise Failure(description=str(err), allow_retries=False) from None
        context.log.info(f"created {len(result.created)} objects, {len(result.existing)} already existed")

    @job(name="chmv_apply", description="Show the lifecycle plan, check it in a scratch database, then create what "
                                        "is missing of the DDL directory, in dependency order.")  # fmt: skip
    def chmv_apply() -> None:
        apply_ddl(planned=plan_ddl())

    return [chmv_apply]
