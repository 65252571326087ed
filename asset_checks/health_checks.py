"""The Dagster side of the health checks: one ``chmv_health`` check per target, its sources' health included.

The logic is :mod:`chmv_assets.engine.health.server_health` (a client in, plain results out). Every check of a run is evaluated
together, in the statements of one :func:`~chmv_assets.engine.health.server_health.assess`. A verdict carries its numbers as
metadata (plotted over time in the UI), its findings with what to do, and what the engine could not check (the
replication of ``Replicated*`` tables on the embedded engine); a failing one goes to the alert sink. The
``chmv_health`` sensor (:mod:`chmv_assets.orchestration.health_sensor`) evaluates them when a verdict changes and
every ``[health] report_minutes``. They are evaluated in the op of the part counts, ``chmv_server_checks``
(:func:`asset_checks.definitions.build_server_checks`).

A source table has no check of its own: its findings are those of every target whose MVs read it, and its alert is
sent once per run, naming those targets (a check per source table too made 1,779 checks instead of 1,000 at 1,000
MVs: each is an output of Dagster's op, paid at every load; docs/pacing-and-health.md).
"""

from collections.abc import Iterator, Mapping, Sequence

from clickhouse_connect.driver.client import Client
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    MetadataValue,
)

from asset_checks.names import HEALTH
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.health.server_health import Finding, Health, Subject, assess, subjects
from chmv_assets.orchestration.translator import ChmvTranslator

DESCRIPTION = (
    "The tables behind this asset as the server runs them (its own table and the source tables its MVs read): "
    "mutations that failed or are stuck (with their reason), MVs of the DDL directory detached or missing "
    "(chmv_recovery restores them through chmv_apply), read-only tables, and for Replicated* tables the replication "
    "queue, its oldest entry and the replica's lag (server only). The numbers are the asset's own table's."
)


def health_subjects(loaded: LoadedProject, translator: ChmvTranslator) -> dict[AssetKey, Subject]:
    """Every target, with what its health check looks at, by asset key."""
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
    metadata["chmv/checked"] = ", ".join(r.fqn for r in health.subject.checked)
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


def health_specs(by_key: Mapping[AssetKey, Subject]) -> list[AssetCheckSpec]:
    """The ``chmv_health`` check of every target of ``by_key``; evaluated in the op of the part counts
    (:func:`asset_checks.definitions.build_server_checks`)."""
    return [AssetCheckSpec(HEALTH, asset=key, description=DESCRIPTION) for key in by_key]


def health_results(
    context: AssetCheckExecutionContext,
    client: Client,
    loaded: LoadedProject,
    by_key: Mapping[AssetKey, Subject],
    keys: Sequence[AssetCheckKey],
) -> Iterator[AssetCheckResult]:
    """The results of the health checks ``keys``, assessed together; each finding sent to the alert sink."""
    verdicts = assess(client, loaded.project, [by_key[k.asset_key] for k in keys], loaded.config.health)
    sink = sink_for(loaded.config.alert_webhook)
    of_sources: dict[Finding, list[str]] = {}  # a source's finding: one alert naming every target it feeds
    for check_key in keys:
        subject = by_key[check_key.asset_key]
        health = verdicts[subject.asset]
        own = {ref.fqn for ref in (*subject.tables, *subject.views)}
        for finding in health.findings:
            if finding.subject in own:
                sink.send(_alert(finding, subject.asset.fqn), context.log)
            else:
                of_sources.setdefault(finding, []).append(subject.asset.fqn)
        yield health_result(check_key.asset_key, health)
    for finding, targets in of_sources.items():
        sink.send(_alert(finding, finding.subject, targets=targets), context.log)


def _alert(finding: Finding, subject: str, **details: object) -> Alert:
    kind = "check_failed" if finding.severity == "error" else "check_warned"
    details = {"check": HEALTH, "finding": finding.kind, "object": finding.subject, "fix": finding.fix, **details}
    return Alert(kind, finding.severity, subject, str(finding), details)
