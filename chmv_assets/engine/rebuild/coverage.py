"""Coverage: where does the truth of a target partition live — the source table, the landing zone, neither?

For every trigger source of a target and every partition window, one answer, used by every consumer
(the rebuild planner, the shrink guard of the executor, parity):

- **the source table** holds the window ``entirely``, ``partly`` or ``none`` — derived from the table's
  TTL in the DDL (its horizon at the server's ``now()``), the rows the table holds in the window (oldest,
  newest, count) and the target's own rows of the window (a target partition with rows that the source
  holds nothing of, or older than anything the source holds, shows that the source lost them);
- **the landing zone** holds it ``entirely``, ``partly`` or ``none`` — from the files that arrived in the
  window's range and where the landing zone starts;
- ``unknown`` where nothing observable decides (no landing zone, an empty source, a TTL chmv cannot read,
  rows that cannot be placed in windows): said so, never guessed;
- besides, whether the source table **may have lost rows** of the window that its counts cannot show (half of
  every day deleted leaves every day with rows): a DELETE the server still lists for the table (``ALTER … DELETE``,
  a lightweight ``DELETE FROM``) created after the window's start, or a patch part of the table (a lightweight
  delete or update not merged yet). Its predicate is not evaluated: the evidence is an over-approximation, which
  only turns the rebuild's shrink guard on (``SourceCoverage.deleted``), never refuses or moves a rebuild by itself.

The server is read once (:func:`probe`: one ``UNION ALL`` statement for all triggers and the target);
:func:`assess` is pure given those facts (plus a listing of the landing zone), so plans stay printable data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import Column, ObjectRef
from chmv_assets.ddl.partitioning import PartitionWindow, TargetPartitioning, floor_to_grain, time_of
from chmv_assets.engine import records
from chmv_assets.engine.clock import calendar_instant, server_zone, session_zone, wall, wall_now
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.rebuild.timeline import floor, ttl_horizon
from chmv_assets.sql.coverage_sql import (
    TimeMapping,
    deletes_branches,
    sub_grain_of,
    table_branch,
    time_mapping,
    union,
    watermark_branch,
    windows_branches,
)

#: Any time zone's offset from another's, at most: a delete created this long before a window's start is still taken
#: for one that may have touched it (its time and the window's are wall clocks of possibly different zones).
_ANY_OFFSET = timedelta(hours=26)


class Holding(StrEnum):
    """How much of a partition window's rows a place holds."""

    ENTIRELY = "entirely"
    PARTLY = "partly"
    NONE = "none"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Stats:
    """Rows of a table (or of one window of it) and their oldest and newest time."""

    rows: int = 0
    oldest: datetime | None = None
    newest: datetime | None = None


