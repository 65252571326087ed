"""The part of the lifecycle plan (``chmv plan``) that fixes a drifting target, with how to run it: what the drift
check (:mod:`chmv_assets.engine.health.schema_drift`) links a failing target to."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.drift import involved_objects_of
from chmv_assets.engine.lifecycle.plan import LifecyclePlan
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.errors import ChmvError
from chmv_assets.settings import redact_dsn


@dataclass(frozen=True)
class DriftPlan:
    """The lifecycle plan drifting targets link to: made once, for every target of a check run.

    Attributes:
        plan: ``chmv plan``'s plan of the DDL directory against the server; None when it could not be made.
        error: Why it could not be made (invalid DDL, a refused MV, the server's error).
        seconds: How long planning took.
    """

    plan: LifecyclePlan | None
    error: str | None
    seconds: float


def plan_for_drift(client: Client, loaded: LoadedProject, *, root: Path | None = None) -> DriftPlan:
    """``chmv plan`` of the DDL directory against the server (nothing is changed), for the drift checks to link to.

    A plan that cannot be made (the DDL asks for what chmv refuses, the server answers with an error) is reported
    in the result, not raised: the drift check's verdict stands without it.
    """
    started = time.monotonic()
    try:
        plan = plan_lifecycle(client, loaded, root=root)
    except (ChmvError, ClickHouseError) as err:
        return DriftPlan(None, " ".join(str(err).split()), time.monotonic() - started)
    return DriftPlan(plan, None, time.monotonic() - started)


def drift_fix_markdown(found: DriftPlan, loaded: LoadedProject, target: ObjectRef, *, dsn: str | None) -> str:
    """How to fix a drifting target: the changes of the plan that touch it, the objects its MVs need, and the
    re-derivation of its history; then how to run them (the ``chmv_apply`` job, or ``chmv plan`` / ``chmv apply``).

    Args:
        found: The plan of the check run (:func:`plan_for_drift`).
        loaded: The parsed DDL directory.
        target: The drifting target.
        dsn: The server the check read (shown without credentials or secret query values), None for the default.
    """
    ddl_dir = loaded.project.ddl_dir
    where = f" --ddl-dir {ddl_dir}" + (f" --dsn {redact_dsn(dsn)}" if dsn else "")
    how = [
        "**How to fix**: apply the DDL directory. In the UI, launch the `chmv_apply` job (its `plan_ddl` step "
        "shows the whole plan, `apply_ddl` checks it in a scratch database, then applies it with zero gap); "
        "on the command line:",
        "",
        "```bash",
        f"chmv plan{where}   # the plan (exit code 3: changes pending)",
        f"chmv apply{where}",
        "```",
    ]
    objects = involved_objects_of(loaded.project, target)
    if found.plan is None:
        return "\n".join([f"The lifecycle plan could not be made: {found.error}", "", *how])
    part = found.plan.touching(objects)
    if not part.changes and not part.notes and not part.findings:
        head = [
            f"The lifecycle plan has no change for {target.fqn}, its MVs or what they read: chmv does not "
            "apply this difference (see `chmv/diff`)."
        ]
    else:
        head = [
            f"**The changes of the lifecycle plan that fix {target.fqn}** ({len(part.changes)} of the plan's "
            f"{len(found.plan.changes)}: {found.plan.summary()}; planned in {found.seconds:.2f}s):",
            "",
            *_changes_markdown(part),
        ]
    return "\n".join([*head, "", *how])


def _changes_markdown(plan: LifecyclePlan) -> list[str]:
    """Each change: its headline, reasons and re-derivation, then its statements in full and the SELECT's diff."""
    lines: list[str] = []
    for change in plan.changes:
        where = f" ({change.location})" if change.location else ""
        lines.append(f"- **{change.headline()}**{where}")
        lines += [f"  - {reason}" for reason in change.reasons]
        if change.blocked:
            lines.append(f"  - **blocked**: {change.blocked}")
        if change.rederive is not None:
            r = change.rederive
            lines.append(f"  - re-derive {r.target.fqn} into {r.plan.live.fqn}: {r.summary()}")
            lines += [f"  - {kept}" for kept in r.kept]
        if change.statements:
            lines += ["", "```sql", *(f"{sql};" for sql in change.statements), "```"]
        if change.diff:
            lines += ["", "```diff", *change.diff.splitlines()[2:], "```"]
        lines.append("")
    lines += [f"- **finding**: {finding}" for finding in plan.findings]
    lines += [f"- note: {note}" for note in plan.notes]
    return lines
