"""Live partition state: what the tables hold, partition by partition, and what changed since the last look (no
Dagster; the ``chmv_live_state`` sensor, :mod:`chmv_assets.orchestration.live_state`, reports it).

- :func:`read_live_partitions`: the active parts of every tracked table folded per partition, and the loaded state of
  its dictionaries, in ONE query (:func:`chmv_assets.engine.parts.read_partitions`);
- :class:`Tally`: one reportable partition (several ClickHouse partitions may fold into it) and its fingerprint: the
  newest block number and the number of ClickHouse partitions (a merge keeps the block range, an insert or a REPLACE
  PARTITION takes a new block, a dropped partition disappears);
- a source ingested by Spark is reported by arrival day: :func:`days_to_recount` says when its partitions' newest
  blocks moved and over which time span, :func:`rows_per_day` counts those days in one more query;
- :class:`LiveMemory`: the fingerprints between ticks, the sensor's cursor (:mod:`chmv_assets.engine.health.cursors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.ddl.partitioning import partition_start as start_of_value
from chmv_assets.engine.clients import BIG_QUERY_SETTINGS
from chmv_assets.engine.clock import from_wall_seconds, session_zone
from chmv_assets.engine.health.cursors import encode_cursor, read_cursor
from chmv_assets.engine.parts import Partition, Span, read_partitions, views_without_to
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.time_sql import time_sql

#: Cursor format version: a cursor of another version is ignored (everything is reported once more).
CURSOR_VERSION = 1
#: Seconds in a day (a ``Date`` span's last second is its day's start + this - 1).
DAY_SECONDS = 86400


@dataclass
class LiveMemory:
    """What the previous tick reported (the sensor's cursor).

    Attributes:
        assets: Per asset (its user string), per partition key (``""``: unpartitioned), the fingerprint reported.
        sources: Per ingested source (fqn), per ClickHouse partition id, its newest block number when its days were
            last counted.
    """

    assets: dict[str, dict[str, str]] = field(default_factory=dict)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)

    def dumps(self) -> str:
        """The cursor, deflated: the fingerprints of tens of thousands of partitions repeat a lot."""
        return encode_cursor({"a": self.assets, "s": self.sources}, CURSOR_VERSION, compress=True)

    @classmethod
    def loads(cls, cursor: str | None) -> LiveMemory:
        """The memory of a cursor; empty for none, an unreadable one or another version."""
        data = read_cursor(cursor, CURSOR_VERSION)
        assets, sources = data.get("a", {}), data.get("s", {})
        if not isinstance(assets, dict) or not isinstance(sources, dict):
            return cls()
        return cls(assets, sources)


@dataclass
class Tally:
    """One reportable partition of an asset: the ClickHouse partitions folded into it."""

    rows: int = 0
    parts: int = 0
    bytes: int = 0
    newest_write: int = 0
    max_block: int = 0
    ch_partitions: list[str] = field(default_factory=list)

    def add(self, partition: Partition) -> None:
        self.rows += partition.rows
        self.parts += partition.parts
        self.bytes += partition.bytes
        self.newest_write = max(self.newest_write, partition.newest_write)
        self.max_block = max(self.max_block, partition.max_block)
        self.ch_partitions.append(partition.partition_id)

    @property
    def fingerprint(self) -> str:
        """What changes when its rows do: the newest block and the number of ClickHouse partitions."""
        return f"{self.max_block}.{len(self.ch_partitions)}"


def read_live_partitions(
    client: Client, project: Project, tables: Sequence[ObjectRef], dictionaries: Sequence[ObjectRef] = ()
) -> dict[ObjectRef, list[Partition]]:
    """The partitions of ``tables`` (an MV without TO: of its inner table) and the loaded state of ``dictionaries``, in
    one query."""
    inner = views_without_to(project, tables)
    return read_partitions(client, tables, inner_views=inner, dictionaries=dictionaries)


def partition_start(partition: Partition) -> datetime | None:
    """The start of a ClickHouse partition, from its value or else the oldest time its rows hold (naive, in the
    server's time zone; :func:`chmv_assets.ddl.partitioning.partition_start`)."""
    return start_of_value(partition.value, from_wall_seconds(partition.first) if partition.first > 0 else None)


def source_blocks(partitions: Sequence[Partition]) -> dict[str, str]:
    """An ingested source's newest block per ClickHouse partition, as :attr:`LiveMemory.sources` keeps it."""
    return {p.partition_id: str(p.max_block) for p in partitions}


def days_to_recount(partitions: Sequence[Partition], before: Mapping[str, str]) -> tuple[bool, Span]:
    """Whether an ingested source's days must be counted again since ``before`` (:func:`source_blocks`), and over
    which span of its time column: the partitions whose newest block moved; every day (None) when a partition was
    dropped or one that moved is not indexed by time."""
    moved = [p for p in partitions if before.get(p.partition_id) != str(p.max_block)]
    dropped = set(before) - {p.partition_id for p in partitions}
    if not moved and not dropped:
        return False, None
    spans = [p.span for p in moved if p.span is not None]
    if dropped or len(spans) < len(moved):
        return True, None
    return True, (min(s[0] for s in spans), max(s[1] for s in spans))


@dataclass(frozen=True)
class DayCount:
    """Count the rows per day of ``column`` in ``table`` within ``span`` (None: the whole table)."""

    table: ObjectRef
    column: str
    span: Span


def rows_per_day(client: Client, requests: Sequence[DayCount]) -> dict[ObjectRef, dict[str, int]]:
    """Rows per day (``YYYY-MM-DD``) of each request's column within its span, in one query (none without requests).

    The span is on the table's own time column, so ClickHouse prunes partitions by their min/max index.
    """
    if not requests:
        return {}
    branches, zone = [], session_zone(client)
    for i, request in enumerate(requests):
        column = quote(request.column)
        where = ""
        if request.span is not None:  # wall seconds (engine.clock): the session's wall clock
            lo, hi = (time_sql(from_wall_seconds(b), "DateTime", zone) for b in request.span)
            where = f" WHERE {column} >= {lo} AND {column} <= {hi}"
        branches.append(
            f"SELECT {i} AS source, toString(toDate({column})) AS day, count() AS rows "
            f"FROM {qualified(request.table)}{where} GROUP BY day"
        )
    out: dict[ObjectRef, dict[str, int]] = {r.table: {} for r in requests}
    for source, day, n_rows in client.query(" UNION ALL ".join(branches), settings=BIG_QUERY_SETTINGS).result_rows:
        out[requests[int(source)].table][str(day)] = int(n_rows)
    return out


def covering(partitions: Sequence[Partition], day: str) -> list[Partition]:
    """The ClickHouse partitions whose rows' time span touches a day (all of them when none is indexed)."""
    start = int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp())
    touching = [p for p in partitions if (s := p.span) is None or (s[0] < start + DAY_SECONDS and s[1] >= start)]
    return touching or list(partitions)


def day_range(span: Span) -> tuple[str, str]:
    """The first and last ``YYYY-MM-DD`` day of a span (every day when None)."""
    if span is None:
        return "0000-00-00", "9999-99-99"
    first, last = (datetime.fromtimestamp(b, UTC).strftime("%Y-%m-%d") for b in span)
    return first, last


__all__ = [
    "CURSOR_VERSION",
    "DayCount",
    "LiveMemory",
    "Tally",
    "covering",
    "day_range",
    "days_to_recount",
    "partition_start",
    "read_live_partitions",
    "rows_per_day",
    "source_blocks",
]
