"""Live partition state: what the tables hold, reported to Dagster as runless asset events.

The live MVs write the targets all the time, and ingestion writes the sources; Dagster only knows what
its runs did. The ``chmv_live_state`` sensor reads ``system.parts`` (active parts) for every tracked
table in ONE query per tick and reports, for each partition that changed since the last report, an
``AssetMaterialization`` with rows, parts, bytes and the newest write (``dagster/last_updated_timestamp``,
which Dagster's freshness checks read). No run is launched; the UI then shows the partitions that hold
data as materialized, for targets and sources.

What is reported:

- a target: one event per Dagster partition (the ClickHouse partition mapped through the target's
  partitions definition), or one unpartitioned event;
- a source ingested by Spark (daily by arrival day): the days that hold rows, counted by a second query
  only over the ClickHouse partitions that changed;
- an external source or a dictionary: one unpartitioned event (so "Materialize" no longer warns about
  upstreams that were never materialized).

"Changed" is a compact fingerprint per partition in the cursor: the newest block number and the number
of ClickHouse partitions (a merge keeps the block range, an insert or a REPLACE PARTITION takes a new
block, a dropped partition disappears); the row count per day for ingested sources. A partition a run
already materialized after its newest write is not reported again: the run's materialization is the
newer truth, and a second one would make its check results stale in the UI.
"""

from __future__ import annotations

import base64
import json
import re
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Literal
from zoneinfo import ZoneInfo

from clickhouse_connect.driver.client import Client
from dagster import (
    AddDynamicPartitionsRequest,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterInstance,
    DefaultSensorStatus,
    MetadataValue,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    TimeWindowPartitionsDefinition,
    sensor,
)

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import KEY_DELIMITER, PartitionScheme, encode_key, key_values, partition_values
from chmv_assets.engine.catalog import inner_table_names
from chmv_assets.engine.clock import from_wall_seconds, session_zone
from chmv_assets.engine.health.staleness import BIG_QUERY_SETTINGS
from chmv_assets.orchestration.partitions import dynamic_partitions_of, time_partitions_of
from chmv_assets.orchestration.sensor_client import SensorSkip, sensor_client
from chmv_assets.orchestration.translator import ChmvTranslator
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.time_sql import time_sql, wall_seconds_sql
from resources.clickhouse import ClickHouseResource

#: Most events one tick reports; the rest follow at the next ticks (a cold start of thousands of partitions).
#: Dagster records a runless event in ~10-30 ms on SQLite, so a tick's events take the daemon under a minute.
MAX_EVENTS_PER_TICK = 2000
#: Cursor format version: a cursor of another version is ignored (everything is reported once more).
CURSOR_VERSION = 1
OBSERVER = "chmv_live_state (system.parts)"
#: Seconds between two ticks of the sensor.
LIVE_STATE_INTERVAL_SECONDS = 30


@dataclass(frozen=True)
class Tracked:
    """One asset whose live state is reported.

    Attributes:
        key: The asset key.
        ref: The table (or dictionary, or MV without TO) it stands for.
        kind: ``target``, ``ingested`` (a daily Spark ingestion asset), ``source`` or ``dictionary``.
        partitions_def: The asset's time partitions (a time × key target's windows), None without.
        time_column: The event-time column of an ingested source (its days are counted on it).
        scheme: A target's partitioning, when it has a key part (its values name the partitions).
        dynamic: The dynamic partitions its key values are added to.
    """

    key: AssetKey
    ref: ObjectRef
    kind: Literal["target", "ingested", "source", "dictionary"]
    partitions_def: TimeWindowPartitionsDefinition | None = None
    time_column: str | None = None
    scheme: PartitionScheme | None = None
    dynamic: str | None = None


@dataclass(frozen=True)
class PartState:
    """The active parts of one ClickHouse partition of a table (or a dictionary's loaded state)."""

    partition_id: str
    value: str
    rows: int
    parts: int
    bytes: int
    newest_write: int  # unix seconds of the newest part's modification time
    max_block: int
    min_time: int  # wall seconds (chmv_assets.engine.clock) of the parts' min/max index
    min_date: str
    max_time: int = 0
    max_date: str = ""

    def time_bounds(self) -> tuple[int, int] | None:
        """``[first, last]`` wall seconds of the rows, from the parts' min/max index; None when not indexed."""
        if self.min_time > 0:
            return self.min_time, self.max_time
        if self.min_date and self.min_date != "1970-01-01":
            first = datetime.fromisoformat(self.min_date).replace(tzinfo=UTC)
            last = datetime.fromisoformat(self.max_date).replace(tzinfo=UTC)
            return int(first.timestamp()), int(last.timestamp()) + 86399
        return None


