"""Checks made during a run, not after it.

(d) :class:`Exactness`: right after a rebuild operation (a sampled share of them), the writers and the reader paused,
the partitions the operation rebuilt are compared with their MVs' SELECT over the sources as they are then. A run
that reported success must have left them exact; a failure that left a partition inexact which was exact before it
must say so (a failure saying "as it was" / untouched / "changed nothing" then is an anomaly, and so is one naming no
damage at all).

(f) :class:`Reader`: a thread sampling the fingerprints of a closed partition no writer inserts into while chmv
rebuilds it; every sample must be the partition before a rebuild or after one, never a mix.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from chmv_assets.certify import checker
from chmv_assets.certify.context import Run
from chmv_assets.certify.expected import (
    Fingerprint,
    expected_table,
    fingerprints,
    pending_mutations,
    physical,
    same,
    verifiable,
)
from chmv_assets.certify.history import FAILED, OK, Op, first_line
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.quoting import qualified

#: Words of a failure's message that claim it left the partition as it was.
UNTOUCHED = ("as it was", "untouched", "changed nothing", "nothing was changed", "left unchanged")
#: Words of a failure's message that name damage it may have left.
DAMAGE = ("damage", "may have", "recorded for recovery", "lost", "asset check failed", "parity")


class NotComparable(Exception):
    """The partitions cannot be compared with their SELECT at this moment (noted, never passed)."""


@dataclass(frozen=True)
class Snapshot:
    """The partitions of a rebuild's keys, live and expected, at one quiet moment."""

    live: dict[str, Fingerprint]
    expected: dict[str, Fingerprint]

    def inexact(self) -> list[str]:
        return [
            p for p in sorted(set(self.live) | set(self.expected)) if not same(self.live.get(p), self.expected.get(p))
        ]


class Exactness:
    """Property (d), on every ``every``-th rebuild operation while the run has time left for it.

    Args:
        run: The run (its writers and reader are paused for each snapshot).
        every: Check one rebuild operation in this many.
        budget: Seconds before the run's deadline under which no more checks are made.
    """

    def __init__(self, run: Run, every: int = 2, budget: float = 3.0):
        self.run, self.every, self.budget = run, every, budget
        self.anomalies: list[checker.Anomaly] = []
        self.checked = 0
        self._seen = 0

    def install(self) -> None:
        self.run.before_rebuild = self.before
        self.run.after_rebuild = self.after

    def _due(self, target: ObjectRef) -> bool:
        return verifiable(self.run.loaded, target) and time.monotonic() + self.budget < self.run.deadline

    def before(self, target: ObjectRef, keys: list[str | None]) -> Snapshot | None:
        """A snapshot before the operation, for one in ``every`` of them (None: this one is not checked)."""
        self._seen += 1
        if self._seen % self.every or not self._due(target):
            return None
        try:
            return self.snapshot(target, keys)
        except Exception as err:  # noqa: BLE001 - a form certify cannot compare: noted, never passed silently
            self.run.notes.append(f"(d) {target.fqn}: not snapshotted ({first_line(err)})")
            return None

    def after(self, op: Op, target: ObjectRef, keys: list[str | None], before: Snapshot | None) -> None:
        """The operation's partitions right after it, judged by what it reported."""
        if before is None or op.status not in (OK, FAILED):
            return
        try:
            now = self.snapshot(target, keys)
        except Exception as err:  # noqa: BLE001 - noted
            self.run.notes.append(f"(d) {target.fqn}: not checked after {op.id} ({first_line(err)})")
            return
        self.checked += 1
        self.anomalies += judge(op, target.fqn, before, now, self.run.history)

    def snapshot(self, target: ObjectRef, keys: list[str | None]) -> Snapshot:
        """With every writer and reader paused (a Buffer flushed): the live partitions of ``keys`` and what their
        MVs' SELECT gives over the sources as they are (a root source with its graveyard)."""
        run = self.run
        with run.quiet(), run.resource.get_client() as client:
            # a delete whose mutation waits for merges (stopped) has its rows in the source and in its graveyard: what
            # the SELECT gives over both would count them twice until quiescence awaits it
            pending = [s.fqn for s in run.graves if target in run.downstream(s) and pending_mutations(client, s)]
            if pending:
                raise NotComparable(f"a delete is pending on {', '.join(pending)} (its merges stopped)")
            for buf in run.buffers.values():
                client.command(f"OPTIMIZE TABLE {qualified(buf)}")  # a Buffer's OPTIMIZE flushes it
            live = physical(client, target)
            want = expected_table(client, run.loaded, target, {}, run.graves, run.extras, suffix="__d")
            pids = partition_ids(run, client, target, [live, want], keys)
            return Snapshot(
                fingerprints(client, run.loaded, target, live, pids),
                fingerprints(client, run.loaded, target, want, pids),
            )


