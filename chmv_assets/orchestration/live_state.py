"""Live partition state: what the tables hold, reported to Dagster as runless asset events.

The live MVs write the targets all the time, and ingestion writes the sources; Dagster only knows what
its runs did. The ``chmv_live_state`` sensor reads ``system.parts`` (active parts) for every tracked
table in ONE query per tick (:mod:`chmv_assets.engine.health.live_partitions`: the read, the fingerprints, the
cursor) and reports, for each partition that changed since the last report, an
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

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any, Literal

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
    sensor,
)

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import KEY_DELIMITER, TargetPartitioning, encode_key
from chmv_assets.engine.clock import calendar_instant, from_wall_seconds, session_zone
from chmv_assets.engine.health.live_partitions import (
    DayCount,
    LiveMemory,
    Tally,
    covering,
    day_range,
    days_to_recount,
    partition_start,
    read_live_partitions,
    rows_per_day,
    source_blocks,
)
from chmv_assets.engine.parts import Partition
from chmv_assets.orchestration.partitions import dynamic_partitions_of
from chmv_assets.orchestration.sensor_client import SensorSkip, sensor_client
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

#: Most events one tick reports; the rest follow at the next ticks (a cold start of thousands of partitions).
#: Dagster records a runless event in ~10-30 ms on SQLite, so a tick's events take the daemon under a minute.
MAX_EVENTS_PER_TICK = 2000
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
        partitioning: How its partitions are named: a target's partitioning (its windows, its key part's values),
            the days of an ingested source; None for an unpartitioned asset.
        time_column: The event-time column of an ingested source (its days are counted on it).
        dynamic: The dynamic partitions its key values are added to.
    """

    key: AssetKey
    ref: ObjectRef
    kind: Literal["target", "ingested", "source", "dictionary"]
    partitioning: TargetPartitioning | None = None
    time_column: str | None = None
    dynamic: str | None = None


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
    from chmv_assets.orchestration.translator import daily_partitioning

    project = loaded.project
    out = []
    for ref in project.targets:
        partitioning = loaded.partitioning(ref)
        dynamic = dynamic_partitions_of(translator.get_asset_spec(loaded, ref).partitions_def)
        key = translator.get_asset_key(ref)
        kept = partitioning if partitioning.partitioned else None
        out.append(Tracked(key, ref, "target", kept, dynamic=dynamic.name if dynamic else None))
    ingested = ingested_sources(loaded)
    if ingested:
        daily = daily_partitioning(loaded)
        for ref in ingested:
            out.append(Tracked(translator.get_asset_key(ref), ref, "ingested", daily, time_column(loaded, ref)))
    for ref in external_upstream(loaded, translator):
        out.append(
            Tracked(translator.get_asset_key(ref), ref, "dictionary" if ref in project.dictionaries else "source")
        )
    return out


class _Counted:
    """The client, counting the queries run through it (chdb has no system.query_log)."""

    def __init__(self, client: Client):
        self.client = client
        self.queries = 0

    def query(self, *args, **kwargs):
        self.queries += 1
        return self.client.query(*args, **kwargs)

    def command(self, *args, **kwargs):  # the session's time zone, read once (engine.clock.session_zone)
        return self.client.command(*args, **kwargs)


class _Keys:
    """Partition keys of partitionings' time windows, for the start of a ClickHouse partition, cached for one tick
    (the targets of one grain share the cache); None outside the partitions Dagster names (before ``partition_start``,
    after the current window). The keys are the partitioning's own (:mod:`chmv_assets.ddl.shapes`).

    Args:
        session: The zone the server names the parts' times in (their instants are read in the partition calendar).
        now: The current instant (the last partition is the one holding it, as Dagster's ``end_offset=1``).
    """

    def __init__(self, session: str = "UTC", now: datetime | None = None) -> None:
        self.session = session
        self.now = now or datetime.now(UTC)
        self._cache: dict[tuple, str | None] = {}

    def key(self, partitioning: TargetPartitioning, start: datetime) -> str | None:
        """The key of the window holding ``start``: an instant (aware), or the server's wall clock (naive: its first
        occurrence)."""
        cached = (partitioning.time, partitioning.zone, partitioning.start, start)
        if cached not in self._cache:
            window = partitioning.window_holding(start)
            found = window.start if window is not None else None
            inside = found is not None and partitioning.opening <= found <= self.now
            self._cache[cached] = window.key if inside and window is not None else None
        return self._cache[cached]

    def local(self, partitioning: TargetPartitioning, moment: datetime | None) -> datetime | None:
        """An instant the server gave (a part's oldest row) in the partition calendar
        (:func:`~chmv_assets.engine.clock.calendar_instant`)."""
        return calendar_instant(moment, self.session, partitioning.zone) if moment is not None else None


def _units(tracked: Tracked, parts: list[Partition], keys: _Keys) -> tuple[dict[str, Tally], int]:
    """``partition key ("" when unpartitioned) -> tally`` for a target, source or dictionary; and the parts outside."""
    units: dict[str, Tally] = {}
    outside = 0
    p = tracked.partitioning
    for part in parts:
        key: str | None = ""
        if p is not None and p.keyed:  # a key part: its values name the partition
            key = _keyed(p, part, keys)
        elif p is not None:  # its value names its start (the oldest row's instant tells which of a repeated hour)
            start = partition_start(part)
            key = keys.key(p, p.occurrence(start, keys.local(p, part.oldest))) if start is not None else None
        if key is None:
            outside += 1
            continue
        units.setdefault(key, Tally()).add(part)
    return units, outside


