"""How every sensor opens ClickHouse: a short wait for the embedded engine, a time budget per tick, a skip with the reason;
and how it reads its cursor (:func:`tick_cursor`).

Dagster ends a sensor evaluation that runs past its deadline (60 s unless ``DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS``
says otherwise) with an error and no cursor. A tick therefore gets a :class:`TickBudget` that ends well before
it: every call it makes is bounded by what is left (the client's read timeout and ``max_execution_time``), and
a tick that runs out skips with the reason, keeping its cursor, so the next tick catches up.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError
from dagster import SensorEvaluationContext

from chmv_assets.engine.health.cursors import DecodedCursor, decode_cursor
from chmv_assets.engine.server_errors import Code, is_code
from chmv_assets.errors import EngineBusyError
from resources.clickhouse import ClickHouseResource

#: How long a sensor waits for the embedded engine before skipping the tick.
SENSOR_LOCK_SECONDS = 2.0
#: What a tick leaves before Dagster's deadline: to return its result and cursor.
DEADLINE_MARGIN_SECONDS = 15.0
#: The least a tick's calls are given, whatever the deadline.
MIN_CALL_SECONDS = 2.0


class SensorSkip(Exception):
    """The engine is busy, the server unreachable or silent, or the tick's time is spent: skip the tick with this
    reason (the cursor is kept, so the next tick catches up)."""


def dagster_deadline_seconds() -> float:
    """Seconds Dagster gives one sensor evaluation (its gRPC timeout for sensors)."""
    for name in ("DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS", "DAGSTER_GRPC_TIMEOUT_SECONDS"):
        value = os.environ.get(name)
        if value:
            try:
                return float(value)
            except ValueError:
                continue
    return 60.0


@dataclass
class TickBudget:
    """The time one tick may spend, ending :data:`DEADLINE_MARGIN_SECONDS` before Dagster's deadline.

    Attributes:
        seconds: The budget.
        started: ``time.monotonic()`` at the start of the tick.
    """

    seconds: float = field(
        default_factory=lambda: max(MIN_CALL_SECONDS, dagster_deadline_seconds() - DEADLINE_MARGIN_SECONDS)
    )
    started: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def check(self, doing: str) -> None:
        """Raise :class:`SensorSkip` when the budget is spent, naming what the tick was ``doing``."""
        if self.remaining() <= 0:
            raise SensorSkip(
                f"the tick's {self.seconds:.0f}s budget (Dagster's sensor deadline minus "
                f"{DEADLINE_MARGIN_SECONDS:.0f}s) was spent before {doing}; the next tick resumes"
            )


@contextmanager
def sensor_client(
    clickhouse: ClickHouseResource, context: SensorEvaluationContext, budget: TickBudget | None = None
) -> Iterator:
    """A client for one tick; :class:`SensorSkip` when the embedded engine is busy, the server unreachable or
    silent past the tick's budget, or a statement ran out of it."""
    budget = budget or TickBudget()
    limit = max(MIN_CALL_SECONDS, budget.remaining())
    try:
        with clickhouse.get_client(
            lock_timeout_seconds=min(SENSOR_LOCK_SECONDS, limit),
            read_timeout_seconds=limit,
            statement_timeout_seconds=limit,
        ) as client:
            yield client
    except EngineBusyError as err:
        context.log.info(f"skipping the tick, the embedded engine is busy: {err}")
        raise SensorSkip(f"embedded engine busy (a run holds it), catching up next tick: {err}") from err
    except OperationalError as err:
        context.log.error(f"ClickHouse unreachable or silent: {err}")
        raise SensorSkip(
            f"ClickHouse unreachable or silent for the tick's {limit:.0f}s (connect/read timeout), retrying next "
            f"tick: {_first_line(err)}"
        ) from err
    except DatabaseError as err:
        if not is_code(err, Code.TIMEOUT_EXCEEDED):
            raise
        context.log.warning(f"a statement ran out of the tick's time: {err}")
        raise SensorSkip(
            f"a statement ran past the tick's {limit:.0f}s (max_execution_time), retrying next tick: {_first_line(err)}"
        ) from err


def tick_cursor(context: SensorEvaluationContext) -> DecodedCursor:
    """The tick's cursor, decoded (:mod:`chmv_assets.engine.health.cursors`; ``.of(version)`` is its data in that format).
    One that cannot be read is logged and reads as none: the sensor starts afresh."""
    decoded = decode_cursor(context.cursor)
    if decoded.unreadable:
        context.log.warning(f"ignoring an unreadable cursor: {(context.cursor or '')[:200]}")
    return decoded


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__
