"""The ingestion cutoff that keeps a backfill exact while rows keep arriving (docs/rebuilds.md, "Backfill protocol").

Two pieces:

* the **gate** of a source table: an exclusive lock that every chmv writer into that source holds
  around its insert (ingestion) and around the read-source-then-swap step of a backfill, so no
  insert lands between the snapshot a backfill reads and the partition swap it does (a rebuild waits for the
  server's room before it takes the gate, never while holding it). Its holder writes who it is and what it does
  beside it (``<gate>.holder``): one waiting for the gate, or giving up, names the holder;
* the **cutoff** of a source: ``watermark - late tolerance``. Ingestion only ever inserts rows with
  event time ``> watermark - tolerance`` (re-checked under the gate at insert time), and the watermark
  never goes back, so once a backfill has read the cutoff no row at or before it can reach the source
  any more: those rows come from the landing zone, the rows after it from the source table itself.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime, timedelta
from pathlib import Path

from clickhouse_connect.driver.client import Client
from filelock import FileLock, Timeout

from chmv_assets import settings
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.names import ref_slug
from chmv_assets.engine.clock import server_zone, wall
from chmv_assets.engine.watermarks import COMMITTED, Watermark, read_watermark, write_watermark
from chmv_assets.errors import EngineBusyError
from chmv_assets.sql.quoting import qualified, quote

_LOG = logging.getLogger(__name__)


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
def source_gate(sources: Iterable[ObjectRef], timeout: float = 600.0, *, holder: str = "") -> Iterator[None]:
    """Hold the write gate of each source (in name order, so two holders never deadlock).

    Re-entrant within a thread; exclusive across threads and processes (``filelock``: one ``flock`` per holding
    thread). Take it before opening a ClickHouse client, never while holding one, to keep the lock order fixed.

    Args:
        holder: What the holder does (``chmv rebuild: analytics.t 2026-08-03: read and swap``), written beside the gate
            with its process and thread for those who wait for it.

    Raises:
        EngineBusyError: Another writer held a gate for longer than ``timeout`` seconds (named as it said it was).
    """
    with ExitStack() as stack:
        for source in sorted(set(sources), key=lambda r: r.fqn):
            stack.enter_context(_one_gate(source, timeout, holder))
        yield


def gate_holder(source: ObjectRef) -> str:
    """Who holds the write gate of ``source`` as the holder wrote it (``pid 123, thread MainThread: chmv rebuild …,
    for 12s``), or that it did not say."""
    try:
        said = json.loads(Path(_gate_path(source) + ".holder").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "a writer that did not say who it is (not through chmv's gate, or a chmv older than the holder notes)"
    what = said.get("holder") or "a chmv writer"
    return f"pid {said.get('pid')}, thread {said.get('thread')}: {what}, for {time.time() - float(said.get('since', 0)):.0f}s"


def _say_holder(path: str, holder: str) -> None:
    note = {"pid": os.getpid(), "thread": threading.current_thread().name, "holder": holder, "since": time.time()}
    temporary = f"{path}.holder.{os.getpid()}.{threading.get_ident()}"
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(note, out)
    os.replace(temporary, f"{path}.holder")


@contextmanager
def _one_gate(source: ObjectRef, timeout: float, holder: str) -> Iterator[None]:
    path = _gate_path(source)
    # One instance per path (is_singleton) with a per-thread hold count (thread_local): re-entrant in the holding
    # thread, while another thread's attempt opens its own descriptor and waits on the flock like another process.
    gate = FileLock(path, is_singleton=True, poll_interval=0.02)
    try:
        gate.acquire(timeout=0)
    except Timeout:
        if timeout > 0:
            _LOG.info(
                f"waiting for the write gate of {source.fqn} (at most {timeout:.0f}s): held by {gate_holder(source)}"
            )
        try:
            gate.acquire(timeout=timeout)
        except Timeout:
            raise EngineBusyError(
                f"the write gate of {source.fqn} ({path}) stayed held for {timeout:.0f}s by {gate_holder(source)}; "
                "wait for it to finish and retry"
            ) from None
    outer = gate.lock_counter == 1  # the first hold of this thread: it says who holds the gate
    if outer:
        _say_holder(path, holder)
    try:
        yield
    finally:
        if outer:
            with suppress(OSError):
                os.remove(f"{path}.holder")
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
    mark = read_watermark(client, source)
    if mark is not None and (mark.last_processed_ts is not None or establish_at is None):
        return mark
    start = source_max_time(client, source, time_column) or establish_at
    if start is None:
        return mark
    return write_watermark(
        client,
        source,
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
