"""Partitions a rebuild left until they close, kept on the server so recovery rebuilds them then.

A partition still open to writers chmv does not control is not swapped (:mod:`chmv_assets.ddl.writers`): the rebuild
planner defers it, with the time it closes. The executor records the deferral in ``chmv_meta.watermarks``
(``source_id`` ``deferred:<target>``, ``target_table`` the partition key, ``last_processed_ts`` when it closes,
``status`` ``pending``); the recovery sensor requests the rebuild of every pending deferral whose time has come
(:func:`pending`), and the first successful rebuild of the partition, whoever runs it, marks it ``done``. A
partition a rebuild swapped in while a write raced it (it may have lost rows, :class:`~chmv_assets.errors.RacedWrites`)
is recorded the same way, due at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.watermarks import read_watermark, write_watermark
from chmv_assets.sql.meta import WATERMARKS
from chmv_assets.sql.quoting import qualified

PREFIX = "deferred:"
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
        source_id = f"{PREFIX}{d.target.fqn}"
        write_watermark(
            client,
            source_id,
            d.partition,
            last_processed_ts=d.closes_at,
            batch_id=d.reason[:500],
            status=PENDING,
            previous=read_watermark(client, source_id, d.partition),
        )


def settle(client: Client, target: ObjectRef, partitions: Iterable[str | None]) -> list[str]:
    """Mark the pending deferrals of ``partitions`` of ``target`` done (they were just rebuilt; None: the whole table,
    ``all``); the keys settled."""
    keys = [p or WHOLE for p in partitions]
    if not keys:
        return []
    source_id = f"{PREFIX}{target.fqn}"
    rows = client.query(
        f"SELECT target_table FROM {qualified(WATERMARKS)} WHERE source_id = {{sid:String}} "
        "AND target_table IN {keys:Array(String)} GROUP BY target_table HAVING argMax(status, version) = {p:String}",
        parameters={"sid": source_id, "keys": keys, "p": PENDING},
    ).result_rows
    settled = [str(r[0]) for r in rows]
    for key in settled:
        write_watermark(
            client,
            source_id,
            key,
            last_processed_ts=None,
            batch_id="rebuilt",
            status=DONE,
            previous=read_watermark(client, source_id, key),
        )
    return settled


def pending(client: Client, *, due_by: datetime | None = None) -> list[Deferral]:
    """The pending deferrals (those closed by ``due_by`` only, when given), oldest close first."""
    rows = client.query(
        f"SELECT source_id, target_table, argMax(last_processed_ts, version), argMax(batch_id, version) "
        f"FROM {qualified(WATERMARKS)} WHERE startsWith(source_id, {{prefix:String}}) "
        "GROUP BY source_id, target_table HAVING argMax(status, version) = {p:String} ORDER BY 3, 1, 2",
        parameters={"prefix": PREFIX, "p": PENDING},
    ).result_rows
    out = []
    for source_id, key, closes, reason in rows:
        closes = closes.astimezone(UTC).replace(tzinfo=None) if closes.tzinfo is not None else closes
        if due_by is not None and closes > due_by:
            continue
        database, _, name = source_id.removeprefix(PREFIX).partition(".")
        out.append(Deferral(ObjectRef(database=database, name=name), str(key), closes, str(reason)))
    return out
