"""The Dagster side of chmv's checks: check specs, the ops that evaluate them, results with their numbers.

The check logic (SQL, verdicts: a client in, plain results out) lives in the engine's health room
(``chmv_assets/engine/health/``); this module turns it into asset checks:

- ``chmv_parity`` (per target, partitioned like it, blocking if ``parity.blocking``): chmv_assets.engine.health.parity,
  declared on the target ops (asset_checks.inline)
- ``chmv_part_count`` (WARN / ERROR near the throw limit): chmv_assets.engine.health.part_counts
- ``chmv_schema_drift`` (blocking if ``parity.blocking``): chmv_assets.engine.health.schema_drift, on the target ops too
- ``chmv_lint`` (WARN, model only): chmv_assets.engine.health.lint
- ``chmv_health`` (per target, its sources included: mutations, detached MVs, read-only, replication):
  chmv_assets.engine.health.server_health, its Dagster checks in asset_checks.health_checks, evaluated in the
  op of the part counts (``chmv_server_checks``)
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence

from clickhouse_connect.driver.client import Client
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

from asset_checks.health_checks import health_results, health_specs, health_subjects
from asset_checks.names import DRIFT, HEALTH, LINT, PARITY, PARTS
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.lint import lint_target
from chmv_assets.engine.health.part_counts import CLIMB_EVALUATIONS, assess, part_counts, pool_verdict, table_thresholds
from chmv_assets.engine.health.verdicts import LintFinding
from chmv_assets.engine.pacing.pressure import merges, read_load, server_limits, table_limits
from chmv_assets.errors import ChmvError
from chmv_assets.orchestration.dagster_compat import completed_evaluations
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import CLICKHOUSE_POOL, ClickHouseResource

__all__ = ["DRIFT", "HEALTH", "LINT", "PARITY", "PARTS", "build_asset_checks", "check_key", "targets_by_key"]


def build_asset_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """The checks with an op of their own: part counts and health (one op), lint (parity and drift live on the
    target ops, ``asset_checks.inline``)."""
    checks: list[AssetChecksDefinition] = build_server_checks(loaded, translator)
    checks += build_lint_checks(loaded, translator)
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
        if value is not None and isinstance(value.value, int | float | str):
            totals.append(int(value.value))
    return totals[:limit][::-1]


#: What the part-count check of a target looks at.
PARTS_DESCRIPTION = (
    "Not too many active parts: inserts slow down at the server's parts_to_delay_insert and fail at "
    "parts_to_throw_insert; warns when the count keeps climbing, fails near the limit."
)
#: The op evaluating the part-count and health checks.
SERVER_CHECKS = "chmv_server_checks"


def build_server_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """The part-count and health checks of every target, in one op (``chmv_server_checks``).

    Both read the server about the same tables, under the ClickHouse pool, and the ``chmv_health`` sensor's report
    runs both: in one op a run opens one client, and the op has one input per target instead of one per target and
    per op (Dagster builds each input at every load: at 1,000 MVs the health checks cost a warm load 1.25 G
    instructions in an op of their own, 0.67 G here; docs/partitions.md). A kind that fails does not stop the other;
    the op then fails at the end, naming it.
    """
    targets = targets_by_key(loaded, translator)
    if not targets:
        return []
    subjects = health_subjects(loaded, translator)
    specs = [AssetCheckSpec(PARTS, asset=key, description=PARTS_DESCRIPTION) for key in targets]
    specs += health_specs(subjects)

    @multi_asset_check(specs=specs, name=SERVER_CHECKS, can_subset=True, pool=CLICKHOUSE_POOL)
    def _server_checks(context: AssetCheckExecutionContext, clickhouse: ClickHouseResource):
        selected = sorted(context.selected_asset_check_keys, key=str)
        failures = []
        with clickhouse.get_client() as client:
            for name, results in (
                (HEALTH, lambda keys: health_results(context, client, loaded, subjects, keys)),
                (PARTS, lambda keys: part_results(context, client, loaded, targets, keys)),
            ):
                keys = [k for k in selected if k.name == name]
                try:
                    if keys:
                        yield from results(keys)
                except Exception as err:  # noqa: BLE001 - the other kind is still evaluated; raised below
                    context.log.error(f"{name}: {err}")
                    failures.append(f"{name}: {err}")
        if failures:
            raise ChmvError("server checks failed: " + "; ".join(failures))

    return [_server_checks]


def part_results(
    context: AssetCheckExecutionContext,
    client: Client,
    loaded: LoadedProject,
    targets: Mapping[AssetKey, ObjectRef],
    keys: Sequence[AssetCheckKey],
) -> Iterator[AssetCheckResult]:
    """The results of the part-count checks ``keys``, read together (five queries in all)."""
    refs = [targets[k.asset_key] for k in keys]
    server = server_limits(client)
    live = table_limits(client, refs, server)  # the limits the server applies to each table
    counts = part_counts(client, refs)
    load = read_load(client, [], running=False)
    running = merges(client, refs)
    sink = sink_for(loaded.config.alert_webhook)
    for check_key in keys:
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
