"""What chmv derives from an MV's (or a plain view's) SELECT, whichever parser read it, and the aggregate names.

:mod:`chmv_assets.ddl.parsing.select` derives :class:`SelectFacts` from sqlglot's tree; where sqlglot cannot read the
SELECT, :mod:`chmv_assets.ddl.query_tree` derives the same facts from ClickHouse's own query tree. Both collect the
tables read in a :class:`SourceUses`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chmv_assets.ddl.models import AggregateCall, ObjectRef, OutputColumn, SourceRole, SourceUse, Span

#: Aggregate combinators, longest first so ``MergeState`` strips as one unit.
COMBINATORS = (
    "SimpleState",
    "MergeState",
    "OrDefault",
    "Resample",
    "Distinct",
    "ForEach",
    "OrNull",
    "State",
    "Merge",
    "Array",
    "If",
    "Map",
)
#: Aggregate function names chmv recognises under combinators.
AGGREGATES = {
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "any",
    "anyLast",
    "anyHeavy",
    "argMin",
    "argMax",
    "uniq",
    "uniqExact",
    "uniqCombined",
    "uniqCombined64",
    "uniqHLL12",
    "uniqTheta",
    "quantile",
    "quantiles",
    "quantileExact",
    "quantileTiming",
    "quantileTDigest",
    "quantilesTDigest",
    "median",
    "groupArray",
    "groupUniqArray",
    "groupBitmap",
    "groupBitOr",
    "groupBitAnd",
    "topK",
    "sumMap",
    "minMap",
    "maxMap",
    "stddevPop",
    "stddevSamp",
    "varPop",
    "varSamp",
    "sumWithOverflow",
    "avgWeighted",
    "histogram",
    "entropy",
    "simpleLinearRegression",
    "first_value",
    "last_value",
    "countDistinct",
    "sequenceMatch",
    "windowFunnel",
    "retention",
    "deltaSum",
    "uniqUpTo",
}
_AGGREGATES_LOWER = {a.lower() for a in AGGREGATES}
#: Functions whose first argument names a dictionary.
DICTIONARY_FUNCTIONS_PREFIX = "dictget"


def split_combinators(name: str) -> tuple[str, tuple[str, ...]] | None:
    """``uniqMergeState`` → ``("uniq", ("Merge", "State"))``; None when not an aggregate."""
    if name in AGGREGATES or name.lower() in _AGGREGATES_LOWER:
        return name, ()
    for suffix in COMBINATORS:
        if name.endswith(suffix) and len(name) > len(suffix):
            inner = split_combinators(name[: -len(suffix)])
            if inner:
                parts = ("Merge", "State") if suffix == "MergeState" else (suffix,)
                return inner[0], (*inner[1], *parts)
    return None


def is_dictionary_function(name: str) -> bool:
    """``dictGet*``, ``dictHas`` and ``joinGet*``: their first argument names what they look up, a dictionary or a
    Join table (read whole at each insert, like a dictionary; both are lookups, not sources)."""
    lower = name.lower()
    return lower.startswith((DICTIONARY_FUNCTIONS_PREFIX, "joinget")) or lower == "dicthas"


@dataclass
class SelectFacts:
    """Everything chmv reads from a SELECT (see :class:`~chmv_assets.ddl.models.MaterializedView`).

    Attributes:
        functions: Every function the SELECT calls, by name as written (to find the SQL functions it uses).
    """

    sources: tuple[SourceUse, ...]
    trigger: ObjectRef | None
    dictionaries: tuple[ObjectRef, ...]
    group_by: tuple[str, ...]
    aggregates: tuple[AggregateCall, ...]
    outputs: tuple[OutputColumn, ...]
    has_join: bool
    joined: tuple[ObjectRef, ...]
    self_join: bool
    has_order_by: bool
    functions: tuple[str, ...] = ()


def source_role(ref: ObjectRef, trigger: ObjectRef | None, union_head: bool) -> SourceRole:
    """The role of a table the SELECT names: its trigger, the left-most table of a UNION branch, or read whole."""
    if ref == trigger:
        return SourceRole.TRIGGER
    return SourceRole.UNION_BRANCH if union_head else SourceRole.READ_WHOLE


@dataclass
class _Use:
    role: SourceRole
    spans: list[Span] = field(default_factory=list)
    aliased: list[bool] = field(default_factory=list)
    block: list[bool] = field(default_factory=list)


class SourceUses:
    """The tables a SELECT reads, each once: its role (where it is first met decides) and every place it is named."""

    def __init__(self) -> None:
        self._uses: dict[ObjectRef, _Use] = {}

    def add(self, ref: ObjectRef, role: SourceRole, span: Span | None = None, *, aliased: bool, block: bool) -> None:
        """``ref`` met in the SELECT; ``span``: where it is named (relative to the SELECT), when known.

        Args:
            aliased: The name there has an alias (or stands where none is allowed: ``k IN db.t``).
            block: The insert block stands in there (the left-most FROM of the query or of a UNION branch).
        """
        use = self._uses.setdefault(ref, _Use(role))
        if span is not None:
            use.spans.append(span)
            use.aliased.append(aliased)
            use.block.append(block)

    def sources(self) -> tuple[SourceUse, ...]:
        """Every table read, the trigger first, the others in the order they were met."""
        return tuple(
            SourceUse(ref=r, role=u.role, spans=tuple(u.spans), has_alias=tuple(u.aliased), block=tuple(u.block))
            for r, u in sorted(self._uses.items(), key=lambda kv: kv[1].role != SourceRole.TRIGGER)
        )
