"""The parity sweep: parity runs on its own, incrementally, and its verdicts are per-partition check evaluations.

``chmv_parity_sweep`` (sensor, every ``sweep.interval_seconds``) decides with ONE ClickHouse query which
target partitions changed since their last verdict (:mod:`chmv_assets.engine.health.sweep`) and requests a run
of the ``chmv_parity_sweep_checks`` job for the ones this tick's budget takes. The run evaluates parity
for each (the source read first; coverage only where the target holds more than the source yields) and
logs one ``AssetCheckEvaluation`` of the target's ``parity`` check per partition: red in the UI's
partitions view, sent to the alert sink, and read by ``chmv_recovery``, which repairs what failed.

Why a run rather than events reported by the sensor itself: Dagster keeps one row per (check, run,
partition) and shows a partition's newest row; runless evaluations all share one empty run id, so a
second runless verdict would update an older row and hide behind a newer run's result. A run also
keeps the evaluation out of the sensor's time limit and shows its log in the UI.

A run that fails (the engine busy past the resource's lock timeout, say) puts its partitions back in
the queue at the next tick; a tick that meets a busy engine or an unreachable server skips with the
reason and catches up.
"""

import time
from collections import defaultdict
from collections.abc import Iterable

from dagster import (
    AddDynamicPartitionsRequest,
    Config,
    DagsterRunStatus,
    DefaultSensorStatus,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    job,
    op,
    sensor,
)

from asset_checks.inline import latest_materializations, parity_alert, parity_evaluation
from chmv_assets.alerts import sink_for
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.partitioning import encode_key
from chmv_assets.engine.drift import apply_pending
from chmv_assets.engine.health.cursors import encode_cursor
from chmv_assets.engine.health.parity import parity_for_partitions
from chmv_assets.engine.health.sweep import SweepItem, SweepState, decide, window_of
from chmv_assets.orchestration.partitions import dynamic_partitions_of
from chmv_assets.orchestration.sensor_client import SensorSkip, sensor_client, tick_cursor
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import CLICKHOUSE_POOL, ClickHouseResource

SWEEP_SENSOR = "chmv_parity_sweep"
SWEEP_JOB = "chmv_parity_sweep_checks"
#: Sweep runs whose outcome the cursor remembers (a failed one puts its partitions back).
MAX_INFLIGHT = 20
#: Cursor format (:mod:`chmv_assets.engine.health.cursors`): a cursor of another version is read as empty.
CURSOR_VERSION = 1


class SweepRunConfig(Config):
    """The partitions one sweep run checks: per target ``db.table``, its partition keys (``""``: the whole table)."""

    partitions: dict[str, list[str]]


