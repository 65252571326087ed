"""The parity sweep's decision: which target partitions changed since their last verdict (no Dagster).

Parity only says something when it runs. The sweep makes it run on its own, incrementally: each tick
reads the active parts of every target and of every trigger source in ONE query (``system.parts``), and
compares them with what the previous tick saw:

- a part with a block number above the partition's previous maximum is new rows (an insert, a rebuild's
  REPLACE PARTITION, a merge that took new rows in): the time range of those parts is dirty;
- a mutation (a DELETE, an UPDATE: the part's data version passes its block range) or a new or dropped
  ClickHouse partition makes the partition's whole time range dirty;
- a part that is not indexed by time (a partition key without a date) makes the whole table dirty.

A dirty range of a target marks its own windows; a dirty range of a trigger source marks the target
windows its rows map into (the MV's time mapping, ``coverage_sql.TimeMapping``), or every window the
target holds when the mapping cannot tell. Marked windows wait in the cursor until a tick's budget
(partitions, rows estimated from the parts) takes them; a window still inside the parity grace period
waits until the grace ends, so the partition the live MVs are writing is checked once, when it is complete.

A merge keeps the block range of the parts it merges, so merges alone mark nothing; a cold start (no
cursor) marks everything once: the first sweep checks every partition, spread over ticks by the budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import PartitionWindow, TargetPartitioning, keyed_window, with_values
from chmv_assets.engine.clock import calendar_instant, server_zone, session_zone, wall_seconds
from chmv_assets.engine.health.cursors import encode_cursor, read_cursor
from chmv_assets.engine.parts import Part, Span, views_without_to
from chmv_assets.engine.parts import read_parts as read_active_parts
from chmv_assets.engine.rebuild.coverage import mappings, triggers

#: Cursor format version: a cursor of another version is ignored (everything is swept once more).
CURSOR_VERSION = 1
#: A dirty range that is the whole table (parts without a time index, or a mapping that cannot tell).
WHOLE = None

Range = Span  # [first, last] wall seconds of rows; None: the whole table


@dataclass(frozen=True)
class PartitionSeen:
    """What a tick saw of one ClickHouse partition: the cursor's unit of comparison."""

    max_block: int
    mutated: int
    span: Range
    rows: int
    value: str = ""
    instant: int = 0  # Unix seconds of its oldest row by a DateTime key (0: unknown): which 01:00 of a fall-back

    @property
    def oldest(self) -> datetime | None:
        """Its oldest row's time as an instant (aware, UTC), None where unknown."""
        return datetime.fromtimestamp(self.instant, UTC) if self.instant > 0 else None

    def to_json(self) -> list:
        span = list(self.span) if self.span else None
        return [self.max_block, self.mutated, span, self.rows, self.value, *([self.instant] if self.instant else [])]

    @classmethod
    def from_json(cls, data: list) -> PartitionSeen:
        span = tuple(data[2]) if data[2] else WHOLE
        value = str(data[4]) if len(data) > 4 else ""
        instant = int(data[5]) if len(data) > 5 else 0
        return cls(int(data[0]), int(data[1]), span, int(data[3]), value, instant)


@dataclass
class SweepState:
    """The sweep's memory between ticks (the sensor cursor).

    Attributes:
        tables: Per table fqn, per ClickHouse partition id, what the last tick saw.
        pending: Per target fqn, per Dagster partition key (``""``: unpartitioned), ``(turn, marked)``: the
            unix time from which it may be evaluated (the end of its grace period) and when it was last
            marked (the most recently changed partitions are evaluated first).
    """

    tables: dict[str, dict[str, PartitionSeen]] = field(default_factory=dict)
    pending: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)

    def dumps(self) -> str:
        """The cursor (:mod:`chmv_assets.engine.health.cursors`), deflated: thousands of partitions repeat a lot."""
        tables = {t: {p: s.to_json() for p, s in ps.items()} for t, ps in self.tables.items()}
        return encode_cursor({"t": tables, "p": self.pending}, CURSOR_VERSION, compress=True)

    @classmethod
    def loads(cls, cursor: str | None) -> SweepState:
        """The state of a cursor; an empty state for none, an unreadable one or another version."""
        data = read_cursor(cursor, CURSOR_VERSION)
        try:
            tables = {t: {p: PartitionSeen.from_json(s) for p, s in ps.items()} for t, ps in data["t"].items()}
            pending = {t: {k: (float(v[0]), float(v[1])) for k, v in ps.items()} for t, ps in data["p"].items()}
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return cls()
        return cls(tables, pending)


