"""The Dagster side of chmv's checks: check specs, the ops that evaluate them, results with their numbers.

The check logic (SQL, verdicts: a client in, plain results out) lives in the sibling modules; this
module turns it into asset checks:

- ``chmv_parity`` (per target, partitioned like it, blocking if ``parity.blocking``): asset_checks.parity
- ``chmv_part_count`` (WARN / ERROR near the throw limit): asset_checks.parts
- ``chmv_schema_drift`` (blocking if ``parity.blocking``): asset_checks.drift
- ``chmv_lint`` (WARN, model only): asset_checks.lint
"""


import warnings
from collections.abc import Iterable

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    DagsterInstance,
    MetadataValue,
    PreviewWarning,
    multi_asset_check,
)

from asset_checks.common import DRIFT, LINT, PARITY, PARTS
from asset_checks.drift import drift_markdown, drift_report
from asset_checks.lint import LintFinding, lint_target
from asset_checks.parity import ParityResult, parity_for_partition
from asset_checks.parts import CLIMB_EVALUATIONS, assess, part_counts, server_thresholds, table_thresholds
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.orchestration.partitions import window_for_key
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import CLICKHOUSE_POOL, ClickHouseResource

__all__ = ["DRIFT", "LINT", "PARITY", "PARTS", "build_asset_checks", "check_key", "targets_by_key"]


def build_asset_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """Every check of the project's targets: a parity check per target, and one op each for drift, parts, lint."""
    checks: list[AssetChecksDefinition] = build_parity_checks(loaded, translator)
    checks += build_drift_checks(loaded, translator)
    checks += build_part_checks(loaded, translator)
    checks += build_lint_checks(loaded, translator)
    return checks


def targets_by_key(loaded: LoadedProject, translator: ChmvTranslator) -> dict[AssetKey, ObjectRef]:
    """Every MV target of the project by its asset key."""
    return {translator.get_asset_key(t): t for t in loaded.project.targets}


def check_key(translator: ChmvTranslator, ref: ObjectRef, name: str) -> AssetCheckKey:
    """The key of check ``name`` on the asset of ``ref``."""
    return AssetCheckKey(translator.get_asset_key(ref), name)




def parity_check_result(results: list[ParityResult], loaded: LoadedProject,
                        asset_key: AssetKey | None = None) -> AssetCheckResult:  # fmt: skip
    """Fold the partitions one evaluation covered into one check result (numbers as metadata)."""
    failed = [r for r in results if not r.passed]
    expected = sum(r.expected for r in results)
    actual = sum(r.actual for r in results)
    rows = "\n".join(f"| {r.partition or '(all)'} | {'ok' if r.passed else 'FAIL'} | "
                     + "; ".join(f"{m.name}: {m.expected:g} / {m.actual:g}" for m in r.measures)
                     + (f" {r.error or ''}{'missing: ' + ', '.join(r.missing) if r.missing else ''}") + " |"
                     for r in results)  # fmt: skip
    metadata = {
        "expected": expected,
        "actual": actual,
        "delta": actual - expected,
        "relative_delta": (actual - expected) / max(abs(expected), 1.0),
        "partitions_checked": len(results),
        "partitions_failed": len(failed),
        "chmv/partitions": MetadataValue.json({r.partition or "": r.passed for r in results}),
        "chmv/failed_partitions": MetadataValue.json([r.partition for r in failed]),
        "chmv/result": MetadataValue.md("| partition | verdict | expected / actual |\n|---|---|---|\n" + rows),
    }
    if results and results[-1].sql:
        metadata["chmv/sql"] = MetadataValue.md(f"```sql\n{results[-1].sql}\n```")
    description = "; ".join(r.describe() for r in (failed or results)[:5])
    if failed:
        sink = sink_for(loaded.config.alert_webhook)
        for r in failed:
            sink.send(Alert("check_failed", "error", r.target, r.describe(),
                            {"check": PARITY, "partition": r.partition, "expected": r.expected,
                             "actual": r.actual, "delta": r.delta, "missing": list(r.missing), "error": r.error}))  # fmt: skip
    return AssetCheckResult(passed=not failed, severity=AssetCheckSeverity.ERROR, metadata=metadata,
                            asset_key=asset_key, check_name=PARITY if asset_key is not None else None,
                            description=description[:2000])  # fmt: skip