def _keyed(partitioning: TargetPartitioning, part: Partition, keys: _Keys) -> str | None:
    """The Dagster key of a ClickHouse partition of a target with a key part (None: outside its windows)."""
    values = encode_key(partitioning.key_values(part.value))
    if not partitioning.timed:
        return values
    oldest = keys.local(partitioning, part.oldest)  # the instant of its oldest row: exact across a fall-back
    if oldest is None and part.span is not None:
        oldest = from_wall_seconds(part.span[0])  # a Date key: its wall clock
    window = keys.key(partitioning, oldest) if oldest is not None else None
    return f"{window}{KEY_DELIMITER}{values}" if window is not None else None


@dataclass(frozen=True)
class _DayRequest:
    """Count the days of an ingested source within ``span`` (None: every day)."""

    tracked: Tracked
    span: tuple[int, int] | None

    def count(self) -> DayCount:
        return DayCount(self.tracked.ref, self.tracked.time_column or "", self.span)


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
    scan = _Scan(LiveMemory.loads(cursor), TickReport(tracked=len(tracked)), _Keys(session_zone(client)))
    tables = [t.ref for t in tracked if t.kind != "dictionary"]
    dictionaries = [t.ref for t in tracked if t.kind == "dictionary"]
    state = read_live_partitions(counted, loaded.project, tables, dictionaries)  # type: ignore[arg-type]
    day_requests = scan.tables(tracked, state)
    days = rows_per_day(counted, [r.count() for r in day_requests])  # type: ignore[arg-type]
    scan.days(day_requests, days, state)
    scan.emit(tracked, instance)
    scan.report.new_keys = _new_keys(scan.keyed, instance)
    scan.report.queries = counted.queries
    scan.report.seconds = time.perf_counter() - began
    return scan.report


class _Scan:
    """One tick's comparison of the live state with the cursor: what changed, and the next cursor."""

    def __init__(self, previous: LiveMemory, report: TickReport, keys: _Keys):
        self.seen_assets = previous.assets
        self.seen_sources = previous.sources
        self.new = LiveMemory()
        self.new_assets, self.new_sources = self.new.assets, self.new.sources
        self.changed: dict[AssetKey, dict[str, tuple[Tally, str]]] = {}  # asset -> partition -> (tally, fingerprint)
        self.report = report
        self.keys = keys
        self.keyed: dict[str, set[str]] = {}  # dynamic partitions definition -> key values the server holds

    def tables(self, tracked: list[Tracked], state: dict[ObjectRef, list[Partition]]) -> list[_DayRequest]:
        """Compare every table's partitions with the cursor; returns the day counts the ingested sources need."""
        day_requests = []
        for item in tracked:
            name = item.key.to_user_string()
            parts = state.get(item.ref, [])
            if item.kind == "ingested":
                before = self.seen_sources.get(item.ref.fqn, {})
                self.new_sources[item.ref.fqn] = source_blocks(parts)
                self.new_assets[name] = dict(self.seen_assets.get(name, {}))
                recount, span = days_to_recount(parts, before)
                if recount:
                    day_requests.append(_DayRequest(item, span))
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
        state: dict[ObjectRef, list[Partition]],
    ) -> None:
        """Compare the day counts of the re-read ingested sources with the cursor."""
        for request in requests:
            item = request.tracked
            name = item.key.to_user_string()
            seen = self.new_assets[name]
            counted_days = set()
            for day, n_rows in days.get(item.ref, {}).items():
                partition = self.keys.key(item.partitioning, datetime.fromisoformat(day)) if item.partitioning else None
                if partition is None:
                    self.report.outside += 1
                    continue
                counted_days.add(partition)
                if seen.get(partition) != str(n_rows):
                    unit = Tally()
                    for part in covering(state.get(item.ref, []), day):
                        unit.add(part)
                    unit.rows = n_rows  # the day's rows; parts, bytes and newest write: of the partitions holding it
                    self.changed.setdefault(item.key, {})[partition] = (unit, str(n_rows))
                    seen.pop(partition, None)
            # days of the re-read range that hold no rows any more are forgotten (reported again if rows come back)
            first, last = day_range(request.span)
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
        report.cursor = self.new.dumps()


def _new_keys(keyed: dict[str, set[str]], instance: DagsterInstance | None) -> dict[str, list[str]]:
    """The key values of each dynamic partitions definition that Dagster does not know yet."""
    out = {}
    for name, values in keyed.items():
        known = set(instance.get_dynamic_partitions(name)) if instance is not None else set()
        out[name] = sorted(values - known)
    return out


def _event(item: Tracked, partition: str | None, unit: Tally) -> AssetMaterialization:
    rows_key = "dagster/partition_row_count" if partition is not None else "dagster/row_count"
    metadata: dict[str, Any] = {
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


__all__ = [
    "TickReport",
    "Tracked",
    "build_live_state_sensor",
    "evaluate_live_state",
    "tracked_assets",
]