@dataclass
class TickReport:
    """What one evaluation found and reports.

    Attributes:
        events: The runless materializations to report.
        cursor: The new cursor (JSON).
        queries: ClickHouse queries run.
        tracked: Assets tracked.
        changed: Partitions whose fingerprint changed.
        already_materialized: Changed partitions a run had materialized after their newest write.
        outside: ClickHouse partitions outside the asset's partitions definition (before ``partition_start``).
        deferred: Changed partitions left for the next tick (``MAX_EVENTS_PER_TICK``).
    """

    events: list[AssetMaterialization] = field(default_factory=list)
    cursor: str = ""
    queries: int = 0
    tracked: int = 0
    changed: int = 0
    already_materialized: int = 0
    outside: int = 0
    deferred: int = 0
    seconds: float = 0.0
    new_keys: dict[str, list[str]] = field(default_factory=dict)
    """Per dynamic partitions definition, the key values the server's partitions hold that Dagster does not know yet
    (without an instance: every value seen)."""

    def partition_requests(self) -> list[AddDynamicPartitionsRequest]:
        """The requests that add :attr:`new_keys` to Dagster's dynamic partitions."""
        return [AddDynamicPartitionsRequest(name, keys) for name, keys in sorted(self.new_keys.items()) if keys]

    def summary(self) -> str:
        return (
            f"{len(self.events)} partition(s) reported of {self.changed} changed, {self.already_materialized} "
            f"already materialized by runs, {self.outside} outside the partitions definitions, "
            f"{self.deferred} deferred; {self.tracked} assets, {self.queries} ClickHouse queries, "
            f"{self.seconds:.2f}s"
        )


def tracked_assets(loaded: LoadedProject, translator: ChmvTranslator) -> list[Tracked]:
    """Every asset of the code location backed by a table or dictionary: targets, ingested and external sources."""
    from chmv_assets.engine.ingest.landing import ingested_sources, time_column
    from chmv_assets.orchestration.assets import external_upstream
    from spark.assets import ingestion_partitions

    project = loaded.project
    out = []
    for ref in project.targets:
        partitions_def = translator.get_asset_spec(loaded, ref).partitions_def
        dynamic = dynamic_partitions_of(partitions_def)
        scheme = translator.get_partition_scheme(loaded, ref) if dynamic is not None else None
        time = time_partitions_of(partitions_def)
        key = translator.get_asset_key(ref)
        out.append(Tracked(key, ref, "target", time, scheme=scheme, dynamic=dynamic.name if dynamic else None))
    ingested = ingested_sources(loaded)
    if ingested:
        daily = ingestion_partitions(loaded)
        for ref in ingested:
            out.append(Tracked(translator.get_asset_key(ref), ref, "ingested", daily, time_column(loaded, ref)))
    for ref in external_upstream(loaded, translator):
        out.append(
            Tracked(translator.get_asset_key(ref), ref, "dictionary" if ref in project.dictionaries else "source")
        )
    return out


class _Counted:
    """The client, counting the queries this module runs (chdb has no system.query_log)."""

    def __init__(self, client: Client):
        self.client = client
        self.queries = 0

    def query(self, sql: str, parameters: dict) -> list[tuple]:
        self.queries += 1
        return self.client.query(sql, parameters=parameters, settings=BIG_QUERY_SETTINGS).result_rows