@dataclass(frozen=True)
class SweepItem:
    """One target partition a tick evaluates."""

    target: ObjectRef
    window: PartitionWindow | None
    rows: int  # estimated rows the evaluation reads (target partition + source rows of its range)

    @property
    def key(self) -> str | None:
        return self.window.key if self.window else None


@dataclass(frozen=True)
class SweepDecision:
    """What one tick decided, and what it cost.

    Attributes:
        items: The partitions to evaluate now, in order.
        state: The cursor to keep (the chosen partitions are no longer pending).
        queries: ClickHouse queries the decision ran.
        tables: Tables whose parts were read.
        marked: Target partitions marked dirty by this tick.
        pending: Partitions left waiting (budget or grace) after this tick's choice.
        waiting_for_grace: Of those, how many wait for their grace period to end.
    """

    items: tuple[SweepItem, ...]
    state: SweepState
    queries: int
    tables: int
    marked: int
    pending: int
    waiting_for_grace: int

    def summary(self) -> str:
        rows = sum(i.rows for i in self.items)
        return (
            f"{len(self.items)} partition(s) to check (~{rows:,} rows), {self.marked} marked dirty this tick, "
            f"{self.pending} pending ({self.waiting_for_grace} inside the grace period); {self.tables} tables, "
            f"{self.queries} ClickHouse query"
        )


def tracked_tables(loaded: LoadedProject, targets: Iterable[ObjectRef]) -> list[ObjectRef]:
    """The targets and their trigger sources, each once."""
    out: dict[ObjectRef, None] = {}
    for target in targets:
        out[target] = None
        for source in triggers(loaded, target):
            out[source] = None
    return list(out)


def read_parts(client: Client, loaded: LoadedProject, tables: list[ObjectRef]) -> dict[ObjectRef, list[Part]]:
    """The active parts of ``tables`` in one query (an MV without TO is read through its inner table)."""
    return read_active_parts(client, tables, inner_views=views_without_to(loaded.project, tables))


def seen_partitions(parts: list[Part]) -> dict[str, PartitionSeen]:
    """Fold a table's parts into what the cursor keeps per ClickHouse partition."""
    return {pid: _fold(group) for pid, group in _by_partition(parts).items()}


def _by_partition(parts: list[Part]) -> dict[str, list[Part]]:
    groups: dict[str, list[Part]] = {}
    for part in parts:
        groups.setdefault(part.partition_id, []).append(part)
    return groups


def _fold(parts: list[Part]) -> PartitionSeen:
    """What the cursor keeps of one ClickHouse partition's parts."""
    held = [p for p in parts if p.rows]  # an empty part (what a swap or a drop leaves over a range) has no time
    timed = [p.span for p in held if p.span is not WHOLE]
    span = (min(f for f, _ in timed), max(t for _, t in timed)) if timed and len(timed) == len(held) else WHOLE
    rows = sum(p.rows for p in parts)
    instant = min((p.first_instant for p in held if p.first_instant > 0), default=0)
    return PartitionSeen(
        max(p.max_block for p in parts), max(p.mutated for p in parts), span, rows, parts[0].value, instant
    )


def dirty_ranges(parts: list[Part], before: dict[str, PartitionSeen] | None) -> list[Range]:
    """The time ranges of a table whose rows changed since ``before`` (None: never seen, so all of it)."""
    return _changes(parts, before).ranges


def _changes(parts: list[Part], before: dict[str, PartitionSeen] | None) -> _Changes:
    """:func:`dirty_ranges`, the partitions they are in, and :func:`seen_partitions` of ``parts`` (the next cursor),
    from one grouping of the parts."""
    groups = _by_partition(parts)
    now = {pid: _fold(group) for pid, group in groups.items()}
    if before is None:
        return _Changes([p.span for p in now.values()], list(now.values()), now)
    ranges: list[Range] = []
    dirty: list[PartitionSeen] = []
    for pid, seen in now.items():
        old = before.get(pid)
        if old is None or seen.mutated != old.mutated or seen.max_block < old.max_block:
            ranges.append(seen.span)
            dirty.append(seen if seen.span is not WHOLE or old is None else replace(seen, span=old.span))
            if old is not None and seen.span != old.span:
                ranges.append(old.span)
            continue
        grown = [p.span for p in groups[pid] if p.max_block > old.max_block]
        ranges += grown
        dirty += [seen if seen.span is not WHOLE else replace(seen, span=old.span)] if grown else []
    gone = [old for pid, old in before.items() if pid not in now]  # dropped partitions
    return _Changes(ranges + [old.span for old in gone], dirty + gone, now)


