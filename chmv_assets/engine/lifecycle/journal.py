"""The lifecycle journal in ``chmv_meta``: what an apply has started and not finished, so a killed apply resumes.

Entries live in ``chmv_meta.apply_journal`` (``kind``, ``target``, ``phase``, ``plan_id``), versioned as every record
of chmv (:mod:`chmv_assets.engine.records`): the latest record of a (kind, target) wins. Kinds:

- ``rederive``: the target's history must be re-derived (written before the new SELECT takes over, done after
  the last partition passed parity); each partition re-derived since is recorded too, in
  ``chmv_meta.rederived_partitions`` under the version of the pending record (:func:`record_rederived`), so
  ``chmv plan`` names what is left of an interrupted re-derivation and the next apply re-derives only that;
- ``new_version``: ``building`` (before the beside objects are created), ``swapped`` (in the cut-over, under
  the write gates, after the exchange and the MVs' new SELECT), ``done``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine import records
from chmv_assets.sql.meta import APPLY_JOURNAL, REDERIVED_PARTITIONS

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
    key = {"kind": kind, "target": target.fqn}
    previous = records.latest(client, APPLY_JOURNAL, key)
    values = {**key, "phase": phase, "plan_id": plan_id}
    return records.append(client, APPLY_JOURNAL, values, after=previous.version if previous else 0)


def record_rederived(client: Client, target: ObjectRef, since: int, partitions: Iterable[str], plan_id: str) -> None:
    """The ``partitions`` of ``target`` (keys, ``all`` for the whole table) are re-derived with the SELECT whose cut-in
    recorded the pending record of version ``since``."""
    for key in partitions:
        values = {"target": target.fqn, "journal_version": since, "partition_key": key, "plan_id": plan_id}
        records.append(client, REDERIVED_PARTITIONS, values)


def rederived(client: Client, target: ObjectRef, since: int) -> set[str]:
    """The partitions of ``target`` re-derived since the pending record of version ``since`` (see
    :func:`record_rederived`)."""
    found = records.current(client, REDERIVED_PARTITIONS, {"target": target.fqn, "journal_version": since})
    return {str(r["partition_key"]) for r in found}


def unfinished(client: Client) -> list[Entry]:
    """Every (kind, target) whose latest record is not ``done``, in the order they were started."""
    entries = []
    for r in records.current(client, APPLY_JOURNAL):  # oldest first record first
        if r["phase"] == DONE:
            continue
        database, _, name = str(r["target"]).partition(".")
        ref = ObjectRef(database=database, name=name)
        entries.append(Entry(str(r["kind"]), ref, str(r["phase"]), str(r["plan_id"]), r.version))
    return entries
