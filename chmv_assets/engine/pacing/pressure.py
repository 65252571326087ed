"""How loaded the server is, as far as an insert is concerned: part limits, the busiest partitions, the merge pool.

ClickHouse delays an insert into a MergeTree table whose busiest partition holds ``parts_to_delay_insert`` active
parts and refuses it ("Too many parts") at ``parts_to_throw_insert`` (checked once, before the insert writes its
first block); the limits are the server's (``system.merge_tree_settings``) unless the table's own SETTINGS say
otherwise. Merges bring the count down, run by the merge and mutation pool (``system.metrics``). This module reads
those facts, one statement each (``chmv_assets.sql.health_sql``); :mod:`chmv_assets.engine.pacing.pacer` decides with them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.health_sql import (
    PART_LIMITS,
    POOL_METRICS,
    bind,
    limits_sql,
    load_sql,
    merges_sql,
    table_settings_sql,
)

#: What a server without the settings tables would use (ClickHouse 26's defaults).
DEFAULT_LIMITS = {"parts_to_delay_insert": 1000, "parts_to_throw_insert": 3000, "max_parts_in_total": 100000}


@dataclass(frozen=True)
class ServerLimits:
    """The server-wide facts an insert is held to (read once per session).

    Attributes:
        parts: The MergeTree defaults of ``parts_to_delay_insert``, ``parts_to_throw_insert``, ``max_parts_in_total``.
        max_partitions_per_insert_block: The session's limit of partitions per inserted block (0: none).
        background_pool_size: The merge pool's threads (``background_pool_size``; 0 when the server does not say).
    """

    parts: dict[str, int]
    max_partitions_per_insert_block: int
    background_pool_size: int


@dataclass(frozen=True)
class Load:
    """One look at the server.

    Attributes:
        busiest: Per table, its busiest partition (``partition_id``) and that partition's active parts.
        pool_busy: Merge and mutation tasks running.
        pool_size: Merge and mutation tasks the pool runs at once (0: unknown, e.g. an idle embedded engine).
        running: chmv's inserts and merges running on the server (None: not read, on the embedded engine).
        at: ``time.monotonic()`` of the look.
    """

    busiest: dict[ObjectRef, tuple[str, int]] = field(default_factory=dict)
    pool_busy: int = 0
    pool_size: int = 0
    running: int | None = None
    at: float = 0.0

    def parts(self, table: ObjectRef) -> int:
        """Active parts of ``table``'s busiest partition (0 when it has none)."""
        return self.busiest.get(table, ("", 0))[1]


def embedded(client: Client) -> bool:
    """Whether ``client`` is the embedded engine (chdb): one process, no Keeper, no ``query_id``s."""
    return str(getattr(client, "uri", "") or "").startswith("chdb")


def server_limits(client: Client) -> ServerLimits:
    """The server's part limits, ``max_partitions_per_insert_block`` and ``background_pool_size`` (one statement)."""
    return read_limits(client)[0]


def read_limits(
    client: Client, tables: Iterable[ObjectRef] = ()
) -> tuple[ServerLimits, dict[ObjectRef, dict[str, int]]]:
    """:func:`server_limits` and, in the same statement, :func:`table_limits` of ``tables``."""
    tables = list(tables)
    rows = client.query(limits_sql(tables=bool(tables)), parameters=bind(tables) if tables else None).result_rows
    values = {str(name): int(value) for database, name, _text, value in rows if not database}
    server = ServerLimits(
        parts={name: values.get(name, DEFAULT_LIMITS[name]) for name in PART_LIMITS},
        max_partitions_per_insert_block=values.get("max_partitions_per_insert_block", 100),
        background_pool_size=values.get("background_pool_size", 0),
    )
    wanted = set(tables)
    limits = {}
    for database, name, engine_full, _value in rows:
        ref = ObjectRef(database=str(database), name=str(name))
        if database and ref in wanted:
            limits[ref] = {**server.parts, **settings_of(str(engine_full))}
    return server, limits


def settings_of(engine_full: str) -> dict[str, int]:
    """The part limits a table's ``engine_full`` (``… SETTINGS parts_to_delay_insert = 3, …``) sets itself."""
    found = {}
    for name in PART_LIMITS:
        match = re.search(rf"\b{name}\s*=\s*'?(\d+)'?", engine_full)
        if match:
            found[name] = int(match.group(1))
    return found


def table_limits(client: Client, tables: Iterable[ObjectRef], server: ServerLimits) -> dict[ObjectRef, dict[str, int]]:
    """Per table that exists, the part limits it is held to: the server's, overridden by its own SETTINGS."""
    tables = list(tables)
    if not tables:
        return {}
    rows = client.query(table_settings_sql(), parameters=bind(tables)).result_rows
    wanted = set(tables)
    limits = {}
    for database, name, engine_full in rows:
        ref = ObjectRef(database=str(database), name=str(name))
        if ref in wanted:
            limits[ref] = {**server.parts, **settings_of(str(engine_full))}
    return limits


def read_load(
    client: Client,
    tables: Iterable[ObjectRef],
    *,
    running: bool | None = None,
    partitions: Mapping[ObjectRef, Collection[str]] | None = None,
) -> Load:
    """The busiest partition of each of ``tables``, the merge pool, and (on a server) chmv's running writes.

    Args:
        running: Count chmv's running inserts (``system.processes``); default: on a server only.
        partitions: Per table, the only partitions (``partition_id``) that count: those an insert writes; a table
            not in it counts every partition.
    """
    tables = list(tables)
    count_running = not embedded(client) if running is None else running
    params: dict = bind(tables) if tables else {"dbs": [""], "names": [""]}  # no table: the pool and the writes alone
    if partitions is not None:
        params["whole"] = [t.fqn for t in tables if t not in partitions]
        params["keys"] = [f"{t.fqn}/{p}" for t, ids in partitions.items() for p in ids]
    sql = load_sql(running=count_running, partitions=partitions is not None)
    rows = client.query(sql, parameters=params).result_rows
    wanted = set(tables)
    busiest: dict[ObjectRef, tuple[str, int]] = {}
    metrics: dict[str, int] = {}
    running_now: int | None = None
    for kind, database, table, partition, value in rows:
        if kind == "parts":
            ref = ObjectRef(database=str(database), name=str(table))
            if ref in wanted:
                busiest[ref] = (str(partition), int(value))
        elif kind == "metric":
            metrics[str(table)] = int(value)
        elif kind == "running":
            running_now = int(value)
    busy, size = (metrics.get(m, 0) for m in POOL_METRICS)
    return Load(busiest, busy, size, running_now, time.monotonic())


def merges(client: Client, tables: Iterable[ObjectRef]) -> dict[ObjectRef, tuple[int, int]]:
    """Per table, the merges and the mutations running on it now."""
    tables = list(tables)
    if not tables:
        return {}
    rows = client.query(merges_sql(), parameters=bind(tables)).result_rows
    wanted = set(tables)
    found = {ObjectRef(database=str(d), name=str(t)): (int(m), int(u)) for d, t, m, u in rows}
    return {ref: counts for ref, counts in found.items() if ref in wanted}