@dataclass(frozen=True)
class _Changes:
    """What changed in one table since the previous tick."""

    ranges: list[Range]
    partitions: list[PartitionSeen]  # the ClickHouse partitions the ranges are in (a dropped one as it was seen)
    seen: dict[str, PartitionSeen]


def _when(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


class _Marker:
    """Maps the changes of targets and sources onto target partitions."""

    def __init__(self, loaded: LoadedProject, session: str = "UTC"):
        self.loaded = loaded
        self.session = session  # the zone the server names the parts' times in

    def target_windows(self, target: ObjectRef, changes: _Changes, held: list[Part]) -> set[PartitionWindow | None]:
        """The target's partitions that its own changes touch: the windows of its dirty ranges, or, with a key part,
        the partitions its changed ClickHouse partitions are (one each: the window of its oldest row's instant, so
        each 01:00 hour of a fall-back night is its own)."""
        partitioning = self.loaded.partitioning(target)
        if not partitioning.keyed:
            return self._covering(partitioning, changes.ranges, held, margin=timedelta(0))
        out: set[PartitionWindow | None] = set()
        for seen in changes.partitions:
            window = partitioning.partition_of(seen.value, self._oldest(partitioning, seen))
            if window is not None and (window.start is None or window.start >= partitioning.opening):
                out.add(window)
        return out

    def _oldest(self, partitioning: TargetPartitioning, seen: PartitionSeen) -> datetime | None:
        """The oldest time of a ClickHouse partition's rows: its instant in the partition calendar where the server
        gave one, else its wall clock (the first of a repeated hour)."""
        if seen.oldest is not None:
            return calendar_instant(seen.oldest, self.session, partitioning.zone)
        return _when(seen.span[0]) if seen.span is not WHOLE else None

    def source_windows(
        self, target: ObjectRef, source: ObjectRef, ranges: list[Range], held: list[Part]
    ) -> set[PartitionWindow | None]:
        """The target's partitions that rows of the source's dirty ranges map into (with a key part: those windows
        for every key value the target holds)."""
        if not ranges:
            return set()
        partitioning = self.loaded.partitioning(target)
        mapping = mappings(self.loaded, target).get(source)
        column = self.loaded.partitioning(source).column  # what the source's parts' min/max index is on
        margin = timedelta(0)
        if mapping is None or column is None or column != mapping.column:
            ranges = [WHOLE]  # cannot map: every held window
        else:
            margin = mapping.reach
        if not partitioning.keyed:
            return self._covering(partitioning, ranges, held, margin)
        keys = partitioning.held_keys(p.value for p in held)
        if not partitioning.timed:
            return {keyed_window(k) for k in keys}
        times = self._covering(partitioning, ranges, held, margin)
        return set(with_values([w for w in times if w is not None and w.start], keys))

    def _covering(
        self, partitioning: TargetPartitioning, ranges: list[Range], held: list[Part], margin: timedelta
    ) -> set[PartitionWindow | None]:
        """The time windows ``ranges`` touch (every window the target holds for a range that is the whole table); a
        range's wall clocks cover both windows of an hour a fall-back repeats."""
        if not ranges:
            return set()
        if not partitioning.timed:
            return {None}
        if any(r is WHOLE for r in ranges):  # every window the target holds
            ranges = [*(r for r in ranges if r is not WHOLE), *(p.span for p in held if p.span is not WHOLE)]
        out: set[PartitionWindow | None] = set()
        for first, last in ranges:  # type: ignore[misc]
            out.update(partitioning.time_windows(_when(first) - margin, _when(last)))
        return out


def window_of(loaded: LoadedProject, target: ObjectRef, key: str | None) -> PartitionWindow | None:
    """The partition of a Dagster partition key of ``target`` (None: the whole table, or an unpartitioned target):
    :meth:`~chmv_assets.ddl.partitioning.TargetPartitioning.window_of`, the one codec of keys."""
    return loaded.partitioning(target).window_of(key)


def _overlapping(parts: list[Part], lo: int, hi: int) -> int:
    """Rows of the parts whose time span meets ``[lo, hi)`` (a part without a time index always does)."""
    return sum(p.rows for p in parts if p.span is WHOLE or (p.first < hi and p.last >= lo))


def estimate_rows(
    loaded: LoadedProject, target: ObjectRef, window: PartitionWindow | None, parts: dict[ObjectRef, list[Part]]
) -> int:
    """Rows an evaluation of the partition reads: the target's and its sources' parts over the window."""
    if window is None or window.start is None or window.end is None:
        return sum(p.rows for t in (target, *triggers(loaded, target)) for p in parts.get(t, []))
    lo, hi = wall_seconds(window.wall_start), wall_seconds(window.wall_end)  # type: ignore[arg-type]
    maps = mappings(loaded, target)
    total = _overlapping(parts.get(target, []), lo, hi)
    for source in triggers(loaded, target):
        mapping = maps.get(source)
        extra = int(mapping.reach.total_seconds()) if mapping is not None else 0
        total += _overlapping(parts.get(source, []), lo, hi + extra)
    return total


def decide(
    client: Client,
    loaded: LoadedProject,
    targets: list[ObjectRef],
    state: SweepState,
    *,
    now: float,
    max_partitions: int,
    max_rows: int,
) -> SweepDecision:
    """Read the parts (one query), mark what changed since ``state`` and choose this tick's partitions.

    Args:
        client: An open client.
        loaded: The parsed project.
        targets: The targets to sweep.
        state: The previous tick's state (empty: everything is marked once).
        now: Unix seconds (the grace period and the pending partitions' turn are measured against it, on the
            server's wall clock: windows are wall-clock spans, see :mod:`chmv_assets.engine.clock`).
        max_partitions: Most partitions to choose (0: only mark, e.g. while the previous tick's run is busy).
        max_rows: Most rows (estimated) the chosen evaluations read; the first one always fits.

    Returns:
        The partitions to evaluate now, the state to keep, and what it cost.
    """
    tables = tracked_tables(loaded, targets)
    parts = read_parts(client, loaded, tables)
    offset = server_zone(client).utcoffset(datetime.fromtimestamp(now, UTC))
    now += offset.total_seconds() if offset is not None else 0.0  # wall seconds from here on
    marker = _Marker(loaded, session_zone(client))
    grace = loaded.config.parity.grace_minutes * 60
    changes = {ref: _changes(parts[ref], state.tables.get(ref.fqn)) for ref in tables}
    known = {t.fqn for t in targets}
    pending = {fqn: dict(keys) for fqn, keys in state.pending.items() if fqn in known}
    fresh: set[tuple[str, str]] = set()
    for target in targets:
        windows = marker.target_windows(target, changes[target], parts[target])
        for source in triggers(loaded, target):
            windows |= marker.source_windows(target, source, changes[source].ranges, parts[target])
        entries = pending.setdefault(target.fqn, {})
        for window in windows:
            key = window.key if window is not None else ""
            fresh.add((target.fqn, key))
            if window is None or window.end is None:  # no window: checked once its writes pause for the grace period
                entries[key] = (now + grace, now)
            else:
                entries[key] = (wall_seconds(window.wall_end) + grace, now)  # type: ignore[arg-type]
    by_fqn = {t.fqn: t for t in targets}
    # the most recently changed go first: a fresh gap is not queued behind a cold start's backlog
    ready = sorted(
        (-marked, fqn, key) for fqn, keys in pending.items() for key, (turn, marked) in keys.items() if turn <= now
    )
    items: list[SweepItem] = []
    rows_budget = max_rows
    for _marked, fqn, key in ready:
        if len(items) >= max_partitions:
            break
        target = by_fqn[fqn]
        window = window_of(loaded, target, key)
        rows = estimate_rows(loaded, target, window, parts)
        if items and rows > rows_budget:
            continue
        rows_budget -= rows
        items.append(SweepItem(target, window, rows))
        del pending[fqn][key]
    new_state = SweepState(
        {ref.fqn: change.seen for ref, change in changes.items()}, {fqn: keys for fqn, keys in pending.items() if keys}
    )
    left = sum(len(keys) for keys in new_state.pending.values())
    waiting = sum(1 for keys in new_state.pending.values() for turn, _marked in keys.values() if turn > now)
    return SweepDecision(tuple(items), new_state, 1, len(tables), len(fresh), left, waiting)
