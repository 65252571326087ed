"""The landing zone's rows of a trigger, read one way for a rebuild's fill and for parity's recompute.

Where a partition's rows come from the lake (:mod:`chmv_assets.engine.rebuild.rows`), the MV's own SELECT reads, in
place of its trigger table, the landing rows up to the ingestion cutoff, deduplicated by the ingestion keys, UNION ALL
the table's rows after it (docs/rebuilds.md, "Backfill protocol"). :func:`lake_read` decides that read once — the
files, the event-time bounds, the cutoff, the columns and keys — as a frozen :class:`LakeRead`; its two readers take
it as it is:

- **staged** (a rebuild): a provider of staged rows (Spark) reads :attr:`LakeRead.files`, keeps the rows in the bounds
  and at or before the cutoff, drops duplicates by the keys and writes Parquet, which ClickHouse reads with ``file()``
  (:meth:`LakeRead.staged_bounds`);
- **inline** (parity, read-only: the watermark is read, never established): ClickHouse reads the same files with
  ``file()`` and applies the same bounds, cutoff and dedup itself (:meth:`LakeRead.inline`).

Either way :meth:`LakeRead.relation` unites the lake's rows with the table's after the cutoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.instants import window_instant
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef, Table
from chmv_assets.ddl.partitioning import PartitionWindow, window_reach
from chmv_assets.engine.ingest import landing
from chmv_assets.engine.ingest import staging_area as staging
from chmv_assets.engine.ingest.cutoff import cutoff_of
from chmv_assets.engine.watermarks import read_watermark
from chmv_assets.errors import LandingZoneError
from chmv_assets.sql.quoting import quote
from chmv_assets.sql.rebuild_sql import range_column, staged_relation, window_zone
from chmv_assets.sql.time_sql import UTC_INSTANT, time_sql

#: Characters a landing file's path may not hold to be named in a ``file()`` glob (else its day folders are read).
_GLOB = set("{}*?,\\'")


@dataclass(frozen=True)
class LakeRead:
    """The landing zone's rows of one trigger that a fill or a recompute reads (see the module).

    Attributes:
        source: The trigger table.
        root: The landing zone.
        files: The landing files that can hold the rows (their arrival meets the bounds, give or take the lateness).
        columns: The columns read (the source table's that the files hold).
        keys: The ingestion's dedup keys.
        time_column: The source's event-time column.
        since, before: The event-time bounds ``[since, before)`` (UTC instants); None: unbounded.
        cutoff: The ingestion cutoff (watermark - late tolerance, naive UTC): the lake's rows at or before it, the
            table's after it; None: no watermark yet, the lake alone.
        rows: Rows in ``files`` (their footers).
    """

    source: ObjectRef
    root: Path
    files: tuple[str, ...]
    columns: tuple[str, ...]
    keys: tuple[str, ...]
    time_column: str
    since: datetime | None
    before: datetime | None
    cutoff: datetime | None
    rows: int = 0

    def staged_bounds(self) -> dict[str, datetime | None]:
        """The bounds a provider of staged rows applies (``spark.staging.stage``: naive UTC times)."""
        return {"at_or_before": self.cutoff, "since": _naive_utc(self.since), "before": _naive_utc(self.before)}

    def inline(self, table: Table) -> str:
        """The rows as ClickHouse reads them from the landing files itself: a parenthesized subquery."""
        tcol = quote(self.time_column)
        bounds = [f"{tcol} >= {time_sql(self.since, UTC_INSTANT)}"] if self.since is not None else []
        bounds += [f"{tcol} < {time_sql(self.before, UTC_INSTANT)}"] if self.before is not None else []
        if self.cutoff is not None:
            bounds.append(f"{tcol} <= {time_sql(self.cutoff.replace(tzinfo=UTC), UTC_INSTANT)}")
        where = f" WHERE {' AND '.join(bounds)}" if bounds else ""
        keys = ", ".join(quote(k) for k in self.keys) or ", ".join(quote(c) for c in self.columns)
        cols = ", ".join(quote(c) for c in self.columns)
        relation = staging.file_relation(self._glob(), table, self.columns)
        return f"(SELECT {cols} FROM {relation}{where} LIMIT 1 BY {keys})"

    def relation(self, lake: str) -> str:
        """``lake`` (the staged or inline rows) UNION ALL the table's rows after the cutoff, standing in for the
        trigger table."""
        return staged_relation(self.source, lake, self.columns, self.time_column, self.cutoff)

    def describe(self) -> str:
        split = f"<= {self.cutoff:%Y-%m-%d %H:%M:%S}, the table's after it" if self.cutoff else "all of them"
        return f"{self.source.fqn}: {len(self.files)} landing files (rows {split})"

    def _glob(self) -> str:
        """The files, named under the source's folder (``…/db.t/{date=…/hour=01.parquet,…}``)."""
        folder = self.root / self.source.fqn
        names = [str(Path(f).relative_to(folder)) for f in self.files]
        if names and not any(_GLOB & set(n) for n in names):
            return str(folder / (names[0] if len(names) == 1 else "{" + ",".join(names) + "}"))
        days = sorted({Path(f).parent.name for f in self.files})  # date=YYYY-MM-DD: digits and dashes
        return str(folder / (days[0] if len(days) == 1 else "{" + ",".join(days) + "}") / "*.parquet")


def lake_read(
    loaded: LoadedProject,
    source: ObjectRef,
    root: Path,
    *,
    since: datetime | None,
    before: datetime | None,
    cutoff: datetime | None,
) -> LakeRead:
    """The lake's read of ``source`` between ``since`` and ``before`` (UTC instants, None: unbounded) up to
    ``cutoff``: the files whose arrival can hold such rows, checked (:func:`~chmv_assets.engine.ingest.landing.check_files`;
    none where the landing zone holds no such file).

    Raises:
        LandingZoneError: ``source`` is not defined in the DDL directory, or its files do not match it.
    """
    table = loaded.project.table(source)
    if table is None:
        raise LandingZoneError(f"{source.fqn} is not defined in the DDL directory")
    lateness = timedelta(minutes=loaded.config.ingestion.max_lateness_minutes)
    uppers = [t for t in (_naive_utc(before), cutoff) if t is not None]
    upper = min(uppers) if uppers else None
    files = landing.list_files(
        root,
        source,
        arrived_after=_naive_utc(since),
        arrived_before=upper + lateness if upper is not None else None,
    )
    columns, rows = landing.check_files(files, table)
    keys = landing.dedup_keys(loaded, source, columns)
    tcol = landing.time_column(loaded, source)
    return LakeRead(
        source, root, tuple(f.path for f in files), tuple(columns), tuple(keys), tcol, since, before, cutoff, rows
    )


def lake_span(
    loaded: LoadedProject, target: ObjectRef, source: ObjectRef, windows: Sequence[PartitionWindow | None], zone: str
) -> tuple[datetime, datetime] | None:
    """The event times of ``source`` whose rows can map into ``windows`` of ``target``, as UTC instants
    ``[since, before)``: every window's range on the event-time column, where the MVs reading ``source`` truncate it
    (its end reaching as far as theirs: :func:`~chmv_assets.ddl.partitioning.window_reach`), in the zone the windows'
    rows are computed in (:func:`~chmv_assets.sql.rebuild_sql.window_zone`; ``zone``: the session's). None where some
    window is the whole table or some MV places its rows in windows by another column, or by none (then every lake
    row is read)."""
    project = loaded.project
    scheme = loaded.partitioning(target)
    views = [v for v in project.views_into(target) if v.trigger == source]
    timed = [w for w in windows if w is not None and w.start is not None and w.end is not None]
    if not views or not timed or len(timed) != len(windows):
        return None
    lows, highs = [], []
    for view in views:
        found = range_column(view, project, scheme)
        if found is None or found[0].name != loaded.config.ingestion.time_columns.get(source.fqn):
            return None
        wall = window_zone(project.table(target), scheme, found[0], zone)
        reach = window_reach(view, scheme)
        lows += [window_instant(w.start, wall) for w in timed]  # type: ignore[arg-type]
        highs += [window_instant(w.end, wall) + reach for w in timed]  # type: ignore[arg-type]
    return min(lows).astimezone(UTC), max(highs).astimezone(UTC)


def read_cutoff(client: Client, loaded: LoadedProject, source: ObjectRef) -> datetime | None:
    """The cutoff a read-only lake read takes (the watermark read, never established)."""
    return cutoff_of(read_watermark(client, source), loaded.config.ingestion.late_tolerance_minutes)


def _naive_utc(value: datetime | None) -> datetime | None:
    """An instant as the naive UTC time the landing zone's event times are (a naive one is UTC already)."""
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)
