"""``chmv_maintain`` and its sensor: merge the late partitions of collapsing targets in the quiet window (optional).

The logic is :mod:`chmv_assets.engine.health.maintenance`. The ``chmv_maintenance`` sensor (stopped unless ``[maintenance]
enabled``) looks at the server's clock every ``[maintenance] interval_seconds``; inside ``[maintenance] window``, when a
closed partition of a Replacing/Summing/Aggregating target holds several parts, it requests one run of the
``chmv_maintain`` job for that occurrence of the window (its run key names the window's start), which merges them,
paced, until the window ends.
"""

from dagster import (
    DefaultSensorStatus,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    Output,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.clock import wall_now
from chmv_assets.engine.health.maintenance import late_partitions, merge_late_partitions, window_bounds
from chmv_assets.orchestration.run_logs import forward_engine_logs
from chmv_assets.orchestration.sensor_client import SensorSkip, TickBudget, sensor_client
from resources.clickhouse import CLICKHOUSE_POOL, ClickHouseResource

MAINTAIN_JOB = "chmv_maintain"


def build_maintenance(loaded: LoadedProject) -> tuple[SensorDefinition, JobDefinition]:
    """The ``chmv_maintenance`` sensor and the ``chmv_maintain`` job it requests."""
    rules = loaded.config.maintenance

    @op(name="merge_late_partitions", pool=CLICKHOUSE_POOL)
    def merge_op(context: OpExecutionContext, clickhouse: ClickHouseResource):
        with clickhouse.get_client() as client:
            bounds = window_bounds(rules.window, wall_now(client))
            until = bounds[1] if bounds else None  # a run started by hand outside the window is not cut short
            with forward_engine_logs(context):
                merged = merge_late_partitions(client, loaded.project, rules, pacing=loaded.config.pacing, until=until)
        table = "\n".join(
            f"| {m.partition.table.fqn} | {m.partition.partition_id} | {m.partition.parts} | "
            f"{m.parts_after} | {m.seconds:.1f} | {m.skipped or ''} |"
            for m in merged
        )
        done = [m for m in merged if m.skipped is None]
        yield Output(
            None,
            metadata={
                "chmv/partitions_merged": len(done),
                "chmv/partitions_skipped": len(merged) - len(done),
                "chmv/parts_before": sum(m.partition.parts for m in done),
                "chmv/parts_after": sum(m.parts_after for m in done),
                "chmv/merged": MetadataValue.md(
                    "| table | partition | parts before | after | seconds | not merged: why |\n|---|---|---|---|---|---|\n"
                    + table
                    if merged
                    else "nothing to merge"
                ),
            },
        )

    @job(
        name=MAINTAIN_JOB,
        description="OPTIMIZE … PARTITION … FINAL of the closed partitions of Replacing/Summing/Aggregating targets "
        "that received late rows (several active parts), paced, until the [maintenance] window ends.",
    )
    def chmv_maintain() -> None:
        merge_op()

    @sensor(
        name="chmv_maintenance",
        minimum_interval_seconds=rules.interval_seconds,
        job=chmv_maintain,
        default_status=DefaultSensorStatus.RUNNING if rules.enabled else DefaultSensorStatus.STOPPED,
        description=f"In the quiet window {rules.window} (server clock), one chmv_maintain run when closed partitions "
        "of collapsing targets received late rows ([maintenance] in chmv.toml).",
    )
    def _maintenance(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        if not rules.enabled:
            return SkipReason("maintenance is off ([maintenance] enabled = false in chmv.toml)")
        try:
            with sensor_client(clickhouse, context, TickBudget()) as client:
                now = wall_now(client)
                bounds = window_bounds(rules.window, now)
                found = late_partitions(client, loaded.project, rules) if bounds else []
        except SensorSkip as skip:
            return SkipReason(str(skip))
        if bounds is None:
            return SkipReason(f"outside the quiet window {rules.window} (server clock {now:%H:%M})")
        if not found:
            return SkipReason("no closed partition of a collapsing target holds several parts")
        return RunRequest(
            run_key=f"chmv-maintain:{bounds[0]:%Y-%m-%dT%H:%M}",
            tags={"chmv/reason": "late_partitions", "chmv/partitions": str(len(found))},
        )

    return _maintenance, chmv_maintain
