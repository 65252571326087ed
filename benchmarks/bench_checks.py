"""Benchmark of the checks and sensors on the embedded engine.

1. Rows read by a parity check vs rows in the partition (target partition + source rows of the window);
   goal <= 1.05x. Baseline: the same comparison without partition pruning (whole tables).
   chdb has no system.query_log and its query summary reports only the last progress packet, so rows
   read are the delta of system.events SelectedRows around the query.
2. Queries and time per staleness-sensor tick for 500 generated targets (goal <= 3 queries, well under a
   second). Baseline: one max() query per source and per target, in the same process.

Run: .venv/bin/python benchmarks/bench_checks.py   (CHMV_BENCH_ROWS=10000000 for production-like granule density)
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

from chmv_assets.ddl.loader import load  # noqa: E402
from chmv_assets.ddl.models import ObjectRef  # noqa: E402
from chmv_assets.engine.clock import session_zone  # noqa: E402
from chmv_assets.engine.health.parity import parity_sql  # noqa: E402
from chmv_assets.engine.health.staleness import measure_staleness  # noqa: E402
from chmv_assets.orchestration.translator import ChmvTranslator  # noqa: E402
from chmv_assets.sql.quoting import qualified  # noqa: E402

from support.engines import make_engine  # noqa: E402
from support.paths import EXAMPLE_DDL  # noqa: E402

TRANSLATOR = ChmvTranslator()
CASES = [
    ("requests_enriched", "2026-09-01"),
    ("error_events", "2026-09-15"),
    ("hourly_endpoint_stats", "2026-09-15"),
    ("counter_daily", "2026-09-01"),
    ("events_agg", "2026-09-01"),
    ("events_daily", "2026-09-15"),
]


class CountingClient:
    """A client proxy counting the queries it runs."""

    def __init__(self, client):
        self.client, self.queries = client, 0

    def query(self, *args, **kwargs):
        self.queries += 1
        return self.client.query(*args, **kwargs)

    def command(self, *args, **kwargs):
        self.queries += 1
        return self.client.command(*args, **kwargs)


def rows_read(client, sql: str) -> int:
    """Rows the query read from MergeTree tables: the delta of the process-wide SelectedRows counter.

    (The summary clickhouse-connect returns for chdb reports only the last progress packet, and chdb has
    no system.query_log.)
    """
    counter = "SELECT value FROM system.events WHERE event = 'SelectedRows'"
    before = int(client.command(counter) or 0)
    client.query(sql)
    return int(client.command(counter) or 0) - before


def bench_parity(workdir: Path) -> None:
    loaded = load(EXAMPLE_DDL)
    engine = make_engine(workdir / "parity" / "chdb", loaded, rows=int(os.environ.get("CHMV_BENCH_ROWS", "1000000")))
    print("parity: rows read vs rows in the partition (1M demo rows)")
    print(
        f"  {'target':24} {'partition':11} {'in partition':>12} {'read':>9} {'ratio':>6} {'unpruned':>9} {'ratio':>6}"
    )
    with engine.get_client() as client:
        for name, key in CASES:
            target = ObjectRef(database="analytics", name=name)
            window = loaded.partitioning(target).window_of(key)
            table = loaded.project.table(target)
            (view,) = loaded.project.views_into(target)
            from chmv_assets.ddl.partitioning import partition_scheme
            from chmv_assets.sql.rebuild_sql import partition_expression, source_range_predicate

            scheme = partition_scheme(table, (view,))
            target_rows = client.command(
                f"SELECT count() FROM {qualified(target)} WHERE ({table.partition_by.sql}) = "
                f"({partition_expression(table, scheme, window, zone=session_zone(client))})"
            )
            source_rows = client.command(
                f"SELECT count() FROM {qualified(view.trigger)} WHERE "
                f"{source_range_predicate(view, loaded.project, scheme, window, zone=session_zone(client))}"
            )
            in_partition = int(target_rows) + int(source_rows)
            read = rows_read(client, parity_sql(loaded, target, window, zone=session_zone(client)))
            unpruned = rows_read(client, parity_sql(loaded, target, None, zone=session_zone(client)))
            print(
                f"  {name:24} {key:11} {in_partition:12d} {read:9d} {read / in_partition:6.2f} {unpruned:9d} "
                f"{unpruned / in_partition:6.2f}"
            )


def generated_project(root: Path, targets: int) -> Path:
    ddl = root / "ddl"
    ddl.mkdir(parents=True)
    lines = ["CREATE DATABASE IF NOT EXISTS gen ENGINE = Atomic;"]
    for i in range(targets):
        lines.append(
            f"CREATE TABLE gen.src_{i} (ts DateTime, k UInt32, v UInt64) ENGINE = MergeTree "
            f"PARTITION BY toYYYYMM(ts) ORDER BY (k, ts);"
        )
        lines.append(
            f"CREATE TABLE gen.tgt_{i} (hour DateTime, k UInt32, v UInt64) ENGINE = SummingMergeTree "
            f"PARTITION BY toYYYYMM(hour) ORDER BY (k, hour);"
        )
        lines.append(
            f"CREATE MATERIALIZED VIEW gen.mv_{i} TO gen.tgt_{i} AS SELECT toStartOfHour(ts) AS hour, k, "
            f"sum(v) AS v FROM gen.src_{i} GROUP BY hour, k;"
        )
    (ddl / "gen.sql").write_text("\n".join(lines))
    (ddl / "chmv.toml").write_text('default_database = "gen"\npartition_start = "2026-08-01"\n')
    return ddl


def bench_sensor_tick(workdir: Path, targets: int = 500) -> None:
    from chmv_assets.engine.lifecycle.deploy import apply
    from resources.clickhouse import ClickHouseResource

    loaded = load(generated_project(workdir / "gen", targets))
    engine = ClickHouseResource(dsn=f"chdb://{workdir / 'gen' / 'chdb'}")
    started = time.monotonic()
    with engine.get_client() as client:
        apply(client, loaded.project)
        for i in range(targets):
            client.command(
                f"INSERT INTO gen.src_{i} SELECT toDateTime('2026-11-01 00:00:00') + number * 37, "
                "number % 7, number FROM numbers(200)"
            )
    print(f"\nsensor tick over {targets} generated targets (setup {time.monotonic() - started:.1f}s)")
    with engine.get_client() as client:
        counting = CountingClient(client)
        measure_staleness(counting, loaded)  # warm-up
        counting.queries = 0
        runs = 3
        t0 = time.monotonic()
        for _ in range(runs):
            lags = measure_staleness(counting, loaded)
        batched = (time.monotonic() - t0) / runs
        queries = counting.queries / runs
        assert not any(lag.stale for lag in lags)
        t0 = time.monotonic()
        naive_queries = 0
        for target in loaded.project.targets:
            (view,) = loaded.project.views_into(target)
            client.command(f"SELECT max(ts) FROM {qualified(view.trigger)}")
            client.command(f"SELECT max(hour) FROM {qualified(target)}")
            naive_queries += 2
        naive = time.monotonic() - t0
    print(f"  batched measurement: {queries:.0f} queries, {batched * 1000:.0f} ms per tick")
    print(
        f"  baseline (a max() query per table): {naive_queries} queries, {naive * 1000:.0f} ms "
        f"-> batched/baseline time ratio {batched / naive:.2f}"
    )

    from dagster import DagsterInstance, build_sensor_context

    from chmv_assets.orchestration.sensors import build_staleness_sensor

    sensor = build_staleness_sensor(loaded, TRANSLATOR)
    instance = DagsterInstance.ephemeral()
    t0 = time.monotonic()
    context = build_sensor_context(instance=instance, resources={"clickhouse": engine})
    data = sensor.evaluate_tick(context)
    print(
        f"  full staleness sensor tick (open engine + measure + decide): {(time.monotonic() - t0) * 1000:.0f} ms, "
        f"{len(data.run_requests)} run requests"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.environ.setdefault("CHMV_STATE_DIR", tmp)
        bench_parity(Path(tmp))
        bench_sensor_tick(Path(tmp))
