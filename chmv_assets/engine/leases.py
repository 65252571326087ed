"""Leases on partitions, held on the server itself: one run per (table, partition), whatever the hosts.

A file lock only serializes the processes of one host; Dagster may run on several pods, and ``chmv rebuild`` anywhere.
So every rebuild holds, on the server, a lease per partition it rewrites (``chmv_meta.leases``). A lease has
generations: a run claims the next one with an insert whose deduplication token names it (``<lease>#<generation>``),
and the server keeps exactly one of several such inserts (a non-replicated table dedups within its
``non_replicated_deduplication_window``; a ``Replicated*`` one through Keeper), so of two runs claiming at once exactly
one finds its own row and holds the lease. The holder renews it (a row with a later expiry) every third of its time
to live and releases it at the end; a lease past its expiry, or held by a process of this host that is gone (a
killed run), can be claimed again.

A second run waits for a held lease up to ``[rebuild] lease_wait_seconds``, then stops with :class:`LeaseHeld`,
naming the holder (the Dagster run, host and pid), since when and until when it holds it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from clickhouse_connect.driver.client import Client

from chmv_assets.engine.clients import ClientFactory
from chmv_assets.errors import LeaseHeld
from chmv_assets.sql.meta import LEASES, meta_ddl
from chmv_assets.sql.quoting import qualified

#: Settings of a claim: deduplicated by its token, never an asynchronous insert (those dedup differently).
_CLAIM = {"insert_deduplicate": 1, "async_insert": 0}
#: Renewals and releases must all be kept.
_APPEND = {"insert_deduplicate": 0, "async_insert": 0}


def rebuild_lease(table_fqn: str, partition: str | None) -> str:
    """The lease of one partition (``None``: the whole table) of the table a rebuild writes."""
    return f"rebuild:{table_fqn}:{partition or 'all'}"


@dataclass(frozen=True)
class Holder:
    """Who holds (or wants) a lease: a run of chmv on a host."""

    owner: str
    """What the run is, for people (``dagster run 1a2b…``, ``chmv rebuild``)."""
    run: str
    """The run's token (names its shadows)."""
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    def describe(self) -> str:
        return f"{self.owner} (run {self.run}, host {self.host}, pid {self.pid})"


@dataclass(frozen=True)
class LeaseState:
    """The newest generation of a lease as the server has it."""

    lease: str
    generation: int
    holder: Holder
    expires_at: datetime
    released: bool
    expired: bool

    def free_for(self, me: Holder) -> bool:
        """Whether ``me`` may claim the next generation (or already holds this one)."""
        if self.released or self.expired:
            return True
        return self.holder.host == me.host and self.holder.pid != me.pid and not _alive(self.holder.pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ensure_table(client: Client) -> None:
    """``chmv_meta.leases`` on this server if missing (``chmv apply`` creates it where the deployment says)."""
    if client.query(
        "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {name:String}",
        parameters={"db": LEASES.database, "name": LEASES.name},
    ).result_rows[0][0]:
        return
    for sql in meta_ddl():
        if "leases" in sql or "DATABASE" in sql:
            client.command(sql)


def read(client: Client, leases: Sequence[str]) -> dict[str, LeaseState]:
    """The newest generation of each of ``leases`` that has one (one query)."""
    if not leases:
        return {}
    rows = client.query(
        "SELECT lease, generation, holder, run, host, pid, expires_at, released, expires_at < now64(3) FROM ("
        "SELECT lease, generation, argMax(holder, version) AS holder, argMax(run, version) AS run, "
        "argMax(host, version) AS host, argMax(pid, version) AS pid, argMax(expires_at, version) AS expires_at, "
        f"argMax(released, version) AS released FROM {qualified(LEASES)} WHERE lease IN {{leases:Array(String)}} "
        "GROUP BY lease, generation) ORDER BY lease, generation DESC LIMIT 1 BY lease",
        parameters={"leases": list(leases)},
    ).result_rows
    return {
        lease: LeaseState(lease, int(gen), Holder(owner, run, host, int(pid)), expires, bool(released), bool(expired))
        for lease, gen, owner, run, host, pid, expires, released, expired in rows
    }


def _write(client: Client, lease: str, generation: int, me: Holder, ttl: float, *, released: bool = False,
           claim: bool = False) -> None:  # fmt: skip
    settings = {**_CLAIM, "insert_deduplication_token": f"{lease}#{generation}"} if claim else _APPEND
    client.command(
        f"INSERT INTO {qualified(LEASES)} (lease, generation, holder, run, host, pid, expires_at, released, version) "
        "VALUES ({lease:String}, {generation:UInt64}, {holder:String}, {run:String}, {host:String}, {pid:UInt32}, "
        "now64(3) + toIntervalMillisecond({ttl:UInt64}), {released:UInt8}, {version:UInt64})",
        parameters={"lease": lease, "generation": generation, "holder": me.owner, "run": me.run, "host": me.host,
                    "pid": me.pid, "ttl": int(ttl * 1000), "released": int(released),
                    "version": 0 if claim else time.time_ns()},  # fmt: skip
        settings=settings,
    )


def acquire(client: Client, lease: str, me: Holder, *, ttl: float, wait: float,
            log: Callable[[str], None] | None = None) -> int:  # fmt: skip
    """Hold ``lease`` (claim its next generation), waiting up to ``wait`` seconds for another holder.

    Returns:
        The generation held.

    Raises:
        LeaseHeld: Another run held it for longer than ``wait``.
    """
    deadline = time.monotonic() + wait
    said = False
    while True:
        state = read(client, [lease]).get(lease)
        if state is not None and state.holder.run == me.run and not state.released:
            return state.generation  # this run holds it already
        if state is None or state.free_for(me):
            generation = (state.generation if state else 0) + 1
            _write(client, lease, generation, me, ttl, claim=True)
            won = read(client, [lease]).get(lease)
            if won is not None and won.generation == generation and won.holder.run == me.run:
                return generation
            continue  # another run claimed this generation first: it holds the lease now
        if time.monotonic() >= deadline:
            raise LeaseHeld(
                f"{lease.split(':', 1)[1]} is being rebuilt by {state.holder.describe()} (its lease runs until "
                f"{state.expires_at:%Y-%m-%d %H:%M:%S} UTC unless renewed); this run waited {wait:.0f}s and changed "
                "nothing. Wait for that run to finish and retry (a killed run's lease ends at that time)."
            )
        if not said and log is not None:
            log(f"waiting for {lease}: held by {state.holder.describe()}")
            said = True
        time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))


