"""Partition shapes: one registered class per shape a PARTITION BY can have (no Dagster, no client).

**Time shapes** (:class:`TimeShape`): hour, day, week, month, quarter, year, an interval of N minutes or hours, and
the ClickHouse functions naming a fixed interval (``toStartOfMinute``, ``toStartOfFiveMinutes``…). Each class says
which PARTITION BY elements it reads (:meth:`TimeShape.read`: ``toYYYYMM(c)``, ``toStartOfInterval(c, INTERVAL 6
HOUR)``), the cron schedule Dagster names its windows by, and owns the windows' arithmetic in a zone's calendar
(:meth:`~TimeShape.floor`, :meth:`~TimeShape.next_start`) and the codec of their keys (:meth:`~TimeShape.key`,
:meth:`~TimeShape.start_of`). The registry (:func:`register`) asks each class in turn: the first that reads an element
is its shape; :func:`time_shape` finds the class of a grain.

**Whole shapes** (:class:`PartitionShape`): unpartitioned, time windows alone, a key alone, time × key. Each owns the
codec of a whole partition key (``2026-09-01|eu``, ``acme/eu``), the partitions of a range (run and catch-up ranges),
the partition a ClickHouse partition is, the names Dagster's ops and jobs get, and the SQL form of its predicate
(given the values the SQL layer writes: :class:`PartitionSql`). :func:`whole_shape` picks one by what the PARTITION BY
has.

Adding a shape is one class here and one test row (docs/partitions.md, "Adding a partition shape").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import ClassVar, Protocol

from chmv_assets.ddl.grains import Grain, grain_of_interval
from chmv_assets.ddl.instants import at_wall, in_zone, instant, repeated
from chmv_assets.ddl.models import ObjectRef, PartitionCall
from chmv_assets.ddl.names import safe_name
from chmv_assets.ddl.windows import (
    KEY_DELIMITER,
    VALUES_DELIMITER,
    PartitionWindow,
    decode_key,
    encode_key,
    keyed_window,
    with_values,
)

#: Functions a time column goes through before ``intDiv`` counts its seconds (``intDiv(toUnixTimestamp(ts), 3600)``).
UNIX_SECONDS = frozenset({"toUnixTimestamp", "toUInt32", "toInt32", "toUInt64", "toInt64"})

# --- time shapes -------------------------------------------------------------------------------------------------

_TIME_SHAPES: list[type[TimeShape]] = []


def register(cls: type[TimeShape]) -> type[TimeShape]:
    """Register a time shape: :func:`read_time_shape` asks it after the classes registered before it."""
    _TIME_SHAPES.append(cls)
    return cls


class TimeShape:
    """Windows of one grain in a zone's calendar, as a PARTITION BY element names them (a day or longer: calendar
    spans, a day of 23 or 25 hours across a DST change).

    Class attributes:
        grain: The windows' grain (their length, the SQL interval, how grains nest: :class:`Grain`).
        cron: Dagster's cron schedule of the windows' starts.
        family: The name of the ops of targets of these windows (``rebuild_<family>_targets``).
        functions: PARTITION BY functions of one time column (and nothing else) that name these windows.
        example: A key, for messages.
    """

    grain: Grain
    cron: str
    family: ClassVar[str] = "timewindow"
    functions: ClassVar[tuple[str, ...]] = ()
    example: ClassVar[str] = "2026-09-01"

    @classmethod
    def read(cls, call: PartitionCall, is_date: bool) -> TimeShape | None:
        """The shape of a PARTITION BY element on a time column (``is_date``: a ``Date``/``Date32`` column), if this
        class names its windows."""
        if call.function in cls.functions and not call.arguments and call.inner is None:
            return cls()
        return None

    def __eq__(self, other: object) -> bool:  # a shape is its windows
        return isinstance(other, TimeShape) and other.grain == self.grain

    def __hash__(self) -> int:
        return hash(self.grain)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.grain.value!r})"

    @property
    def key_format(self) -> str:
        """``strftime`` format of the windows' keys (Dagster's)."""
        return self.grain.key_format

    # window arithmetic

    def floor(self, value: datetime, zone: str) -> datetime:
        """The start of the window holding ``value`` (aware: an instant; naive: a wall clock of ``zone``, its first
        occurrence), at ``zone``'s offset."""
        moment = instant(value, zone)
        wall = self.grain.floor(moment.replace(tzinfo=None))
        candidates = [at_wall(wall, zone, fold) for fold in (0, 1)]
        return max((c for c in candidates if c <= moment), default=candidates[0])

    def next_start(self, start: datetime, zone: str) -> datetime:
        """The start of the window after the one starting at ``start`` (aware, or a wall clock of ``zone``): the next
        calendar boundary."""
        wall = instant(start, zone).replace(tzinfo=None)
        return at_wall(self.grain.next_start(self.grain.floor(wall)), zone)

    def window_at(self, start: datetime, zone: str, values: Sequence[str] = ()) -> PartitionWindow:
        """The window starting at ``start`` (a boundary: aware, or a wall clock of ``zone``) with its key; with the
        key part's ``values``, the partition of that window and those values."""
        begin = instant(start, zone)
        key = self.key(begin, zone)
        if values:
            key = f"{key}{KEY_DELIMITER}{encode_key(values)}"
        return PartitionWindow(key=key, start=begin, end=self.next_start(begin, zone), values=tuple(values))

    def first_start(self, first_start: datetime, zone: str) -> datetime:
        """The start of the first window: the one holding ``first_start`` (aware, or a wall clock of ``zone``), as
        chmv's Dagster definitions start (a monthly ``partition_start = "2026-08-15"`` at ``2026-08-01``, a yearly
        one at ``2026-01-01``: the rows from ``partition_start`` on are in partitions the UI can materialize)."""
        return self.floor(instant(first_start, zone), zone)

    def windows_between(
        self, first_start: datetime, since: datetime, until: datetime, zone: str
    ) -> list[PartitionWindow]:
        """The windows (from the one holding ``first_start``, :meth:`first_start`) meeting ``[since, until]``. Naive
        values are wall clocks of ``zone``: ``since`` its first occurrence, ``until`` its last, so a wall-clock range
        meeting an hour a fall-back repeats covers both windows of it."""
        first = self.first_start(first_start, zone)
        low, high = instant(since, zone), instant(until, zone, fold=1)
        cursor = self.floor(max(low, first), zone)
        out = []
        while cursor <= high:
            window = self.window_at(cursor, zone)
            out.append(window)
            assert window.end is not None
            cursor = window.end
        return out

    # key codec

    def key(self, start: datetime, zone: str) -> str:
        """The key of the window starting at ``start`` (aware): its wall clock in :attr:`key_format`."""
        return in_zone(start, zone).strftime(self.key_format)

    def start_of(self, text: str, zone: str) -> datetime:
        """The start a window's key names, at ``zone``'s offset.

        Raises:
            ValueError: Not a key of these windows in ``zone``, saying why.
        """
        try:
            wall = datetime.strptime(text, self.key_format)
        except ValueError:
            raise ValueError("not a date in the format of the windows' keys") from None
        return self._on_boundary(wall, zone)

    def _on_boundary(self, wall: datetime, zone: str) -> datetime:
        start = self.floor(wall, zone)
        if start.replace(tzinfo=None) != wall:
            raise ValueError(
                f"no {self.grain} window starts there in {zone}; the one holding it: {self.key(start, zone)}"
            )
        return start

    def forms(self) -> str:
        """The form of the windows' keys, with an example."""
        return f"a window's first day, YYYY-MM-DD ({self.example})"


