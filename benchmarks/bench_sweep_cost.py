"""Benchmark of issue 17's automation costs on the embedded engine, each against a baseline in the same run.

1. The parity sweep's evaluations of every partition (a cold start), as a sweep run makes them now — the targets'
   pending changes read once for the run (two catalog queries), GROUP BY targets judged by their sums — against
   the same evaluations without the pending read. Time and rows read (SelectedRows).
2. The coverage probe counting rows per day of a monthly window (per hour of a daily one) against the same probe
   per window: time and rows read.
3. Requests per partition over N ticks: an MV detached while rows keep arriving, N ticks of the staleness and
   the recovery sensors, the repair run executed when requested; how many run requests each lagging partition got.

Run: .venv/bin/python benchmarks/bench_sweep_cost.py   (CHMV_BENCH_ROWS, default 300000; CHMV_BENCH_TICKS, default 10)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
warnings.filterwarnings("ignore")

from chmv_assets.ddl.loader import load  # noqa: E402
from chmv_assets.engine.drift import apply_pending  # noqa: E402
from chmv_assets.engine.health.parity import parity_for_partitions  # noqa: E402
from chmv_assets.engine.health.sweep import SweepState, decide, window_of  # noqa: E402
from chmv_assets.engine.rebuild import coverage  # noqa: E402

from support.engines import make_engine  # noqa: E402
from support.paths import EXAMPLE_DDL  # noqa: E402

SELECTED = "SELECT value FROM system.events WHERE event = 'SelectedRows'"


def _selected(client) -> int:
    return int(client.command(SELECTED) or 0)


def _sweep(client, loaded, items, *, read_pending: bool) -> tuple[float, int]:
    started, before = time.monotonic(), _selected(client)
    by_target: dict = {}
    for item in items:
        by_target.setdefault(item.target, []).append(item.key)
    pending = apply_pending(client, loaded.project, list(by_target)) if read_pending else {}
    for target, keys in by_target.items():
        windows = [window_of(loaded, target, k or None) for k in keys]
        parity_for_partitions(client, loaded, target, windows, coverage_first=False, pending=pending.get(target, []))
    return time.monotonic() - started, _selected(client) - before


def bench_sweep(engine, loaded, repeats: int = 3) -> None:
    with engine.get_client() as client:
        items = decide(
            client,
            loaded,
            list(loaded.project.targets),
            SweepState(),
            now=time.time(),
            max_partitions=10**6,
            max_rows=10**12,
        ).items
        _sweep(client, loaded, items, read_pending=True)  # warm-up
        now = [_sweep(client, loaded, items, read_pending=True) for _ in range(repeats)]
        base = [_sweep(client, loaded, items, read_pending=False) for _ in range(repeats)]
    t_now, t_base = statistics.median(t for t, _ in now), statistics.median(t for t, _ in base)
    r_now, r_base = now[0][1], base[0][1]
    print(f"\n1. sweep evaluations of {len(items)} partitions (a cold start), median of {repeats}:")
    print(f"   with the pending-change read: {t_now:.2f} s, {r_now:,} rows read")
    print(f"   baseline, without it:         {t_base:.2f} s, {r_base:,} rows read")
    print(f"   -> ratio {t_now / t_base:.2f}x time, {r_now / max(r_base, 1):.3f}x rows read")


def bench_coverage(engine, loaded, repeats: int = 5) -> None:
    from chmv_assets.ddl.models import ObjectRef

    cases = [
        ("events_agg", ["2026-08-01", "2026-09-01", "2026-10-01"]),
        ("hourly_endpoint_stats", [f"2026-09-{d:02d}" for d in range(1, 31)]),
    ]
    original = coverage.sub_grain_of
    print(f"\n2. coverage probe, per bucket inside the windows vs per window (median of {repeats}):")
    with engine.get_client() as client:
        for name, keys in cases:
            target = ObjectRef(database="analytics", name=name)
            windows = [loaded.partitioning(target).window_of(k) for k in keys]
            figures = {}
            for label, finer in (("buckets", True), ("windows", False)):
                coverage.sub_grain_of = original if finer else (lambda *_a, **_k: None)
                times, rows = [], 0
                for _ in range(repeats):
                    before, started = _selected(client), time.monotonic()
                    facts = coverage.probe(client, loaded, target, target, windows)
                    times.append(time.monotonic() - started)
                    rows = _selected(client) - before
                figures[label] = (statistics.median(times), rows, facts.sub_grain)
            coverage.sub_grain_of = original
            (t1, r1, grain), (t0, r0, _) = figures["buckets"], figures["windows"]
            print(
                f"   {name} ({len(keys)} windows, buckets: {grain}): {t1 * 1000:.0f} ms / {r1:,} rows vs "
                f"{t0 * 1000:.0f} ms / {r0:,} rows -> {t1 / t0:.2f}x time, {r1 / max(r0, 1):.3f}x rows"
            )


def bench_requests(workdir: Path, ticks: int) -> None:
    """While the MV stays detached (its repair requested, not run yet) and rows keep arriving, then after the
    repair ran: N ticks of each sensor each time."""
    from dagster import DagsterInstance

    from support.checks import execute, requested, tick

    loaded = load(EXAMPLE_DDL)
    engine = make_engine(workdir / "req" / "chdb", loaded, rows=20_000)
    instance = DagsterInstance.local_temp(str(workdir / "req"))
    with engine.get_client() as client:
        client.command("DETACH TABLE analytics.audit_mv PERMANENTLY")
    cursors: dict = {"chmv_staleness": None, "chmv_recovery": None}
    rebuilds: Counter = Counter()
    repairs: list = []
    staleness_requests = 0

    def run_ticks(count: int, insert: bool) -> None:
        nonlocal staleness_requests
        for n in range(count):
            if insert:  # rows keep arriving: the newest expected value moves every tick
                with engine.get_client() as client:
                    client.command(
                        f"INSERT INTO analytics.all_events SELECT toDateTime('2026-11-02 00:00:00') + "
                        f"{n * 600} + number * 60, 'click', 'info', 1, 'a' FROM numbers(10)"
                    )
            for name in cursors:
                data = tick(loaded, name, engine, instance, cursors[name])
                cursors[name] = data.cursor or cursors[name]
                for request in data.run_requests:
                    if name == "chmv_staleness":
                        staleness_requests += 1
                    elif request.job_name == "chmv_apply":
                        repairs.append(request)
                    else:
                        rebuilds[requested(request)] += 1

    run_ticks(ticks, insert=True)
    detached = (staleness_requests, len(repairs), dict(rebuilds))
    for repair in repairs:
        execute(loaded, engine, instance, repair)
    run_ticks(ticks, insert=False)
    print(f"\n3. an MV detached while rows keep arriving: {ticks} ticks of each sensor, then {ticks} after its repair:")
    print(
        f"   while detached: staleness sensor {detached[0]} run requests (it alerts), recovery {detached[1]} "
        f"chmv_apply request(s), rebuild requests {detached[2] or 'none'} (held until the MV is back)"
    )
    print(
        f"   after the repair: rebuild requests per partition range {dict(rebuilds)} -> "
        f"{max(rebuilds.values(), default=0)} per partition in {2 * ticks} ticks; staleness sensor "
        f"{staleness_requests} in all"
    )


if __name__ == "__main__":
    rows = int(os.environ.get("CHMV_BENCH_ROWS", "300000"))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CHMV_STATE_DIR", tmp)
        loaded = load(EXAMPLE_DDL)
        engine = make_engine(Path(tmp) / "chdb", loaded, rows=rows)
        print(f"example project, {rows:,} demo rows")
        bench_sweep(engine, loaded)
        bench_coverage(engine, loaded)
        bench_requests(Path(tmp), int(os.environ.get("CHMV_BENCH_TICKS", "10")))
