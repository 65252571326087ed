"""``chmv_health``: watch the server's health continuously and evaluate the health checks when it changes.

Every ``[health] interval_seconds`` a tick looks at the server for every target and its sources at once (the
statements of :func:`chmv_assets.engine.health.server_health.assess`: mutations, MVs detached or missing, read-only tables,
replication on a server) and requests one run of the ``chmv_health`` checks whose verdict changed since the last
tick; every ``[health] report_minutes`` the run evaluates every health and part-count check, so their numbers are
plotted over time. The checks send the failing verdicts to the alert sink with what to do; the sensor executes
nothing (an MV to restore is ``chmv_recovery``'s: a ``chmv_apply`` run).
"""

import time
from datetime import UTC, datetime

from dagster import (
    AssetCheckKey,
    AssetSelection,
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from asset_checks.definitions import HEALTH, PARTS, check_key
from asset_checks.health_checks import health_subjects
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.health.cursors import encode_cursor
from chmv_assets.engine.health.server_health import assess
from chmv_assets.orchestration.sensor_client import SensorSkip, TickBudget, sensor_client, tick_cursor
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

SENSOR = "chmv_health"
#: Cursor format (:mod:`chmv_assets.engine.health.cursors`): a cursor of another version is read as empty.
CURSOR_VERSION = 1


def build_health_sensor(loaded: LoadedProject, translator: ChmvTranslator) -> SensorDefinition:
    """The ``chmv_health`` sensor (running by default unless ``[health] enabled = false``)."""
    config = loaded.config.health
    by_key = health_subjects(loaded, translator)
    health_keys = {key: AssetCheckKey(key, HEALTH) for key in by_key}
    part_keys = [check_key(translator, target, PARTS) for target in loaded.project.targets]

    @sensor(
        name=SENSOR,
        minimum_interval_seconds=config.interval_seconds,
        target=AssetSelection.checks(*health_keys.values(), *part_keys),
        default_status=DefaultSensorStatus.RUNNING if config.enabled else DefaultSensorStatus.STOPPED,
        description="Mutations, detached MVs, read-only tables and replication of every target and its sources, looked "
        "at every few minutes; runs the chmv_health checks whose verdict changed, and every check (part counts too) "
        "every [health] report_minutes.",
    )
    def _health(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        cursor = tick_cursor(context).of(CURSOR_VERSION)
        try:
            with sensor_client(clickhouse, context, TickBudget()) as client:
                verdicts = assess(client, loaded.project, by_key.values(), config)
        except SensorSkip as skip:
            return SkipReason(str(skip))
        signatures = {key.to_user_string(): verdicts[s.asset].signature() for key, s in by_key.items()}
        before = cursor.get("signatures", {})
        changed = [key for key in by_key if signatures[key.to_user_string()] != before.get(key.to_user_string())]
        now = time.time()
        due = now - float(cursor.get("reported", 0)) >= config.report_minutes * 60
        unhealthy = sorted(s.asset.fqn for s in by_key.values() if verdicts[s.asset].severity != "ok")
        state = {"signatures": signatures, "reported": now if due else cursor.get("reported", 0)}
        if due:
            keys, reason = [*health_keys.values(), *part_keys], "health_report"
        else:
            keys, reason = [health_keys[key] for key in changed], "health_changed"
        summary = f"{len(unhealthy)} of {len(by_key)} asset(s) unhealthy" + (
            f": {', '.join(unhealthy[:5])}" if unhealthy else ""
        )
        context.log.info(summary)
        if not keys:
            return SensorResult(
                skip_reason=SkipReason(f"no verdict changed ({summary})"), cursor=encode_cursor(state, CURSOR_VERSION)
            )
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        request = RunRequest(
            run_key=f"chmv-health:{stamp}:{len(keys)}",
            asset_selection=[],
            asset_check_keys=keys,
            tags={"chmv/reason": reason},
        )
        return SensorResult(run_requests=[request], cursor=encode_cursor(state, CURSOR_VERSION))

    return _health
