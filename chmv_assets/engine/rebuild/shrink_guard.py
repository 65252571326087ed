"""The last line of defence: no swap that would shrink a live partition whose source may not hold it entirely.

Before a step's swap, when the planner set the step's ``guard`` (coverage does not say the source table
holds the partition entirely, or the source recorded deletes that may have touched it, and the plan is not
forced), the shadow's content is compared with the live partition's, both as readers see them (``FINAL`` for
engines that collapse rows at merge time), in one statement. A **shrink** is any decrease of:

- the row count (0 where the live partition holds 620,000, say);
- the total of a measure: per numeric column whose value readers see is decided by the rows alone (below), the sum
  of its positive values and the sum of its negated negative values, each a non-negative figure that only falls
  when rows (or magnitude) go. An unsigned column has only the first; a signed one both, so losing a -5 row of a
  balance is not hidden by losing a +5 one. Integers are compared exactly (summed as ``Int256``), floats and
  decimals to a relative 1e-7 (the order of summation differs between the two tables).

The measured columns, per engine family:

- MergeTree (and any family that keeps every row): every numeric column.
- SummingMergeTree: the sorting key's numeric columns and the summed columns (the engine's list, else every numeric
  column outside the key); any other column holds an arbitrary row's value after a merge.
- AggregatingMergeTree: the sorting key's numeric columns and the states whose finalized value is exact and summable
  (``finalizeAggregation`` of ``sum``, ``count``, ``uniqExact``, ``sumWithOverflow``, ``sumKahan`` and their ``-If``
  forms; a ``SimpleAggregateFunction`` of those as stored); a ``quantile`` or ``uniq`` state differs with the merge
  order, ``min``/``max``/``any`` are not totals.
- Replacing, (Versioned)Collapsing, Coalescing and Graphite: the sorting key's numeric columns only: which row of a
  key survives (a tie of versions), its sign and its version are bookkeeping, not measures.

A signed measure under a collapsing engine is a net per key: losing rows may raise either part (not caught), but a
fall of either is still refused. Non-finite floats (NaN, ±inf) never compare lower.

The refusal names each shrinking figure with both values; the shadow is dropped by the caller and the live
partition is untouched. Where the source holds the partition entirely and no delete may have touched it, the
rebuild recomputes exactly what parity compares against, so a smaller result is a correction parity explains and
is not stopped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import Column, ObjectRef, Table
from chmv_assets.ddl.types import AggregateFunctionType
from chmv_assets.engine.rebuild.planner import PartitionStep, RebuildPlan
from chmv_assets.errors import NOT_SWAPPED, ShrinkRefused
from chmv_assets.sql.quoting import qualified, quote

#: Engines whose rows collapse at merge time: a count of unmerged parts overstates what readers see.
COLLAPSING = (
    "ReplacingMergeTree",
    "CollapsingMergeTree",
    "VersionedCollapsingMergeTree",
    "SummingMergeTree",
    "AggregatingMergeTree",
    "CoalescingMergeTree",
    "GraphiteMergeTree",
)
#: Aggregate states whose finalized value is exact, independent of the merge order, and a total (``-If`` too).
SUMMABLE = frozenset({"sum", "count", "uniqExact", "sumWithOverflow", "sumKahan"})
#: Finalized values that are counts (unsigned integers) whatever their arguments.
_COUNTS = frozenset({"count", "uniqExact"})
#: Relative slack of a float or decimal total (the two tables sum in different orders).
FLOAT_SLACK = 1e-7


@dataclass(frozen=True)
class Total:
    """One non-negative figure of a table compared by the guard.

    Attributes:
        label: How the refusal names it (``sum(amount)``, ``sum(-balance) of its negative values``).
        sql: The aggregate over the table's rows (as readers see them).
        exact: Compared exactly (integers); else with :data:`FLOAT_SLACK`.
    """

    label: str
    sql: str
    exact: bool


def _final(table: Table) -> str:
    return " FINAL" if table.engine is not None and table.engine.family in COLLAPSING else ""


def totals(table: Table) -> list[Total]:
    """The measures of ``table`` the guard compares besides its rows (see the module docstring)."""
    family = table.engine.family if table.engine is not None else "MergeTree"
    keys = set(table.order_by_columns)
    summed = set(table.engine.argument_columns) if table.engine is not None else set()
    totalled = family not in COLLAPSING or family in ("SummingMergeTree", "AggregatingMergeTree")
    out: list[Total] = []
    for column in table.columns:
        if _unstored(column):
            continue
        kind = column.data_type
        if kind.aggregate is not None:
            out += _state_totals(column, kind.aggregate) if totalled else []
            continue
        if not kind.is_numeric:
            continue
        if column.name not in keys:
            if not totalled or family == "AggregatingMergeTree":
                continue
            if family == "SummingMergeTree" and summed and column.name not in summed:
                continue
        unsigned = kind.is_integer and kind.base.startswith("U")
        out += _value_totals(column.name, quote(column.name), kind.is_integer, unsigned)
    return out


def _unstored(column: Column) -> bool:
    """An ``ALIAS`` (computed from the others) or ``EPHEMERAL`` column (never stored, not selectable)."""
    kind = (column.default_kind or "").upper()
    return (
        kind in ("EPHEMERAL", "ALIAS")
        or re.search(r"\bEPHEMERAL\b", column.definition or "", re.IGNORECASE) is not None
    )


def _state_totals(column: Column, state: AggregateFunctionType) -> list[Total]:
    base = state.function.removesuffix("If") if state.function.endswith("If") else state.function
    if base not in SUMMABLE or (state.simple and base in _COUNTS):
        return []
    value = quote(column.name) if state.simple else f"finalizeAggregation({quote(column.name)})"
    label = column.name if state.simple else f"finalizeAggregation({column.name})"
    if base in _COUNTS:
        return _value_totals(label, value, integer=True, unsigned=True)
    argument = state.arguments[0] if state.arguments else None
    integer = argument is not None and argument.is_integer and base != "sumKahan"
    unsigned = integer and argument is not None and argument.base.startswith("U")
    return _value_totals(label, value, integer, unsigned)


def _value_totals(label: str, value: str, integer: bool, unsigned: bool) -> list[Total]:
    cast = "toInt256" if integer else "toFloat64"
    if unsigned:
        return [Total(f"sum({label})", f"sum({cast}({value}))", integer)]
    return [
        Total(f"sum({label}) of its positive values", f"sumIf({cast}({value}), {value} > 0)", integer),
        Total(f"sum(-{label}) of its negative values", f"sumIf(-{cast}({value}), {value} < 0)", integer),
    ]


def _figures(client: Client, table: Table, sides: dict[str, ObjectRef], where: str | None, measured: list[Total]):
    """``side → (rows, total, …)`` of each table of ``sides``, as readers see them, in one statement."""
    columns = ", ".join(["count()", *(t.sql for t in measured)])
    filtered = f" WHERE {where}" if where else ""
    sql = " UNION ALL ".join(
        f"SELECT '{side}' AS _chmv_side, {columns} FROM {qualified(ref)}{_final(table)}{filtered}"
        for side, ref in sides.items()
    )
    got = {row[0]: row[1:] for row in client.query(sql).result_rows}
    return {side: tuple(0 if v is None else v for v in got.get(side, ())) for side in sides}


def _fell(new, old, exact: bool) -> bool:
    if exact:
        return int(new) < int(old)
    new, old = float(new), float(old)
    if not (math.isfinite(new) and math.isfinite(old)):
        return False
    return new < old - FLOAT_SLACK * max(abs(old), 1.0)


def _number(value) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{float(value):,.6g}"


def check_shrink(
    client: Client, table: Table, plan: RebuildPlan, step: PartitionStep, *, shadow: ObjectRef | None = None
) -> tuple[int, int]:
    """``(rows in the shadow, rows in the live partition)``; raise if the swap would shrink a guarded one.

    Args:
        shadow: The shadow holding the step's partition, if not the step's own (one shadow of several partitions:
            only the step's partition of it is counted, through the step's ``partition_filter``).

    Raises:
        ShrinkRefused: The step is guarded and the shadow holds fewer rows, or a smaller total of a measure
            (:func:`totals`), than the live partition.
    """
    shadow = shadow or step.shadow
    assert shadow is not None
    measured = totals(table) if step.guard else []
    figures = _figures(client, table, {"new": shadow, "old": plan.live}, step.partition_filter, measured)
    (new, *new_totals), (old, *old_totals) = figures["new"] or (0,), figures["old"] or (0,)
    new, old = int(new), int(old)
    if not step.guard:
        return new, old
    where_text = f"partition {step.key}" if step.key else "whole table"
    proceed = (
        f"Coverage does not vouch for every row of it ({step.guard}). {NOT_SWAPPED} To proceed: restore the rows where the rebuild reads them (the source table, or the landing zone "
        "with engine=auto) and rebuild, or rebuild with force (run config force: true, chmv rebuild --force) to "
        "accept the loss."
    )
    if new < old:
        raise ShrinkRefused(
            f"{plan.target.fqn} {where_text}: the rebuild would leave {new:,} rows where the live partition holds "
            f"{old:,}: {old - new:,} rows would go. {proceed}"
        )
    fallen = [
        f"{t.label}: {_number(o)} → {_number(n)}"
        for t, n, o in zip(measured, new_totals, old_totals, strict=True)
        if _fell(n, o, t.exact)
    ]
    if fallen:
        rows = f"{new:,} rows on both sides" if new == old else f"{new:,} rows where it holds {old:,}"
        raise ShrinkRefused(
            f"{plan.target.fqn} {where_text}: the rebuild would shrink the live partition's totals ({rows}): "
            f"{'; '.join(fallen)} (live → rebuilt). {proceed}"
        )
    return new, old
