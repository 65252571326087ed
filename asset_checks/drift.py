"""The drift check's verdict: the engine's diff of the server against the DDL directory, as a readable report."""

from __future__ import annotations

from chmv_assets.engine.drift import DriftItem, drift_report, normalize_type

__all__ = ["DriftItem", "drift_markdown", "drift_report", "normalize_type"]


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