@dataclass(frozen=True)
class Facts:
    """What the server said, in one statement (:func:`probe`); pure data.

    Attributes:
        now: The server's ``now()`` (TTL horizons are measured from it).
        tables: Per trigger: its whole-table rows and oldest/newest time (None time column: rows only).
        source_windows: Per trigger and window start: the window's rows (a window not listed has none).
        target_windows: Per window start (None for an unpartitioned target): the target's rows of it and the
            oldest/newest value of its partition column.
        mapped: The triggers whose rows the probe could place in windows.
        watermarks: Per trigger read from the landing zone, its ingestion watermark (newest event time loaded;
            None: none yet). A Spark rebuild reads the source itself after ``watermark - late tolerance``.
        sub_grain: The bucket inside a window the probe counted rows per (a day of a month, an hour of a day), when
            the MVs' time mapping allows it (:func:`chmv_assets.sql.coverage_sql.sub_grain_of`); None: per window.
        buckets: ``(trigger, bucket start)`` of every bucket holding rows (``None``: the target's).
        deletes: Per trigger, ``(trigger, kind, count, newest)`` of what it recorded of deletes
            (:func:`chmv_assets.sql.coverage_sql.deletes_branches`; kind ``x``: mutations, ``p``: patch parts).
        sql: The statement run.
        seconds: Its wall time.
    """

    now: datetime
    tables: tuple[tuple[ObjectRef, Stats], ...] = ()
    source_windows: tuple[tuple[ObjectRef, datetime, Stats], ...] = ()
    target_windows: tuple[tuple[datetime | None, Stats], ...] = ()
    mapped: tuple[ObjectRef, ...] = ()
    watermarks: tuple[tuple[ObjectRef, datetime | None], ...] = ()
    sql: str = field(default="", compare=False)
    seconds: float = field(default=0.0, compare=False)
    sub_grain: Grain | None = None
    buckets: tuple[tuple[ObjectRef | None, datetime], ...] = ()
    deletes: tuple[tuple[ObjectRef, str, int, datetime | None], ...] = ()

    def deleted(self, source: ObjectRef, window: PartitionWindow | None) -> str | None:
        """Why ``source`` may have lost rows of ``window`` (None: the whole table) that its counts cannot show: a
        delete it recorded after the window's start (give or take any zone's offset); None: nothing says so."""
        start = window.wall_start if window is not None else None
        since = start - _ANY_OFFSET if start is not None else None
        said = []
        for ref, kind, count, newest in self.deletes:
            if ref != source or not count or newest is None or (since is not None and newest <= since):
                continue
            if kind == "x":
                said.append(
                    f"{source.fqn} lists {count:,} DELETE mutation(s), the newest created {_when(newest)}: they may "
                    "have removed rows of the window"
                )
            else:
                said.append(
                    f"{source.fqn} holds {count:,} patch part(s) (lightweight deletes or updates), the newest written "
                    f"{_when(newest)}: they may hide rows of the window"
                )
        return "; ".join(said) or None

    def holes(self, window: PartitionWindow) -> list[datetime]:
        """The ``sub_grain`` buckets of ``window`` where the target holds rows and no trigger does (rows the
        sources lost inside the window: a DELETE, a dropped day); empty when the probe did not look inside."""
        if self.sub_grain is None:
            return []
        start, end = _bounds(window)
        inside = [(s, k) for s, k in self.buckets if start <= k < end]
        held = {k for s, k in inside if s is not None}
        return sorted({k for s, k in inside if s is None and k not in held})

    def table(self, source: ObjectRef) -> Stats | None:
        return dict(self.tables).get(source)

    def source_window(self, source: ObjectRef, start: datetime) -> Stats:
        return next((s for ref, k, s in self.source_windows if ref == source and k == start), Stats())

    def target_window(self, start: datetime | None) -> Stats | None:
        return next((s for k, s in self.target_windows if k == start), None)


@dataclass(frozen=True)
class Verdict:
    """One place's answer for one trigger and window: how much it holds, and why (a sentence)."""

    holding: Holding
    reason: str


@dataclass(frozen=True)
class SourceCoverage:
    """Where one trigger's rows of one window live.

    Attributes:
        source: The trigger table.
        table: Does the table itself hold them.
        lake: Does the landing zone hold them.
        held_from: The oldest row the table holds (None: empty or no time column).
        deleted: Why the table may have lost rows of the window its counts cannot show (:meth:`Facts.deleted`);
            None: nothing says so.
    """

    source: ObjectRef
    table: Verdict
    lake: Verdict
    held_from: datetime | None = None
    deleted: str | None = None


@dataclass(frozen=True)
class WindowCoverage:
    """Coverage of one partition window (None: the whole unpartitioned target).

    Attributes:
        observed: Probed (:func:`probe`); False for the rebuild planner's estimate from the triggers' oldest rows
            alone, which knows nothing of the target's rows (nothing is refused or guarded on it).
    """

    window: PartitionWindow | None
    sources: tuple[SourceCoverage, ...]
    target_rows: int | None = None
    target_oldest: datetime | None = None
    observed: bool = True

    @property
    def key(self) -> str | None:
        return self.window.key if self.window else None

    @property
    def source_holds_entirely(self) -> bool:
        return bool(self.sources) and all(s.table.holding == Holding.ENTIRELY for s in self.sources)

    @property
    def lake_holds_entirely(self) -> bool:
        return bool(self.sources) and all(s.lake.holding == Holding.ENTIRELY for s in self.sources)

    @property
    def loss_observed(self) -> bool:
        """Some trigger demonstrably no longer holds (all of) the window."""
        return any(s.table.holding in (Holding.NONE, Holding.PARTLY) for s in self.sources)

    @property
    def deletions(self) -> str | None:
        """Why some trigger may have lost rows of the window its counts cannot show (a DELETE); None: nothing says
        so. A rebuild from such a source is shrink-guarded; parity does not fail a target that holds more."""
        return "; ".join(s.deleted for s in self.sources if s.deleted) or None

    def table_reasons(self) -> str:
        return "; ".join(s.table.reason for s in self.sources)

    def lake_reasons(self) -> str:
        return "; ".join(s.lake.reason for s in self.sources)


