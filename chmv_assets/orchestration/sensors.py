"""Sensors of chmv: watermark staleness, auto-recovery, drift. None of them executes DDL.

- ``chmv_staleness``: one batched measurement per tick (chmv_assets.engine.health.staleness); a target past the SLA
  raises an alert (once per episode). The episodes are one memory both this sensor and ``chmv_recovery`` keep
  (chmv_assets.engine.health.staleness_memory, stored in the Dagster instance per server: :func:`shared_staleness`).
- ``chmv_recovery``: the one request path of rebuilds. Partitions whose parity check failed (read from the
  instance's check evaluations: the parity sweep's, runs', manual ones), whose staleness persisted across ticks,
  or whose upstream partition was repaired, get the tiered repair of chmv_assets.engine.health.recovery: what needs DDL
  first (an MV missing or detached: a run of the ``chmv_apply`` job for those objects; a live SELECT that differs
  from the DDL: "apply pending", nothing rebuilt), then a rebuild run per range of consecutive partitions, never
  one the planner would refuse nor one a run in progress already covers (:mod:`.requests`). One retry policy for
  every repair (chmv_assets.engine.health.recovery.RetryPolicy), its typed ledger in the cursor; each rebuild
  request carries the planner's verdict, which the run executes.
- ``chmv_drift``: when the files of the DDL directory change, re-parses them, reports drift against the
  server and requests a run of the drift checks (with lint and part counts at the first tick).

Every tick runs within a budget that ends before Dagster's deadline (:mod:`.sensor_client`): a busy engine, an
unreachable or silent server, or a spent budget skips the tick with the reason (the cursor is kept, so the next
tick catches up). Anything else raises.
"""

import hashlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError
from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetSelection,
    DagsterInstance,
    DefaultSensorStatus,
    JobDefinition,
    PartitionsDefinition,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    sensor,
)

from asset_checks.definitions import DRIFT, LINT, PARITY, PARTS, check_key, targets_by_key
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import TargetPartitioning, decode_key, time_of
from chmv_assets.engine.clock import wall_now
from chmv_assets.engine.drift import describe_pending, drift_report
from chmv_assets.engine.health.cursors import decode_cursor, encode_cursor
from chmv_assets.engine.health.recovery import (
    Action,
    DdlRepair,
    Decision,
    Ledger,
    RebuildVerdict,
    RepairKind,
    RetryPolicy,
    ddl_repair,
    entry_key,
    split_key,
)
from chmv_assets.engine.health.server_health import views_off
from chmv_assets.engine.health.staleness import TargetLag, measure_staleness
from chmv_assets.engine.health.staleness_memory import StalenessMemory
from chmv_assets.engine.ingest.landing import landing_dir
from chmv_assets.engine.rebuild import deferrals
from chmv_assets.engine.rebuild.coverage import mappings
from chmv_assets.engine.rebuild.planner import RebuildPlan, observe, plan_rebuild, windows_covering
from chmv_assets.errors import DDLError
from chmv_assets.orchestration.dagster_compat import check_partition_statuses, shared_value, store_shared_value
from chmv_assets.orchestration.partitions import dynamic_name
from chmv_assets.orchestration.requests import Due, InFlight, apply_request, in_flight, rebuild_requests
from chmv_assets.orchestration.sensor_client import SensorSkip, TickBudget, sensor_client, tick_cursor
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

#: What ``define_asset_job`` returns: its class (AssetJob) is not public API.
AssetJob = Any
#: Most catch-up or recovery runs one target gets per tick.
MAX_RUNS_PER_TARGET = 24
#: Ticks an MV must be seen detached or missing before recovery restores it.
STALE_TICKS = 2
#: Cursor formats (:mod:`chmv_assets.engine.health.cursors`): a cursor of another version is read as empty. The staleness
#: sensor's cursor of format 1 held its episodes (adopted into the shared memory once); format 2 holds nothing.
STALENESS_CURSOR_VERSION = 2
DRIFT_CURSOR_VERSION = 1


