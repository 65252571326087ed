"""Build Dagster assets from a parsed project: targets are partitioned, sources and dictionaries upstream."""


from collections.abc import Sequence

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionsDefinition,
    multi_asset,
)

from chmv_assets.backfill_sql import PartitionWindow
from chmv_assets.loader import LoadedProject
from chmv_assets.models import ObjectRef
from chmv_assets.rebuild import rebuild
from chmv_assets.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

#: Concurrency pool of every asset that opens ClickHouse: the demo instance limits it to one at a time.
CLICKHOUSE_POOL = "clickhouse"


def partition_windows(context: AssetExecutionContext) -> list[PartitionWindow | None]:
    """The partitions a run materializes (a single-run backfill covers a range), or ``[None]``."""
    if not context.has_partition_key:
        return [None]
    partitions_def = context.assets_def.partitions_def
    assert isinstance(partitions_def, TimeWindowPartitionsDefinition)
    windows = []
    for key in context.partition_keys:
        tw = partitions_def.time_window_for_partition_key(key)
        windows.append(PartitionWindow(key=key, start=tw.start.replace(tzinfo=None), end=tw.end.replace(tzinfo=None)))
    return windows


def build_target_asset(loaded: LoadedProject, ref: ObjectRef, translator: ChmvTranslator) -> AssetsDefinition:
    """The asset of one MV target: each partition is rebuilt from the MVs' own SELECT and swapped in."""
    spec = translator.get_asset_spec(loaded, ref)
    backfill_policy = BackfillPolicy.single_run() if spec.partitions_def is not None else None

    @multi_asset(
        specs=[spec],
        name=f"rebuild_{'__'.join(spec.key.path)}",
        backfill_policy=backfill_policy,
        pool=CLICKHOUSE_POOL,
    )
    def _rebuild(context: AssetExecutionContext, clickhouse: ClickHouseResource) -> MaterializeResult:
        results = []
        with clickhouse.get_client() as client:
            for window in partition_windows(context):
                results.append(rebuild(client, loaded.project, ref, window, log=context.log.info))
        return MaterializeResult(
            asset_key=spec.key,
            metadata={
                "chmv/engine_path": "clickhouse",
                "chmv/partitions": len(results),
                "chmv/rows_written": sum(r.rows_written for r in results),
                "chmv/method": ", ".join(sorted({r.method for r in results})),
                "chmv/seconds": round(sum(r.seconds for r in results), 3),
                "chmv/statements": MetadataValue.md("```sql\n" + ";\n".join(results[-1].statements) + "\n```"),
            },
        )

    return _rebuild


def build_chmv_assets(loaded: LoadedProject, translator: ChmvTranslator | None = None) -> Sequence[AssetsDefinition | AssetSpec]:
    """One materializable asset per MV target, and an external asset per source table and dictionary.

    Args:
        loaded: The parsed project.
        translator: Hooks for keys, groups, partitions and metadata.
    """
    translator = translator or ChmvTranslator()
    project = loaded.project
    targets = project.targets
    assets: list[AssetsDefinition | AssetSpec] = [build_target_asset(loaded, ref, translator) for ref in targets]
    upstream = dict.fromkeys(ref for target in targets for ref in translator.get_upstream(loaded, target))
    for ref in list(upstream):
        if ref in project.dictionaries:
            for dep in translator.get_upstream(loaded, ref):
                upstream.setdefault(dep)
    for ref in upstream:
        if ref not in targets:
            assets.append(translator.get_asset_spec(loaded, ref))
    return assets
