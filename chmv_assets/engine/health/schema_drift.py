"""The drift check's verdict: the server against the DDL directory, as a readable report.

The diff itself is :func:`chmv_assets.engine.drift.drift_report` (what differs between the live objects and the
repo); the part of the lifecycle plan that fixes a drifting target is
:func:`chmv_assets.engine.lifecycle.drift_fix.drift_fix_markdown`.
"""

from __future__ import annotations

from chmv_assets.engine.drift import DriftItem


def drift_markdown(items: list[DriftItem]) -> str:
    """A table of the differences, and a unified diff per changed SELECT."""
    if not items:
        return "no drift: the server matches the DDL directory"
    lines = ["| object | drift | repo | live |", "|---|---|---|---|"]
    lines += [f"| {i.object} | {i.kind} | {i.repo.replace('|', '/')} | {i.live.replace('|', '/')} |" for i in items]
    for item in items:
        if item.diff:
            lines += ["", f"**{item.object}** SELECT (live → repo):", "```diff", item.diff, "```"]
    return "\n".join(lines)
