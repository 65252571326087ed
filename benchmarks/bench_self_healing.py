"""Benchmark of the parity sweep and the recovery loop (issue: self-healing).

1. Queries to decide one sweep tick over 500 generated targets (goal <= 3), counted two ways: the client
   calls, and the server's own ``Query`` counter (system.events) around the decision.
2. Rows read by a sweep vs rows in the changed partitions (goal <= 1.1x): the example project with 1M demo
   rows, swept once; then rows land in old partitions of three targets' sources (one silent gap among
   them); the next tick's decision and its evaluations are measured with the process-wide SelectedRows
   counter (chdb has no system.query_log). Baseline in the same run: the same partitions' rows counted.
3. Time from a planted silent gap to an exact repair in a running ``dagster dev`` with the DEFAULT settings
   (sweep every 60 s, recovery every 60 s; goal <= 10 minutes): the gap is in the first target of a
   three-level chain, so the repair is three levels of recovery runs. Skipped with ``--no-loop``.

Run: .venv/bin/python benchmarks/bench_self_healing.py [--no-loop]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]
warnings.filterwarnings("ignore")

from bench_checks import CountingClient, generated_project  # noqa: E402

from chmv_assets.ddl.loader import load  # noqa: E402
from chmv_assets.engine.clock import session_zone  # noqa: E402
from chmv_assets.engine.health.parity import parity_for_partitions  # noqa: E402
from chmv_assets.engine.health.sweep import SweepState, decide  # noqa: E402
from chmv_assets.orchestration.translator import ChmvTranslator  # noqa: E402
from chmv_assets.sql.quoting import qualified  # noqa: E402
from chmv_assets.sql.rebuild_sql import partition_expression, source_range_predicate  # noqa: E402

from support.engines import make_engine  # noqa: E402
from support.paths import EXAMPLE_DDL  # noqa: E402

TRANSLATOR = ChmvTranslator()
SELECTED = "SELECT value FROM system.events WHERE event = 'SelectedRows'"
QUERIES = "SELECT value FROM system.events WHERE event = 'Query'"


def _counter(client, sql: str) -> int:
    return int(client.command(sql) or 0)


def bench_decision(workdir: Path, targets: int = 500) -> None:
    from chmv_assets.engine.lifecycle.deploy import apply
    from resources.clickhouse import ClickHouseResource

    loaded = load(generated_project(workdir / "gen", targets))
    engine = ClickHouseResource(dsn=f"chdb://{workdir / 'gen' / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
        for i in range(targets):
            client.command(
                f"INSERT INTO gen.src_{i} SELECT toDateTime('2026-09-01 00:00:00') + number * 3700, "
                "number % 7, number FROM numbers(1000)"
            )
        state = decide(
            client,
            loaded,
            list(loaded.project.targets),
            SweepState(),
            now=time.time(),
            max_partitions=10**6,
            max_rows=10**12,
        ).state  # the cold start: everything once
        client.command("INSERT INTO gen.src_7 SELECT toDateTime('2026-09-15 00:00:00'), 1, 1")
        counting = CountingClient(client)
        before = _counter(client, QUERIES)
        started = time.perf_counter()
        decision = decide(
            counting,
            loaded,
            list(loaded.project.targets),
            state,
            now=time.time(),
            max_partitions=24,
            max_rows=200_000_000,
        )
        seconds = time.perf_counter() - started
        server = _counter(client, QUERIES) - before - 1  # the counter's own query
    print(
        f"sweep decision over {targets} targets ({decision.tables} tables): {counting.queries} client query, "
        f"{server} server queries, {seconds * 1000:.0f} ms; chose {[(i.target.fqn, i.key) for i in decision.items]}"
    )


def bench_rows(workdir: Path) -> None:
    loaded = load(EXAMPLE_DDL)
    rows = int(os.environ.get("CHMV_BENCH_ROWS", "1000000"))
    engine = make_engine(workdir / "rows" / "chdb", loaded, rows=rows)
    targets = list(loaded.project.targets)
    with engine.get_client() as client:
        state = decide(
            client, loaded, targets, SweepState(), now=time.time(), max_partitions=10**6, max_rows=10**12
        ).state
        client.command(
            "INSERT INTO analytics.api_requests SELECT toDateTime('2026-09-03 10:00:00') + number, "
            "'/api/v1/users', 200, 12, 1 FROM numbers(500)"
        )
        client.command(
            "INSERT INTO analytics.all_events SELECT toDateTime('2026-09-20 10:00:00') + number, 'click', "
            "'error', 0, 'x' FROM numbers(500)"
        )
        client.command("DETACH TABLE analytics.mv_events_agg")
        client.command(
            "INSERT INTO analytics.raw_events SELECT toDateTime('2026-08-12 10:00:00') + number * 60, "
            "7000 + number % 5, 'click', 10 FROM numbers(300)"
        )
        client.command("ATTACH TABLE analytics.mv_events_agg")
        selected = _counter(client, SELECTED)
        decision = decide(client, loaded, targets, state, now=time.time(), max_partitions=24, max_rows=200_000_000)
        results = []
        for target in dict.fromkeys(i.target for i in decision.items):
            windows = [i.window for i in decision.items if i.target == target]
            results += parity_for_partitions(client, loaded, target, windows, coverage_first=False)
        read = _counter(client, SELECTED) - selected - 1
        in_partitions = sum(i.rows for i in decision.items)
        exact = 0
        for item in decision.items:  # baseline: the partitions' rows, counted (target partition + source range)
            table = loaded.project.table(item.target)
            scheme = TRANSLATOR.get_partitioning(loaded, item.target)
            exact += int(
                client.command(
                    f"SELECT count() FROM {qualified(item.target)} WHERE ({table.partition_by.sql}) = "
                    f"({partition_expression(table, scheme, item.window, zone=session_zone(client))})"
                )
            )
            for view in loaded.project.views_into(item.target):
                exact += int(
                    client.command(
                        f"SELECT count() FROM {qualified(view.trigger)} WHERE "
                        f"{source_range_predicate(view, loaded.project, scheme, item.window, zone=session_zone(client))}"
                    )
                )
    failed = [r.describe() for r in results if not r.passed]
    print(
        f"\nsweep over {rows:,} demo rows: {len(decision.items)} changed partition(s) "
        f"{[(i.target.name, i.key) for i in decision.items]}"
    )
    print(
        f"  rows read by the tick: {read:,}; rows in those partitions: {exact:,} (estimated from parts: "
        f"{in_partitions:,}) -> ratio {read / max(exact, 1):.2f} (goal <= 1.1)"
    )
    print(f"  verdicts: {len(results) - len(failed)} pass, failing: {failed}")


def bench_loop(workdir: Path) -> None:
    from support.healing import plant_gap, wait_for_repair
    from support.ui import start_demo, stop

    loaded = load(EXAMPLE_DDL)
    dev = start_demo(workdir / "loop", rows=100_000)
    try:
        time.sleep(5)
        healing = plant_gap(dev)
        healing = wait_for_repair(dev, loaded, TRANSLATOR, healing, deadline_seconds=1200)
    finally:
        stop(dev)
    print(
        f"\nrunning dagster dev, default settings (sweep {loaded.config.sweep.interval_seconds}s, recovery "
        f"{loaded.config.sweep.recovery_interval_seconds}s): planted gap -> {healing.describe()} (goal <= 600s)"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CHMV_STATE_DIR", tmp)
        bench_decision(Path(tmp))
        bench_rows(Path(tmp))
        if "--no-loop" not in sys.argv:
            bench_loop(Path(tmp))
