"""No swap that deletes rows the MVs' own SELECT does not yield: rows a writer outside the DDL put in the target.

A one-off ``INSERT INTO`` the target, or an MV the DDL does not define, writes rows no source row produces through
the DDL's MVs. Parity then fails, and a rebuild recomputes the partition without them: the swap would delete rows
nothing chmv reads can recompute. So before a step's swap, where the plan checks it (:func:`checked`: coverage was
observed — a materialization, a recovery run, ``chmv rebuild`` — and the plan is not forced), the live partition's
rows are looked up in the shadow, as multisets of rows compared by an order-independent fingerprint
(``sipHash128`` of the row): a live row whose fingerprint the shadow does not hold at all is foreign, and the swap is
refused with the partition and the number of such rows; the shadow is dropped by the caller and the live partition is
untouched. A row the live partition holds more often than the shadow (doubled by a retried insert, a slow MV
pipeline) is not foreign: the rebuild repairs it.

What a row is depends on the target (:func:`identity`):

- an engine that collapses rows at merge time (Replacing, Summing, Aggregating…): its ORDER BY key, both sides read
  ``FINAL`` (a key's values legitimately change when it is recomputed);
- a target whose MVs read a trigger that deduplicates itself (ReplacingMergeTree): the ORDER BY key (a superseded
  version of a source row leaves when the source merges);
- a target that aggregating MVs write into a plain MergeTree: the columns written without aggregating (the groups;
  a group's rows depend on how the inserts were batched);
- else the whole row, without the columns that differ from one evaluation to the next (``now()``, ``rand()``, a
  ``DEFAULT now()`` the MVs do not write): those rows are compared on the rest.

The lifecycle's re-derivations (a new SELECT yields other rows by design) and forced rebuilds are not checked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project, Table
from chmv_assets.engine.clients import command_int
from chmv_assets.engine.rebuild.planner import PartitionStep, RebuildPlan
from chmv_assets.engine.rebuild.shrink_guard import COLLAPSING
from chmv_assets.errors import NOT_SWAPPED, ForeignRowsRefused
from chmv_assets.sql.quoting import qualified, quote

#: Sources whose duplicates collapse at merge time: a target row derived from a superseded version may leave.
SELF_DEDUP = ("ReplacingMergeTree", "CollapsingMergeTree", "VersionedCollapsingMergeTree")

#: Functions whose value differs from one evaluation to the next: a column computed with one is not compared.
_VOLATILE = re.compile(
    r"\b(now|now64|nowInBlock|current_?timestamp|today|yesterday|rand\w*|generateUUID\w*|generateULID|"
    r"generateSnowflakeID|randomString\w*|randomPrintableASCII|rowNumberInBlock|rowNumberInAllBlocks|blockNumber|"
    r"hostName|serverUUID|uptime|currentQueryID|queryID|initialQueryID)\s*\(",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Identity:
    """What a row of the target is, for the comparison: the expressions hashed, and whether rows are read ``FINAL``."""

    expressions: tuple[str, ...]
    final: bool
    what: str

    def fingerprint(self) -> str:
        return f"sipHash128(tuple({', '.join(self.expressions)}))"


def checked(plan: RebuildPlan) -> bool:
    """Whether the swaps of ``plan`` are checked for foreign rows: its coverage was observed and it is not forced."""
    return plan.coverage is not None and not plan.force


def identity(table: Table, views: Sequence[MaterializedView], project: Project) -> Identity:
    """How the rows of ``table`` (written by ``views``) are compared; see the module."""
    family = table.engine.family if table.engine is not None else "MergeTree"
    key = (table.order_by or "").strip()
    keyed = bool(key) and key.replace(" ", "") not in ("tuple()", "()")
    if family in COLLAPSING and keyed:
        return Identity((key,), True, f"the ORDER BY key ({key}) of the rows as readers see them (FINAL)")
    dedup = [
        v.trigger
        for v in views
        if v.trigger is not None
        and (source := project.table(v.trigger)) is not None
        and source.engine is not None
        and source.engine.family in SELF_DEDUP
    ]
    if dedup and keyed:
        return Identity((key,), False, f"the ORDER BY key ({key}): {dedup[0].fqn} deduplicates itself")
    stored = [c for c in table.columns if (c.default_kind or "").upper() not in ("MATERIALIZED", "ALIAS", "EPHEMERAL")]
    if views and all(v.group_by or v.aggregates for v in views):
        groups = [c.name for c in stored if all(_plain(v, c.name) for v in views)]
        if groups:
            return Identity(tuple(quote(c) for c in groups), False, f"the groups ({', '.join(groups)})")
    steady = [c.name for c in stored if not _volatile(c.name, c.default_expression, views)]
    return Identity(tuple(quote(c) for c in steady), False, "whole rows")


def check_foreign_rows(
    client: Client,
    project: Project,
    table: Table,
    plan: RebuildPlan,
    step: PartitionStep,
    *,
    shadow: ObjectRef | None = None,
) -> None:
    """Raise if the live partition of ``step`` holds rows that the shadow does not hold at all.

    Args:
        shadow: The shadow holding the step's partition, if not the step's own (one shadow of several partitions:
            only the step's partition of it is read, through the step's ``partition_filter``).

    Raises:
        ForeignRowsRefused: The live partition holds rows the rebuild does not yield.
    """
    shadow = shadow or step.shadow
    assert shadow is not None
    rows = identity(table, project.views_into(plan.target), project)
    if not rows.expressions:
        return
    final = " FINAL" if rows.final else ""
    where = f"({step.partition_filter}) AND " if step.partition_filter else ""
    within = f" WHERE {step.partition_filter}" if step.partition_filter else ""
    fingerprint = rows.fingerprint()
    foreign = command_int(
        client,
        f"SELECT count() FROM {qualified(plan.live)}{final} WHERE {where}{fingerprint} NOT IN "
        f"(SELECT {fingerprint} FROM {qualified(shadow)}{final}{within})",
    )
    if foreign:
        where_text = f"partition {step.key}" if step.key else "whole table"
        raise ForeignRowsRefused(
            f"{plan.target.fqn} {where_text}: the live partition holds {foreign:,} row{'s' if foreign != 1 else ''} "
            f"that the MVs' own SELECT does not yield from the sources (compared on {rows.what}): written by a writer "
            "outside the DDL (an INSERT INTO the target, an MV the DDL does not define), and the rebuild would delete "
            f"them. {NOT_SWAPPED} To proceed: find who wrote them and put "
            "that writer in the DDL directory (or their rows into a source), or rebuild with force (run config force: "
            "true, chmv rebuild --force) to delete them."
        )


def _plain(view: MaterializedView, column: str) -> bool:
    output = view.output(column)
    return output is not None and not output.is_aggregate


def _volatile(column: str, default: str | None, views: Sequence[MaterializedView]) -> bool:
    """The column's value differs from one evaluation to the next: an MV computes it with a volatile function, or
    an MV does not write it and its default is one."""
    for view in views:
        output = view.output(column)
        if output is not None and _VOLATILE.search(output.expression):
            return True
        if output is None and default and _VOLATILE.search(default):
            return True
    return False
