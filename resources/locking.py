"""A cross-process lock for the embedded engine, shared by every thread of a process.

chdb lets one OS process own an engine path at a time. Dagster runs several processes (webserver,
daemon, code server, one per run), so every use of the embedded engine takes an exclusive ``flock`` on
``<path>.lock`` for the duration of the use. Within a process, uses nest and run side by side (chdb
shares one engine between the handles of a process): the file lock is taken by the first use and
released by the last.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from chmv_assets.errors import EngineBusyError

_POLL_SECONDS = 0.02


@dataclass
class _Holder:
    fd: int
    users: int


_registry: dict[str, _Holder] = {}
_registry_lock = threading.Lock()


@contextmanager
def engine_lock(path: str, timeout: float) -> Iterator[None]:
    """Hold the embedded engine at ``path`` for this process; wait up to ``timeout`` seconds for it.

    Raises:
        EngineBusyError: Another process kept the engine for longer than ``timeout``.
    """
    lock_path = os.path.realpath(path) + ".lock"
    _acquire(lock_path, timeout)
    try:
        yield
    finally:
        _release(lock_path)


def try_flock(path: str) -> int | None:
    """An exclusively locked fd on ``path``, or None when another open file holds the lock."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def unflock(fd: int) -> None:
    """Release a lock taken by :func:`try_flock` and close its fd."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _acquire(lock_path: str, timeout: float) -> None:
    """Take the engine lock, first in line through a turnstile so that no process starves.

    A waiter holds ``<path>.lock.turn`` while it polls the engine lock; a process that just released
    the engine lock must pass the turnstile before taking it again, so the waiter gets its turn.
    """
    deadline = time.monotonic() + timeout
    turn_fd: int | None = None
    try:
        while True:
            with _registry_lock:
                holder = _registry.get(lock_path)
                if holder is not None:
                    holder.users += 1
                    return
                if turn_fd is None:
                    turn_fd = try_flock(lock_path + ".turn")
                fd = try_flock(lock_path) if turn_fd is not None else None
                if fd is not None:
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                    _registry[lock_path] = _Holder(fd=fd, users=1)
                    return
            if time.monotonic() >= deadline:
                raise EngineBusyError(
                    f"the embedded ClickHouse engine at {lock_path.removesuffix('.lock')} is in use by "
                    f"process {_owner(lock_path)} and stayed busy for {timeout:.0f}s; wait for that run to end, "
                    "raise lock_timeout_seconds, or point the resource at a ClickHouse server (http://…)"
                )
            time.sleep(_POLL_SECONDS)
    finally:
        if turn_fd is not None:
            unflock(turn_fd)


def _release(lock_path: str) -> None:
    with _registry_lock:
        holder = _registry[lock_path]
        holder.users -= 1
        if holder.users == 0:
            del _registry[lock_path]
            unflock(holder.fd)


def _owner(lock_path: str) -> str:
    try:
        with open(lock_path, encoding="utf-8") as fh:
            return fh.read().strip() or "unknown"
    except OSError:
        return "unknown"
