"""How every sensor opens ClickHouse: a short wait for the embedded engine, and a skip with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from clickhouse_connect.driver.exceptions import OperationalError
from dagster import SensorEvaluationContext

from chmv_assets.errors import EngineBusyError
from resources.clickhouse import ClickHouseResource

#: How long a sensor waits for the embedded engine before skipping the tick.
SENSOR_LOCK_SECONDS = 2.0


class SensorSkip(Exception):
    """The engine is busy or unreachable: skip the tick with this reason (the cursor is kept, so the next tick catches up)."""


@contextmanager
def sensor_client(clickhouse: ClickHouseResource, context: SensorEvaluationContext) -> Iterator:
    """A client for one tick; :class:`SensorSkip` when the embedded engine is busy or the server unreachable."""
    try:
        with clickhouse.get_client(lock_timeout_seconds=SENSOR_LOCK_SECONDS) as client:
            yield client
    except EngineBusyError as err:
        context.log.info(f"skipping the tick, the embedded engine is busy: {err}")
        raise SensorSkip(f"embedded engine busy (a run holds it), catching up next tick: {err}") from err
    except OperationalError as err:
        context.log.error(f"ClickHouse unreachable: {err}")
        raise SensorSkip(f"ClickHouse unreachable, retrying next tick: {err}") from err
