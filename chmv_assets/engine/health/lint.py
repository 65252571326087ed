"""Lint of the MV design (seed 001's rules), from the parsed model only: WARN checks with the reason and the fix."""

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import MaterializedView, ObjectRef
from chmv_assets.engine.health.verdicts import SELF_DEDUP_ENGINES, LintFinding

#: Aggregates that count a duplicated source row twice.
ADDITIVE_AGGREGATES = {
    "count",
    "sum",
    "sumWithOverflow",
    "sumKahan",
    "avg",
    "groupArray",
    "sumMap",
    "quantile",
    "quantiles",
    "quantileTiming",
    "topK",
}


def lint_view(loaded: LoadedProject, view: MaterializedView) -> list[LintFinding]:
    """The findings of one MV."""
    project, config = loaded.project, loaded.config.lint
    out: list[LintFinding] = []
    where = str(view.location)

    def add(rule: str, reason: str, fix: str) -> None:
        out.append(LintFinding(rule, view.ref.fqn, where, reason, fix))

    dimension_joins = [t for t in view.joined_tables if t != view.trigger]
    if view.has_join and dimension_joins:
        add(
            "join_instead_of_dictget",
            f"JOINs {', '.join(t.fqn for t in dimension_joins)}: the whole right table is read on every insert block.",
            "load the dimension into a dictionary and look it up with dictGet().",
        )
    if view.self_join:
        add(
            "self_join_on_trigger",
            f"joins its trigger {view.trigger.fqn if view.trigger else ''} with itself: both sides see only the "
            "inserted block, so matches from earlier inserts are silently missed.",
            "join against a separate target table, or aggregate in the target (AggregatingMergeTree).",
        )
    if view.trigger is not None:
        fanout = project.views_from(view.trigger)
        if len(fanout) > config.max_views_per_source:
            add(
                "write_amplification",
                f"{view.trigger.fqn} feeds {len(fanout)} MVs (budget {config.max_views_per_source}): every insert "
                f"is written {len(fanout) + 1} times and each write makes parts to merge.",
                "combine MVs into wider targets, or raise lint.max_views_per_source in chmv.toml if intended.",
            )
        source = project.table(view.trigger)
        target = project.table(view.writes_to)
        additive = sorted({a.base for a in view.aggregates if a.base in ADDITIVE_AGGREGATES})
        summing_target = target is not None and target.engine is not None and target.engine.family == "SummingMergeTree"
        if (
            source is not None
            and source.engine is not None
            and source.engine.family in SELF_DEDUP_ENGINES
            and (additive or summing_target)
        ):
            what = ", ".join(additive) if additive else "a SummingMergeTree target"
            add(
                "dedup_source_additive_aggregate",
                f"{view.trigger.fqn} is a {source.engine.family} but the MV aggregates with {what}: the MV fires on "
                "every insert, so duplicates are counted twice and the source's later dedup never reaches the target.",
                "deduplicate before the MV (insert dedup tokens), use argMaxState/uniqState, or a ReplacingMergeTree "
                "target.",
            )
    streams = [s.ref for s in view.sources if project.is_stream(s.ref)]
    if streams:
        names = ", ".join(f"{r.fqn} ({project.tables[r].engine.name})" for r in streams)  # type: ignore[union-attr]
        add(
            "stream_source",
            f"reads the stream table {names}: chmv never reads a stream (a SELECT consumes messages this MV then "
            f"never sees), so {view.writes_to.fqn} is not parity-checked or rebuilt from it and holds the only copy "
            "of those rows; partitions of the targets further down that are still open pause this consumer for "
            "their swap.",
            "keep the stream's messages somewhere chmv can read them (land them in the landing zone, or keep "
            f"{view.writes_to.fqn} a MergeTree with the raw rows and no TTL shorter than you need) and check the "
            "targets that read it; join a stream with nothing (its other side would consume it too).",
        )
    if view.target is None and not view.refreshable:
        add(
            "no_to_clause",
            "has no TO table: its inner table cannot be altered, backfilled or swapped independently.",
            "create the target table explicitly and use CREATE MATERIALIZED VIEW … TO target.",
        )
    if view.populate:
        add(
            "populate",
            "uses POPULATE: rows inserted while it populates are lost or doubled.",
            "create the MV without POPULATE and backfill partitions (chmv rebuild).",
        )
    depth = loaded.graph.depth.get(view.ref.fqn, 0)
    if depth > config.max_chain_depth:
        add(
            "chain_depth",
            f"sits at depth {depth} of an MV chain (limit {config.max_chain_depth}): a bug upstream silently "
            "corrupts every hop below.",
            "prefer independent MVs on the source over a chain, or raise lint.max_chain_depth.",
        )
    if view.has_order_by:
        add(
            "order_by_in_select",
            "has ORDER BY in its SELECT: it has no effect, the target keeps its own sort order.",
            "remove the ORDER BY; set the target's ORDER BY instead.",
        )
    target = project.table(view.writes_to)
    aggregating = bool(view.group_by or view.aggregates)
    if aggregating and target is not None and target.engine is not None and target.engine.family == "MergeTree":
        keys = ", ".join(view.group_by) or "no key"
        add(
            "group_by_into_merge_tree",
            f"aggregates (GROUP BY {keys}) into {view.writes_to.fqn}, a plain {target.engine.name}: the MV runs "
            "per insert block, so each block writes its own row per group; the table holds partial aggregates "
            "whose number depends on how the inserts were batched, and a reader that counts rows or takes one "
            "row per group is wrong.",
            "make the target a SummingMergeTree ORDER BY the group keys (sums merge per key) or an "
            "AggregatingMergeTree with -State columns, and read it with GROUP BY (sum(), -Merge); chmv's parity "
            "compares its sums and distinct groups, which batching does not change.",
        )
    if target is not None and target.engine is not None and target.engine.family == "AggregatingMergeTree":
        states = {a.output for a in view.aggregates if a.is_state}
        for column in target.columns:
            state = column.data_type.aggregate
            if state is not None and not state.simple and view.output(column.name) and column.name not in states:
                add(
                    "aggregating_without_state",
                    f"writes {column.name} ({column.type}) without a -State function: raw values in an "
                    "AggregateFunction column corrupt the aggregate.",
                    f"write {column.name} with the matching -State combinator (e.g. sumState(x)).",
                )
    return out


def lint_target(loaded: LoadedProject, target: ObjectRef) -> list[LintFinding]:
    """The findings of every MV writing ``target``."""
    return [f for view in loaded.project.views_into(target) for f in lint_view(loaded, view)]


def lint_project(loaded: LoadedProject) -> list[LintFinding]:
    """Every finding of the project, in definition order."""
    return [f for view in loaded.project.views.values() for f in lint_view(loaded, view)]