def catchup_partitions(
    partitioning: TargetPartitioning,
    lag: TargetLag,
    instance: DagsterInstance | None = None,
    now: datetime | None = None,
) -> list[str | None]:
    """The partition keys between the target's newest value and what it should hold (None: unpartitioned), from the
    target's partitioning (:meth:`~chmv_assets.ddl.partitioning.TargetPartitioning.windows`), as far as the partition
    holding ``now`` (Dagster's last).

    A time × key target: those windows for every key value Dagster knows (``instance``'s dynamic partitions); a key
    alone: none (which value lags is not measured: the parity sweep finds the partitions whose sources changed).
    """
    if not partitioning.partitioned:
        return [None]
    if not partitioning.timed or lag.expected_max is None:
        return []
    values: list[tuple[str, ...]] = []
    if partitioning.keyed:
        assert partitioning.target is not None
        known = instance.get_dynamic_partitions(dynamic_name(partitioning.target)) if instance is not None else []
        values = [decode_key(v) for v in known]
        if not values:
            return []
    now = now or datetime.now(UTC)
    windows = partitioning.windows(lag.target_max or lag.expected_max, lag.expected_max, values=values)
    keys: list[str | None] = [w.key for w in windows if w is not None and w.start is not None and w.start <= now]
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
    defs: dict[str, PartitionsDefinition | None] = {}
    for target in loaded.project.targets:
        partitions_def = translator.get_partitions_def(loaded, target)
        name = f"chmv_rebuild_{loaded.partitioning(target).job_suffix}"
        while name in defs and defs[name] != partitions_def:
            name += "_"
        defs[name] = partitions_def
        groups.setdefault(name, []).append(target)
    jobs = {}
    for name, targets in groups.items():
        job = define_asset_job(
            name,
            selection=AssetSelection.assets(*(translator.get_asset_key(t) for t in targets)),
            partitions_def=defs[name],
            description="Rebuild of MV targets requested by the chmv_recovery sensor (failed parity, staleness, repairs).",
        )
        jobs.update({t: job for t in targets})
    return jobs


def _jobs(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetJob]:
    return list({id(j): j for j in rebuild_jobs(loaded, translator).values()}.values())


