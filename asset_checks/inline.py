"""The blocking checks (parity, drift), declared on the target ops and evaluated right after each materialization.

Why not separate ``multi_asset_check`` ops: a blocking check gates the assets downstream of its target.
With the checks of a chain ``A -> B`` in one check op and ``A``, ``B`` in two target ops, the job graph
has a cycle (B waits for A's check, the check op waits for B), which Dagster breaks by splitting the
check op in two subsets (``chmv_parity_0``, ``chmv_parity_0_2``). Which subset gets which check depends
on set iteration order, i.e. on the hash seed of each process, so in a multi-process run a step could
evaluate the wrong check twice and skip the other. Declared on the target op (``check_specs``), a check
lives in the node of its own asset: no cycle, no split, and the op evaluates it right after that
asset's materializations (or alone, when only the check is selected).

Parity is evaluated per partition: every partition of the run gets its own evaluation (expected,
actual, delta as numbers the UI plots per partition), tied to that partition's latest materialization,
so a failed partition shows as failed in the check's partitions view, in single-partition and range
runs alike. A run that rebuilds the target evaluates its checks inside the rebuild's session
(:func:`find_checks` as the run's verifier: its partitions' parity in one batch, each recomputed from where its fill
read its rows), then yields their events after the materialization (:func:`check_events`).
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clickhouse_connect.driver.client import Client
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    MetadataValue,
    Output,
    PartitionsDefinition,
    PreviewWarning,
    partition_loading_context,
)

from asset_checks.names import DRIFT, PARITY
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.drift import DriftItem, drift_report
from chmv_assets.engine.health.parity import parity_for_partitions
from chmv_assets.engine.health.schema_drift import drift_markdown
from chmv_assets.engine.health.verdicts import ParityResult
from chmv_assets.engine.ingest.landing import landing_dir
from chmv_assets.engine.lifecycle.drift_fix import DriftPlan, drift_fix_markdown, plan_for_drift
from chmv_assets.orchestration.dagster_compat import check_output_name, target_materialization_data


def inline_check_specs(
    loaded: LoadedProject, key: AssetKey, ref: ObjectRef, partitions_def: PartitionsDefinition | None
) -> list[AssetCheckSpec]:
    """The parity check (partitioned like the target) and the drift check of one target."""
    blocking = loaded.config.parity.blocking
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)  # partitioned asset checks are "preview" in Dagster 1.13
        parity = AssetCheckSpec(
            PARITY,
            asset=key,
            partitions_def=partitions_def,
            blocking=blocking,
            description=f"{ref.fqn} holds what its MVs' own SELECT yields over the source rows of the same partition.",
        )
    return [
        parity,
        AssetCheckSpec(
            DRIFT,
            asset=key,
            blocking=blocking,
            description="The live target, its MVs and their sources match the DDL directory.",
        ),
    ]


def check_partition_keys(
    context: AssetExecutionContext, partitions_def: PartitionsDefinition | None
) -> list[str | None]:
    """The partitions a run checks: the run's own, else the newest one; ``[None]`` when unpartitioned."""
    if partitions_def is None:
        return [None]
    if context.has_partition_key or context.has_partition_key_range:
        return list(context.partition_keys)
    with partition_loading_context(dynamic_partitions_store=context.instance):  # a key part's values are the instance's
        last = partitions_def.get_last_partition_key()
    return [last] if last is not None else []


def latest_materializations(instance: DagsterInstance, key: AssetKey, partitions: Sequence[str | None]) -> dict:
    """``partition -> materialization record`` (latest one) for the partitions of one asset."""
    named = [p for p in partitions if p is not None]
    found: dict[str | None, Any] = {}
    if None in partitions:
        records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=1).records
        if records:
            found[None] = records[0]
    if named:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=key, asset_partitions=named), limit=2 * len(named)
        ).records
        for record in records:  # newest first
            found.setdefault(record.partition_key, record)
        for partition in named:
            if partition not in found:
                more = instance.fetch_materializations(
                    AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
                ).records
                if more:
                    found[partition] = more[0]
    return found


@dataclass
class CheckOutcome:
    """The events of the checks evaluated for one target, and whether a blocking one failed."""

    events: list = field(default_factory=list)
    blocking_failed: list[str] = field(default_factory=list)


