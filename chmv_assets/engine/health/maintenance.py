"""Maintenance of late data: merge the closed partitions of collapsing targets that received rows after their merge.

A ReplacingMergeTree, SummingMergeTree or AggregatingMergeTree target collapses rows only when its parts merge; a
partition that received late rows after it was merged holds several parts until a merge happens to pick them, and
readers pay for it (``FINAL``, ``GROUP BY`` over duplicates). Seed 004: merge the affected partitions with
``OPTIMIZE … PARTITION … FINAL`` in a quiet window. Optional (``[maintenance] enabled``): in the window
``[maintenance] window`` on the server's clock, the closed partitions (newest row older than ``closed_after_hours``)
holding at least ``min_parts`` active parts are merged, the most fragmented first, at most ``max_partitions`` per
window, each paced like any chmv insert (:mod:`chmv_assets.engine.pacing.pacer`: the merge pool's load and the concurrency
cap; a partition's own part count never holds its merge) and never past the window's end.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from chmv_assets.ddl.config import MaintenanceConfig, PacingConfig
from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.engine.clock import from_wall_seconds, wall_now
from chmv_assets.engine.pacing.pacer import pacer_for
from chmv_assets.engine.parts import read_partitions
from chmv_assets.engine.server_errors import Code, is_code
from chmv_assets.engine.statements import statement_id
from chmv_assets.sql.health_sql import optimize_sql

_LOG = logging.getLogger(__name__)

#: Engine families whose rows collapse at merge time (``Replicated``/``Shared`` variants included).
MERGING_ENGINES = ("ReplacingMergeTree", "SummingMergeTree", "AggregatingMergeTree")


@dataclass(frozen=True)
class LatePartition:
    """A closed partition of a collapsing target that holds several active parts."""

    table: ObjectRef
    partition_id: str
    parts: int
    rows: int
    newest: date

    def __str__(self) -> str:
        return f"{self.table.fqn} partition {self.partition_id} ({self.parts} parts, {self.rows:,} rows, newest {self.newest})"


@dataclass(frozen=True)
class Merged:
    """What one merge did (``skipped``: why it did not merge, the partition left for the next window)."""

    partition: LatePartition
    parts_after: int
    seconds: float
    skipped: str | None = None


def merging_targets(project: Project) -> list[ObjectRef]:
    """The MV targets whose engine collapses rows at merge time."""
    found = []
    for target in project.targets:
        table = project.table(target)
        engine = table.engine.name if table is not None and table.engine is not None else ""
        if engine.removeprefix("Replicated").removeprefix("Shared") in MERGING_ENGINES:
            found.append(target)
    return found


def late_partitions(client: Client, project: Project, rules: MaintenanceConfig) -> list[LatePartition]:
    """The closed partitions of the collapsing targets that hold at least ``min_parts`` active parts, the most
    fragmented first (one statement: :func:`chmv_assets.engine.parts.read_partitions`).

    Closed: the newest row (the parts' min/max index of the partition key) is of a day before the server's clock
    ``closed_after_hours`` ago; partitions without a time in their key (``all``, a key of no date) are left out.
    """
    targets = merging_targets(project)
    if not targets:
        return []
    closed_before = (wall_now(client) - timedelta(hours=rules.closed_after_hours)).date()
    found = []
    for table, partitions in read_partitions(client, targets).items():
        for p in partitions:
            newest = from_wall_seconds(p.last).date() if p.span is not None else None
            if p.partition_id != "all" and p.parts >= rules.min_parts and newest and newest < closed_before:
                found.append(LatePartition(table, p.partition_id, p.parts, p.rows, newest))
    found.sort(key=lambda p: (-p.parts, p.table.database, p.table.name, p.partition_id))
    return found[: rules.max_partitions]


def window_bounds(window: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The occurrence of ``HH:MM-HH:MM`` that ``now`` is in, as ``(start, end)``; None outside it. A window that
    wraps midnight (``22:00-04:00``) started the day before when ``now`` is before its end."""
    first, last = window.split("-")
    start_t = timedelta(hours=int(first[:2]), minutes=int(first[3:]))
    end_t = timedelta(hours=int(last[:2]), minutes=int(last[3:]))
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    length = (end_t - start_t) if end_t > start_t else (end_t + timedelta(days=1) - start_t)
    for day in (midnight, midnight - timedelta(days=1)):
        start = day + start_t
        if start <= now < start + length:
            return start, start + length
    return None


def merge_late_partitions(
    client: Client,
    project: Project,
    rules: MaintenanceConfig,
    *,
    pacing: PacingConfig | None = None,
    until: datetime | None = None,
) -> list[Merged]:
    """Merge the late partitions (:func:`late_partitions`) one at a time, paced, until ``until`` (server wall clock).

    Returns:
        What each merge did; the partitions left when the window ended are not merged (the next window takes them).

    Raises:
        ServerBusy: The merge pool stayed busy past ``[pacing] max_wait_seconds``.
    """
    pacer = pacer_for(client, pacing)
    partitions = late_partitions(client, project, rules)
    _LOG.info(
        f"{len(partitions)} closed partition(s) of collapsing targets hold several parts"
        + "".join(f"\n- {p}" for p in partitions)
    )
    merged: list[Merged] = []
    cancelled: dict[ObjectRef, str] = {}  # tables whose merges the server cancels (stopped): not tried again
    for number, partition in enumerate(partitions, start=1):
        if until is not None and wall_now(client) >= until:
            _LOG.info(
                f"the quiet window ended at {until}: {len(partitions) - number + 1} partition(s) wait for the next one"
            )
            break
        if partition.table in cancelled:
            merged.append(Merged(partition, partition.parts, 0.0, cancelled[partition.table]))
            continue
        started = time.monotonic()
        sql = optimize_sql(partition.table, partition.partition_id)
        query_id = statement_id("optimize", partition.table.fqn, partition.partition_id)

        def statement(sql: str = sql, query_id: str = query_id) -> None:
            client.command(sql, settings={"query_id": query_id, "optimize_throw_if_noop": 0})

        # the merge pool and the concurrency cap hold it; its own parts (why it is merged) never do
        try:
            pacer.run(f"{partition.table.fqn} partition {partition.partition_id}: OPTIMIZE FINAL", statement, watch=())
        except ClickHouseError as error:
            if not is_code(error, Code.ABORTED):
                raise
            # ``SYSTEM STOP MERGES`` on the table (an operator's, a migration's): every merge of it is cancelled
            why = (
                f"the server cancelled the merge ({' '.join(str(error).split())[:160]}): merges of "
                f"{partition.table.fqn} are stopped (SYSTEM STOP MERGES) or an ALTER cancelled them; its partitions "
                "are left for the next window"
            )
            _LOG.warning(f"{partition}: {why}")
            cancelled[partition.table] = why
            merged.append(Merged(partition, partition.parts, time.monotonic() - started, why))
            continue
        held = read_partitions(client, [partition.table])[partition.table]
        after = sum(p.parts for p in held if p.partition_id == partition.partition_id)
        done = Merged(partition, after, time.monotonic() - started)
        _LOG.info(f"merged {partition}: {after} part(s) now, {done.seconds:.1f}s")
        merged.append(done)
    return merged
