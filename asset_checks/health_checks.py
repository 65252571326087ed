"""The Dagster side of the health checks: one ``chmv_health`` check per target and per source table.

The logic is :mod:`chmv_assets.engine.health.server_health` (a client in, plain results out). Every check of a run is evaluated
together, in the statements of one :func:`~chmv_assets.engine.health.server_health.assess`. A verdict carries its numbers as
metadata (plotted over time in the UI), its findings with what to do, and what the engine could not check (the
replication of ``Replicated*`` tables on the embedded engine); a failing one goes to the alert sink. The
``chmv_health`` sensor (:mod:`chmv_assets.orchestration.health_sensor`) evaluates them when a verdict changes and
every ``[health] report_minutes``.
"""

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    MetadataValue,
    multi_asset_check,
)

from asset_checks.names import HEALTH
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.server_health import Health, Subject, assess, subjects
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import CLICKHOUSE_POOL, ClickHouseResource

DESCRIPTION = (
    "The tables behind this asset as the server runs them: mutations that failed or are stuck (with their reason), "
    "MVs of the DDL directory detached or missing (chmv_recovery restores them through chmv_apply), read-only tables, "
    "and for Replicated* tables the replication queue, its oldest entry and the replica's lag (server only)."
)


def health_subjects(loaded: LoadedProject, translator: ChmvTranslator) -> dict[AssetKey, Subject]:
    """Every target and source table with a health check, by asset key."""
    return {translator.get_asset_key(ref): subject for ref, subject in subjects(loaded.project).items()}


def health_check_keys(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetCheckKey]:
    """The keys of every ``chmv_health`` check."""
    return [AssetCheckKey(key, HEALTH) for key in health_subjects(loaded, translator)]


def health_result(key: AssetKey, health: Health) -> AssetCheckResult:
    """A check result of ``health``: passed without findings; ERROR severity when a finding is an error."""
    rows = "\n".join(f"| {f.severity} | {f.subject} | {f.message} | {f.fix} |" for f in health.findings)
    table = "| severity | object | what | fix |\n|---|---|---|---|\n" + rows if rows else "none"
    metadata: dict = {name: value for name, value in sorted(health.figures.items())}
    metadata["chmv/findings"] = MetadataValue.md(table)
    metadata["chmv/checked"] = ", ".join(r.fqn for r in (*health.subject.tables, *health.subject.views))
    if health.skipped:
        metadata["chmv/not_checked"] = "; ".join(health.skipped)
    return AssetCheckResult(
        asset_key=key,
        check_name=HEALTH,
        passed=not health.findings,
        severity=AssetCheckSeverity.ERROR if health.severity == "error" else AssetCheckSeverity.WARN,
        description=health.describe()[:2000],
        metadata=metadata,
    )


def build_health_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """One ``chmv_health`` check per target and source table, evaluated together (one op)."""
    by_key = health_subjects(loaded, translator)
    if not by_key:
        return []
    specs = [AssetCheckSpec(HEALTH, asset=key, description=DESCRIPTION) for key in by_key]
    rules = loaded.config.health

    @multi_asset_check(specs=specs, name="chmv_health_checks", can_subset=True, pool=CLICKHOUSE_POOL)
    def _health(context: AssetCheckExecutionContext, clickhouse: ClickHouseResource):
        selected = sorted(context.selected_asset_check_keys, key=str)
        wanted = [by_key[k.asset_key] for k in selected]
        with clickhouse.get_client() as client:
            verdicts = assess(client, loaded.project, wanted, rules)
        sink = sink_for(loaded.config.alert_webhook)
        for check_key in selected:
            subject = by_key[check_key.asset_key]
            health = verdicts[subject.asset]
            for finding in health.findings:
                kind = "check_failed" if finding.severity == "error" else "check_warned"
                details = {"check": HEALTH, "finding": finding.kind, "object": finding.subject, "fix": finding.fix}
                sink.send(Alert(kind, finding.severity, subject.asset.fqn, str(finding), details), context.log)
            yield health_result(check_key.asset_key, health)

    return [_health]


def asset_of(loaded: LoadedProject, translator: ChmvTranslator, key: AssetKey) -> ObjectRef | None:
    """The target or source table of a health check's asset key."""
    subject = health_subjects(loaded, translator).get(key)
    return subject.asset if subject else None
