"""The last line of defence: no swap that would shrink a live partition whose source may not hold it entirely.

Before a step's swap, when the planner set the step's ``guard`` (coverage does not say the source table
holds the partition entirely, and the plan is not forced), the shadow's rows are compared with the live
partition's, both as readers see them (``FINAL`` for engines that collapse rows at merge time). Fewer rows
in the shadow — 0 where the live partition holds 620,000, say — stops the step before the swap with the
numbers; the shadow is dropped by the caller and the live partition is untouched.

Where the source holds the partition entirely the rebuild recomputes exactly what parity compares
against, so a smaller result is a correction parity explains and is not stopped.
"""

from __future__ import annotations

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef, Table
from chmv_assets.engine.rebuild.planner import PartitionStep, RebuildPlan
from chmv_assets.errors import ShrinkRefused
from chmv_assets.sql.quoting import qualified

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


def readers_rows(client: Client, ref: ObjectRef, table: Table, where: str | None = None) -> int:
    """Rows of ``ref`` (with ``table``'s engine) as a reader sees them, optionally of one partition."""
    final = " FINAL" if table.engine is not None and table.engine.family in COLLAPSING else ""
    sql = f"SELECT count() FROM {qualified(ref)}{final}" + (f" WHERE {where}" if where else "")
    return int(client.command(sql))


def check_shrink(
    client: Client, table: Table, plan: RebuildPlan, step: PartitionStep, *, shadow: ObjectRef | None = None
) -> tuple[int, int]:
    """``(rows in the shadow, rows in the live partition)``; raise if the swap would shrink a guarded one.

    Args:
        shadow: The shadow holding the step's partition, if not the step's own (one shadow of several partitions:
            only the step's partition of it is counted, through the step's ``partition_filter``).

    Raises:
        ShrinkRefused: The shadow holds fewer rows and the step is guarded.
    """
    shadow = shadow or step.shadow
    assert shadow is not None
    new = readers_rows(client, shadow, table, step.partition_filter)
    old = readers_rows(client, plan.live, table, step.partition_filter)
    if new < old and step.guard:
        where_text = f"partition {step.key}" if step.key else "whole table"
        raise ShrinkRefused(
            f"{plan.target.fqn} {where_text}: the rebuild would leave {new:,} rows where the live partition holds "
            f"{old:,}: {old - new:,} rows would go. Coverage does not vouch for every row of it ({step.guard}). "
            "Nothing was swapped; the live partition is unchanged. To proceed: restore the rows where the rebuild "
            "reads them (the source table, or the landing zone with engine=auto) and rebuild, or rebuild with force "
            "(run config force: true, chmv rebuild --force) to accept the loss."
        )
    return new, old
