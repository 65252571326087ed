"""Partition materialization vs the bare INSERT…SELECT of the same SQL, on a 10M-row source (goal ≤ 1.1).

Run: ``.venv/bin/python benchmarks/bench_rebuild.py [ROWS]``. A tmp embedded engine gets an
api_requests-like source (10M rows over 10 days, one monthly partition) and a daily
AggregatingMergeTree target. Timed in the same process, alternating, best of 3:

* chmv: ``rebuild()`` of one day (shadow table, the MV's own SELECT, REPLACE PARTITION, cleanup, the read checked
  for racing writes before and after the swap), and of all 10 days one after another;
* chmv with the executor: ``execute()`` of the same plan on the same open client, i.e. also the partition's lease on
  the server (claimed, a killed run's shadows looked for, released) and the deferrals settled;
* baseline: ``INSERT INTO target SELECT …`` with exactly the SELECT chmv generated, into a plain
  table of the same structure (no shadow, no swap).

Then the retries: every day rebuilt while a writer inserts into the source's open month (never racing a closed
day's read), and while a writer inserts late rows into the days being rebuilt, now and then and every 50 ms.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DDL = """
CREATE DATABASE IF NOT EXISTS bench ENGINE = Atomic;
CREATE TABLE bench.api_requests (timestamp DateTime, endpoint LowCardinality(String), user_id UInt64,
    response_time_ms UInt32, status_code UInt16)
ENGINE = MergeTree PARTITION BY toYYYYMM(timestamp) ORDER BY (endpoint, timestamp);
CREATE TABLE bench.daily_stats (day Date, endpoint LowCardinality(String), requests AggregateFunction(sum, UInt64),
    users AggregateFunction(uniq, UInt64), p99 AggregateFunction(quantile(0.99), UInt32))
ENGINE = AggregatingMergeTree PARTITION BY toYYYYMMDD(day) ORDER BY (endpoint, day);
CREATE MATERIALIZED VIEW bench.daily_stats_mv TO bench.daily_stats AS
SELECT toDate(timestamp) AS day, endpoint, sumState(toUInt64(1)) AS requests, uniqState(user_id) AS users,
       quantileState(0.99)(response_time_ms) AS p99
