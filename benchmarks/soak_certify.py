"""Soak: `chmv certify` for --minutes, successive seeds, each seed on the next schema in turn (examples/ddl and every
fixture schema under tests/fixtures/schemas, or the --ddl-dir given); prints per run its schema, seed, wall time,
operations/s, rows/s and anomalies (each with its replay command), then the totals. The goal is 0 anomalies.

Run: python benchmarks/soak_certify.py --minutes 30 [--seed 1] [--seconds 90] [--faults all] [--ddl-dir DIR ...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from chmv_assets.certify.runner import certify

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = [
    ROOT / "examples" / "ddl",
    *sorted(p for p in (ROOT / "tests" / "fixtures" / "schemas").iterdir() if p.is_dir()),
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--faults", default="all")
    parser.add_argument("--ddl-dir", action="append", type=Path, help="a schema to soak (repeatable; default: all)")
    args = parser.parse_args()
    schemas = args.ddl_dir or SCHEMAS
    started = time.monotonic()
    end, seed, runs, anomalies, ops, rows, seconds = started + args.minutes * 60, args.seed, 0, 0, 0, 0, 0.0
    while time.monotonic() < end:
        schema = schemas[runs % len(schemas)]
        began = time.monotonic()
        r = certify(schema, seconds=args.seconds, seed=seed, faults=args.faults)
        wall = time.monotonic() - began
        runs, anomalies, ops, rows, seconds = (
            runs + 1,
            anomalies + len(r.anomalies),
            ops + r.ops,
            rows + r.rows,
            seconds + r.seconds,
        )
        print(
            f"{schema.name} seed {seed} ({','.join(r.faults) or 'no faults'}): {wall:.0f} s, {r.ops / r.seconds:.1f} "
            f"ops/s, {r.rows / r.seconds:.0f} rows/s, {r.partitions} partitions checked, {len(r.anomalies)} anomalies",
            flush=True,
        )
        for a in r.anomalies:
            print(f"  {a.to_dict()}", flush=True)
        if r.anomalies:
            print(
                f"  replay: chmv certify --ddl-dir {schema} --seconds {args.seconds:g} --seed {seed} --faults {args.faults}"
            )
        seed += 1
    minutes = (time.monotonic() - started) / 60
    print(
        f"soak: {minutes:.1f} min, {runs} runs over {len(schemas)} schemas, seeds {args.seed}..{seed - 1}, "
        f"{ops / max(seconds, 1e-9):.1f} ops/s and {rows / max(seconds, 1e-9):.0f} rows/s on average, "
        f"anomalies: {anomalies} (goal 0)"
    )
    return 1 if anomalies else 0


if __name__ == "__main__":
    raise SystemExit(main())
