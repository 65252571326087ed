"""What engine operations need to open ClickHouse: anything with ``get_client()`` (the Dagster resource is one); the
settings of a statement that binds many names; a one-number answer, typed."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from clickhouse_connect.driver.client import Client

#: One statement binding the names of hundreds of tables (a UNION ALL over hundreds of targets, a system table read
#: for all of them) exceeds the default 256 KiB query size and AST limits.
BIG_QUERY_SETTINGS = {
    "max_query_size": 64 * 1024 * 1024,
    "max_ast_elements": 10_000_000,
    "max_expanded_ast_elements": 10_000_000,
}


def command_int(client: Client, sql: str) -> int:
    """The whole number a one-value statement answers (``SELECT count() …``): ``Client.command`` answers a number, a
    string, rows or a summary, by what the statement returns."""
    return int(str(client.command(sql)))


class ClientFactory(Protocol):
    """Opens a client for one use (``with factory.get_client() as client: …``) and closes it after.

    ``resources.clickhouse.ClickHouseResource`` is the implementation; engine operations that hold a
    client only for part of their work (Spark staging in between) take a factory instead of a client.
    """

    def get_client(self, *, lock_timeout_seconds: float | None = None) -> AbstractContextManager[Client]:
        """A client for one use; the embedded engine is held for the duration."""
        ...
