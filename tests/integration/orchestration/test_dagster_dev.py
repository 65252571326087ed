"""`dagster dev` starts from workspace.yaml and serves the chmv assets over GraphQL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.ui import _free_port, _stop

ROOT = Path(__file__).resolve().parents[3]

QUERY = """
{
  assetNodes {
    assetKey { path }
    isMaterializable
    groupName
    partitionDefinition { type description }
  }
}
"""


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_dagster_dev_serves_the_assets(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "examples" / "dagster.yaml", home / "dagster.yaml")
    port = _free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "CHMV_STATE_DIR": str(tmp_path / "state"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    env.pop("CHMV_DDL_DIR", None)
    log = (tmp_path / "dagster_dev.log").open("w")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("dagster")),
            "dev",
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        nodes, serving, deadline = None, False, time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                data = _graphql(port, QUERY)
                nodes = data.get("data", {}).get("assetNodes") or None
                if nodes:
                    serving = process.poll() is None  # still up once it served: it did not exit after loading
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
        assert nodes, (
            f"dagster dev did not serve assets within 60 s:\n{(tmp_path / 'dagster_dev.log').read_text()[-3000:]}"
        )
    finally:
        _stop(process)
        log.close()
    by_key = {"/".join(n["assetKey"]["path"]): n for n in nodes}
    expected = {
        "analytics/hourly_endpoint_stats": "TIME_WINDOW",
        "analytics/events_daily": "TIME_WINDOW",
        "analytics/events_weekly": "TIME_WINDOW",
        "analytics/requests_enriched": "TIME_WINDOW",
        "analytics/counter_daily": "TIME_WINDOW",
        "analytics/entity_latest": None,
    }
    for asset, partition_type in expected.items():
        node = by_key[asset]
        assert node["isMaterializable"] and node["groupName"] == "analytics"
        assert (node["partitionDefinition"] or {}).get("type") == partition_type, node
    assert "Daily" in by_key["analytics/hourly_endpoint_stats"]["partitionDefinition"]["description"]
    assert "Monthly" in by_key["analytics/events_weekly"]["partitionDefinition"]["description"]
    assert not by_key["analytics/api_requests"]["isMaterializable"]
    assert serving, f"dagster dev exited while serving:\n{(tmp_path / 'dagster_dev.log').read_text()[-3000:]}"
