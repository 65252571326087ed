"""The loop in a running `dagster dev`: a silent gap in a past partition of a chain is found and repaired, no human action.

The daemon runs the sensors: ``chmv_parity_sweep`` sees the source change under an old partition and
requests a check run; the check fails; ``chmv_recovery`` re-attaches nothing (the MV is attached), rebuilds
the partition through the planner, then the partitions of the targets below it. The cadence is shortened
in the project's chmv.toml (the defaults are measured by benchmarks/bench_self_healing.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLE_DDL
from healing_support import plant_gap, wait_for_repair
from ui_support import start_demo, stop

from chmv_assets.ddl.loader import load
from chmv_assets.orchestration.translator import ChmvTranslator

pytestmark = pytest.mark.worker_seconds(160)

FAST = "\n[sweep]\ninterval_seconds = 5\nrecovery_interval_seconds = 5\n"


def test_a_planted_gap_is_found_and_repaired_down_the_chain_by_the_daemon(tmp_path: Path) -> None:
    ddl = tmp_path / "ddl"
    shutil.copytree(EXAMPLE_DDL, ddl)
    with (ddl / "chmv.toml").open("a") as toml:
        toml.write(FAST)
    loaded = load(ddl)
    dev = start_demo(tmp_path, rows=20_000, ddl_dir=ddl)
    try:
        healing = plant_gap(dev)
        healing = wait_for_repair(dev, loaded, ChmvTranslator(), healing, deadline_seconds=420)
        print(healing.describe())
        assert healing.detected is not None
        assert healing.repaired["analytics.events_agg"] < healing.repaired["analytics.events_daily"]
        assert healing.repaired["analytics.events_daily"] <= healing.repaired["analytics.events_weekly"]
    finally:
        stop(dev)
