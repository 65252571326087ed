"""chmv's log messages in a Dagster run's event log: what the engine says while an op calls it.

The engine logs to Python loggers (:mod:`chmv_assets.engine_logs`) and takes no logging callback; an op wraps its
engine calls in :func:`forward_engine_logs`, and every record of chmv's loggers from the op's thread reaches
``context.log`` at its level: the run's event log in the UI, whatever the instance's ``managed_python_loggers``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dagster import AssetExecutionContext, OpExecutionContext, SensorEvaluationContext

from chmv_assets.engine_logs import LineHandler, engine_logs_to


@contextmanager
def forward_engine_logs(
    context: OpExecutionContext | AssetExecutionContext | SensorEvaluationContext,
) -> Iterator[None]:
    """Forward chmv's log records (INFO and up) of this thread to ``context.log`` while the block runs.

    Only the thread that entered the block: an op's, or a sensor tick's (a code server evaluates sensors side by side
    in threads, and each tick's log gets its own messages only).
    """
    with engine_logs_to(LineHandler(context.log.log), this_thread_only=True):
        yield
