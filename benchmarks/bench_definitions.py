"""Definitions load time for 250/500/1,000/2,000 generated MVs (goal: < 2 s at 1,000 warm, linear).

Run: ``.venv/bin/python benchmarks/bench_definitions.py [--size N] [--repeat R] [--clock cpu] [--profile N]``.
Each size gets a synthetic DDL directory: a third of the MVs form chains of three (source -> daily
AggregatingMergeTree -> monthly rollup -> unpartitioned summary), the rest are single MVs into daily or monthly
targets, one in ten with a JOIN. Timed: parse (``load``), ``build_definitions`` and resolving the repository, each
load in a fresh Python process as in ``dagster dev`` (imports, and a first load of the example project that
fills import-time caches, are not timed):

- cold: the first load of the directory parses it (and writes the parse cache): a code server starting;
- warm: a later load reads the parse cache: each run process, a code-location reload.

Floors, measured in the same process right after its load, to read chmv's share against:

- sqlglot (cold process): parsing every file with sqlglot's ClickHouse dialect and nothing else (no model);
- dagster (warm process): ``build_definitions`` and the repository once more with the asset specs already built
  (memoized per load and translator): what Dagster itself spends on the ops, checks, jobs and sensors.

``--in-process`` times both loads one after the other in this process instead (the warm one then also collects
the cold one's garbage); ``--repeat R`` keeps the best of R rounds per size (noise only ever adds time);
``--clock cpu`` times with the process's CPU time instead of the wall clock (steadier when other processes
compete for the cores); ``--profile N`` prints the cProfile of a cold and a warm load of N MVs in this process.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (250, 500, 1000, 2000)
GOAL_SECONDS = 2.0
#: The clock every measurement reads (``--clock``).
clock = time.perf_counter


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
    parts = [
        "CREATE DATABASE IF NOT EXISTS bench ENGINE = Atomic;\n",
        "CREATE TABLE bench.dim (id UInt64, name String) ENGINE = MergeTree ORDER BY id;\n",
    ]
    parts += [_chain(i) for i in range(chains)]
    parts += [_single(i) for i in range(views - 3 * chains)]
    for n in range(0, len(parts), 50):
        (root / f"{n:05d}.sql").write_text("".join(parts[n : n + 50]))
    (root / "chmv.toml").write_text('default_database = "bench"\npartition_start = "2026-01-01"\n')


@dataclass
class Load:
    """Seconds of one load: parse, build, resolve (and the asset count, to check the sizes)."""

    parse: float
    build: float
    resolve: float
    assets: int

    @property
    def total(self) -> float:
        return self.parse + self.build + self.resolve


def build(root: Path) -> Load:
    """Load the directory as the code location does: parse (or the cache), build the Definitions, resolve them."""
    from chmv_assets.ddl.loader import load
    from chmv_assets.orchestration.definitions import build_definitions, resolved
    from resources.clickhouse import ClickHouseResource

    t0 = clock()
    loaded = load(root)
    t1 = clock()
    defs = build_definitions(loaded, clickhouse=ClickHouseResource(dsn="chdb:///tmp/chmv-bench-unused"))
    t2 = clock()
    repo = resolved(defs).get_repository_def()  # as the code location's module does
    assets = len(repo.asset_graph.get_all_asset_keys())
    t3 = clock()
    assert len(loaded.project.views) > 0
    return Load(t1 - t0, t2 - t1, t3 - t2, assets)


def sqlglot_floor(root: Path) -> float:
    """Seconds sqlglot alone takes to tokenize and parse every file (one call per file, no model)."""
    from sqlglot.dialects.clickhouse import ClickHouse

    from chmv_assets.ddl.loader import gc_paused

    dialect = ClickHouse()
    texts = [p.read_text() for p in sorted(root.glob("*.sql"))]
    with gc_paused():  # as chmv's parse runs
        began = clock()
        statements = sum(len(dialect.parse(text)) for text in texts)
        seconds = clock() - began
    assert statements > 0
    return seconds


def dagster_floor(root: Path) -> float:
    """Seconds of ``build_definitions`` + resolving when the translator's asset specs are already built."""
    from chmv_assets.ddl.loader import load
    from chmv_assets.orchestration.definitions import build_definitions, resolved
    from chmv_assets.orchestration.translator import ChmvTranslator
    from resources.clickhouse import ClickHouseResource

    loaded, translator = load(root), ChmvTranslator()
    clickhouse = ClickHouseResource(dsn="chdb:///tmp/chmv-bench-unused")
    resolved(build_definitions(loaded, clickhouse=clickhouse, translator=translator))
    began = clock()
    resolved(build_definitions(loaded, clickhouse=clickhouse, translator=translator))
    return clock() - began


@dataclass
class Round:
    """One size measured once: the cold load, the warm load and both floors."""

    cold: Load
    warm: Load
    sqlglot: float
    dagster: float


def child(kind: str, root: Path, clock_name: str) -> None:
    """In a fresh process: one ``kind`` (cold or warm) load of ``root`` and its floor, as JSON on stdout."""
    global clock
    clock = time.process_time if clock_name == "cpu" else time.perf_counter
    import chmv_assets.definitions  # noqa: F401  (imports and import-time caches are not part of the load)

    result = build(root)
    floor = sqlglot_floor(root) if kind == "cold" else dagster_floor(root)
    print(json.dumps({"load": asdict(result), "floor": floor}))