class SubDayShape(TimeShape):
    """Windows shorter than a day: the instants at which the wall clock meets the grain, as ClickHouse's
    ``toStartOfHour``/``toStartOfInterval`` compute them: an hour a fall-back repeats is two windows (the second keyed
    with its UTC offset, ``2026-11-01-01:00-0500``, as Dagster's ``dst_safe_strftime`` keys it), an hour a
    spring-forward skips none; windows of several hours follow the wall clock."""

    example: ClassVar[str] = "2026-09-01-13:00"

    def next_start(self, start: datetime, zone: str) -> datetime:
        """The next instant after ``start`` at which the wall clock is on the grain (the second ``01:00`` after the
        first on a fall-back night, ``03:00`` after ``01:00`` on a spring-forward night)."""
        grain = self.grain
        begin = instant(start, zone)
        wall = begin.replace(tzinfo=None)
        following = at_wall(grain.next_start(grain.floor(wall)), zone)
        if (following - begin) == timedelta(seconds=grain.seconds):
            return following
        # an offset change lies between: the nearest instant after ``begin`` whose wall clock is on the grain
        step = timedelta(seconds=grain.seconds)
        reach = 4 * 3600 // grain.seconds + 1  # offsets change by less than 4 hours
        candidates = (
            at_wall(grain.floor(wall) + step * k, zone, fold) for k in range(-reach, reach + 1) for fold in (0, 1)
        )
        return min((c for c in candidates if c > begin), default=following)

    def key(self, start: datetime, zone: str) -> str:
        """The wall clock, and the UTC offset after it where a fall-back repeats it and this is the second (windows of
        several hours never start in a repeated hour)."""
        fmt = self.key_format
        if self.grain.seconds <= Grain.HOUR.seconds and repeated(start, zone):
            fmt += "%z"
        return in_zone(start, zone).strftime(fmt)

    def start_of(self, text: str, zone: str) -> datetime:
        try:
            wall = datetime.strptime(text, self.key_format)
        except ValueError:
            if self.grain.seconds > Grain.HOUR.seconds:
                raise ValueError("not a date in the format of the windows' keys") from None
            try:
                aware = datetime.strptime(text, self.key_format + "%z")
            except ValueError:
                raise ValueError("not a window's start in the format of the windows' keys") from None
            found = in_zone(aware, zone)
            if found.replace(tzinfo=None) != aware.replace(tzinfo=None):
                raise ValueError(f"{zone} is never at UTC{aware:%z} at that wall clock") from None
            return found
        return self._on_boundary(wall, zone)

    def forms(self) -> str:
        if self.grain.seconds <= Grain.HOUR.seconds:
            return (
                "a window's start, YYYY-MM-DD-HH:MM (2026-09-01-13:00); the second of a wall-clock hour a fall-back "
                "repeats carries its UTC offset (2026-11-01-01:00-0500)"
            )
        return "a window's start, YYYY-MM-DD-HH:MM (2026-09-01-18:00)"


