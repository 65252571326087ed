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

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from chmv_assets.engine import records
from chmv_assets.engine.clients import ClientFactory
from chmv_assets.engine.server_errors import Code, is_code
from chmv_assets.errors import LeaseHeld
from chmv_assets.sql.meta import LEASES
from chmv_assets.sql.quoting import qualified

_LOG = logging.getLogger(__name__)

#: Settings of a claim: deduplicated by its token, never an asynchronous insert (those dedup differently). Written
#: into the statement (``INSERT … SETTINGS … VALUES``): passed apart, clickhouse-connect's chdb backend would read,
#: set and restore the session's settings around it (~20 ms of an ~30 ms claim).
_CLAIM = "insert_deduplicate = 1, async_insert = 0, insert_deduplication_token = {token:String}"
#: Renewals and releases must all be kept.
_APPEND = "insert_deduplicate = 0, async_insert = 0"


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


def _ensure_tables(client: Client) -> None:
    """``chmv_meta`` on this server if missing (``chmv apply`` creates it where the deployment says)."""
    records.ensure_records(client)


def read(client: Client, leases: Sequence[str]) -> dict[str, LeaseState]:
    """The newest generation of each of ``leases`` that has one (one query; ``chmv_meta`` is created if missing)."""
    if not leases:
        return {}
    try:
        return _read(client, leases)
    except DatabaseError as error:
        if not is_code(error, Code.UNKNOWN_TABLE, Code.UNKNOWN_DATABASE):
            raise
        _ensure_tables(client)
        return _read(client, leases)


def _read(client: Client, leases: Sequence[str]) -> dict[str, LeaseState]:
    rows = client.query(
        "SELECT lease, generation, holder, run, host, pid, expires_at, released, expires_at < now64(3) FROM ("
        "SELECT lease, generation, argMax(holder, version) AS holder, argMax(run, version) AS run, "
        "argMax(host, version) AS host, argMax(pid, version) AS pid, argMax(expires_at, version) AS expires_at, "
        f"argMax(released, version) AS released FROM {qualified(LEASES)} WHERE lease IN {{leases:Array(String)}} "
        "GROUP BY lease, generation) ORDER BY lease, generation DESC LIMIT 1 BY lease",
        parameters={"leases": list(leases)},
    ).result_rows
    return {
        lease: LeaseState(
            lease, int(gen), Holder(owner, run, host, int(pid)), _utc(expires), bool(released), bool(expired)
        )
        for lease, gen, owner, run, host, pid, expires, released, expired in rows
    }