@dataclass(frozen=True)
class Coverage:
    """The one answer to "where does the truth of these partitions live?" for a target.

    Attributes:
        target: The MV target.
        windows: One entry per partition window asked about, in the order given.
        now: The server time the answer was computed for.
        queries: Server statements it took (one).
        seconds: Their wall time.
    """

    target: ObjectRef
    windows: tuple[WindowCoverage, ...]
    now: datetime | None = None
    queries: int = field(default=0, compare=False)
    seconds: float = field(default=0.0, compare=False)

    def at(self, window: PartitionWindow | None) -> WindowCoverage | None:
        """The coverage of ``window`` (by key; None for the whole table)."""
        key = window.key if window else None
        return next((w for w in self.windows if w.key == key), None)

    def describe(self, keys: Collection[str | None] | None = None) -> str:
        """Markdown: per partition and trigger, what the table and the landing zone hold (of ``keys``' partitions
        only, where given)."""
        lines = ["| partition | source | source table | landing zone | target rows |", "|---|---|---|---|---|"]
        for w in self.windows:
            if keys is not None and w.key not in keys:
                continue
            rows = "?" if w.target_rows is None else f"{w.target_rows:,}"
            for s in w.sources:
                table = f"{s.table.holding}: {s.table.reason}" + (f"; {s.deleted}" if s.deleted else "")
                table = table.replace("|", "/")
                lake = f"{s.lake.holding}: {s.lake.reason}".replace("|", "/")
                lines.append(f"| {w.key or '(all)'} | {s.source.fqn} | {table} | {lake} | {rows} |")
        return "\n".join(lines)


def triggers(loaded: LoadedProject, target: ObjectRef) -> list[ObjectRef]:
    """Distinct trigger tables of the MVs writing ``target``."""
    return list(dict.fromkeys(v.trigger for v in loaded.project.views_into(target) if v.trigger is not None))


def _scheme(loaded: LoadedProject, target: ObjectRef) -> TargetPartitioning:
    return loaded.partitioning(target)


def mappings(loaded: LoadedProject, target: ObjectRef) -> dict[ObjectRef, TimeMapping]:
    """Per trigger, how its rows map onto the target's windows (the first MV of a trigger that says)."""
    project, scheme = loaded.project, _scheme(loaded, target)
    found: dict[ObjectRef, TimeMapping] = {}
    for view in project.views_into(target):
        mapping = time_mapping(view, project, scheme) if view.trigger is not None else None
        if mapping is not None:
            found.setdefault(view.trigger, mapping)  # type: ignore[arg-type]
    return found


def _time_column(loaded: LoadedProject, source: ObjectRef, mapping: TimeMapping | None) -> str | None:
    if mapping is not None:
        return mapping.column
    column = loaded.config.ingestion.time_columns.get(source.fqn)
    table = loaded.project.table(source)
    return column if table is not None and column and table.column(column) is not None else None


