"""Sensors of chmv: watermark staleness, auto-recovery, drift.

- ``chmv_staleness``: one batched measurement per tick (chmv_assets.engine.staleness); a target past the SLA
  raises an alert (once per episode) and requests catch-up runs of the lagging partitions.
- ``chmv_recovery``: partitions whose parity check failed (read from the instance's check evaluations:
  the parity sweep's, runs', manual ones) or whose staleness persisted across ticks get the tiered repair
  of chmv_assets.engine.recovery: the cheapest fix on the MV first, then a rebuild run per range of
  consecutive partitions, never one the planner would refuse; once a rebuilt partition passes, the
  partitions of the targets reading it follow. Cooldown and retry limit in the cursor.
- ``chmv_drift``: when the files of the DDL directory change, re-parses them, reports drift against the
  server and requests a run of the drift checks.

The embedded engine is opened with a short lock timeout: a busy engine or an unreachable server skips
the tick with the reason (the cursor is kept, so the next tick catches up). Anything else raises.
"""

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetSelection,
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    TimeWindowPartitionsDefinition,
    define_asset_job,
    sensor,
)

from asset_checks.definitions import DRIFT, PARITY, check_key, targets_by_key
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.coverage import mappings
from chmv_assets.engine.drift import drift_report
from chmv_assets.engine.landing import landing_dir
from chmv_assets.engine.planner import RebuildPlan, observe, plan_rebuild, windows_covering
from chmv_assets.engine.recovery import Decision, entry_key, plan, split_key, tier1_repair
from chmv_assets.engine.staleness import TargetLag, measure_staleness
from chmv_assets.errors import DDLError
from chmv_assets.orchestration.partitions import window_for_key
from chmv_assets.orchestration.sensor_client import SensorSkip, sensor_client
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

#: What ``define_asset_job`` returns: its class (AssetJob) is not public API.
AssetJob = Any
#: Most catch-up or recovery runs one target gets per tick.
MAX_RUNS_PER_TARGET = 24
#: Ticks a staleness must persist before recovery acts on it.
STALE_TICKS = 2


def _cursor(context: SensorEvaluationContext) -> dict:
    try:
        return json.loads(context.cursor) if context.cursor else {}
    except json.JSONDecodeError:
        context.log.warning(f"ignoring an unreadable cursor: {context.cursor[:200]}")
        return {}


def catchup_partitions(partitions_def, lag: TargetLag) -> list[str | None]:
    """The partition keys between the target's newest value and what it should hold (None: unpartitioned)."""
    if not isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return [None]
    if lag.expected_max is None:
        return []
    start = lag.target_max or lag.expected_max
    keys = []
    for key in partitions_def.get_partition_keys():
        window = partitions_def.time_window_for_partition_key(key)
        if window.end.replace(tzinfo=None) > start and window.start.replace(tzinfo=None) <= lag.expected_max:
            keys.append(key)
    return keys[-MAX_RUNS_PER_TARGET:]


