"""Every verdict and window chmv derives from one scenario, as JSON on stdout: run in a process of a given ``TZ``.

tests/scenarios/test_time_zones.py runs it in two processes (UTC, Asia/Kolkata: the embedded
server takes the process's zone) and compares: the zones must change nothing.

The scenario, on the example project with demo rows (inserted as wall-clock times, as `chmv load-demo` does):
a silent gap in the chain's first target, six days deleted inside a month of a source, an MV detached while rows
keep arriving (a stale target).

Run (from the repository root): PYTHONPATH=.:tests python -m support.zones WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def main(workdir: Path) -> dict:
    os.environ["CHMV_STATE_DIR"] = str(workdir / "state")
    from dagster import DagsterInstance

    from chmv_assets.ddl.loader import load
    from chmv_assets.ddl.models import ObjectRef
    from chmv_assets.engine.health.parity import parity_for_partitions
    from chmv_assets.engine.health.staleness import measure_staleness
    from chmv_assets.engine.health.sweep import SweepState, decide
    from chmv_assets.engine.rebuild.coverage import observe_coverage
    from chmv_assets.orchestration.live_state import evaluate_live_state

    from support.checks import TRANSLATOR, tick
    from support.engines import make_engine
    from support.paths import EXAMPLE_DDL

    loaded = load(EXAMPLE_DDL)
    engine = make_engine(workdir / "chdb", loaded, rows=20_000)
    targets = list(loaded.project.targets)
    out: dict = {}

    def windows(target: ObjectRef, keys: list[str]):
        return [loaded.partitioning(target).window_of(k) for k in keys]

    agg, audit = ObjectRef(database="analytics", name="events_agg"), ObjectRef(database="analytics", name="audit_log")
    with engine.get_client() as client:
        report = evaluate_live_state(client, loaded, TRANSLATOR, None)
        out["partitions"] = sorted(f"{e.asset_key.to_user_string()}|{e.partition}" for e in report.events)
        state = decide(client, loaded, targets, SweepState(), now=1.8e9, max_partitions=10**6, max_rows=10**12).state
        client.command("DETACH TABLE analytics.mv_events_agg")  # a silent gap, as support.healing plants it
        client.command(
            "INSERT INTO analytics.raw_events SELECT toDateTime('2026-08-12 10:00:00') + number * 60, "
            "7000 + number % 5, 'click', 10 FROM numbers(300)"
        )
        client.command("ATTACH TABLE analytics.mv_events_agg")
        client.command(
            "DELETE FROM analytics.api_requests WHERE timestamp >= '2026-09-10' AND timestamp < '2026-09-16'"
        )
        client.command("DELETE FROM analytics.raw_events WHERE timestamp >= '2026-09-20' AND timestamp < '2026-09-23'")
        swept = decide(client, loaded, targets, state, now=1.8e9, max_partitions=10**6, max_rows=10**12)
        out["sweep"] = sorted(f"{i.target.fqn}|{i.key}" for i in swept.items)
        out["parity"] = {
            f"{r.target}|{r.partition}": [r.passed, [(m.name, m.expected, m.actual) for m in r.measures]]
            for target, keys in ((agg, ["2026-08-01", "2026-09-01"]), (audit, ["2026-08-01", "2026-09-01"]))
            for r in parity_for_partitions(client, loaded, target, windows(target, keys))
        }
        hourly = ObjectRef(database="analytics", name="hourly_endpoint_stats")
        days = windows(hourly, ["2026-09-09", "2026-09-12", "2026-09-16"])
        coverage = observe_coverage(client, loaded, hourly, hourly, days, None)
        out["coverage"] = {w.key: [(s.table.holding, s.table.reason) for s in w.sources] for w in coverage.windows}
        months = observe_coverage(client, loaded, agg, agg, windows(agg, ["2026-08-01", "2026-09-01"]), None)
        out["coverage"] |= {
            f"{agg.fqn}|{w.key}": [(s.table.holding, s.table.reason) for s in w.sources] for w in months.windows
        }
        client.command("DETACH TABLE analytics.audit_mv")
        client.command(
            "INSERT INTO analytics.all_events SELECT toDateTime('2026-11-02 00:00:00') + number * 60, "
            "'click', 'info', 1, 'a' FROM numbers(30)"
        )
        lags = {lag.target.fqn: lag for lag in measure_staleness(client, loaded)}
        out["staleness"] = {fqn: [lag.stale, str(lag.target_max), str(lag.expected_max)] for fqn, lag in lags.items()}
        client.command("ATTACH TABLE analytics.audit_mv")
    instance = DagsterInstance.ephemeral()
    cursor, requests = None, []
    for _ in range(3):
        data = tick(loaded, "chmv_recovery", engine, instance, cursor)
        cursor = data.cursor
        requests += [
            (
                r.tags.get("chmv/target", ""),
                r.partition_key,
                r.tags.get("dagster/asset_partition_range_start"),
                r.tags.get("dagster/asset_partition_range_end"),
                r.tags["chmv/reason"],
            )
            for r in data.run_requests
        ]
    out["recovery"] = sorted(map(list, requests))
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), default=str, sort_keys=True))
