"""Benchmark of the drift check's link to the lifecycle plan, on the demo project (examples/ddl).

The drift checks of every target in one run (as the ``chmv_drift`` sensor requests them), on the embedded engine
with the demo rows: with the server matching the DDL (no plan is made), then with one MV's SELECT changed in the
repo (the first failing check plans once for the run; every failing check shows its part of that plan).

Run: .venv/bin/python benchmarks/bench_drift_plan.py [rows]   (default 1,000,000 demo rows, as `make demo`)
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
warnings.filterwarnings("ignore")

from dagster import AssetCheckKey, DagsterInstance  # noqa: E402

from asset_checks.names import DRIFT  # noqa: E402
from chmv_assets.ddl.loader import load  # noqa: E402

from support.checks import TRANSLATOR, evaluations, run_checks  # noqa: E402
from support.engines import make_engine  # noqa: E402
from support.lifecycle import CHANGED_FILTER, copy_ddl, edit  # noqa: E402
from support.paths import EXAMPLE_DDL  # noqa: E402


def drift_run(loaded, engine, repeat: int = 3) -> tuple[float, list]:
    """The best of ``repeat`` runs of every target's drift check (the machine is shared), and the evaluations."""
    keys = [AssetCheckKey(TRANSLATOR.get_asset_key(t), DRIFT) for t in loaded.project.targets]
    best, checks = float("inf"), []
    for _ in range(repeat):
        started = time.perf_counter()
        result = run_checks(loaded, engine, keys, DagsterInstance.ephemeral())
        best, checks = min(best, time.perf_counter() - started), evaluations(result, DRIFT)
    return best, checks


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(Path(tmp) / "chdb", load(EXAMPLE_DDL), rows=rows)
        ddl = copy_ddl(Path(tmp))
        matching = load(ddl)
        drift_run(matching, engine, repeat=1)  # warm-up: imports, the engine's first open
        clean, checks = drift_run(matching, engine)
        assert all(e.passed for e in checks)
        edit(ddl, *CHANGED_FILTER)
        changed = load(ddl)
        drifted, checks = drift_run(changed, engine)
        failed = [e for e in checks if not e.passed]
        assert len(failed) == 1 and "chmv/fix" in failed[0].metadata
        planned = failed[0].metadata["chmv/plan_seconds"].value
    print(
        f"drift checks of {len(checks)} targets ({rows:,} demo rows), one run, best of 3: {clean:.2f}s with no "
        f"drift (no plan made); {drifted:.2f}s with one SELECT changed, {planned:.2f}s of it planning once for the run"
    )


if __name__ == "__main__":
    main()