def build_staleness_sensor(loaded: LoadedProject, translator: ChmvTranslator) -> SensorDefinition:
    """Alert on targets lagging their sources past ``sla_minutes`` (once per episode).

    The catch-up itself is ``chmv_recovery``'s (the one request path): it rebuilds the lagging partitions of a
    target whose staleness persists, deduplicated with its other requests and the runs in progress.
    """
    sink = sink_for(loaded.config.alert_webhook)

    @sensor(
        name="chmv_staleness",
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Targets and watermarks lagging their sources past the SLA: alert once per episode "
        "(chmv_recovery requests the catch-up).",
    )
    def _staleness(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        cursor = tick_cursor(context)
        budget = TickBudget()
        try:
            with sensor_client(clickhouse, context, budget) as client:
                lags = measure_staleness(client, loaded)
        except SensorSkip as skip:
            return SkipReason(str(skip))
        with shared_staleness(context, clickhouse) as memory:
            if cursor.version == 1 and memory.adopt(cursor.data.get("stale", {}), cursor.data.get("missing", {})):
                context.log.info("the staleness episodes of this sensor's former cursor are now the shared memory's")
            observed = memory.observe(lags, time.time())
            for fqn, lag_seconds in observed.caught_up:
                context.log.info(f"{fqn} caught up (lag {lag_seconds:.0f}s)")
            for lag in lags:
                fqn = lag.target.fqn
                if lag.missing and memory.missing_changed(fqn, lag.missing):
                    message = (
                        f"cannot measure staleness: {', '.join(lag.missing)} does not exist on the server; "
                        "deploy with `chmv apply`"
                    )
                    sink.send(Alert("stale", "error", fqn, message), context.log)
                elif lag.stale and not memory.episodes[fqn].alerted:  # the episode's first alert
                    details = {
                        "lag_seconds": lag.lag_seconds,
                        "watermark_lag_seconds": lag.watermark_lag_seconds,
                        "target_max": str(lag.target_max),
                        "expected_max": str(lag.expected_max),
                    }
                    message = "; ".join(lag.reasons) + ": chmv_recovery catches up if it persists"
                    sink.send(Alert("stale", "warning", fqn, message, details), context.log)
                    memory.alerted(fqn)
            summary = f"{len(memory.episodes)} stale target(s), {len(memory.missing)} not measurable"
        return SensorResult(skip_reason=SkipReason(summary), cursor=encode_cursor({}, STALENESS_CURSOR_VERSION))

    return _staleness


def staleness_key(clickhouse: ClickHouseResource) -> str:
    """The key of one server's staleness memory in the Dagster instance (:func:`shared_staleness`)."""
    return f"chmv/staleness/{hashlib.sha256(clickhouse.resolved_dsn.encode()).hexdigest()[:16]}"


@contextmanager
def shared_staleness(context: SensorEvaluationContext, clickhouse: ClickHouseResource) -> Iterator[StalenessMemory]:
    """The staleness memory of the server ``clickhouse`` names, shared by the sensors that measure staleness: read
    from the Dagster instance, stored back when the block completes (not when it raises: the tick is skipped)."""
    key = staleness_key(clickhouse)
    stored = shared_value(context.instance, key)
    try:
        memory = StalenessMemory.from_data(json.loads(stored) if stored else None)
    except ValueError:
        memory = StalenessMemory()
    yield memory
    store_shared_value(context.instance, key, json.dumps(memory.to_data(), separators=(",", ":")))


def parity_outcomes(
    context: SensorEvaluationContext, keys_to_targets: dict[AssetKey, ObjectRef], after: int
) -> tuple[dict[str, bool], int]:
    """``entry key → passed`` of the parity verdicts stored after event storage id ``after``; the new watermark.

    One call for every target: the instance's per-partition index of check executions, which gives the
    latest execution of each partition and the storage id of its evaluation event (runs, the sweep's
    runs and manual check runs alike). A run's evaluation is stored after everything this tick saw, so
    a verdict still pending now is read at a later tick.
    """
    check_keys = {AssetCheckKey(key, PARITY): target for key, target in keys_to_targets.items()}
    outcomes: dict[str, bool] = {}
    last = after
    for status in check_partition_statuses(context.instance, list(check_keys), after_storage_id=after or None):
        if status.storage_id <= after or status.status not in _VERDICTS:
            continue  # an older verdict (listed for a newer materialization) or one still running
        outcomes[entry_key(check_keys[status.check_key], status.partition_key)] = _VERDICTS[status.status]
        last = max(last, status.storage_id)
    return outcomes, last


#: Check execution statuses that are a verdict (storage values of Dagster's AssetCheckExecutionRecordStatus).
_VERDICTS = {"SUCCEEDED": True, "FAILED": False}


def downstream_entries(
    loaded: LoadedProject, translator: ChmvTranslator, target: ObjectRef, partition: str | None
) -> list[str]:
    """Ledger keys of the partitions of the targets that read ``target`` directly, for one of its partitions.

    A child's rows of a parent window land in the child's windows the MV's time mapping says: a weekly
    rollup of a day lands in the week starting up to 6 days before it (the window's start moves back by
    the truncation's length). Grandchildren follow once the children pass (their own repair).
    """
    window = time_of(loaded.partitioning(target).window_of(partition))  # a child's windows follow the parent's time
    # window (a key alone: the whole table)
    children = dict.fromkeys(v.writes_to for v in loaded.project.views_from(target) if v.trigger == target)
    keys = []
    for child in children:
        if loaded.partitioning(child).keyed:
            continue  # partitions named by key values: the sweep checks the ones whose source changed
        if window is None:
            windows = windows_covering(loaded, child, datetime(1970, 1, 2), datetime(2106, 1, 1))
            if windows != [None]:
                continue  # a whole-table parent: the child's history is too wide to guess; the sweep checks it
        else:
            mapping = mappings(loaded, child).get(target)
            back = mapping.reach if mapping is not None else timedelta(0)
            assert window.start is not None and window.end is not None  # time_of: a time window
            windows = windows_covering(loaded, child, window.start - back, window.end - timedelta(microseconds=1))
        keys += [entry_key(child, w.key if w else None) for w in windows]
    return keys


def planned_rebuild(
    client, loaded: LoadedProject, translator: ChmvTranslator, target: ObjectRef, partition: str | None
) -> RebuildPlan:
    """What a rebuild of the partition would do now: the same planner (and coverage) the run will use."""
    window = loaded.partitioning(target).window_of(partition)
    root = landing_dir(loaded)
    observations = observe(client, loaded, target, root=root, windows=[window])
    return plan_rebuild(loaded, target, [window], observations, root=root)


#: Recovery's cursor format (:class:`_RecoveryState`): format 2 (an untyped ledger) is read into the typed one; another
#: is read as empty but for its verdicts' watermark (the ledger starts again, with a log line saying so).
RECOVERY_CURSOR_VERSION = 3


@dataclass
class _RecoveryState:
    """Recovery's memory between ticks (its cursor): the ledger is the engine's (serialized by it), the rest the
    sensor's."""

    verdicts_after: int = 0
    ledger: Ledger = field(default_factory=Ledger)
    alerted: dict = field(default_factory=dict)  # target fqn → the last "held" message alerted
    views_off: dict = field(default_factory=dict)  # MV fqn → consecutive ticks it was seen detached or missing
    stale_ticks: dict = field(default_factory=dict)  # format 2's count of stale ticks, for the shared memory to adopt

    @classmethod
    def read(cls, context: SensorEvaluationContext) -> "_RecoveryState":
        cursor = tick_cursor(context)
        data = cursor.data
        verdicts_after = data.get("verdicts_after", 0)
        verdicts_after = verdicts_after if isinstance(verdicts_after, int) else 0
        if cursor.version == RECOVERY_CURSOR_VERSION:
            try:
                ledger = Ledger.from_data(data.get("ledger", {}))
            except ValueError as err:
                context.log.warning(f"recovery: the ledger of the cursor cannot be read ({err}); it starts afresh")
                ledger = Ledger()
            return cls(verdicts_after, ledger, data.get("alerted", {}), data.get("views_off", {}))
        if cursor.version == 2:  # the untyped ledger of chmv before typed ledgers
            ledger = Ledger.from_cursor_v2(data.get("ledger", {}), data.get("repairs", {}))
            context.log.info("recovery: a cursor of format 2 read, its ledger carried into the typed one")
            state = cls(verdicts_after, ledger, data.get("alerted", {}), data.get("views_off", {}))
            state.stale_ticks = data.get("stale_ticks", {})
            return state
        if cursor.version or cursor.unreadable:
            context.log.warning(
                f"recovery: a cursor of format {cursor.version or '(unreadable)'} is not read; the ledger starts afresh "
                "(attempts and limits count from zero)"
            )
        return cls(verdicts_after=verdicts_after)

    def dumps(self) -> str:
        data = {
            "verdicts_after": self.verdicts_after,
            "ledger": self.ledger.to_data(),
            "alerted": self.alerted,
            "views_off": self.views_off,
        }
        return encode_cursor(data, RECOVERY_CURSOR_VERSION)


def read_ledger(cursor: str | None) -> Ledger:
    """The ledger a recovery cursor holds (empty for another format)."""
    decoded = decode_cursor(cursor)
    if decoded.version != RECOVERY_CURSOR_VERSION:
        return Ledger()
    return Ledger.from_data(decoded.data.get("ledger", {}))


#: Seconds of the tick's budget kept back when recovery plans rebuilds (one coverage probe each).
_PLAN_RESERVE_SECONDS = 3.0


def build_recovery_sensor(loaded: LoadedProject, translator: ChmvTranslator, apply: JobDefinition) -> SensorDefinition:
    """Repair partitions whose parity failed or whose staleness persisted, within a retry budget: the one place
    that requests rebuilds (:mod:`chmv_assets.orchestration.requests`), and DDL repairs as ``chmv_apply`` runs."""
    config = loaded.config
    sink = sink_for(config.alert_webhook)
    keys_to_targets = targets_by_key(loaded, translator)
    jobs = rebuild_jobs(loaded, translator)
    applies = config.sweep.recovery_apply
    policy = RetryPolicy(config.recovery_max_attempts, config.recovery_cooldown_minutes * 60)

    @sensor(
        name="chmv_recovery",
        minimum_interval_seconds=config.sweep.recovery_interval_seconds,
        jobs=[*_jobs(loaded, translator), apply],
        default_status=DefaultSensorStatus.RUNNING,
        description="The one request path of rebuilds: failed parity, persistent staleness, repaired upstream "
        "partitions, deduplicated with the runs in progress; MVs missing or detached are restored by a chmv_apply "
        "run; a changed SELECT waits for chmv apply.",
    )
    def _recovery(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        budget = TickBudget()
        state = _RecoveryState.read(context)
        ledger = state.ledger
        rebuilds = ledger.of(RepairKind.REBUILD)
        outcomes, last_event = parity_outcomes(context, keys_to_targets, state.verdicts_after)
        failing = {k: "parity_failed" for k, passed in outcomes.items() if not passed}
        resolved = {k for k, passed in outcomes.items() if passed}
        # a partition this loop rebuilt now passes: the targets reading it re-derive the same rows next
        for key in sorted(resolved - set(failing)):
            entry = rebuilds.get(key)
            if entry is not None and entry.attempts > 0:
                target, partition = split_key(key)
                for child_key in downstream_entries(loaded, translator, target, partition):
                    failing.setdefault(child_key, f"upstream_repaired:{target.fqn}")
                    context.log.info(f"{key} repaired: {child_key} reads it and is rebuilt next")
        flight = in_flight(context.instance, loaded, translator, keys_to_targets)
        requests: list[RunRequest] = []
        try:
            with sensor_client(clickhouse, context, budget) as client:
                lags = measure_staleness(client, loaded)
                with shared_staleness(context, clickhouse) as memory:
                    memory.adopt(stale_ticks=state.stale_ticks)
                    memory.observe(lags, time.time())
                    persistent = memory.persistent()
                for lag in lags:
                    fqn = lag.target.fqn
                    if fqn in persistent:
                        partitioning = loaded.partitioning(lag.target)
                        partitions = catchup_partitions(partitioning, lag, context.instance)
                        for partition in partitions:
                            failing.setdefault(entry_key(lag.target, partition), "stale")
                    elif not lag.stale:
                        resolved |= {k for k, e in rebuilds.items() if e.reason == "stale" and k.startswith(fqn + "|")}
                for key in due_deferrals(client, loaded):  # left until they closed, or damaged by a raced swap
                    failing.setdefault(key, "deferred")
                budget.check("reading the drift of the failing targets")
                open_keys = (set(rebuilds) - (resolved - set(failing))) | set(failing)
                # "changes": every pending change is applied, failing or not; else only what failing targets need
                scope = set(loaded.project.targets) if applies == "changes" else {split_key(k)[0] for k in open_keys}
                scope |= _targets_with_views_off(client, loaded, state) if applies != "never" else set()
                repairs = _ddl_repairs(client, loaded, scope)
                held = _held(open_keys, repairs, flight, applies)
                now = time.time()
                ledger.track(RepairKind.REBUILD, failing, resolved, now)
                decisions = ledger.decide(RepairKind.REBUILD, policy, now, held)
                requests += _repair_requests(context, ledger, repairs, flight, applies, now, sink)
                due: dict[ObjectRef, list[Due]] = {}
                for number, decision in enumerate(decisions):
                    if decision.action == Action.DUE and budget.remaining() < _PLAN_RESERVE_SECONDS:
                        waiting = [d for d in decisions[number:] if d.action == Action.DUE]
                        context.log.warning(  # not requested: their attempt is not used
                            f"the tick's budget is spent: {len(waiting)} rebuild(s) wait for the next tick"
                        )
                        break
                    item = _decide(context, client, decision, ledger, sink)
                    if item is not None:
                        ledger.spend(decision, now)
                        due.setdefault(split_key(decision.key)[0], []).append(item)
                for target, items in due.items():
                    requests += rebuild_requests(loaded, translator, jobs[target].name, target, items)
                _alert_held(context, state, decisions, sink)
        except SensorSkip as skip:
            return SkipReason(str(skip))
        state.verdicts_after = last_event
        if not requests:
            summary = f"{len(rebuilds)} partition(s) in the recovery ledger, no run due"
            return SensorResult(skip_reason=SkipReason(summary), cursor=state.dumps())
        return SensorResult(run_requests=requests, cursor=state.dumps())

    def _decide(context, client, decision: Decision, ledger: Ledger, sink) -> Due | None:
        """A ``due`` rebuild after the planner's word (a refusal is alerted, not requested); else log it."""
        target, partition = split_key(decision.key)
        where = f"{target.fqn} partition {partition or '(all)'}"
        if decision.action == Action.COOLDOWN:
            context.log.info(f"{where}: {decision.reason}, attempt {decision.attempt} waits for the cooldown")
            return None
        if decision.action == Action.HELD:
            context.log.info(f"{where}: waits ({decision.reason})")
            return None
        if decision.action == Action.GAVE_UP:
            return None
        if decision.action == Action.EXHAUSTED:
            message = (
                f"{where}: recovery gave up after {decision.attempt} attempt(s) ({decision.reason}); "
                "fix it by hand, then clear the ledger entry by a passing parity check"
            )
            context.log.error(message)
            details = {"partition": partition, "attempts": decision.attempt, "reason": decision.reason}
            sink.send(Alert("recovery_exhausted", "error", target.fqn, message, details), context.log)
            return None
        rebuild = planned_rebuild(client, loaded, translator, target, partition)
        if rebuild.refused:  # never request what the planner would refuse: the run would only fail
            if ledger.note_refusal(decision.key, rebuild.refusal()):
                context.log.error(f"{where}: not rebuilt, the planner refuses it:\n{rebuild.refusal()}")
                details = {"partition": partition, "reason": decision.reason}
                sink.send(Alert("recovery_refused", "error", target.fqn, rebuild.refusal(), details), context.log)
            return None
        ledger.note_refusal(decision.key, None)
        if rebuild.deferred and len(rebuild.deferred) == len(rebuild.steps):  # open to writers: it would only wait
            context.log.info(f"{where}: {decision.reason}, not requested yet: {rebuild.deferral()}")
            return None
        verdict = RebuildVerdict.of_plan(rebuild)
        engines = ", ".join(sorted(set(verdict.engine_of().values()) or {str(s.engine) for s in rebuild.steps}))
        context.log.info(
            f"{where}: {decision.reason} → rebuild attempt {decision.attempt}/"
            f"{config.recovery_max_attempts} ({engines})"
        )
        details = {"partition": partition, "engine": engines}
        message = f"{where}: {decision.reason}, rebuild attempt {decision.attempt}"
        sink.send(Alert("recovery", "info", target.fqn, message, details), context.log)
        episode = int(ledger.of(RepairKind.REBUILD)[decision.key].since)
        return Due(decision, partition, verdict, episode)

    def _repair_requests(
        context,
        ledger: Ledger,
        repairs: dict[ObjectRef, DdlRepair],
        flight: InFlight,
        applies: str,
        now: float,
        sink,
    ) -> list[RunRequest]:
        """One ``chmv_apply`` run for the objects this tick's repairs need (none while one is in progress), retried
        by the same policy as the rebuilds."""
        objects: set[ObjectRef] = set()
        why: list[str] = []
        for target, repair in sorted(repairs.items(), key=lambda kv: kv[0].fqn):
            if repair.restore and applies in ("restore", "changes"):
                objects |= set(repair.restore)
                why.append(f"{target.fqn}: {repair.describe()}")
            if repair.pending and applies == "changes":
                objects |= {
                    ObjectRef(database=i.object.split(".")[0], name=i.object.split(".", 1)[1]) for i in repair.pending
                }
                why.append(f"{target.fqn}: {repair.describe()}")
        signature = ",".join(sorted(o.fqn for o in objects))
        reason = "; ".join(why)
        others = [k for k in ledger.of(RepairKind.APPLY) if k != signature]
        ledger.track(RepairKind.APPLY, {signature: reason} if objects else {}, others, now)
        if not objects:
            return []
        held = {signature: "a chmv_apply run is in progress"} if flight.apply_running() else {}
        (decision,) = ledger.decide(RepairKind.APPLY, policy, now, held)
        if decision.action == Action.EXHAUSTED:
            message = (
                f"the chmv_apply run restoring {signature} failed {decision.attempt} time(s); see its runs, fix the "
                "cause, then run chmv apply"
            )
            sink.send(Alert("recovery_exhausted", "error", signature, message), context.log)
            return []
        if decision.action != Action.DUE:
            return []
        entry = ledger.spend(decision, now)
        context.log.info(f"requesting a chmv_apply run for {signature} (attempt {decision.attempt}): {reason}")
        sink.send(Alert("recovery", "info", signature, f"DDL repair through chmv_apply: {reason}"), context.log)
        return [apply_request(objects, f"restore: {reason}", episode=int(entry.since), attempt=decision.attempt)]

    def _alert_held(context, state: _RecoveryState, decisions: list[Decision], sink) -> None:
        """Alert once per target and reason why its partitions wait (a pending change, a repair)."""
        reasons: dict[str, str] = {}
        for decision in decisions:
            if decision.action == Action.HELD and not decision.reason.startswith("a run"):
                reasons.setdefault(split_key(decision.key)[0].fqn, decision.reason)
        for fqn, reason in reasons.items():
            if state.alerted.get(fqn) != reason:
                sink.send(Alert("recovery_held", "error", fqn, reason), context.log)
        state.alerted = reasons

    return _recovery


def due_deferrals(client, loaded: LoadedProject) -> list[str]:
    """Ledger keys of the partitions rebuilds deferred while they were open and that have closed since
    (:mod:`chmv_assets.engine.rebuild.deferrals`; one query; none while chmv_meta does not exist)."""
    targets = set(loaded.project.targets)
    try:
        found = deferrals.pending(client, due_by=wall_now(client))  # a window's close, on the server's wall clock
    except ClickHouseError:
        return []
    return [
        entry_key(d.target, None if d.partition == deferrals.WHOLE else d.partition)
        for d in found
        if d.target in targets
    ]


def _targets_with_views_off(client, loaded: LoadedProject, state: _RecoveryState) -> set[ObjectRef]:
    """Targets with an MV of the DDL directory, or their own table, detached or missing at this tick and the one before
    (one query, :func:`chmv_assets.engine.health.server_health.views_off`): they need a ``chmv_apply`` run even when no failing
    partition points at them (no row arrived yet). Two ticks, so a stream consumer a rebuild pauses for its swap
    (seconds) is never restored under it."""
    off = views_off(client, loaded.project)
    seen = {v.fqn: state.views_off.get(v.fqn, 0) + 1 for views in off.values() for v in views}
    state.views_off = seen
    return {target for target, views in off.items() if any(seen[v.fqn] >= STALE_TICKS for v in views)}


def _ddl_repairs(client, loaded: LoadedProject, targets: set[ObjectRef]) -> dict[ObjectRef, DdlRepair]:
    """Per target, what it needs of DDL first (three catalog queries for all of them, one more if an MV is missing)."""
    if not targets:
        return {}
    report = drift_report(client, loaded.project, sorted(targets, key=lambda t: t.fqn))
    detached: set[ObjectRef] = set()
    missing_views = {i.object for items in report.values() for i in items if i.kind == "missing_object"}
    if any(v.ref.fqn in missing_views for v in loaded.project.views.values()):
        detached = set(detached_refs(client, {fqn.split(".")[0] for fqn in missing_views}))
    return {t: ddl_repair(loaded.project, report[t], detached) for t in targets}


def detached_refs(client, databases: set[str]) -> list[ObjectRef]:
    rows = client.query(
        "SELECT database, table FROM system.detached_tables WHERE database IN {dbs:Array(String)}",
        parameters={"dbs": sorted(databases)},
    ).result_rows
    return [ObjectRef(database=d, name=n) for d, n in rows]


def _held(keys: set[str], repairs: dict[ObjectRef, DdlRepair], flight: InFlight, applies: str) -> dict[str, str]:
    """Which open ledger entries wait this tick, and why (no attempt is used meanwhile)."""
    held = {}
    for key in keys:
        target, partition = split_key(key)
        repair = repairs.get(target)
        if flight.apply_running():
            held[key] = "a chmv_apply run is in progress; rebuilds wait for it"
        elif repair is not None and repair.pending:
            held[key] = describe_pending(repair.pending) + (
                "" if applies == "changes" else " (recovery does not apply changes: [sweep] recovery_apply)"
            )
        elif repair is not None and repair.restore:
            how = "a chmv_apply run restores them" if applies != "never" else "run chmv apply ([sweep] recovery_apply)"
            held[key] = f"{repair.describe()}: {how}"
        elif flight.covers(target, partition):
            held[key] = "a run in progress already materializes it"
    return held


def build_drift_sensor(loaded: LoadedProject, translator: ChmvTranslator) -> SensorDefinition:
    """Re-evaluate drift whenever the DDL directory's files change; the first tick evaluates lint and part counts
    too, so every check shows a verdict from the start."""
    config = loaded.config
    sink = sink_for(config.alert_webhook)
    drift_keys = [check_key(translator, t, DRIFT) for t in loaded.project.targets]
    first_keys = [check_key(translator, t, name) for t in loaded.project.targets for name in (LINT, PARTS)]

    @sensor(
        name="chmv_drift",
        minimum_interval_seconds=60,
        target=AssetSelection.checks(*drift_keys, *first_keys),
        default_status=DefaultSensorStatus.RUNNING,
        description="When the DDL directory changes: re-parse it, diff it against the server, run the drift checks "
        "(and lint and part counts at the first tick).",
    )
    def _drift(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        cursor = tick_cursor(context).of(DRIFT_CURSOR_VERSION)
        digest = ddl_hash(config.ddl_dir)
        if cursor.get("hash") == digest:
            return SkipReason("DDL directory unchanged")
        try:
            current = load(config.ddl_dir)
        except DDLError as err:
            sink.send(Alert("drift", "error", "chmv", f"the changed DDL directory does not parse: {err}"), context.log)
            return SensorResult(
                skip_reason=SkipReason("DDL directory does not parse"),
                cursor=encode_cursor({"hash": digest}, DRIFT_CURSOR_VERSION),
            )
        try:
            with sensor_client(clickhouse, context) as client:
                report = drift_report(client, current.project, current.project.targets)
        except SensorSkip as skip:
            return SkipReason(str(skip))
        drifted = {t: items for t, items in report.items() if items}
        for target, items in drifted.items():
            sink.send(
                Alert(
                    "drift",
                    "error",
                    target.fqn,
                    f"{len(items)} difference(s) from the DDL: " + "; ".join(str(i) for i in items[:5]),
                    {"items": [str(i) for i in items]},
                ),
                context.log,
            )
        context.log.info(f"DDL directory changed ({digest[:12]}): {len(drifted)} target(s) drift from it")
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        keys = drift_keys if "hash" in cursor else [*drift_keys, *first_keys]
        return SensorResult(
            run_requests=[
                RunRequest(
                    run_key=f"chmv-drift:{digest}:{stamp}",
                    asset_selection=[],
                    asset_check_keys=keys,
                    tags={"chmv/reason": "ddl_changed"},
                )
            ]
            if drift_keys
            else [],
            cursor=encode_cursor({"hash": digest, "drifted": sorted(t.fqn for t in drifted)}, DRIFT_CURSOR_VERSION),
        )

    return _drift


def build_sensors(loaded: LoadedProject, translator: ChmvTranslator, apply: JobDefinition) -> list[SensorDefinition]:
    """The sensors of this module: staleness, recovery and drift (the live-state sensor is in live_state).

    Args:
        apply: The ``chmv_apply`` job (``chmv_assets.orchestration.jobs``): recovery's DDL repairs are its runs.
    """
    return [
        build_staleness_sensor(loaded, translator),
        build_recovery_sensor(loaded, translator, apply),
        build_drift_sensor(loaded, translator),
    ]
