"""The Dagster side of chmv's checks: check specs, the ops that evaluate them, results with their numbers.

The check logic (SQL, verdicts: a client in, plain results out) lives in the engine's health room
(``chmv_assets/engine/health/``); this module turns it into asset checks:

- ``chmv_parity`` (per target, partitioned like it, blocking if ``parity.blocking``): chmv_assets.engine.health.parity,
  declared on the target ops (asset_checks.inline)
- ``chmv_part_count`` (WARN / ERROR near the throw limit): chmv_assets.engine.health.part_counts
- ``chmv_schema_drift`` (blocking if ``parity.blocking``): chmv_assets.engine.health.schema_drift, on the target ops too
- ``chmv_lint`` (WARN, model only): chmv_assets.engine.health.lint
- ``chmv_health`` (per target and source table: mutations, detached MVs, read-only, replication):
  chmv_assets.engine.health.server_health, its Dagster checks in asset_checks.health_checks
"""

from collections.abc import Iterable

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    DagsterInstance,
    MetadataValue,
    multi_asset_check,
)

from asset_checks.health_checks import build_health_checks
from asset_checks.names import DRIFT, HEALTH, LINT, PARITY, PARTS
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.lint import lint_target
from chmv_assets.engine.health.part_counts import CLIMB_EVALUATIONS, assess, part_counts, pool_verdict, table_thresholds
from chmv_assets.engine.health.verdicts import LintFinding
from chmv_assets.engine.pacing.pressure import merges, read_load, server_limits, table_limits
from chmv_assets.orchestration.dagster_compat import completed_evaluations
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import CLICKHOUSE_POOL, ClickHouseResource

__all__ = ["DRIFT", "HEALTH", "LINT", "PARITY", "PARTS", "build_asset_checks", "check_key", "targets_by_key"]


def build_asset_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """The checks with an op of their own: part counts, lint and health (parity and drift live on the target ops,
    ``asset_checks.inline``)."""
    checks: list[AssetChecksDefinition] = build_part_checks(loaded, translator)
    checks += build_lint_checks(loaded, translator)
    checks += build_health_checks(loaded, translator)
    return checks


def targets_by_key(loaded: LoadedProject, translator: ChmvTranslator) -> dict[AssetKey, ObjectRef]:
    """Every MV target of the project by its asset key."""
    return {translator.get_asset_key(t): t for t in loaded.project.targets}


def check_key(translator: ChmvTranslator, ref: ObjectRef, name: str) -> AssetCheckKey:
    """The key of check ``name`` on the asset of ``ref``."""
    return AssetCheckKey(translator.get_asset_key(ref), name)


def previous_totals(instance: DagsterInstance | None, check_key, limit: int = CLIMB_EVALUATIONS - 1) -> list[int]:
    """The ``active_parts`` of the check's last completed evaluations, oldest first (empty without an instance).

    The running evaluation itself is still planned and passed over (:func:`completed_evaluations`).
    """
    if instance is None:
        return []
    totals = []
    for evaluation in completed_evaluations(instance, check_key, scan=limit + 10):
        value = evaluation.metadata.get("active_parts")
        if value is not None:
            totals.append(int(value.value))
    return totals[:limit][::-1]


