"""The ingestion cutoff that keeps a backfill exact while rows keep arriving (docs/rebuilds.md, "Backfill protocol").

Two pieces:

* the **gate** of a source table: an exclusive lock that every chmv writer into that source holds
  around its insert (ingestion) and around the read-source-then-swap step of a backfill, so no
  insert lands between the snapshot a backfill reads and the partition swap it does;
* the **cutoff** of a source: ``watermark - late tolerance``. Ingestion only ever inserts rows with
  event time ``> watermark - tolerance`` (re-checked under the gate at insert time), and the watermark
  never goes back, so once a backfill has read the cutoff no row at or before it can reach the source
  any more: those rows come from the landing zone, the rows after it from the source table itself.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta

from clickhouse_connect.driver.client import Client
from filelock import FileLock, Timeout

from chmv_assets import settings
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.names import ref_slug
from chmv_assets.engine.clock import server_zone, wall
from chmv_assets.engine.watermarks import COMMITTED, Watermark, read_watermark, write_watermark
from chmv_assets.errors import EngineBusyError
from chmv_assets.sql.quoting import qualified, quote


def ingestion_source_id(source: ObjectRef) -> str:
    """``source_id`` of a source's ingestion watermark (its ``target_table`` is the source itself)."""
    return f"landing:{source.fqn}"


def crash_point(name: str) -> None:
    """Die with SIGKILL here when ``$CHMV_CRASH_AT`` names this point (used by the kill tests)."""
    if name in settings.crash_points():
        os.kill(os.getpid(), signal.SIGKILL)


def _gate_path(source: ObjectRef) -> str:
    """``<state dir>/gates/<db>.<table>.lock``, one file per source (names through ``ref_slug``, so none collide)."""
    folder = settings.state_dir() / "gates"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / f"{ref_slug(source)}.lock")


@contextmanager
def source_gate(sources: Iterable[ObjectRef], timeout: float = 600.0) -> Iterator[None]:
    """Hold the write gate of each source (in name order, so two holders never deadlock).

    Re-entrant within a thread; exclusive across threads and processes (``filelock``: one ``flock`` per holding
    thread). Take it before opening a ClickHouse client, never while holding one, to keep the lock order fixed.

    Raises:
        EngineBusyError: Another writer held a gate for longer than ``timeout`` seconds.
    """
    with ExitStack() as stack:
        for source in sorted(set(sources), key=lambda r: r.fqn):
            stack.enter_context(_one_gate(source, timeout))
        yield


@contextmanager
def _one_gate(source: ObjectRef, timeout: float) -> Iterator[None]:
    path = _gate_path(source)
    # One instance per path (is_singleton) with a per-thread hold count (thread_local): re-entrant in the holding
    # thread, while another thread's attempt opens its own descriptor and waits on the flock like another process.
    gate = FileLock(path, is_singleton=True, poll_interval=0.02)
    try:
        gate.acquire(timeout=timeout)
    except Timeout:
        raise EngineBusyError(
            f"the write gate of {source.fqn} ({path}) stayed held for {timeout:.0f}s by another "
            "ingestion or backfill; wait for it to finish and retry"
        ) from None
    try:
        yield
    finally:
        gate.release()


def source_max_time(client: Client, source: ObjectRef, time_column: str) -> datetime | None:
    """Newest event time in the source table, None when it is empty."""
    rows = client.query(f"SELECT count(), max({quote(time_column)}) FROM {qualified(source)}").result_rows
    return rows[0][1] if rows and rows[0][0] else None


def source_min_time(client: Client, source: ObjectRef, time_column: str) -> datetime | None:
    """Oldest event time in the source table (the server's wall clock, as windows are), None when it is empty."""
    rows = client.query(f"SELECT count(), min({quote(time_column)}) FROM {qualified(source)}").result_rows
    return wall(rows[0][1], server_zone(client)) if rows and rows[0][0] else None


def current_watermark(
    client: Client, source: ObjectRef, time_column: str, *, establish_at: datetime | None = None
) -> Watermark | None:
    """The ingestion watermark of ``source``; call it under the source's gate.

    With no watermark yet, ingestion starts where the source table is (its newest event time):
    that watermark is written now, so the first load and any backfill agree on the cutoff. If the
    source is empty too, ``establish_at`` (a backfill's upper bound) is written instead; with neither,
    None (the first load reads the whole landing zone).
    """
    sid = ingestion_source_id(source)
    mark = read_watermark(client, sid, source.fqn)
    if mark is not None and (mark.last_processed_ts is not None or establish_at is None):
        return mark
    start = source_max_time(client, source, time_column) or establish_at
    if start is None:
        return mark
    return write_watermark(
        client,
        sid,
        source.fqn,
        last_processed_ts=start,
        batch_id="initial",
        status=mark.status if mark else COMMITTED,
        previous=mark,
    )


def cutoff_of(mark: Watermark | None, tolerance_minutes: int) -> datetime | None:
    """``watermark - tolerance``: no row at or before it is ever inserted into the source again."""
    if mark is None or mark.last_processed_ts is None:
        return None
    return mark.last_processed_ts - timedelta(minutes=tolerance_minutes)
