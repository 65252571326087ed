"""Jobs of the code location: deploy the DDL (``chmv apply`` from the UI), showing the plan first.

``chmv_apply`` is also how the sensors repair what needs DDL (they never execute DDL themselves): the recovery
sensor requests a run of it for the objects to restore (``objects`` in the run config), and the run plans,
preflights and applies only the changes that touch them, after re-attaching those of them that are detached.
"""

from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from clickhouse_connect.driver.client import Client
from dagster import (
    Config,
    Failure,
    In,
    JobDefinition,
    MetadataValue,
    Nothing,
    OpExecutionContext,
    Out,
    Output,
    job,
    op,
)
from pydantic import Field

from chmv_assets.ddl.loader import LoadedProject, loop_report
from chmv_assets.ddl.models import MaterializedView, ObjectRef
from chmv_assets.ddl.twin import describe_stand_ins
from chmv_assets.engine.ingest.landing import landing_dir
from chmv_assets.engine.lifecycle.apply import LifecycleError, apply_plan
from chmv_assets.engine.lifecycle.plan import Action, LifecyclePlan
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.lifecycle.preflight import preflight
from chmv_assets.engine.lifecycle.refusals import check_statement
from chmv_assets.errors import DDLError
from chmv_assets.orchestration.run_logs import forward_engine_logs
from chmv_assets.sql.cluster import attach_view_sql
from resources.clickhouse import ClickHouseResource
from spark.session import get_spark_session
from spark.staging import SparkStager

APPLY_JOB = "chmv_apply"


class ApplyConfig(Config):
    """Which part of the plan a run applies."""

    objects: list[str] = Field(
        default_factory=list,
        description="db.name of the objects to repair (the recovery sensor's runs): only the changes touching "
        "them, after re-attaching those that are detached. Empty: the whole plan, as `chmv apply`.",
    )


def build_jobs(loaded: LoadedProject) -> list[JobDefinition]:
    """``chmv_apply``: the lifecycle plan as markdown metadata, then the preflight, then the apply (``chmv apply``)."""
    return [apply_job(loaded)]


def apply_job(loaded: LoadedProject) -> JobDefinition:
    """The ``chmv_apply`` job of a load (one object per load: the sensors name it too)."""
    return loaded.derived("chmv/apply_job", lambda: _apply_job(loaded))


