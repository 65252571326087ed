"""How a target table is partitioned, derived from its parsed PARTITION BY (no Dagster, no client).

A PARTITION BY has a **time part** (an element that truncates a time column to a grain: ``toYYYYMM(day)``,
``toMonday(d)``, ``toStartOfInterval(ts, INTERVAL 6 HOUR)``, ``intDiv(toUnixTimestamp(ts), 3600)``) and a **key
part** (every other element: ``region`` of ``(toYYYYMM(day), region)``, ``tenant`` of ``PARTITION BY tenant``):

- time alone: time-window partitions (one per window of the grain);
- time and key: one partition per window and value of the key (Dagster: a multi-partitions definition of the
  windows and of the key's values the server holds);
- key alone: one partition per value of the key the server holds (Dagster: dynamic partitions).

The Dagster partitions definitions are built from this in ``chmv_assets.orchestration.partitions``; the windows here
use the same keys (``2026-09-01`` for days, weeks, months, quarters and years, ``2026-09-01-13:00`` below a day,
``2026-11-01-01:00-0500`` for the second of a wall-clock hour a fall-back repeats, ``2026-09-01|eu`` for a window and a
key, ``eu`` for a key alone: :func:`encode_key`), so the engine layer can name and read partitions without Dagster.

A window's bounds are **instants**: aware datetimes at the UTC offset of the partition calendar's zone (``timezone``
in chmv.toml), so the wall clock Dagster names is ``start.replace(tzinfo=None)`` and the offset says which occurrence
of a repeated wall time it is (``2026-11-01 01:00-04:00`` and ``01:00-05:00`` in New York). Windows of a day or more
are calendar spans (a day of 23 or 25 hours across a DST change); windows below a day are the instants at which the
wall clock meets the grain, as ClickHouse's ``toStartOfHour``/``toStartOfInterval`` compute them: an hour a fall-back
repeats is two windows, an hour a spring-forward skips none. :func:`window_instant` turns a bound into the instant of
the zone a column computes in, for SQL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from urllib.parse import unquote
from zoneinfo import ZoneInfoNotFoundError

from clickhouse_connect.driver.tzutil import resolve_zone

from chmv_assets.ddl.grains import PARTITION_FUNCTIONS, Grain, grain_of_interval
from chmv_assets.ddl.models import MaterializedView, ObjectRef, PartitionCall, Project, Table
from chmv_assets.errors import PartitionKeyError

#: Dagster's partition key format per grain.
KEY_FORMATS = {grain: grain.key_format for grain in Grain if grain.is_partition_grain}
#: Between the time part's key and the key part's in the key of a partition that has both (Dagster's multi-partition
#: key delimiter: the time dimension's name sorts first, see ``chmv_assets.orchestration.partitions``).
KEY_DELIMITER = "|"
#: Between the values of a key part of several elements (``(tenant, region)`` → ``acme/eu``).
VALUES_DELIMITER = "/"
#: Characters a key value cannot carry as they are in a Dagster partition key (the delimiters, what Dagster refuses in
#: a multi-partition key, the escape itself): written ``%XX``.
_ESCAPED = frozenset("%|,[]/")
#: Functions a time column goes through before ``intDiv`` counts its seconds (``intDiv(toUnixTimestamp(ts), 3600)``).
_UNIX_SECONDS = frozenset({"toUnixTimestamp", "toUInt32", "toInt32", "toUInt64", "toInt64"})


@dataclass(frozen=True)
class PartitionWindow:
    """One partition of a target: its Dagster key, the ``[start, end)`` window of its time part (instants at the
    partition calendar's UTC offset: its wall clock and which occurrence of it, see the module's docstring) and the
    values of its key part.

    Attributes:
        key: The Dagster partition key.
        start: The window's start, aware; None for a partition of a key alone (no time part).
        end: The window's end, aware; None likewise.
        values: The key part's values, one per key element, as the server holds them (``("eu",)``); empty without
            a key part.
    """

    key: str
    start: datetime | None
    end: datetime | None
    values: tuple[str, ...] = ()

    @property
    def wall_start(self) -> datetime | None:
        """The start's wall clock (naive): what a time the server gives as its wall clock (``now``, a part's oldest
        row) is compared with."""
        return self.start.replace(tzinfo=None) if self.start is not None else None

    @property
    def wall_end(self) -> datetime | None:
        """The end's wall clock (naive); where a fall-back makes it no later than the start's (the first of a
        repeated hour ends at the second's start), the start's plus the window's length."""
        if self.start is None or self.end is None:
            return None
        start, end = self.start.replace(tzinfo=None), self.end.replace(tzinfo=None)
        return end if end > start else start + (self.end - self.start)

    @property
    def timed(self) -> bool:
        """The partition has a time window (a time part)."""
        return self.start is not None

    @property
    def keyed(self) -> bool:
        """The partition has key values (a key part)."""
        return bool(self.values)

    def time_window(self) -> PartitionWindow:
        """The window of the time part alone (keyed by it): what coverage and the sweep measure time on."""
        if not self.keyed:
            return self
        return PartitionWindow(key=self.key.partition(KEY_DELIMITER)[0], start=self.start, end=self.end)


def time_of(window: PartitionWindow | None) -> PartitionWindow | None:
    """The time window of ``window`` (its time part), None for the whole table or a partition of a key alone."""
    return window.time_window() if window is not None and window.timed else None


@dataclass(frozen=True)
class PartitionScheme:
    """How a target table is partitioned, as far as Dagster is concerned.

    Attributes:
        grain: The time part's grain (``hour``, ``day``, ``week``, ``month``, ``6 hour``…); None without a time part.
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
    def partitioned(self) -> bool:
        """The target is partitioned (by time, by a key or both): it is rebuilt, checked and swept per partition."""
        return self.grain is not None or bool(self.keys)

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
    """Derive the Dagster partitioning of a target from its parsed PARTITION BY and the MVs that write it.

    The time part is the first element that truncates a time column to a grain Dagster can name (and that no MV
    computes with an aggregate); every other element is the key part. A target is unpartitioned only without a
    PARTITION BY (or with ``tuple()``).
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
    """The grain of a PARTITION BY element that truncates a time column (None for anything else).

    ``toYYYYMM``/``toStartOfMonth`` (month), ``toDate``/``toYYYYMMDD``/``toStartOfDay``/a bare ``Date`` (day),
    ``toStartOfHour`` and the minute truncations, ``toMonday``/``toStartOfWeek(c, <a Monday mode>)`` (week),
    ``toStartOfQuarter``, ``toStartOfYear``/``toYear``, ``toStartOfInterval(c, INTERVAL n unit)`` where a grain has
    those windows, ``intDiv(toUnixTimestamp(c), seconds)`` where a grain of a day or less is that long.
    """
    if call is None:
        return None
    column = table.column(call.column)
    if column is None:
        return None
    if not column.type.strip():  # an MV's inner table: its columns are the SELECT's, of types the DDL does not say
        if call.function is None:  # a bare column of unknown type: its values are the key
            return None
    elif not column.data_type.is_time:
        return None
    elif call.function is None:
        return Grain.DAY if column.data_type.is_date else None
    if call.inner is not None:
        if call.function != "intDiv" or call.inner not in _UNIX_SECONDS or len(call.arguments) != 1:
            return None
        seconds = _integer(call.arguments[0])
        return next((g for g in Grain if g.fixed and g.seconds == seconds), None)
    if not call.arguments:
        return PARTITION_FUNCTIONS.get(call.function)
    if call.function == "toStartOfWeek" and len(call.arguments) == 1:
        mode = _integer(call.arguments[0])
        return Grain.WEEK if mode is not None and mode % 2 == 1 else None  # odd modes start weeks on Monday
    if call.function == "toStartOfInterval" and len(call.arguments) == 1:
        count, _, unit = call.arguments[0].partition(" ")
        return grain_of_interval(int(count), unit) if count.isdigit() else None
    return None


def _looks_like_time(call: PartitionCall | None, table: Table) -> bool:
    """A key element that reads a time column through a function (``toStartOfWeek(d)``, a 2-day interval)."""
    column = table.column(call.column) if call is not None else None
    return call is not None and call.function is not None and column is not None and column.data_type.is_time


def _integer(text: str) -> int | None:
    return int(text) if text.isdigit() else None


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


# --- keys --------------------------------------------------------------------------------------------------------


def encode_key(values: Sequence[str]) -> str:
    """The Dagster key of key-part values: each value as it is, but for ``%|,[]/``, control characters and ``...``
    (written ``%XX``), joined by ``/``; an empty value is ``%``. :func:`decode_key` reads it back."""
    return VALUES_DELIMITER.join(_escape(v) for v in values)


def _escape(value: str) -> str:
    if value == "":
        return "%"
    text = "".join(f"%{ord(c):02X}" if c in _ESCAPED or ord(c) < 32 or ord(c) == 127 else c for c in value)
    return text.replace(".", "%2E") if "..." in text else text  # Dagster refuses "..." in a key


def decode_key(text: str) -> tuple[str, ...]:
    """The key-part values of a Dagster key written by :func:`encode_key`."""
    return tuple("" if part == "%" else unquote(part) for part in text.split(VALUES_DELIMITER))


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


def partition_of(
    scheme: PartitionScheme, value: str, oldest: datetime | None, zone: str = "UTC"
) -> PartitionWindow | None:
    """The partition a ClickHouse partition of the target is: its key values from its value
    (``system.parts.partition``), its window from the oldest time its rows hold (the parts' min/max index: the wall
    clock of ``zone``, the partition calendar's, or an instant). None for an unpartitioned target, or a time window
    whose rows' time is not known."""
    if not scheme.partitioned:
        return None
    values = key_values(scheme, partition_values(value, scheme.elements))
    if scheme.grain is None:
        return keyed_window(values)
    if oldest is None:
        return None
    return window_at(floor_to_grain(oldest, scheme.grain, zone), scheme.grain, values, zone)


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


# --- instants ----------------------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def zone_info(zone: str) -> tzinfo:
    """The ``tzinfo`` of a zone name as ClickHouse spells it (an IANA name, ``UTC`` and its aliases, or
    ``Fixed/UTC+05:30:00``)."""
    try:
        return resolve_zone(zone)
    except ZoneInfoNotFoundError as err:
        raise ValueError(f"{zone!r} is not a time zone (an IANA name: 'UTC', 'America/New_York')") from err


def in_zone(instant: datetime, zone: str) -> datetime:
    """``instant`` (aware) at the UTC offset ``zone`` has then: the wall clock of ``zone`` and its offset."""
    local = instant.astimezone(UTC).astimezone(zone_info(zone))  # through UTC: a wall clock a gap skips moves on
    return local.replace(tzinfo=timezone(local.utcoffset() or timedelta(0)), fold=0)


def at_wall(wall: datetime, zone: str, fold: int = 0) -> datetime:
    """The instant the wall clock ``wall`` (naive) of ``zone`` names, at its UTC offset (:func:`in_zone`): the first
    occurrence of a time a fall-back repeats (``fold=1``: the second); a time a spring-forward skips is read at the
    offset before it (``02:30`` in New York on 2026-03-08 is ``03:30-04:00``), as ClickHouse reads it."""
    return in_zone(wall.replace(tzinfo=zone_info(zone), fold=fold), zone)


def instant(value: datetime, zone: str, fold: int = 0) -> datetime:
    """An aware value as it is (at ``zone``'s offset), a naive one as a wall clock of ``zone`` (:func:`at_wall`)."""
    return in_zone(value, zone) if value.tzinfo is not None else at_wall(value, zone, fold)


def window_instant(bound: datetime, zone: str) -> datetime:
    """A window bound (:class:`PartitionWindow`) as the instant of the zone a column computes in: the bound itself
    where that zone has the same offset at the same wall clock (the calendar is that zone: the occurrence is kept),
    else the bound's wall clock read in ``zone``. A naive bound is a wall clock of ``zone``."""
    if bound.tzinfo is None:
        return at_wall(bound, zone)
    wall = bound.replace(tzinfo=None)
    offset = bound.utcoffset()
    for fold in (0, 1):
        candidate = at_wall(wall, zone, fold)
        if candidate.utcoffset() == offset and candidate.replace(tzinfo=None) == wall:
            return candidate
    return at_wall(wall, zone)


def repeated(start: datetime, zone: str) -> bool:
    """``start`` (aware) is the second occurrence of a wall-clock time a fall-back repeats in ``zone``."""
    return at_wall(in_zone(start, zone).replace(tzinfo=None), zone) != start


# --- windows -----------------------------------------------------------------------------------------------------


def floor_to_grain(value: datetime, grain: str, zone: str = "UTC") -> datetime:
    """The start of the partition of ``grain`` that holds ``value`` (aware: an instant; naive: a wall clock of
    ``zone``, its first occurrence), at ``zone``'s offset."""
    grain = Grain(grain)
    moment = instant(value, zone)
    wall = Grain(grain).floor(moment.replace(tzinfo=None))
    candidates = [at_wall(wall, zone, fold) for fold in (0, 1)]
    return max((c for c in candidates if c <= moment), default=candidates[0])


def next_start(start: datetime, grain: str, zone: str = "UTC") -> datetime:
    """The start of the partition after the one starting at ``start`` (aware, or a wall clock of ``zone``).

    From a day up, the next calendar boundary; below a day, the next instant at which the wall clock meets the grain
    (the second ``01:00`` after the first on a fall-back night, ``03:00`` after ``01:00`` on a spring-forward night).
    """
    grain = Grain(grain)
    begin = instant(start, zone)
    wall = begin.replace(tzinfo=None)
    following = at_wall(grain.next_start(grain.floor(wall)), zone)
    if grain.order >= Grain.DAY.order or (following - begin) == timedelta(seconds=grain.seconds):
        return following
    # an offset change lies between: the nearest instant after ``begin`` whose wall clock is on the grain
    step = timedelta(seconds=grain.seconds)
    reach = 4 * 3600 // grain.seconds + 1  # offsets change by less than 4 hours
    candidates = (
        at_wall(grain.floor(wall) + step * k, zone, fold) for k in range(-reach, reach + 1) for fold in (0, 1)
    )
    return min((c for c in candidates if c > begin), default=following)


def window_key(start: datetime, grain: str, zone: str = "UTC") -> str:
    """The Dagster key of the window of ``grain`` starting at ``start`` (aware): its wall clock in Dagster's format,
    and, below a day, the UTC offset after it where a fall-back repeats that wall clock and this is the second
    (``2026-11-01-01:00-0500``, Dagster's ``dst_safe_strftime``; windows of several hours never start in a repeated
    hour)."""
    grain = Grain(grain)
    fmt = KEY_FORMATS[grain]
    local = in_zone(start, zone)
    if grain.seconds <= Grain.HOUR.seconds and repeated(start, zone):
        fmt += "%z"
    return local.strftime(fmt)


def window_at(start: datetime, grain: str, values: Sequence[str] = (), zone: str = "UTC") -> PartitionWindow:
    """The window of ``grain`` starting at ``start`` (a partition boundary: aware, or a wall clock of ``zone``), with
    its Dagster key; with the key part's ``values``, the partition of that window and those values."""
    begin = instant(start, zone)
    key = window_key(begin, grain, zone)
    if values:
        key = f"{key}{KEY_DELIMITER}{encode_key(values)}"
    return PartitionWindow(key=key, start=begin, end=next_start(begin, grain, zone), values=tuple(values))


def keyed_window(values: Sequence[str]) -> PartitionWindow:
    """The partition of a key alone with these values (no time part)."""
    return PartitionWindow(key=encode_key(values), start=None, end=None, values=tuple(values))


def windows_between(
    grain: str, first_start: datetime, since: datetime, until: datetime, zone: str = "UTC"
) -> list[PartitionWindow]:
    """The partitions of ``grain`` (none before ``first_start``) whose windows intersect ``[since, until]``.

    Naive values are wall clocks of ``zone``: ``since`` its first occurrence, ``until`` its last, so a wall-clock
    range meeting an hour a fall-back repeats covers both windows of it. The first partition is the one holding
    ``first_start`` (a monthly ``partition_start = "2026-08-15"`` starts at ``2026-08-01``, a yearly one at
    ``2026-01-01``), as in chmv's Dagster definitions (:func:`chmv_assets.orchestration.partitions.partitions_definition`).
    """
    first = floor_to_grain(instant(first_start, zone), grain, zone)
    low, high = instant(since, zone), instant(until, zone, fold=1)
    cursor = floor_to_grain(max(low, first), grain, zone)
    out = []
    while cursor <= high:
        window = window_at(cursor, grain, zone=zone)
        out.append(window)
        cursor = window.end  # type: ignore[assignment]
    return out


def with_values(windows: Sequence[PartitionWindow], keys: Sequence[Sequence[str]]) -> list[PartitionWindow]:
    """Each time window once per key-part values (a time × key target's partitions of those windows)."""
    return [
        replace(w, key=f"{w.key}{KEY_DELIMITER}{encode_key(k)}", values=tuple(k)) if w.start is not None else w
        for w in windows
        for k in keys
    ]


def window_for_partition_key(
    scheme: PartitionScheme | str, key: str, zone: str = "UTC", target: str | None = None
) -> PartitionWindow:
    """The partition of a Dagster partition key of ``scheme`` (``2026-09-01``, ``2026-09-01-13:00``,
    ``2026-11-01-01:00-0500``, ``2026-09-01|eu``, ``eu``) in the partition calendar of ``zone``; a grain names a
    scheme of time alone. The one decoder of keys: Dagster's windows are the same (``tests/unit/orchestration``).

    Raises:
        PartitionKeyError: The key is not one of the scheme's, naming ``target`` and the forms it takes.
    """
    if isinstance(scheme, str):
        scheme = PartitionScheme(grain=Grain(scheme))
    try:
        return _window_for_key(scheme, key, zone)
    except ValueError as err:
        shape = scheme.describe() if scheme.column or scheme.keys else str(scheme.grain)
        raise PartitionKeyError(target, key, shape, _forms(scheme), str(err)) from err


def _window_for_key(scheme: PartitionScheme, key: str, zone: str) -> PartitionWindow:
    if scheme.grain is None:
        if not scheme.keyed:
            raise ValueError("the target is unpartitioned")
        return keyed_window(_checked(scheme, decode_key(key), key))
    time_key, delimiter, rest = key.partition(KEY_DELIMITER)
    if scheme.keyed and not delimiter:
        raise ValueError(f"it names a window without the key's values (expected <window>{KEY_DELIMITER}<values>)")
    if delimiter and not scheme.keyed:
        raise ValueError("it names key values: the target has no key part (expected a window)")
    start = _decode_time(time_key, scheme.grain, zone)
    window = window_at(start, scheme.grain, zone=zone)
    if window.key != time_key:
        raise ValueError(f"no {scheme.grain} window starts there in {zone}; the nearest: {window.key}")
    return replace(window, key=key, values=_checked(scheme, decode_key(rest), key)) if scheme.keyed else window


def _decode_time(text: str, grain: Grain, zone: str) -> datetime:
    """The instant a window's key names: its wall clock in ``zone``, at the offset it carries if it carries one (the
    second of a repeated hour)."""
    fmt = KEY_FORMATS[grain]
    try:
        wall = datetime.strptime(text, fmt)
    except ValueError:
        if grain.seconds > Grain.HOUR.seconds:
            raise ValueError("not a date in the format of the windows' keys") from None
        try:
            aware = datetime.strptime(text, fmt + "%z")
        except ValueError:
            raise ValueError("not a window's start in the format of the windows' keys") from None
        found = in_zone(aware, zone)
        if found.replace(tzinfo=None) != aware.replace(tzinfo=None):
            raise ValueError(f"{zone} is never at UTC{aware:%z} at that wall clock") from None
        return found
    start = floor_to_grain(wall, grain, zone)
    if start.replace(tzinfo=None) != wall:
        raise ValueError(
            f"no {grain} window starts there in {zone}; the one holding it: {window_key(start, grain, zone)}"
        )
    return start


def _forms(scheme: PartitionScheme) -> str:
    """The forms a key of ``scheme`` takes, with examples."""
    if scheme.grain is None:
        return f"the key's values joined by {VALUES_DELIMITER!r} (acme, acme/eu)"
    grain = Grain(scheme.grain)
    if grain.seconds <= Grain.HOUR.seconds:
        window = (
            "a window's start, YYYY-MM-DD-HH:MM (2026-09-01-13:00); the second of a wall-clock hour a fall-back "
            "repeats carries its UTC offset (2026-11-01-01:00-0500)"
        )
    elif grain.seconds < Grain.DAY.seconds:
        window = "a window's start, YYYY-MM-DD-HH:MM (2026-09-01-18:00)"
    else:
        window = f"a window's first day, YYYY-MM-DD ({'2026-08-31' if grain is Grain.WEEK else '2026-09-01'})"
    return f"{window}, then {KEY_DELIMITER}<key values> (2026-09-01|eu)" if scheme.keyed else window


def _checked(scheme: PartitionScheme, values: tuple[str, ...], key: str) -> tuple[str, ...]:
    if len(values) != len(scheme.keys):
        raise ValueError(
            f"{key} names {len(values)} value(s); the key part {', '.join(scheme.keys)} has "
            f"{len(scheme.keys)} (values joined by {VALUES_DELIMITER!r})"
        )
    return values
