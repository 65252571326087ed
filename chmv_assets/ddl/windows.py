"""One partition of a target (:class:`PartitionWindow`) and the codec of a key part's values in a Dagster key.

A window's bounds are instants at the partition calendar's UTC offset (:mod:`chmv_assets.ddl.instants`); a key part's
values are written into a key by :func:`encode_key` and read back by :func:`decode_key`. How a whole key is spelled
(``2026-09-01``, ``2026-09-01-13:00``, ``2026-11-01-01:00-0500``, ``2026-09-01|eu``, ``eu``) is each shape's
(:mod:`chmv_assets.ddl.shapes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from urllib.parse import unquote

#: Between the time part's key and the key part's in the key of a partition that has both (Dagster's multi-partition
#: key delimiter: the time dimension's name sorts first, see ``chmv_assets.orchestration.partitions``).
KEY_DELIMITER = "|"
#: Between the values of a key part of several elements (``(tenant, region)`` → ``acme/eu``).
VALUES_DELIMITER = "/"
#: Characters a key value cannot carry as they are in a Dagster partition key (the delimiters, what Dagster refuses in
#: a multi-partition key, the escape itself): written ``%XX``.
_ESCAPED = frozenset("%|,[]/")


@dataclass(frozen=True)
class PartitionWindow:
    """One partition of a target: its Dagster key, the ``[start, end)`` window of its time part (instants at the
    partition calendar's UTC offset: its wall clock and which occurrence of it) and the values of its key part.

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


def keyed_window(values: Sequence[str]) -> PartitionWindow:
    """The partition of a key alone with these values (no time part)."""
    return PartitionWindow(key=encode_key(values), start=None, end=None, values=tuple(values))


def with_values(windows: Sequence[PartitionWindow], keys: Sequence[Sequence[str]]) -> list[PartitionWindow]:
    """Each time window once per key-part values (a time × key target's partitions of those windows)."""
    return [
        replace(w, key=f"{w.key}{KEY_DELIMITER}{encode_key(k)}", values=tuple(k)) if w.start is not None else w
        for w in windows
        for k in keys
    ]
