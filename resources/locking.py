"""A cross-process lock for the embedded engine, shared by every thread of a process.

chdb lets one OS process own an engine path at a time. Dagster runs several processes (webserver,
daemon, code server, one per run), so every use of the embedded engine holds an exclusive file lock on
``<path>.lock`` (``filelock.FileLock``: ``flock`` on Unix) for the duration of the use. Within a process,
uses nest and run side by side (chdb shares one engine between the handles of a process): the lock is
re-entrant across threads (``thread_local=False``), taken by the first use and released by the last.

filelock has no fairness, so a turnstile on ``<path>.lock.turn`` keeps a busy process from starving
the others: a process that does not hold the engine yet takes the turnstile first and keeps it while it
waits for the engine, so a process that just released the engine must wait behind it to take it again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from filelock import FileLock, Timeout

from chmv_assets.errors import EngineBusyError

_POLL_SECONDS = 0.02


def _write_owner(fd: int) -> None:
    """``on_acquired`` hook: record this process as the holder in the lock file (read by waiters' errors)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _engine_file_lock(lock_path: str) -> FileLock:
    # One instance per path and process (is_singleton; filelock builds a fresh one after a fork), re-entrant
    # across the threads of the process (thread_local=False): the first use takes the flock, the last drops it.
    return FileLock(
        lock_path, thread_local=False, is_singleton=True, poll_interval=_POLL_SECONDS, on_acquired=_write_owner
    )


def _turn_file_lock(lock_path: str) -> FileLock:
    return FileLock(lock_path + ".turn", thread_local=False, is_singleton=True, poll_interval=_POLL_SECONDS)


@contextmanager
def engine_lock(path: str, timeout: float) -> Iterator[None]:
    """Hold the embedded engine at ``path`` for this process; wait up to ``timeout`` seconds for it.

    Raises:
        EngineBusyError: Another process kept the engine for longer than ``timeout``.
    """
    lock_path = os.path.realpath(path) + ".lock"
    engine = _engine_file_lock(lock_path)
    deadline = time.monotonic() + timeout
    try:
        if engine.is_locked:  # another use in this process holds it: join it
            engine.acquire(timeout=timeout)
        else:
            with _turn_file_lock(lock_path).acquire(timeout=timeout):
                engine.acquire(timeout=max(0.0, deadline - time.monotonic()))
    except Timeout:
        raise EngineBusyError(
            f"the embedded ClickHouse engine at {lock_path.removesuffix('.lock')} is in use by "
            f"process {_owner(lock_path)} and stayed busy for {timeout:.0f}s; wait for that run to end, "
            "raise lock_timeout_seconds, or point the resource at a ClickHouse server (http://…)"
        ) from None
    try:
        yield
    finally:
        engine.release()


def _owner(lock_path: str) -> str:
    try:
        with open(lock_path, encoding="utf-8") as fh:
            return fh.read().strip() or "unknown"
    except OSError:
        return "unknown"
