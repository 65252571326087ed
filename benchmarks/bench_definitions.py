"""Definitions build time for 250/500/1,000/2,000 generated MVs (goal: < 2 s at 1,000, linear).

Run: ``.venv/bin/python benchmarks/bench_definitions.py [--profile N]``. Each size gets a synthetic DDL
directory: a third of the MVs form chains of three (source -> daily AggregatingMergeTree -> monthly
rollup -> unpartitioned summary), the rest are single MVs into daily or monthly targets, one in ten
with a JOIN. Timed: parse (``load``), ``build_definitions`` and resolving the repository, twice: cold
(the first load of the directory parses it) and warm (every later load, e.g. each run process of
``dagster dev``, reads the parse cache).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (250, 500, 1000, 2000)


def _chain(i: int) -> str:
    return f"""
-- Chain {i}: raw events, daily states, monthly rollup, summary.
CREATE TABLE bench.src_{i} (ts DateTime, user_id UInt64, kind LowCardinality(String), ms UInt32)
ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY (kind, ts);
CREATE TABLE bench.daily_{i} (day Date, kind LowCardinality(String), n AggregateFunction(sum, UInt64),
    users AggregateFunction(uniq, UInt64)) ENGINE = AggregatingMergeTree PARTITION BY toYYYYMMDD(day) ORDER BY (kind, day);
CREATE MATERIALIZED VIEW bench.daily_{i}_mv TO bench.daily_{i} AS
SELECT toDate(ts) AS day, kind, sumState(toUInt64(1)) AS n, uniqState(user_id) AS users FROM bench.src_{i} GROUP BY day, kind;
CREATE TABLE bench.monthly_{i} (month Date, kind LowCardinality(String), n AggregateFunction(sum, UInt64))
ENGINE = AggregatingMergeTree PARTITION BY toYYYYMM(month) ORDER BY (kind, month);
CREATE MATERIALIZED VIEW bench.monthly_{i}_mv TO bench.monthly_{i} AS
SELECT toStartOfMonth(day) AS month, kind, sumMergeState(n) AS n FROM bench.daily_{i} GROUP BY month, kind;
CREATE TABLE bench.summary_{i} (kind String, n UInt64) ENGINE = SummingMergeTree ORDER BY kind;
CREATE MATERIALIZED VIEW bench.summary_{i}_mv TO bench.summary_{i} AS
SELECT kind, sumMerge(n) AS n FROM bench.monthly_{i} GROUP BY kind;
"""


def _single(i: int) -> str:
    partition = "toDate(hour)" if i % 2 else "toYYYYMM(hour)"
    join = "LEFT JOIN bench.dim AS d ON d.id = r.user_id" if i % 10 == 0 else ""
    name = "d.name" if join else "''"
    return f"""
CREATE TABLE bench.raw_{i} (timestamp DateTime, endpoint String, user_id UInt64, response_time_ms UInt32)
ENGINE = MergeTree PARTITION BY toYYYYMM(timestamp) ORDER BY (endpoint, timestamp);
CREATE TABLE bench.stats_{i} (hour DateTime, endpoint String, name String, requests AggregateFunction(sum, UInt64),
    p99 AggregateFunction(quantile(0.99), UInt32)) ENGINE = AggregatingMergeTree PARTITION BY {partition} ORDER BY (endpoint, hour);
CREATE MATERIALIZED VIEW bench.stats_{i}_mv TO bench.stats_{i} AS
SELECT toStartOfHour(r.timestamp) AS hour, r.endpoint AS endpoint, {name} AS name, sumState(toUInt64(1)) AS requests,
       quantileState(0.99)(r.response_time_ms) AS p99
FROM bench.raw_{i} AS r {join}
GROUP BY hour, endpoint, name;
"""


def generate(root: Path, views: int) -> None:
    """Write ``views`` MVs (and their tables) into ``root``, 50 MVs per file."""
    chains = views // 3 // 3
    parts = ["CREATE DATABASE IF NOT EXISTS bench ENGINE = Atomic;\n",
             "CREATE TABLE bench.dim (id UInt64, name String) ENGINE = MergeTree ORDER BY id;\n"]  # fmt: skip
    parts += [_chain(i) for i in range(chains)]
    parts += [_single(i) for i in range(views - 3 * chains)]
    for n in range(0, len(parts), 50):
        (root / f"{n:05d}.sql").write_text("".join(parts[n : n + 50]))
    (root / "chmv.toml").write_text('default_database = "bench"\npartition_start = "2026-01-01"\n')


def build(root: Path) -> tuple[float, float, float, int]:
    from chmv_assets.ddl.loader import load
    from chmv_assets.orchestration.definitions import build_definitions
    from resources.clickhouse import ClickHouseResource

    t0 = time.perf_counter()
    loaded = load(root)
    t1 = time.perf_counter()
    defs = build_definitions(loaded, clickhouse=ClickHouseResource(dsn="chdb:///tmp/chmv-bench-unused"))
    t2 = time.perf_counter()
    repo = defs.get_repository_def()
    assets = len(repo.asset_graph.get_all_asset_keys())
    t3 = time.perf_counter()
    assert len(loaded.project.views) > 0
    return t1 - t0, t2 - t1, t3 - t2, assets


def main() -> None:
    import chmv_assets.definitions  # noqa: F401  (import cost is not part of the measurement)

    profile_size = int(sys.argv[sys.argv.index("--profile") + 1]) if "--profile" in sys.argv else None
    totals: dict[int, float] = {}
    warm: dict[int, float] = {}
    print(f"{'views':>6} {'parse':>8} {'build':>8} {'resolve':>8} {'total':>8} {'assets':>7}")
    for size in SIZES if profile_size is None else (profile_size,):
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["CHMV_STATE_DIR"] = str(Path(tmp) / "state")  # the parse cache of this run only
            root = Path(tmp) / "ddl"
            root.mkdir()
            generate(root, size)
            if profile_size is not None:
                profiler = cProfile.Profile()
                profiler.enable()
            parse, build_s, resolve, assets = build(root)
            warm_parse, warm_build, warm_resolve, _ = build(root)
            if profile_size is not None:
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        totals[size] = parse + build_s + resolve
        warm[size] = warm_parse + warm_build + warm_resolve
        print(f"{size:>6} {parse:>7.2f}s {build_s:>7.2f}s {resolve:>7.2f}s {totals[size]:>7.2f}s {assets:>7}   "
              f"warm: parse {warm_parse:.2f}s, total {warm[size]:.2f}s")  # fmt: skip
    if 1000 in totals and 2000 in totals:
        print(f"ratio 2000/1000: {totals[2000] / totals[1000]:.2f} (linear = 2.00); "
              f"1000 MVs in {totals[1000]:.2f}s cold, {warm[1000]:.2f}s warm (goal < 2 s)")  # fmt: skip


if __name__ == "__main__":
    main()