@register
class Hour(SubDayShape):
    """``toStartOfHour(c)``."""

    grain = Grain.HOUR
    cron = "0 * * * *"
    family = "hourly"
    functions = ("toStartOfHour",)


@register
class Day(TimeShape):
    """``toDate(c)``, ``toYYYYMMDD(c)``, ``toStartOfDay(c)``, a bare ``Date`` column."""

    grain = Grain.DAY
    cron = "0 0 * * *"
    family = "daily"
    functions = ("toDate", "toDate32", "toYYYYMMDD", "toStartOfDay")

    @classmethod
    def read(cls, call: PartitionCall, is_date: bool) -> TimeShape | None:
        if call.function is None:
            return cls() if is_date else None
        return super().read(call, is_date)


@register
class Week(TimeShape):
    """``toMonday(c)``, ``toStartOfWeek(c, <a mode starting weeks on Monday>)``: weeks from Monday."""

    grain = Grain.WEEK
    cron = "0 0 * * 1"
    family = "weekly"
    functions = ("toMonday",)
    example = "2026-08-31"

    @classmethod
    def read(cls, call: PartitionCall, is_date: bool) -> TimeShape | None:
        if call.function == "toStartOfWeek" and len(call.arguments) == 1 and call.inner is None:
            mode = call.arguments[0]
            return cls() if mode.isdigit() and int(mode) % 2 == 1 else None  # odd modes start weeks on Monday
        return super().read(call, is_date)


@register
class Month(TimeShape):
    """``toYYYYMM(c)``, ``toStartOfMonth(c)``."""

    grain = Grain.MONTH
    cron = "0 0 1 * *"
    family = "monthly"
    functions = ("toYYYYMM", "toStartOfMonth")


@register
class Quarter(TimeShape):
    """``toStartOfQuarter(c)``."""

    grain = Grain.QUARTER
    cron = "0 0 1 */3 *"
    functions = ("toStartOfQuarter",)


@register
class Year(TimeShape):
    """``toStartOfYear(c)``, ``toYear(c)``."""

    grain = Grain.YEAR
    cron = "0 0 1 1 *"
    functions = ("toStartOfYear", "toYear")


