"""ClickHouseResource: one client API over a ClickHouse server or the embedded chdb engine.

Connection settings, one precedence each (docs/configuration.md, "Connection settings, secrets and time limits"):

- **credentials**: the ``username`` / ``password`` fields (pass them with ``EnvVar``, so the UI shows the
  variable's name, never its value), else the DSN's ``user:password@``, else none. A DSN is shown in the UI
  as written: keep credentials out of it, or pass the whole DSN with ``EnvVar`` (as the code location does
  with ``$CHMV_CLICKHOUSE_DSN``);
- **session database** (where unqualified names resolve): the ``database`` field, else the DSN's
  ``/database``, else ``default``. chmv opens every session of a project in its ``default_database``
  (:func:`for_project`), so the verbatim DDL it executes lands where the model says (until that database exists,
  before ``chmv apply`` creates it, a session uses the server's default);
- **time limits**: ``connect_timeout_seconds`` / ``read_timeout_seconds`` (the DSN's ``connect_timeout`` /
  ``send_receive_timeout`` query parameters override them), and ``statement_timeout_seconds``, ClickHouse's
  ``max_execution_time`` for every statement (a ``max_execution_time`` in ``settings`` wins). A long statement
  does not hit the read timeout: the server sends progress headers more often than it (clickhouse-connect sets
  ``http_headers_progress_interval_ms`` from it), so the read timeout only ends a silent server;
- **time zone**: every client reads times in the server's zone (``tz_source="server"``), whatever the
  process's ``TZ`` (see :mod:`chmv_assets.engine.clock`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ProgrammingError
from dagster import ConfigurableResource, EnvVar
from pydantic import Field

from chmv_assets import settings
from chmv_assets.errors import ChmvError, EngineBusyError
from chmv_assets.settings import redact_dsn
from resources.locking import engine_lock

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

            ClickHouseResource(dsn="https://ch.example.com:8443/analytics", username=EnvVar("CLICKHOUSE_USER"),
                               password=EnvVar("CLICKHOUSE_PASSWORD"))
    """

    dsn: str | None = Field(
        default=None,
        description="http(s)://host:port[/database][?connect_timeout=…&send_receive_timeout=…] for a server, "
        "chdb:///abs/path for the embedded engine. Shown in the UI as written: no credentials in it (use the "
        "username/password fields with EnvVar, or pass the DSN itself with EnvVar). Default: the embedded "
        "engine under the state directory ($CHMV_STATE_DIR or .chmv/).",
    )
    username: str | None = Field(default=None, description="Server user (wins over the DSN's); pass it with EnvVar.")
    password: str | None = Field(
        default=None,
        description="Server password (wins over the DSN's); pass it with EnvVar. The UI masks it.",
        json_schema_extra={"dagster__is_secret": True},
    )
    database: str | None = Field(
        default=None,
        description="Session database, where unqualified names resolve. Default: the DSN's /database, else "
        "'default'; chmv sets it to the project's default_database.",
    )
    lock_timeout_seconds: float = Field(
        default=600.0, description="How long a use waits for the embedded engine when another process holds it."
    )
    connect_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Seconds to establish a connection to a server (DSN: connect_timeout)."
    )
    read_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a server may stay silent before a call fails (DSN: send_receive_timeout). Long "
        "statements are not cut by it: the server sends progress headers more often.",
    )
    statement_timeout_seconds: float = Field(
        default=3600.0,
        ge=0,
        description="ClickHouse's max_execution_time for every statement (0: no limit); a rebuild of a "
        "partition is one statement.",
    )
    settings: dict[str, Any] = Field(default_factory=dict, description="ClickHouse settings for every query.")

    @property
    def resolved_dsn(self) -> str:
        return _value(self.dsn) or f"chdb://{settings.state_dir() / 'chdb'}"

    @property
    def is_embedded(self) -> bool:
        return self.resolved_dsn.startswith("chdb:")

    @property
    def embedded_path(self) -> str | None:
        """Filesystem path of the embedded engine, or None for a server."""
        if not self.is_embedded:
            return None
        rest = self.resolved_dsn.removeprefix("chdb://").partition("?")[0]  # the query is the driver's, not the path
        return rest if rest.startswith("/") else str(Path(rest).resolve())

    @property
    def session_database(self) -> str | None:
        """The ``database`` field, else the DSN's ``/database``; None when neither names one (``default``)."""
        if self.database:
            return _value(self.database)
        if self.is_embedded:
            return None
        path = urlsplit(self.resolved_dsn).path.strip("/")
        return unquote(path.split("/")[0]) or None

    @property
    def shown_dsn(self) -> str:
        """The DSN without credentials or secret query values: for logs, messages and metadata
        (:func:`chmv_assets.settings.redact_dsn`)."""
        return redact_dsn(self.resolved_dsn)

    def client_settings(self, *, statement_timeout_seconds: float | None = None) -> dict[str, Any]:
        """The ClickHouse settings of every statement: ``settings`` plus ``max_execution_time``."""
        limit = self.statement_timeout_seconds if statement_timeout_seconds is None else statement_timeout_seconds
        settings = dict(self.settings)
        if limit and "max_execution_time" not in settings:
            settings["max_execution_time"] = max(1, int(limit))
        return settings

    @contextmanager
    def get_client(
        self,
        *,
        lock_timeout_seconds: float | None = None,
        read_timeout_seconds: float | None = None,
        statement_timeout_seconds: float | None = None,
    ) -> Iterator[Client]:
        """Open a client for one use and close it after.

        Args:
            lock_timeout_seconds: Override of ``lock_timeout_seconds`` for this use (sensors wait briefly).
            read_timeout_seconds: Override of ``read_timeout_seconds`` (a sensor tick's remaining time).
            statement_timeout_seconds: Override of ``statement_timeout_seconds`` (ditto).

        Raises:
            EngineBusyError: The embedded engine stayed in use by another process past the timeout.
            OperationalError: The server did not answer within the connect or read timeout.
        """
        settings = self.client_settings(statement_timeout_seconds=statement_timeout_seconds)
        if not self.is_embedded:
            client = self._server_client(settings, read_timeout_seconds)
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
                    query = self.resolved_dsn.partition("?")[2]
                    dsn = f"chdb://{path}" + (f"?{query}" if query else "")
                    client = clickhouse_connect.get_client(dsn=dsn, settings=settings, tz_source="server")
            except ProgrammingError as err:
                raise EngineBusyError(
                    f"the embedded engine at {path} is open in a process that does not use chmv's lock "
                    f"(a notebook or a chdb session?): close it and retry. Engine said: {err}"
                ) from err
            try:
                database = self.session_database
                if database and database != "default" and _database_exists(client, database):
                    client.database = database
                yield client
            finally:
                client.close()

    def server_client_args(self, *, read_timeout_seconds: float | None = None) -> dict[str, Any]:
        """The arguments of ``clickhouse_connect.get_client`` for a server, precedence applied (module docstring)."""
        parts = urlsplit(self.resolved_dsn)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        connect = float(query.pop("connect_timeout", self.connect_timeout_seconds))
        read = float(query.pop("send_receive_timeout", self.read_timeout_seconds))
        if read_timeout_seconds is not None:
            read = min(read, read_timeout_seconds)
        # credentials and the database are passed explicitly: their precedence is chmv's, not the driver's
        netloc = parts.netloc.rsplit("@", 1)[-1]
        plain = urlunsplit(parts._replace(netloc=netloc, path="", query=urlencode(query)))
        return {
            "dsn": plain,
            "username": _value(self.username) or unquote(parts.username or "") or None,
            "password": _value(self.password) or unquote(parts.password or ""),
            "connect_timeout": max(1, round(connect)),
            "send_receive_timeout": max(1, round(read)),
            "tz_source": "server",
        }

    def _server_client(self, settings: dict[str, Any], read_timeout_seconds: float | None) -> Client:
        client = clickhouse_connect.get_client(
            settings=settings, **self.server_client_args(read_timeout_seconds=read_timeout_seconds)
        )
        database = self.session_database
        if database and database != "default" and _database_exists(client, database):
            client.database = database  # not yet created (before `chmv apply`): the server's default until then
        return client