def judge(op: Op, target: str, before: Snapshot, now: Snapshot, history: Any) -> list[checker.Anomaly]:
    """(d) for one operation: a success must leave its partitions exact; a failure that made an exact partition
    inexact must say so (one saying "as it was" / untouched, or naming no damage, is an anomaly)."""
    out: list[checker.Anomaly] = []
    said = str(op.detail.get("error", ""))
    if op.status == OK:
        for pid in now.inexact():
            a, e = now.live.get(pid), now.expected.get(pid)
            out.append(
                checker.Anomaly(
                    "d",
                    target,
                    pid,
                    f"right after {op.id} reported success: {checker.describe_difference(a, e)}",
                    checker.suspect(history, target, pid, a, e),
                    [op.id],
                )
            )
        return out
    damaged = [p for p in now.inexact() if p not in before.inexact()]
    lowered = said.lower()
    if not damaged:
        return out
    if any(w in lowered for w in UNTOUCHED):
        why = "its failure says the partition is as it was"
    elif not any(w in lowered for w in DAMAGE):
        why = "its failure names no damage"
    else:
        return out
    for pid in damaged:
        a, e = now.live.get(pid), now.expected.get(pid)
        out.append(
            checker.Anomaly(
                "d",
                target,
                pid,
                f"exact before {op.id}, not after it ({checker.describe_difference(a, e)}); {why}: {said[:200]}",
                "a failure that hides the damage it left (class 2)",
                [op.id],
            )
        )
    return out


def partition_ids(
    run: Run, client: Any, target: ObjectRef, tables: list[ObjectRef], keys: list[str | None]
) -> list[str]:
    """The ClickHouse partition ids of ``tables`` holding the rows of the Dagster ``keys`` of ``target`` (every
    partition for an unpartitioned run)."""
    from chmv_assets.engine.clock import session_zone
    from chmv_assets.sql.rebuild_sql import partition_filter

    table = run.loaded.project.table(target)
    scheme = run.loaded.partitioning(target)
    filters: list[str] = []
    if table is not None and table.partition_by is not None and scheme.partitioned and None not in keys:
        zone = session_zone(client)
        for key in keys:
            window = scheme.window_of(key)
            if window is not None:
                filters.append(f"({partition_filter(table, scheme, window, zone=zone)})")
    where = f" WHERE {' OR '.join(filters)}" if filters else ""
    found: set[str] = set()
    for t in tables:
        rows = client.query(f"SELECT DISTINCT _partition_id FROM {qualified(t)}{where}").result_rows
        found |= {str(r[0]) for r in rows}
    return sorted(found)


class Reader:
    """Property (f): a thread sampling one closed partition's fingerprints (one per ClickHouse partition of a Dagster
    key in the frozen slot, which no writer reaches) while chmv rebuilds it."""

    def __init__(self, run: Run):
        self.run = run
        self.anomalies: list[checker.Anomaly] = []
        self.samples = 0
        self._pause = threading.Lock()
        self._stop = threading.Event()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The sampler stopped between two samples (its client closed) for the block."""
        with self._pause:
            yield

    def choose(self) -> tuple[ObjectRef, str] | None:
        """A target and a key whose window lies in the frozen slot (a day or shorter)."""
        from dagster import TimeWindowPartitionsDefinition

        slot = self.run.slots["frozen"]
        targets = [t for t in self.run.targets if verifiable(self.run.loaded, t)]
        self.run.rng.shuffle(targets)
        for target in targets:
            pdef = self.run.partitions_def(target)
            if not isinstance(pdef, TimeWindowPartitionsDefinition):
                continue
            try:
                key = pdef.get_partition_key_for_timestamp(slot.start + slot.span // 2)
            except Exception:  # noqa: BLE001 - before the first partition
                continue
            window = self.run.loaded.partitioning(target).window_of(key)
            if window is not None and window.start and window.end and window.end - window.start <= timedelta(days=1):
                return target, key
        return None

    def act(self) -> None:
        """Sample a frozen partition through a rebuild of it: the states before and after are allowed."""
        from chmv_assets.certify.operations import materialize

        chosen = self.choose()
        if chosen is None:
            self.run.notes.append("(f) no target has a partition of a day or less in the frozen slot: not sampled")
            return
        target, key = chosen
        run = self.run
        with run.resource.get_client() as client:
            live = physical(client, target)
            pids = partition_ids(run, client, target, [live], [key])
            allowed = [fingerprints(client, run.loaded, target, live, pids)]
        if not pids:
            return
        samples: list[tuple[float, dict[str, Fingerprint]]] = []
        self._stop.clear()
        thread = threading.Thread(target=self._sample, args=(target, live, pids, samples), daemon=True)
        thread.start()
        hooks = run.before_rebuild, run.after_rebuild
        run.before_rebuild = run.after_rebuild = None  # (d)'s pauses would stop the sampler during the rebuild
        try:
            materialize(run, target, key, actor="reader")
            with run.resource.get_client() as client:
                allowed.append(fingerprints(client, run.loaded, target, live, pids))
        finally:
            run.before_rebuild, run.after_rebuild = hooks
            self._stop.set()
            thread.join(timeout=30)
        self.samples += len(samples)
        for pid in pids:
            states = [a.get(pid) or (0, 0, ()) for a in allowed]
            seen = [(at, s.get(pid) or (0, 0, ())) for at, s in samples]
            self.anomalies += checker.mixed_reads(seen, states, target.fqn, pid)

    def _sample(self, target: ObjectRef, live: ObjectRef, pids: list[str], out: list) -> None:
        run = self.run
        while not self._stop.is_set():
            with self._pause:
                try:
                    with run.resource.get_client() as client:
                        for _ in range(5):
                            if self._stop.is_set():
                                break
                            out.append((run.history.now(), fingerprints(client, run.loaded, target, live, pids)))
                            time.sleep(0.02)
                except Exception as err:  # noqa: BLE001 - a failed read is no sample
                    run.notes.append(f"(f) reader: {first_line(err)}")
                    return