def probe(
    client: Client,
    loaded: LoadedProject,
    target: ObjectRef,
    live: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    root: Path | None = None,
) -> Facts:
    """Read every fact coverage needs for ``windows`` of ``target``, in ONE statement.

    Per trigger: the whole table's rows and oldest/newest time (part metadata answers it when the time
    column is the partition key) and its rows per window (pruned to the windows' ranges); the target's
    (physical table ``live``) rows per window; with a landing zone ``root``, the ingestion watermark of
    each trigger it holds files of.
    """
    scheme = _scheme(loaded, target)
    maps = mappings(loaded, target)
    sources = triggers(loaded, target)
    # a partition of a time window and a key is measured on its window (every key of it together)
    timed = list({w.start: w for w in map(time_of, windows) if w is not None}.values()) if scheme.grain else []
    table = loaded.project.table(target)
    column = table.column(scheme.column) if table is not None and scheme.column else None
    sub = None
    if timed and scheme.grain is not None and column is not None and all(s in maps for s in sources):
        sub = sub_grain_of(scheme.grain, [maps[s] for s in sources], column.type)
    branches, session = [], session_zone(client)  # the windows' wall clock, written into the SQL
    for index, source in enumerate(sources):
        mapping = maps.get(source)
        branches.append(table_branch("s", index, source, _time_column(loaded, source, mapping)))
        if mapping is not None and timed and scheme.grain is not None:
            ranges = [(_bounds(w)[0], *mapping.source_range(w)) for w in timed]
            branches += windows_branches(
                "w",
                index,
                source,
                mapping.column,
                mapping.column_type,
                scheme.grain,
                ranges,
                zone=session,
                bucketed=mapping.exact,
                sub_grain=sub if mapping.exact else None,
            )
        branches += deletes_branches(index, source)
    marks = _watermark_branches(loaded, sources, root)
    targets = _target_branches(live, column, scheme, timed, sub, session)
    sql = union([*branches, *marks(False), *targets])
    started = time.monotonic()
    try:
        rows = client.query(sql).result_rows
    except DatabaseError as error:  # before `chmv apply` migrated chmv_meta: the watermarks are in the legacy table
        if not marks(False) or not records.missing_table(error):
            raise
        sql = union([*branches, *marks(True), *targets])
        rows = client.query(sql).result_rows
    seconds = time.monotonic() - started
    zone = server_zone(client)  # the server's wall clock, as the windows (chmv_assets.engine.clock)
    now = (wall(rows[0][6], zone) if rows else None) or wall_now(client)

    def _naive(value: datetime | None) -> datetime | None:
        return wall(value, zone)

    def _start(value: datetime | None) -> datetime | None:  # a window's or a bucket's start: an instant, as windows
        return calendar_instant(value, session, loaded.config.timezone)

    tables, source_windows, target_windows, marks, deletes = _sides(rows, sources, _naive, _start)
    buckets: tuple[tuple[ObjectRef | None, datetime], ...] = ()
    if sub is not None and scheme.grain is not None:  # buckets inside the windows: fold them into their windows
        buckets = tuple((s, k) for s, k, _ in source_windows) + tuple((None, k) for k, _ in target_windows if k)
        calendar = loaded.config.timezone
        source_windows = _fold(source_windows, scheme.grain, calendar)
        target_windows = [
            (k, s) for _, k, s in _fold([(None, k, s) for k, s in target_windows], scheme.grain, calendar)
        ]
    if timed and column is not None:  # a window the grouped branch did not return has no rows
        seen = {k for k, _s in target_windows}
        target_windows += [(w.start, Stats()) for w in timed if w.start not in seen]
    return Facts(
        now=now,
        tables=tuple(tables),
        source_windows=tuple(source_windows),
        target_windows=tuple(target_windows),
        mapped=tuple(s for s in sources if s in maps),
        watermarks=tuple(marks),
        sql=sql,
        seconds=seconds,
        sub_grain=sub,
        buckets=buckets,
        deletes=tuple(deletes),
    )


def _watermark_branches(
    loaded: LoadedProject, sources: list[ObjectRef], root: Path | None
) -> Callable[[bool], list[str]]:
    """With a landing zone, the ingestion watermark of each trigger loaded from it (read from the legacy table, or
    not)."""
    ingestible = set(landing.ingestible_sources(loaded)) if root is not None else set()
    return lambda legacy: [
        watermark_branch("m", index, source, legacy=legacy)
        for index, source in enumerate(sources)
        if source in ingestible
    ]


