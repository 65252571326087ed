"""How far each target lags its sources: one batched query for every target of the project.

For each MV, the newest rows of its trigger (the last ``sla + grain`` of event time) are run through
the MV's own SELECT; the newest partition-column value that yields is what the target should hold by
now. A target is stale when its own newest value lags that by more than the SLA. Filtering and routing
MVs are therefore judged by the rows they actually keep, and aggregating MVs by their buckets.
Only targets that look behind by the parts' min/max index pay for that SELECT. A target the landing zone loads
(``chmv_meta.ingestion_watermarks``) has its ingestion watermark compared with its sources' newest row too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import MaterializedView, ObjectRef
from chmv_assets.engine.clients import BIG_QUERY_SETTINGS
from chmv_assets.engine.clock import server_zone, session_zone, wall
from chmv_assets.engine.watermarks import read_watermarks
from chmv_assets.sql.meta import INGESTION_WATERMARKS, LEGACY_WATERMARKS
from chmv_assets.sql.parts_sql import newest_per_table_sql
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.rebuild_sql import view_select

_EPOCH = datetime(1970, 1, 2)
#: The shortest freshness window Dagster accepts.
MIN_FRESHNESS_WINDOW = timedelta(minutes=1)
_UNIT_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 7 * 86400, "MONTH": 31 * 86400}
_UNIT_SECONDS |= {"YEAR": 366 * 86400}
_REFRESH = re.compile(
    r"^\s*(?:EVERY|AFTER)\s+(?P<period>.*?)(?:\s+(?:OFFSET|RANDOMIZE|DEPENDS|APPEND)\b|$)", re.I | re.S
)


@dataclass(frozen=True)
class Probe:
    """What to measure for one MV: its trigger's time column and the target column it truncates into."""

    view: MaterializedView
    trigger: ObjectRef
    trigger_column: str
    target_column: str
    grain_seconds: int


@dataclass
class TargetLag:
    """The lag of one target.

    Attributes:
        lag_seconds: How far the target's newest value trails what its MVs yield over the newest source rows.
        watermark_lag_seconds: How far the watermark trails the newest source row.
        stale: Either lag is past the SLA.
        missing: Objects that do not exist on the server (nothing measured).
        note: Why nothing could be measured.
    """

    target: ObjectRef
    column: str | None = None
    source_max: datetime | None = None
    expected_max: datetime | None = None
    target_max: datetime | None = None
    watermark: datetime | None = None
    lag_seconds: float = 0.0
    watermark_lag_seconds: float | None = None
    stale: bool = False
    missing: tuple[str, ...] = ()
    note: str = ""
    reasons: list[str] = field(default_factory=list)


def freshness_window(loaded: LoadedProject, target: ObjectRef) -> timedelta | None:
    """How long ``target`` may go without a write before Dagster's freshness of it fails; None where none is expected.

    The live MVs write a target whenever its sources receive rows, and the ``chmv_live_state`` sensor records each
    write as a materialization: a target written by insert-triggered MVs is expected to be written within the
    staleness SLA (``sla_minutes``, at least Dagster's one minute); one a refreshable MV writes, within its refresh
    period plus the SLA (None when the period cannot be read). This is Dagster's freshness (time since the last
    write), not chmv's staleness (how far the target trails its sources): a target whose sources receive nothing is
    fresh for chmv and fails Dagster's freshness once the window has passed (docs/checks-and-sensors.md).
    """
    views = loaded.project.views_into(target)
    if not views:
        return None
    window = max(timedelta(minutes=loaded.config.sla_minutes), MIN_FRESHNESS_WINDOW)
    refreshed = [refresh_period(v.refresh_schedule or "") for v in views if v.refreshable]
    if not refreshed:
        return window
    if any(period is None for period in refreshed):
        return None
    return window + max(p for p in refreshed if p is not None)


