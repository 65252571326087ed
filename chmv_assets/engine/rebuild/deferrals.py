"""Partitions a rebuild left until they close, kept on the server so recovery rebuilds them then.

A partition still open to writers chmv does not control is not swapped (:mod:`chmv_assets.ddl.writers`): the rebuild
planner defers it, with the time it closes. The executor records the deferral in ``chmv_meta.deferrals`` (the
target, the partition's key, ``closes_at`` on the server's wall clock, the reason, ``status`` ``pending``); the
recovery sensor requests the rebuild of every pending deferral whose time has come (:func:`pending`), and the first
successful rebuild of the partition, whoever runs it, marks it ``done`` (:func:`settle`). A partition a rebuild
swapped in while a write raced it (it may have lost rows, :class:`~chmv_assets.errors.RacedWrites`) is recorded the
same way, due at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine import records
from chmv_assets.sql.meta import DEFERRALS

PENDING = "pending"
#: The key of a whole table (an unpartitioned target).
WHOLE = "all"
DONE = "done"


@dataclass(frozen=True)
class Deferral:
    """A partition of a target to rebuild once it closes."""

    target: ObjectRef
    partition: str
    closes_at: datetime
    reason: str


def record(client: Client, deferrals: Iterable[Deferral]) -> None:
    """Keep each deferral (pending; a later record of the same partition replaces an earlier one)."""
    for d in deferrals:
        key = {"target": d.target.fqn, "partition_key": d.partition}
        previous = records.latest(client, DEFERRALS, key)
        values = {**key, "closes_at": d.closes_at, "reason": d.reason[:500], "status": PENDING}
        records.append(client, DEFERRALS, values, after=previous.version if previous else 0)


def settle(client: Client, target: ObjectRef, partitions: Iterable[str | None]) -> list[str]:
    """Mark the pending deferrals of ``partitions`` of ``target`` done (they were just rebuilt; None: the whole table,
    ``all``); the keys settled."""
    keys = [p or WHOLE for p in partitions]
    if not keys:
        return []
    found = records.current(client, DEFERRALS, {"target": target.fqn, "partition_key": keys})
    settled = []
    for r in found:
        if r["status"] != PENDING:
            continue
        values = {**r.values, "reason": "rebuilt", "status": DONE}
        records.append(client, DEFERRALS, values, after=r.version)
        settled.append(str(r["partition_key"]))
    return settled


def pending(client: Client, *, due_by: datetime | None = None) -> list[Deferral]:
    """The pending deferrals (those closed by ``due_by`` only, when given), oldest close first."""
    out = []
    for r in records.current(client, DEFERRALS):
        if r["status"] != PENDING or (due_by is not None and r["closes_at"] > due_by):
            continue
        database, _, name = str(r["target"]).partition(".")
        out.append(
            Deferral(ObjectRef(database=database, name=name), str(r["partition_key"]), r["closes_at"], r["reason"])
        )
    return sorted(out, key=lambda d: (d.closes_at, d.target.fqn, d.partition))
