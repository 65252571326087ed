"""What engine operations need to open ClickHouse: anything with ``get_client()`` (the Dagster resource is one)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from clickhouse_connect.driver.client import Client


class ClientFactory(Protocol):
    """Opens a client for one use (``with factory.get_client() as client: …``) and closes it after.

    ``resources.clickhouse.ClickHouseResource`` is the implementation; engine operations that hold a
    client only for part of their work (Spark staging in between) take a factory instead of a client.
    """

    def get_client(self, *, lock_timeout_seconds: float | None = None) -> AbstractContextManager[Client]:
        """A client for one use; the embedded engine is held for the duration."""
        ...
