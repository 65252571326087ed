"""The one reader of ``system.parts``: what the active parts of given tables hold, in one query, as typed rows.

Two grains, both one statement whatever the number of tables (its SQL: :mod:`chmv_assets.sql.parts_sql`):

- :func:`read_parts`: every active part (the parity sweep compares block ranges and mutations part by part);
- :func:`read_partitions`: every partition, its parts folded by the server (rows, parts, bytes, newest write, newest
  block, the rows' time span): the live-state sensor, the rebuild's race watch and swaps, the lifecycle planner's row
  estimates, part counts, maintenance. It also reads, in the same statement, the loaded state of dictionaries (the
  live-state sensor reports them beside the tables).

An MV without TO is read through its inner table (``inner_views``, :func:`views_without_to`). Times are wall seconds
of the parts' min/max index (:mod:`chmv_assets.engine.clock`); :func:`newer_parts` lists the parts written since a
watch of the partitions' newest blocks (:mod:`chmv_assets.engine.races`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.engine.clients import BIG_QUERY_SETTINGS
from chmv_assets.engine.clock import from_wall_seconds
from chmv_assets.sql.parts_sql import (
    PART_COLUMNS,
    PARTITION_COLUMNS,
    dictionaries_branch,
    inner_views_branch,
    newer_parts_sql,
    partitions_sql,
    parts_sql,
)

#: A time span of rows: ``(first, last)`` wall seconds, or None when the parts are not indexed by time.
Span = tuple[int, int] | None


@dataclass(frozen=True)
class Part:
    """One active part of a table.

    Attributes:
        partition_id: Its ClickHouse partition's id.
        rows: Rows it holds.
        min_block: The oldest block number it holds (a merge keeps the block range of the parts it merges).
        max_block: The newest.
        data_version: The version of its data (above ``max_block``: a mutation rewrote it).
        first: Wall seconds of its oldest row by the partition key's time column; 0: not indexed by time.
        last: Of its newest row.
        value: Its partition's value (``system.parts.partition``).
        first_instant: Unix seconds of its oldest row by a ``DateTime`` partition key (0: a ``Date`` key, or none).
    """

    partition_id: str
    rows: int
    min_block: int
    max_block: int
    data_version: int
    first: int
    last: int
    value: str = ""
    first_instant: int = 0

    @property
    def oldest(self) -> datetime | None:
        """Its oldest row's time as an instant (aware, UTC), None where the key has no ``DateTime``."""
        return _instant(self.first_instant)

    @property
    def span(self) -> Span:
        """``(first, last)``, None when the part is not indexed by time."""
        return (self.first, self.last) if self.first > 0 else None

    @property
    def mutated(self) -> int:
        """The version of the last mutation applied to the part (0: none since its rows were inserted)."""
        return self.data_version if self.data_version > self.max_block else 0


@dataclass(frozen=True)
class Partition:
    """The active parts of one ClickHouse partition of a table, folded (or a dictionary's loaded state).

    Attributes:
        partition_id: The partition's id (``""`` for a dictionary).
        value: Its value (``system.parts.partition``).
        rows: Rows its parts hold (a dictionary: its elements).
        parts: Active parts.
        bytes: Bytes on disk (a dictionary: the memory it takes).
        newest_write: Unix seconds of the newest part's modification (a dictionary: its last successful load).
        max_block: The newest block number of its parts (an insert or a swap takes a new block; a merge does not).
        first: Wall seconds of the oldest row of its parts holding rows, by the partition key's time; 0: no time.
        last: Of the newest row.
        first_instant: Unix seconds of that oldest row by a ``DateTime`` partition key (0: a ``Date`` key, or none).
    """

    partition_id: str
    value: str
    rows: int
    parts: int
    bytes: int
    newest_write: int
    max_block: int
    first: int = 0
    last: int = 0
    first_instant: int = 0

    @property
    def span(self) -> Span:
        """``(first, last)``, None when its parts are not indexed by time."""
        return (self.first, self.last) if self.first > 0 else None

    @property
    def oldest(self) -> datetime | None:
        """Its oldest row's time as an instant (aware, UTC), None where the key has no ``DateTime``: it tells the two
        wall-clock hours of a fall-back night apart."""
        return _instant(self.first_instant)

    def window(self) -> tuple[datetime, datetime] | None:
        """``[start, end)`` of its rows as the server's naive wall clock (end: a second past the newest row's time);
        None when its parts are not indexed by time."""
        if self.first <= 0:
            return None
        return from_wall_seconds(self.first), from_wall_seconds(self.last) + timedelta(seconds=1)


def _instant(seconds: int) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds > 0 else None


def views_without_to(project: Project, tables: Iterable[ObjectRef]) -> list[ObjectRef]:
    """The MVs without TO among ``tables``: their rows are in an inner table."""
    return [t for t in tables if t in project.views and project.views[t].target is None]


def bind(tables: Iterable[ObjectRef], prefix: str = "") -> dict[str, list[str]]:
    """The ``{dbs}``/``{names}`` parameters of :mod:`chmv_assets.sql.parts_sql` for ``tables`` (with ``prefix``: the
    ``{<prefix>dbs}``/``{<prefix>names}`` of another branch)."""
    tables = list(tables)
    return {f"{prefix}dbs": sorted({t.database for t in tables}), f"{prefix}names": sorted({t.name for t in tables})}