def read_state(client: _Counted, loaded: LoadedProject, tracked: list[Tracked]) -> dict[ObjectRef, list[PartState]]:
    """The active parts per partition of every tracked table, and the loaded state of its dictionaries: one query.

    An MV without TO keeps its rows in an inner table (``.inner_id.<uuid>`` or ``.inner.<name>``); the
    query also returns those MVs' uuids to map the inner table back to the MV.
    """
    tables = [t.ref for t in tracked if t.kind != "dictionary"]
    dictionaries = [t.ref for t in tracked if t.kind == "dictionary"]
    inner_mvs = [t.ref for t in tracked if t.ref in loaded.project.views and loaded.project.views[t.ref].target is None]
    branches, params = [], {}
    if tables:
        branches.append(
            "SELECT 'p' AS kind, database, table AS name, partition_id, any(partition) AS value, sum(rows) AS n_rows, "
            "count() AS parts, sum(bytes_on_disk) AS bytes, toInt64(toUnixTimestamp(max(modification_time))) AS newest, "
            f"toInt64(max(max_block_number)) AS max_block, {wall_seconds_sql('minIf(min_time, rows > 0)')} "
            f"AS min_time, toString(minIf(min_date, rows > 0)) AS min_date, "  # empty parts (a swap's) have no time
            f"{wall_seconds_sql('maxIf(max_time, rows > 0)')} AS max_time, toString(maxIf(max_date, rows > 0)) "
            "AS max_date FROM system.parts WHERE active AND database IN {dbs:Array(String)} "
            "AND (table IN {names:Array(String)} OR startsWith(table, '.inner')) GROUP BY database, table, partition_id"
        )
        params |= {"dbs": sorted({r.database for r in tables}), "names": sorted({r.name for r in tables})}
    if dictionaries:
        branches.append(
            "SELECT 'd', database, name, '', '', toUInt64(element_count), toUInt64(0), toUInt64(bytes_allocated), "
            "toInt64(toUnixTimestamp(last_successful_update_time)), toInt64(0), toInt64(0), '', toInt64(0), '' "
            "FROM system.dictionaries "
            "WHERE database IN {dict_dbs:Array(String)} AND name IN {dict_names:Array(String)}"
        )
        params |= {
            "dict_dbs": sorted({r.database for r in dictionaries}),
            "dict_names": sorted({r.name for r in dictionaries}),
        }
    if inner_mvs:
        branches.append(
            "SELECT 'm', database, name, toString(uuid), '', toUInt64(0), toUInt64(0), toUInt64(0), toInt64(0), "
            "toInt64(0), toInt64(0), '', toInt64(0), '' FROM system.tables WHERE engine = 'MaterializedView' "
            "AND database IN {mv_dbs:Array(String)} AND name IN {mv_names:Array(String)}"
        )
        params |= {"mv_dbs": sorted({r.database for r in inner_mvs}), "mv_names": sorted({r.name for r in inner_mvs})}
    if not branches:
        return {}
    rows = client.query(" UNION ALL ".join(branches), params)
    inner_names = inner_table_names((database, name, uuid) for kind, database, name, uuid, *_ in rows if kind == "m")
    wanted = {(t.ref.database, t.ref.name): t.ref for t in tracked}  # no model built or hashed per row
    by_name: dict[tuple[str, str], list[PartState]] = {}
    for (
        kind,
        database,
        name,
        pid,
        value,
        n_rows,
        parts,
        size,
        newest,
        block,
        min_time,
        min_date,
        max_time,
        max_date,
    ) in rows:
        if kind == "m":
            continue
        table = (database, inner_names.get((database, name), name))
        if table not in wanted:
            continue
        by_name.setdefault(table, []).append(
            PartState(
                str(pid),
                str(value),
                int(n_rows),
                int(parts),
                int(size),
                int(newest),
                int(block),
                int(min_time),
                str(min_date),
                int(max_time),
                str(max_date),
            )
        )
    return {wanted[table]: parts for table, parts in by_name.items()}


def partition_start(value: str, min_time: int = 0, min_date: str = "") -> datetime | None:
    """The start of a ClickHouse partition from its value (``202609``, ``20260915``, ``2026-09-15 10:00:00``).

    Falls back to the parts' min/max index (``min_time``, ``min_date``) for other spellings. Naive, in
    the server's time zone.
    """
    text = value.strip().strip("'")
    if re.fullmatch(r"\d{6}", text):
        return datetime(int(text[:4]), int(text[4:6]), 1)
    if re.fullmatch(r"\d{8}", text):
        return datetime(int(text[:4]), int(text[4:6]), int(text[6:]))
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    if min_time > 0:
        return datetime.fromtimestamp(min_time, UTC).replace(tzinfo=None)
    if min_date and min_date != "1970-01-01":
        return datetime.fromisoformat(min_date)
    return None


