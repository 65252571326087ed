"""Partitions a Spark rebuild swapped in, kept in ``chmv_meta.backfills``: with their cutoff, batch and rows.

The record is written after the swap (its cutoff: landing rows at or before it, source rows after it), so an operator
reading the table sees which partitions of a target came from the landing zone, when and how far.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine import records
from chmv_assets.sql.meta import BACKFILLS

#: The key of a whole table (an unpartitioned target).
WHOLE = "all"


@dataclass(frozen=True)
class Backfill:
    """The latest Spark rebuild of one partition of a target."""

    target: ObjectRef
    partition: str
    cutoff: datetime | None
    batch_id: str
    rows: int


def record(client: Client, backfill: Backfill) -> int:
    """Keep ``backfill`` (a later one of the same partition replaces it); its version."""
    key = {"target": backfill.target.fqn, "partition_key": backfill.partition}
    previous = records.latest(client, BACKFILLS, key)
    values = {**key, "cutoff": backfill.cutoff, "batch_id": backfill.batch_id, "rows": backfill.rows}
    return records.append(client, BACKFILLS, values, after=previous.version if previous else 0)


def latest(client: Client, target: ObjectRef) -> list[Backfill]:
    """The latest Spark rebuild of each partition of ``target`` that had one."""
    return [
        Backfill(target, r["partition_key"], r["cutoff"], r["batch_id"], int(r["rows"]))
        for r in records.current(client, BACKFILLS, {"target": target.fqn})
    ]
