"""chmv's own records in ``chmv_meta``: the one way to write a record of any kind and to read the latest of each.

Every kind is a typed table (:class:`chmv_assets.sql.meta.RecordTable`); each kind's module (ingestion watermarks,
backfills, deferrals, the apply journal, stream consumer pauses) turns its dataclasses into rows through here:

- :func:`append` adds a record with a version above the one it follows and above the clock (versions never go
  back), so the latest record of a key is the one with the highest version, merged or not;
- :func:`latest` reads the latest record of one key; :func:`current` the latest of every key matching a filter (one
  query each).

chmv before typed records kept every kind in ``chmv_meta.watermarks``. :func:`ensure_records` creates the typed
tables and copies the old rows into them, then renames the old table aside (never dropped): ``chmv apply`` runs it
with ``chmv_meta``'s DDL, and a write that finds its table missing runs it once before retrying. Until then, a read
of a typed table that does not exist yet reads the old table's rows of that kind, in the typed columns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from chmv_assets.ddl.models import Project
from chmv_assets.engine.clients import command_int
from chmv_assets.engine.server_errors import Code, is_code
from chmv_assets.sql.meta import (
    LEGACY_RENAMED_PREFIX,
    LEGACY_WATERMARKS,
    RecordTable,
    meta_ddl,
    meta_placement,
    migration_sql,
)
from chmv_assets.sql.quoting import qualified
from chmv_assets.sql.time_sql import time_sql

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """The latest record of one key.

    Attributes:
        values: Column → value (times naive UTC, None where NULL).
        version: The version of this record.
        first_version: The version of the key's first record (when it started).
    """

    values: Mapping[str, Any]
    version: int
    first_version: int

    def __getitem__(self, column: str) -> Any:
        return self.values[column]


def append(client: Client, table: RecordTable, values: Mapping[str, Any], *, after: int = 0) -> int:
    """Add a record to ``table`` (every column of it in ``values``; times naive UTC or aware); its version, above
    ``after`` (the version of the record it follows) and above the clock."""
    version = max(time.time_ns(), after + 1)
    names = table.names
    placeholders = []
    parameters: dict[str, Any] = {"version": version}
    for number, name in enumerate(names):
        type_ = table.type_of(name)
        value = values[name]
        if "DateTime" in type_:
            placeholders.append("NULL" if value is None else time_sql(_aware(value), type_))
        else:
            placeholders.append(f"{{p{number}:{_parameter_type(type_)}}}")
            parameters[f"p{number}"] = value
    sql = (
        f"INSERT INTO {qualified(table.ref)} ({', '.join(names)}, version) VALUES "
        f"({', '.join(placeholders)}, {{version:UInt64}})"
    )
    try:
        client.command(sql, parameters=parameters, settings={"insert_deduplicate": 0})
    except DatabaseError as error:
        if not missing_table(error):
            raise
        ensure_records(client)
        client.command(sql, parameters=parameters, settings={"insert_deduplicate": 0})
    return version


def latest(client: Client, table: RecordTable, key: Mapping[str, Any]) -> Record | None:
    """The latest record of ``key`` (a value for every key column of ``table``), None if it has none."""
    where, parameters = _where(table, key)
    columns = ", ".join(table.names)

    def query(relation: str) -> Sequence[Sequence[Any]]:
        return client.query(
            f"SELECT {columns}, version FROM {relation} WHERE {where} ORDER BY version DESC LIMIT 1",
            parameters=parameters,
        ).result_rows

    rows = _read(client, table, query)
    if not rows:
        return None
    *values, version = rows[0]
    return Record(_values(table, values), int(version), int(version))


def current(client: Client, table: RecordTable, where: Mapping[str, Any] | None = None) -> list[Record]:
    """The latest record of every key of ``table`` matching ``where`` (column → a value, or a list of values: one
    of them), oldest first record first."""
    condition, parameters = _where(table, where or {})
    keys = ", ".join(table.key)
    values = [name for name in table.names if name not in table.key]
    latest_values = "".join(f", argMax({name}, version) AS _v{n}" for n, name in enumerate(values))

    def query(relation: str) -> Sequence[Sequence[Any]]:
        return client.query(
            f"SELECT {keys}{latest_values}, min(version) AS _first, max(version) AS _last FROM {relation} "
            f"WHERE {condition} GROUP BY {keys} ORDER BY _first",
            parameters=parameters,
        ).result_rows

    records = []
    for row in _read(client, table, query):
        named = dict(zip([*table.key, *values], row[: len(table.key) + len(values)], strict=True))
        ordered = [named[name] for name in table.names]
        records.append(Record(_values(table, ordered), int(row[-1]), int(row[-2])))
    return records


def ensure_records(client: Client, cluster: str | None = None, *, replicated: bool = False) -> int:
    """``chmv_meta`` with every typed table (created where missing), the legacy ``chmv_meta.watermarks`` migrated
    into them if it is still there; how many legacy rows were copied.

    ``chmv apply`` calls it with the deployment's placement (:func:`chmv_assets.sql.meta.meta_placement`); a write or
    a lease read that finds chmv_meta's tables missing calls it on the one server (as chmv_meta's DDL was run before).
    """
    for sql in meta_ddl(cluster, replicated=replicated):
        client.command(sql)
    return migrate_legacy(client, cluster, replicated=replicated)


def ensure_records_for(client: Client, project: Project) -> int:
    """:func:`ensure_records` placed like ``project`` (its cluster, replicated when its tables are)."""
    cluster, replicated = meta_placement(project)
    return ensure_records(client, cluster, replicated=replicated)


def migrate_legacy(client: Client, cluster: str | None = None, *, replicated: bool = False) -> int:
    """Copy the rows of the legacy ``chmv_meta.watermarks`` into the typed tables and rename it to
    ``chmv_meta.watermarks_migrated_<UTC time>``; how many rows it held (0: there was none to migrate)."""
    if not _legacy_exists(client):
        return 0
    count = command_int(client, f"SELECT count() FROM {qualified(LEGACY_WATERMARKS)}")
    renamed = f"{LEGACY_RENAMED_PREFIX}{datetime.now(UTC):%Y%m%d%H%M%S}"
    *copies, rename = migration_sql(cluster, replicated=replicated, renamed=renamed)
    for sql in copies:
        client.command(sql)
    try:
        client.command(rename)
    except DatabaseError as error:
        if not missing_table(error) or _legacy_exists(client):
            raise
        return count  # another process migrated it at the same time and renamed it first
    _LOG.info(
        f"chmv_meta: the {count} records of chmv_meta.watermarks were copied into their typed tables; the old "
        f"table is kept as chmv_meta.{renamed} (drop it once you no longer need it)"
    )
    return count


def missing_table(error: Exception) -> bool:
    """The server says a table or database does not exist."""
    return is_code(error, Code.UNKNOWN_TABLE, Code.UNKNOWN_DATABASE)


def _legacy_exists(client: Client) -> bool:
    return bool(
        client.query(
            "SELECT 1 FROM system.tables WHERE database = {db:String} AND name = {name:String}",
            parameters={"db": LEGACY_WATERMARKS.database, "name": LEGACY_WATERMARKS.name},
        ).result_rows
    )


def _read(
    client: Client, table: RecordTable, query: Callable[[str], Sequence[Sequence[Any]]]
) -> Sequence[Sequence[Any]]:
    """``query`` over the typed table, or over the legacy table's rows of this kind while the typed one does not
    exist yet (before the migration)."""
    try:
        return query(qualified(table.ref))
    except DatabaseError as error:
        if not missing_table(error) or not _legacy_exists(client):
            raise
        return query(f"({table.legacy})")


def _where(table: RecordTable, where: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    conditions, parameters = [], {}
    for number, (column, value) in enumerate(where.items()):
        type_ = _parameter_type(table.type_of(column))
        if isinstance(value, (list, tuple, set, frozenset)):
            conditions.append(f"{column} IN {{w{number}:Array({type_})}}")
            parameters[f"w{number}"] = sorted(value)
        else:
            conditions.append(f"{column} = {{w{number}:{type_}}}")
            parameters[f"w{number}"] = value
    return " AND ".join(conditions) or "1", parameters


def _parameter_type(type_: str) -> str:
    return type_.removeprefix("LowCardinality(").removesuffix(")") if type_.startswith("LowCardinality(") else type_


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _values(table: RecordTable, values: Sequence[Any]) -> dict[str, Any]:
    out = {}
    for name, value in zip(table.names, values, strict=True):
        if isinstance(value, datetime) and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        out[name] = value
    return out