@register
class Interval(SubDayShape):
    """``toStartOfInterval(c, INTERVAL n unit)`` and ``intDiv(toUnixTimestamp(c), seconds)``: windows of n minutes or
    hours that a day holds a whole number of (1, 5, 10, 15, 30 minutes; 1, 2, 3, 4, 6, 8, 12 hours); an interval
    another class names (``INTERVAL 1 WEEK``, ``3 MONTH``, ``86400`` seconds) is that class's shape."""

    def __init__(self, grain: Grain) -> None:
        if not grain.fixed or grain is Grain.DAY:
            raise ValueError(f"{grain} is not an interval of minutes or hours")
        self.grain = grain
        minutes = grain.seconds // 60
        self.cron = (
            ("* * * * *" if minutes == 1 else f"*/{minutes} * * * *") if minutes < 60 else f"0 */{minutes // 60} * * *"
        )

    @classmethod
    def read(cls, call: PartitionCall, is_date: bool) -> TimeShape | None:
        grain = None
        if call.function == "intDiv" and call.inner in UNIX_SECONDS and len(call.arguments) == 1:
            seconds = call.arguments[0]
            grain = next((g for g in Grain if g.fixed and str(g.seconds) == seconds), None)
        elif call.function == "toStartOfInterval" and len(call.arguments) == 1 and call.inner is None:
            count, _, unit = call.arguments[0].partition(" ")
            grain = grain_of_interval(int(count), unit) if count.isdigit() else None
        return time_shape(grain) if grain is not None else None


class FixedInterval(Interval):
    """A ClickHouse function naming windows of a fixed number of minutes (a subclass says which)."""

    fixed_grain: ClassVar[Grain]

    def __init__(self) -> None:
        super().__init__(self.fixed_grain)

    @classmethod
    def read(cls, call: PartitionCall, is_date: bool) -> TimeShape | None:
        if call.function in cls.functions and not call.arguments and call.inner is None:
            return cls()
        return None


@register
class Minute(FixedInterval):
    """``toStartOfMinute(c)``."""

    fixed_grain = Grain.MINUTE
    functions = ("toStartOfMinute",)


@register
class FiveMinutes(FixedInterval):
    """``toStartOfFiveMinutes(c)`` (``toStartOfFiveMinute``)."""

    fixed_grain = Grain.FIVE_MINUTES
    functions = ("toStartOfFiveMinutes", "toStartOfFiveMinute")


@register
class TenMinutes(FixedInterval):
    """``toStartOfTenMinutes(c)``."""

    fixed_grain = Grain.TEN_MINUTES
    functions = ("toStartOfTenMinutes",)


@register
class FifteenMinutes(FixedInterval):
    """``toStartOfFifteenMinutes(c)``."""

    fixed_grain = Grain.FIFTEEN_MINUTES
    functions = ("toStartOfFifteenMinutes",)


def read_time_shape(call: PartitionCall, is_date: bool) -> TimeShape | None:
    """The time shape of a PARTITION BY element on a time column: the first registered class that reads it."""
    for cls in _TIME_SHAPES:
        found = cls.read(call, is_date)
        if found is not None:
            return found
    return None


def time_shape(grain: Grain | str) -> TimeShape:
    """The shape of ``grain``'s windows: the registered class of that grain, else an :class:`Interval`."""
    grain = Grain(grain)
    for cls in _TIME_SHAPES:
        if getattr(cls, "fixed_grain", None) is grain or cls.__dict__.get("grain") is grain:
            return cls()
    return Interval(grain)


def time_shape_classes() -> list[type[TimeShape]]:
    """The registered time shape classes, in the order the registry asks them."""
    return list(_TIME_SHAPES)


def time_shapes() -> list[TimeShape]:
    """One shape of each grain a PARTITION BY can name (for tests and docs)."""
    return list(dict.fromkeys(time_shape(g) for g in Grain))


# --- whole shapes ------------------------------------------------------------------------------------------------


class Scheme(Protocol):
    """What a whole shape reads of a target's partitioning (:class:`chmv_assets.ddl.partitioning.TargetPartitioning`)."""

    @property
    def time(self) -> TimeShape | None: ...

    @property
    def keys(self) -> tuple[str, ...]: ...

    @property
    def zone(self) -> str: ...

    @property
    def target(self) -> ObjectRef | None: ...

    def time_windows(self, since: datetime, until: datetime) -> list[PartitionWindow]: ...


class PartitionSql(Protocol):
    """The SQL values of one partition, as the SQL layer writes them (:mod:`chmv_assets.sql.rebuild_sql`)."""

    whole: str  #: the PARTITION BY as written

    def substituted(self) -> str:
        """The PARTITION BY with its time column replaced by the window's start."""
        ...

    def spliced(self) -> str:
        """The PARTITION BY with its time column replaced by the window's start and each key element by its value."""
        ...

    def texts(self) -> list[str]:
        """Each element of the PARTITION BY as written."""
        ...

    def values(self) -> list[str]:
        """Each element's value on the partition."""
        ...


