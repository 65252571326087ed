"""Where chmv's progress messages go: its modules log to ``logging.getLogger(__name__)``; a caller picks the sink.

The engine, the check logic and Spark take no logging callback: each module writes to its own logger, all under
chmv's packages (:data:`LOGGERS`). Whoever runs them decides where the records go for the duration of a call:
the CLI prints them (:func:`chmv_assets.cli.main`), a Dagster op forwards them to its run's event log
(:func:`chmv_assets.orchestration.run_logs.forward_engine_logs`), a test collects them. Outside such a block
the records go wherever the process's logging is configured (by default: INFO nowhere).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

#: The top loggers of chmv's packages (every module logs to ``logging.getLogger(__name__)`` below one of them).
LOGGERS = ("chmv_assets", "spark", "asset_checks", "resources")

_lock = threading.Lock()
_open = 0  # blocks of engine_logs_to running, in every thread
_lowered: list[logging.Logger] = []
_quiet: ContextVar[bool] = ContextVar("chmv_quiet", default=False)


class _OnlyThread(logging.Filter):
    """Passes the records of one thread (the caller's: a sensor's tick or a run's op, not a neighbour's)."""

    def __init__(self, thread: int):
        super().__init__()
        self.thread = thread

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread == self.thread


@contextmanager
def engine_logs_to(handler: logging.Handler, *, this_thread_only: bool = False) -> Iterator[None]:
    """Hand the records of chmv's loggers (INFO and up, unless ``handler``'s level says more) to ``handler`` while
    the block runs.

    chmv's loggers are lowered to INFO meanwhile where nothing configured their level (a level set by the
    process's logging configuration is kept), and put back when the last such block ends.

    Args:
        handler: The sink.
        this_thread_only: Only the records of the thread that entered the block (a Dagster code server evaluates
            sensors in threads side by side).
    """
    global _open
    if this_thread_only:
        handler.addFilter(_OnlyThread(threading.get_ident()))
    loggers = [logging.getLogger(name) for name in LOGGERS]
    with _lock:
        if _open == 0:
            for logger in loggers:
                if logger.level == logging.NOTSET and logger.getEffectiveLevel() > logging.INFO:
                    logger.setLevel(logging.INFO)
                    _lowered.append(logger)
        _open += 1
        for logger in loggers:
            logger.addHandler(handler)
    try:
        yield
    finally:
        with _lock:
            for logger in loggers:
                logger.removeHandler(handler)
            _open -= 1
            if _open == 0:
                for logger in _lowered:
                    if logger.level == logging.INFO:
                        logger.setLevel(logging.NOTSET)
                _lowered.clear()


@contextmanager
def quiet() -> Iterator[None]:
    """chmv's sinks (:class:`LineHandler`: the CLI's output, a run's event log) leave out the messages below WARNING
    logged in the block by this thread: the details of a step its caller reports as a whole (``chmv apply``'s
    re-derivation batches). Other handlers of the process still see them."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


class LineHandler(logging.Handler):
    """Each record (INFO and up, outside :func:`quiet` blocks) as its message, with a traceback if it has one, to
    ``sink(level, line)``."""

    def __init__(self, sink: Callable[[int, str], None]):
        super().__init__(logging.INFO)
        self.sink = sink
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and _quiet.get():
            return
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - logging's own convention: a bad record never breaks the caller
            self.handleError(record)
            return
        self.sink(record.levelno, line)


@contextmanager
def engine_messages(say: Callable[[str], None], *, this_thread_only: bool = False) -> Iterator[None]:
    """Each message of chmv's loggers (INFO and up) as one line to ``say`` (``print``, ``list.append``…) while the
    block runs; see :func:`engine_logs_to`."""
    with engine_logs_to(LineHandler(lambda _level, line: say(line)), this_thread_only=this_thread_only):
        yield