def refresh_period(schedule: str) -> timedelta | None:
    """The period of a refreshable MV's schedule (``EVERY 2 HOUR OFFSET 5 MINUTE`` → 2 h, ``AFTER 30 MINUTE`` →
    30 min; a month counts 31 days), None when it cannot be read."""
    found = _REFRESH.match(schedule)
    if found is None:
        return None
    pairs = re.findall(r"(\d+)\s+([A-Za-z]+?)S?\b", found["period"])
    if not pairs or any(unit.upper() not in _UNIT_SECONDS for _n, unit in pairs):
        return None
    return timedelta(seconds=sum(int(n) * _UNIT_SECONDS[unit.upper()] for n, unit in pairs))


def trigger_time_column(loaded: LoadedProject, ref: ObjectRef) -> str | None:
    """The event-time column of a table an MV reads: chmv.toml, else its time partition column."""
    configured = loaded.config.ingestion.time_columns.get(ref.fqn)
    if configured:
        return configured
    return loaded.partitioning(ref).column


def probes(loaded: LoadedProject, target: ObjectRef) -> list[Probe]:
    """The measurable MVs of a target (an MV whose output keeps no trigger time column is not measurable, nor one
    whose trigger is a stream table: chmv never reads one)."""
    out = []
    for view in loaded.project.views_into(target):
        if view.trigger is None or view.refreshable or loaded.project.is_stream(view.trigger):
            continue
        column = trigger_time_column(loaded, view.trigger)
        if column is None:
            continue
        for output in view.output_columns:
            if output.truncation is not None and output.truncation[0] == column:
                grain = output.truncation[1]
                out.append(Probe(view, view.trigger, column, output.name, grain.seconds if grain else 0))
                break
    return out