def _target_branches(
    live: ObjectRef,
    column: Column | None,
    scheme: TargetPartitioning,
    timed: list[PartitionWindow],
    sub: Grain | None,
    zone: str,
) -> list[str]:
    """The target's rows per time window (the whole table's without windows or a time column); the windows are
    ``zone``'s wall clock."""
    if not timed or column is None or scheme.grain is None:
        return [table_branch("t", 0, live, None)]
    ranges = [(start, start, end) for start, end in map(_bounds, timed)]
    return windows_branches(
        "t", 0, live, column.name, column.type, scheme.grain, ranges, zone=zone, bucketed=True, sub_grain=sub
    )


def _sides(
    rows: Sequence[Sequence],
    sources: list[ObjectRef],
    naive: Callable[[datetime | None], datetime | None],
    start: Callable[[datetime | None], datetime | None],
):
    """The probe's rows (``side, index, key, count, oldest, newest, now``) by side: the triggers' whole tables
    (``s``), their rows per window (``w``, those with rows), the target's per window (``t``), the watermarks
    (``m``), the deletes they recorded (``x``, ``p``); times through ``naive`` (the server's wall clock), window and
    bucket starts through ``start`` (instants, as the windows' bounds)."""
    tables, source_windows, target_windows, marks, deletes = [], [], [], [], []
    for side, index, raw_key, count, oldest, newest, _now in rows:
        key = start(raw_key) if raw_key is not None else None
        stats = Stats(int(count), naive(oldest) if count else None, naive(newest) if count else None)
        if side == "m":
            marks.append((sources[index], naive(oldest) if count and oldest and oldest.year > 1970 else None))
        elif side == "s":
            tables.append((sources[index], stats))
        elif side == "w" and count:
            source_windows.append((sources[index], key, stats))
        elif side == "t" and (count or key is None):
            target_windows.append((key, stats))
        elif side in ("x", "p"):
            deletes.append((sources[index], side, stats.rows, stats.newest))
    return tables, source_windows, target_windows, marks, deletes


def _fold(rows: list, grain: Grain, calendar: str) -> list:
    """``(source, bucket start, stats)`` rows folded into ``(source, window start, stats)``, one per window."""
    folded: dict[tuple, Stats] = {}
    for source, start, stats in rows:
        key = (source, floor_to_grain(start, grain, calendar) if start is not None else None)
        previous = folded.get(key)
        if previous is None:
            folded[key] = stats
            continue
        olds = [t for t in (previous.oldest, stats.oldest) if t is not None]
        news = [t for t in (previous.newest, stats.newest) if t is not None]
        folded[key] = Stats(previous.rows + stats.rows, min(olds, default=None), max(news, default=None))
    return [(source, start, stats) for (source, start), stats in folded.items()]


def assess(
    loaded: LoadedProject, target: ObjectRef, windows: Sequence[PartitionWindow | None], facts: Facts, root: Path | None
) -> Coverage:
    """Decide, per window and trigger, how much the source table and the landing zone hold (pure but for
    listing the landing zone's file names)."""
    scheme = _scheme(loaded, target)
    if not scheme.partitioned:
        windows = [None]
    maps = mappings(loaded, target)
    lake = _Lake(loaded, root, dict(facts.watermarks))
    out = []
    measured: dict[datetime | None, tuple[tuple[SourceCoverage, ...], Stats | None]] = {}
    for window in dict.fromkeys(windows):
        # a partition is measured on its time window (a key alone: on the whole table, as an unpartitioned target)
        basis = time_of(window) if scheme.grain is not None else None
        start = basis.start if basis is not None else None
        if start not in measured:
            measured[start] = _measure(loaded, target, basis, facts, maps, lake)
        sources, target_stats = measured[start]
        rows, oldest = (target_stats.rows, target_stats.oldest) if target_stats else (None, None)
        out.append(WindowCoverage(window, sources, rows, oldest))
    return Coverage(target, tuple(out), facts.now, queries=1 if facts.sql else 0, seconds=facts.seconds)