def read_parts(
    client: Client, tables: Sequence[ObjectRef], *, inner_views: Sequence[ObjectRef] = ()
) -> dict[ObjectRef, list[Part]]:
    """Every active part of ``tables`` (each a key, with no part: an empty list), in one query.

    Args:
        inner_views: MVs without TO among ``tables`` (:func:`views_without_to`), read through their inner table.
    """
    if not tables:
        return {}
    sql, params = parts_sql(inner=bool(inner_views)), bind(tables)
    if inner_views:
        sql += " UNION ALL " + inner_views_branch(PART_COLUMNS)
        params |= bind(inner_views, "mv_")
    rows = _query(client, sql, params)
    wanted = _owners(tables, rows)
    out: dict[ObjectRef, list[Part]] = {t: [] for t in tables}
    for kind, database, table, pid, value, n_rows, lo_block, hi_block, version, first, last, moment in rows:
        ref = wanted.get((database, table))
        if kind == "p" and ref is not None:
            out[ref].append(Part(pid, n_rows, lo_block, hi_block, version, max(first, 0), last, value, max(moment, 0)))
    return out


def read_partitions(
    client: Client,
    tables: Sequence[ObjectRef] = (),
    *,
    databases: Iterable[str] | None = None,
    inner_views: Sequence[ObjectRef] = (),
    dictionaries: Sequence[ObjectRef] = (),
) -> dict[ObjectRef, list[Partition]]:
    """Every partition of ``tables`` (each a key, with none: an empty list) with its active parts folded, and the
    loaded state of ``dictionaries`` (one partition each, when loaded), in one query.

    Args:
        databases: Instead of ``tables``: every table of these databases that has active parts.
        inner_views: MVs without TO among ``tables`` (:func:`views_without_to`), read through their inner table.
        dictionaries: Dictionaries to read the loaded state of (``system.dictionaries``).
    """
    branches, params = [], {}
    if databases is not None:
        params = {"dbs": sorted(set(databases))}
        if params["dbs"]:
            branches.append(partitions_sql(whole_databases=True))
    elif tables:
        branches.append(partitions_sql(inner=bool(inner_views)))
        params = bind(tables)
        if inner_views:
            branches.append(inner_views_branch(PARTITION_COLUMNS))
            params |= bind(inner_views, "mv_")
    if dictionaries:
        branches.append(dictionaries_branch())
        params |= bind(dictionaries, "dict_")
    out: dict[ObjectRef, list[Partition]] = {t: [] for t in (*tables, *dictionaries)} if databases is None else {}
    if not branches:
        return out
    rows = _query(client, " UNION ALL ".join(branches), params)
    every = databases is not None
    wanted = {} if every else _owners([*tables, *dictionaries], rows)
    for kind, database, table, pid, value, n_rows, parts, size, newest, block, first, last, moment in rows:
        if kind == "m":
            continue
        ref = wanted.get((database, table))
        if ref is None:
            if not every:
                continue
            ref = wanted[(database, table)] = ObjectRef(database=database, name=table)
            out[ref] = []
        out[ref].append(Partition(pid, value, n_rows, parts, size, newest, block, max(first, 0), last, max(moment, 0)))
    return out


def newer_parts(client: Client, blocks: Mapping[ObjectRef, Mapping[str, int]]) -> dict[ObjectRef, list[str]]:
    """Per table, the names of its active parts holding a block newer than ``blocks[table][partition_id]`` (a
    partition not in ``blocks``: every part), in one query; tables with none are left out."""
    if not blocks:
        return {}
    keys, newest = [], []
    for table, partitions in blocks.items():
        for pid, block in partitions.items():
            keys.append(f"{table.database}.{table.name}/{pid}")
            newest.append(block)
    rows = _query(client, newer_parts_sql(), {**bind(blocks), "keys": keys, "blocks": newest})
    wanted = {(t.database, t.name): t for t in blocks}
    found: dict[ObjectRef, list[str]] = {}
    for database, table, name in rows:
        ref = wanted.get((database, table))
        if ref is not None:
            found.setdefault(ref, []).append(name)
    return found


def _query(client: Client, sql: str, params: dict) -> Sequence[Sequence[Any]]:
    return client.query(sql, parameters=params, settings=BIG_QUERY_SETTINGS).result_rows


def _owners(tables: Iterable[ObjectRef], rows: Sequence[Sequence[Any]]) -> dict[tuple[str, str], ObjectRef]:
    """``(database, table as system.parts names it) → table`` for ``tables``: itself, and for an MV without TO whose
    uuid came back in ``rows`` (``'m'`` rows), its inner table (``.inner_id.<uuid>`` in an Atomic database,
    ``.inner.<name>`` in an Ordinary one). Built once per read: no model is built or hashed per row."""
    owners = {(t.database, t.name): t for t in tables}
    for kind, database, name, uuid, *_ in rows:
        if kind == "m" and (database, name) in owners:
            view = owners[(database, name)]
            owners[(database, f".inner_id.{uuid}")] = view
            owners[(database, f".inner.{name}")] = view
    return owners


__all__ = [
    "Part",
    "Partition",
    "Span",
    "bind",
    "newer_parts",
    "read_partitions",
    "read_parts",
    "views_without_to",
]
