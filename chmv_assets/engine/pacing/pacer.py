"""Pacing: every chmv insert respects the server (docs/pacing-and-health.md, "Pacing"; seeds 000, 003, 004).

An insert (an ingestion chunk, a rebuild's shadow fill, the apply's re-derivation, a maintenance merge) goes through
:meth:`Pacer.run`, which

1. **waits for room** before it starts: while the busiest partition the insert writes (of each table it writes; the
   partitions it writes where the caller names them: an insert is not held by a partition it does not touch) holds
   ``[pacing] parts_share`` of its ``parts_to_delay_insert`` (the server's limits, or the table's own SETTINGS:
   chmv backs off before the server delays or refuses inserts), while the merge pool is busy (for at most
   ``pool_wait_seconds``) and while ``max_concurrency`` chmv inserts already run on the server (``system.processes``,
   every host's: ``background_pool_size / 2`` by default, seed 003). It looks again after a pause that doubles from
   ``backoff_base_seconds`` up to ``backoff_max_seconds`` (jittered), and gives up past ``max_wait_seconds``
   (:class:`~chmv_assets.errors.ServerBusy`, saying why; nothing of the insert is written). Every wait is logged:
   what waits, for how long, and why;
2. **retries** an insert the server refused before writing anything: "Too many parts" (``TOO_MANY_PARTS``: ClickHouse
   checks the limit once, before the first block, ``MergeTreeSink::onStart``), a lock timeout (``DEADLOCK_AVOIDED``)
   and ``TOO_MANY_SIMULTANEOUS_QUERIES``, up to ``retry_attempts`` with the same backoff; any other error is raised at
   once (a retry could write twice what the first attempt wrote). A caller that can tell whether anything was
   written passes ``unchanged``, and nothing is retried once it says the insert wrote rows.

A look at the server is one small statement (:func:`chmv_assets.engine.pacing.pressure.read_load`); a look that found every
table far from its limits is reused for a few seconds (:data:`FRESH_SECONDS`), so an idle server costs a statement
every few seconds of work, not one per insert (``benchmarks/bench_pacing.py``). A caller that holds a source's write gate
(a rebuild's read and swap) waits for room before taking it and runs its inserts under :meth:`Pacer.unhurried`: a wait
then raises :class:`~chmv_assets.errors.NoRoomUnderGate` at once, the caller releases the gate and waits without it. Inserts are cut by
:func:`chunks` into at most :meth:`Pacer.partitions_per_insert` partitions each (the server's
``max_partitions_per_insert_block`` unless ``[pacing] max_partitions_per_insert`` says otherwise).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from chmv_assets.ddl.config import PacingConfig
from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.engine.pacing.backoff import backoff
from chmv_assets.engine.pacing.pressure import Load, ServerLimits, read_limits, read_load, server_limits, table_limits
from chmv_assets.engine.server_errors import Code, named_code, too_many_partitions_per_insert
from chmv_assets.errors import NoRoomUnderGate, ServerBusy

_LOG = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a look that found the server far from every limit is reused (see :meth:`Pacer.wait_for_room`).
FRESH_SECONDS = 5.0
#: Errors the server raises before an insert writes anything, worth another attempt after a pause.
RETRYABLE = frozenset({Code.TOO_MANY_PARTS, Code.DEADLOCK_AVOIDED, Code.TOO_MANY_SIMULTANEOUS_QUERIES})


def retry_reason(error: BaseException) -> str | None:
    """The name of a server error worth retrying (see the module), or None for any other error: a lost connection
    (it may have run), and ``TOO_MANY_PARTS`` of an insert block spanning too many partitions (no pause fixes that)."""
    if isinstance(error, OperationalError):
        return None
    code = named_code(error)
    if code is None or code not in RETRYABLE or too_many_partitions_per_insert(error):
        return None
    return code.name


def chunks(items: Sequence[T], limit: int) -> list[list[T]]:
    """``items`` in consecutive runs of at most ``limit`` (all of them in one for a limit of 0)."""
    if not items:
        return []
    if limit <= 0 or len(items) <= limit:
        return [list(items)]
    return [list(items[i : i + limit]) for i in range(0, len(items), limit)]


#: What a look covered: per table, the partitions that counted (None: every partition).
Scope = dict[ObjectRef, frozenset[str] | None]


def _scope(watch: Sequence[ObjectRef], partitions: Mapping[ObjectRef, Collection[str]] | None) -> Scope:
    return {t: frozenset(partitions[t]) if partitions is not None and t in partitions else None for t in watch}


def _covers(wider: Scope, scope: Scope) -> bool:
    """Whether a look over ``wider`` saw every partition ``scope`` counts."""
    for table, ids in scope.items():
        if table not in wider:
            return False
        seen = wider[table]
        if seen is not None and (ids is None or not ids <= seen):
            return False
    return True


@dataclass
class _Look:
    """A look at the server, and what it allows: reused while fresh and far from the limits."""

    load: Load
    scope: Scope
    headroom: float  # parts the busiest watched partition may still take before chmv would wait
    reasons: list[str]
    inserts_since: int = 0


@dataclass
class PacingStats:
    """What pacing cost a session: for run metadata and benchmarks."""

    looks: int = 0
    look_seconds: float = 0.0  # spent reading the server (its limits, the tables' limits, the looks)
    waits: int = 0
    waited_seconds: float = 0.0
    retries: int = 0
    log: list[str] = field(default_factory=list)
    #: Why each look that made an insert wait did (its reasons, joined): what pacing waited for.
    waited_for: list[str] = field(default_factory=list)


class Pacer:
    """Paces the inserts of one client session (see the module); get it with :func:`pacer_for`.

    Args:
        client: The session the inserts run on.
        rules: ``[pacing]`` of chmv.toml.
        sleep: How to pause (tests and benchmarks may pass their own).
    """

    def __init__(
        self,
        client: Client,
        rules: PacingConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.client, self.rules = client, rules
        self.sleep = sleep
        self.stats = PacingStats()
        self._server: ServerLimits | None = None
        self._tables: dict[ObjectRef, dict[str, int] | None] = {}
        self._last: _Look | None = None
        self._hurry: str | None = None  # set by unhurried(): what the caller holds while it may not wait

    @contextmanager
    def unhurried(self, holding: str) -> Iterator[None]:
        """Inserts that may not wait (the caller holds ``holding``, e.g. a source's write gate, that others wait
        for): where pacing would wait, :class:`~chmv_assets.errors.NoRoomUnderGate` is raised at once instead (nothing
        of the insert is written); the caller releases what it holds and waits for room without it."""
        before, self._hurry = self._hurry, holding
        try:
            yield
        finally:
            self._hurry = before

    # --- what the server allows -------------------------------------------------------------------------------

    def server(self) -> ServerLimits:
        """The server's limits (read once per session)."""
        if self._server is None:
            started = time.monotonic()
            self._server = server_limits(self.client)
            self.stats.look_seconds += time.monotonic() - started
        return self._server

    def partitions_per_insert(self) -> int:
        """Most partitions one insert may write: ``[pacing] max_partitions_per_insert``, else the server's
        ``max_partitions_per_insert_block`` (0: no limit)."""
        return self.rules.max_partitions_per_insert or self.server().max_partitions_per_insert_block

    def concurrency(self) -> int:
        """Most chmv inserts at once: ``[pacing] max_concurrency``, else ``background_pool_size / 2`` (at least 1)."""
        return self.rules.max_concurrency or max(1, (self.server().background_pool_size or 8) // 2)

    def wait_at(self, table: ObjectRef) -> int | None:
        """The active parts in one partition of ``table`` from which chmv waits (None: not a MergeTree it knows)."""
        limits = self._limits([table]).get(table)
        if not limits:
            return None
        delay, throw = limits["parts_to_delay_insert"], limits["parts_to_throw_insert"]
        candidates = [n for n in (math.ceil(self.rules.parts_share * delay) if delay else 0, throw) if n > 0]
        return max(1, min(candidates)) if candidates else None

    def _limits(self, tables: Sequence[ObjectRef]) -> dict[ObjectRef, dict[str, int] | None]:
        missing = [t for t in tables if t not in self._tables]
        if missing:
            started = time.monotonic()
            if self._server is None:  # the server's limits and the tables' in one statement
                self._server, found = read_limits(self.client, missing)
            else:
                found = table_limits(self.client, missing, self._server)
            self.stats.look_seconds += time.monotonic() - started
            for table in missing:
                self._tables[table] = found.get(table)
        return {t: self._tables[t] for t in tables}

    # --- waiting and retrying ---------------------------------------------------------------------------------

    def run(
        self,
        what: str,
        statement: Callable[[], T],
        *,
        watch: Sequence[ObjectRef] = (),
        partitions: Mapping[ObjectRef, Collection[str]] | None = None,
        unchanged: Callable[[], bool] | None = None,
    ) -> T:
        """Run ``statement`` (an insert) once the server has room, retrying it where the server refused it unwritten.

        Args:
            what: The insert, as the log names it (``analytics.events_agg 2026-08-03: fill``).
            statement: Runs the insert.
            watch: The tables it writes whose part counts hold it (a target, a source and the targets its MVs
                write); a fresh shadow is not one (chmv fills it, nothing else).
            partitions: Per table of ``watch``, the partitions (``partition_id``) it writes: only those hold it (a
                table not in it: every partition).
            unchanged: After a refusal: True when the insert wrote nothing (the retry then cannot write twice).

        Raises:
            ServerBusy: No room past ``max_wait_seconds``, or refused through every attempt.
            Any other error of the statement, unretried.
        """
        if not self.rules.enabled:
            return statement()
        attempts = self.rules.retry_attempts
        for attempt in range(1, attempts + 1):
            self.wait_for_room(what, watch, partitions)
            with self._slot(what):
                try:
                    result = statement()
                except DatabaseError as error:
                    reason = retry_reason(error)
                    if reason is None:
                        raise
                    self._last = None  # the server said no: look again before the next attempt
                    if unchanged is not None and not unchanged():
                        raise ServerBusy(
                            f"{what}: the server refused it ({reason}) after it had written rows: not "
                            "retried (it would write them twice); run it again",
                            written=True,
                        ) from error
                    if attempt == attempts:
                        raise ServerBusy(
                            f"{what}: the server refused it {attempts} times ({reason}); nothing of it was written. "
                            f"{self._advice(reason)}"
                        ) from error
                    pause = self._pause(attempt)
                    self._note(
                        f"{what}: the server refused it ({reason}: {_first_line(error)}); nothing was "
                        f"written; trying again in {pause:.1f}s (attempt {attempt + 1} of {attempts})"
                    )
                    self.stats.retries += 1
                    self._pause_for(pause)
                    continue
            if self._last is not None:
                self._last.inserts_since += 1
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def wait_for_room(
        self,
        what: str,
        watch: Sequence[ObjectRef] = (),
        partitions: Mapping[ObjectRef, Collection[str]] | None = None,
    ) -> float:
        """Wait until the server has room for an insert writing ``watch`` (``partitions`` of them, as in :meth:`run`);
        the seconds waited.

        Raises:
            ServerBusy: Still no room after ``max_wait_seconds``.
            NoRoomUnderGate: No room now, inside :meth:`unhurried` (nothing waited).
        """
        if not self.rules.enabled:
            return 0.0
        started = time.monotonic()
        attempt = 0
        while True:
            waited = time.monotonic() - started
            look = self._look(watch, partitions, waited)
            if not look.reasons:
                if attempt:
                    self._note(f"{what}: the server has room again; going on after waiting {waited:.1f}s")
                return waited
            if waited >= self.rules.max_wait_seconds:
                raise ServerBusy(
                    f"{what}: gave up after waiting {waited:.0f}s for the server ([pacing] max_wait_seconds="
                    f"{self.rules.max_wait_seconds:g}): {'; '.join(look.reasons)}. Nothing of this insert was written. "
                    f"{self._advice('parts')}"
                )
            if self._hurry is not None:
                self._last = None
                raise NoRoomUnderGate(
                    f"{what}: no room on the server ({'; '.join(look.reasons)}) while holding {self._hurry}: "
                    "released to wait without it"
                )
            attempt += 1
            pause = min(self._pause(attempt), max(0.0, self.rules.max_wait_seconds - waited))
            self.stats.waits += 1
            self.stats.waited_for.append("; ".join(look.reasons))
            self._note(
                f"{what}: waiting {pause:.1f}s for the server: {'; '.join(look.reasons)} "
                f"(waited {waited:.0f}s of at most {self.rules.max_wait_seconds:g}s)"
            )
            self._pause_for(pause)

    def _look(
        self, watch: Sequence[ObjectRef], partitions: Mapping[ObjectRef, Collection[str]] | None, waited: float
    ) -> _Look:
        """A look at the server for ``watch``: the last one while it is fresh and far from every limit."""
        scope = _scope(watch, partitions)
        last = self._last
        if (
            last is not None
            and not last.reasons
            and _covers(last.scope, scope)
            and time.monotonic() - last.load.at < FRESH_SECONDS
            and 2 * last.inserts_since < last.headroom
        ):
            return last
        self._limits(list(watch))  # every table's limits in one statement, once per session
        thresholds = {t: self.wait_at(t) for t in watch}
        started = time.monotonic()
        load = read_load(self.client, list(watch), partitions=partitions)
        self.stats.look_seconds += time.monotonic() - started
        self.stats.looks += 1
        reasons, headroom = self._reasons(load, thresholds, waited)
        self._last = _Look(load, scope, headroom, reasons)
        return self._last

    def _reasons(self, load: Load, thresholds: dict[ObjectRef, int | None], waited: float) -> tuple[list[str], float]:
        """Why an insert must wait now (empty: it may go), and the parts the busiest watched partition may still take."""
        reasons: list[str] = []
        headroom = math.inf
        for table, wait_at in thresholds.items():
            if wait_at is None:
                continue
            partition, parts = load.busiest.get(table, ("", 0))
            headroom = min(headroom, wait_at - parts)
            if parts >= wait_at:
                limits = self._tables[table] or {}
                reasons.append(
                    f"partition {partition} of {table.fqn} holds {parts} active parts (chmv waits from {wait_at}: "
                    f"{self.rules.parts_share:g} x parts_to_delay_insert={limits.get('parts_to_delay_insert')}; the "
                    f"server refuses inserts at parts_to_throw_insert={limits.get('parts_to_throw_insert')}) while "
                    f"merges catch up ({load.pool_busy} merge/mutation tasks running)"
                )
        if (
            load.pool_size
            and load.pool_busy >= self.rules.pool_share * load.pool_size
            and waited < self.rules.pool_wait_seconds
        ):
            reasons.append(
                f"the merge pool is busy ({load.pool_busy} of {load.pool_size} merge/mutation tasks; "
                f"chmv waits for it at most {self.rules.pool_wait_seconds:g}s)"
            )
        if load.running is not None and load.running >= self.concurrency():
            reasons.append(
                f"{load.running} chmv inserts already run on the server (at most {self.concurrency()} at "
                "once: [pacing] max_concurrency, by default background_pool_size / 2)"
            )
        return reasons, headroom

    @contextmanager
    def _slot(self, what: str) -> Iterator[None]:
        """One of this process's ``concurrency()`` insert slots (threads of one process; other processes and hosts
        are counted on the server, see :meth:`_reasons`)."""
        slots = _process_slots(self.concurrency())
        if not slots.acquire(timeout=max(0.0, self.rules.max_wait_seconds)):
            raise ServerBusy(
                f"{what}: {self.concurrency()} chmv inserts of this process kept running for "
                f"{self.rules.max_wait_seconds:g}s ([pacing] max_concurrency)"
            )
        try:
            yield
        finally:
            slots.release()

    def _pause(self, attempt: int) -> float:
        """The pause before look or retry ``attempt`` + 1: doubling from the base, at most the max (:func:`backoff`)."""
        return backoff(attempt, self.rules.backoff_base_seconds, self.rules.backoff_max_seconds)

    def _pause_for(self, seconds: float) -> None:
        self.stats.waited_seconds += seconds
        self.sleep(seconds)

    def _note(self, line: str) -> None:
        self.stats.log.append(line)
        _LOG.info(line)

    @staticmethod
    def _advice(reason: str) -> str:
        if reason == Code.DEADLOCK_AVOIDED.name:
            return (
                "Another statement held the table's lock (an ALTER, a long SELECT): run it again when that has "
                "finished, or raise lock_acquire_timeout."
            )
        return (
            "Merges are behind the inserts (or stopped: SYSTEM START MERGES; look at system.merges and the "
            "chmv_part_count check): run it again once the part counts have come down, or raise [pacing] "
            "max_wait_seconds."
        )


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__


_slots: dict[int, threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def _process_slots(size: int) -> threading.BoundedSemaphore:
    with _slots_lock:
        if size not in _slots:
            _slots[size] = threading.BoundedSemaphore(size)
        return _slots[size]


_pacers: weakref.WeakKeyDictionary[Client, Pacer] = weakref.WeakKeyDictionary()
_pacers_lock = threading.Lock()


def pacer_for(client: Client, rules: PacingConfig | None = None) -> Pacer:
    """The pacer of ``client``'s session (what it learnt of the server is kept as long as the client lives), with
    ``rules`` as given now."""
    with _pacers_lock:
        pacer = _pacers.get(client)
        if pacer is None:
            pacer = _pacers[client] = Pacer(client, rules or PacingConfig())
    pacer.rules = rules or pacer.rules
    return pacer


def written_by_insert(project: Project, table: ObjectRef) -> list[ObjectRef]:
    """``table`` and every table its MVs write, down the chains: what an insert into ``table`` writes."""
    written = [table]
    for current in written:  # grows while it is walked: breadth first
        for view in project.views_from(current):
            if view.writes_to not in written:
                written.append(view.writes_to)
    return written
