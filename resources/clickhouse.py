"""ClickHouseResource: one client API over a ClickHouse server or the embedded chdb engine."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ProgrammingError
from dagster import ConfigurableResource
from pydantic import Field

from chmv_assets.errors import EngineBusyError
from resources.locking import engine_lock
from resources.state import default_state_dir

_open_lock = threading.Lock()

#: Concurrency pool of every asset that opens ClickHouse: the demo instance limits it to one at a time.
CLICKHOUSE_POOL = "clickhouse"


class ClickHouseResource(ConfigurableResource):
    """ClickHouse through clickhouse-connect: a server (``http(s)://…``) or the embedded engine (``chdb:///path``).

    In embedded mode every use opens the engine under a cross-process lock and closes it after, so the
    processes of ``dagster dev`` (webserver, daemon, code server, runs) take turns instead of failing
    with chdb's "Cannot lock file" error. Against a server, retries are clickhouse-connect's own: urllib3
    retries connection errors, and read-only queries are replayed on 429/503/504 (``query_retries``), writes
    never; a ``Retry`` on a ``pool_mgr`` would be overridden by the per-request retries it passes.

    Example:
        .. code-block:: python

            ClickHouseResource(dsn="https://ch.example.com:8443", password=EnvVar("CLICKHOUSE_PASSWORD"))
    """

    dsn: str | None = Field(
        default=None,
        description="http(s)://host:port for a server, chdb:///abs/path for the embedded engine. "
        "Default: the embedded engine under the state directory ($CHMV_STATE_DIR or .chmv/).",
    )
    username: str | None = Field(default=None, description="Server user (ignored by the embedded engine).")
    password: str | None = Field(default=None, description="Server password; pass it with EnvVar.")
    database: str = Field(default="default", description="Database for unqualified names.")
    lock_timeout_seconds: float = Field(
        default=600.0, description="How long a use waits for the embedded engine when another process holds it."
    )
    settings: dict[str, Any] = Field(default_factory=dict, description="ClickHouse settings for every query.")

    @property
    def resolved_dsn(self) -> str:
        return self.dsn or f"chdb://{default_state_dir() / 'chdb'}"

    @property
    def is_embedded(self) -> bool:
        return self.resolved_dsn.startswith("chdb:")

    @property
    def embedded_path(self) -> str | None:
        """Filesystem path of the embedded engine, or None for a server."""
        if not self.is_embedded:
            return None
        rest = self.resolved_dsn.removeprefix("chdb://")
        return rest if rest.startswith("/") else str(Path(rest).resolve())

    @contextmanager
    def get_client(self, *, lock_timeout_seconds: float | None = None) -> Iterator[Client]:
        """Open a client for one use and close it after.

        Args:
            lock_timeout_seconds: Override of ``lock_timeout_seconds`` for this use (sensors wait briefly).

        Raises:
            EngineBusyError: The embedded engine stayed in use by another process past the timeout.
        """
        if not self.is_embedded:
            client = clickhouse_connect.get_client(
                dsn=self.resolved_dsn,
                username=self.username,
                password=self.password or "",
                database=self.database,
                settings=self.settings,
            )
            try:
                yield client
            finally:
                client.close()
            return
        path = self.embedded_path
        assert path is not None
        timeout = self.lock_timeout_seconds if lock_timeout_seconds is None else lock_timeout_seconds
        with engine_lock(path, timeout):
            os.makedirs(path, exist_ok=True)
            try:
                with _open_lock:
                    client = clickhouse_connect.get_client(dsn=f"chdb://{path}", settings=self.settings)
            except ProgrammingError as err:
                raise EngineBusyError(
                    f"the embedded engine at {path} is open in a process that does not use chmv's lock "
                    f"(a notebook or a chdb session?): close it and retry. Engine said: {err}"
                ) from err
            try:
                if self.database != "default":
                    client.database = self.database
                yield client
            finally:
                client.close()
