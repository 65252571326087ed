"""Where a partition's rows come from, decided once: the source table, the landing zone, or neither (with why).

One rule (:func:`rows_from`) reads a partition's coverage (:mod:`chmv_assets.engine.rebuild.coverage`) and answers
for every consumer: the rebuild planner fills the partition from the answer (the engine reading that place:
:mod:`chmv_assets.engine.rebuild.engines`; neither: refused), parity recomputes it from the same answer (neither: not
verifiable), and the verification of a rebuild recomputes it from the place its fill read. The lake is read one way
for both (:mod:`chmv_assets.engine.ingest.lake_read`): the fill's rows are the recompute's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from chmv_assets.engine.rebuild.coverage import Holding, WindowCoverage


class RowSource(StrEnum):
    """Where the rows of a partition come from."""

    TABLE = "source table"
    """The trigger tables themselves (the MVs' own SELECT over their rows of the window)."""
    LAKE = "landing zone"
    """The landing zone's rows up to the ingestion cutoff, the trigger tables' after it."""
    NEITHER = "neither"
    """Neither holds it (see the reason): a rebuild is refused, parity is not verifiable."""


@dataclass(frozen=True)
class RowsFrom:
    """The answer for one partition: where its rows come from, why, and the shrink guard of a swap filled from there.

    Attributes:
        source: The place.
        reason: Why, a sentence (a refusal says what to do).
        guard: Why that place may not hold the partition entirely (coverage observed, not forced): a swap that
            would leave fewer rows, or a smaller total of a measure, is refused (the shrink guard). None: no guard.
        doubt: Why the source table may have lost rows of the window its counts cannot show (a DELETE it recorded:
            :attr:`~chmv_assets.engine.rebuild.coverage.WindowCoverage.deletions`); parity does not fail a target that
            holds more than such a source yields.
        covered: The coverage it was decided from (printed by those who explain it their way).
    """

    source: RowSource
    reason: str
    guard: str | None = None
    doubt: str | None = None
    covered: WindowCoverage | None = field(default=None, compare=False, repr=False)


def rows_from(
    covered: WindowCoverage,
    *,
    reads: RowSource | None = None,
    asked: str = "",
    lake_usable: bool,
    force: bool = False,
    root: Path | None = None,
) -> RowsFrom:
    """Where the rows of one partition come from: the one rule, for the rebuild planner and parity alike.

    In order: a pinned landing zone (``reads=LAKE``) is read where it holds the partition, where the target partition
    has nothing to lose or where forced, and is neither elsewhere; the source table where it holds the partition;
    unpinned, the landing zone where it holds it; the source table where the target partition is empty, or forced;
    neither where a trigger demonstrably lost rows the target holds; else the source table behind the shrink guard.
    A source that holds the partition but may have lost rows its counts cannot show (a DELETE it recorded since the
    window's start: ``covered.deletions``) is still read, behind the shrink guard (never refused nor moved to the
    landing zone for it: the evidence over-approximates, and the guard stops only a swap that would shrink).

    Refusals and guards stand on the target's rows observed (``covered.observed``, coverage probed): an estimate from
    the triggers' oldest rows (a repair's or the lifecycle's plan) knows nothing at stake, so it takes a pinned place
    as asked and is never refused or guarded; neither is a forced answer guarded.

    Args:
        covered: Where the partition's truth lives.
        reads: The place the caller pinned (an engine asked for reads it); None: any (``engine=auto``, parity).
        asked: How the caller asked for it (``engine=spark``), said in the reasons.
        lake_usable: The landing zone serves every trigger of the target.
        force: Read what would be neither from the source table (the rebuild's force), unguarded.
        root: The landing zone (named in a refusal's what to do).
    """
    said = f"engine={asked} asked for" if asked else ""
    if reads is not None and not covered.observed:
        return RowsFrom(reads, said)
    source_ok = covered.source_holds_entirely
    lake_ok = lake_usable and covered.lake_holds_entirely
    at_stake = covered.target_rows is None or covered.target_rows > 0
    table, lake = covered.table_reasons(), covered.lake_reasons()
    guarded = covered.observed and not force
    deleted = covered.deletions
    if reads == RowSource.LAKE:
        if lake_ok or not at_stake or force:
            guard = f"rebuilt from the landing zone: {lake}" if guarded else None
            return RowsFrom(RowSource.LAKE, f"{said}; landing zone: {lake}", guard)
        return RowsFrom(RowSource.NEITHER, refusal(covered, root, asked=said, lake_only=True), covered=covered)
    if source_ok:
        pinned = f"{said}; " if said else ""
        return RowsFrom(RowSource.TABLE, pinned + table, deleted if guarded else None, deleted, covered)
    guard = (f"{table}; {deleted}" if deleted else table) if guarded else None
    if reads is None and lake_ok:
        return RowsFrom(RowSource.LAKE, f"{table}; the landing zone holds it: {lake}", guard, covered=covered)
    if not at_stake:
        reason = f"the target partition is empty, nothing to lose; {table}"
        return RowsFrom(RowSource.TABLE, reason, guard, deleted, covered)
    if force:
        return RowsFrom(RowSource.TABLE, f"forced: {table}", None, deleted, covered)
    if covered.observed and covered.loss_observed:
        return RowsFrom(RowSource.NEITHER, refusal(covered, root, asked=said), covered=covered)
    return RowsFrom(RowSource.TABLE, f"coverage unknown: {table}; landing zone: {lake}", guard, deleted, covered)


def refusal(covered: WindowCoverage, root: Path | None, *, asked: str = "", lake_only: bool = False) -> str:
    """Why neither place serves a partition and what to do, naming each source and how far back it holds data.

    Args:
        asked: How the caller pinned the place (``engine=spark asked for``), if it did.
        lake_only: The fill would read the landing zone only (a pinned lake).
    """
    rows = "an unknown number of" if covered.target_rows is None else f"{covered.target_rows:,}"
    lacking = [s for s in covered.sources if (s.lake if lake_only else s.table).holding != Holding.ENTIRELY]
    parts = [f"{asked}, but" if asked else "neither the source table nor the landing zone holds it:"]
    for s in lacking:
        since = f"it holds data from {s.held_from:%Y-%m-%d %H:%M:%S} on" if s.held_from else "it holds no data"
        parts.append(
            f"{s.source.fqn} ({since}): source table: {s.table.holding}: {s.table.reason}; landing zone: "
            f"{s.lake.holding}: {s.lake.reason}."
        )
    where = ", ".join(str((root or Path("<landing_dir>")) / s.source.fqn) for s in lacking)
    window = covered.window
    span = f" for [{window.start:%Y-%m-%d %H:%M}, {window.end:%Y-%m-%d %H:%M})" if window and window.timed else ""
    reads = "from the landing zone" if lake_only else "from the source"
    steps = [
        f"deliver the source's files{span} to the landing zone ({where}; with [ingestion] landing_dir and "
        "time_columns configured) and rebuild with engine=auto"
    ]
    if lake_only and covered.source_holds_entirely:
        steps.insert(0, "rebuild with engine=auto or engine=clickhouse (the source table holds it)")
    steps += [
        "leave the partition as it is (it may hold the only copy)",
        f"rebuild with force (run config force: true, chmv rebuild --force) to replace it with what is read {reads}",
    ]
    parts.append(
        f"The target partition holds {rows} rows, which a rebuild {reads} would lose. To proceed: "
        + "; or ".join(steps)
        + "."
    )
    return " ".join(parts)