def _measure(
    loaded: LoadedProject,
    target: ObjectRef,
    window: PartitionWindow | None,
    facts: Facts,
    maps: dict[ObjectRef, TimeMapping],
    lake: _Lake,
) -> tuple[tuple[SourceCoverage, ...], Stats | None]:
    """Per trigger, what the source table and the landing zone hold of a time window (None: the whole table); and
    the target's rows of it."""
    start = window.start if window else None
    target_stats = facts.target_window(start)
    holes = facts.holes(window) if window is not None else []
    # the verdicts compare the window with times read as the server's wall clock (rows' oldest and newest, now, TTL
    # horizons, landing files): its wall-clock span
    window = _wall_span(window)
    sources = []
    for source in triggers(loaded, target):
        table_stats = facts.table(source)
        mapping = maps.get(source) if source in facts.mapped else None
        window_stats = facts.source_window(source, start) if window and mapping and start is not None else None
        verdict = _table_verdict(loaded, source, window, mapping, table_stats, window_stats, target_stats, facts.now)
        if holes and verdict.holding == Holding.ENTIRELY:
            verdict = _holed(source, holes, facts.sub_grain, verdict)
        held_from = table_stats.oldest if table_stats else None
        lake_verdict = lake.verdict(source, window, mapping, window_stats, target_stats, table_stats)
        sources.append(SourceCoverage(source, verdict, lake_verdict, held_from, facts.deleted(source, window)))
    return tuple(sources), target_stats


def _bounds(window: PartitionWindow) -> tuple[datetime, datetime]:
    """A time window's start and end (coverage measures time windows: a key alone is measured on the whole table)."""
    assert window.start is not None and window.end is not None, window
    return window.start, window.end


def _wall_span(window: PartitionWindow | None) -> PartitionWindow | None:
    """A window's bounds as wall clocks (naive): the first of an hour a fall-back repeats spans that wall-clock hour."""
    if window is None or window.start is None or window.end is None:
        return window
    return replace(window, start=window.wall_start, end=window.wall_end)


def _holed(source: ObjectRef, holes: list[datetime], grain: Grain | None, verdict: Verdict) -> Verdict:
    """A window the source holds only partly: some of its buckets have rows in the target and none in any trigger."""
    return Verdict(
        Holding.PARTLY,
        f"{source.fqn} holds no rows of {_spans(holes, grain)} inside the window, where the target partition holds "
        f"rows (deleted or dropped from the source); {verdict.reason}",
    )


def _spans(starts: list[datetime], grain: Grain | None) -> str:
    """Consecutive buckets as ranges: ``2026-01-10 … 2026-01-15 (6 days)``."""
    step = timedelta(seconds=grain.seconds) if grain is not None and grain is not Grain.MONTH else timedelta(days=1)
    fmt = "%Y-%m-%d %H:00" if grain is Grain.HOUR else "%Y-%m-%d"
    unit = "hour" if grain is Grain.HOUR else "day"
    runs: list[list[datetime]] = []
    for start in starts:
        if runs and start - runs[-1][-1] == step:
            runs[-1].append(start)
        else:
            runs.append([start])
    parts = []
    for run in runs:
        count = f" ({len(run)} {unit}s)" if len(run) > 1 else ""
        parts.append(f"{run[0]:{fmt}}" + (f" … {run[-1]:{fmt}}{count}" if len(run) > 1 else ""))
    return ", ".join(parts[:5]) + (f" and {len(parts) - 5} more span(s)" if len(parts) > 5 else "")


def observe_coverage(
    client: Client,
    loaded: LoadedProject,
    target: ObjectRef,
    live: ObjectRef,
    windows: Sequence[PartitionWindow | None],
    root: Path | None,
) -> Coverage:
    """:func:`probe` then :func:`assess`: the coverage of ``windows`` of ``target`` now."""
    return assess(loaded, target, windows, probe(client, loaded, target, live, windows, root), root)


def _when(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S}" if value else "?"


def _span(stats: Stats) -> str:
    return f"{stats.rows:,} rows from {_when(stats.oldest)} to {_when(stats.newest)}"