def parity_evaluation(
    key: AssetKey,
    partition: str | None,
    result: ParityResult,
    record: Any | None,
    *,
    blocking: bool = False,
    metadata: dict | None = None,
) -> AssetCheckEvaluation:
    """One partition's ``parity`` verdict as Dagster records it (the partitions view, alerts and recovery read it).

    Args:
        record: The partition's latest materialization record (the evaluation's target), if any.
        metadata: Added to :func:`parity_metadata`.
    """
    return AssetCheckEvaluation(
        asset_key=key,
        check_name=PARITY,
        passed=result.passed,
        metadata={**parity_metadata(result), **(metadata or {})},
        target_materialization_data=target_materialization_data(record) if record is not None else None,
        severity=AssetCheckSeverity.ERROR,
        description=result.describe()[:2000],
        blocking=blocking,
        partition=partition,
    )


def parity_alert(result: ParityResult, **details: Any) -> Alert:
    """The ``check_failed`` alert of a failed parity verdict, with ``details`` added to its figures."""
    return Alert(
        "check_failed",
        "error",
        result.target,
        result.describe(),
        {
            "check": PARITY,
            "partition": result.partition,
            "expected": result.expected,
            "actual": result.actual,
            "delta": result.delta,
            **details,
        },
    )


def parity_metadata(result: ParityResult) -> dict:
    """Numbers the UI plots over time (expected, actual, delta, per measure), and the query."""
    metadata: dict = {
        "expected": result.expected,
        "actual": result.actual,
        "delta": result.delta,
        "relative_delta": result.delta / max(abs(result.expected), 1.0),
        "chmv/partition": result.partition or "",
        "chmv/within_tolerance": result.within_tolerance,
        "chmv/in_grace": result.in_grace,
        "chmv/measures": MetadataValue.md(
            "| measure | expected | actual | delta |\n|---|---|---|---|\n"
            + "\n".join(f"| {m.name} | {m.expected:g} | {m.actual:g} | {m.delta:g} |" for m in result.measures)
        ),
    }
    for measure in result.measures[1:]:
        metadata[f"delta {measure.name}"] = measure.delta
    metadata["chmv/truth"] = result.truth
    if result.unverifiable:
        metadata["chmv/not_verifiable"] = result.unverifiable
    if result.missing:
        metadata["chmv/missing"] = MetadataValue.json(list(result.missing))
    if result.error:
        metadata["chmv/error"] = result.error
    if result.sql:
        metadata["chmv/sql"] = MetadataValue.md(f"```sql\n{result.sql}\n```")
    return metadata


@dataclass
class CheckFindings:
    """What the selected inline checks of one target found on the engine (the client's part of their evaluation,
    done inside a rebuild run's session: :func:`find_checks`); :func:`check_events` turns it into Dagster's events.

    Attributes:
        partitions: The partitions parity was evaluated for (the run's, else the newest one).
        parity: Per partition, its verdict (None: parity not selected).
        drift: The target's differences from the DDL (None: drift not selected).
        fix: The lifecycle plan that fixes them, when there are some.
    """

    partitions: list[str | None] = field(default_factory=list)
    parity: list[ParityResult] | None = None
    drift: list[DriftItem] | None = None
    fix: DriftPlan | None = None


def find_checks(
    context: AssetExecutionContext,
    client: Client,
    loaded: LoadedProject,
    ref: ObjectRef,
    key: AssetKey,
    partitions_def: PartitionsDefinition | None,
    checks: Iterable[AssetCheckKey],
    *,
    verified: Sequence[ParityResult] | None = None,
) -> CheckFindings:
    """Evaluate the selected inline checks of one target on ``client``: parity of the run's partitions in one batch
    (:func:`~chmv_assets.engine.health.parity.parity_for_partitions`), or the verdicts a rebuild run verified
    (``verified``: :func:`~chmv_assets.engine.health.parity.verify_rebuilt`) for those it covers; drift, and the plan
    fixing it.
    """
    names = {c.name for c in checks if c.asset_key == key}
    found = CheckFindings()
    if PARITY in names:
        found.partitions = check_partition_keys(context, partitions_def)
        partitioning = loaded.partitioning(ref)  # the one codec of keys
        by_key = {r.partition: r for r in verified or ()}
        rest = [p for p in found.partitions if p not in by_key]
        if rest:
            windows = [partitioning.window_of(p) for p in rest]
            by_key |= dict(zip(rest, parity_for_partitions(client, loaded, ref, windows), strict=True))
        found.parity = [by_key[p] for p in found.partitions]
    if DRIFT in names:
        found.drift = drift_report(client, loaded.project, [ref])[ref]
        if found.drift:
            found.fix = run_drift_plan(context, client, loaded)
    return found


