"""Auto-recovery: the tiered protocol of seed 000, decided here once for every kind of repair; no DDL of its own.

Tier 1 is a change of DDL, and DDL changes go through plan and apply only: an MV of the DDL directory that is
missing or detached is restored by a run of the ``chmv_apply`` job for those objects (planned, preflighted and
applied as ``chmv apply`` does, re-attaching a detached MV and re-deriving the history of a recreated one); a live
SELECT or TO that differs from the DDL is a change waiting for ``chmv apply`` ("apply pending"): nothing of the
target is rebuilt meanwhile, and only ``[sweep] recovery_apply = "changes"`` lets recovery apply it. Tier 2: the
affected partitions are rebuilt through the normal materialization (failed parity, persistent staleness, a repaired
upstream partition, a deferral whose partition has closed).

Every repair, whatever its kind (:class:`RepairKind`), is retried by one policy (:class:`RetryPolicy`: attempts,
cooldown, limit) over one typed ledger (:class:`Ledger`, kept in the recovery sensor's cursor and serialized by
:meth:`Ledger.to_data` alone, so every decision is visible). Deciding uses no attempt: an attempt is spent
(:meth:`Ledger.spend`) when the repair is requested, so a repair the planner refuses, that would only wait, or that
the tick has no time left for keeps its attempt. The planner's verdict on a requested rebuild travels with the run
request (:class:`RebuildVerdict`), so the run executes what the sensor decided, re-checking only what can change
between the tick and the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.engine.drift import DriftItem
from chmv_assets.engine.rebuild.planner import READS, RebuildPlan


class RepairKind(StrEnum):
    """What a ledger entry repairs."""

    REBUILD = "rebuild"
    """A partition (``db.table|partition``; empty partition: the whole table), rebuilt by a run of its target."""
    APPLY = "apply"
    """Objects of the DDL directory (``db.a,db.b``), restored by a ``chmv_apply`` run."""


class Action(StrEnum):
    """What recovery does about one ledger entry at a tick."""

    DUE = "due"
    """Request the repair now (:meth:`Ledger.spend` once it is requested)."""
    COOLDOWN = "cooldown"
    """Wait: the last attempt is too recent."""
    HELD = "held"
    """Wait without using an attempt: a run already covers it, or a DDL repair or an apply comes first."""
    EXHAUSTED = "exhausted"
    """The limit was reached now: alert."""
    GAVE_UP = "gave_up"
    """The limit was reached earlier: nothing."""


@dataclass(frozen=True)
class Decision:
    """What recovery does about one ledger entry at a tick.

    Attributes:
        key: The entry's key (:class:`RepairKind`).
        action: See :class:`Action`.
        attempt: The attempt number a repair would be.
        reason: ``parity_failed``, ``stale``, ``deferred`` or ``upstream_repaired:<table>`` (a rebuild), what the DDL
            repair restores (an apply); for ``held``, why it waits.
        kind: What the entry repairs.
    """

    key: str
    action: Action
    attempt: int
    reason: str
    kind: RepairKind = RepairKind.REBUILD


@dataclass
class LedgerEntry:
    """One failing thing recovery repairs, across ticks.

    Attributes:
        reason: Why it is failing (the latest tick's word).
        since: When it started failing (epoch seconds): the episode, named by run keys.
        attempts: Repairs requested in this episode.
        last: When the last one was requested (epoch seconds; 0: never).
        exhausted: The limit was reached and alerted.
        refused: The planner's refusal last alerted for it (alerted once while it stays the same).
    """

    reason: str
    since: float
    attempts: int = 0
    last: float = 0.0
    exhausted: bool = False
    refused: str | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy of recovery: at most ``max_attempts`` repairs per episode, ``cooldown_seconds`` apart."""

    max_attempts: int
    cooldown_seconds: float

    def decide(self, key: str, entry: LedgerEntry, now: float, kind: RepairKind, held: str | None = None) -> Decision:
        """The action for ``entry`` now (``held``: why it waits without using an attempt); marks it exhausted when the
        limit is reached (the one change deciding makes)."""
        if entry.exhausted:
            return Decision(key, Action.GAVE_UP, entry.attempts, entry.reason, kind)
        if held is not None:
            return Decision(key, Action.HELD, entry.attempts + 1, held, kind)
        if entry.attempts >= self.max_attempts:
            entry.exhausted = True
            return Decision(key, Action.EXHAUSTED, entry.attempts, entry.reason, kind)
        if entry.attempts and now - entry.last < self.cooldown_seconds:
            return Decision(key, Action.COOLDOWN, entry.attempts + 1, entry.reason, kind)
        return Decision(key, Action.DUE, entry.attempts + 1, entry.reason, kind)


#: The ledger's serialized format (:meth:`Ledger.to_data`).
LEDGER_FORMAT = 3


@dataclass
class Ledger:
    """Recovery's attempts per failing thing, by kind of repair; kept between ticks (:meth:`to_data`)."""

    entries: dict[RepairKind, dict[str, LedgerEntry]] = field(default_factory=lambda: {k: {} for k in RepairKind})

    def of(self, kind: RepairKind) -> dict[str, LedgerEntry]:
        return self.entries.setdefault(kind, {})

    def track(
        self, kind: RepairKind, failing: Mapping[str, str], resolved: Iterable[str], now: float
    ) -> dict[str, LedgerEntry]:
        """Record this tick's failures (with their reason) and drop the entries ``resolved`` that are not failing."""
        entries = self.of(kind)
        for key in resolved:
            if key not in failing:
                entries.pop(key, None)
        for key, reason in failing.items():
            entry = entries.setdefault(key, LedgerEntry(reason=reason, since=now))
            entry.reason = reason
        return entries

    def decide(
        self, kind: RepairKind, policy: RetryPolicy, now: float, held: Mapping[str, str] | None = None
    ) -> list[Decision]:
        """The decision of every entry of ``kind`` (by key), through ``policy``."""
        held = held or {}
        return [policy.decide(key, entry, now, kind, held.get(key)) for key, entry in sorted(self.of(kind).items())]

    def spend(self, decision: Decision, now: float) -> LedgerEntry:
        """The ``due`` repair of ``decision`` was requested: its attempt is used."""
        entry = self.of(decision.kind)[decision.key]
        entry.attempts, entry.last = decision.attempt, now
        return entry

    def note_refusal(self, key: str, refusal: str | None) -> bool:
        """Keep the planner's refusal of a rebuild (None: it is no longer refused); whether it is a new one."""
        entry = self.of(RepairKind.REBUILD)[key]
        new = refusal is not None and entry.refused != refusal
        entry.refused = refusal
        return new

    def to_data(self) -> dict[str, Any]:
        """The ledger as JSON-able data (the one place it is serialized)."""
        return {
            "format": LEDGER_FORMAT,
            **{kind.value: {key: asdict(e) for key, e in sorted(self.of(kind).items())} for kind in RepairKind},
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Ledger:
        """A ledger from :meth:`to_data`'s data; raises ``ValueError`` for data of another format."""
        if data.get("format") != LEDGER_FORMAT:
            raise ValueError(f"a ledger of format {data.get('format')!r}, not {LEDGER_FORMAT}")
        return cls({kind: {key: _entry(e) for key, e in data.get(kind.value, {}).items()} for kind in RepairKind})

    @classmethod
    def from_cursor_v2(cls, ledger: Mapping[str, Any], repairs: Mapping[str, Any]) -> Ledger:
        """The ledger a recovery cursor of format 2 held: its partitions' entries (``ledger``) and its DDL repairs'
        (``repairs``, by objects), as untyped dicts."""
        rebuilds = {key: _entry(e) for key, e in ledger.items()}
        applies = {key: _entry({"reason": "restore", **e}) for key, e in repairs.items()}
        return cls({RepairKind.REBUILD: rebuilds, RepairKind.APPLY: applies})


def _entry(data: Mapping[str, Any]) -> LedgerEntry:
    return LedgerEntry(
        reason=str(data.get("reason", "")),
        since=float(data.get("since", 0.0)),
        attempts=int(data.get("attempts", 0)),
        last=float(data.get("last", 0.0)),
        exhausted=bool(data.get("exhausted", False)),
        refused=data.get("refused"),
    )


def entry_key(target: ObjectRef, partition: str | None) -> str:
    return f"{target.fqn}|{partition or ''}"


def split_key(key: str) -> tuple[ObjectRef, str | None]:
    fqn, _, partition = key.partition("|")
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name), partition or None


#: The run tag carrying a :class:`RebuildVerdict`.
VERDICT_TAG = "chmv/verdict"


@dataclass(frozen=True)
class RebuildVerdict:
    """The planner's verdict on a rebuild recovery requests: per partition of one target, the engine its rows come
    from (``clickhouse`` or ``spark``), decided at the tick from the coverage observed then.

    The run pins those engines (:func:`chmv_assets.engine.rebuild.executor.plan_for`'s ``engines``) instead of
    choosing again; what can change between the tick and the run is still checked there (the rows the engine reads
    still hold the partition, else the step is refused or guarded as any plan's; partitions still open to writers;
    pending DDL) and by the executor (leases, racing writes, the shrink guard).
    """

    target: ObjectRef
    engines: tuple[tuple[str | None, str], ...]

    @classmethod
    def of_plan(cls, plan: RebuildPlan) -> RebuildVerdict:
        """The engines ``plan`` chose for the partitions it rebuilds now (those it defers are left to the run)."""
        chosen = tuple((s.key, str(s.engine)) for s in plan.steps if s.engine in READS)
        return cls(plan.target, chosen)

    def engine_of(self) -> dict[str | None, str]:
        return dict(self.engines)

    def merged(self, other: RebuildVerdict) -> RebuildVerdict:
        return RebuildVerdict(self.target, tuple({**self.engine_of(), **other.engine_of()}.items()))

    def to_tag(self) -> str:
        """The tag's value (compact JSON; a partition ``None`` is the whole table, ``""``)."""
        engines = {key or "": engine for key, engine in self.engines}
        return json.dumps({"target": self.target.fqn, "engines": engines}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_tags(cls, tags: Mapping[str, str], target: ObjectRef) -> RebuildVerdict | None:
        """The verdict a run's ``tags`` carry for ``target``; None if they carry none for it (or one unreadable)."""
        text = tags.get(VERDICT_TAG)
        if not text:
            return None
        try:
            data = json.loads(text)
            engines = tuple((key or None, str(engine)) for key, engine in dict(data["engines"]).items())
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return cls(target, engines) if data.get("target") == target.fqn else None


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