def ddl_hash(ddl_dir: str | Path) -> str:
    """A hash of every ``.sql`` file and ``chmv.toml`` of the DDL directory (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(Path(ddl_dir).rglob("*")):
        if path.is_file() and (path.suffix == ".sql" or path.name == "chmv.toml"):
            digest.update(str(path.relative_to(ddl_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def rebuild_jobs(loaded: LoadedProject, translator: ChmvTranslator) -> dict[ObjectRef, AssetJob]:
    """Per target, the job the sensors request its runs in: one job per partitions definition.

    A sensor's runs must name a job whose assets share one partitions definition, so the targets are
    grouped (``chmv_rebuild_day``, ``chmv_rebuild_month``, ``chmv_rebuild_unpartitioned``…); a run
    request then selects one target (and its parity check) and one partition of its job. Built once per
    load and kept with it (a module-level cache would keep every reloaded project alive).
    """
    return loaded.derived(("chmv/rebuild_jobs", translator), lambda: _rebuild_jobs(loaded, translator))


def _rebuild_jobs(loaded: LoadedProject, translator: ChmvTranslator) -> dict[ObjectRef, AssetJob]:
    groups: dict[str, list[ObjectRef]] = {}
    defs: dict[str, object] = {}
    for target in loaded.project.targets:
        partitions_def = translator.get_partitions_def(loaded, target)
        grain = translator.get_partition_scheme(loaded, target).grain if partitions_def is not None else None
        name = f"chmv_rebuild_{grain or 'unpartitioned'}"
        while name in defs and defs[name] != partitions_def:
            name += "_"
        defs[name] = partitions_def
        groups.setdefault(name, []).append(target)
    jobs = {}
    for name, targets in groups.items():
        job = define_asset_job(name, selection=AssetSelection.assets(*(translator.get_asset_key(t) for t in targets)),
                               partitions_def=defs[name],
                               description="Rebuild of MV targets requested by the chmv staleness/recovery sensors.")  # fmt: skip
        jobs.update({t: job for t in targets})
    return jobs


def _jobs(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetJob]:
    return list({id(j): j for j in rebuild_jobs(loaded, translator).values()}.values())


def build_staleness_sensor(loaded: LoadedProject, translator: ChmvTranslator) -> SensorDefinition:
    """Alert on targets lagging their sources past ``sla_minutes`` and request catch-up runs."""
    sink = sink_for(loaded.config.alert_webhook)
    jobs = rebuild_jobs(loaded, translator)

    @sensor(name="chmv_staleness", minimum_interval_seconds=60, jobs=_jobs(loaded, translator), default_status=DefaultSensorStatus.RUNNING,
            description="Targets and watermarks lagging their sources past the SLA: alert and catch up.")  # fmt: skip
    def _staleness(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        cursor = _cursor(context)
        try:
            with sensor_client(clickhouse, context) as client:
                lags = measure_staleness(client, loaded)
        except SensorSkip as skip:
            return SkipReason(str(skip))
        stale_state: dict = cursor.get("stale", {})
        missing_state: dict = cursor.get("missing", {})
        requests = []
        for lag in lags:
            fqn = lag.target.fqn
            if lag.missing:
                if missing_state.get(fqn) != list(lag.missing):
                    sink.send(Alert("stale", "error", fqn, f"cannot measure staleness: {', '.join(lag.missing)} "
                                    "does not exist on the server; deploy with `chmv apply`"), context.log)  # fmt: skip
                missing_state[fqn] = list(lag.missing)
                continue
            missing_state.pop(fqn, None)
            if not lag.stale:
                if fqn in stale_state:
                    context.log.info(f"{fqn} caught up (lag {lag.lag_seconds:.0f}s)")
                    stale_state.pop(fqn)
                continue
            expected = lag.expected_max.isoformat() if lag.expected_max else ""
            previous = stale_state.get(fqn)
            if previous is None:
                sink.send(Alert("stale", "warning", fqn, "; ".join(lag.reasons) + ": requesting catch-up",
                                {"lag_seconds": lag.lag_seconds, "watermark_lag_seconds": lag.watermark_lag_seconds,
                                 "target_max": str(lag.target_max), "expected_max": str(lag.expected_max)}),
                          context.log)  # fmt: skip
                stale_state[fqn] = {"since": time.time(), "requested": ""}
            if stale_state[fqn]["requested"] == expected:
                context.log.info(f"{fqn} still stale; catch-up for {expected} already requested")
                continue
            stale_state[fqn]["requested"] = expected
            key = translator.get_asset_key(lag.target)
            partitions_def = translator.get_partitions_def(loaded, lag.target)
            for partition in catchup_partitions(partitions_def, lag):
                context.log.info(f"{fqn}: catch-up run for partition {partition or '(all)'}: {'; '.join(lag.reasons)}")
                requests.append(RunRequest(
                    run_key=f"chmv-catchup:{fqn}:{partition or ''}:{expected}", job_name=jobs[lag.target].name,
                    asset_selection=[key], partition_key=partition,
                    tags={"chmv/reason": "stale", "chmv/target": fqn, "chmv/lag_seconds": str(int(lag.lag_seconds))},
                ))  # fmt: skip
        new_cursor = json.dumps({"stale": stale_state, "missing": missing_state}, sort_keys=True)
        if not requests:
            return SensorResult(skip_reason=SkipReason(f"{len(stale_state)} stale target(s), nothing new to request"),
                                cursor=new_cursor)  # fmt: skip
        return SensorResult(run_requests=requests, cursor=new_cursor)

    return _staleness


def parity_outcomes(context: SensorEvaluationContext, keys_to_targets: dict[AssetKey, ObjectRef],
                    after: int) -> tuple[dict[str, bool], int]:  # fmt: skip
    """``entry key → passed`` of the parity verdicts stored after event storage id ``after``; the new watermark.

    One call for every target: the instance's per-partition index of check executions, which gives the
    latest execution of each partition and the storage id of its evaluation event (runs, the sweep's
    runs and manual check runs alike). A run's evaluation is stored after everything this tick saw, so
    a verdict still pending now is read at a later tick.
    """
    storage = context.instance.event_log_storage
    check_keys = {AssetCheckKey(key, PARITY): target for key, target in keys_to_targets.items()}
    outcomes: dict[str, bool] = {}
    last = after
    for info in storage.get_asset_check_partition_info(list(check_keys), after_storage_id=after or None):
        stored = info.latest_check_event_storage_id or 0
        status = info.latest_execution_status.value  # the enum is not exported by dagster: its values are stable
        if stored <= after or status not in _VERDICTS:
            continue  # an older verdict (listed for a newer materialization) or one still running
        outcomes[entry_key(check_keys[info.check_key], info.partition_key)] = _VERDICTS[status]
        last = max(last, stored)
    return outcomes, last


#: Check execution statuses that are a verdict (storage values of Dagster's AssetCheckExecutionRecordStatus).
_VERDICTS = {"SUCCEEDED": True, "FAILED": False}


def downstream_entries(loaded: LoadedProject, translator: ChmvTranslator, target: ObjectRef,
                       partition: str | None) -> list[str]:  # fmt: skip
    """Ledger keys of the partitions of the targets that read ``target`` directly, for one of its partitions.

    A child's rows of a parent window land in the child's windows the MV's time mapping says: a weekly
    rollup of a day lands in the week starting up to 6 days before it (the window's start moves back by
    the truncation's length). Grandchildren follow once the children pass (their own repair).
    """
    window = window_for_key(translator.get_partitions_def(loaded, target), partition) if partition else None
    children = dict.fromkeys(v.writes_to for v in loaded.project.views_from(target) if v.trigger == target)
    keys = []
    for child in children:
        if window is None:
            windows = windows_covering(loaded, child, datetime(1970, 1, 2), datetime(2106, 1, 1))
            if windows != [None]:
                continue  # a whole-table parent: the child's history is too wide to guess; the sweep checks it
        else:
            mapping = mappings(loaded, child).get(target)
            back = mapping.reach if mapping is not None else timedelta(0)
            windows = windows_covering(loaded, child, window.start - back, window.end - timedelta(microseconds=1))
        keys += [entry_key(child, w.key if w else None) for w in windows]
    return keys


def planned_rebuild(client, loaded: LoadedProject, translator: ChmvTranslator, target: ObjectRef,
                    partition: str | None) -> RebuildPlan:  # fmt: skip
    """What a rebuild of the partition would do now: the same planner (and coverage) the run will use."""
    window = window_for_key(translator.get_partitions_def(loaded, target), partition) if partition else None
    root = landing_dir(loaded)
    observations = observe(client, loaded, target, root=root, windows=[window])
    return plan_rebuild(loaded, target, [window], observations, root=root)


@dataclass(frozen=True)
class _Due:
    """A partition recovery rebuilds at this tick."""

    decision: Decision
    partition: str | None
    engines: str
    tier1: tuple[str, ...]


def recovery_requests(loaded: LoadedProject, translator: ChmvTranslator, job_name: str, target: ObjectRef,
                      due: list[_Due]) -> list[RunRequest]:  # fmt: skip
    """The runs that rebuild ``due`` partitions of one target: one run per range of consecutive partitions.

    A range run plans and swaps every partition of it in one go (one read of the source per range, the
    targets' single-run backfill policy) and evaluates parity per partition, so each ledger entry gets
    its own verdict.
    """
    partitions_def = translator.get_partitions_def(loaded, target)
    order = {k: i for i, k in enumerate(partitions_def.get_partition_keys())} if partitions_def is not None else {}
    items = sorted(due, key=lambda d: order.get(d.partition or "", -1))
    ranges: list[list[_Due]] = []
    for item in items:
        previous = ranges[-1][-1] if ranges else None
        if (previous is not None and item.partition is not None and previous.partition is not None
                and order.get(item.partition) == order.get(previous.partition, -2) + 1
                and item.decision.reason == previous.decision.reason):  # fmt: skip
            ranges[-1].append(item)
        else:
            ranges.append([item])
    requests = []
    for group in ranges:
        first, last = group[0], group[-1]
        tags = {"chmv/reason": first.decision.reason[:200], "chmv/attempt": str(max(d.decision.attempt for d in group)),
                "chmv/target": target.fqn, "chmv/engine": ", ".join(sorted({d.engines for d in group})),
                "chmv/tier1": "; ".join(dict.fromkeys(a for d in group for a in d.tier1))[:250] or "none"}  # fmt: skip
        partition_key = first.partition
        if len(group) > 1:
            tags |= {"dagster/asset_partition_range_start": first.partition, "dagster/asset_partition_range_end": last.partition}
            partition_key = None
        attempts = ".".join(str(d.decision.attempt) for d in group)
        requests.append(RunRequest(
            run_key=f"chmv-recover:{target.fqn}|{first.partition or ''}..{last.partition or ''}:{attempts}:{int(time.time())}",
            job_name=job_name, asset_selection=[translator.get_asset_key(target)],
            asset_check_keys=[check_key(translator, target, PARITY)], partition_key=partition_key, tags=tags,
        ))  # fmt: skip
    return requests


def build_recovery_sensor(loaded: LoadedProject, translator: ChmvTranslator) -> SensorDefinition:
    """Repair partitions whose parity failed or whose staleness persisted, within a retry budget."""
    config = loaded.config
    sink = sink_for(config.alert_webhook)
    keys_to_targets = targets_by_key(loaded, translator)
    jobs = rebuild_jobs(loaded, translator)

    @sensor(name="chmv_recovery", minimum_interval_seconds=config.sweep.recovery_interval_seconds,
            jobs=_jobs(loaded, translator), default_status=DefaultSensorStatus.RUNNING,
            description="Tiered repair of failed parity / persistent staleness: fix the MV, rebuild the partitions "
                        "through the planner, then the partitions of the targets further down the chain.")  # fmt: skip
    def _recovery(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        cursor = _cursor(context)
        outcomes, last_event = parity_outcomes(context, keys_to_targets, int(cursor.get("verdicts_after", 0)))
        failing = {k: "parity_failed" for k, passed in outcomes.items() if not passed}
        resolved = {k for k, passed in outcomes.items() if passed}
        stale_ticks: dict = cursor.get("stale_ticks", {})
        ledger: dict = cursor.get("ledger", {})
        # a partition this loop rebuilt now passes: the targets reading it re-derive the same rows next
        for key in sorted(resolved - set(failing)):
            entry = ledger.get(key)
            if entry is not None and int(entry.get("attempts", 0)) > 0:
                target, partition = split_key(key)
                for child_key in downstream_entries(loaded, translator, target, partition):
                    failing.setdefault(child_key, f"upstream_repaired:{target.fqn}")
                    context.log.info(f"{key} repaired: {child_key} reads it and is rebuilt next")
        requests: list[RunRequest] = []
        due: dict[ObjectRef, list[_Due]] = {}
        try:
            with sensor_client(clickhouse, context) as client:
                lags = measure_staleness(client, loaded)
                for lag in lags:
                    fqn = lag.target.fqn
                    stale_ticks[fqn] = stale_ticks.get(fqn, 0) + 1 if lag.stale else 0
                    if lag.stale and stale_ticks[fqn] >= STALE_TICKS:
                        partitions = catchup_partitions(translator.get_partitions_def(loaded, lag.target), lag)
                        for partition in partitions:
                            failing.setdefault(entry_key(lag.target, partition), "stale")
                    elif not lag.stale:
                        resolved |= {k for k, e in ledger.items() if e.get("reason") == "stale" and k.startswith(fqn + "|")}
                decisions = plan(ledger, failing, resolved, time.time(), max_attempts=config.recovery_max_attempts,
                                 cooldown_seconds=config.recovery_cooldown_minutes * 60)  # fmt: skip
                repaired: dict[ObjectRef, tuple[str, ...]] = {}
                blocked: set[ObjectRef] = set()
                for decision in decisions:
                    target, partition = split_key(decision.key)
                    where = f"{target.fqn} partition {partition or '(all)'}"
                    if decision.action == "cooldown":
                        context.log.info(f"{where}: {decision.reason}, attempt {decision.attempt} waits for the cooldown")
                        continue
                    if decision.action == "gave_up":
                        continue
                    if decision.action == "exhausted":
                        message = (f"{where}: recovery gave up after {decision.attempt} attempt(s) ({decision.reason}); "
                                   "fix it by hand, then clear the ledger entry by a passing parity check")  # fmt: skip
                        context.log.error(message)
                        sink.send(Alert("recovery_exhausted", "error", target.fqn, message,
                                        {"partition": partition, "attempts": decision.attempt,
                                         "reason": decision.reason}), context.log)  # fmt: skip
                        continue
                    entry = ledger[decision.key]
                    rebuild = planned_rebuild(client, loaded, translator, target, partition)
                    if rebuild.refused:  # never request what the planner would refuse: the run would only fail
                        entry["attempts"] = decision.attempt - 1
                        if entry.get("refused") != rebuild.refusal():
                            entry["refused"] = rebuild.refusal()
                            context.log.error(f"{where}: not rebuilt, the planner refuses it:\n{rebuild.refusal()}")
                            sink.send(Alert("recovery_refused", "error", target.fqn, rebuild.refusal(),
                                            {"partition": partition, "reason": decision.reason}), context.log)  # fmt: skip
                        continue
                    entry.pop("refused", None)
                    if target not in repaired:
                        repair = tier1_repair(client, loaded.project, target, log=context.log.info)
                        repaired[target] = repair.actions
                        for blocker in repair.blockers:
                            sink.send(Alert("recovery", "error", target.fqn, blocker), context.log)
                        if repair.blockers:
                            blocked.add(target)
                    if target in blocked:
                        continue  # the attempt is counted: the limit ends the loop if nobody deploys the object
                    actions = repaired[target]
                    engines = ", ".join(sorted({str(step.engine) for step in rebuild.steps}))
                    context.log.info(f"{where}: {decision.reason} → rebuild attempt {decision.attempt}/"
                                     f"{config.recovery_max_attempts} ({engines})"
                                     + (f" after tier 1: {'; '.join(actions)}" if actions else ""))  # fmt: skip
                    sink.send(Alert("recovery", "info", target.fqn, f"{where}: {decision.reason}, rebuild attempt "
                                    f"{decision.attempt}", {"partition": partition, "tier1": list(actions),
                                                            "engine": engines}), context.log)  # fmt: skip
                    due.setdefault(target, []).append(_Due(decision, partition, engines, actions))
                requests = [request for target, items in due.items()
                            for request in recovery_requests(loaded, translator, jobs[target].name, target, items)]  # fmt: skip
        except SensorSkip as skip:
            return SkipReason(str(skip))
        new_cursor = json.dumps({"verdicts_after": last_event, "ledger": ledger, "stale_ticks": stale_ticks},
                                sort_keys=True)  # fmt: skip
        if not requests:
            return SensorResult(skip_reason=SkipReason(f"{len(ledger)} partition(s) in the recovery ledger, no run due"),
                                cursor=new_cursor)  # fmt: skip
        return SensorResult(run_requests=requests, cursor=new_cursor)

    return _recovery


def build_drift_sensor(loaded: LoadedProject, translator: ChmvTranslator) -> SensorDefinition:
    """Re-evaluate drift whenever the DDL directory's files change."""
    config = loaded.config
    sink = sink_for(config.alert_webhook)
    drift_keys = [check_key(translator, t, DRIFT) for t in loaded.project.targets]

    @sensor(name="chmv_drift", minimum_interval_seconds=60, target=AssetSelection.checks(*drift_keys), default_status=DefaultSensorStatus.RUNNING,
            description="When the DDL directory changes: re-parse it, diff it against the server, run the drift checks.")  # fmt: skip
    def _drift(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        cursor = _cursor(context)
        digest = ddl_hash(config.ddl_dir)
        if cursor.get("hash") == digest:
            return SkipReason("DDL directory unchanged")
        try:
            current = load(config.ddl_dir)
        except DDLError as err:
            sink.send(Alert("drift", "error", "chmv", f"the changed DDL directory does not parse: {err}"), context.log)
            return SensorResult(skip_reason=SkipReason("DDL directory does not parse"),
                                cursor=json.dumps({"hash": digest}))  # fmt: skip
        try:
            with sensor_client(clickhouse, context) as client:
                report = drift_report(client, current.project, current.project.targets)
        except SensorSkip as skip:
            return SkipReason(str(skip))
        drifted = {t: items for t, items in report.items() if items}
        for target, items in drifted.items():
            sink.send(Alert("drift", "error", target.fqn, f"{len(items)} difference(s) from the DDL: "
                            + "; ".join(str(i) for i in items[:5]), {"items": [str(i) for i in items]}), context.log)  # fmt: skip
        context.log.info(f"DDL directory changed ({digest[:12]}): {len(drifted)} target(s) drift from it")
        stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
        return SensorResult(
            run_requests=[RunRequest(run_key=f"chmv-drift:{digest}:{stamp}", asset_selection=[],
                                     asset_check_keys=drift_keys, tags={"chmv/reason": "ddl_changed"})]
            if drift_keys else [],
            cursor=json.dumps({"hash": digest, "drifted": sorted(t.fqn for t in drifted)}),
        )  # fmt: skip

    return _drift


def build_sensors(loaded: LoadedProject, translator: ChmvTranslator) -> list[SensorDefinition]:
    """The sensors of this module: staleness, recovery and drift (the live-state sensor is in live_state)."""
    return [
        build_staleness_sensor(loaded, translator),
        build_recovery_sensor(loaded, translator),
        build_drift_sensor(loaded, translator),
    ]
