"""The report of a certify run: anomalies per target and property, each with the seed, the operations that touched
it in order, and how to replay it; throughput of the workload."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from chmv_assets.certify.faults import FAULTS


def replay_command(ddl_dir: str, seed: int, faults: tuple[str, ...], seconds: float) -> str:
    return f"chmv certify --ddl-dir {ddl_dir} --seconds {seconds:g} --seed {seed} --faults {','.join(faults) or 'none'}"


def render(result, ddl_dir: str, asked_seconds: float) -> str:
    history = result.history
    by_id = {o.id: o for o in history.ops}
    lines = [
        f"certify {ddl_dir}: seed {result.seed}, faults {', '.join(result.faults) or 'none'}",
        f"workload: {result.ops} operations, {result.rows} rows in {result.seconds:.1f}s "
        f"({result.ops / max(result.seconds, 1e-9):.1f} ops/s, {result.rows / max(result.seconds, 1e-9):.0f} rows/s); "
        f"{result.targets} targets, {result.partitions} partitions checked",
        f"during the run: (d) {result.checked_d} rebuild operation(s) checked right after, (f) {result.samples_f} "
        "read(s) of a partition during its rebuilds",
    ]
    kinds: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for o in history.ops:
        kinds[o.kind][
            ("ok", "failed", "uncertain").index(o.status) if o.status in ("ok", "failed", "uncertain") else 2
        ] += 1
    lines.append(
        "operations (ok/failed/uncertain): " + ", ".join(f"{k} {v[0]}/{v[1]}/{v[2]}" for k, v in sorted(kinds.items()))
    )
    if not result.anomalies:
        lines.append("no anomaly: every property held")
    else:
        lines.append(f"{len(result.anomalies)} anomal{'y' if len(result.anomalies) == 1 else 'ies'}:")
        grouped = defaultdict(list)
        for a in result.anomalies:
            grouped[(a.target, a.prop)].append(a)
        for (target, prop), items in sorted(grouped.items()):
            lines.append(f"- ({prop}) {target}: {len(items)} partition(s)/finding(s)")
            for a in items[:6]:
                where = f" partition {a.partition}" if a.partition else ""
                lines.append(f"    {where.strip() or 'rows'}: {a.message}" + (f" — {a.suspect}" if a.suspect else ""))
            shown = items[0].ops[-12:]
            if shown:
                lines.append(
                    "    history (ops touching it, in order): " + "; ".join(_op(by_id[i]) for i in shown if i in by_id)
                )
        lines.append("replay: " + replay_command(ddl_dir, result.seed, result.faults, asked_seconds))
    for note in result.notes[:15]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _op(op) -> str:
    said = op.detail.get("error") or op.detail.get("said") or op.detail.get("point") or ""
    return (
        f"{op.id} [{op.start:.2f}-{op.end if op.end is None else round(op.end, 2)}] {op.status} {','.join(op.touches)[:80]}"
        + (f" ({str(said)[:120]})" if said else "")
    )


def write_json(result, path: Path, ddl_dir: str, asked_seconds: float) -> None:
    data = {
        "seed": result.seed,
        "faults": list(result.faults),
        "known_faults": list(FAULTS),
        "seconds": round(result.seconds, 2),
        "operations": result.ops,
        "rows": result.rows,
        "ops_per_second": round(result.ops / max(result.seconds, 1e-9), 2),
        "rows_per_second": round(result.rows / max(result.seconds, 1e-9), 1),
        "targets": result.targets,
        "partitions": result.partitions,
        "checked_d": result.checked_d,
        "samples_f": result.samples_f,
        "anomalies": [a.to_dict() for a in result.anomalies],
        "notes": result.notes,
        "replay": replay_command(ddl_dir, result.seed, result.faults, asked_seconds),
        "history": str(Path(result.scratch) / "history.jsonl") if result.scratch else None,
    }
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