FROM bench.api_requests
GROUP BY day, endpoint
"""
START = datetime(2026, 9, 1)
DAYS = 10


def main() -> None:
    from chmv_assets.ddl.loader import load
    from chmv_assets.ddl.models import ObjectRef
    from chmv_assets.ddl.partitioning import PartitionWindow, partition_scheme
    from chmv_assets.engine.clock import session_zone
    from chmv_assets.engine.lifecycle.deploy import apply
    from chmv_assets.engine.rebuild.executor import execute
    from chmv_assets.engine.rebuild.planner import Observations, plan_rebuild
    from chmv_assets.engine.rebuild.steps import rebuild
    from chmv_assets.sql.rebuild_sql import view_select
    from resources.clickhouse import ClickHouseResource

    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    with tempfile.TemporaryDirectory() as tmp:
        ddl = Path(tmp) / "ddl"
        ddl.mkdir()
        (ddl / "bench.sql").write_text(DDL)
        loaded = load(ddl, default_database="bench")
        project = loaded.project
        target = ObjectRef(database="bench", name="daily_stats")
        view = project.views_into(target)[0]
        table = project.table(target)
        scheme = partition_scheme(table, (view,))
        windows = [
            PartitionWindow(
                key=f"{START + timedelta(days=d):%Y-%m-%d}",
                start=START + timedelta(days=d),
                end=START + timedelta(days=d + 1),
            )
            for d in range(DAYS)
        ]
        resource = ClickHouseResource(dsn=f"chdb://{Path(tmp) / 'chdb'}")
        with resource.get_client() as client:
            apply(client, project)
            client.command("DROP VIEW bench.daily_stats_mv")  # load the source without firing the MV
            t = time.perf_counter()
            client.command(
                "INSERT INTO bench.api_requests SELECT toDateTime('2026-09-01 00:00:00') + intDiv(number * 864000, {n:UInt64}), "
                "concat('/api/v', toString(number % 3), '/e', toString(number % 50)), cityHash64(number) % 100000, "
                "cityHash64(number, 1) % 2000, [200, 200, 404, 500][number % 4 + 1] FROM numbers({n:UInt64})",
                parameters={"n": rows},
                settings={"max_insert_threads": 2},
            )
            client.command("OPTIMIZE TABLE bench.api_requests FINAL")
            print(f"source: {rows:,} rows loaded in {time.perf_counter() - t:.1f}s")
            client.command("CREATE TABLE bench.baseline AS bench.daily_stats")
            columns = ", ".join(f"`{c.name}`" for c in view.output_columns)

            def bare(window: PartitionWindow) -> None:
                select = view_select(view, project, table, scheme, window, zone=session_zone(client))
                client.command("TRUNCATE TABLE bench.baseline")
                client.command(f"INSERT INTO bench.baseline ({columns}) {select}")

            def chmv(window: PartitionWindow) -> None:
                rebuild(client, loaded, target, window)

            def executor(window: PartitionWindow) -> list:
                plan = plan_rebuild(
                    loaded, target, [window], Observations(live=target, zone=session_zone(client)), engine="clickhouse"
                )
                return execute(plan, loaded, client=client)

            results: dict[str, list[float]] = {f"{n}-{w}": [] for n in ("bare", "chmv", "exec") for w in ("1", "all")}
            for _ in range(3):
                for name, fn in (("bare", bare), ("chmv", chmv), ("exec", executor)):
                    t = time.perf_counter()
                    fn(windows[4])
                    results[f"{name}-1"].append(time.perf_counter() - t)
                for name, fn in (("bare", bare), ("chmv", chmv), ("exec", executor)):
                    t = time.perf_counter()
                    for window in windows:
                        fn(window)
                    results[f"{name}-all"].append(time.perf_counter() - t)
            check = client.query("SELECT sumMerge(requests) FROM bench.daily_stats").result_rows[0][0]
            assert check == rows, (check, rows)
            retries = {
                label: _reads_under_writer(Path(tmp) / "chdb", sql, interval, executor, windows)
                for label, sql, interval in WRITERS
            }
        per_day = rows // DAYS
        best = {k: min(v) for k, v in results.items()}
        print(
            f"one partition ({per_day:,} source rows): bare INSERT…SELECT {best['bare-1']:.3f}s, "
            f"chmv rebuild {best['chmv-1']:.3f}s, ratio {best['chmv-1'] / best['bare-1']:.2f}"
        )
        print(
            f"all {DAYS} partitions ({rows:,} rows): bare {best['bare-all']:.3f}s, chmv {best['chmv-all']:.3f}s, "
            f"ratio {best['chmv-all'] / best['bare-all']:.2f} (goal <= 1.1)"
        )
        print(
            f"with the lease (executor): one partition {best['exec-1']:.3f}s, ratio {best['exec-1'] / best['bare-1']:.2f}; "
            f"all {DAYS}: {best['exec-all']:.3f}s, ratio {best['exec-all'] / best['bare-all']:.2f} (goal <= 1.1)"
        )
        for label, (reads, raced) in retries.items():
            print(f"reads per partition, {label}: {reads} for {DAYS} partitions; raced out: {raced}")


#: Writers for the retry count: (label, insert, seconds between inserts).
WRITERS = (
    ("a writer into the open month every 5 ms", "INSERT INTO bench.api_requests SELECT now(), '/w', 1, 1, 200", 0.005),
    (
        "late rows into the rebuilt days every 0.5 s",
        "INSERT INTO bench.api_requests SELECT toDateTime('2026-09-01 00:00:00') + rand() % 864000, '/w', 1, 1, 200",
        0.5,
    ),
    (
        "late rows into the rebuilt days every 50 ms (a stream into closed days)",
        "INSERT INTO bench.api_requests SELECT toDateTime('2026-09-01 00:00:00') + rand() % 864000, '/w', 1, 1, 200",
        0.05,
    ),
)


def _reads_under_writer(path: Path, sql: str, interval: float, executor, windows) -> tuple[list[int], int]:
    """Every partition rebuilt while a thread with its own client runs ``sql`` every ``interval`` seconds."""
    import threading

    import clickhouse_connect

    from chmv_assets.errors import RacedWrites

    stop = threading.Event()

    def write() -> None:
        writer = clickhouse_connect.get_client(dsn=f"chdb://{path}")
        while not stop.wait(interval):
            writer.command(sql, settings={"async_insert": 0})

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    reads, raced = [], 0
    try:
        for window in windows:
            try:
                reads += [r.attempts for r in executor(window)]
            except RacedWrites:
                raced += 1
    finally:
        stop.set()
        thread.join()
    return reads, raced


if __name__ == "__main__":
    main()
