"""kill -9 of chmv apply at its riskiest steps; the next apply finishes the work and every target ends exact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chmv_assets import settings
from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.cutoff import source_gate

from support.lifecycle import (
    CHANGED_FILTER,
    NEW_SORT_KEY,
    TOP_OF_CHAIN_SELECT,
    WRITES,
    assert_exact,
    copy_ddl,
    edit,
    small_engine,
)

pytestmark = [pytest.mark.slow, pytest.mark.worker_seconds(85)]
ROOT = Path(__file__).resolve().parents[4]


def ref(name: str) -> ObjectRef:
    return ObjectRef(database="analytics", name=name)


def chmv_apply(ddl: Path, dsn: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, settings.CRASH_AT.name: crash_at or ""}
    return subprocess.run(
        [sys.executable, "-m", "chmv_assets.cli", "apply", "--ddl-dir", str(ddl), "--dsn", dsn],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


def insert(engine, source: str, batches: int = 3) -> None:
    """Rows arriving between the kill and the next apply (through the gate, as every writer)."""
    for _ in range(batches):
        with source_gate([ref(source)]), engine.get_client() as client:
            client.command(WRITES[source])


@pytest.mark.parametrize("crash_at", ["lifecycle:cut_in", "lifecycle:partition"])
def test_killed_during_a_re_derivation_the_next_apply_resumes_it(tmp_path: Path, example, crash_at: str) -> None:
    engine = small_engine(tmp_path / "chdb", example)
    dsn = f"chdb://{tmp_path / 'chdb'}"
    ddl = copy_ddl(tmp_path)
    edit(ddl, *CHANGED_FILTER)
    killed = chmv_apply(ddl, dsn, crash_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    insert(engine, "all_events")
    resumed = chmv_apply(ddl, dsn)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming the re-derivation of analytics.error_events" in resumed.stdout
    assert "Rebuild plan of" not in resumed.stdout  # the batches' own messages stay out: the apply reports them
    loaded = load(ddl)
    with engine.get_client() as client:
        assert assert_exact(client, loaded, ref("error_events")) > 100
    again = chmv_apply(ddl, dsn)
    assert again.returncode == 0 and "apply: 0 changes made, 0 partitions re-derived" in again.stdout


@pytest.mark.parametrize("crash_at", ["lifecycle:cut_in", "lifecycle:partition", "lifecycle:exchanged"])
def test_killed_while_building_or_swapping_a_new_version_the_next_apply_ends_exact(
    tmp_path: Path, example, crash_at: str
) -> None:
    engine = small_engine(tmp_path / "chdb", example)
    dsn = f"chdb://{tmp_path / 'chdb'}"
    ddl = copy_ddl(tmp_path)
    edit(ddl, *NEW_SORT_KEY)
    edit(ddl, *TOP_OF_CHAIN_SELECT)  # the new version's rows differ: the chain below must be re-derived from it
    killed = chmv_apply(ddl, dsn, crash_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    insert(engine, "raw_events")
    resumed = chmv_apply(ddl, dsn)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    loaded = load(ddl)
    with engine.get_client() as client:
        for name in ("events_agg", "events_daily", "events_weekly"):
            assert assert_exact(client, loaded, ref(name)) > 0
        (sorting_key,) = client.query(
            "SELECT sorting_key FROM system.tables WHERE database = 'analytics' AND name = 'events_agg'"
        ).result_rows[0]
        chmv_objects = [
            n
            for (n,) in client.query(
                "SELECT name FROM system.tables WHERE database = 'analytics' AND name LIKE '\\_chmv\\_%'"
            ).result_rows
        ]
    assert sorting_key == "event_type, event_date, event_hour, user_id"
    assert chmv_objects and all(n.startswith("_chmv_old_events_agg_") for n in chmv_objects)
    again = chmv_apply(ddl, dsn)
    assert again.returncode == 0 and "apply: 0 changes made, 0 partitions re-derived" in again.stdout