class _Keys:
    """Partition keys of time partitions definitions, for instants, cached for one tick.

    Equal definitions (every monthly target of a project) share the cache: Dagster's cron arithmetic is
    the expensive part of a tick.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[TimeWindowPartitionsDefinition, datetime], str | None] = {}
        self._bounds: dict[TimeWindowPartitionsDefinition, tuple[float, float] | None] = {}

    def key(self, partitions_def: TimeWindowPartitionsDefinition, start: datetime) -> str | None:
        """The key of the partition holding ``start`` (naive, in the definition's time zone), None outside it."""
        cached = (partitions_def, start)
        if cached not in self._cache:
            stamp = start.replace(tzinfo=ZoneInfo(partitions_def.timezone)).timestamp()
            bounds = self._bounds_of(partitions_def)
            inside = bounds is not None and bounds[0] <= stamp < bounds[1]
            self._cache[cached] = partitions_def.get_partition_key_for_timestamp(stamp) if inside else None
        return self._cache[cached]

    def _bounds_of(self, partitions_def: TimeWindowPartitionsDefinition) -> tuple[float, float] | None:
        if partitions_def not in self._bounds:
            first, last = partitions_def.get_first_partition_window(), partitions_def.get_last_partition_window()
            self._bounds[partitions_def] = (first.start.timestamp(), last.end.timestamp()) if first and last else None
        return self._bounds[partitions_def]


@dataclass
class _Unit:
    """One reportable partition of an asset (several ClickHouse partitions may fold into it)."""

    rows: int = 0
    parts: int = 0
    bytes: int = 0
    newest_write: int = 0
    max_block: int = 0
    ch_partitions: list[str] = field(default_factory=list)

    def add(self, part: PartState) -> None:
        self.rows += part.rows
        self.parts += part.parts
        self.bytes += part.bytes
        self.newest_write = max(self.newest_write, part.newest_write)
        self.max_block = max(self.max_block, part.max_block)
        self.ch_partitions.append(part.partition_id)

    @property
    def fingerprint(self) -> str:
        return f"{self.max_block}.{len(self.ch_partitions)}"


def _units(tracked: Tracked, parts: list[PartState], keys: _Keys) -> tuple[dict[str, _Unit], int]:
    """``partition key ("" when unpartitioned) -> unit`` for a target, source or dictionary; and the parts outside."""
    units: dict[str, _Unit] = {}
    outside = 0
    for part in parts:
        key: str | None = ""
        if tracked.scheme is not None:  # a key part: its values name the partition
            key = _keyed(tracked, part, keys)
        elif tracked.partitions_def is not None:
            start = partition_start(part.value, part.min_time, part.min_date)
            key = keys.key(tracked.partitions_def, start) if start is not None else None
        if key is None:
            outside += 1
            continue
        units.setdefault(key, _Unit()).add(part)
    return units, outside


def _keyed(tracked: Tracked, part: PartState, keys: _Keys) -> str | None:
    """The Dagster key of a ClickHouse partition of a target with a key part (None: outside its windows)."""
    assert tracked.scheme is not None
    values = key_values(tracked.scheme, partition_values(part.value, tracked.scheme.elements))
    if tracked.partitions_def is None:
        return encode_key(values)
    bounds = part.time_bounds()
    window = keys.key(tracked.partitions_def, from_wall_seconds(bounds[0])) if bounds is not None else None
    return f"{window}{KEY_DELIMITER}{encode_key(values)}" if window is not None else None


@dataclass(frozen=True)
class _DayRequest:
    """Count the rows per event day of an ingested source within ``[first, last]`` (None: the whole table)."""

    tracked: Tracked
    bounds: tuple[int, int] | None


def _day_counts(client: _Counted, requests: list[_DayRequest]) -> dict[ObjectRef, dict[str, int]]:
    """Rows per event day (``YYYY-MM-DD``) of ingested sources, within the re-read time ranges: one query.

    The range is on the source's own time column, so ClickHouse prunes partitions by their min/max index.
    """
    if not requests:
        return {}
    branches, params, zone = [], {}, session_zone(client.client)
    for i, request in enumerate(requests):
        column = quote(request.tracked.time_column or "")
        where = ""
        if request.bounds is not None:  # wall seconds (engine.clock): the session's wall clock
            lo, hi = (time_sql(from_wall_seconds(b), "DateTime", zone) for b in request.bounds)
            where = f" WHERE {column} >= {lo} AND {column} <= {hi}"
        branches.append(
            f"SELECT {i} AS source, toString(toDate({column})) AS day, count() AS rows "
            f"FROM {qualified(request.tracked.ref)}{where} GROUP BY day"
        )
    out: dict[ObjectRef, dict[str, int]] = {r.tracked.ref: {} for r in requests}
    for source, day, n_rows in client.query(" UNION ALL ".join(branches), params):
        out[requests[int(source)].tracked.ref][str(day)] = int(n_rows)
    return out


def _materialized_after(
    instance: DagsterInstance | None, candidates: dict[AssetKey, dict[str, int]]
) -> set[tuple[AssetKey, str]]:
    """``(asset, partition)`` among the candidates whose latest materialization is at or after their newest write."""
    if instance is None or not candidates:
        return set()
    done: set[tuple[AssetKey, str]] = set()
    records = {r.asset_entry.asset_key: r.asset_entry for r in instance.get_asset_records(list(candidates))}
    for key, partitions in candidates.items():
        entry = records.get(key)
        last = entry.last_materialization_record if entry is not None else None
        oldest_write = min(partitions.values())
        if last is None or last.timestamp < oldest_write:
            continue  # nothing materialized it since the oldest of these writes: report them all
        named = [p for p in partitions if p]
        filter_ = AssetRecordsFilter(
            asset_key=key, asset_partitions=named or None, after_timestamp=float(oldest_write - 1)
        )
        for record in instance.fetch_materializations(filter_, limit=4 * len(partitions)).records:
            partition = record.partition_key or ""
            if partition in partitions and record.timestamp >= partitions[partition]:
                done.add((key, partition))
    return done


def evaluate_live_state(
    client: Client,
    loaded: LoadedProject,
    translator: ChmvTranslator,
    cursor: str | None,
    instance: DagsterInstance | None = None,
    *,
    tracked: list[Tracked] | None = None,
) -> TickReport:
    """Read the live state of every tracked asset and build the events for what changed since ``cursor``.

    Args:
        client: An open client.
        loaded: The parsed project.
        translator: Asset keys and partitions.
        cursor: The previous tick's cursor (None or unreadable: everything is reported).
        instance: The Dagster instance, to leave out partitions runs already materialized after their newest write.
        tracked: The assets to track (default: :func:`tracked_assets`).

    Returns:
        The events, the new cursor and what it cost (at most two queries).
    """
    began = time.perf_counter()
    counted = _Counted(client)
    tracked = tracked if tracked is not None else tracked_assets(loaded, translator)
    scan = _Scan(_read_cursor(cursor), TickReport(tracked=len(tracked)))
    state = read_state(counted, loaded, tracked)
    day_requests = scan.tables(tracked, state)
    scan.days(day_requests, _day_counts(counted, day_requests), state)
    scan.emit(tracked, instance)
    scan.report.new_keys = _new_keys(scan.keyed, instance)
    scan.report.queries = counted.queries
    scan.report.seconds = time.perf_counter() - began
    return scan.report


class _Scan:
    """One tick's comparison of the live state with the cursor: what changed, and the next cursor."""

    def __init__(self, previous: dict, report: TickReport):
        self.seen_assets: dict[str, dict[str, str]] = previous.get("a", {})
        self.seen_sources: dict[str, dict[str, str]] = previous.get("s", {})
        self.new_assets: dict[str, dict[str, str]] = {}
        self.new_sources: dict[str, dict[str, str]] = {}
        self.changed: dict[AssetKey, dict[str, tuple[_Unit, str]]] = {}  # asset -> partition -> (unit, fingerprint)
        self.report = report
        self.keys = _Keys()
        self.keyed: dict[str, set[str]] = {}  # dynamic partitions definition -> key values the server holds

    def tables(self, tracked: list[Tracked], state: dict[ObjectRef, list[PartState]]) -> list[_DayRequest]:
        """Compare every table's partitions with the cursor; returns the day counts the ingested sources need."""
        day_requests = []
        for item in tracked:
            name = item.key.to_user_string()
            parts = state.get(item.ref, [])
            if item.kind == "ingested":
                before = self.seen_sources.get(item.ref.fqn, {})
                self.new_sources[item.ref.fqn] = {p.partition_id: str(p.max_block) for p in parts}
                moved = [p for p in parts if before.get(p.partition_id) != str(p.max_block)]
                dropped = set(before) - {p.partition_id for p in parts}
                self.new_assets[name] = dict(self.seen_assets.get(name, {}))
                if moved or dropped:
                    bounds = [p.time_bounds() for p in moved]
                    whole = dropped or None in bounds  # no min/max index, or rows gone: count every day again
                    day_requests.append(
                        _DayRequest(item, None if whole else (min(b[0] for b in bounds), max(b[1] for b in bounds)))
                    )
                continue
            units, outside = _units(item, parts, self.keys)
            self.report.outside += outside
            if item.dynamic is not None:
                self.keyed.setdefault(item.dynamic, set()).update(k.rpartition(KEY_DELIMITER)[2] for k in units)
            before = self.seen_assets.get(name, {})
            self.new_assets[name] = {}
            for partition, unit in units.items():
                if before.get(partition) == unit.fingerprint:
                    self.new_assets[name][partition] = unit.fingerprint
                else:
                    self.changed.setdefault(item.key, {})[partition] = (unit, unit.fingerprint)
        return day_requests

    def days(
        self,
        requests: list[_DayRequest],
        days: dict[ObjectRef, dict[str, int]],
        state: dict[ObjectRef, list[PartState]],
    ) -> None:
        """Compare the day counts of the re-read ingested sources with the cursor."""
        for request in requests:
            item = request.tracked
            name = item.key.to_user_string()
            seen = self.new_assets[name]
            counted_days = set()
            for day, n_rows in days.get(item.ref, {}).items():
                partition = (
                    self.keys.key(item.partitions_def, datetime.fromisoformat(day)) if item.partitions_def else None
                )
                if partition is None:
                    self.report.outside += 1
                    continue
                counted_days.add(partition)
                if seen.get(partition) != str(n_rows):
                    unit = _Unit()
                    for part in _covering(state.get(item.ref, []), day):
                        unit.add(part)
                    unit.rows = n_rows  # the day's rows; parts, bytes and newest write: of the partitions holding it
                    self.changed.setdefault(item.key, {})[partition] = (unit, str(n_rows))
                    seen.pop(partition, None)
            # days of the re-read range that hold no rows any more are forgotten (reported again if rows come back)
            first, last = _day_range(request.bounds)
            for partition in [p for p in seen if first <= p <= last and p not in counted_days]:
                seen.pop(partition)

    def emit(self, tracked: list[Tracked], instance: DagsterInstance | None) -> None:
        """The events of the changed partitions (targets first), at most ``MAX_EVENTS_PER_TICK``; the new cursor."""
        report = self.report
        report.changed = sum(len(v) for v in self.changed.values())
        candidates = {key: {p: u.newest_write for p, (u, _fp) in units.items()} for key, units in self.changed.items()}
        done = _materialized_after(instance, candidates)
        report.already_materialized = len(done)
        by_key = {t.key: t for t in tracked}
        budget = MAX_EVENTS_PER_TICK
        order = {"target": 0, "source": 1, "dictionary": 1, "ingested": 2}
        for key in sorted(self.changed, key=lambda k: (order[by_key[k].kind], k.to_user_string())):
            name, item = key.to_user_string(), by_key[key]
            for partition in sorted(self.changed[key]):
                unit, fingerprint = self.changed[key][partition]
                if (key, partition) in done:
                    self.new_assets[name][partition] = fingerprint
                    continue
                if budget <= 0:
                    report.deferred += 1
                    if item.kind == "ingested":  # re-read its days next tick
                        self.new_sources[item.ref.fqn] = self.seen_sources.get(item.ref.fqn, {})
                    continue
                budget -= 1
                report.events.append(_event(item, partition or None, unit))
                self.new_assets[name][partition] = fingerprint
        report.cursor = _write_cursor({"v": CURSOR_VERSION, "a": self.new_assets, "s": self.new_sources})


def _new_keys(keyed: dict[str, set[str]], instance: DagsterInstance | None) -> dict[str, list[str]]:
    """The key values of each dynamic partitions definition that Dagster does not know yet."""
    out = {}
    for name, values in keyed.items():
        known = set(instance.get_dynamic_partitions(name)) if instance is not None else set()
        out[name] = sorted(values - known)
    return out


def _covering(parts: list[PartState], day: str) -> list[PartState]:
    """The ClickHouse partitions whose rows' time range touches a day (all of them when not indexed)."""
    start = int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp())
    touching = [p for p in parts if (b := p.time_bounds()) is None or (b[0] < start + 86400 and b[1] >= start)]
    return touching or parts