def _retention(
    loaded: LoadedProject, source: ObjectRef, column: str | None, window: PartitionWindow | None, now: datetime
) -> Verdict | None:
    """What the source's TTL says about the window; None when no rule removes rows of it."""
    table = loaded.project.table(source)
    for rule in table.row_retention if table is not None else ():
        horizon = ttl_horizon(rule, now)
        if window is None:  # the whole table: any rule that removes rows has removed some
            before = f"before {_when(horizon)}" if horizon else "whose time has come"
            return Verdict(Holding.PARTLY, f"{source.fqn}: its TTL {rule.expression} deletes rows {before}")
        if horizon is None:
            return Verdict(
                Holding.UNKNOWN, f"{source.fqn} has TTL {rule.expression}, which chmv cannot read as a time horizon"
            )
        if column is None or rule.column != column:
            return Verdict(
                Holding.UNKNOWN,
                f"{source.fqn} has TTL {rule.expression} on `{rule.column}`, not on "
                f"the column its rows are placed in windows by ({column or 'none'})",
            )
        start, end = _bounds(window)
        if horizon <= start:
            continue
        what = f"rows matching {rule.condition} " if rule.condition else "rows "
        says = f"its TTL {rule.expression} deletes {what}before {_when(horizon)}"
        if rule.condition:
            return Verdict(Holding.PARTLY, f"{source.fqn}: {says}")
        if horizon >= end:
            return Verdict(Holding.NONE, f"{source.fqn}: {says}")
        return Verdict(Holding.PARTLY, f"{source.fqn}: {says}")
    return None


def _table_verdict(
    loaded: LoadedProject,
    source: ObjectRef,
    window: PartitionWindow | None,
    mapping: TimeMapping | None,
    table: Stats | None,
    rows: Stats | None,
    target: Stats | None,
    now: datetime,
) -> Verdict:
    name = source.fqn
    if table is None:
        return Verdict(Holding.UNKNOWN, f"{name} was not observed")
    target_rows = target.rows if target is not None else None
    if table.rows == 0:
        if target_rows:
            return Verdict(Holding.NONE, f"{name} is empty while the target partition holds {target_rows:,} rows")
        return Verdict(Holding.UNKNOWN, f"{name} is empty: nothing tells whether the window ever had rows")
    held = f"{name} holds {_span(table)}" if table.oldest else f"{name} holds {table.rows:,} rows"
    retention = _retention(
        loaded, source, mapping.column if mapping else _time_column(loaded, source, None), window, now
    )
    if retention is not None and retention.holding != Holding.UNKNOWN:
        extra = f" ({rows.rows:,} rows of the window await deletion)" if rows is not None and rows.rows else ""
        return Verdict(retention.holding, f"{retention.reason}{extra}; {held}")
    if window is None:
        unobservable = (
            "an unpartitioned target or a partition of a key alone (no time window): whether the table still holds "
            "every row it ever received is not observable"
        )
        why = retention.reason if retention else unobservable
        return Verdict(Holding.UNKNOWN, f"{why}; {held}")
    if mapping is None or rows is None:
        return Verdict(
            Holding.UNKNOWN,
            f"the rows of {name} cannot be placed in partition windows (the target's "
            f"partition column is not a truncation of a column of {name}); {held}",
        )
    if rows.rows == 0 and target_rows:
        return Verdict(
            Holding.NONE,
            f"{name} holds no rows of the window while the target partition holds "
            f"{target_rows:,} (dropped or deleted from the source); {held}",
        )
    if retention is not None:
        return Verdict(Holding.UNKNOWN, f"{retention.reason}; {held}")
    start, end = _bounds(window)
    if rows.rows == 0:
        if table.oldest is not None and table.oldest >= end:
            return Verdict(Holding.NONE, f"{name} holds nothing before {_when(table.oldest)}; {held}")
        return Verdict(Holding.ENTIRELY, f"no rows of the window in {name} nor in the target; {held}")
    assert rows.oldest is not None
    if target is not None and target.rows and target.oldest is not None and rows.oldest > start:
        first = floor(rows.oldest, mapping.grain) if mapping.grain is not None else rows.oldest
        if target.oldest < first:
            return Verdict(
                Holding.PARTLY,
                f"{name} holds the window from {_when(rows.oldest)} only, the target "
                f"partition has rows from {_when(target.oldest)}; {held}",
            )
    return Verdict(Holding.ENTIRELY, f"{name} holds {_span(rows)} of the window")


