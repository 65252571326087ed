"""The zones of the server and of chmv's processes change no verdict and no window.

tests/support/zones.py derives every verdict of one scenario (the partitions the live-state sensor reports, the
partitions the parity sweep marks after a silent gap and a DELETE, parity with its figures, coverage of days
around the DELETE, staleness of a detached MV, the recovery sensor's requests); it runs in a process in UTC and in
one in Asia/Kolkata (the embedded server takes its process's zone), and both must say the same. Before chmv read
every time as the server's wall clock, the Kolkata run failed in the recovery tick ("can't compare offset-naive
and offset-aware datetimes").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT, TESTS

pytestmark = pytest.mark.worker_seconds(20)


def _verdicts(workdir: Path, zone: str) -> dict:
    workdir.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "support.zones", str(workdir)],
        env={**os.environ, "TZ": zone, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_verdicts_and_windows_are_the_same_in_utc_and_in_kolkata(tmp_path: Path) -> None:
    utc = _verdicts(tmp_path / "utc", "UTC")
    kolkata = _verdicts(tmp_path / "kolkata", "Asia/Kolkata")
    for part in utc:
        assert kolkata[part] == utc[part], part
    # the scenario did find what it planted, so the comparison says something
    assert not utc["parity"]["analytics.events_agg|2026-08-01"][0]  # the silent gap
    assert "analytics.events_agg|2026-08-01" in utc["sweep"]
    assert utc["coverage"]["2026-09-12"][0][0] == "none" and utc["coverage"]["2026-09-09"][0][0] == "entirely"
    assert (
        "holds no rows of 2026-09-20 … 2026-09-22 (3 days)" in utc["coverage"]["analytics.events_agg|2026-09-01"][0][1]
    )
    assert utc["staleness"]["analytics.audit_log"][0] is True
    assert [r[0] for r in utc["recovery"]] == ["analytics.audit_log"]
    assert len(utc["partitions"]) > 100
