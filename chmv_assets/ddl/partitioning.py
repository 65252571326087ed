"""How a target table is partitioned, decided once per target (no Dagster, no client).

A PARTITION BY has a **time part** (an element that truncates a time column to windows a registered time shape names:
``toYYYYMM(day)``, ``toMonday(d)``, ``toStartOfInterval(ts, INTERVAL 6 HOUR)``, ``intDiv(toUnixTimestamp(ts), 3600)``)
and a **key part** (every other element: ``region`` of ``(toYYYYMM(day), region)``, ``tenant`` of ``PARTITION BY
tenant``): time alone, time × key, a key alone or neither, each a shape of :mod:`chmv_assets.ddl.shapes`.

:func:`partition_scheme` is the one place that reads a PARTITION BY into a :class:`PartitionScheme`; the loaded project
keeps one :class:`TargetPartitioning` per target (the scheme in the partition calendar: the zone and first day of
chmv.toml; :meth:`chmv_assets.ddl.loader.LoadedProject.partitioning`), and everything that names, enumerates, decodes
or writes a partition reads that object: the Dagster partitions definition, op and job names, keys (the one codec:
:meth:`TargetPartitioning.window`, for Dagster, the CLI, the sweep and recovery), windows, SQL predicates
(:mod:`chmv_assets.sql.rebuild_sql`), catch-up and run ranges (:meth:`TargetPartitioning.windows`).

Keys: ``2026-09-01`` for days, weeks, months, quarters and years, ``2026-09-01-13:00`` below a day,
``2026-11-01-01:00-0500`` for the second of a wall-clock hour a fall-back repeats, ``2026-09-01|eu`` for a window and a
key, ``eu`` for a key alone. A window's bounds are **instants** (:mod:`chmv_assets.ddl.instants`): aware datetimes at
the UTC offset of the partition calendar's zone, so an hour a fall-back repeats is two windows, an hour a
spring-forward skips none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.instants import at_wall, in_zone, instant, repeated, window_instant, zone_info
from chmv_assets.ddl.models import MaterializedView, ObjectRef, PartitionCall, Project, Table
from chmv_assets.ddl.shapes import PartitionShape, TimeShape, read_time_shape, time_shape, whole_shape
from chmv_assets.ddl.windows import (
    KEY_DELIMITER,
    VALUES_DELIMITER,
    PartitionWindow,
    decode_key,
    encode_key,
    keyed_window,
    time_of,
    with_values,
)
from chmv_assets.errors import PartitionKeyError

__all__ = [
    "KEY_DELIMITER",
    "VALUES_DELIMITER",
    "PartitionScheme",
    "PartitionWindow",
    "TargetPartitioning",
    "at_wall",
    "decode_key",
    "element_grain",
    "encode_key",
    "floor_to_grain",
    "in_zone",
    "instant",
    "key_values",
    "keyed_window",
    "next_start",
    "partition_of",
    "partition_scheme",
    "partition_start",
    "partition_values",
    "repeated",
    "target_partitioning",
    "target_reach",
    "time_of",
    "window_at",
    "window_for_partition_key",
    "window_instant",
    "window_key",
    "window_reach",
    "windows_between",
    "with_values",
    "zone_info",
]

#: The first day of the partitions where chmv.toml names none (``partition_start``'s own default is its).
EPOCH_START = "1970-01-01"


@dataclass(frozen=True)
class PartitionScheme:
    """How a table is partitioned, read from its PARTITION BY (:func:`partition_scheme`).

    Attributes:
        grain: The time part's grain (``hour``, ``day``, ``week``, ``month``, ``6 hour``…): its windows are those of
            :attr:`time`; None without a time part.
        column: The target column the time part reads.
        note: What the asset's metadata says about a PARTITION BY that is not partitioned as it may look (a time
            function chmv does not read as time, a partition column an MV aggregates).
        time_element: The index of the time part among the PARTITION BY's elements.
        keys: The key part: the PARTITION BY's other elements, as written (``("region",)``); empty without one.
        key_elements: Their indexes among the PARTITION BY's elements.
    """

    grain: Grain | None
    column: str | None = None
    note: str | None = None
    time_element: int = 0
    keys: tuple[str, ...] = ()
    key_elements: tuple[int, ...] = ()

    @property
    def time(self) -> TimeShape | None:
        """The time part's shape (its windows' arithmetic and keys), None without a time part."""
        return time_shape(self.grain) if self.grain is not None else None

    @property
    def shape(self) -> PartitionShape:
        """The whole PARTITION BY's shape: unpartitioned, time alone, a key alone, time × key."""
        return whole_shape(self.grain is not None, bool(self.keys))

    @property
    def partitioned(self) -> bool:
        """The target is partitioned (by time, by a key or both): it is rebuilt, checked and swept per partition."""
        return self.grain is not None or bool(self.keys)

    @property
    def timed(self) -> bool:
        """The PARTITION BY has a time part: its partitions are named by windows."""
        return self.grain is not None

    @property
    def keyed(self) -> bool:
        """The PARTITION BY has a key part: its partitions are named by values the server holds."""
        return bool(self.keys)

    @property
    def elements(self) -> int:
        """How many elements the PARTITION BY has (the time part and the key part's)."""
        return len(self.key_elements) + (self.grain is not None)

    def describe(self) -> str:
        """``month on `day` × `region```, ```tenant```, ``unpartitioned``: what the plans print."""
        parts = [f"{self.grain} on `{self.column}`"] if self.grain is not None else []
        parts += [f"`{k}`" for k in self.keys]
        return " × ".join(parts) or "unpartitioned"


