"""The lifecycle: plan time for 1,000 MVs (goal < 3 s) and an apply that re-derives N partitions vs the bare
INSERT…SELECT of the same history (goal ≤ 1.2×).

Run: ``.venv/bin/python benchmarks/bench_lifecycle.py [ROWS]``.

* plan: the 1,000-MV directory of ``bench_definitions.py`` deployed into a tmp embedded engine; timed:
  ``plan_lifecycle`` with nothing to change (best of 3), and with one SELECT changed plus its preflight.
  (chdb 26.9 refuses an AggregatingMergeTree dimension outside the sorting key, so the generated stats tables
  get ``name`` in their ORDER BY.)
* apply: ``bench_rebuild.py``'s source (ROWS rows over 10 days) and daily AggregatingMergeTree target; the MV's
  SELECT gains a filter; timed: ``apply_plan`` (MODIFY QUERY, then 10 partitions re-derived, each checked by
  parity) vs ``INSERT INTO <plain table of the same structure> SELECT …`` with the new SELECT over all rows.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def bench_plan(tmp: Path) -> None:
    from bench_definitions import generate

    from chmv_assets.ddl.loader import load
    from chmv_assets.engine.apply import apply
    from chmv_assets.engine.lifecycle_planner import plan_lifecycle
    from chmv_assets.engine.preflight import preflight
    from resources.clickhouse import ClickHouseResource

    ddl = tmp / "ddl"
    ddl.mkdir()
    generate(ddl, 1000)
    for path in ddl.glob("*.sql"):
        path.write_text(path.read_text().replace("ORDER BY (endpoint, hour);", "ORDER BY (endpoint, hour, name);"))
    loaded = load(ddl)
    resource = ClickHouseResource(dsn=f"chdb://{tmp / 'chdb'}")
    with resource.get_client() as client:
        apply(client, loaded.project)
        times = []
        for _ in range(3):
            started = time.perf_counter()
            plan = plan_lifecycle(client, loaded)
            times.append(time.perf_counter() - started)
        assert not plan.has_changes, plan.describe()
    first = sorted(ddl.glob("*.sql"))[1]
    first.write_text(first.read_text().replace("GROUP BY day, kind;", "WHERE ms > 0 GROUP BY day, kind;", 1))
    changed = load(ddl)
    with resource.get_client() as client:
        started = time.perf_counter()
        plan = plan_lifecycle(client, changed)
        planned = time.perf_counter() - started
        preflight(client, changed, plan)
        checked = time.perf_counter() - started - planned
    print(f"plan of {len(loaded.project.views)} MVs: {min(times):.2f}s with no changes (best of 3; goal < 3 s); "
          f"{planned:.2f}s with one SELECT changed ({plan.summary()}), preflight {checked:.2f}s")


def bench_apply(tmp: Path, rows: int) -> None:
    from bench_rebuild import DAYS, DDL, START

    from asset_checks.parity import parity_for_partition
    from chmv_assets.ddl.loader import load
    from chmv_assets.engine import lifecycle_apply
    from chmv_assets.engine.apply import apply
    from chmv_assets.engine.lifecycle_planner import plan_lifecycle
    from resources.clickhouse import ClickHouseResource

    ddl = tmp / "ddl"
    ddl.mkdir()
    (ddl / "bench.sql").write_text(DDL)
    (ddl / "chmv.toml").write_text(f'default_database = "bench"\npartition_start = "{START:%Y-%m-%d}"\n')
    resource = ClickHouseResource(dsn=f"chdb://{tmp / 'chdb'}")
    with resource.get_client() as client:
        apply(client, load(ddl).project)
        client.command(
            f"INSERT INTO bench.api_requests SELECT toDateTime('{START:%Y-%m-%d %H:%M:%S}') + intDiv(number * "
            f"{DAYS * 86400}, {rows}), ['/a', '/b', '/c', '/d'][number % 4 + 1], number % 5000, number % 1500, "
            f"[200, 404, 503][number % 3 + 1] FROM numbers({rows})"
        )
    (ddl / "bench.sql").write_text(DDL.replace("FROM bench.api_requests\n", "FROM bench.api_requests\nWHERE status_code < 500\n"))
    loaded = load(ddl)
    view = next(iter(loaded.project.views.values()))
    with resource.get_client() as client:
        plan = plan_lifecycle(client, loaded)
        client.command("CREATE TABLE bench.plain AS bench.daily_stats")
        started = time.perf_counter()
        client.command(f"INSERT INTO bench.plain {view.select_sql}")
        bare = time.perf_counter() - started

    def parity(client, target, live, window):
        return parity_for_partition(client, loaded, target, window, live=live)

    started = time.perf_counter()
    report = lifecycle_apply.apply_plan(resource, loaded, plan, parity=parity, batch_seconds=3600)
    applied = time.perf_counter() - started
    partitions = sum(report.partitions.values())
    print(f"apply re-deriving {partitions} partitions of {rows:,} source rows: {applied:.2f}s vs bare INSERT…SELECT "
          f"{bare:.2f}s: {applied / bare:.2f}x (goal ≤ 1.2x; incl. {report.parity_checked} parity checks)")


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    with tempfile.TemporaryDirectory() as tmp:
        bench_plan(Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        bench_apply(Path(tmp), rows)


if __name__ == "__main__":
    main()
