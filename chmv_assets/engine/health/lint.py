"""Lint of the MV design (seed 001's rules), from the parsed model only: WARN checks with the reason and the fix.

Each rule is one :class:`LintRule` of :data:`RULES`: its id, what it checks, when an MV breaks it (and the words of
each finding), its message and its fix. :func:`lint_view` runs them in that order. Adding a rule is one object there
and one row of ``RULE_ROWS`` in ``tests/unit/engine/health/test_lint.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from chmv_assets.ddl.config import LintConfig
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project, Table
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

#: The words of one finding, filling its rule's ``message`` and ``fix`` (``str.format`` fields).
Words = dict[str, object]


@dataclass(frozen=True)
class Subject:
    """One MV as the rules see it, with what they ask of the project around it."""

    loaded: LoadedProject
    view: MaterializedView

    @property
    def project(self) -> Project:
        return self.loaded.project

    @property
    def budgets(self) -> LintConfig:
        return self.loaded.config.lint

    @property
    def trigger_table(self) -> Table | None:
        """The table whose inserts fire the MV (None for a refreshable MV or one that reads no table)."""
        return self.project.table(self.view.trigger) if self.view.trigger is not None else None

    @property
    def target(self) -> Table | None:
        """The table the MV writes (its TO table or its inner table)."""
        return self.project.table(self.view.writes_to)

    @property
    def target_family(self) -> str | None:
        target = self.target
        return target.engine.family if target is not None and target.engine is not None else None


@dataclass(frozen=True)
class LintRule:
    """One lint rule.

    Attributes:
        id: The rule's name in each finding (and in the check's ``chmv/rules`` metadata).
        checks: What it checks, in one line.
        find: The words of each finding of an MV; none when the MV keeps the rule.
        message: Why it is wrong: a template the finding's words fill.
        fix: What to do: a template too.
    """

    id: str
    checks: str
    find: Callable[[Subject], Iterable[Words]]
    message: str
    fix: str

    def findings(self, subject: Subject) -> list[LintFinding]:
        view = subject.view
        return [
            LintFinding(self.id, view.ref.fqn, str(view.location), self.message.format(**w), self.fix.format(**w))
            for w in self.find(subject)
        ]


def when(condition: bool, **words: object) -> list[Words]:
    """One finding with ``words`` when ``condition`` holds, else none."""
    return [words] if condition else []


def _dimension_joins(s: Subject) -> list[Words]:
    joined = [t for t in s.view.joined_tables if t != s.view.trigger]
    return when(s.view.has_join and bool(joined), tables=", ".join(t.fqn for t in joined))


def _fanout(s: Subject) -> list[Words]:
    if s.view.trigger is None:
        return []
    fanout = len(s.project.views_from(s.view.trigger))
    budget = s.budgets.max_views_per_source
    return when(fanout > budget, source=s.view.trigger.fqn, fanout=fanout, budget=budget, writes=fanout + 1)


def _dedup_source_additive(s: Subject) -> list[Words]:
    source = s.trigger_table
    if s.view.trigger is None or source is None or source.engine is None:
        return []
    additive = sorted({a.base for a in s.view.aggregates if a.base in ADDITIVE_AGGREGATES})
    return when(
        source.engine.family in SELF_DEDUP_ENGINES and bool(additive or s.target_family == "SummingMergeTree"),
        source=s.view.trigger.fqn,
        family=source.engine.family,
        what=", ".join(additive) if additive else "a SummingMergeTree target",
    )


def _streams(s: Subject) -> list[Words]:
    streams = [(r, s.project.tables[r].engine) for r in (u.ref for u in s.view.sources) if s.project.is_stream(r)]
    names = ", ".join(f"{r.fqn} ({engine.name})" for r, engine in streams if engine is not None)
    return when(bool(streams), streams=names, target=s.view.writes_to.fqn)


def _chain_depth(s: Subject) -> list[Words]:
    depth = s.loaded.graph.depth.get(s.view.ref.fqn, 0)
    return when(depth > s.budgets.max_chain_depth, depth=depth, limit=s.budgets.max_chain_depth)


def _group_by_into_merge_tree(s: Subject) -> list[Words]:
    target = s.target
    aggregating = bool(s.view.group_by or s.view.aggregates)
    return when(
        aggregating and target is not None and s.target_family == "MergeTree",
        keys=", ".join(s.view.group_by) or "no key",
        target=s.view.writes_to.fqn,
        engine=target.engine.name if target is not None and target.engine is not None else "",
    )


def _aggregate_columns_without_state(s: Subject) -> list[Words]:
    target = s.target
    if target is None or s.target_family != "AggregatingMergeTree":
        return []
    states = {a.output for a in s.view.aggregates if a.is_state}
    return [
        {"column": column.name, "type": column.type}
        for column in target.columns
        if (state := column.data_type.aggregate) is not None
        and not state.simple
        and s.view.output(column.name)
        and column.name not in states
    ]


#: Every rule, in the order an MV's findings are listed.
RULES: tuple[LintRule, ...] = (
    LintRule(
        id="join_instead_of_dictget",
        checks="an MV JOINs a table other than its trigger",
        find=_dimension_joins,
        message="JOINs {tables}: the whole right table is read on every insert block.",
        fix="load the dimension into a dictionary and look it up with dictGet().",
    ),
    LintRule(
        id="self_join_on_trigger",
        checks="an MV joins its trigger table with itself",
        find=lambda s: when(s.view.self_join, trigger=s.view.trigger.fqn if s.view.trigger else ""),
        message="joins its trigger {trigger} with itself: both sides see only the inserted block, so matches from "
        "earlier inserts are silently missed.",
        fix="join against a separate target table, or aggregate in the target (AggregatingMergeTree).",
    ),
    LintRule(
        id="write_amplification",
        checks="more MVs fire on one table than lint.max_views_per_source",
        find=_fanout,
        message="{source} feeds {fanout} MVs (budget {budget}): every insert is written {writes} times and each "
        "write makes parts to merge.",
        fix="combine MVs into wider targets, or raise lint.max_views_per_source in chmv.toml if intended.",
    ),
    LintRule(
        id="dedup_source_additive_aggregate",
        checks="an MV on a deduplicating table (ReplacingMergeTree…) sums, counts or writes a SummingMergeTree",
        find=_dedup_source_additive,
        message="{source} is a {family} but the MV aggregates with {what}: the MV fires on every insert, so "
        "duplicates are counted twice and the source's later dedup never reaches the target.",
        fix="deduplicate before the MV (insert dedup tokens), use argMaxState/uniqState, or a ReplacingMergeTree "
        "target.",
    ),
    LintRule(
        id="stream_source",
        checks="an MV reads a stream table (Kafka, RabbitMQ, S3Queue…), which chmv never reads",
        find=_streams,
        message="reads the stream table {streams}: chmv never reads a stream (a SELECT consumes messages this MV "
        "then never sees), so {target} is not parity-checked or rebuilt from it and holds the only copy of those "
        "rows; partitions of the targets further down that are still open pause this consumer for their swap.",
        fix="keep the stream's messages somewhere chmv can read them (land them in the landing zone, or keep "
        "{target} a MergeTree with the raw rows and no TTL shorter than you need) and check the targets that read "
        "it; join a stream with nothing (its other side would consume it too).",
    ),
    LintRule(
        id="no_to_clause",
        checks="an insert-triggered MV without a TO table",
        find=lambda s: when(s.view.target is None and not s.view.refreshable),
        message="has no TO table: its inner table cannot be altered, backfilled or swapped independently.",
        fix="create the target table explicitly and use CREATE MATERIALIZED VIEW … TO target.",
    ),
    LintRule(
        id="populate",
        checks="an MV created with POPULATE",
        find=lambda s: when(s.view.populate),
        message="uses POPULATE: rows inserted while it populates are lost or doubled.",
        fix="create the MV without POPULATE and backfill partitions (chmv rebuild).",
    ),
    LintRule(
        id="chain_depth",
        checks="an MV deeper in a chain of MVs than lint.max_chain_depth",
        find=_chain_depth,
        message="sits at depth {depth} of an MV chain (limit {limit}): a bug upstream silently corrupts every hop "
        "below.",
        fix="prefer independent MVs on the source over a chain, or raise lint.max_chain_depth.",
    ),
    LintRule(
        id="order_by_in_select",
        checks="ORDER BY in an MV's SELECT",
        find=lambda s: when(s.view.has_order_by),
        message="has ORDER BY in its SELECT: it has no effect, the target keeps its own sort order.",
        fix="remove the ORDER BY; set the target's ORDER BY instead.",
    ),
    LintRule(
        id="group_by_into_merge_tree",
        checks="an aggregating MV writing a plain MergeTree",
        find=_group_by_into_merge_tree,
        message="aggregates (GROUP BY {keys}) into {target}, a plain {engine}: the MV runs per insert block, so each "
        "block writes its own row per group; the table holds partial aggregates whose number depends on how the "
        "inserts were batched, and a reader that counts rows or takes one row per group is wrong.",
        fix="make the target a SummingMergeTree ORDER BY the group keys (sums merge per key) or an "
        "AggregatingMergeTree with -State columns, and read it with GROUP BY (sum(), -Merge); chmv's parity "
        "compares its sums and distinct groups, which batching does not change.",
    ),
    LintRule(
        id="aggregating_without_state",
        checks="an AggregateFunction column of an AggregatingMergeTree target written without a -State function",
        find=_aggregate_columns_without_state,
        message="writes {column} ({type}) without a -State function: raw values in an AggregateFunction column "
        "corrupt the aggregate.",
        fix="write {column} with the matching -State combinator (e.g. sumState(x)).",
    ),
)


def lint_view(loaded: LoadedProject, view: MaterializedView) -> list[LintFinding]:
    """The findings of one MV, in the order of :data:`RULES`."""
    subject = Subject(loaded, view)
    return [finding for rule in RULES for finding in rule.findings(subject)]


def lint_target(loaded: LoadedProject, target: ObjectRef) -> list[LintFinding]:
    """The findings of every MV writing ``target``."""
    return [f for view in loaded.project.views_into(target) for f in lint_view(loaded, view)]


def lint_project(loaded: LoadedProject) -> list[LintFinding]:
    """Every finding of the project, in definition order."""
    return [f for view in loaded.project.views.values() for f in lint_view(loaded, view)]
