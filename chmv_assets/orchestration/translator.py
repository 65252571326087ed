"""Map parsed DDL objects to Dagster asset specs; subclass to rename, regroup or repartition."""

from __future__ import annotations

import warnings
from datetime import timedelta
from functools import cache

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetKey,
    AssetSpec,
    BetaWarning,
    FreshnessPolicy,
    MetadataValue,
    MultiToSingleDimensionPartitionMapping,
    PartitionMapping,
    PartitionsDefinition,
    TableColumn,
    TableColumnDep,
    TableColumnLineage,
    TableSchema,
    TimeWindowPartitionMapping,
    TimeWindowPartitionsDefinition,
)

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import Column, Dictionary, MaterializedView, ObjectRef, Table
from chmv_assets.ddl.names import safe_name
from chmv_assets.ddl.partitioning import TargetPartitioning
from chmv_assets.engine.health.staleness import freshness_window
from chmv_assets.engine.ingest.landing import is_ingested
from chmv_assets.errors import DDLError, DDLProblem
from chmv_assets.orchestration.partitions import TIME_DIMENSION, partitions_definition, time_partitions_of
from chmv_assets.sql.quoting import qualified


def daily_partitioning(loaded: LoadedProject) -> TargetPartitioning:
    """The partitioning of a source's daily Spark ingestion asset (spark.assets): days of the partition calendar."""
    return TargetPartitioning(grain=Grain.DAY, zone=loaded.config.timezone, start=loaded.config.partition_start)