def build_part_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """One part-count check per target, evaluated together (two queries in all)."""
    targets = targets_by_key(loaded, translator)
    if not targets:
        return []
    description = (
        "Not too many active parts: inserts slow down at the server's parts_to_delay_insert and fail at "
        "parts_to_throw_insert; warns when the count keeps climbing, fails near the limit."
    )
    specs = [AssetCheckSpec(PARTS, asset=key, description=description) for key in targets]

    @multi_asset_check(specs=specs, name="chmv_part_checks", can_subset=True, pool=CLICKHOUSE_POOL)
    def _parts(context: AssetCheckExecutionContext, clickhouse: ClickHouseResource):
        selected = sorted(context.selected_asset_check_keys, key=str)
        refs = [targets[k.asset_key] for k in selected]
        with clickhouse.get_client() as client:
            server = server_limits(client)
            live = table_limits(client, refs, server)  # the limits the server applies to each table
            counts = part_counts(client, refs)
            load = read_load(client, [], running=False)
            running = merges(client, refs)
        sink = sink_for(loaded.config.alert_webhook)
        for check_key in selected:
            target = targets[check_key.asset_key]
            table = loaded.project.table(target)
            thresholds = live.get(target) or table_thresholds(server.parts, table)
            count = counts[target]
            history = previous_totals(context.instance, check_key)
            verdict = assess(count, thresholds, history)
            if verdict.severity == "ok":
                verdict = pool_verdict(load.pool_busy, load.pool_size) or verdict
            merging, mutating = running.get(target, (0, 0))
            if verdict.severity != "ok":
                context.log.warning(f"{target.fqn}: {verdict.message}")
                sink.send(
                    Alert(
                        "check_failed" if verdict.severity == "error" else "check_warned",
                        verdict.severity,
                        target.fqn,
                        verdict.message,
                        {"check": PARTS, "active_parts": count.total, "max_in_partition": count.max_in_partition},
                    )
                )
            yield AssetCheckResult(
                asset_key=check_key.asset_key,
                check_name=PARTS,
                passed=verdict.severity == "ok",
                severity=AssetCheckSeverity.ERROR if verdict.severity == "error" else AssetCheckSeverity.WARN,
                description=verdict.message,
                metadata={
                    "active_parts": count.total,
                    "max_parts_in_partition": count.max_in_partition,
                    "partitions": len(count.by_partition),
                    "chmv/parts_by_partition": MetadataValue.md(
                        "| partition | active parts |\n|---|---|\n"
                        + "\n".join(f"| {k} | {c} |" for k, c in count.by_partition)
                    ),
                    "busiest_partition": count.partition or "",
                    "parts_to_delay_insert": thresholds.get("parts_to_delay_insert", 0),
                    "parts_to_throw_insert": thresholds.get("parts_to_throw_insert", 0),
                    "chmv/history": MetadataValue.json([*history, count.total]),
                    "merges_running": merging,
                    "mutations_running": mutating,
                    "merge_pool_busy": load.pool_busy,
                    "merge_pool_size": load.pool_size,
                },
            )

    return [_parts]


def lint_result(findings: Iterable[LintFinding]) -> tuple[bool, dict]:
    findings = list(findings)
    table = "\n".join(f"| {f.rule} | {f.subject} | {f.reason} | {f.fix} | {f.location} |" for f in findings)
    metadata = {
        "findings": len(findings),
        "chmv/rules": MetadataValue.json(sorted({f.rule for f in findings})),
        "chmv/findings": MetadataValue.md("| rule | MV | reason | fix | where |\n|---|---|---|---|---|\n" + table)
        if findings
        else MetadataValue.md("no findings"),
    }
    return not findings, metadata


def build_lint_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """One WARN lint check per target, evaluated together in one op (reads the model only)."""
    targets = targets_by_key(loaded, translator)
    if not targets:
        return []
    description = (
        "How the MVs writing this table are designed: a JOIN where a dictionary would do, too many MVs on a source, "
        "aggregates that count duplicates twice, GROUP BY into a plain MergeTree, an MV without TO… each finding "
        "with its fix (a warning: it never blocks)."
    )
    specs = [AssetCheckSpec(LINT, asset=key, description=description) for key in targets]

    @multi_asset_check(specs=specs, name="chmv_lint_checks", can_subset=True)
    def _lint(context: AssetCheckExecutionContext):
        sink = sink_for(loaded.config.alert_webhook)
        for check_key in sorted(context.selected_asset_check_keys, key=str):
            target = targets[check_key.asset_key]
            findings = lint_target(loaded, target)
            passed, metadata = lint_result(findings)
            for finding in findings:
                context.log.warning(str(finding))
                sink.send(
                    Alert("check_warned", "warning", target.fqn, str(finding), {"check": LINT, "rule": finding.rule})
                )
            yield AssetCheckResult(
                asset_key=check_key.asset_key,
                check_name=LINT,
                passed=passed,
                severity=AssetCheckSeverity.WARN,
                metadata=metadata,
                description="; ".join(f"{f.rule}: {f.reason}" for f in findings)[:2000] or None,
            )

    return [_lint]
