"""Benchmark: what coverage adds to a rebuild on the embedded engine (printed, not asserted).

Per case (a target and its partitions): statements and time of the planner's observation without coverage
(the physical table only) and with it (one probe statement), rows the probe reads vs rows the rebuild reads
(and the ratio of bytes: the probe reads one time column), the rebuild's own time and the share coverage adds; for a guarded step (coverage not "the source holds it entirely") the time of the
shrink guard (two counts) against the same rebuild forced. chdb has no system.query_log: rows read are the
delta of system.events SelectedRows around the call.

Run: .venv/bin/python benchmarks/bench_coverage.py   (CHMV_BENCH_ROWS, default 1000000 demo rows)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
warnings.filterwarnings("ignore")

from bench_checks import CountingClient  # noqa: E402

from chmv_assets.ddl.loader import load  # noqa: E402
from chmv_assets.ddl.models import ObjectRef  # noqa: E402
from chmv_assets.ddl.partitioning import window_at  # noqa: E402
from chmv_assets.engine.health.parity import parity_for_partition  # noqa: E402
from chmv_assets.engine.rebuild.coverage import observe_coverage  # noqa: E402
from chmv_assets.engine.rebuild.executor import execute  # noqa: E402
from chmv_assets.engine.rebuild.planner import observe, plan_rebuild  # noqa: E402

from support.engines import make_engine  # noqa: E402
from support.paths import EXAMPLE_DDL  # noqa: E402

SELECTED = "SELECT event, value FROM system.events WHERE event IN ('SelectedRows', 'SelectedBytes')"
SEP = datetime(2026, 9, 1)
CASES = [
    ("events_agg", [window_at(SEP, "month")]),
    ("hourly_endpoint_stats", [window_at(SEP + timedelta(days=d), "day") for d in range(7)]),
    ("error_events", [window_at(SEP + timedelta(days=14), "day")]),
    ("events_daily", [window_at(SEP + timedelta(days=14), "day")]),
    ("entity_latest", [None]),
]


def selected(client) -> tuple[int, int]:
    """The process-wide (rows, bytes) read from MergeTree tables so far."""
    values = dict(client.query(SELECTED).result_rows)
    return int(values.get("SelectedRows", 0)), int(values.get("SelectedBytes", 0))


def since(client, before: tuple[int, int]) -> tuple[int, int]:
    rows, size = selected(client)
    return rows - before[0], size - before[1]


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - started


def bench_case(raw, loaded, name: str, windows: list) -> None:
    """One line per case: observation statements and time without/with coverage, probe vs rebuild rows and time."""
    client = CountingClient(raw)
    target = ObjectRef(database="analytics", name=name)
    plain, with_coverage = [], []
    for _ in range(3):
        client.queries = 0
        _obs, seconds = timed(observe, client, loaded, target, engine="clickhouse")
        plain.append((seconds, client.queries))
        client.queries, before = 0, selected(raw)
        observed, seconds = timed(observe, client, loaded, target, windows=windows)
        probe = since(raw, before)
        with_coverage.append((seconds, client.queries))
    plan = plan_rebuild(loaded, target, windows, observed)
    before = selected(raw)
    _r, rebuild_seconds = timed(execute, plan, loaded, client=raw)
    rebuild = since(raw, before)
    base, cov = min(plain), min(with_coverage)
    extra = cov[0] - base[0]
    print(
        f"  {name:22} {len(windows):5d} {base[1]:5d} {cov[1]:5d} {base[0] * 1e3:8.1f} {extra * 1e3:9.1f} "
        f"{probe[0]:10,d} {rebuild[0]:12,d} {probe[1] / max(rebuild[1], 1):8.3f} "
        f"{rebuild_seconds * 1e3:8.1f} {extra / max(rebuild_seconds, 1e-9):6.1%}"
    )
    guarded = [s for s in plan.steps if s.guard]
    if guarded:
        _r, with_guard = timed(execute, plan, loaded, client=raw)
        _r, forced = timed(execute, replace(plan, force=True), loaded, client=raw)
        print(
            f"  {'':22} shrink guard on {len(guarded)} step(s): rebuild {with_guard * 1e3:.1f} ms vs "
            f"{forced * 1e3:.1f} ms forced (+2 count statements per step)"
        )


def main() -> None:
    rows = int(os.environ.get("CHMV_BENCH_ROWS", "1000000"))
    loaded = load(EXAMPLE_DDL)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CHMV_STATE_DIR"] = tmp
        engine = make_engine(Path(tmp) / "chdb", loaded, rows=rows)
        print(f"coverage cost per rebuild ({rows:,} demo rows; times in ms, best of 3 for the observation)")
        print(
            f"  {'target':22} {'parts':>5} {'stmts':>5} {'+cov':>5} {'observe':>8} {'+coverage':>9} "
            f"{'probe rows':>10} {'rebuild rows':>12} {'bytes x':>8} {'rebuild':>8} {'share':>6}"
        )
        with engine.get_client() as raw:
            for name, windows in CASES:
                bench_case(raw, loaded, name, windows)
            print("\nparity per partition: the coverage probe inside it (ms, best of 3)")
            for name, windows in CASES:
                target = ObjectRef(database="analytics", name=name)
                window = windows[0]
                total = min(timed(parity_for_partition, raw, loaded, target, window)[1] for _ in range(3))
                probe = min(timed(observe_coverage, raw, loaded, target, target, [window], None)[1] for _ in range(3))
                print(
                    f"  {name:22} parity {total * 1e3:7.1f}  of which coverage {probe * 1e3:6.1f} ({probe / total:.0%})"
                )


if __name__ == "__main__":
    main()
