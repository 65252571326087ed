"""Helpers of the unit tests: parse a DDL text written into a directory, as the loader reads a real one."""

from __future__ import annotations

import textwrap
from pathlib import Path

from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import ObjectRef


def ref(fqn: str) -> ObjectRef:
    """``ObjectRef`` of ``db.name`` (the name may contain dots after the first one)."""
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name)


def load_ddl(root: Path, ddl: str | dict[str, str], *, toml: str = "") -> LoadedProject:
    """Write ``ddl`` (one file's text, or file name to text) and an optional ``chmv.toml`` into ``root``; load it."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in ({"a.sql": ddl} if isinstance(ddl, str) else ddl).items():
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")
    if toml:
        (root / "chmv.toml").write_text(textwrap.dedent(toml), encoding="utf-8")
    return load(root)
