"""Build Dagster assets from a parsed project: targets are partitioned, sources and dictionaries upstream."""

from collections.abc import Sequence
from typing import Any, Literal

from clickhouse_connect.driver.client import Client
from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Config,
    TimeWindowPartitionsDefinition,
    multi_asset,
)
from pydantic import Field

from asset_checks.inline import CheckFindings, check_events, find_checks, inline_check_specs
from asset_checks.names import PARITY
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.names import safe_name
from chmv_assets.ddl.partitioning import PartitionWindow, TargetPartitioning
from chmv_assets.engine.health.parity import verify_rebuilt
from chmv_assets.engine.health.recovery import RebuildVerdict
from chmv_assets.engine.ingest.landing import ingested_sources, landing_dir
from chmv_assets.engine.rebuild.executor import Verifier, run_rebuild
from chmv_assets.engine.rebuild.planner import RebuildPlan, spark_capable
from chmv_assets.errors import ChmvError
from chmv_assets.orchestration.partitions import dynamic_partitions_of
from chmv_assets.orchestration.run_logs import forward_engine_logs
from chmv_assets.orchestration.run_report import PartitionEvents
from chmv_assets.orchestration.translator import ChmvTranslator, check_distinct_keys
from resources.clickhouse import CLICKHOUSE_POOL, ClickHouseResource
from spark.session import session_of
from spark.staging import SparkStager


def partition_windows(context: AssetExecutionContext, partitioning: TargetPartitioning) -> list[PartitionWindow | None]:
    """The partitions a run materializes (a single-run backfill covers a range), or ``[None]``: its keys decoded by the
    target's partitioning (the one codec of keys)."""
    if not (context.has_partition_key or context.has_partition_key_range):
        return [None]
    return [partitioning.window_of(key) for key in context.partition_keys]


def run_keys(context: AssetExecutionContext) -> list[str | None]:
    """The partition keys of a run, or ``[None]`` (a run of an unpartitioned target)."""
    return list(context.partition_keys) if context.has_partition_key or context.has_partition_key_range else [None]


class RebuildConfig(Config):
    """Run configuration of a target asset."""

    engine: Literal["auto", "clickhouse", "spark"] = Field(
        default="auto",
        description="clickhouse: the MVs' SELECT over the source table; spark: over the landing zone's rows "
        "(read, cleaned and staged by Spark); auto: per partition, where coverage says its rows live (the source "
        "table, else the landing zone; neither: the rebuild is refused, see force).",
    )
    force: bool = Field(
        default=False,
        description="Rebuild partitions whose rows neither the source table nor the landing zone holds from what "
        "the source holds, and swap even where the rebuild leaves fewer rows than the live partition.",
    )


def target_groups(loaded: LoadedProject, translator: ChmvTranslator) -> list[tuple[bool, list[ObjectRef]]]:
    """Targets that share one op: same partitions definition and same engines, in lineage order.

    Returns ``(spark capable, targets)`` per group.

    One op per group instead of one per target keeps the code location fast to load with thousands
    of MVs (Dagster builds an op per multi-asset); each target stays its own asset, selectable alone.
    A chain that leaves a group and comes back (A in G -> B in H -> C in G) puts C in another op than
    A (a "generation" that grows at every change of group), so the op graph never has a cycle: Dagster
    would otherwise split the op into subsets whose names depend on each process's hash seed.
    """
    root = landing_dir(loaded)
    order = {fqn: i for i, layer in enumerate(loaded.graph.layers) for fqn in layer}
    targets = set(loaded.project.targets)
    kind: dict[ObjectRef, tuple] = {}
    generation: dict[ObjectRef, int] = {}
    groups: dict[tuple, list[ObjectRef]] = {}
    for ref in sorted(targets, key=lambda r: (order.get(r.fqn, 0), r.fqn)):
        kind[ref] = (translator.get_asset_spec(loaded, ref).partitions_def, spark_capable(loaded, ref, root))
        generation[ref] = max(
            (
                generation[u] + (kind[u] != kind[ref])
                for u in translator.get_upstream(loaded, ref)
                if u in targets and u in generation
            ),
            default=0,
        )
        groups.setdefault((*kind[ref], generation[ref]), []).append(ref)
    return [(with_spark, refs) for (_, with_spark, _), refs in groups.items()]