def partition_scheme(table: Table, views: tuple[MaterializedView, ...] = ()) -> PartitionScheme:
    """Read a table's PARTITION BY (and the MVs that write it) into its scheme: the one place that decides it.

    The time part is the first element a registered time shape reads on a time column (and that no MV computes with
    an aggregate); every other element is the key part. A target is unpartitioned only without a PARTITION BY (or
    with ``tuple()``).
    """
    fragment = table.partition_by
    elements = table.partition_elements
    if fragment is None or not elements or fragment.sql.strip() in ("tuple()", ""):
        return PartitionScheme(grain=None)
    notes: list[str] = []
    time_element, grain = None, None
    for index, element in enumerate(elements):
        found = element_grain(element.call, table)
        if found is None or element.call is None:
            continue
        aggregated = next(
            (v for v in views if (out := v.output(element.call.column)) is not None and out.is_aggregate), None
        )
        if aggregated is not None:
            notes.append(
                f"partition column {element.call.column} is an aggregate in {aggregated.ref.fqn}: "
                "partitioned by the values the server holds, not by time windows"
            )
            continue
        time_element, grain = index, found
        break
    key_elements = tuple(i for i in range(len(elements)) if i != time_element)
    keys = tuple(fragment.sql[elements[i].span.start : elements[i].span.end].strip() for i in key_elements)
    if time_element is None and not notes:
        unread = [k for k, i in zip(keys, key_elements, strict=True) if _looks_like_time(elements[i].call, table)]
        if unread:
            notes.append(
                f"{', '.join(unread)}: no time-window partitions match it (Dagster names windows by a cron "
                "schedule); partitioned by the values the server holds"
            )
    if time_element is None:
        return PartitionScheme(grain=None, note="; ".join(notes) or None, keys=keys, key_elements=key_elements)
    call = elements[time_element].call
    assert call is not None and grain is not None
    return PartitionScheme(
        grain=grain,
        column=call.column,
        note="; ".join(notes) or None,
        time_element=time_element,
        keys=keys,
        key_elements=key_elements,
    )


def element_grain(call: PartitionCall | None, table: Table) -> Grain | None:
    """The grain of a PARTITION BY element on a time column that a registered time shape reads
    (:func:`chmv_assets.ddl.shapes.read_time_shape`), None for anything else."""
    if call is None:
        return None
    column = table.column(call.column)
    if column is None:
        return None
    if not column.type.strip():  # an MV's inner table: its columns are the SELECT's, of types the DDL does not say
        if call.function is None:  # a bare column of unknown type: its values are the key
            return None
        is_date = False
    elif not column.data_type.is_time:
        return None
    else:
        is_date = column.data_type.is_date
    shape = read_time_shape(call, is_date)
    return shape.grain if shape is not None else None


def _looks_like_time(call: PartitionCall | None, table: Table) -> bool:
    """A key element that reads a time column through a function (``toStartOfWeek(d)``, a 2-day interval)."""
    column = table.column(call.column) if call is not None else None
    return call is not None and call.function is not None and column is not None and column.data_type.is_time