def build_parity_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """The parity check of every target, partitioned like its target (one evaluation per partition run).

    Targets sharing a partitions definition share one subsettable op, so a project with thousands of
    targets loads fast; each check is still its own check of its own asset.
    """
    groups: dict[object, list[ObjectRef]] = {}
    for ref in loaded.project.targets:
        groups.setdefault(translator.get_partitions_def(loaded, ref), []).append(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)  # partitioned asset checks are "preview" in Dagster 1.13
        return [_parity_checks(loaded, translator, refs, partitions_def, index)
                for index, (partitions_def, refs) in enumerate(groups.items())]  # fmt: skip


def _parity_checks(loaded: LoadedProject, translator: ChmvTranslator, refs: list[ObjectRef], partitions_def,
                   index: int) -> AssetChecksDefinition:  # fmt: skip
    by_key = {translator.get_asset_key(ref): ref for ref in refs}
    specs = [
        AssetCheckSpec(
            PARITY,
            asset=key,
            partitions_def=partitions_def,
            blocking=loaded.config.parity.blocking,
            description=f"{ref.fqn} holds what its MVs' own SELECT yields over the source rows of the same partition.",
        )
        for key, ref in by_key.items()
    ]

    @multi_asset_check(specs=specs, name=f"chmv_parity_{index}", can_subset=True, pool=CLICKHOUSE_POOL)
    def _parity(context: AssetCheckExecutionContext, clickhouse: ClickHouseResource):
        op = context.op_execution_context
        if partitions_def is None:
            keys: list[str | None] = [None]
        elif op.has_partition_key or op.has_partition_key_range:
            keys = list(op.partition_keys)
        else:
            keys = [partitions_def.get_last_partition_key()]
        windows = [window_for_key(partitions_def, k) for k in keys]
        selected = [key for key in by_key if AssetCheckKey(key, PARITY) in context.selected_asset_check_keys]
        with clickhouse.get_client() as client:
            for key in selected:
                results = [parity_for_partition(client, loaded, by_key[key], w) for w in windows]
                for r in results:
                    context.log.info(r.describe())
                yield parity_check_result(results, loaded, asset_key=key)

    return _parity


def build_drift_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """One drift check per target, evaluated together (three queries in all)."""
    targets = targets_by_key(loaded, translator)
    if not targets:
        return []
    specs = [AssetCheckSpec(DRIFT, asset=key, blocking=loaded.config.parity.blocking,
                            description="The live target, its MVs and their sources match the DDL directory.")
             for key in targets]  # fmt: skip

    @multi_asset_check(specs=specs, name="chmv_drift_checks", can_subset=True, pool=CLICKHOUSE_POOL)
    def _drift(context: AssetCheckExecutionContext, clickhouse: ClickHouseResource):
        selected = sorted(context.selected_asset_check_keys, key=str)
        with clickhouse.get_client() as client:
            report = drift_report(client, loaded.project, [targets[k.asset_key] for k in selected])
        sink = sink_for(loaded.config.alert_webhook)
        for check_key in selected:
            target = targets[check_key.asset_key]
            items = report[target]
            if items:
                message = f"{len(items)} difference(s) from the DDL: " + "; ".join(str(i) for i in items[:5])
                context.log.error(f"{target.fqn}: {message}")
                sink.send(Alert("drift", "error", target.fqn, message, {"check": DRIFT, "items": [str(i) for i in items]}))
            yield AssetCheckResult(
                asset_key=check_key.asset_key, check_name=DRIFT, passed=not items, severity=AssetCheckSeverity.ERROR,
                metadata={"differences": len(items), "chmv/diff": MetadataValue.md(drift_markdown(items)),
                          "chmv/kinds": MetadataValue.json(sorted({i.kind for i in items}))},
                description="; ".join(str(i) for i in items)[:2000] or None,
            )  # fmt: skip

    return [_drift]


def previous_totals(instance: DagsterInstance | None, check_key, limit: int = CLIMB_EVALUATIONS - 1) -> list[int]:
    """The ``active_parts`` of the check's last completed evaluations, oldest first (empty without an instance).

    Records still planned (the running evaluation itself) carry an ``AssetCheckEvaluationPlanned`` and are
    passed over: Dagster's record-status enum is not public API, so completion is read from the event.
    """
    if instance is None:
        return []
    records = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=limit + 10)
    totals = []
    for record in records:
        evaluation = record.evaluation
        if not isinstance(evaluation, AssetCheckEvaluation):
            continue
        value = evaluation.metadata.get("active_parts")
        if value is not None:
            totals.append(int(value.value))
    return totals[:limit][::-1]