def measure_staleness(
    client: Client, loaded: LoadedProject, *, targets: list[ObjectRef] | None = None
) -> list[TargetLag]:
    """The lag of every target in at most three queries, whatever the number of targets.

    1. ``system.tables`` joined with ``system.parts``: which objects exist, and the newest value of every
       table whose PARTITION BY reads its time column (the parts' min/max index: no data is read).
    2. The ingestion watermarks (:func:`chmv_assets.engine.watermarks.read_watermarks`; none before chmv_meta
       exists).
    3. One UNION ALL, only when needed: ``max()`` of the time columns the parts cannot answer, and the
       MV's own SELECT over the newest source rows for the targets that look behind, to confirm that
       what they miss is rows the MV keeps (a filtering MV legitimately trails its source).

    Args:
        client: An open client.
        loaded: The parsed project.
        targets: Restrict to these targets.
    """
    project, sla = loaded.project, loaded.config.sla_minutes * 60
    zone = server_zone(client)  # every time below is the server's wall clock (chmv_assets.engine.clock)
    targets = list(targets or project.targets)
    plan = {t: probes(loaded, t) for t in targets}
    needed = set(targets) | {s for ps in plan.values() for p in ps for s in p.view.source_refs}
    needed |= {INGESTION_WATERMARKS.ref, LEGACY_WATERMARKS}
    existing: set[ObjectRef] = set()
    newest: dict[ObjectRef, datetime] = {}
    for database, name, max_time, max_date in client.query(
        "SELECT t.database, t.name, max(p.newest_time), max(p.newest_date) FROM system.tables AS t LEFT JOIN "
        f"({newest_per_table_sql()}) AS p "
        "ON p.database = t.database AND p.table = t.name WHERE t.database IN {dbs:Array(String)} "
        "GROUP BY t.database, t.name",
        parameters={"dbs": sorted({r.database for r in needed})},
    ).result_rows:
        ref = ObjectRef(database=database, name=name)
        existing.add(ref)
        times = [t for t in (wall(max_time, zone), wall(max_date)) if t is not None]
        value = max(times) if times else None
        if value is not None and value > _EPOCH:
            newest[ref] = value
    lags = {t: TargetLag(target=t) for t in targets}
    branches: list[str] = []
    slots: list[tuple[str, object]] = []
    values: dict[tuple[str, object], datetime | None] = {}

    def branch(kind: str, key: object, expr: str, relation: str) -> None:
        branches.append(
            f"SELECT toUInt32({len(slots)}) AS i, CAST(maxOrNull({expr}) AS Nullable(DateTime64(3))) AS v "
            f"FROM {relation}"
        )
        slots.append((kind, key))

    def newest_of(kind: str, ref: ObjectRef, column: str) -> None:
        if (kind, ref) in values or (kind, ref) in slots:
            return
        table = project.table(ref)
        if table is not None and table.partition_by is not None and table.partition_by.columns == (column,):
            values[(kind, ref)] = newest.get(ref)  # answered by the parts' min/max index
        else:
            branch(kind, ref, quote(column), qualified(ref))

    for target, ps in plan.items():
        lag = lags[target]
        missing = sorted(r.fqn for r in {target, *(s for p in ps for s in p.view.source_refs)} if r not in existing)
        if missing:
            lag.missing = tuple(missing)
        elif not ps:
            lag.note = "no MV output keeps the trigger's time column: lag is not measurable"
        else:
            lag.column = ps[0].target_column
            newest_of("target", target, lag.column)
            for probe in ps:
                newest_of("source", probe.trigger, probe.trigger_column)
    for target, ps in plan.items():
        lag = lags[target]
        if lag.missing or not ps:
            continue
        target_max = values.get(("target", target))
        source_max = max((v for p in ps if (v := values.get(("source", p.trigger))) is not None), default=None)
        known = ("target", target) in values and all(("source", p.trigger) in values for p in ps)
        grain = max(p.grain_seconds for p in ps)
        behind = source_max is not None and (
            target_max is None or (source_max - target_max).total_seconds() > sla + grain
        )
        if known and not behind:
            continue
        table = project.table(target)
        assert table is not None
        partitioning = loaded.partitioning(target)
        for n, probe in enumerate(ps):
            lookback = sla + min(probe.grain_seconds, 3600)
            tail = (
                f"{quote(probe.trigger_column)} >= (SELECT max({quote(probe.trigger_column)}) "
                f"FROM {qualified(probe.trigger)}) - INTERVAL {int(lookback)} SECOND"
            )
            select = view_select(
                probe.view, project, table, partitioning, None, zone=session_zone(client), trigger_where=tail
            )
            branch("expected", (target, n), quote(probe.target_column), f"({select})")
    if branches:
        for i, v in client.query(" UNION ALL ".join(branches), settings=BIG_QUERY_SETTINGS).result_rows:
            v = wall(v, zone)
            values[slots[i]] = v if v is not None and v > _EPOCH else None
    watermarks: dict[str, datetime | None] = {}
    if existing & {INGESTION_WATERMARKS.ref, LEGACY_WATERMARKS}:
        # naive UTC instants, as the server's wall clock
        watermarks = {
            s: wall(ts.replace(tzinfo=UTC), zone) if ts else None for s, ts in read_watermarks(client).items()
        }
    for target, ps in plan.items():
        lag = lags[target]
        if lag.missing or not ps:
            continue
        lag.target_max = values.get(("target", target))
        lag.source_max = max((v for p in ps if (v := values.get(("source", p.trigger))) is not None), default=None)
        expected = [values.get(("expected", (target, n))) for n in range(len(ps))]
        lag.expected_max = max((e for e in expected if e is not None), default=None)
        if lag.expected_max is not None:
            if lag.target_max is None:
                lag.lag_seconds = (lag.expected_max - _EPOCH).total_seconds()
            else:
                lag.lag_seconds = max(0.0, (lag.expected_max - lag.target_max).total_seconds())
        if lag.lag_seconds > sla:
            lag.reasons.append(
                f"newest {lag.column} {lag.target_max} trails {lag.expected_max} by "
                f"{lag.lag_seconds / 60:.0f} min (SLA {sla // 60} min)"
            )
        lag.watermark = watermarks.get(target.fqn)
        if lag.watermark is not None and lag.source_max is not None:
            lag.watermark_lag_seconds = max(0.0, (lag.source_max - lag.watermark).total_seconds())
            if lag.watermark_lag_seconds > sla:
                lag.reasons.append(
                    f"watermark {lag.watermark} trails the newest source row {lag.source_max} by "
                    f"{lag.watermark_lag_seconds / 60:.0f} min"
                )
        lag.stale = bool(lag.reasons)
    return list(lags.values())