def renew(client: Client, held: dict[str, int], me: Holder, ttl: float) -> None:
    """Extend every lease of ``held`` (lease → generation) by ``ttl`` from now."""
    for lease, generation in held.items():
        _write(client, lease, generation, me, ttl)


def release(client: Client, held: dict[str, int], me: Holder) -> None:
    """Give every lease of ``held`` up."""
    for lease, generation in held.items():
        _write(client, lease, generation, me, 0, released=True)


def live_runs(client: Client, prefix: str) -> set[str]:
    """The run tokens holding a lease (not released, not expired) whose name starts with ``prefix``."""
    rows = client.query(
        "SELECT run FROM (SELECT lease, generation, argMax(run, version) AS run, argMax(released, version) AS released,"
        f" argMax(expires_at, version) AS expires_at FROM {qualified(LEASES)} WHERE startsWith(lease, {{p:String}}) "
        "GROUP BY lease, generation ORDER BY lease, generation DESC LIMIT 1 BY lease) "
        "WHERE NOT released AND expires_at >= now64(3)",
        parameters={"p": prefix},
    ).result_rows
    return {str(r[0]) for r in rows}


@contextmanager
def holding(connect: ClientFactory, leases: Iterable[str], me: Holder, *, ttl: float, wait: float,
            renewer: ClientFactory | None = None, log: Callable[[str], None] | None = None,
            on_held: Callable[[Client], None] | None = None,
            on_release: Callable[[Client], None] | None = None) -> Iterator[dict[str, int]]:  # fmt: skip
    """Hold every lease of ``leases`` (in name order, so two runs never wait on each other in a circle) for the block.

    Args:
        connect: Opens a client for the claims (then ``on_held`` runs on it) and for the release.
        renewer: Opens a client of its own for each renewal, from a thread that renews the leases every ``ttl / 3``
            seconds; without one the leases last ``ttl`` (callers that hold them for less).
        on_held: Work to do once every lease is held, on the client that took them (a killed run's leftovers).
        on_release: Work to do on the client that releases them, before (what the run settles at its end).

    Raises:
        LeaseHeld: One of them stayed held by another run for longer than ``wait`` (those taken are released).
    """
    held: dict[str, int] = {}
    stop = threading.Event()
    thread = None
    try:
        with connect.get_client() as client:
            _ensure_table(client)
            for lease in sorted(set(leases)):
                held[lease] = acquire(client, lease, me, ttl=ttl, wait=wait, log=log)
            if on_held is not None:
                on_held(client)
        if renewer is not None and held:
            thread = threading.Thread(target=_renew_every, args=(renewer, dict(held), me, ttl, stop), daemon=True,
                                      name="chmv-lease-renewer")  # fmt: skip
            thread.start()
        yield held
    finally:
        stop.set()
        if thread is not None:
            thread.join()
        if held:
            with connect.get_client() as client:
                try:
                    if on_release is not None:
                        on_release(client)
                finally:
                    release(client, held, me)


def _renew_every(connect: ClientFactory, held: dict[str, int], me: Holder, ttl: float, stop: threading.Event) -> None:
    while not stop.wait(ttl / 3):
        try:
            with connect.get_client() as client:
                renew(client, held, me, ttl)
        except Exception:  # noqa: BLE001 - a missed renewal is retried at the next period; the lease lasts ttl
            continue
