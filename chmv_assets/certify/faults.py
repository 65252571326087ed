"""The faults a certify run can inject, each on or off, drawn by the seed or named on the command line."""

from __future__ import annotations

import random

from chmv_assets.errors import ChmvError

#: name → what it does (docs/certify.md has the long form).
FAULTS = {
    "kill": "kill -9 of a `chmv rebuild` (a child process) at a named point: shadow created, mid-fill, filled not "
    "swapped, swapped not recorded",
    "slow_pipeline": "inserts whose MV output lands late: async inserts not waited for, a Buffer table in front of a "
    "source",
    "retention": "retention drops of source partitions (ALTER TABLE … DROP PARTITION)",
    "partial_delete": "partial deletes on sources (DELETE FROM … WHERE, half the rows or one hour of every day)",
    "foreign": "a writer outside the DDL: an MV of another team and a one-off INSERT into a managed target",
    "merge_pressure": "SYSTEM STOP MERGES on targets and sources for a while, a low parts_to_throw_insert",
    "dst": "process and session in America/New_York, rows in the 01:00 hours of 2026-11-01 and around 2026-03-08 "
    "02:00 (chmv.toml timezone set to it)",
    "hung_connection": "a client whose calls stop answering past their time limit during a rebuild",
}

#: The kill points (chmv_assets.engine.rebuild.steps, $CHMV_CRASH_AT).
KILL_POINTS = ("rebuild:shadow_created", "rebuild:mid_fill", "rebuild:filled", "rebuild:swapped")


def choose_faults(spec: str | None, seed: int) -> tuple[str, ...]:
    """The faults of a run: ``all``, ``none``, a comma list of names, or (None) each drawn by the seed.

    Raises:
        ChmvError: An unknown fault name (the message lists them).
    """
    if spec is None:
        rng = random.Random(f"{seed}:faults")
        return tuple(f for f in FAULTS if rng.random() < 0.5)
    spec = spec.strip()
    if spec == "all":
        return tuple(FAULTS)
    if spec in ("none", ""):
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ChmvError(f"--faults: unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}, all, none")
    return names