_WHOLE_SHAPES: dict[tuple[bool, bool], PartitionShape] = {}


def _whole(timed: bool, keyed: bool):
    def register_whole(cls: type[PartitionShape]) -> type[PartitionShape]:
        _WHOLE_SHAPES[(timed, keyed)] = cls()
        return cls

    return register_whole


def whole_shape(timed: bool, keyed: bool) -> PartitionShape:
    """The shape of a PARTITION BY with (or without) a time part and a key part."""
    return _WHOLE_SHAPES[(timed, keyed)]


class PartitionShape:
    """The shape of a whole PARTITION BY: how its partitions are named, enumerated, found and written into SQL."""

    timed: ClassVar[bool] = False
    keyed: ClassVar[bool] = False

    def __repr__(self) -> str:
        return type(self).__name__

    @property
    def partitioned(self) -> bool:
        return self.timed or self.keyed

    def decode(self, p: Scheme, key: str) -> PartitionWindow:
        """The partition a key names.

        Raises:
            ValueError: Not a key of ``p``, saying why.
        """
        raise NotImplementedError

    def forms(self, p: Scheme) -> str:
        """The forms a key takes, with examples."""
        raise NotImplementedError

    def windows(
        self, p: Scheme, since: datetime, until: datetime, values: Sequence[tuple[str, ...]]
    ) -> list[PartitionWindow | None]:
        """The partitions meeting ``[since, until]`` (of the key values ``values``); ``[None]``: the whole table."""
        return [None]

    def partition_of(self, p: Scheme, values: tuple[str, ...], oldest: datetime | None) -> PartitionWindow | None:
        """The partition of a ClickHouse partition holding key values ``values`` and rows from ``oldest`` on."""
        return None

    def family(self, p: Scheme) -> str:
        """The name of the ops of targets of this shape (``rebuild_<family>_targets``)."""
        raise NotImplementedError

    def job_suffix(self, p: Scheme) -> str:
        """The name of the rebuild job of targets of this shape (``chmv_rebuild_<suffix>``)."""
        raise NotImplementedError

    # SQL: the partition's value and predicate, written with the values of ``sql``

    def sql_expression(self, sql: PartitionSql) -> str:
        """The PARTITION BY evaluated on the partition."""
        raise ValueError("an unpartitioned table has no partition expression")

    def sql_tuple(self, sql: PartitionSql) -> str:
        """The partition a swap replaces: one value per element."""
        return f"tuple({self.sql_expression(sql)})"

    def sql_filter(self, sql: PartitionSql) -> str:
        """The predicate on the table's columns holding for the partition's rows exactly."""
        return f"({sql.whole}) = ({self.sql_expression(sql)})"


@_whole(timed=False, keyed=False)
class Unpartitioned(PartitionShape):
    """No PARTITION BY, or ``tuple()``: the whole table is the one partition."""

    def decode(self, p: Scheme, key: str) -> PartitionWindow:
        raise ValueError("the target is unpartitioned")

    def forms(self, p: Scheme) -> str:
        return "none (the target is unpartitioned)"

    def family(self, p: Scheme) -> str:
        return "whole"

    def job_suffix(self, p: Scheme) -> str:
        return "unpartitioned"

    def sql_tuple(self, sql: PartitionSql) -> str:
        return "tuple()"


@_whole(timed=True, keyed=False)
class TimeOnly(PartitionShape):
    """A time part alone: one partition per window (keys of its time shape)."""

    timed = True

    def decode(self, p: Scheme, key: str) -> PartitionWindow:
        if KEY_DELIMITER in key:
            raise ValueError("it names key values: the target has no key part (expected a window)")
        return _time_window(p, key)

    def forms(self, p: Scheme) -> str:
        assert p.time is not None
        return p.time.forms()

    def windows(
        self, p: Scheme, since: datetime, until: datetime, values: Sequence[tuple[str, ...]]
    ) -> list[PartitionWindow | None]:
        return list(p.time_windows(since, until))

    def partition_of(self, p: Scheme, values: tuple[str, ...], oldest: datetime | None) -> PartitionWindow | None:
        return _window_holding(p, values, oldest)

    def family(self, p: Scheme) -> str:
        assert p.time is not None
        return p.time.family

    def job_suffix(self, p: Scheme) -> str:
        assert p.time is not None
        return p.time.grain.value.replace(" ", "_")

    def sql_expression(self, sql: PartitionSql) -> str:
        return sql.substituted()


