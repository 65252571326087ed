"""Gate files: one per source, distinct for names that sanitize alike (or share their ``db.name`` text)."""

from __future__ import annotations

from pathlib import Path

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.cutoff import _gate_path

SOURCES = [
    ObjectRef(database=d, name=n)
    for d, n in [
        ("my-db", "a-b"),
        ("my-db", "a_b"),
        ("my_db", "a-b"),
        ("a.b", "c"),
        ("a", "b.c"),
        ("my-db", 'it\'s "q"'),
        ("données", "é t"),
    ]
]


def test_gate_paths_are_distinct_files_in_one_folder() -> None:
    paths = [Path(_gate_path(s)) for s in SOURCES]
    assert len(set(paths)) == len(SOURCES)
    assert len({p.parent for p in paths}) == 1 and all(p.suffix == ".lock" for p in paths)
    assert Path(_gate_path(ObjectRef(database="analytics", name="events"))).name == "analytics.events.lock"
