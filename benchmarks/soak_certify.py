"""Soak: `chmv certify` over examples/ddl with successive seeds for --minutes; prints operations/s and anomalies per
seed (the goal is 0). Run: python benchmarks/soak_certify.py --minutes 10 [--seed 1] [--seconds 25] [--faults all]"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from chmv_assets.certify.runner import certify

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddl"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=25)
    parser.add_argument("--faults", default="all")
    args = parser.parse_args()
    end, seed, total = time.monotonic() + args.minutes * 60, args.seed, 0
    while time.monotonic() < end:
        r = certify(EXAMPLE, seconds=args.seconds, seed=seed, faults=args.faults)
        total += len(r.anomalies)
        print(
            f"seed {seed}: {r.ops / r.seconds:.1f} ops/s, {r.rows / r.seconds:.0f} rows/s, {len(r.anomalies)} anomalies"
        )
        seed += 1
    print(f"anomalies: {total} (goal 0)")
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())