class _Keyed(PartitionShape):
    """A key part: partitions named by the values the server holds, element by element in SQL."""

    keyed = True

    def job_suffix(self, p: Scheme) -> str:
        assert p.target is not None
        return f"{self._grain(p)}__{safe_name(p.target.database)}__{safe_name(p.target.name)}"

    def _grain(self, p: Scheme) -> str:
        return "key"

    def sql_expression(self, sql: PartitionSql) -> str:
        return sql.spliced()

    def sql_tuple(self, sql: PartitionSql) -> str:
        return f"tuple({', '.join(sql.values())})"

    def sql_filter(self, sql: PartitionSql) -> str:
        return " AND ".join(f"({text}) = ({value})" for text, value in zip(sql.texts(), sql.values(), strict=True))


@_whole(timed=False, keyed=True)
class KeyOnly(_Keyed):
    """A key alone (``tenant``, ``(tenant, region)``, ``cityHash64(id) % 8``): one partition per value."""

    def decode(self, p: Scheme, key: str) -> PartitionWindow:
        return keyed_window(_checked(p, decode_key(key), key))

    def forms(self, p: Scheme) -> str:
        return f"the key's values joined by {VALUES_DELIMITER!r} (acme, acme/eu)"

    def windows(
        self, p: Scheme, since: datetime, until: datetime, values: Sequence[tuple[str, ...]]
    ) -> list[PartitionWindow | None]:
        return [keyed_window(v) for v in values] if values else [None]

    def partition_of(self, p: Scheme, values: tuple[str, ...], oldest: datetime | None) -> PartitionWindow | None:
        return keyed_window(values)

    def family(self, p: Scheme) -> str:
        return "dynamic"


@_whole(timed=True, keyed=True)
class TimeByKey(_Keyed):
    """A time part and a key part: one partition per window and value (``2026-09-01|eu``)."""

    timed = True

    def decode(self, p: Scheme, key: str) -> PartitionWindow:
        time_key, delimiter, rest = key.partition(KEY_DELIMITER)
        if not delimiter:
            raise ValueError(f"it names a window without the key's values (expected <window>{KEY_DELIMITER}<values>)")
        window = _time_window(p, time_key)
        return PartitionWindow(key, window.start, window.end, _checked(p, decode_key(rest), key))

    def forms(self, p: Scheme) -> str:
        assert p.time is not None
        return f"{p.time.forms()}, then {KEY_DELIMITER}<key values> (2026-09-01|eu)"

    def windows(
        self, p: Scheme, since: datetime, until: datetime, values: Sequence[tuple[str, ...]]
    ) -> list[PartitionWindow | None]:
        return list(with_values(p.time_windows(since, until), values)) if values else [None]

    def partition_of(self, p: Scheme, values: tuple[str, ...], oldest: datetime | None) -> PartitionWindow | None:
        return _window_holding(p, values, oldest)

    def family(self, p: Scheme) -> str:
        return "multi"

    def _grain(self, p: Scheme) -> str:
        assert p.time is not None
        return p.time.grain.value.replace(" ", "_")


def _window_holding(p: Scheme, values: tuple[str, ...], oldest: datetime | None) -> PartitionWindow | None:
    """The window holding ``oldest`` (an instant, or a wall clock of the calendar: its first occurrence) with
    ``values``; None without a time."""
    if oldest is None:
        return None
    assert p.time is not None
    return p.time.window_at(p.time.floor(oldest, p.zone), p.zone, values)


def _time_window(p: Scheme, key: str) -> PartitionWindow:
    """The window a time key names, in ``p``'s calendar."""
    shape = p.time
    assert shape is not None
    window = shape.window_at(shape.start_of(key, p.zone), p.zone)
    if window.key != key:
        raise ValueError(f"no {shape.grain} window starts there in {p.zone}; the nearest: {window.key}")
    return window


def _checked(p: Scheme, values: tuple[str, ...], key: str) -> tuple[str, ...]:
    if len(values) != len(p.keys):
        raise ValueError(
            f"{key} names {len(values)} value(s); the key part {', '.join(p.keys)} has "
            f"{len(p.keys)} (values joined by {VALUES_DELIMITER!r})"
        )
    return values
