"""The loop in a running `dagster dev`, every process in a non-UTC zone (TZ=Asia/Kolkata), one `dagster dev` for the module.

1. The demo left alone: the parity sweep checks every partition once (a cold start) and nothing is rebuilt —
   events_agg, a GROUP BY MV into a plain MergeTree, is judged by its sums, not by rows that depend on batching.
2. A silent gap in a past partition of a chain is found and repaired, no human action: ``chmv_parity_sweep`` sees
   the source change under an old partition and requests a check run; the check fails; ``chmv_recovery`` rebuilds
   the partition through the planner, then the partitions of the targets below it.
3. A SELECT change merged but not applied, sensors on: the code location reloads with it; rows keep arriving; no
   DDL is executed, the target still equals what the deployed SELECT yields, `chmv plan` still shows the change.

The cadence is shortened in the project's chmv.toml (the defaults are measured by benchmarks/bench_self_healing.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.orchestration.translator import ChmvTranslator

from support.healing import plant_gap, wait_for_repair
from support.paths import EXAMPLE_DDL
from support.ui import DagsterDev, start_demo, stop, wait_for

pytestmark = pytest.mark.worker_seconds(170)

ZONE = "Asia/Kolkata"
FAST = "\n[sweep]\ninterval_seconds = 5\nrecovery_interval_seconds = 5\nmax_partitions = 2000\n"
TRANSLATOR = ChmvTranslator()
AUDIT = ObjectRef(database="analytics", name="audit_log")
REBUILD_REASONS = ("parity_failed", "stale", "upstream_repaired")
RUNS = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter) { ... on Runs { results { runId jobName status startTime endTime tags { key value } } } }
}
"""
TICKS = """
query Ticks($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) { ... on Sensor { sensorState { ticks(limit: 50) { timestamp status } } } }
}
"""
RELOAD = """
mutation { reloadRepositoryLocation(repositoryLocationName: "chmv") {
  __typename ... on WorkspaceLocationEntry { locationOrLoadError { __typename } } } }
"""


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DagsterDev, LoadedProject]]:
    workdir = tmp_path_factory.mktemp("healing")
    ddl = workdir / "ddl"
    shutil.copytree(EXAMPLE_DDL, ddl)
    with (ddl / "chmv.toml").open("a") as toml:
        toml.write(FAST)
    dev = start_demo(workdir, rows=20_000, ddl_dir=ddl, zone=ZONE)
    try:
        yield dev, load(ddl)
    finally:
        stop(dev)


def _runs(dev: DagsterDev, since: float = 0.0) -> list[dict]:
    results = dev.graphql(RUNS, {"filter": {}})["runsOrError"]["results"]
    return [r for r in results if (r["startTime"] or time.time()) >= since or r["status"] in ("QUEUED", "NOT_STARTED")]


def _tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["tags"]}


def _rebuilds(runs: list[dict]) -> list[dict]:
    return [r for r in runs if _tags(r).get("chmv/reason", "").startswith(REBUILD_REASONS)]


def _quiet(dev: DagsterDev) -> bool:
    """No run queued or running, and two recovery ticks since the last one ended (the repairs' cascade is over)."""
    runs = _runs(dev)
    if any(r["status"] in ("QUEUED", "NOT_STARTED", "STARTING", "STARTED") for r in runs):
        return False
    ended = max((r["endTime"] or 0 for r in runs), default=0)
    return _ticks_after(dev, "chmv_recovery", ended) >= 2


def _described(runs: list[dict]) -> list[tuple]:
    return [(r["jobName"], _tags(r).get("chmv/reason"), _tags(r).get("chmv/target")) for r in runs]


def _ticks_after(dev: DagsterDev, sensor: str, since: float) -> int:
    selector = {"repositoryLocationName": "chmv", "repositoryName": "__repository__", "sensorName": sensor}
    ticks = dev.graphql(TICKS, {"selector": selector})["sensorOrError"]["sensorState"]["ticks"]
    return sum(1 for t in ticks if t["timestamp"] > since and t["status"] in ("SUCCESS", "SKIPPED"))


def test_the_demo_left_alone_requests_no_rebuild(loop) -> None:
    dev, _loaded = loop

    def cold_start_checked() -> list[dict]:
        sweeps = [r for r in _runs(dev) if r["jobName"] == "chmv_parity_sweep_checks"]
        return [r for r in sweeps if r["status"] == "SUCCESS"]

    (first, *_) = wait_for(cold_start_checked, 240, "the sweep's cold start checked every partition", interval=3.0)
    assert int(_tags(first)["chmv/partitions"]) > 100  # every partition of every target, in one run
    checked_at = time.time()
    wait_for(lambda: _ticks_after(dev, "chmv_recovery", checked_at) >= 2, 120, "two recovery ticks after it")
    runs = _runs(dev)
    assert _rebuilds(runs) == [], _described(_rebuilds(runs))
    assert not [r for r in runs if r["jobName"] == "chmv_apply"]