class ChmvTranslator:
    """Hooks that turn chmv's parsed objects into Dagster metadata, in the style of dagster-dbt's translator.

    Override one hook to change one thing::

        class MyTranslator(ChmvTranslator):
            def get_asset_key(self, ref):
                return AssetKey(["clickhouse", ref.database, ref.name])
    """

    def get_asset_key(self, ref: ObjectRef) -> AssetKey:
        """``[database, name]``, each through :func:`~chmv_assets.ddl.names.safe_name`.

        A name Dagster allows stays as it is; any other gets its disallowed characters replaced by ``_``
        and a short hash of the exact name, so ``a-b`` and ``a_b`` stay two assets. The exact name is in
        the ``chmv/object`` metadata.
        """
        return AssetKey([safe_name(ref.database), safe_name(ref.name)])

    def get_group_name(self, ref: ObjectRef) -> str:
        """One group per database (its name through :func:`~chmv_assets.ddl.names.safe_name`)."""
        return safe_name(ref.database)

    def get_partitioning(self, loaded: LoadedProject, ref: ObjectRef) -> TargetPartitioning:
        """How the target is partitioned: the loaded project's object, from its PARTITION BY
        (:meth:`~chmv_assets.ddl.loader.LoadedProject.partitioning`).

        Override it to partition a target otherwise: the Definitions are built over the project with what it returns
        (:func:`translated`), so the Dagster partitions, the keys, the windows and the SQL that rebuilds and checks a
        partition all follow it. The SQL swaps ClickHouse partitions: a partitioning that does not match the
        PARTITION BY (``dataclasses.replace`` of the default) can only coarsen it, e.g. to ``grain=None, keys=()``
        (the whole table rebuilt and checked at once).
        """
        return loaded.partitioning(ref)

    def get_partitions_def(self, loaded: LoadedProject, ref: ObjectRef) -> PartitionsDefinition | None:
        """Partitions of :meth:`get_partitioning`: time windows starting at ``partition_start``; windows × the key's
        values, or the key's values alone, where it has a key part (:mod:`chmv_assets.orchestration.partitions`)."""
        return partitions_definition(self.get_partitioning(loaded, ref))

    def get_description(self, loaded: LoadedProject, ref: ObjectRef) -> str | None:
        """The SQL comment above the CREATE statement, then what writes the table."""
        project = loaded.project
        obj = project.table(ref) or project.dictionaries.get(ref)
        parts = [obj.description] if obj is not None and obj.description else []
        views = project.views_into(ref)
        if views:
            parts.append("Written by " + ", ".join(f"`{v.ref.fqn}`" for v in views) + ".")
        return "\n\n".join(parts) or None

    def get_metadata(self, loaded: LoadedProject, ref: ObjectRef) -> dict:
        """DDL, engine, ORDER BY, TTL, schema, column lineage and chain depth for the UI.

        The exact name is in ``chmv/object`` (``db.name``) and, unambiguous when a name holds a dot, in
        ``chmv/database`` and ``chmv/table``: the asset key may carry a sanitized form of it.
        """
        project = loaded.project
        table = project.table(ref)
        dictionary = project.dictionaries.get(ref)
        meta: dict = {
            "chmv/object": ref.fqn,
            "chmv/database": ref.database,
            "chmv/table": ref.name,
            "chmv/chain_depth": loaded.graph.depth.get(ref.fqn, 0),
        }
        obj: Table | Dictionary | None = table or dictionary
        if obj is not None:
            meta["chmv/ddl"] = MetadataValue.md(f"```sql\n{obj.statement}\n```")
            meta["chmv/ddl_file"] = str(obj.location)
            if obj.columns:
                meta["dagster/column_schema"] = TableSchema(columns=[_column(c) for c in obj.columns])
        if table is not None:
            if table.engine is not None:
                args = f"({', '.join(table.engine.arguments)})" if table.engine.arguments else ""
                meta["chmv/engine"] = table.engine.name + args
            for key, value in (
                ("order_by", table.order_by),
                ("ttl", table.ttl),
                ("partition_by", table.partition_by.sql if table.partition_by else None),
            ):
                if value:
                    meta[f"chmv/{key}"] = value
            partitioning = self.get_partitioning(loaded, ref)
            if partitioning.note:
                meta["chmv/partitioning_note"] = partitioning.note
        views = project.views_into(ref)
        if views:
            meta["chmv/materialized_views"] = MetadataValue.md(
                "\n\n".join(f"**{v.ref.fqn}** ({v.location})\n```sql\n{v.statement}\n```" for v in views)
            )
            lineage = _column_lineage(views, self)
            if lineage is not None:
                meta["dagster/column_lineage"] = lineage
        return meta

    def get_upstream(self, loaded: LoadedProject, ref: ObjectRef) -> list[ObjectRef]:
        """Sources and dictionaries of the MVs writing ``ref`` (a dictionary: its source table; a plain view: what it
        reads); for a refreshable MV's ``DEPENDS ON`` another, that MV's target (it refreshes after it)."""
        project = loaded.project
        if ref in project.dictionaries:
            src = project.dictionaries[ref].source_table
            return [src] if src is not None else []
        if ref in project.plain_views:  # an MV reading a plain view reads its tables
            return list(project.plain_views[ref].reads)
        ups: dict[ObjectRef, None] = {}
        feedback = loaded.graph.feedback  # a read of what the MV feeds (dedup, feedback): not upstream of it
        for view in project.views_into(ref):
            for source in view.source_refs:
                if source != ref and (source.fqn, view.ref.fqn) not in feedback:
                    ups[source] = None
            for dictionary in view.dictionaries:
                if (dictionary.fqn, view.ref.fqn) not in feedback:
                    ups[dictionary] = None
            ordered = loaded.graph.ordered_depends  # a DEPENDS ON against the flow orders nothing
            for other in view.depends_on:
                if (other.fqn, view.ref.fqn) in ordered:
                    before = project.views[other].writes_to if other in project.views else other
                    if before != ref:
                        ups[before] = None
        return list(ups)

    def get_partition_mapping(
        self, loaded: LoadedProject, ref: ObjectRef, upstream: ObjectRef
    ) -> PartitionMapping | None:
        """How a partitioned target's partitions map onto a partitioned upstream.

        Upstreams with time partitions are chained targets and the daily Spark ingestion assets of
        sources with an event-time column. Time windows overlap; upstream partitions that do not
        exist yet are allowed: the current month of a monthly target covers future days of a daily
        upstream, and a rollup's window may reach past today. Without that, Dagster refuses every
        backfill selection that includes the current period ("depends on non-existent partitions").
        A time × key target and a time-partitioned upstream with the same windows map through the windows; any
        other pair where one side has a key part depends on every upstream partition.
        """
        if not loaded.project.views_into(ref):
            return None
        downstream_def = self.get_partitions_def(loaded, ref)
        if downstream_def is None:
            return None
        if loaded.project.views_into(upstream):
            upstream_def = self.get_partitions_def(loaded, upstream)
        elif is_ingested(loaded, upstream):  # with a landing zone, a daily ingestion asset (spark.assets)
            upstream_def = partitions_definition(daily_partitioning(loaded))
        else:
            return None
        if upstream_def is None:
            return None
        time_down = isinstance(downstream_def, TimeWindowPartitionsDefinition)
        time_up = isinstance(upstream_def, TimeWindowPartitionsDefinition)
        if time_down and time_up:
            return _allow_future_upstream()
        if time_partitions_of(downstream_def) == time_partitions_of(upstream_def) and (time_down or time_up):
            return _through_windows()
        return _every_upstream_partition()

    def get_freshness_policy(self, loaded: LoadedProject, ref: ObjectRef) -> FreshnessPolicy | None:
        """Dagster's freshness of an MV target: it fails once no write has reached the target for longer than chmv's
        staleness SLA (``sla_minutes``; a refreshable MV's period on top), as the ``chmv_live_state`` sensor records
        the writes (:func:`~chmv_assets.engine.health.staleness.freshness_window`). None for sources and dictionaries.

        Time since the last write is not chmv's staleness (how far the target trails its sources): a target whose
        sources receive no rows fails this freshness and is not stale (docs/checks-and-sensors.md).
        """
        window = freshness_window(loaded, ref)
        return _time_window_policy(window) if window is not None else None

    def get_asset_spec(self, loaded: LoadedProject, ref: ObjectRef) -> AssetSpec:
        """The spec assembled from the hooks above (memoized per project and object)."""
        return loaded.derived(("chmv/asset_spec", self, ref), lambda: _spec(self, loaded, ref))


