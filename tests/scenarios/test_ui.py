"""The Dagster UI tells the truth: live state, backfills that launch and succeed, checks per partition, in a browser.

All tests of this module share ONE `dagster dev` over the demo (20k rows, as test_self_healing's; empty landing
zone so the sources are daily ingestion assets, as with `make demo`) and run in order: the live state first (no run
has materialized anything yet), then the backfills, then a failing partition, then the browser.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from asset_checks.names import PARITY
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef

from support.checks import TRANSLATOR
from support.paths import EXAMPLE_DDL
from support.ui import (
    ASSETS,
    CHROMIUM,
    CHROMIUM_ARGS,
    TERMINAL_BACKFILL,
    DagsterDev,
    expected_partitions,
    partitioned_targets,
    require_chromium,
    start_demo,
    stop,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.worker_seconds(330)]

PARTITION_KEYS = """
query Keys($keys: [AssetKeyInput!]) {
  assetNodes(assetKeys: $keys) { assetKey { path } partitionKeysByDimension { partitionKeys } }
}
"""
CHECK_STATUSES = """
query Checks($keys: [AssetKeyInput!]) {
  assetNodes(assetKeys: $keys) {
    assetKey { path }
    assetChecksOrError {
      ... on AssetChecks {
        checks {
          name
          partitionStatuses {
            ... on AssetCheckTimePartitionStatuses { ranges { status startKey endKey } }
          }
        }
      }
    }
  }
}
"""
LAUNCH_RUN = """
mutation LaunchRun($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
RUN = """query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""
SENSOR = """
query Sensor($selector: SensorSelector!) { sensorOrError(sensorSelector: $selector) { ... on Sensor { id sensorState { status } } } }
"""
STOP_SENSOR = """
mutation Stop($id: String!) {
  stopSensor(id: $id) { __typename ... on StopSensorMutationResult { instigationState { status } } ... on PythonError { message } }
}
"""
FAILING_DAY = "2026-10-07"
ERRORS = ObjectRef(database="analytics", name="error_events")
#: Launched on their own too: a daily target fed by a routing MV, a monthly one at the bottom of a chain.
SINGLE_LAUNCHES = (ERRORS, ObjectRef(database="analytics", name="events_weekly"))


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory):
    """The demo from 2026-10-01 on (a third of its partitions: "All" stays every partition of every target) and
    without the parity sweep, whose check runs would queue with the backfills' (test_self_healing covers it)."""
    workdir = tmp_path_factory.mktemp("ui")
    ddl = workdir / "ddl"
    shutil.copytree(EXAMPLE_DDL, ddl)
    toml = (ddl / "chmv.toml").read_text().replace('partition_start = "2026-08-01"', 'partition_start = "2026-10-01"')
    (ddl / "chmv.toml").write_text(toml + "\n[sweep]\nenabled = false\n")
    dagster_dev = start_demo(workdir, rows=20_000, ddl_dir=ddl)
    yield dagster_dev
    stop(dagster_dev)


@pytest.fixture(scope="module")
def example(dev: DagsterDev):
    """The project the UI serves (the copy of examples/ddl of :func:`dev`)."""
    return load(dev.ddl_dir)


def _path(ref) -> list[str]:
    return list(TRANSLATOR.get_asset_key(ref).path)


def test_the_demo_shows_its_partitions_as_materialized_without_a_run(dev: DagsterDev, example) -> None:
    expected = expected_partitions(dev, example, TRANSLATOR)
    assert len(expected) == 9 + 6 and all(n > 0 for n in expected.values()), expected

    def materialized() -> dict | None:
        nodes = {"/".join(n["assetKey"]["path"]): n for n in dev.graphql(ASSETS)["assetNodes"]}
        got = {a: (nodes[a]["partitionStats"] or {}).get("numMaterialized") for a in expected}
        whole = nodes["analytics/entity_latest"]["assetMaterializations"]
        return nodes if got == expected and whole else None

    nodes = wait_for(materialized, 300, "every partition holding rows to show as materialized")
    print(f"\nlive state: asset graph true {time.monotonic() - dev.up_at:.1f}s after the UI was up")
    for asset in [*expected, "analytics/entity_latest"]:
        (latest,) = nodes[asset]["assetMaterializations"]
        assert latest["runId"] == "", f"{asset} was materialized by a run, not observed"  # runless: no run launched


def test_every_partitioned_target_backfills_through_the_ui_mutation(dev: DagsterDev, example) -> None:
    """The newest three partitions (the current period included) of a daily and of a monthly target, each launched
    on its own as from the asset's page, then "All" of every target at once.

    Every target is in "All"; the single-target launches of the other seven would repeat the same mutation and run
    path for another asset, at ~7 s a run on two cores."""
    targets = partitioned_targets(example, TRANSLATOR)
    keys = dev.graphql(PARTITION_KEYS, {"keys": [{"path": _path(t)} for t in targets]})["assetNodes"]
    newest = {tuple(n["assetKey"]["path"]): n["partitionKeysByDimension"][0]["partitionKeys"][-3:] for n in keys}
    assert {example.partitioning(t).grain for t in SINGLE_LAUNCHES} == {"day", "month"}
    launches = [
        (f"{t.fqn} (newest 3)", {"assetSelection": [{"path": _path(t)}], "partitionNames": newest[tuple(_path(t))]})
        for t in SINGLE_LAUNCHES
    ]
    # "All" with every target selected, as from the catalog: chains (events_agg -> events_daily -> events_weekly) too
    launches.append(
        ("every target (all)", {"assetSelection": [{"path": _path(t)} for t in targets], "allPartitions": True})
    )
    launched = {}
    started = time.monotonic()
    for what, params in launches:
        result = dev.launch_backfill({"tags": [], "fromFailure": False, **params})
        assert result["__typename"] == "LaunchBackfillSuccess", (what, result)
        launched[result["backfillId"]] = what

    def finished() -> dict | None:
        states = {i: dev.backfill(i) for i in launched}
        return states if all(s["status"] in TERMINAL_BACKFILL for s in states.values()) else None

    states = wait_for(finished, 1200, f"{len(launched)} backfills to finish", interval=1)
    print(
        f"\n{len(launched)} backfills ({sum(len(s['runs']) for s in states.values())} runs) finished in "
        f"{time.monotonic() - started:.0f}s"
    )
    failed = {
        launched[i]: (s["status"], s["error"], [r["status"] for r in s["runs"]])
        for i, s in states.items()
        if s["status"] != "COMPLETED_SUCCESS" or any(r["status"] != "SUCCESS" for r in s["runs"])
    }
    assert not failed, f"{failed}\n{dev.log_tail()}"

    # every partition of every target was checked, and passed, each as its own evaluation
    nodes = dev.graphql(CHECK_STATUSES, {"keys": [{"path": _path(t)} for t in targets]})["assetNodes"]
    for node in nodes:
        (parity,) = [c for c in node["assetChecksOrError"]["checks"] if c["name"] == PARITY]
        statuses = {r["status"] for r in parity["partitionStatuses"]["ranges"]}
        assert statuses == {"SUCCEEDED"}, (node["assetKey"], parity["partitionStatuses"])


def test_a_failed_partition_shows_as_failed(dev: DagsterDev) -> None:
    """A row the MV never wrote, planted in one day of error_events: parity fails for that partition only.

    The recovery sensor is turned off first, as a user would from the UI: it would otherwise repair the
    partition within minutes (tests/test_sensors_recovery.py), and this test looks at the failure.
    """
    asset = ["analytics", "error_events"]
    selector = {"repositoryName": "__repository__", "repositoryLocationName": "chmv", "sensorName": "chmv_recovery"}
    sensor = dev.graphql(SENSOR, {"selector": selector})["sensorOrError"]
    stopped = dev.graphql(STOP_SENSOR, {"id": sensor["id"]})["stopSensor"]
    assert stopped["__typename"] == "StopSensorMutationResult", stopped
    before = _latest_materialization(dev, asset, FAILING_DAY)
    with dev.engine().get_client() as client:
        client.command(f"INSERT INTO analytics.error_events VALUES ('{FAILING_DAY} 01:00:00', 'error', 'ghost')")
    # the live-state sensor reports the changed partition first (else its event would make the check stale)
    wait_for(lambda: _latest_materialization(dev, asset, FAILING_DAY) != before, 180, "the live state of the write")
    result = dev.graphql(
        LAUNCH_RUN,
        {
            "params": {
                "selector": {
                    "repositoryLocationName": "chmv",
                    "repositoryName": "__repository__",
                    "pipelineName": "__ASSET_JOB",
                    "assetSelection": [],
                    "assetCheckSelection": [{"assetKey": {"path": asset}, "name": PARITY}],
                },
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": FAILING_DAY}]},
                "mode": "default",
                "runConfigData": {},
            }
        },
    )["launchPipelineExecution"]
    assert result["__typename"] == "LaunchRunSuccess", result
    run_id = result["run"]["runId"]
    status = wait_for(
        lambda: _run_status(dev, run_id) in ("SUCCESS", "FAILURE", "CANCELED") and _run_status(dev, run_id),
        300,
        "the check run",
    )
    assert status == "FAILURE"  # a failed blocking check fails its run
    (node,) = dev.graphql(CHECK_STATUSES, {"keys": [{"path": asset}]})["assetNodes"]
    (parity,) = [c for c in node["assetChecksOrError"]["checks"] if c["name"] == PARITY]
    failed = [r for r in parity["partitionStatuses"]["ranges"] if r["status"] == "FAILED"]
    assert [(r["startKey"], r["endKey"]) for r in failed] == [(FAILING_DAY, FAILING_DAY)], parity


def _latest_materialization(dev: DagsterDev, path: list[str], partition: str) -> str | None:
    query = """query M($key: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $key) {
      ... on Asset { assetMaterializations(partitions: $p, limit: 1) { timestamp } } } }"""
    events = dev.graphql(query, {"key": {"path": path}, "p": [partition]})["assetOrError"]["assetMaterializations"]
    return events[0]["timestamp"] if events else None


def _run_status(dev: DagsterDev, run_id: str) -> str:
    return dev.graphql(RUN, {"id": run_id})["runOrError"]["status"]


def test_in_a_browser(dev: DagsterDev, example, tmp_path: Path) -> None:
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    shots = tmp_path / "screenshots"  # never the repo
    shots.mkdir()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        # The "Join the Dagster community" dialog of a first visit (Dagster's CommunityNux) opens a second after a
        # page loads, over whatever dialog is open then (the Materialize dialog covered its Skip button under load):
        # it is marked dismissed in the browser before any page loads, as its Skip button does; dismissed if shown.
        page.add_init_script("window.localStorage.setItem('communityNux', '\"1\"')")
        page.add_locator_handler(
            page.get_by_text("Join the Dagster community"), lambda: page.get_by_role("button", name="Skip").click()
        )
        try:
            every = len(TRANSLATOR.get_partitions_def(example, ERRORS).get_partition_keys())
            _browse(page, dev, shots, expect, every)
        except Exception:
            page.screenshot(path=str(shots / "failure.png"))
            raise
        finally:
            browser.close()
    print(f"\nscreenshots: {shots}")


def _browse(page, dev: DagsterDev, shots: Path, expect, every: int) -> None:
    # a backfill launched by clicking: Materialize… -> All -> Launch backfill (first: it runs while the pages below
    # are read, which it does not change)
    page.goto(f"{dev.url}/assets/analytics/counter_daily")
    materialize = page.get_by_role("button", name="Materialize…").first
    expect(materialize).to_be_visible(timeout=60_000)
    materialize.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("button", name="Launch backfill")).to_be_visible(timeout=30_000)
    assert "have not been materialized" not in dialog.inner_text()  # the upstream shows as materialized
    dialog.get_by_role("button", name="All", exact=True).click()
    dialog.get_by_role("button", name="Launch backfill").click()
    toast = page.get_by_text(re.compile(r"Created backfill \w+"))
    expect(toast.first).to_be_visible(timeout=30_000)
    backfill_id = re.search(r"Created backfill (\w+)", toast.first.inner_text()).group(1)
    assert page.get_by_text("An unexpected error occurred").count() == 0
    page.screenshot(path=str(shots / "launched.png"))

    # a target's page: materialized partitions (observed live, rebuilt by the backfills) and check results
    page.goto(f"{dev.url}/assets/analytics/error_events?view=partitions")
    expect(page.get_by_text(re.compile(r"^Materialized \(\d+\)$"))).to_be_visible(timeout=60_000)
    materialized = int(re.search(r"\d+", page.get_by_text(re.compile(r"^Materialized \(\d+\)$")).inner_text()).group())
    assert materialized == every, (materialized, every)  # the "All" backfill rebuilt each day
    page.screenshot(path=str(shots / "partitions.png"))

    page.goto(f"{dev.url}/assets/analytics/error_events?view=checks&checkDetail={PARITY}")
    expect(page.get_by_text("Execution history")).to_be_visible(timeout=60_000)
    expect(page.get_by_text("This is a blocking asset check.")).to_be_visible()
    page.get_by_role("tab", name="Partitions").last.click()
    expect(page.get_by_text("Failed (1)")).to_be_visible(timeout=30_000)  # the planted row's day
    expect(page.get_by_text(re.compile(r"^Passed \(\d+\)$"))).to_be_visible()
    page.screenshot(path=str(shots / "check_partitions.png"))

    state = wait_for(
        lambda: (s := dev.backfill(backfill_id))["status"] in TERMINAL_BACKFILL and s,
        600,
        f"backfill {backfill_id}",
        interval=1,
    )
    assert state["status"] == "COMPLETED_SUCCESS" and {r["status"] for r in state["runs"]} == {"SUCCESS"}, state
    page.goto(f"{dev.url}/runs/b/{backfill_id}")
    expect(page.get_by_text("100% completed").first).to_be_visible(timeout=60_000)
    assert page.get_by_text("An unexpected error occurred").count() == 0
    page.screenshot(path=str(shots / "backfill.png"))


@pytest.mark.parametrize(
    ("env", "outcome"),
    [
        ({"CI": "true"}, "failed"),
        ({"CHMV_REQUIRE_BROWSER": "1"}, "failed"),
        ({"CI": "false"}, "skipped"),
        ({}, "skipped"),
    ],
)
def test_a_missing_chromium_fails_in_ci_and_under_make_test(monkeypatch, env: dict[str, str], outcome: str) -> None:
    from support import ui

    for name in ("CI", "CHMV_REQUIRE_BROWSER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ui, "chromium_or_reason", lambda: "/usr/bin/chromium is missing: apt-get install chromium")
    expected = pytest.fail.Exception if outcome == "failed" else pytest.skip.Exception
    with pytest.raises(expected, match="apt-get install chromium"):
        ui.require_chromium()
