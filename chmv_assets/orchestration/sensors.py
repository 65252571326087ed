"""Sensors of chmv: watermark staleness, auto-recovery, drift.

- ``chmv_staleness``: one batched measurement per tick (chmv_assets.engine.staleness); a target past the SLA
  raises an alert (once per episode) and requests catch-up runs of the lagging partitions.
- ``chmv_recovery``: partitions whose parity check failed (read from the instance's check evaluations)
  or whose staleness persisted across ticks get the tiered repair of chmv_assets.engine.recovery: the
  cheapest fix on the MV first, then a rebuild run per partition; cooldown and retry limit in the cursor.
- ``chmv_drift``: when the files of the DDL directory change, re-parses them, reports drift against the
  server and requests a run of the drift checks.

The embedded engine is opened with a short lock timeout: a busy engine or an unreachable server skips
the tick with the reason (the cursor is kept, so the next tick catches up). Anything else raises.
"""

import hashlib
import json
import time
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckEvaluation,
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
from chmv_assets.engine.drift import drift_report
from chmv_assets.engine.recovery import entry_key, plan, split_key, tier1_repair
from chmv_assets.engine.staleness import TargetLag, measure_staleness
from chmv_assets.errors import DDLError
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


@cache
def rebuild_jobs(loaded: LoadedProject, translator: ChmvTranslator) -> dict[ObjectRef, AssetJob]:
    """Per target, the job the sensors request its runs in: one job per partitions definition.

    A sensor's runs must name a job whose assets share one partitions definition, so the targets are
    grouped (``chmv_rebuild_day``, ``chmv_rebuild_month``, ``chmv_rebuild_unpartitioned``…); a run
    request then selects one target (and its parity check) and one partition of its job.
    """
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
    """``entry key → passed`` from the parity evaluations recorded after execution id ``after`` (latest wins).

    Reads the instance's asset-check execution index (one small query per target), which every event
    log storage keeps in one place; a cross-run event query would need a run-sharded cursor on the
    default SQLite storage of ``dagster dev``.
    """
    outcomes: dict[str, bool] = {}
    last, pending = after, []
    storage = context.instance.event_log_storage
    for asset_key, target in keys_to_targets.items():
        history = storage.get_asset_check_execution_history(AssetCheckKey(asset_key, PARITY), limit=500)
        for record in sorted(history, key=lambda r: r.id):
            if record.id <= after:
                continue
            event = record.event.dagster_event if record.event is not None else None
            evaluation = event.event_specific_data if event is not None else None
            if not isinstance(evaluation, AssetCheckEvaluation):
                pending.append(record.id)  # planned, still running: read it once it has a result
                continue
            last = max(last, record.id)
            per_partition = evaluation.metadata.get("chmv/partitions")
            if per_partition is not None and isinstance(per_partition.value, dict):
                for partition, passed in per_partition.value.items():
                    outcomes[entry_key(target, partition or None)] = bool(passed)
            else:
                outcomes[entry_key(target, evaluation.partition)] = bool(evaluation.passed)
    if pending:
        last = min(last, min(pending) - 1)
    return outcomes, last


def build_recovery_sensor(loaded: LoadedProject, translator: ChmvTranslator) -> SensorDefinition:
    """Repair partitions whose parity failed or whose staleness persisted, within a retry budget."""
    config = loaded.config
    sink = sink_for(config.alert_webhook)
    keys_to_targets = targets_by_key(loaded, translator)
    jobs = rebuild_jobs(loaded, translator)

    @sensor(name="chmv_recovery", minimum_interval_seconds=120, jobs=_jobs(loaded, translator), default_status=DefaultSensorStatus.RUNNING,
            description="Tiered repair of failed parity / persistent staleness: fix the MV, then rebuild partitions.")  # fmt: skip
    def _recovery(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        cursor = _cursor(context)
        outcomes, last_event = parity_outcomes(context, keys_to_targets, int(cursor.get("event_id", 0)))
        failing = {k: "parity_failed" for k, passed in outcomes.items() if not passed}
        resolved = {k for k, passed in outcomes.items() if passed}
        stale_ticks: dict = cursor.get("stale_ticks", {})
        ledger: dict = cursor.get("ledger", {})
        requests: list[RunRequest] = []
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
                    context.log.info(f"{where}: {decision.reason} → rebuild attempt {decision.attempt}/"
                                     f"{config.recovery_max_attempts}"
                                     + (f" after tier 1: {'; '.join(actions)}" if actions else ""))  # fmt: skip
                    sink.send(Alert("recovery", "info", target.fqn, f"{where}: {decision.reason}, rebuild attempt "
                                    f"{decision.attempt}", {"partition": partition, "tier1": list(actions)}), context.log)  # fmt: skip
                    requests.append(RunRequest(
                        run_key=f"chmv-recover:{decision.key}:{decision.attempt}:{int(ledger[decision.key]['last'])}",
                        job_name=jobs[target].name,
                        asset_selection=[translator.get_asset_key(target)],
                        asset_check_keys=[check_key(translator, target, PARITY)],
                        partition_key=partition,
                        tags={"chmv/reason": decision.reason, "chmv/attempt": str(decision.attempt),
                              "chmv/target": target.fqn, "chmv/tier1": "; ".join(actions)[:250] or "none"},
                    ))  # fmt: skip
        except SensorSkip as skip:
            return SkipReason(str(skip))
        new_cursor = json.dumps({"event_id": last_event, "ledger": ledger, "stale_ticks": stale_ticks}, sort_keys=True)
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