@dataclass(frozen=True)
class TargetPartitioning(PartitionScheme):
    """A target's partitioning, decided once per load (:meth:`chmv_assets.ddl.loader.LoadedProject.partitioning`):
    its scheme in the partition calendar. Every reader of a partition reads this object: the Dagster definition, op
    and job names, the keys and their windows, the SQL predicates, catch-up and run ranges.

    Attributes:
        target: The table (None: a partitioning of no table, e.g. the daily ingestion assets').
        zone: The partition calendar's zone (chmv.toml ``timezone``): Dagster's, and the windows' UTC offsets.
        start: The first day of the partitions (chmv.toml ``partition_start``, ``YYYY-MM-DD``).
    """

    target: ObjectRef | None = None
    zone: str = "UTC"
    start: str = EPOCH_START

    @classmethod
    def of(
        cls, scheme: PartitionScheme, target: ObjectRef | None = None, zone: str = "UTC", start: str = EPOCH_START
    ) -> TargetPartitioning:
        """``scheme`` in the calendar of ``zone`` from ``start``, for ``target``."""
        own = {f.name: getattr(scheme, f.name) for f in fields(PartitionScheme)}
        return cls(**own, target=target, zone=zone, start=start)

    @property
    def scheme(self) -> PartitionScheme:
        """The PARTITION BY's scheme alone (no calendar, no target)."""
        return PartitionScheme(**{f.name: getattr(self, f.name) for f in fields(PartitionScheme)})

    @property
    def first(self) -> datetime:
        """The first day of the partitions (a wall clock of :attr:`zone`)."""
        return datetime.strptime(self.start, "%Y-%m-%d")

    @property
    def family(self) -> str:
        """The name of the ops of targets partitioned so (``rebuild_<family>_targets``: ``hourly``, ``daily``,
        ``weekly``, ``monthly``, ``timewindow``, ``multi``, ``dynamic``, ``whole``)."""
        return self.shape.family(self)

    @property
    def job_suffix(self) -> str:
        """The name of the rebuild job of targets partitioned so (``chmv_rebuild_<suffix>``: ``day``, ``6_hour``,
        ``unpartitioned``; a target with a key part has a job of its own, ``month__analytics__sales``)."""
        return self.shape.job_suffix(self)

    # --- keys ------------------------------------------------------------------------------------------------------

    def window(self, key: str) -> PartitionWindow:
        """The partition a Dagster partition key names (``2026-09-01``, ``2026-09-01-13:00``,
        ``2026-11-01-01:00-0500``, ``2026-09-01|eu``, ``eu``): the one decoder of keys (Dagster's runs, the CLI, the
        sweep, recovery).

        Raises:
            PartitionKeyError: The key is not one of the target's, naming the target and the forms it takes.
        """
        return _decoded(self, str(key), self.target.fqn if self.target is not None else None)

    def window_of(self, key: str | None) -> PartitionWindow | None:
        """:meth:`window` of a key; None for none, or for an unpartitioned target (the whole table)."""
        if not key or not self.partitioned:
            return None
        return self.window(key)

    # --- ranges ----------------------------------------------------------------------------------------------------

    def time_windows(self, since: datetime, until: datetime) -> list[PartitionWindow]:
        """The time windows (from :attr:`start`) meeting ``[since, until]``: naive values are wall clocks of
        :attr:`zone` (``since`` its first occurrence, ``until`` its last)."""
        if self.time is None:
            return []
        return self.time.windows_between(self.first, since, until, self.zone)

    def windows(
        self,
        since: datetime,
        until: datetime,
        margin: timedelta = timedelta(0),
        values: Sequence[tuple[str, ...]] = (),
    ) -> list[PartitionWindow | None]:
        """The partitions whose windows meet ``[since - margin, until + margin]`` (run and catch-up ranges).

        With a key part, a partition per window (if any) and key value of ``values`` (the values the caller knows of,
        e.g. the server's partitions); without ``values``, ``[None]`` (the whole table), as for an unpartitioned
        target.
        """
        return self.shape.windows(self, since - margin, until + margin, [tuple(v) for v in values])

    @property
    def opening(self) -> datetime:
        """The start of the first window: the one holding :attr:`start` (as chmv's Dagster definitions start);
        :attr:`start` itself without a time part."""
        if self.time is None:
            return at_wall(self.first, self.zone)
        return self.time.first_start(self.first, self.zone)

    def occurrence(self, wall: datetime, moment: datetime | None) -> datetime:
        """A partition's start as the server names it (``wall``, naive: its value, or its oldest row's wall clock) as
        an instant of the calendar: the occurrence ``moment`` (an instant among its rows, aware) is in where a
        fall-back repeats that wall clock (the two ``01:00`` hours of a night in New York are two partitions), else
        the first."""
        first = at_wall(wall, self.zone)
        if moment is None or self.time is None:
            return first
        held = self.time.floor(moment, self.zone)
        return held if held.replace(tzinfo=None) == self.time.floor(first, self.zone).replace(tzinfo=None) else first

    def window_holding(self, moment: datetime) -> PartitionWindow | None:
        """The time window holding ``moment`` (an instant, or a wall clock of :attr:`zone`: its first occurrence),
        None without a time part."""
        if self.time is None:
            return None
        return self.time.window_at(self.time.floor(moment, self.zone), self.zone)

    # --- ClickHouse partitions -------------------------------------------------------------------------------------

    def key_values(self, value: str) -> tuple[str, ...]:
        """The key part of a ClickHouse partition's value (``system.parts.partition``)."""
        return key_values(self, partition_values(value, self.elements))

    def held_keys(self, values: Iterable[str]) -> list[tuple[str, ...]]:
        """The distinct key-part values of ClickHouse partitions (their ``system.parts.partition``), first seen first."""
        return list(dict.fromkeys(self.key_values(v) for v in values))

    def partition_of(self, value: str, oldest: datetime | None) -> PartitionWindow | None:
        """The partition a ClickHouse partition of the target is: its key values from its value
        (``system.parts.partition``), its window from the oldest time its rows hold (the parts' min/max index: an
        instant, exact for an hour a fall-back repeats; or a wall clock of :attr:`zone`, its first occurrence). None
        for an unpartitioned target, or a time window whose rows' time is not known."""
        return self.shape.partition_of(self, self.key_values(value) if self.keyed else (), oldest)


