"""Auto-recovery: the tiered protocol of seed 000, with attempts, cooldown and a retry limit; no DDL of its own.

Tier 1 is a change of DDL, and DDL changes go through plan and apply only: an MV of the DDL directory that is
missing or detached is restored by a run of the ``chmv_apply`` job for those objects (planned, preflighted and
applied as ``chmv apply`` does, re-attaching a detached MV and re-deriving the history of a recreated one); a live
SELECT or TO that differs from the DDL is a change waiting for ``chmv apply`` ("apply pending"): nothing of the
target is rebuilt meanwhile, and only ``[sweep] recovery_apply = "changes"`` lets recovery apply it. Tier 2: the
affected partitions are rebuilt through the normal materialization. The attempt ledger lives in the sensor
cursor, so every decision is visible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.engine.drift import DriftItem


@dataclass(frozen=True)
class Decision:
    """What the recovery sensor does about one failing partition.

    Attributes:
        key: ``db.table|partition`` (empty partition: the whole table).
        action: ``rebuild`` (request a run), ``cooldown`` (wait), ``held`` (wait without using an attempt: a run
            already covers it, or a DDL repair or an apply comes first), ``exhausted`` (limit reached now: alert),
            ``gave_up`` (limit reached earlier: nothing).
        attempt: The attempt number a rebuild would be.
        reason: ``parity_failed``, ``stale`` or ``upstream_repaired:<table>``; for ``held``, why it waits.
    """

    key: str
    action: str
    attempt: int
    reason: str


def entry_key(target: ObjectRef, partition: str | None) -> str:
    return f"{target.fqn}|{partition or ''}"


def split_key(key: str) -> tuple[ObjectRef, str | None]:
    fqn, _, partition = key.partition("|")
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name), partition or None


def plan(
    ledger: dict[str, dict],
    failing: Mapping[str, str],
    resolved: Iterable[str],
    now: float,
    *,
    max_attempts: int,
    cooldown_seconds: float,
    held: Mapping[str, str] | None = None,
) -> list[Decision]:
    """Update ``ledger`` (in place) with this tick's failures and passes, and decide per failing partition.

    Args:
        ledger: ``key → {attempts, last, reason, exhausted, since}`` from the cursor.
        failing: Partitions seen failing this tick, with the reason.
        resolved: Partitions seen passing this tick (their entries are dropped).
        now: Epoch seconds.
        max_attempts: Rebuilds per partition before giving up.
        cooldown_seconds: Least time between two rebuilds of one partition.
        held: Partitions that wait this tick without using an attempt, with why (a run in progress covers them,
            a DDL repair or a pending change comes first).
    """
    held = held or {}
    for key in resolved:
        if key not in failing:
            ledger.pop(key, None)
    for key, reason in failing.items():
        entry = ledger.setdefault(key, {"attempts": 0, "last": 0.0, "reason": reason, "exhausted": False})
        entry["reason"] = reason
        entry.setdefault("since", now)
    decisions = []
    for key, entry in sorted(ledger.items()):
        attempts = int(entry["attempts"])
        if entry.get("exhausted"):
            decisions.append(Decision(key, "gave_up", attempts, entry["reason"]))
        elif key in held:
            decisions.append(Decision(key, "held", attempts + 1, held[key]))
        elif attempts >= max_attempts:
            entry["exhausted"] = True
            decisions.append(Decision(key, "exhausted", attempts, entry["reason"]))
        elif attempts and now - float(entry["last"]) < cooldown_seconds:
            decisions.append(Decision(key, "cooldown", attempts + 1, entry["reason"]))
        else:
            entry["attempts"] = attempts + 1
            entry["last"] = now
            decisions.append(Decision(key, "rebuild", attempts + 1, entry["reason"]))
    return decisions


@dataclass(frozen=True)
class DdlRepair:
    """What a target needs before any rebuild: DDL, through the ``chmv_apply`` job.

    Attributes:
        restore: Objects of the DDL directory that the server lacks (MVs, tables), or MVs detached from it.
        pending: The MVs' live SELECT or TO that differ from the DDL directory: changes waiting for ``chmv apply``.
        detached: Which of ``restore`` are detached (re-attached, not created).
    """

    restore: tuple[ObjectRef, ...] = ()
    pending: tuple[DriftItem, ...] = ()
    detached: tuple[ObjectRef, ...] = ()

    @property
    def needed(self) -> bool:
        return bool(self.restore or self.pending)

    def describe(self) -> str:
        parts = []
        if self.restore:
            names = ", ".join(f"{r.fqn}{' (detached)' if r in self.detached else ''}" for r in self.restore)
            parts.append(f"missing on the server: {names}")
        parts += [str(item) for item in self.pending]
        return "; ".join(parts)


def ddl_repair(project: Project, items: Iterable[DriftItem], detached: Iterable[ObjectRef] = ()) -> DdlRepair:
    """Classify a target's drift (:func:`chmv_assets.engine.drift.drift_report`) into what apply would restore and
    what is a pending change; column differences are the drift check's and the lifecycle plan's business."""
    detached_set = set(detached)
    restore: list[ObjectRef] = []
    pending: list[DriftItem] = []
    for item in items:
        database, _, name = item.object.partition(".")
        ref = ObjectRef(database=database, name=name)
        if item.kind == "missing_object":
            restore.append(ref)
        elif item.kind in ("select_changed", "target_changed") and ref in project.views:
            pending.append(item)
    restore = list(dict.fromkeys(restore))
    return DdlRepair(tuple(restore), tuple(pending), tuple(r for r in restore if r in detached_set))