def _utc(value: datetime) -> datetime:
    """An instant read back (in the server's zone, or naive UTC) as naive UTC, for messages that say UTC."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value


_COLUMNS = "(lease, generation, holder, run, host, pid, expires_at, released, version)"


def _write(client: Client, rows: dict[str, int], me: Holder, ttl: float, *, released: bool = False) -> None:
    """Renewals (or releases) of the generations ``rows`` (lease → generation): one insert, every row kept."""
    if not rows:
        return
    values, parameters = (
        [],
        {
            "holder": me.owner,
            "run": me.run,
            "host": me.host,
            "pid": me.pid,
            "ttl": int(ttl * 1000),
            "released": int(released),
            "version": time.time_ns(),
        },
    )
    for i, (lease, generation) in enumerate(sorted(rows.items())):
        values.append(
            f"({{l{i}:String}}, {{g{i}:UInt64}}, {{holder:String}}, {{run:String}}, {{host:String}}, "
            "{pid:UInt32}, now64(3) + toIntervalMillisecond({ttl:UInt64}), {released:UInt8}, "
            "{version:UInt64})"
        )
        parameters |= {f"l{i}": lease, f"g{i}": generation}
    client.command(
        f"INSERT INTO {qualified(LEASES)} {_COLUMNS} SETTINGS {_APPEND} VALUES {', '.join(values)}",
        parameters=parameters,
    )


def _claim(client: Client, lease: str, generation: int, me: Holder, ttl: float) -> None:
    """Claim ``generation`` of ``lease``: an insert deduplicated by a token naming both (one claim per generation
    survives, whoever sent it)."""
    client.command(
        f"INSERT INTO {qualified(LEASES)} {_COLUMNS} SETTINGS {_CLAIM} "
        "VALUES ({lease:String}, {generation:UInt64}, {holder:String}, {run:String}, {host:String}, {pid:UInt32}, "
        "now64(3) + toIntervalMillisecond({ttl:UInt64}), 0, 0)",
        parameters={
            "lease": lease,
            "generation": generation,
            "holder": me.owner,
            "run": me.run,
            "host": me.host,
            "pid": me.pid,
            "ttl": int(ttl * 1000),
            "token": f"{lease}#{generation}",
        },
    )


def acquire(
    client: Client,
    leases: Iterable[str],
    me: Holder,
    *,
    ttl: float,
    wait: float,
) -> dict[str, int]:
    """Hold every lease of ``leases`` (claim its next generation), waiting up to ``wait`` seconds for other holders.

    In name order: the free ones up to the first another run holds are claimed together (their states read once, and
    once more to see which claims won), then that one is waited for; so two runs never wait on each other in a circle.

    Returns:
        The generation held, per lease.

    Raises:
        LeaseHeld: Another run held one for longer than ``wait`` (those this call took are released).
    """
    wanted = sorted(set(leases))
    held: dict[str, int] = {}
    deadline = time.monotonic() + wait
    said: set[str] = set()
    while pending := [lease for lease in wanted if lease not in held]:
        states = read(client, pending)
        claims: dict[str, int] = {}
        blocked: LeaseState | None = None
        for lease in pending:
            state = states.get(lease)
            if state is not None and state.holder.run == me.run and not state.released:
                held[lease] = state.generation  # this run holds it already
            elif state is None or state.free_for(me):
                claims[lease] = (state.generation if state else 0) + 1
            else:
                blocked = state
                break
        for lease, generation in claims.items():
            _claim(client, lease, generation, me, ttl)
        won = read(client, list(claims)) if claims else {}
        held |= {
            lease: g
            for lease, g in claims.items()
            if (w := won.get(lease)) is not None and w.generation == g and w.holder.run == me.run
        }
        if blocked is None or any(lease not in held for lease in claims):
            continue  # all taken, or a claim lost to another run: read again
        if time.monotonic() >= deadline:
            release(client, held, me)
            raise LeaseHeld(
                f"{blocked.lease.split(':', 1)[1]} is being rebuilt by {blocked.holder.describe()} (its lease runs "
                f"until {blocked.expires_at:%Y-%m-%d %H:%M:%S} UTC unless renewed); this run waited {wait:.0f}s and "
                "changed nothing. Wait for that run to finish and retry (a killed run's lease ends at that time)."
            )
        if blocked.lease not in said:
            _LOG.info(f"waiting for {blocked.lease}: held by {blocked.holder.describe()}")
            said.add(blocked.lease)
        time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
    return held


def renew(client: Client, held: dict[str, int], me: Holder, ttl: float) -> None:
    """Extend every lease of ``held`` (lease → generation) by ``ttl`` from now."""
    _write(client, held, me, ttl)


def release(client: Client, held: dict[str, int], me: Holder) -> None:
    """Give every lease of ``held`` up."""
    _write(client, held, me, 0, released=True)


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
def holding(
    connect: ClientFactory,
    leases: Iterable[str],
    me: Holder,
    *,
    ttl: float,
    wait: float,
    renewer: ClientFactory | None = None,
    on_held: Callable[[Client], None] | None = None,
    on_release: Callable[[Client], None] | None = None,
) -> Iterator[dict[str, int]]:
    """Hold every lease of ``leases`` for the block (:func:`acquire`).

    Args:
        connect: Opens a client for the claims (then ``on_held`` runs on it) and for the release.
        renewer: Opens a client of its own for each renewal, from a thread that renews the leases every ``ttl / 3``
            seconds (:func:`renewed`); without one the leases last ``ttl`` (callers that hold them for less).
        on_held: Work to do once every lease is held, on the client that took them (a killed run's leftovers).
        on_release: Work to do on the client that releases them, before (what the run settles at its end).

    Raises:
        LeaseHeld: One of them stayed held by another run for longer than ``wait`` (those taken are released).
    """
    held: dict[str, int] = {}
    try:
        with connect.get_client() as client:
            held = acquire(client, leases, me, ttl=ttl, wait=wait)
            if on_held is not None:
                on_held(client)
        with renewed(renewer, held, me, ttl):
            yield held
    finally:
        if held:
            with connect.get_client() as client:
                try:
                    if on_release is not None:
                        on_release(client)
                finally:
                    release(client, held, me)


@contextmanager
def renewed(renewer: ClientFactory | None, held: dict[str, int], me: Holder, ttl: float) -> Iterator[None]:
    """``held`` renewed every ``ttl / 3`` seconds for the block, from a thread opening a client of ``renewer``'s for
    each renewal (nothing without a renewer, or with nothing held)."""
    if renewer is None or not held:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(
        target=_renew_every, args=(renewer, dict(held), me, ttl, stop), daemon=True, name="chmv-lease-renewer"
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _renew_every(connect: ClientFactory, held: dict[str, int], me: Holder, ttl: float, stop: threading.Event) -> None:
    while not stop.wait(ttl / 3):
        try:
            with connect.get_client() as client:
                renew(client, held, me, ttl)
        except Exception:  # noqa: BLE001 - a missed renewal is retried at the next period; the lease lasts ttl
            continue
