"""Jobs of the code location: deploy the DDL (``chmv apply`` from the UI), showing the plan first."""

from contextlib import ExitStack

from dagster import Failure, In, JobDefinition, MetadataValue, Nothing, OpExecutionContext, Out, Output, job, op

from asset_checks.parity import parity_for_partitions
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.twin import describe_stand_ins
from chmv_assets.engine.landing import landing_dir
from chmv_assets.engine.lifecycle_apply import LifecycleError, apply_plan
from chmv_assets.engine.lifecycle_planner import plan_lifecycle
from chmv_assets.engine.preflight import preflight
from chmv_assets.errors import DDLError
from resources.clickhouse import ClickHouseResource
from spark.session import get_spark_session
from spark.staging import SparkStager


def build_jobs(loaded: LoadedProject) -> list[JobDefinition]:
    """``chmv_apply``: the lifecycle plan as markdown metadata, then the preflight, then the apply (``chmv apply``)."""

    @op(name="plan_ddl", pool="clickhouse", out=Out(Nothing))
    def plan_ddl(context: OpExecutionContext, clickhouse: ClickHouseResource):
        with clickhouse.get_client() as client:
            plan = plan_lifecycle(client, loaded, root=landing_dir(loaded))
        context.log.info(plan.describe())
        stand_ins = describe_stand_ins(loaded.project)  # the local twin's, on the embedded engine
        if stand_ins:
            context.log.info("\n".join(stand_ins))
        yield Output(None, metadata={"chmv/plan": MetadataValue.md(plan.describe(markdown=True)),
                                     "chmv/changes": len(plan.changes), "chmv/summary": plan.summary(),
                                     "chmv/stand_ins": MetadataValue.md("\n".join(stand_ins) or "none")})  # fmt: skip

    @op(name="apply_ddl", pool="clickhouse", ins={"planned": In(Nothing)}, out=Out(Nothing))
    def apply_ddl(context: OpExecutionContext, clickhouse: ClickHouseResource):
        root = landing_dir(loaded)
        try:
            with ExitStack() as opened:
                client = opened.enter_context(clickhouse.get_client())
                plan = plan_lifecycle(client, loaded, root=root)
                preflight(client, loaded, plan, log=context.log.info)  # before anything live is touched
                report = apply_plan(clickhouse, loaded, plan, parity=parity, stager=SparkStager(get_spark_session),
                                    root=root, log=context.log.info, opened=(client, opened.pop_all()))  # fmt: skip
        except (DDLError, LifecycleError) as err:  # the user's to fix: say what and where, no traceback
            raise Failure(description=str(err), allow_retries=False) from None
        return Output(None, metadata={"chmv/report": report.describe(),
                                      "chmv/partitions_rederived": sum(report.partitions.values())})  # fmt: skip

    def parity(client, target, live, windows):
        return parity_for_partitions(client, loaded, target, windows, live=live)

    @job(name="chmv_apply", description="Show the lifecycle plan, check it in a scratch database, then apply it with "
                                        "zero gap (creations, ALTERs, MODIFY QUERY, new versions, history re-derived).")  # fmt: skip
    def chmv_apply() -> None:
        apply_ddl(planned=plan_ddl())

    return [chmv_apply]