def build_sweep(loaded: LoadedProject, translator: ChmvTranslator) -> tuple[SensorDefinition, JobDefinition]:
    """The ``chmv_parity_sweep`` sensor and the job its runs execute."""
    settings = loaded.config.sweep
    targets = list(loaded.project.targets)
    by_fqn = {t.fqn: t for t in targets}
    sink = sink_for(loaded.config.alert_webhook)

    @op(
        name="chmv_parity_sweep_op",
        pool=CLICKHOUSE_POOL,
        description="Evaluate parity for the target partitions the sweep chose; log one check evaluation each.",
    )
    def sweep_op(context: OpExecutionContext, config: SweepRunConfig, clickhouse: ClickHouseResource) -> None:
        failed, checked = [], 0
        with clickhouse.get_client() as client:
            chosen = [by_fqn[f] for f in config.partitions if f in by_fqn]
            pending = apply_pending(client, loaded.project, chosen)  # for every target of the run, in two queries
            for fqn, keys in config.partitions.items():
                target = by_fqn.get(fqn)
                if target is None:
                    context.log.warning(f"{fqn} is no longer a target of the DDL directory: not checked")
                    continue
                key = translator.get_asset_key(target)
                windows = [window_of(loaded, target, k or None) for k in keys]
                results = parity_for_partitions(
                    client, loaded, target, windows, coverage_first=False, pending=pending[target]
                )
                partitions = [k or None for k in keys]
                records = latest_materializations(context.instance, key, partitions)
                for partition, result in zip(partitions, results, strict=True):
                    checked += 1
                    context.log.info(result.describe())
                    context.log_event(
                        parity_evaluation(  # type: ignore[arg-type]  # log_event takes a check evaluation; its hint omits it
                            key, partition, result, records.get(partition), metadata={"chmv/checked_by": SWEEP_SENSOR}
                        )
                    )
                    if not result.passed:
                        failed.append(result.describe())
                        sink.send(parity_alert(result, by=SWEEP_SENSOR), context.log)
        context.add_output_metadata(
            {
                "chmv/checked": checked,
                "chmv/failed": len(failed),
                "chmv/failures": MetadataValue.md("\n".join(f"- {f}" for f in failed) or "none"),
            }
        )

    @job(
        name=SWEEP_JOB,
        tags={"chmv/reason": "parity_sweep"},
        description="Parity of the target partitions the chmv_parity_sweep sensor found changed.",
    )
    def sweep_job() -> None:
        sweep_op()

    @sensor(
        name=SWEEP_SENSOR,
        job=sweep_job,
        minimum_interval_seconds=settings.interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if settings.enabled else DefaultSensorStatus.STOPPED,
        description="Parity on its own: the target partitions whose source or target changed since their "
        "last verdict (one system.parts query per tick), checked within a per-tick budget.",
    )
    def _sweep(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        cursor = tick_cursor(context).of(CURSOR_VERSION)
        state = SweepState.loads(cursor.get("state"))
        inflight: dict[str, dict[str, list[str]]] = cursor.get("inflight", {})
        busy = _settle_inflight(context, state, inflight)
        try:
            with sensor_client(clickhouse, context) as client:
                decision = decide(
                    client,
                    loaded,
                    targets,
                    state,
                    now=time.time(),
                    max_partitions=0 if busy else settings.max_partitions,
                    max_rows=settings.max_rows,
                )
        except SensorSkip as skip:
            return SkipReason(str(skip))
        summary = decision.summary() + (f"; waiting for the sweep run {busy} to finish" if busy else "")
        context.log.info(summary)
        if not decision.items:
            return SensorResult(skip_reason=SkipReason(summary), cursor=_write(decision.state, inflight))
        partitions: dict[str, list[str]] = defaultdict(list)
        for item in decision.items:
            partitions[item.target.fqn].append(item.key or "")
        run_key = f"chmv-sweep:{time.time_ns()}"
        inflight[run_key] = dict(partitions)
        request = RunRequest(
            run_key=run_key,
            run_config={"ops": {"chmv_parity_sweep_op": {"config": {"partitions": dict(partitions)}}}},
            tags={
                "chmv/reason": "parity_sweep",
                "chmv/partitions": str(len(decision.items)),
                "chmv/targets": ", ".join(sorted(partitions))[:250],
            },
        )
        known = _known_partitions(loaded, translator, decision.items)
        return SensorResult(
            run_requests=[request], cursor=_write(decision.state, inflight), dynamic_partitions_requests=known
        )

    return _sweep, sweep_job


def _known_partitions(
    loaded: LoadedProject, translator: ChmvTranslator, items: Iterable[SweepItem]
) -> list[AddDynamicPartitionsRequest]:
    """Make the key values of the partitions a sweep run checks known to Dagster (the live-state sensor adds those the
    server holds; a partition dropped before it ran is checked too), so their evaluations land on partitions."""
    keys: dict[str, list[str]] = defaultdict(list)
    for item in items:
        dynamic = dynamic_partitions_of(translator.get_partitions_def(loaded, item.target))
        if dynamic is not None and dynamic.name and item.window is not None and item.window.keyed:
            keys[dynamic.name].append(encode_key(item.window.values))
    return [AddDynamicPartitionsRequest(name, sorted(set(values))) for name, values in keys.items()]


def _settle_inflight(
    context: SensorEvaluationContext, state: SweepState, inflight: dict[str, dict[str, list[str]]]
) -> str | None:
    """Forget the sweep runs that succeeded, put the partitions of failed or canceled ones back in the queue.

    Returns:
        The run key of a sweep run still queued or running (the tick then only marks: one sweep run at a
        time, so a backlog never floods the run queue), else None.
    """
    busy = None
    now = time.time()
    for run_key in list(inflight):
        runs = context.instance.get_runs(RunsFilter(tags={"dagster/run_key": run_key}), limit=1)
        status = runs[0].status if runs else None
        if status == DagsterRunStatus.SUCCESS:
            del inflight[run_key]
        elif status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
            context.log.warning(f"sweep run {runs[0].run_id} ended {status.value}: its partitions are checked again")
            for fqn, keys in inflight.pop(run_key).items():
                state.pending.setdefault(fqn, {}).update({k: (0.0, now) for k in keys})
        elif status is not None:
            busy = run_key
        elif int(run_key.rsplit(":", 1)[-1]) < (now - _UNLAUNCHED_SECONDS) * 1e9:  # requested, never launched
            context.log.warning(f"sweep request {run_key} was never launched: its partitions are checked again")
            for fqn, keys in inflight.pop(run_key).items():
                state.pending.setdefault(fqn, {}).update({k: (0.0, now) for k in keys})
        else:
            busy = run_key
    while len(inflight) > MAX_INFLIGHT:
        del inflight[min(inflight)]
    return busy


#: A requested sweep run not in the instance after this long was dropped (the daemon stopped, say).
_UNLAUNCHED_SECONDS = 600


def _write(state: SweepState, inflight: dict) -> str:
    """The cursor: the sweep's state (:meth:`SweepState.dumps`, a cursor of its own) and the runs in flight."""
    return encode_cursor({"state": state.dumps(), "inflight": inflight}, CURSOR_VERSION)


__all__ = ["SWEEP_JOB", "SWEEP_SENSOR", "SweepRunConfig", "build_sweep"]