def _group_name(partitioning: TargetPartitioning, specs: list[AssetSpec], index: int, with_spark: bool) -> str:
    grain = partitioning.family
    if dynamic_partitions_of(specs[0].partitions_def) is not None:  # partitions of its own: an op of its own
        grain = f"{grain}_{safe_name('__'.join(specs[0].key.path))}"
    return f"rebuild_{grain}_targets" + ("_spark" if with_spark else "") + (f"_{index}" if index else "")


def build_target_assets(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetsDefinition]:
    """The assets of every MV target, one subsettable multi-asset per :func:`target_groups` group.

    Each partition of a selected target is rebuilt from its MVs' own SELECT and swapped in; upstream
    targets of a chain are rebuilt before their downstream ones. With a landing zone configured for
    the sources, a target can also rebuild from the landing zone through Spark (``engine`` in the run
    config; resource ``pyspark``). Either way the rebuild holds the write gate of the trigger sources,
    so it stays exact while ingestion runs. A target that fails does not stop the others of its op;
    the op fails at the end, naming each failure.
    """
    root = landing_dir(loaded)
    assets, names = [], set()
    for with_spark, group in target_groups(loaded, translator):
        specs = [translator.get_asset_spec(loaded, ref) for ref in group]
        partitioning = loaded.partitioning(group[0])  # the op's targets share their partitions
        name = _group_name(partitioning, specs, 0, with_spark)
        index = 1
        while name in names:
            name, index = _group_name(partitioning, specs, index, with_spark), index + 1
        names.add(name)
        assets.append(_group_asset(loaded, group, specs, name, root, with_spark))
    return assets


def _group_asset(
    loaded: LoadedProject, group: list[ObjectRef], specs: list[AssetSpec], name: str, root, with_spark: bool
) -> AssetsDefinition:
    by_key = dict(zip((s.key for s in specs), group, strict=True))
    partitions_def = specs[0].partitions_def
    check_specs = [c for spec in specs for c in inline_check_specs(loaded, spec.key, by_key[spec.key], partitions_def)]
    # Measured (benchmarks/bench_spark_backfill.py): one run over a range beats one run per partition. Partitions
    # named by key values have no range: a run each.
    timed = isinstance(partitions_def, TimeWindowPartitionsDefinition)
    backfill_policy = BackfillPolicy.single_run() if timed else None

    def run(context: AssetExecutionContext, config: RebuildConfig, clickhouse: ClickHouseResource):
        stager = SparkStager(lambda: session_of(context.resources.pyspark)) if with_spark else None
        selected_checks = context.selected_asset_check_keys
        failures: list[str] = []
        stopped: set = set()  # targets whose rebuild or blocking check failed in this run
        for key, ref in by_key.items():  # lineage order: upstream targets first
            if key in context.selected_asset_keys:
                blockers = [by_key[k].fqn for k in _upstream_in_op(loaded, by_key, ref) if k in stopped]
                if blockers:
                    message = f"{ref.fqn}: not rebuilt, its upstream {', '.join(blockers)} failed in this run"
                    context.log.error(message)
                    failures.append(message)
                    stopped.add(key)
                    continue
                checks = [c for c in selected_checks if c.asset_key == key]
                report = PartitionEvents(context, key)  # each partition's materialization, as it is swapped in
                try:
                    # a recovery run executes the engines the sensor's planner chose (re-checked, not re-chosen)
                    verdict = RebuildVerdict.from_tags(context.run.tags, ref) if config.engine == "auto" else None
                    windows = partition_windows(context, loaded.partitioning(ref))
                    with forward_engine_logs(context):
                        run = run_rebuild(
                            clickhouse,
                            loaded,
                            ref,
                            windows,
                            engine=config.engine,
                            root=root,
                            stager=stager,
                            force=config.force,
                            owner=f"dagster run {context.run_id}",
                            engines=verdict.engine_of() if verdict else None,
                            verify=_checks_of(context, loaded, ref, key, partitions_def, checks) if checks else None,
                            report=report,
                        )
                    yield from report.finished()
                except Exception as err:  # noqa: BLE001 - reported per target, re-raised together below
                    told = report.failed(run_keys(context))
                    context.log.error(f"{ref.fqn}: rebuild failed: {err}{told}")
                    failures.append(f"{ref.fqn}: {err}{told}")
                    stopped.add(key)
                    continue
                found = run.verified
                if isinstance(found, Exception):  # a check that failed to evaluate, after the materialization
                    raise found
            else:
                checks = [c for c in selected_checks if c.asset_key == key]
                found = None
                if checks:
                    with clickhouse.get_client() as client:
                        found = find_checks(context, client, loaded, ref, key, partitions_def, checks)
            if found is not None:
                outcome = check_events(context, loaded, ref, key, found, dsn=clickhouse.resolved_dsn)
                yield from outcome.events
                if outcome.blocking_failed:
                    stopped.add(key)
                    context.log.error(f"{ref.fqn}: blocking check failed: {'; '.join(outcome.blocking_failed)}")
        if failures:
            raise ChmvError("rebuild failed for " + "; ".join(failures))

    kwargs: dict[str, Any] = {
        "specs": specs,
        "check_specs": check_specs,
        "name": name,
        "backfill_policy": backfill_policy,
        "pool": CLICKHOUSE_POOL,
        "can_subset": True,
    }
    if with_spark:

        @multi_asset(**kwargs, required_resource_keys={"clickhouse", "pyspark"})
        def _rebuild(context: AssetExecutionContext, config: RebuildConfig):
            yield from run(context, config, context.resources.clickhouse)

        return _rebuild

    @multi_asset(**kwargs)
    def _rebuild_in_clickhouse(context: AssetExecutionContext, config: RebuildConfig, clickhouse: ClickHouseResource):
        yield from run(context, config, clickhouse)

    return _rebuild_in_clickhouse


