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
``2026-09-01|eu`` for a window and a key, ``eu`` for a key alone: :func:`encode_key`), so the engine layer can name
and read partitions without Dagster.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from urllib.parse import unquote

from chmv_assets.ddl.grains import PARTITION_FUNCTIONS, Grain, grain_of_interval
from chmv_assets.ddl.models import MaterializedView, ObjectRef, PartitionCall, Project, Table

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
    """One partition of a target: its Dagster key, the ``[start, end)`` window of its time part (the server's wall
    clock, see :mod:`chmv_assets.engine.clock`) and the values of its key part.

    Attributes:
        key: The Dagster partition key.
        start: The window's start; None for a partition of a key alone (no time part).
        end: The window's end; None likewise.
        values: The key part's values, one per key element, as the server holds them (``("eu",)``); empty without
            a key part.
    """

    key: str
    start: datetime | None
    end: datetime | None
    values: tuple[str, ...] = ()

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


def partition_of(scheme: PartitionScheme, value: str, oldest: datetime | None) -> PartitionWindow | None:
    """The partition a ClickHouse partition of the target is: its key values from its value
    (``system.parts.partition``), its window from the oldest time its rows hold (the parts' min/max index, the
    server's wall clock). None for an unpartitioned target, or a time window whose rows' time is not known."""
    if not scheme.partitioned:
        return None
    values = key_values(scheme, partition_values(value, scheme.elements))
    if scheme.grain is None:
        return keyed_window(values)
    if oldest is None:
        return None
    return window_at(floor_to_grain(oldest, scheme.grain), scheme.grain, values)


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


# --- windows -----------------------------------------------------------------------------------------------------


def floor_to_grain(value: datetime, grain: str) -> datetime:
    """The start of the partition of ``grain`` that holds ``value``."""
    return Grain(grain).floor(value)


def next_start(start: datetime, grain: str) -> datetime:
    """The start of the partition after the one starting at ``start``."""
    return Grain(grain).next_start(start)


def window_at(start: datetime, grain: str, values: Sequence[str] = ()) -> PartitionWindow:
    """The window of ``grain`` starting at ``start`` (a partition boundary), with its Dagster key; with the key part's
    ``values``, the partition of that window and those values."""
    key = start.strftime(KEY_FORMATS[Grain(grain)])
    if values:
        key = f"{key}{KEY_DELIMITER}{encode_key(values)}"
    return PartitionWindow(key=key, start=start, end=next_start(start, grain), values=tuple(values))


def keyed_window(values: Sequence[str]) -> PartitionWindow:
    """The partition of a key alone with these values (no time part)."""
    return PartitionWindow(key=encode_key(values), start=None, end=None, values=tuple(values))


def windows_between(grain: str, first_start: datetime, since: datetime, until: datetime) -> list[PartitionWindow]:
    """The partitions of ``grain`` (none before ``first_start``) whose windows intersect ``[since, until]``.

    As in Dagster's time-window partitions, the first partition starts at the first boundary at or after
    ``first_start`` (a monthly ``partition_start = "2026-08-15"`` starts at ``2026-09-01``).
    """
    first = floor_to_grain(first_start, grain)
    if first < first_start:
        first = next_start(first, grain)
    cursor = floor_to_grain(max(since, first), grain)
    out = []
    while cursor <= until:
        out.append(window_at(cursor, grain))
        cursor = next_start(cursor, grain)
    return out


def with_values(windows: Sequence[PartitionWindow], keys: Sequence[Sequence[str]]) -> list[PartitionWindow]:
    """Each time window once per key-part values (a time × key target's partitions of those windows)."""
    return [window_at(w.start, _grain_of(w), k) if w.start is not None else w for w in windows for k in keys]


def _grain_of(window: PartitionWindow) -> Grain:
    """The grain of a time window, from its length and key format (the windows of one scheme share it)."""
    assert window.start is not None and window.end is not None
    for grain in Grain:
        if grain.floor(window.start) == window.start and grain.next_start(window.start) == window.end:
            return grain
    raise ValueError(f"{window.key} is not a window of any grain")


def window_for_partition_key(scheme: PartitionScheme | str, key: str) -> PartitionWindow:
    """The partition of a Dagster partition key of ``scheme`` (``2026-09-01``, ``2026-09-01-13:00``,
    ``2026-09-01|eu``, ``eu``); a grain names a scheme of time alone.

    Raises:
        ValueError: The key is not in the scheme's format.
    """
    if isinstance(scheme, str):
        scheme = PartitionScheme(grain=Grain(scheme))
    if scheme.grain is None:
        if not scheme.keyed:
            raise ValueError(f"{key}: the target is unpartitioned")
        return keyed_window(_checked(scheme, decode_key(key), key))
    time_key, delimiter, rest = key.partition(KEY_DELIMITER)
    if scheme.keyed and not delimiter:
        raise ValueError(f"{key} names a window without the key's values (expected <window>{KEY_DELIMITER}<values>)")
    if delimiter and not scheme.keyed:
        raise ValueError(f"{key} names key values: the target has no key part (expected a window)")
    start = datetime.strptime(time_key, KEY_FORMATS[scheme.grain])
    if floor_to_grain(start, scheme.grain) != start:
        raise ValueError(f"{time_key} is not the start of a {scheme.grain} partition")
    window = window_at(start, scheme.grain)
    return replace(window, key=key, values=_checked(scheme, decode_key(rest), key)) if scheme.keyed else window


def _checked(scheme: PartitionScheme, values: tuple[str, ...], key: str) -> tuple[str, ...]:
    if len(values) != len(scheme.keys):
        raise ValueError(
            f"{key} names {len(values)} value(s); the key part {', '.join(scheme.keys)} has "
            f"{len(scheme.keys)} (values joined by {VALUES_DELIMITER!r})"
        )
    return values