def check_events(
    context: AssetExecutionContext,
    loaded: LoadedProject,
    ref: ObjectRef,
    key: AssetKey,
    found: CheckFindings,
    *,
    dsn: str | None = None,
) -> CheckOutcome:
    """The events of the checks :func:`find_checks` evaluated: one evaluation per check (per partition for parity),
    tied to each partition's latest materialization (read now: after the run's own), and the alerts of failures.

    Args:
        dsn: The server the checks read, for the commands a failing drift check shows (``chmv apply --dsn …``).

    Returns:
        The events to yield (each check's output, then its evaluations) and the failed blocking checks.
    """
    outcome = CheckOutcome()
    blocking = loaded.config.parity.blocking
    sink = sink_for(loaded.config.alert_webhook)
    if found.parity is not None:
        partitions, results = found.partitions, found.parity
        targets = latest_materializations(context.instance, key, partitions)
        outcome.events.append(
            Output(None, output_name=check_output_name(context.assets_def, AssetCheckKey(key, PARITY)))
        )
        for partition, result in zip(partitions, results, strict=True):
            context.log.info(result.describe())
            outcome.events.append(parity_evaluation(key, partition, result, targets.get(partition), blocking=blocking))
            if not result.passed:
                sink.send(parity_alert(result, missing=list(result.missing), error=result.error), context.log)
        failed = [r.partition or "(all)" for r in results if not r.passed]
        if failed and blocking:
            outcome.blocking_failed.append(f"{PARITY} ({', '.join(failed)})")
    if found.drift is not None:
        items = found.drift
        kinds: dict[str, int] = {}
        for item in items:
            kinds[item.kind] = kinds.get(item.kind, 0) + 1
        metadata: dict = {
            "differences": len(items),
            **{f"differences {k}": n for k, n in sorted(kinds.items())},
            "chmv/diff": MetadataValue.md(drift_markdown(items)),
            "chmv/kinds": MetadataValue.json(sorted(kinds)),
        }
        if items:
            message = f"{len(items)} difference(s) from the DDL: " + "; ".join(str(i) for i in items[:5])
            context.log.error(f"{ref.fqn}: {message}")
            sink.send(
                Alert("drift", "error", ref.fqn, message, {"check": DRIFT, "items": [str(i) for i in items]}),
                context.log,
            )
            if blocking:
                outcome.blocking_failed.append(DRIFT)
            assert found.fix is not None
            metadata["chmv/fix"] = MetadataValue.md(drift_fix_markdown(found.fix, loaded, ref, dsn=dsn))
            metadata["chmv/plan_seconds"] = round(found.fix.seconds, 3)
        outcome.events.append(
            AssetCheckResult(
                asset_key=key,
                check_name=DRIFT,
                passed=not items,
                severity=AssetCheckSeverity.ERROR,
                metadata=metadata,
                description="; ".join(str(i) for i in items)[:2000] or None,
            )
        )
    return outcome


#: The lifecycle plan of each recent run, shared by the drift checks of every op of the run run in this process.
_RUN_PLANS: OrderedDict[tuple[str, str], DriftPlan] = OrderedDict()
_RUN_PLANS_KEPT = 8
_RUN_PLANS_LOCK = threading.Lock()


def run_drift_plan(context: AssetExecutionContext, client: Client, loaded: LoadedProject) -> DriftPlan:
    """The lifecycle plan the failing drift checks of this run link to, made at the first one and reused.

    One plan covers every target (``chmv plan`` reads the server in a handful of queries whatever their number),
    so a run checking many targets plans once per process (once per run with the in-process executor), not once
    per target, and only when a drift check fails.
    """
    key = (context.run_id, loaded.project.ddl_dir)
    with _RUN_PLANS_LOCK:
        found = _RUN_PLANS.get(key)
        if found is None:
            found = plan_for_drift(client, loaded, root=landing_dir(loaded))
            summary = found.plan.summary() if found.plan is not None else f"not made: {found.error}"
            context.log.info(f"lifecycle plan for the drift checks of this run: {summary} ({found.seconds:.2f}s)")
            _RUN_PLANS[key] = found
            while len(_RUN_PLANS) > _RUN_PLANS_KEPT:
                _RUN_PLANS.popitem(last=False)
    return found