def _in_child(kind: str, root: Path, state: Path, clock_name: str) -> tuple[Load, float]:
    argv = [sys.executable, __file__, "--child", kind, str(root), "--clock", clock_name]
    out = subprocess.run(
        argv, env={**os.environ, "CHMV_STATE_DIR": str(state)}, check=True, capture_output=True, text=True
    ).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return Load(**data["load"]), data["floor"]


def measure(size: int, clock_name: str) -> Round:
    """A cold then a warm load of ``size`` MVs, each in its own process, with a state directory of their own."""
    with tempfile.TemporaryDirectory() as tmp:
        root, state = Path(tmp) / "ddl", Path(tmp) / "state"
        root.mkdir()
        generate(root, size)
        cold, sqlglot = _in_child("cold", root, state, clock_name)
        warm, dagster = _in_child("warm", root, state, clock_name)
        return Round(cold, warm, sqlglot, dagster)


def measure_in_process(size: int, clock_name: str) -> Round:
    """The cold and the warm load one after the other in this process (how this benchmark measured until
    the loads moved to fresh processes: the warm load then also pays for collecting the cold one's garbage)."""
    global clock
    clock = time.process_time if clock_name == "cpu" else time.perf_counter
    import chmv_assets.definitions  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CHMV_STATE_DIR"] = str(Path(tmp) / "state")
        root = Path(tmp) / "ddl"
        root.mkdir()
        generate(root, size)
        cold, warm = build(root), build(root)
        return Round(cold, warm, sqlglot_floor(root), dagster_floor(root))


def profile(size: int) -> None:
    """The cProfile of a cold and a warm load of ``size`` MVs in this process."""
    import chmv_assets.definitions  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CHMV_STATE_DIR"] = str(Path(tmp) / "state")
        root = Path(tmp) / "ddl"
        root.mkdir()
        generate(root, size)
        for kind in ("cold", "warm"):
            profiler = cProfile.Profile()
            profiler.enable()
            result = build(root)
            profiler.disable()
            print(f"--- {kind} load of {size} MVs: {result}")
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def best(rounds: list[Round]) -> Round:
    """The fastest of each measurement over the rounds."""
    return Round(
        min((r.cold for r in rounds), key=lambda x: x.total),
        min((r.warm for r in rounds), key=lambda x: x.total),
        min(r.sqlglot for r in rounds),
        min(r.dagster for r in rounds),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, action="append", help="MVs to generate (repeatable; default: 250 to 2,000)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per size; the best of each is printed")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="wall clock or each process's CPU time"
    )
    parser.add_argument("--in-process", action="store_true", help="both loads in this process, one after the other")
    parser.add_argument("--profile", type=int, metavar="N", help="print the cProfile of the loads of N MVs")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], Path(args.child[1]), args.clock)
    if args.profile:
        return profile(args.profile)
    results: dict[int, Round] = {}
    how = "both loads in one process" if args.in_process else "each load in a fresh process"
    print(f"seconds of {'CPU time' if args.clock == 'cpu' else 'wall clock'}, {how}, best of {max(1, args.repeat)}")
    run = measure_in_process if args.in_process else measure
    print(
        f"{'views':>6} {'assets':>6} | {'cold':>6} {'parse':>6} {'build':>6} {'resolve':>7} | {'warm':>6} {'parse':>6} "
        f"{'build':>6} {'resolve':>7} | {'sqlglot':>7} {'dagster':>7} | cold parse/sqlglot, warm/dagster"
    )
    for size in args.size or SIZES:
        r = results[size] = best([run(size, args.clock) for _ in range(max(1, args.repeat))])
        c, w = r.cold, r.warm
        print(
            f"{size:>6} {c.assets:>6} | {c.total:>5.2f}s {c.parse:>5.2f}s {c.build:>5.2f}s {c.resolve:>6.2f}s | "
            f"{w.total:>5.2f}s {w.parse:>5.2f}s {w.build:>5.2f}s {w.resolve:>6.2f}s | {r.sqlglot:>6.2f}s {r.dagster:>6.2f}s | "
            f"{c.parse / r.sqlglot:.2f}x, {w.total / r.dagster:.2f}x",
            flush=True,
        )
    if 1000 in results:
        r = results[1000]
        print(
            f"1000 MVs: warm {r.warm.total:.2f}s (goal < {GOAL_SECONDS:.0f} s: {'met' if r.warm.total < GOAL_SECONDS else 'NOT met'}), "
            f"cold {r.cold.total:.2f}s; floors: sqlglot parses the files in {r.sqlglot:.2f}s (chmv's parse "
            f"{r.cold.parse / r.sqlglot:.2f}x that), Dagster builds the location from finished specs in {r.dagster:.2f}s"
        )
    if 1000 in results and 2000 in results:
        print(
            f"ratio 2000/1000: cold {results[2000].cold.total / results[1000].cold.total:.2f}, "
            f"warm {results[2000].warm.total / results[1000].warm.total:.2f} (linear = 2.00)"
        )


if __name__ == "__main__":
    main()