def build_part_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """One part-count check per target, evaluated together (two queries in all)."""
    targets = targets_by_key(loaded, translator)
    if not targets:
        return []
    specs = [AssetCheckSpec(PARTS, asset=key, description="Active parts vs the server's parts_to_delay/throw_insert.")
             for key in targets]  # fmt: skip

    @multi_asset_check(specs=specs, name="chmv_part_checks", can_subset=True, pool=CLICKHOUSE_POOL)
    def _parts(context: AssetCheckExecutionContext, clickhouse: ClickHouseResource):
        selected = sorted(context.selected_asset_check_keys, key=str)
        with clickhouse.get_client() as client:
            server = server_thresholds(client)
            counts = part_counts(client, [targets[k.asset_key] for k in selected])
        sink = sink_for(loaded.config.alert_webhook)
        for check_key in selected:
            target = targets[check_key.asset_key]
            table = loaded.project.table(target)
            thresholds = table_thresholds(server, table)
            count = counts[target]
            history = previous_totals(context.instance, check_key)
            verdict = assess(count, thresholds, history)
            if verdict.severity != "ok":
                context.log.warning(f"{target.fqn}: {verdict.message}")
                sink.send(Alert("check_failed" if verdict.severity == "error" else "check_warned", verdict.severity,
                                target.fqn, verdict.message, {"check": PARTS, "active_parts": count.total,
                                                              "max_in_partition": count.max_in_partition}))  # fmt: skip
            yield AssetCheckResult(
                asset_key=check_key.asset_key, check_name=PARTS, passed=verdict.severity == "ok",
                severity=AssetCheckSeverity.ERROR if verdict.severity == "error" else AssetCheckSeverity.WARN,
                description=verdict.message,
                metadata={"active_parts": count.total, "max_parts_in_partition": count.max_in_partition,
                          "busiest_partition": count.partition or "", "parts_to_delay_insert":
                          thresholds.get("parts_to_delay_insert", 0), "parts_to_throw_insert":
                          thresholds.get("parts_to_throw_insert", 0),
                          "chmv/history": MetadataValue.json([*history, count.total])},
            )  # fmt: skip

    return [_parts]


def lint_result(findings: Iterable[LintFinding]) -> tuple[bool, dict]:
    findings = list(findings)
    table = "\n".join(f"| {f.rule} | {f.subject} | {f.reason} | {f.fix} | {f.location} |" for f in findings)
    metadata = {
        "findings": len(findings),
        "chmv/rules": MetadataValue.json(sorted({f.rule for f in findings})),
        "chmv/findings": MetadataValue.md("| rule | MV | reason | fix | where |\n|---|---|---|---|---|\n" + table)
        if findings else MetadataValue.md("no findings"),
    }  # fmt: skip
    return not findings, metadata


def build_lint_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """One WARN lint check per target, evaluated together in one op (reads the model only)."""
    targets = targets_by_key(loaded, translator)
    if not targets:
        return []
    specs = [AssetCheckSpec(LINT, asset=key, description="MV design rules of seed 001 (WARN, with the fix).")
             for key in targets]  # fmt: skip

    @multi_asset_check(specs=specs, name="chmv_lint_checks", can_subset=True)
    def _lint(context: AssetCheckExecutionContext):
        sink = sink_for(loaded.config.alert_webhook)
        for check_key in sorted(context.selected_asset_check_keys, key=str):
            target = targets[check_key.asset_key]
            findings = lint_target(loaded, target)
            passed, metadata = lint_result(findings)
            for finding in findings:
                context.log.warning(str(finding))
                sink.send(Alert("check_warned", "warning", target.fqn, str(finding), {"check": LINT, "rule": finding.rule}))
            yield AssetCheckResult(asset_key=check_key.asset_key, check_name=LINT, passed=passed,
                                   severity=AssetCheckSeverity.WARN, metadata=metadata,
                                   description="; ".join(f"{f.rule}: {f.reason}" for f in findings)[:2000] or None)  # fmt: skip

    return [_lint]
