"""The scratch copy of a schema a certify run deploys: the DDL directory with chmv's timers shortened so that every
operation of a run of seconds ends within seconds (docs/certify.md, "Bounded time")."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

DST_ZONE = "America/New_York"

#: chmv's waits in a scratch run, each bounding one operation: a chmv wait legitimately long under a fault (pacing
#: while merges are stopped, a lease held by a killed or hung run, writers that never pause) ends within these and
#: the operation is recorded failed, never left to hang the run.
REBUILD = {
    "race_backoff_seconds": 0.05,
    "race_attempts": 3,
    "lease_wait_seconds": 3,
    "lease_ttl_seconds": 10,
    "insert_wait_seconds": 1,
}
PACING = {
    "max_wait_seconds": 3.0,
    "pool_wait_seconds": 2.0,
    "backoff_base_seconds": 0.1,
    "backoff_max_seconds": 0.5,
    "retry_attempts": 3,
}
#: A sweep tick's run compares at most this many partitions: each waits for the writers' running inserts (up to
#: ``insert_wait_seconds`` per comparison, three comparisons), so 100 partitions under steady writers took 33 s.
SWEEP = {"max_partitions": 20}
#: Maintenance on, its window the whole day, every partition closed: the run's maintenance tick merges.
MAINTENANCE = {"enabled": True, "window": "00:00-24:00", "closed_after_hours": 0}


def toml_text(data: dict[str, Any], prefix: str = "") -> str:
    """A minimal TOML writer for chmv.toml (scalars, lists, tables)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines: list[tuple[str, Any]] = []
    tables: list[tuple[str, Any]] = []
    for k, v in data.items():
        (tables if isinstance(v, dict) else lines).append((k, v))
    out = [f'"{k}" = {value(v)}' if "." in k else f"{k} = {value(v)}" for k, v in lines]
    for k, v in tables:
        name = f"{prefix}{k}" if "." not in k else f'{prefix}"{k}"'
        out.append(f"\n[{name}]")
        out.append(toml_text(v, name + "."))
    return "\n".join(out)


def scratch_ddl(ddl_dir: Path, into: Path, *, dst: bool) -> Path:
    """A copy of the DDL directory whose chmv.toml bounds chmv's waits for a run of seconds (:data:`REBUILD`,
    :data:`PACING`, :data:`SWEEP`, parity grace 0, recovery cooldown 0), turns maintenance on (:data:`MAINTENANCE`), drops the
    webhook and the landing zone, and sets the DST zone when that fault is on."""
    shutil.copytree(ddl_dir, into)
    path = into / "chmv.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data.pop("alert_webhook", None)
    data["recovery_cooldown_minutes"] = 0
    data["recovery_max_attempts"] = 5
    data.setdefault("parity", {})["grace_minutes"] = 0
    data.setdefault("rebuild", {}).update(REBUILD)
    data.setdefault("pacing", {}).update(PACING)
    data.setdefault("maintenance", {}).update(MAINTENANCE)
    data.setdefault("sweep", {}).update(SWEEP)
    data.get("ingestion", {}).pop("landing_dir", None)
    if dst:
        data["timezone"] = DST_ZONE
    path.write_text(toml_text(data) + "\n", encoding="utf-8")
    return into
