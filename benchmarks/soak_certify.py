"""Soak: `chmv certify` for --minutes, successive seeds, each seed on the next schema in turn (examples/ddl and every
fixture schema under tests/fixtures/schemas, or the --ddl-dir given), each run in a process of its own (as a user
runs it: the embedded engine keeps the time zone of the first one a process starts, and the dst fault needs New
York); prints per run its schema, seed, wall time, operations/s, rows/s and anomalies (each with its replay command),
then the totals. The goal is 0 anomalies.

Run: python benchmarks/soak_certify.py --minutes 30 [--seed 1] [--seconds 90] [--faults all] [--ddl-dir DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = [
    ROOT / "examples" / "ddl",
    *sorted(p for p in (ROOT / "tests" / "fixtures" / "schemas").iterdir() if p.is_dir()),
]


def run_one(schema: Path, seed: int, seconds: float, faults: str, scratch: Path) -> dict:
    """One ``chmv certify`` in a process of its own; its JSON report (``error`` set where the run itself failed)."""
    report = scratch / f"report-{seed}.json"
    done = subprocess.run(
        [sys.executable, "-m", "chmv_assets.cli", "certify", "--ddl-dir", str(schema), "--seconds", f"{seconds:g}"]
        + ["--seed", str(seed), "--faults", faults, "--report", str(report)],
        env={**os.environ, "CHMV_STATE_DIR": str(scratch / f"state-{seed}")},
        capture_output=True,
        text=True,
        timeout=seconds * 4 + 120,
        cwd=ROOT,
    )
    if done.returncode not in (0, 1) or not report.is_file():
        return {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-2000:]}"}
    return json.loads(report.read_text())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--faults", default="all")
    parser.add_argument("--ddl-dir", action="append", type=Path, help="a schema to soak (repeatable; default: all)")
    args = parser.parse_args()
    schemas = args.ddl_dir or SCHEMAS
    state = os.environ.get("CHMV_STATE_DIR")
    if state:
        Path(state).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="soak-", dir=state))
    started = time.monotonic()
    end, seed, runs, anomalies, errors, ops, rows, seconds = started + args.minutes * 60, args.seed, 0, 0, 0, 0, 0, 0.0
    while time.monotonic() < end:
        schema = schemas[runs % len(schemas)]
        began = time.monotonic()
        r = run_one(schema, seed, args.seconds, args.faults, scratch)
        wall = time.monotonic() - began
        runs += 1
        if "error" in r:
            errors += 1
            print(f"{schema.name} seed {seed}: the run failed: {r['error']}", flush=True)
            seed += 1
            continue
        found = r["anomalies"]
        anomalies, ops, rows, seconds = (
            anomalies + len(found),
            ops + r["operations"],
            rows + r["rows"],
            seconds + r["seconds"],
        )
        print(
            f"{schema.name} seed {seed} ({','.join(r['faults']) or 'no faults'}): {wall:.0f} s, "
            f"{r['ops_per_second']:.1f} ops/s, {r['rows_per_second']:.0f} rows/s, {r['partitions']} partitions checked, "
            f"{len(found)} anomalies",
            flush=True,
        )
        for a in found:
            print(f"  {a}", flush=True)
        if found:
            print(f"  replay: {r['replay']}")
        seed += 1
    minutes = (time.monotonic() - started) / 60
    print(
        f"soak: {minutes:.1f} min, {runs} runs over {len(schemas)} schemas, seeds {args.seed}..{seed - 1}, "
        f"{ops / max(seconds, 1e-9):.1f} ops/s and {rows / max(seconds, 1e-9):.0f} rows/s on average, "
        f"anomalies: {anomalies} (goal 0), runs that failed: {errors}"
    )
    return 1 if anomalies or errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