def test_a_planted_gap_is_found_and_repaired_down_the_chain_in_a_non_utc_zone(loop) -> None:
    dev, loaded = loop
    healing = plant_gap(dev)
    healing = wait_for_repair(dev, loaded, TRANSLATOR, healing, deadline_seconds=420)
    print(healing.describe())
    assert healing.detected is not None
    assert healing.repaired["analytics.events_agg"] < healing.repaired["analytics.events_daily"]
    assert healing.repaired["analytics.events_daily"] <= healing.repaired["analytics.events_weekly"]


LIVE_MV = (
    "SELECT as_select, metadata_modification_time FROM system.tables WHERE database = 'analytics' AND name = 'audit_mv'"
)
#: Rows the changed SELECT (no debug level) would not keep, the deployed one keeps: one past day of them.
NEW_ROWS = (
    "INSERT INTO analytics.all_events SELECT toDateTime('2026-08-20 09:00:00') + number * 60, 'click', "
    "if(number % 2 = 0, 'debug', 'info'), 1, 'late' FROM numbers(40)"
)


PARITY = """
import json
from chmv_assets.engine.health.parity import parity_for_partitions
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

loaded, audit = load(__DDL__), ObjectRef(database="analytics", name="audit_log")
window = loaded.partitioning(audit).window("2026-08-01")
with ClickHouseResource(dsn=__DSN__).get_client() as client:
    if __INSERT__:
        client.command(__INSERT__)
    (result,) = parity_for_partitions(client, loaded, audit, [window])
print(json.dumps([result.passed, result.unverifiable, result.describe()]))
"""


def _audit_parity(dev: DagsterDev, ddl: Path, insert: str = "") -> list:
    """Insert (optional), then the parity of audit_log's August against ``ddl``'s SELECT, in dagster dev's zone."""
    code = PARITY.replace("__DDL__", repr(str(ddl))).replace("__DSN__", repr(dev.engine().resolved_dsn))
    return json.loads(dev.run_python(code.replace("__INSERT__", repr(insert))).strip().splitlines()[-1])


def test_an_unapplied_select_change_changes_no_ddl_and_the_target_keeps_the_deployed_select(loop, tmp_path) -> None:
    dev, _deployed = loop
    wait_for(lambda: _quiet(dev), 300, "the repairs of the previous test to end", interval=3.0)
    deployed = tmp_path / "deployed"
    shutil.copytree(dev.ddl_dir, deployed)
    with dev.engine().get_client() as client:
        live_before = client.query(LIVE_MV).result_rows
    sql = dev.ddl_dir / "40_all_events.sql"
    sql.write_text(sql.read_text().replace("WHERE is_audit = 1;", "WHERE is_audit = 1 AND level != 'debug';"))
    changed_at = time.time()
    assert dev.graphql(RELOAD)["reloadRepositoryLocation"]["__typename"] == "WorkspaceLocationEntry"
    assert _audit_parity(dev, dev.ddl_dir, NEW_ROWS)[1].startswith("apply pending")  # the live MV keeps all 40 rows
    inserted_at = time.time()

    def swept() -> list[dict]:
        runs = [r for r in _runs(dev, inserted_at) if r["jobName"] == "chmv_parity_sweep_checks"]
        return [r for r in runs if r["status"] == "SUCCESS" and AUDIT.fqn in _tags(r).get("chmv/targets", "")]

    wait_for(swept, 180, "a sweep run checking the partition of audit_log the rows landed in", interval=3.0)
    checked_at = time.time()
    wait_for(lambda: _ticks_after(dev, "chmv_recovery", checked_at) >= 3, 120, "three recovery ticks after it")
    runs = _runs(dev, changed_at)
    unexpected = _rebuilds(runs) + [r for r in runs if r["jobName"] == "chmv_apply"]
    assert unexpected == [], _described(unexpected)
    with dev.engine().get_client() as client:
        assert client.query(LIVE_MV).result_rows == live_before  # no MODIFY QUERY, no DROP, no CREATE
        assert client.command("SELECT count() FROM analytics.audit_log WHERE payload = 'late'") == 40
    passed, unverifiable, described = _audit_parity(dev, deployed)  # the deployed SELECT over the source
    assert passed and unverifiable is None, described
    plan = subprocess.run(
        [
            str(Path(sys.executable).parent / "chmv"),
            "plan",
            "--ddl-dir",
            str(dev.ddl_dir),
            "--dsn",
            f"chdb://{dev.state / 'chdb'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dev.env,
    )
    assert plan.returncode == 3, plan.stderr  # changes pending
    assert "analytics.audit_mv" in plan.stdout and "modify query" in plan.stdout.lower()
