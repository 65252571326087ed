"""The one error module of chmv: a base error and narrow subclasses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: What a refused swap says of the live partition (a refusal that follows a raced swap of the same run replaces it:
#: :func:`chmv_assets.engine.rebuild.steps.with_damage`).
NOT_SWAPPED = "Nothing was swapped; the live partition is unchanged."


class ChmvError(Exception):
    """Base class of every error chmv raises on purpose.

    Attributes:
        damaged: The partition keys (None: the whole table) that the failed operation may have left damaged (a swap
            raced by a write, in an earlier attempt of the same run): they need a rebuild, whatever the error says of
            the others. Empty for most errors.
    """

    damaged: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class DDLProblem:
    """One problem found in the DDL directory, located to the character.

    Attributes:
        file: Path of the ``.sql`` file, as given to the loader.
        line: 1-based line of the problem in that file.
        column: 1-based column of the problem in that file.
        message: What is wrong.
        hint: What to do about it.
    """

    file: str
    line: int
    column: int
    message: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}:{self.column}: {self.message}"
        return f"{text}\n    fix: {self.hint}" if self.hint else text


class DDLError(ChmvError):
    """The DDL directory is invalid; carries every problem found, not only the first."""

    def __init__(self, problems: Iterable[DDLProblem], where: str = "in the DDL directory; nothing was deployed"):
        self.problems: tuple[DDLProblem, ...] = tuple(problems)
        count = len(self.problems)
        header = f"{count} problem{'s' if count != 1 else ''} {where}"
        super().__init__("\n".join([header, *(str(p) for p in self.problems)]))


class PreflightError(DDLError):
    """The server refused statements of the DDL in the preflight (a scratch database); nothing live was changed."""

    def __init__(self, problems: Iterable[DDLProblem]):
        super().__init__(problems, "found by the server's preflight (in a scratch database); nothing was changed")


class PartitionKeyError(ChmvError, ValueError):
    """A partition key that is not one of the target's: names the target, the key, how the target is partitioned and
    the forms its keys take."""

    def __init__(self, target: str | None, key: str, partitioning: str, forms: str, reason: str):
        self.target, self.key = target, key
        super().__init__(
            f"{key!r} is not a partition of {target or 'the target'} ({reason}); it is partitioned by {partitioning}: "
            f"a key is {forms}"
        )


class EngineBusyError(ChmvError):
    """The embedded engine stayed locked by another process for longer than the lock timeout."""


class LandingZoneError(ChmvError):
    """A landing-zone file that cannot be loaded (wrong schema, corrupt Parquet)."""


class RebuildRefused(ChmvError):
    """A rebuild refused before it changed anything: the truth of a partition lives nowhere chmv can read."""


class ShrinkRefused(ChmvError):
    """A swap refused: the rebuilt partition would hold fewer rows than the live one, beyond what parity explains."""


class ForeignRowsRefused(ChmvError):
    """A swap refused: the live partition holds rows the MVs' own SELECT does not yield from the sources (written by a
    writer outside the DDL: an ``INSERT INTO`` the target, an MV the DDL does not define); a rebuild would delete
    them."""


class LeaseHeld(ChmvError):
    """Another run holds a partition this run was to rebuild (a lease on the server): nothing of it was changed."""


class RacedWrites(ChmvError):
    """Writes kept arriving in partitions while they were rebuilt, through every attempt; the message names those an
    attempt swapped in while a write raced it (a row's MV output may be missing until the partition is rebuilt again:
    ``damaged``, whatever later attempts did) and those no attempt swapped (as they were).

    Attributes:
        damaged: The partition keys (None: the whole table) that may have lost rows and need a rebuild.
    """

    def __init__(self, message: str, *, damaged: tuple[str | None, ...] = ()):
        super().__init__(message)
        self.damaged = damaged


class RebuildDeferred(ChmvError):
    """Every partition of a rebuild is still open to writers chmv does not control: nothing was rebuilt yet."""


class ParserUnavailable(ChmvError):
    """ClickHouse's own parser (the child process the DDL layer asks where sqlglot fails) could not be asked."""


class CertifyUsageError(ChmvError):
    """``chmv certify`` asked for what it cannot run (an unknown fault, a server DSN): nothing was run."""


class ServerBusy(ChmvError):
    """The server stayed too loaded for an insert (parts near their limits, merges behind) past ``[pacing]
    max_wait_seconds``, or kept refusing it ("Too many parts", a lock timeout) through every retry: nothing of that
    insert was written, unless ``written`` (it was refused after writing rows, and not retried); the message says why
    and what to do."""

    def __init__(self, message: str, *, written: bool = False):
        super().__init__(message)
        self.written = written


class NoRoomUnderGate(ServerBusy):
    """An insert found no room on the server while its caller held a source's write gate (a rebuild's read and swap):
    nothing of it was written; the caller releases the gate, waits for room without it, and reads again. ``done``:
    the results of what was completed before (the partitions already swapped)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.done: list = []