def _day_range(bounds: tuple[int, int] | None) -> tuple[str, str]:
    """The ``YYYY-MM-DD`` days a time range covers (every day when None)."""
    if bounds is None:
        return "0000-00-00", "9999-99-99"
    first, last = (datetime.fromtimestamp(b, UTC).strftime("%Y-%m-%d") for b in bounds)
    return first, last


def _event(item: Tracked, partition: str | None, unit: _Unit) -> AssetMaterialization:
    rows_key = "dagster/partition_row_count" if partition is not None else "dagster/row_count"
    metadata = {
        rows_key: MetadataValue.int(unit.rows),
        "chmv/parts": MetadataValue.int(unit.parts),
        "chmv/bytes_on_disk": MetadataValue.int(unit.bytes),
        "dagster/last_updated_timestamp": MetadataValue.timestamp(float(unit.newest_write)),
        "chmv/clickhouse_partitions": ", ".join(unit.ch_partitions)[:500],
        "chmv/observed_by": OBSERVER,
    }
    if item.kind == "dictionary":
        metadata = {
            "dagster/row_count": MetadataValue.int(unit.rows),
            "chmv/bytes_allocated": MetadataValue.int(unit.bytes),
            "dagster/last_updated_timestamp": MetadataValue.timestamp(float(unit.newest_write)),
            "chmv/observed_by": "chmv_live_state (system.dictionaries)",
        }
    description = (
        f"Live state of {item.ref.fqn}"
        + (f" partition {partition}" if partition else "")
        + ": written by the live MVs / ingestion, observed without a run."
    )
    # no tags: Dagster indexes event tags in a table of their own, one more write per event
    return AssetMaterialization(asset_key=item.key, partition=partition, metadata=metadata, description=description)