@cache
def _time_window_policy(fail_window: timedelta) -> FreshnessPolicy:
    """One policy per window, shared by every target with that window."""
    return FreshnessPolicy.time_window(fail_window=fail_window)


@cache
def _through_windows() -> MultiToSingleDimensionPartitionMapping:
    """A time × key target and an upstream of the same windows: each window's partitions map onto that window."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        return MultiToSingleDimensionPartitionMapping(partition_dimension_name=TIME_DIMENSION)


@cache
def _every_upstream_partition() -> AllPartitionMapping:
    return AllPartitionMapping()


@cache
def _allow_future_upstream() -> TimeWindowPartitionMapping:
    """One immutable mapping shared by every time-partitioned dependency."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        return TimeWindowPartitionMapping(allow_nonexistent_upstream_partitions=True)


def _spec(translator: ChmvTranslator, loaded: LoadedProject, ref: ObjectRef) -> AssetSpec:
    kind = "dictionary" if ref in loaded.project.dictionaries else "table"
    return AssetSpec(
        key=translator.get_asset_key(ref),
        deps=[
            AssetDep(translator.get_asset_key(u), partition_mapping=translator.get_partition_mapping(loaded, ref, u))
            for u in translator.get_upstream(loaded, ref)
        ],
        description=translator.get_description(loaded, ref),
        metadata=translator.get_metadata(loaded, ref),
        group_name=translator.get_group_name(ref),
        partitions_def=translator.get_partitions_def(loaded, ref) if loaded.project.views_into(ref) else None,
        freshness_policy=translator.get_freshness_policy(loaded, ref),
        kinds={"clickhouse", kind},
    )


def translated(loaded: LoadedProject, translator: ChmvTranslator) -> LoadedProject:
    """``loaded`` with each target partitioned as ``translator.get_partitioning`` says: the one object the Dagster half
    (partitions, ops, jobs, sensors) and the SQL half (rebuilds, checks, sweeps) of the Definitions read. ``loaded``
    itself where the hook changes nothing."""
    if type(translator).get_partitioning is ChmvTranslator.get_partitioning:
        return loaded
    return loaded.with_partitionings({t: translator.get_partitioning(loaded, t) for t in loaded.project.targets})


def asset_objects(loaded: LoadedProject, translator: ChmvTranslator) -> list[ObjectRef]:
    """Every object that becomes an asset: the MV targets, what they read, and what those dictionaries read."""
    objects = dict.fromkeys(loaded.project.targets)
    pending = list(objects)
    while pending:
        for upstream in translator.get_upstream(loaded, pending.pop()):
            if upstream not in objects:
                objects[upstream] = None
                if upstream in loaded.project.dictionaries:
                    pending.append(upstream)
    return list(objects)


def check_distinct_keys(loaded: LoadedProject, translator: ChmvTranslator) -> dict[AssetKey, ObjectRef]:
    """The asset key of every asset object, checked to be distinct.

    Raises:
        DDLError: Two objects map to one key (a translator that drops part of the name); the problem
            names both objects and where they are defined.
    """
    project = loaded.project
    keys: dict[AssetKey, ObjectRef] = {}
    problems = []
    for ref in asset_objects(loaded, translator):
        key = translator.get_asset_key(ref)
        first = keys.setdefault(key, ref)
        if first == ref:
            continue
        obj = project.table(ref) or project.dictionaries.get(ref) or project.views.get(ref)
        file, line, column = (
            (obj.location.file, obj.location.line, obj.location.column) if obj else (project.ddl_dir, 1, 1)
        )
        problems.append(
            DDLProblem(
                file,
                line,
                column,
                f"{qualified(first)} and {qualified(ref)} map to the same asset key {key.to_user_string()!r}",
                f"make {type(translator).__name__}.get_asset_key return distinct keys for them, or rename one",
            )
        )
    if problems:
        raise DDLError(problems)
    return keys


def _column(column: Column) -> TableColumn:
    description = column.comment
    if column.default_kind:
        description = f"{column.default_kind} {column.default_expression}" + (
            f" — {description}" if description else ""
        )
    return TableColumn(name=column.name, type=column.type or "unknown", description=description)


def _column_lineage(views: tuple[MaterializedView, ...], translator: ChmvTranslator) -> TableColumnLineage | None:
    deps: dict[str, list[TableColumnDep]] = {}
    for view in views:
        refs = {r.fqn: r for r in view.source_refs}
        keys: dict[str, AssetKey] = {}
        for out in view.output_columns:
            for table_fqn, column in out.source_columns:
                key = keys.get(table_fqn)
                if key is None:
                    database, _, name = table_fqn.partition(".")
                    ref = refs.get(table_fqn) or ObjectRef(database=database, name=name)
                    key = keys[table_fqn] = translator.get_asset_key(ref)
                dep = TableColumnDep(asset_key=key, column_name=column)
                if dep not in deps.setdefault(out.name, []):
                    deps[out.name].append(dep)
    return TableColumnLineage(deps_by_column=deps) if deps else None
