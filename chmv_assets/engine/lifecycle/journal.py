"""The lifecycle journal in ``chmv_meta``: what an apply has started and not finished, so a killed apply resumes.

Entries live in ``chmv_meta.watermarks`` (``source_id`` ``lifecycle:<kind>``, ``target_table`` the target,
``status`` the phase, ``batch_id`` the plan), with its versioning: the latest record of a pair wins. Kinds:

- ``rederive``: the target's history must be re-derived (written before the new SELECT takes over, done after
  the last partition passed parity);
- ``new_version``: ``building`` (before the beside objects are created), ``swapped`` (in the cut-over, under
  the write gates, after the exchange and the MVs' new SELECT), ``done``.
"""

from __future__ import annotations

from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.watermarks import read_watermark, write_watermark
from chmv_assets.sql.meta import WATERMARKS
from chmv_assets.sql.quoting import qualified

PREFIX = "lifecycle:"
DONE = "done"
PENDING = "pending"
BUILDING = "building"
SWAPPED = "swapped"


@dataclass(frozen=True)
class Entry:
    """The latest journal record of one (kind, target)."""

    kind: str
    target: ObjectRef
    phase: str
    plan_id: str


def record(client: Client, kind: str, target: ObjectRef, phase: str, plan_id: str) -> None:
    """Append the phase of ``kind`` for ``target`` (a newer version than any before)."""
    source_id = f"{PREFIX}{kind}"
    write_watermark(
        client,
        source_id,
        target.fqn,
        last_processed_ts=None,
        batch_id=plan_id,
        status=phase,
        previous=read_watermark(client, source_id, target.fqn),
    )


def unfinished(client: Client) -> list[Entry]:
    """Every (kind, target) whose latest record is not ``done``, in the order they were started."""
    rows = client.query(
        f"SELECT source_id, target_table, argMax(status, version) AS phase, argMax(batch_id, version), min(version) "
        f"FROM {qualified(WATERMARKS)} WHERE startsWith(source_id, {{prefix:String}}) "
        "GROUP BY source_id, target_table HAVING phase != {done:String} ORDER BY min(version)",
        parameters={"prefix": PREFIX, "done": DONE},
    ).result_rows
    entries = []
    for source_id, target, phase, plan_id, _ in rows:
        database, _, name = target.partition(".")
        entries.append(Entry(source_id.removeprefix(PREFIX), ObjectRef(database=database, name=name), phase, plan_id))
    return entries