def _apply_job(loaded: LoadedProject) -> JobDefinition:
    @op(name="plan_ddl", pool="clickhouse", out=Out(Nothing))
    def plan_ddl(context: OpExecutionContext, config: ApplyConfig, clickhouse: ClickHouseResource):
        objects = _refs(config.objects)
        with clickhouse.get_client() as client:
            attach = detached_views(client, loaded, objects)
            plan = scoped(plan_lifecycle(client, loaded, root=landing_dir(loaded)), objects)
        # what the apply step plans once they are attached again: no CREATE of them (nor its re-derivation)
        plan = without(plan, {v.ref for v in attach})
        text = plan.describe(markdown=True)
        if attach:
            lines = [f"- **re-attach** {v.ref.fqn} (detached), then plan again" for v in attach]
            text = "\n".join(["**Detached MVs of the DDL directory**", "", *lines, "", text])
        context.log.info(
            ("re-attach " + ", ".join(v.ref.fqn for v in attach) + "; " if attach else "") + plan.describe()
        )
        metadata: dict[str, Any] = {
            "chmv/plan": MetadataValue.md(text),
            "chmv/changes": len(plan.changes) + len(attach),
        }
        metadata["chmv/summary"] = plan.summary() if not attach else f"{len(attach)} to re-attach; {plan.summary()}"
        if objects:
            metadata["chmv/objects"] = ", ".join(sorted(r.fqn for r in objects))
        stand_ins = describe_stand_ins(loaded.project)  # the local twin's, on the embedded engine
        if stand_ins:
            context.log.info("\n".join(stand_ins))
        metadata["chmv/stand_ins"] = MetadataValue.md("\n".join(stand_ins) or "none")
        yield Output(None, metadata=metadata)

    @op(name="apply_ddl", pool="clickhouse", ins={"planned": In(Nothing)}, out=Out(Nothing))
    def apply_ddl(context: OpExecutionContext, config: ApplyConfig, clickhouse: ClickHouseResource):
        root = landing_dir(loaded)
        objects = _refs(config.objects)
        try:
            with ExitStack() as opened:
                client = opened.enter_context(clickhouse.get_client())
                for view in detached_views(client, loaded, objects):
                    client.command(check_statement(attach_view_sql(view.ref, view.on_cluster)))
                    context.log.info(f"re-attached the detached MV {view.ref.fqn}")
                plan = scoped(plan_lifecycle(client, loaded, root=root), objects)
                if objects:
                    refuse_inner_table_drops(plan, loaded)
                with forward_engine_logs(context):
                    preflight(client, loaded, plan)  # before anything live is touched
                    report = apply_plan(
                        clickhouse,
                        loaded,
                        plan,
                        stager=SparkStager(get_spark_session),
                        root=root,
                        opened=(client, opened.pop_all()),
                    )
        except (DDLError, LifecycleError) as err:  # the user's to fix: say what and where, no traceback
            raise Failure(description=str(err), allow_retries=False) from None
        metadata: dict[str, Any] = {
            "chmv/report": report.describe(),
            "chmv/partitions_rederived": sum(report.partitions.values()),
        }
        if report.refused:  # a trigger loop of the DDL: everything else was applied; the run says what to fix
            raise Failure(
                description=f"{report.describe()}\n{loop_report(loaded.project)}",
                metadata=metadata,
                allow_retries=False,
            )
        return Output(None, metadata=metadata)

    @job(
        name=APPLY_JOB,
        description="Show the lifecycle plan, check it in a scratch database, then apply it with zero gap "
        "(creations, ALTERs, MODIFY QUERY, new versions, history re-derived). The recovery sensor's runs repair "
        "the objects of their run config only (re-attach, recreate).",
    )
    def chmv_apply() -> None:
        apply_ddl(planned=plan_ddl())

    return chmv_apply


def _refs(names: list[str]) -> list[ObjectRef]:
    refs = []
    for name in names:
        database, _, table = name.partition(".")
        refs.append(ObjectRef(database=database, name=table))
    return refs


def scoped(plan: LifecyclePlan, objects: list[ObjectRef]) -> LifecyclePlan:
    """The part of ``plan`` that touches ``objects`` (all of it when there are none)."""
    return plan.touching(objects) if objects else plan


def without(plan: LifecyclePlan, refs: set[ObjectRef]) -> LifecyclePlan:
    """``plan`` without the changes of ``refs`` (MVs to re-attach: the server has them, detached)."""
    if not refs:
        return plan
    return replace(plan, changes=tuple(c for c in plan.changes if c.ref not in refs))


def detached_views(client: Client, loaded: LoadedProject, objects: list[ObjectRef]) -> list[MaterializedView]:
    """The MVs of the DDL directory (of ``objects`` when given) that are detached on the server."""
    views = loaded.project.views
    wanted = [views[r] for r in objects if r in views] if objects else list(views.values())
    if not wanted:
        return []
    rows = client.query(
        "SELECT database, table FROM system.detached_tables WHERE database IN {dbs:Array(String)}",
        parameters={"dbs": sorted({v.ref.database for v in wanted})},
    ).result_rows
    detached = {ObjectRef(database=d, name=n) for d, n in rows}
    return [v for v in wanted if v.ref in detached]


def refuse_inner_table_drops(plan: LifecyclePlan, loaded: LoadedProject) -> None:
    """A repair never drops an MV that owns its rows (an MV without TO: its inner table goes with it).

    Raises:
        LifecycleError: Naming the changes; ``chmv apply`` (or the job without ``objects``) can still make them.
    """
    views = loaded.project.views
    drops = [
        c
        for c in plan.changes
        if c.action in (Action.DROP, Action.RECREATE_VIEW) and c.ref in views and views[c.ref].target is None
    ]
    if drops:
        names = ", ".join(f"{c.ref.fqn} ({c.action})" for c in drops)
        raise LifecycleError(
            f"this repair would drop {names}, an MV without TO whose inner table holds its history; a repair never "
            "does: review the plan and run `chmv apply` (or the chmv_apply job without objects) yourself"
        )
