"""Benchmark of a range run's estimate of the time left, against the time it really took.

A range of many small hourly partitions (a single-run backfill) runs through the target op on the embedded engine,
as Dagster runs it (``materialize`` with the range's tags): each partition's materialization is recorded as it is
swapped in, with the run's progress (``chmv/partitions_done``, ``chmv/elapsed_seconds``,
``chmv/estimated_seconds_left``). At a few points of the run the estimate made there is set against the time the rest
of the fills really took (the last partition's elapsed minus this one's): the ratio estimate / actual (1.0: exact;
above: pessimistic). Two shapes of range: every hour alike (``even``), and hours growing from one to twenty times the
rows of the first (``growing``: the estimate, the pace so far, under-estimates what is left). No absolute time is
asserted (a shared machine): only figures are printed, with the run's wall time and the mean seconds per partition.

Run: .venv/bin/python benchmarks/bench_range_progress.py   (CHMV_BENCH_PARTITIONS=1000; CHMV_BENCH_ROWS=500 rows in
the first hour; CHMV_BENCH_SHAPES=even)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
warnings.filterwarnings("ignore")

from dagster import AssetKey, DagsterEventType, DagsterInstance, materialize  # noqa: E402

from chmv_assets.engine.lifecycle.deploy import apply  # noqa: E402
from chmv_assets.orchestration.assets import build_chmv_assets  # noqa: E402
from resources.clickhouse import ClickHouseResource  # noqa: E402

from support.ddl import load_ddl  # noqa: E402

DDL = """
CREATE DATABASE bench;
CREATE TABLE bench.events (ts DateTime, n UInt32) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE bench.hourly (ts DateTime, n UInt32) ENGINE = MergeTree PARTITION BY toStartOfHour(ts) ORDER BY ts;
CREATE MATERIALIZED VIEW bench.hourly_mv TO bench.hourly AS SELECT ts, n FROM bench.events;
"""
KEY = AssetKey(["bench", "hourly"])
START = "2026-01-01 00:00:00"
POINTS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9)


def rows_of(shape: str, base: int, n: int) -> str:
    """The rows of hour ``h`` of the range, as a ClickHouse expression."""
    return str(base) if shape == "even" else f"toUInt32({base} * (1 + 19 * h / {max(n - 1, 1)}))"


def run(workdir: Path, n: int, shape: str, base: int) -> None:
    loaded = load_ddl(workdir / "ddl", DDL, toml='default_database = "bench"\npartition_start = "2026-01-01"\n')
    engine = ClickHouseResource(dsn=f"chdb://{workdir / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
        client.command(
            f"INSERT INTO bench.events SELECT toDateTime('{START}', 'UTC') + h * 3600 + i % 3600, 1 "
            f"FROM (SELECT number AS h FROM numbers({n})) ARRAY JOIN range({rows_of(shape, base, n)}) AS i",
            settings={"max_partitions_per_insert_block": 0},  # the MV writes every hour of the range at once
        )
        rows = client.command("SELECT count() FROM bench.events")
        client.command("TRUNCATE TABLE bench.hourly")
    asset = next(a for a in build_chmv_assets(loaded) if getattr(a, "keys", None) and KEY in a.keys)
    keys = asset.partitions_def.get_partition_keys()[:n]
    instance = DagsterInstance.ephemeral()
    started = time.monotonic()
    result = materialize(
        [asset],
        selection=[KEY],
        resources={"clickhouse": engine},
        instance=instance,
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    wall = time.monotonic() - started
    assert result.success
    events = [
        e.dagster_event.event_specific_data.materialization.metadata
        for e in instance.all_logs(result.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    ]
    assert len(events) == n, len(events)
    elapsed = [m["chmv/elapsed_seconds"].value for m in events]
    estimate = [m["chmv/estimated_seconds_left"].value for m in events]
    end = elapsed[-1]
    print(
        f"{shape}: {n} hourly partitions, {rows:,} source rows; run {wall:.1f}s wall, fills {end:.1f}s "
        f"({end / n:.3f}s per partition)"
    )
    print(f"  {'done':>10} {'elapsed':>9} {'estimate left':>14} {'actual left':>12} {'ratio':>6}")
    for point in POINTS:
        k = max(int(n * point), 1)
        actual = end - elapsed[k - 1]
        ratio = estimate[k - 1] / actual if actual > 0 else float("nan")
        print(f"  {f'{k}/{n}':>10} {elapsed[k - 1]:>8.1f}s {estimate[k - 1]:>13.1f}s {actual:>11.1f}s {ratio:>6.2f}")


def main() -> None:
    n = int(os.environ.get("CHMV_BENCH_PARTITIONS", "200"))
    base = int(os.environ.get("CHMV_BENCH_ROWS", "500"))
    shapes = os.environ.get("CHMV_BENCH_SHAPES", "even,growing").split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            run(Path(tmp) / shape, n, shape, base)


if __name__ == "__main__":
    main()