def _decoded(p: TargetPartitioning, key: str, name: str | None) -> PartitionWindow:
    try:
        return p.shape.decode(p, key)
    except ValueError as err:
        shape = p.describe() if p.column or p.keys else str(p.grain)
        raise PartitionKeyError(name, key, shape, p.shape.forms(p), str(err)) from err


def target_partitioning(
    project: Project, ref: ObjectRef, zone: str = "UTC", start: str = EPOCH_START
) -> TargetPartitioning:
    """The partitioning of table ``ref`` of ``project`` (unpartitioned where it is not a table): what the loaded
    project keeps per target (:meth:`chmv_assets.ddl.loader.LoadedProject.partitioning`)."""
    table = project.table(ref)
    scheme = partition_scheme(table, project.views_into(ref)) if table is not None else PartitionScheme(grain=None)
    return TargetPartitioning.of(scheme, ref, zone, start)


# --- reach -------------------------------------------------------------------------------------------------------


def window_reach(view: MaterializedView, scheme: PartitionScheme) -> timedelta:
    """How far past a partition window's end a trigger row's own time may lie and ``view`` still land the row in the
    window: the one rule by which chmv reads a window's source rows, closes a window to late writers, maps a source's
    changes onto target windows and estimates their rows.

    ``view`` computes the partition column by truncating a trigger column to a grain (``toStartOfHour(ts)``,
    ``toMonday(day)``). Where that grain lies within the partition grain (an hour within a day), every row lands in
    the window holding its own time: 0. Where it does not (a week straddling two months), a row lands in the window
    holding the start of its truncation, up to one grain before its own time: the grain (its longest span, a month
    counting 31 days). 0 as well for a target without time windows, or a partition column the MV does not truncate.
    """
    if scheme.grain is None or scheme.column is None:
        return timedelta(0)
    out = view.output(scheme.column)
    grain = out.truncation[1] if out is not None and out.truncation is not None else None
    if grain is None or Grain(grain).within(scheme.grain):
        return timedelta(0)
    return timedelta(seconds=Grain(grain).seconds)


def target_reach(
    project: Project, target: ObjectRef, scheme: PartitionScheme, trigger: ObjectRef | None = None
) -> timedelta:
    """The longest :func:`window_reach` of the MVs writing ``target`` (only those ``trigger`` sets off, if given)."""
    views = [v for v in project.views_into(target) if trigger is None or v.trigger == trigger]
    return max((window_reach(v, scheme) for v in views), default=timedelta(0))


# --- ClickHouse partitions -------------------------------------------------------------------------------------------