class _Lake:
    """The landing zone's answers, listing each source's files once."""

    def __init__(self, loaded: LoadedProject, root: Path | None, watermarks: dict[ObjectRef, datetime | None]):
        self.loaded, self.root, self.watermarks = loaded, root, watermarks
        self.tolerance = timedelta(minutes=loaded.config.ingestion.late_tolerance_minutes)
        self.ingestible = set(landing.ingestible_sources(loaded))
        self.lateness = timedelta(minutes=loaded.config.ingestion.max_lateness_minutes)
        self._files: dict[ObjectRef, list[landing.LandingFile]] = {}

    def files(self, source: ObjectRef) -> list[landing.LandingFile]:
        if source not in self._files:
            assert self.root is not None
            self._files[source] = landing.list_files(self.root, source)
        return self._files[source]

    def verdict(
        self,
        source: ObjectRef,
        window: PartitionWindow | None,
        mapping: TimeMapping | None,
        rows: Stats | None,
        target: Stats | None,
        table: Stats | None,
    ) -> Verdict:
        if self.root is None:
            return Verdict(Holding.UNKNOWN, "no landing zone is configured")
        if source not in self.ingestible:
            return Verdict(
                Holding.UNKNOWN, f"the landing zone is not used for {source.fqn} (no [ingestion.time_columns] entry)"
            )
        files = self.files(source)
        where = self.root / source.fqn
        if not files:
            return Verdict(Holding.NONE, f"no landing files of {source.fqn} in {where}")
        first = min(f.first_arrival for f in files)
        if window is None:
            if table is not None and table.oldest is not None and table.oldest < first:
                return Verdict(
                    Holding.PARTLY,
                    f"the landing zone starts at {_when(first)}, {source.fqn} holds rows from {_when(table.oldest)}",
                )
            return Verdict(Holding.ENTIRELY, f"{len(files)} landing files from {_when(first)}")
        lo, hi = mapping.source_range(window) if mapping else _bounds(window)
        inside = _arrived(files, lo, hi + self.lateness)
        if not inside:
            return Verdict(Holding.NONE, f"no landing file of {source.fqn} arrived in [{_when(lo)}, {_when(hi)})")
        if first > lo:
            if rows is not None and rows.rows and rows.oldest is not None and rows.oldest < first:
                return Verdict(
                    Holding.PARTLY,
                    f"the landing zone starts at {_when(first)}, {source.fqn} holds rows "
                    f"of the window from {_when(rows.oldest)}",
                )
            grain = mapping.grain if mapping else None
            start = floor(first, grain) if grain is not None else first
            if target is not None and target.rows and target.oldest is not None and target.oldest < start:
                return Verdict(
                    Holding.PARTLY,
                    f"the landing zone starts at {_when(first)}, the target partition "
                    f"has rows from {_when(target.oldest)}",
                )
        mark = self.watermarks.get(source)
        cutoff = mark - self.tolerance if mark is not None else None
        if cutoff is not None and hi > cutoff and (table is None or table.oldest is None or table.oldest > cutoff):
            held = f"holds nothing before {_when(table.oldest)}" if table and table.oldest else "is empty"
            return Verdict(
                Holding.PARTLY,
                f"the window's rows after the cutoff {_when(cutoff)} (ingestion watermark "
                f"- late tolerance) are read from {source.fqn}, which {held}",
            )
        return Verdict(
            Holding.ENTIRELY,
            f"{len(inside)} landing files arrived in the window's range (the landing zone starts at {_when(first)})",
        )


def _arrived(files: Iterable[landing.LandingFile], lo: datetime, hi: datetime) -> list[landing.LandingFile]:
    return [f for f in files if f.last_arrival > lo and f.first_arrival < hi]
