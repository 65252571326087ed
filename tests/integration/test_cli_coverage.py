"""`chmv rebuild` (a real subprocess) on a month the source lost: refused with exit 1 and no traceback; --force."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.engines import make_engine
from support.paths import EXAMPLE_DDL, ROOT
from support.retention import EVENTS_AGG, RETENTION, count, raw_events_ttl_project

pytestmark = pytest.mark.worker_seconds(35)

AUG = "toYYYYMM(event_date) = 202608"


def chmv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chmv_assets.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


KINDS = ["ttl", "drop_partition", "delete"]


@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_rebuild_of_a_month_the_source_lost(tmp_path, example, kind):
    loaded = raw_events_ttl_project(tmp_path) if kind == "ttl" else example
    engine = make_engine(tmp_path / "chdb", loaded, rows=30_000)
    with engine.get_client() as client:
        client.command(RETENTION[kind], settings={"mutations_sync": 2})
        live = count(client, EVENTS_AGG, AUG)
    ddl = loaded.config.ddl_dir if kind == "ttl" else str(EXAMPLE_DDL)
    args = [
        "rebuild",
        "--ddl-dir",
        ddl,
        "--target",
        "analytics.events_agg",
        "--partition",
        "2026-08-01",
        "--dsn",
        f"chdb://{tmp_path / 'chdb'}",
    ]
    holding = {
        "ttl": "partly: analytics.raw_events: its TTL",
        "drop_partition": "none: analytics.raw_events holds no",
        "delete": "partly: analytics.raw_events holds the window from 2026-08-10",
    }[kind]

    dry = chmv(*args, "--dry-run")
    assert dry.returncode == 1 and "Traceback" not in dry.stderr + dry.stdout
    assert (
        "| 2026-08-01 | refused | - | - | none | neither the source table nor the landing zone holds it" in dry.stdout
    )
    assert "**Coverage**" in dry.stdout and f"| 2026-08-01 | analytics.raw_events | {holding}" in dry.stdout
    assert dry.stderr.startswith("chmv: analytics.events_agg: rebuild refused for 1 partition; nothing was changed\n")
    since = "2026-09-01" if kind == "drop_partition" else "2026-08-10"
    assert f"analytics.raw_events (it holds data from {since}" in dry.stderr
    assert f"The target partition holds {live:,} rows" in dry.stderr and "chmv rebuild --force" in dry.stderr

    run = chmv(*args)
    assert run.returncode == 1 and "Traceback" not in run.stderr + run.stdout
    assert run.stderr.startswith("chmv: analytics.events_agg: rebuild refused for 1 partition; nothing was changed")
    with engine.get_client() as client:
        assert count(client, EVENTS_AGG, AUG) == live

    forced = chmv(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    method = "drop" if kind == "drop_partition" else "replace"
    assert f"rebuild: analytics.events_agg 2026-08-01: clickhouse, {method}" in forced.stdout
    with engine.get_client() as client:
        kept = count(client, EVENTS_AGG, AUG)
    assert kept < live and (kept == 0) == (kind == "drop_partition")