def partition_values(text: str, elements: int) -> tuple[str, ...]:
    """The values of a ClickHouse partition, from ``system.parts.partition``: the text itself for a PARTITION BY of one
    element (``eu``, ``202609``), else each item of the quoted tuple (``(202609,'eu')`` → ``("202609", "eu")``)."""
    if elements == 1:
        return (text,)
    body = text.strip()
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1]
    items, current, quoted, depth, i = [], [], False, 0, 0
    while i < len(body):
        char = body[i]
        if quoted:
            if char == "\\" and i + 1 < len(body):
                i += 1
                current.append(_UNESCAPE.get(body[i], body[i]))
            elif char == "'":
                quoted = False
            else:
                current.append(char)
        elif char == "'":
            quoted = True
        elif char in "([":
            depth += 1
            current.append(char)
        elif char in ")]":
            depth -= 1
            current.append(char)
        elif char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    items.append("".join(current))
    return tuple(items)


_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "b": "\b", "f": "\f", "'": "'", "\\": "\\"}


def key_values(scheme: PartitionScheme, values: Sequence[str]) -> tuple[str, ...]:
    """The key part of a partition's values (:func:`partition_values`): the items that are not the time part."""
    return tuple(values[i] for i in scheme.key_elements if i < len(values))


def partition_start(value: str, oldest: datetime | None = None) -> datetime | None:
    """The start of a ClickHouse partition from its value (``system.parts.partition``: ``202609``, ``20260915``,
    ``2026-09-15 10:00:00``), naive, in the server's time zone.

    Other spellings fall back to ``oldest``, the oldest time its rows hold (the parts' min/max index); None without.
    """
    text = value.strip().strip("'")
    if re.fullmatch(r"\d{6}", text):
        return datetime(int(text[:4]), int(text[4:6]), 1)
    if re.fullmatch(r"\d{8}", text):
        return datetime(int(text[:4]), int(text[4:6]), int(text[6:]))
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return oldest


def partition_of(
    scheme: PartitionScheme, value: str, oldest: datetime | None, zone: str = "UTC"
) -> PartitionWindow | None:
    """:meth:`TargetPartitioning.partition_of` of ``scheme`` in the calendar of ``zone``."""
    return _calendar(scheme, zone).partition_of(value, oldest)


# --- windows of a grain (its time shape's, :mod:`chmv_assets.ddl.shapes`) --------------------------------------------


def floor_to_grain(value: datetime, grain: str, zone: str = "UTC") -> datetime:
    """The start of the window of ``grain`` holding ``value`` (aware: an instant; naive: a wall clock of ``zone``, its
    first occurrence), at ``zone``'s offset."""
    return time_shape(grain).floor(value, zone)


def next_start(start: datetime, grain: str, zone: str = "UTC") -> datetime:
    """The start of the window of ``grain`` after the one starting at ``start`` (aware, or a wall clock of ``zone``)."""
    return time_shape(grain).next_start(start, zone)


def window_key(start: datetime, grain: str, zone: str = "UTC") -> str:
    """The Dagster key of the window of ``grain`` starting at ``start`` (aware)."""
    return time_shape(grain).key(start, zone)


def window_at(start: datetime, grain: str, values: Sequence[str] = (), zone: str = "UTC") -> PartitionWindow:
    """The window of ``grain`` starting at ``start`` (a boundary: aware, or a wall clock of ``zone``), with its Dagster
    key; with the key part's ``values``, the partition of that window and those values."""
    return time_shape(grain).window_at(start, zone, values)


def windows_between(
    grain: str, first_start: datetime, since: datetime, until: datetime, zone: str = "UTC"
) -> list[PartitionWindow]:
    """The windows of ``grain`` (from the one holding ``first_start``) meeting ``[since, until]``
    (:meth:`chmv_assets.ddl.shapes.TimeShape.windows_between`)."""
    return time_shape(grain).windows_between(first_start, since, until, zone)


def window_for_partition_key(
    scheme: PartitionScheme | str, key: str, zone: str = "UTC", target: str | None = None
) -> PartitionWindow:
    """:meth:`TargetPartitioning.window` of ``scheme`` (a grain names a scheme of time alone) in the calendar of
    ``zone``.

    Raises:
        PartitionKeyError: The key is not one of the scheme's, naming ``target`` and the forms it takes.
    """
    if isinstance(scheme, str):
        scheme = PartitionScheme(grain=Grain(scheme))
    return _decoded(_calendar(scheme, zone), key, target)


def _calendar(scheme: PartitionScheme, zone: str) -> TargetPartitioning:
    if isinstance(scheme, TargetPartitioning) and scheme.zone == zone:
        return scheme
    return TargetPartitioning.of(scheme, None, zone)
