"""Helpers of the UI tests: the demo under a running `dagster dev`, its GraphQL API, the system Chromium.

One `dagster dev` serves a whole test module (starting it and loading the demo costs ~30 s). It runs in
its own session (a non-interactive `dagster dev` ignores SIGINT otherwise) on a free port, with a private
DAGSTER_HOME initialized once by one process before it starts, and a copy of examples/dagster.yaml.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.orchestration.translator import ChmvTranslator
from chmv_assets.sql.quoting import qualified, quote
from resources.clickhouse import ClickHouseResource

from support.paths import EXAMPLE_DDL, ROOT, TESTS


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen, grace: float = 5) -> None:
    """SIGINT to the whole process group, a bounded wait, then SIGKILL.

    ``grace``: after a module of runs the code server often finishes a sensor evaluation first and `dagster dev`
    took more than 20 s to exit (the old bound, always reached in test_ui's teardown); its state is thrown away,
    so the group is killed after a short grace instead.
    """
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


CHROMIUM = "/usr/bin/chromium"
#: Flags for the system Chromium in a container (no sandbox, no GPU, nothing phoning home).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TERMINAL_BACKFILL = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED", "FAILING"}
#: Every asset with its materialized partitions and its latest materialization (a run's, or runless).
ASSETS = """
{
  assetNodes {
    assetKey { path }
    partitionStats { numMaterialized numPartitions }
    assetMaterializations(limit: 1) { runId partition }
  }
}
"""
LAUNCH_BACKFILL = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on PartitionKeysNotFoundError { message }
    ... on PartitionSetNotFoundError { message }
    ... on InvalidSubsetError { message }
    ... on UnauthorizedError { message }
  }
}
"""
BACKFILL = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { id status numPartitions error { message } runs(limit: 100) { runId status } }
    ... on PythonError { message }
  }
}
"""


@dataclass
class DagsterDev:
    """A running `dagster dev` over the demo: where it listens and keeps its state."""

    port: int
    home: Path
    state: Path
    log: Path
    process: subprocess.Popen
    up_at: float  # time.monotonic() when GraphQL first served the assets
    ddl_dir: Path = EXAMPLE_DDL
    env: dict[str, str] = field(default_factory=dict)  # the environment of its processes
    zone: str | None = None  # the time zone its processes run in (their TZ), None: this process's

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def graphql(self, query: str, variables: dict | None = None, timeout: float = 60) -> dict:
        """POST a query; raises on GraphQL errors."""
        request = urllib.request.Request(
            f"{self.url}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = json.loads(response.read())
        if data.get("errors"):
            raise AssertionError(f"GraphQL errors: {data['errors']}")
        return data["data"]

    def engine(self) -> ClickHouseResource:
        """The demo's engine, through the resource: it waits for the lock dagster dev's processes take in turn.

        The embedded engine computes in the zone of the process that opens it: when dagster dev runs in another zone
        (``zone``), what depends on it (inserts that fire MVs, parity) belongs in :meth:`run_python`.
        """
        return ClickHouseResource(dsn=f"chdb://{self.state / 'chdb'}")

    def run_python(self, code: str, timeout: float = 300) -> str:
        """Run ``code`` in a new Python process with the environment of dagster dev's processes; its stdout."""
        env = {**self.env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise AssertionError(f"the script failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done.stdout

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def launch_backfill(self, params: dict) -> dict:
        """The UI's own mutation; returns its result (``__typename``, ``backfillId`` or an error message)."""
        return self.graphql(LAUNCH_BACKFILL, {"backfillParams": params})["launchPartitionBackfill"]

    def backfill(self, backfill_id: str) -> dict:
        return self.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]


def wait_for(condition: Callable[[], Any], deadline_seconds: float, what: str, interval: float = 2.0) -> Any:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + deadline_seconds
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {deadline_seconds:.0f}s waiting for {what}; last: {str(last)[:2000]}")


def start_demo(
    workdir: Path,
    rows: int = 100_000,
    ddl_dir: Path | None = None,
    env: dict[str, str] | None = None,
    zone: str | None = None,
) -> DagsterDev:
    """Load the demo (`chmv load-demo`) into a private state directory and start `dagster dev` on it.

    ``ddl_dir``: a copy of examples/ddl to serve instead (another chmv.toml, say), through ``CHMV_DDL_DIR``.
    ``env``: more environment of every process. ``zone``: the time zone of every process (their ``TZ``).

    The landing zone exists but is empty, as after `make demo` minus its files: the sources are the
    daily Spark ingestion assets, and the targets rebuild from the source tables (which hold every window).
    """
    state, home = workdir / "state", workdir / "dagster_home"
    (state / "landing").mkdir(parents=True)
    home.mkdir()
    shutil.copy(ROOT / "examples" / "dagster.yaml", home / "dagster.yaml")
    extra = {**(env or {}), **({"TZ": zone} if zone else {})}
    env = {**os.environ, "DAGSTER_HOME": str(home), "CHMV_STATE_DIR": str(state), "DAGSTER_DISABLE_TELEMETRY": "1"}
    for name in ("CHMV_DDL_DIR", "CHMV_LANDING_DIR", "CHMV_CLICKHOUSE_DSN"):
        env.pop(name, None)
    if ddl_dir is not None:
        env["CHMV_DDL_DIR"] = str(ddl_dir)
    env |= extra
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [
            str(bin_dir / "chmv"),
            "load-demo",
            "--ddl-dir",
            str(ddl_dir or EXAMPLE_DDL),
            "--rows",
            str(rows),
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    # one process initializes the instance's SQLite storage before dagster dev's processes open it
    subprocess.run(
        [str(bin_dir / "dagster"), "instance", "migrate"], env=env, check=True, capture_output=True, timeout=120
    )
    port = _free_port()
    log = workdir / "dagster_dev.log"
    process = subprocess.Popen(
        [str(bin_dir / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    dev = DagsterDev(port, home, state, log, process, 0.0, ddl_dir or EXAMPLE_DDL, env, zone)

    def serving() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"dagster dev exited:\n{dev.log_tail()}")
        try:
            return bool(dev.graphql("{ assetNodes { id } }", timeout=10)["assetNodes"])
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError, AssertionError):
            return False

    try:
        wait_for(serving, 120, "dagster dev to serve the assets", interval=0.5)
    except BaseException:
        stop(dev)
        raise
    dev.up_at = time.monotonic()
    return dev


def stop(dev: DagsterDev) -> None:
    """Stop `dagster dev` through its process group (see tests/integration/orchestration/test_dagster_dev.py)."""
    _stop(dev.process)


def partitioned_targets(loaded: LoadedProject, translator: ChmvTranslator) -> list[ObjectRef]:
    """The targets with time partitions."""
    return [t for t in loaded.project.targets if translator.get_partitions_def(loaded, t) is not None]


def expected_partitions(dev: DagsterDev, loaded: LoadedProject, translator: ChmvTranslator) -> dict[str, int]:
    """Per asset (``db/table``), how many of its Dagster partitions hold rows, counted on the tables' time columns.

    Independent of chmv_assets.orchestration.live_state: a count of distinct truncated values of each target's partition
    column and each ingested source's event-time column, from ``partition_start`` on.
    """
    start = loaded.config.partition_start
    grains = {"hour": "toStartOfHour", "day": "toDate", "month": "toStartOfMonth"}
    queries = []
    for target in partitioned_targets(loaded, translator):
        scheme = translator.get_partitioning(loaded, target)
        column = quote(scheme.column or "")
        queries.append(
            (
                "/".join(translator.get_asset_key(target).path),
                f"SELECT count(DISTINCT {grains[scheme.grain]}({column})) FROM {qualified(target)} "
                f"WHERE {column} >= toDate('{start}')",
            )
        )
    for fqn, name in loaded.config.ingestion.time_columns.items():
        database, _, table = fqn.partition(".")
        column = quote(name)
        queries.append(
            (
                f"{database}/{table}",
                f"SELECT count(DISTINCT toDate({column})) FROM "
                f"{qualified(ObjectRef(database=database, name=table))} WHERE {column} >= toDate('{start}')",
            )
        )
    with dev.engine().get_client() as client:
        return {asset: int(client.command(sql)) for asset, sql in queries}


def browser_required() -> bool:
    """Whether a missing Chromium fails the browser test rather than skipping it: in CI (``CI`` set, as CI services
    set it) and under ``make test`` (``CHMV_REQUIRE_BROWSER=1``); a developer's run without it skips, saying why."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return ci or os.environ.get("CHMV_REQUIRE_BROWSER", "").strip() == "1"


def require_chromium() -> None:
    """Return when the system Chromium is there (installed now if missing and running as root); else fail the calling
    test where :func:`browser_required`, naming what to install, or skip it saying why."""
    reason = chromium_or_reason()
    if reason is None:
        return
    if browser_required():
        pytest.fail(f"the browser test needs the system Chromium: {reason} (`make chromium`, as root, installs it)")
    pytest.skip(reason)


def chromium_or_reason() -> str | None:
    """None when the system Chromium is there (installed now if missing and running as root), else why not."""
    if os.access(CHROMIUM, os.X_OK):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get): apt-get install chromium"
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if done.returncode != 0:
            return f"installing chromium failed ({' '.join(command)}): {done.stderr[-500:]}"
    return None if os.access(CHROMIUM, os.X_OK) else f"{CHROMIUM} still missing after apt-get install chromium"
