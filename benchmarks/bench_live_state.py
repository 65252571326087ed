"""Benchmark of the live-state sensor (chmv_assets.orchestration.live_state). Prints, never asserts.

1. Cost per tick over generated tables (default 250 MVs: 250 sources + 250 targets = 500 tables):
   ClickHouse queries (goal <= 2), counted by a client proxy and by chdb's own ``Query`` counter in
   system.events (chdb has no system.query_log), and milliseconds; cold tick (everything reported),
   steady tick (nothing changed), a tick after inserts into 10 % of the sources. Baseline: one
   system.parts query per table. Plus what Dagster takes to record a runless event (SQLite instance),
   which bounds how fast a cold start shows in the UI.
2. Time from the UI being up to a true asset graph on the demo (goal: within one sensor tick,
   ``LIVE_STATE_INTERVAL_SECONDS``): `chmv load-demo` then `dagster dev` (as `make demo`, with an empty
   landing zone), polling GraphQL until every asset shows the partitions its table holds.

Run: .venv/bin/python benchmarks/bench_live_state.py   (CHMV_BENCH_TABLES=1000, CHMV_BENCH_ROWS=1000000;
CHMV_BENCH_SKIP_UI=1 skips part 2)
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

from bench_checks import CountingClient  # noqa: E402
from bench_checks import generated_project as checks_project  # noqa: E402

from chmv_assets.ddl.loader import load  # noqa: E402
from chmv_assets.orchestration.live_state import LIVE_STATE_INTERVAL_SECONDS, MAX_EVENTS_PER_TICK, evaluate_live_state  # noqa: E402
from chmv_assets.orchestration.translator import ChmvTranslator  # noqa: E402

TRANSLATOR = ChmvTranslator()
QUERY_COUNTER = "SELECT value FROM system.events WHERE event = 'Query'"


def generated_project(root: Path, views: int) -> Path:
    """``views`` monthly-partitioned sources, each with an MV into a monthly target (bench_checks' project)."""
    ddl = checks_project(root, views)
    # the sources are daily ingestion assets (a landing zone is configured): their days are counted too
    (ddl / "landing").mkdir()
    (ddl / "chmv.toml").write_text(
        'default_database = "gen"\npartition_start = "2026-01-01"\n[ingestion]\n'
        'landing_dir = "landing"\n[ingestion.time_columns]\n' + "".join(f'"gen.src_{i}" = "ts"\n' for i in range(views))
    )
    return ddl


def bench_tick(workdir: Path, tables: int) -> None:
    from chmv_assets.engine.lifecycle.deploy import apply
    from resources.clickhouse import ClickHouseResource

    views = tables // 2
    loaded = load(generated_project(workdir / "gen", views))
    engine = ClickHouseResource(dsn=f"chdb://{workdir / 'gen' / 'chdb'}")
    started = time.monotonic()
    with engine.get_client() as client:
        apply(client, loaded.project)
        for i in range(views):  # ten months of rows per source: ten partitions per table
            client.command(
                f"INSERT INTO gen.src_{i} SELECT toDateTime('2026-01-01 00:00:00') + number * 26000, "
                "number % 7, number FROM numbers(1000)",
                settings={"max_partitions_per_insert_block": 0},
            )
    print(
        f"live-state sensor over {2 * views} tables ({views} sources, {views} targets; setup "
        f"{time.monotonic() - started:.1f}s)"
    )
    with engine.get_client() as client:

        def tick(cursor, label):
            counting = CountingClient(client)
            before = int(client.command(QUERY_COUNTER) or 0)
            t0 = time.perf_counter()
            report = evaluate_live_state(counting, loaded, TRANSLATOR, cursor)
            ms = (time.perf_counter() - t0) * 1000
            engine_queries = int(client.command(QUERY_COUNTER) or 0) - before - 1  # minus the counter query itself
            print(
                f"  {label}: {counting.queries} queries (system.events Query: {engine_queries}), {ms:.0f} ms, "
                f"{len(report.events)} events, cursor {len(report.cursor) / 1024:.0f} KiB"
            )
            return report

        cold = tick(None, "first tick of a cold start")
        cursor, ticks, total = cold.cursor, 1, len(cold.events)
        while True:  # the cold start goes on for as many ticks as it takes at MAX_EVENTS_PER_TICK
            more = evaluate_live_state(client, loaded, TRANSLATOR, cursor)
            if not more.events:
                break
            cursor, ticks, total = more.cursor, ticks + 1, total + len(more.events)
        print(f"  cold start: {total} partitions reported in {ticks} tick(s) (at most {MAX_EVENTS_PER_TICK} per tick)")
        steady = tick(cursor, "steady tick (nothing changed)")
        for i in range(0, views, 10):
            client.command(f"INSERT INTO gen.src_{i} VALUES ('2026-10-20 10:00:00', 1, 1)")
        tick(steady.cursor, f"tick after inserts into {len(range(0, views, 10))} sources")
        t0 = time.perf_counter()
        for table in [*(f"src_{i}" for i in range(views)), *(f"tgt_{i}" for i in range(views))]:
            client.query(
                "SELECT partition_id, sum(rows), count(), max(modification_time) FROM system.parts "
                "WHERE active AND database = 'gen' AND table = {t:String} GROUP BY partition_id",
                parameters={"t": table},
            )
        print(
            f"  baseline (a system.parts query per table): {2 * views} queries, "
            f"{(time.perf_counter() - t0) * 1000:.0f} ms"
        )
    bench_recording(cold.events[:200])


def bench_recording(events) -> None:
    from dagster import DagsterInstance

    with tempfile.TemporaryDirectory() as home:
        instance = DagsterInstance.local_temp(home)  # SQLite, as dagster dev
        t0 = time.perf_counter()
        for event in events:
            instance.report_runless_asset_event(event)
        per = (time.perf_counter() - t0) / max(len(events), 1)
    print(
        f"  Dagster records a runless event in {per * 1000:.1f} ms (SQLite instance): a cold start of N "
        f"partitions shows in the UI after ~N x {per * 1000:.0f} ms"
    )


def bench_ui(workdir: Path, rows: int) -> None:
    from support.ui import ASSETS, expected_partitions, start_demo, stop, wait_for

    print(
        f"\ntime from the UI up to a true asset graph (demo, {rows} rows; sensor interval {LIVE_STATE_INTERVAL_SECONDS}s)"
    )
    t0 = time.monotonic()
    dev = start_demo(workdir / "ui", rows=rows)
    try:
        print(f"  load-demo + dagster dev serving: {dev.up_at - t0:.1f}s")
        loaded = load(ROOT / "examples" / "ddl")
        expected = expected_partitions(dev, loaded, TRANSLATOR)
        targets = {"/".join(TRANSLATOR.get_asset_key(t).path) for t in loaded.project.targets}
        seen: dict[str, float] = {}

        def true_graph() -> bool:
            nodes = {"/".join(n["assetKey"]["path"]): n for n in dev.graphql(ASSETS)["assetNodes"]}
            got = {a: (nodes[a]["partitionStats"] or {}).get("numMaterialized") for a in expected}
            if (
                all(got[a] == n for a, n in expected.items() if a in targets)
                and nodes["analytics/entity_latest"]["assetMaterializations"]
            ):
                seen.setdefault("targets", time.monotonic())
            if got == expected and "targets" in seen:
                seen["all"] = time.monotonic()
            return "all" in seen

        wait_for(true_graph, 900, "a true asset graph", interval=0.5)
        events = sum(expected.values()) + 1
        print(
            f"  targets true after {seen['targets'] - dev.up_at:.1f}s, every asset (targets and sources, "
            f"{events} partitions) after {seen['all'] - dev.up_at:.1f}s "
            f"(goal: within one tick, {LIVE_STATE_INTERVAL_SECONDS}s)"
        )
    finally:
        stop(dev)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CHMV_STATE_DIR", tmp)
        bench_tick(Path(tmp), int(os.environ.get("CHMV_BENCH_TABLES", "500")))
        if not os.environ.get("CHMV_BENCH_SKIP_UI"):
            bench_ui(Path(tmp), int(os.environ.get("CHMV_BENCH_ROWS", "1000000")))
