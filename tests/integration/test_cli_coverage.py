"""`chmv rebuild` (a real subprocess) on a month the source lost: refused with exit 1 and no traceback; --force."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import make_engine
from retention_testing import EVENTS_AGG, EXAMPLE_DDL, RETENTION, ROOT_DIR, count

AUG = "toYYYYMM(event_date) = 202608"


def chmv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chmv_assets.cli", *args], cwd=ROOT_DIR, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))  # fmt: skip


def test_rebuild_of_a_month_the_source_lost(tmp_path, example):
    engine = make_engine(tmp_path / "chdb", example, rows=30_000)
    with engine.get_client() as client:
        client.command(RETENTION["delete"], settings={"mutations_sync": 2})
        live = count(client, EVENTS_AGG, AUG)
    args = ["rebuild", "--ddl-dir", str(EXAMPLE_DDL), "--target", "analytics.events_agg", "--partition", "2026-08-01",
            "--dsn", f"chdb://{tmp_path / 'chdb'}"]  # fmt: skip

    dry = chmv(*args, "--dry-run")
    assert dry.returncode == 1 and "Traceback" not in dry.stderr + dry.stdout
    assert "| 2026-08-01 | refused | - | - | none | neither the source table nor the landing zone holds it" in dry.stdout
    assert "**Coverage**" in dry.stdout and "| 2026-08-01 | analytics.raw_events | partly: " in dry.stdout
    assert dry.stderr.startswith("chmv: analytics.events_agg: rebuild refused for 1 partition; nothing was changed\n")
    assert "analytics.raw_events (it holds data from 2026-08-10" in dry.stderr
    assert f"The target partition holds {live:,} rows" in dry.stderr and "chmv rebuild --force" in dry.stderr

    run = chmv(*args)
    assert run.returncode == 1 and "Traceback" not in run.stderr + run.stdout
    assert run.stderr.startswith("chmv: analytics.events_agg: rebuild refused for 1 partition; nothing was changed")
    with engine.get_client() as client:
        assert count(client, EVENTS_AGG, AUG) == live

    forced = chmv(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "rebuild: analytics.events_agg 2026-08-01: clickhouse, replace" in forced.stdout
    with engine.get_client() as client:
        assert 0 < count(client, EVENTS_AGG, AUG) < live