def _value(value: Any) -> Any:
    """A field's value: an ``EnvVar`` read from the environment (the resource before Dagster resolves it)."""
    if isinstance(value, EnvVar):
        return value.get_value()
    return value


def _database_exists(client: Client, database: str) -> bool:
    rows = client.query("SELECT 1 FROM system.databases WHERE name = {d:String}", parameters={"d": database})
    return bool(rows.result_rows)


def clickhouse_from_env(dsn: str | None = None) -> ClickHouseResource:
    """The resource the code location and the CLI use.

    Args:
        dsn: An explicit DSN (``--dsn``); default: ``$CHMV_CLICKHOUSE_DSN`` (passed as ``EnvVar``, so the UI shows
            the variable's name), else the embedded engine.

    ``$CLICKHOUSE_USER`` and ``$CLICKHOUSE_PASSWORD`` become the ``username`` / ``password`` fields (as ``EnvVar``)
    when they are set; unset, the DSN's own credentials (or none) apply.
    """
    credentials: dict[str, Any] = {}
    if settings.CLICKHOUSE_USER.get():
        credentials["username"] = EnvVar(settings.CLICKHOUSE_USER.name)
    if settings.CLICKHOUSE_PASSWORD.get():
        credentials["password"] = EnvVar(settings.CLICKHOUSE_PASSWORD.name)
    value = settings.clickhouse_dsn()
    if dsn is None and value:
        if value.startswith("chdb:"):
            return ClickHouseResource(dsn=value)
        return ClickHouseResource(dsn=EnvVar(settings.CLICKHOUSE_DSN.name), **credentials)
    if dsn is None or dsn.startswith("chdb:"):
        return ClickHouseResource(dsn=dsn)
    return ClickHouseResource(dsn=dsn, **credentials)


def for_project(
    resource: ClickHouseResource, default_database: str, *, where: str = "chmv.toml", server_version: str | None = None
) -> ClickHouseResource:
    """``resource`` with its sessions opened in the project's ``default_database``; on the embedded engine with
    chmv.toml's ``server_version``, with ClickHouse's ``compatibility`` setting at that version (the local twin
    behaves like the production server; a ``compatibility`` in ``settings`` wins).

    Unqualified names in the DDL resolve to ``default_database`` in chmv's model; the statements chmv executes
    verbatim must resolve them the same way on the server.

    Raises:
        ChmvError: The resource names another session database (its ``database`` field or the DSN's
            ``/database``): the two would resolve unqualified names differently.
    """
    if server_version is not None and resource.is_embedded and "compatibility" not in resource.settings:
        values = {name: getattr(resource, name) for name in type(resource).model_fields}
        resource = type(resource)(**{**values, "settings": {**resource.settings, "compatibility": server_version}})
    named = resource.session_database
    if named is not None and named != default_database:
        raise ChmvError(
            f"the ClickHouse resource's session database is {named!r} ({resource.shown_dsn}) but {where} has "
            f"default_database = {default_database!r}: unqualified names would resolve to two databases; make "
            "them the same (set default_database, or the DSN's /database)"
        )
    if named == default_database or (named is None and default_database == "default"):
        return resource
    values = {name: getattr(resource, name) for name in type(resource).model_fields}
    return type(resource)(**{**values, "database": default_database})