def build_live_state_sensor(loaded: LoadedProject, translator: ChmvTranslator) -> SensorDefinition:
    """``chmv_live_state``: report the partitions that hold data as runless materializations, every 30 s.

    The embedded engine is opened with the sensors' short lock timeout: while a run holds it the tick is
    skipped with the reason, and the next one catches up (the cursor only moves with what was reported).
    """

    @cache
    def tracked() -> list[Tracked]:  # at the first tick: loading the code location does not need it
        return tracked_assets(loaded, translator)

    @sensor(
        name="chmv_live_state",
        minimum_interval_seconds=LIVE_STATE_INTERVAL_SECONDS,
        default_status=DefaultSensorStatus.RUNNING,
        description="Partitions that hold data (targets and sources), read from system.parts in one query "
        "per tick and reported as runless materializations: rows, parts, bytes, newest write.",
    )
    def _live_state(context: SensorEvaluationContext, clickhouse: ClickHouseResource):
        try:
            with sensor_client(clickhouse, context) as client:
                report = evaluate_live_state(
                    client, loaded, translator, context.cursor, context.instance, tracked=tracked()
                )
        except SensorSkip as skip:
            return SkipReason(str(skip))
        context.log.info(report.summary())
        requests = report.partition_requests()
        if not report.events and not requests:
            return SensorResult(
                skip_reason=SkipReason(f"no partition changed since the last report ({report.summary()})"),
                cursor=report.cursor,
            )
        return SensorResult(asset_events=report.events, cursor=report.cursor, dynamic_partitions_requests=requests)

    return _live_state


def _write_cursor(data: dict) -> str:
    """JSON, deflated and base64-encoded: the fingerprints of tens of thousands of partitions repeat a lot."""
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return "z:" + base64.b64encode(zlib.compress(text.encode(), 6)).decode()


def _read_cursor(cursor: str | None) -> dict:
    if not cursor:
        return {}
    try:
        text = zlib.decompress(base64.b64decode(cursor[2:])).decode() if cursor.startswith("z:") else cursor
        data = json.loads(text)
    except (ValueError, zlib.error):
        return {}
    return data if isinstance(data, dict) and data.get("v") == CURSOR_VERSION else {}


__all__ = [
    "TickReport",
    "Tracked",
    "build_live_state_sensor",
    "evaluate_live_state",
    "partition_start",
    "tracked_assets",
]
