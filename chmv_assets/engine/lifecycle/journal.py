"""The lifecycle journal in ``chmv_meta``: what an apply has started and not finished, so a killed apply resumes.

Entries live in ``chmv_meta.watermarks`` (``source_id`` ``lifecycle:<kind>``, ``target_table`` the target,
``status`` the phase, ``batch_id`` the plan), with its versioning: the latest record of a pair wins. Kinds:

- ``rederive``: the target's history must be re-derived (written before the new SELECT takes over, done after
  the last partition passed parity); each partition re-derived since is recorded too (:func:`record_rederived`,
  ``source_id`` ``lifecycle-rederived:<version of the pending record>``, ``target_table`` ``<target>/<partition>``),
  so ``chmv plan`` names what is left of an interrupted re-derivation and the next apply re-derives only that;
- ``new_version``: ``building`` (before the beside objects are created), ``swapped`` (in the cut-over, under
  the write gates, after the exchange and the MVs' new SELECT), ``done``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.watermarks import read_watermark, write_watermark
from chmv_assets.sql.meta import WATERMARKS
from chmv_assets.sql.quoting import qualified

PREFIX = "lifecycle:"
#: ``source_id`` prefix of the partitions a re-derivation has done, followed by the version of its pending record.
PROGRESS = "lifecycle-rederived:"
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
    version: int = 0
    """The version of the latest record: a pending re-derivation's identity (its partitions done are recorded under
    it; a new cut-in records a new one, and the partitions done before it count no more)."""


def record(client: Client, kind: str, target: ObjectRef, phase: str, plan_id: str) -> int:
    """Append the phase of ``kind`` for ``target`` (a newer version than any before); the record's version."""
    source_id = f"{PREFIX}{kind}"
    return write_watermark(
        client,
        source_id,
        target.fqn,
        last_processed_ts=None,
        batch_id=plan_id,
        status=phase,
        previous=read_watermark(client, source_id, target.fqn),
    ).version


def record_rederived(client: Client, target: ObjectRef, since: int, partitions: Iterable[str], plan_id: str) -> None:
    """The ``partitions`` of ``target`` (keys, ``all`` for the whole table) are re-derived with the SELECT whose cut-in
    recorded the pending record of version ``since``."""
    for key in partitions:
        write_watermark(
            client, f"{PROGRESS}{since}", f"{target.fqn}/{key}", last_processed_ts=None, batch_id=plan_id, status=DONE
        )


def rederived(client: Client, target: ObjectRef, since: int) -> set[str]:
    """The partitions of ``target`` re-derived since the pending record of version ``since`` (see
    :func:`record_rederived`)."""
    prefix = f"{target.fqn}/"
    rows = client.query(
        f"SELECT DISTINCT target_table FROM {qualified(WATERMARKS)} WHERE source_id = {{source:String}} "
        "AND startsWith(target_table, {prefix:String})",
        parameters={"source": f"{PROGRESS}{since}", "prefix": prefix},
    ).result_rows
    return {str(r[0]).removeprefix(prefix) for r in rows}


def unfinished(client: Client) -> list[Entry]:
    """Every (kind, target) whose latest record is not ``done``, in the order they were started."""
    rows = client.query(
        f"SELECT source_id, target_table, argMax(status, version) AS phase, argMax(batch_id, version), min(version), max(version) "
        f"FROM {qualified(WATERMARKS)} WHERE startsWith(source_id, {{prefix:String}}) "
        "GROUP BY source_id, target_table HAVING phase != {done:String} ORDER BY min(version)",
        parameters={"prefix": PREFIX, "done": DONE},
    ).result_rows
    entries = []
    for source_id, target, phase, plan_id, _, version in rows:
        database, _, name = target.partition(".")
        ref = ObjectRef(database=database, name=name)
        entries.append(Entry(source_id.removeprefix(PREFIX), ref, phase, plan_id, int(version)))
    return entries