def _checks_of(
    context: AssetExecutionContext,
    loaded: LoadedProject,
    ref: ObjectRef,
    key,
    partitions_def,
    checks: list,
) -> Verifier[CheckFindings | Exception]:
    """The run's verifier of ``ref``: its selected checks evaluated on the rebuild's client once its partitions are
    swapped (parity of what was rebuilt, in one batch: :func:`~chmv_assets.engine.health.parity.verify_rebuilt`). A
    check that fails to evaluate is handed back, raised once the run's materialization is recorded."""

    def verify(client: Client, plan: RebuildPlan, results) -> CheckFindings | Exception:
        try:
            verified = verify_rebuilt(client, loaded, plan, results) if any(c.name == PARITY for c in checks) else None
            return find_checks(context, client, loaded, ref, key, partitions_def, checks, verified=verified)
        except Exception as err:  # noqa: BLE001 - raised after the materialization
            return err

    return verify


def _upstream_in_op(loaded: LoadedProject, by_key: dict, ref: ObjectRef) -> list:
    """Keys of the targets of this op that ``ref``'s MVs read directly."""
    sources = {s for view in loaded.project.views_into(ref) for s in view.source_refs}
    return [k for k, r in by_key.items() if r in sources and r != ref]


def build_chmv_assets(
    loaded: LoadedProject, translator: ChmvTranslator | None = None
) -> Sequence[AssetsDefinition | AssetSpec]:
    """One materializable asset per MV target, and an external asset per source table and dictionary.

    Args:
        loaded: The parsed project.
        translator: Hooks for keys, groups, partitions and metadata.
    """
    translator = translator or ChmvTranslator()
    check_distinct_keys(loaded, translator)  # a DDLError naming both objects, not Dagster's conflicting specs
    assets: list[AssetsDefinition | AssetSpec] = list(build_target_assets(loaded, translator))
    assets += [translator.get_asset_spec(loaded, ref) for ref in external_upstream(loaded, translator)]
    return assets


def external_upstream(loaded: LoadedProject, translator: ChmvTranslator) -> list[ObjectRef]:
    """Sources and dictionaries of the targets that are external asset specs (not targets, not ingested)."""
    project = loaded.project
    upstream = dict.fromkeys(ref for target in project.targets for ref in translator.get_upstream(loaded, target))
    for ref in list(upstream):
        if ref in project.dictionaries or ref in project.plain_views:  # what they read is upstream too
            for dep in translator.get_upstream(loaded, ref):
                upstream.setdefault(dep)
    skip = set(project.targets) | set(ingested_sources(loaded))  # ingested: materialized by the Spark ingestion assets
    return [ref for ref in upstream if ref not in skip]
