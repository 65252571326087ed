"""Helpers of the coverage tests: a small project whose source may have a TTL, hand-made facts, landing files."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.rebuild.coverage import Facts, Stats, assess

from support.ddl import load_ddl, ref

D = datetime
NOW = D(2026, 11, 22, 5, 0)
SRC, HOURLY, DAILY, LATEST = ref("d.src"), ref("d.hourly"), ref("d.daily"), ref("d.latest")
DAYS = [window_at(D(2026, 9, d), "day") for d in (1, 2, 3)]

DDL = """
CREATE TABLE d.src (ts DateTime, k String) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY (k, ts) {ttl};
CREATE TABLE d.hourly (hour DateTime, k String, c UInt64) ENGINE = SummingMergeTree
PARTITION BY toDate(hour) ORDER BY (k, hour);
CREATE MATERIALIZED VIEW d.hourly_mv TO d.hourly AS
SELECT toStartOfHour(ts) AS hour, k, count() AS c FROM d.src GROUP BY hour, k;
CREATE TABLE d.latest (k String, ts DateTime) ENGINE = ReplacingMergeTree(ts) ORDER BY k;
CREATE MATERIALIZED VIEW d.latest_mv TO d.latest AS SELECT k, ts FROM d.src;
"""
TOML = """
default_database = "d"
partition_start = "2026-08-01"
[ingestion]
landing_dir = "{landing}"
[ingestion.time_columns]
"d.src" = "ts"
"""


def project(tmp_path: Path, ttl: str = "", landing: Path | None = None) -> LoadedProject:
    toml = TOML.format(landing=landing) if landing else 'default_database = "d"\npartition_start = "2026-08-01"'
    return load_ddl(tmp_path / "ddl", DDL.format(ttl=ttl), toml=toml)


def facts(
    table: Stats | None = None, windows: dict | None = None, target: dict | None = None, mapped: bool = True
) -> Facts:
    """Facts about d.src (whole table, per window start) and the target (per window start)."""
    return Facts(
        now=NOW,
        tables=((SRC, table),) if table else (),
        source_windows=tuple((SRC, k, s) for k, s in (windows or {}).items()),
        target_windows=tuple((target or {}).items()),
        mapped=(SRC,) if mapped else (),
    )


AUG1, OCT31 = D(2026, 8, 1), D(2026, 10, 31)


def whole(oldest: datetime = AUG1, newest: datetime = OCT31, rows: int = 1000) -> Stats:
    return Stats(rows, oldest, newest)


def one(loaded, window, f, root=None, target=HOURLY):
    coverage = assess(loaded, target, [window], f, root)
    (covered,) = coverage.windows
    (source,) = covered.sources
    return covered, source


def write_files(root: Path, arrivals: list[datetime]) -> None:
    for hour in arrivals:
        folder = root / "d.src" / f"date={hour:%Y-%m-%d}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"ts": [hour], "k": ["a"]}), folder / f"hour={hour:%H}.parquet")
