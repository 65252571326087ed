"""What the checks return: a partition's parity, a part-count verdict, a lint finding; and what their verdicts share.

The checks' logic is beside this module (:mod:`.parity`, :mod:`.part_counts`, :mod:`.schema_drift`, :mod:`.lint`);
the Dagster check definitions that turn these verdicts into check evaluations are in ``asset_checks/``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from chmv_assets.ddl.models import ObjectRef

#: Engines that collapse rows with the same key at merge time (a duplicate insert is counted once, eventually).
SELF_DEDUP_ENGINES = ("ReplacingMergeTree", "CollapsingMergeTree", "VersionedCollapsingMergeTree")


def missing_message(missing: Iterable[ObjectRef]) -> str:
    """The verdict on a target whose objects (``missing``) do not exist on the server, with what to do."""
    names = ", ".join(sorted(r.fqn for r in missing))
    return (
        f"{names} does not exist on the server: deploy the DDL with `chmv apply` "
        "(or the chmv_apply job), or fix the DDL directory"
    )


@dataclass(frozen=True)
class Measure:
    """One figure compared between the target and the recompute."""

    name: str
    expected: float
    actual: float

    @property
    def delta(self) -> float:
        return self.actual - self.expected


@dataclass(frozen=True)
class ParityResult:
    """The parity of one target partition.

    Attributes:
        target: ``db.table``.
        partition: The partition key, None for the whole table.
        measures: Figures compared; the first is the headline (expected/actual/delta metadata).
        tolerance: Allowed relative difference.
        in_grace: The partition is the newest one and still inside the processing-latency grace.
        missing: Objects that do not exist on the server (the check fails with that message).
        error: A query error (an MV whose SELECT throws on the source rows, say).
        sql: The query that was run.
        truth: What the recompute read: ``source`` (the trigger tables) or ``landing zone`` (the lake up
            to the ingestion cutoff, the tables after it), as a rebuild would.
        unverifiable: Why the partition cannot be checked (its rows live neither in the source nor in the
            landing zone); such a partition is reported, not failed.
    """

    target: str
    partition: str | None
    measures: tuple[Measure, ...] = ()
    tolerance: float = 0.0
    in_grace: bool = False
    missing: tuple[str, ...] = ()
    error: str | None = None
    sql: str = ""
    notes: tuple[str, ...] = field(default=())
    truth: str = "source"
    unverifiable: str | None = None

    @property
    def within_tolerance(self) -> bool:
        if self.missing or self.error or self.unverifiable:
            return False
        return all(abs(m.delta) <= self.tolerance * max(abs(m.expected), 1.0) for m in self.measures)

    @property
    def holds_more(self) -> bool:
        """The target holds more than the recompute yields, beyond the tolerance, in some measure: the one mismatch
        a source that lost rows (retention) can explain, so coverage is worth observing."""
        return any(m.delta > self.tolerance * max(abs(m.expected), 1.0) for m in self.measures)

    @property
    def passed(self) -> bool:
        if self.missing or self.error:
            return False
        return self.within_tolerance or self.in_grace or self.unverifiable is not None

    @property
    def expected(self) -> float:
        return self.measures[0].expected if self.measures else 0.0

    @property
    def actual(self) -> float:
        return self.measures[0].actual if self.measures else 0.0

    @property
    def delta(self) -> float:
        return self.actual - self.expected

    def describe(self) -> str:
        where = f"{self.target} partition {self.partition}" if self.partition else self.target
        if self.missing:
            return f"{where}: {missing_message(ObjectRef(database=m.split('.')[0], name=m.split('.', 1)[1]) for m in self.missing)}"
        if self.error:
            return f"{where}: the parity query failed: {self.error}"
        if self.unverifiable:
            return f"{where}: not verifiable: {self.unverifiable}"
        figures = "; ".join(f"{m.name}: expected {m.expected:g}, actual {m.actual:g}" for m in self.measures)
        verdict = (
            "ok" if self.within_tolerance else ("mismatch inside the grace period" if self.in_grace else "MISMATCH")
        )
        against = "" if self.truth == "source" else f", against the {self.truth}"
        return f"{where}: {verdict} ({figures}{against})"


@dataclass(frozen=True)
class PartVerdict:
    """The part-count check's verdict on one target (or on the merge pool)."""

    severity: str  # ok | warning | error
    message: str


@dataclass(frozen=True)
class LintFinding:
    """One rule broken by one MV or target."""

    rule: str
    subject: str
    location: str
    reason: str
    fix: str

    def __str__(self) -> str:
        return f"{self.location}: [{self.rule}] {self.subject}: {self.reason} Fix: {self.fix}"
