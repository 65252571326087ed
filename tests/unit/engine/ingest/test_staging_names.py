"""Staging folders: one per load and objects, distinct for names that sanitize alike."""

from __future__ import annotations

import itertools

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.staging_area import staging_dir, staging_root

REFS = [
    ObjectRef(database=d, name=n)
    for d, n in [
        ("my-db", "a-b"),
        ("my-db", "a_b"),
        ("a.b", "c"),
        ("a", "b.c"),
        ("x", "t+y"),
        ("x", "t_y"),
        ("données", "é"),
    ]
]


def test_staging_dirs_are_distinct_per_objects() -> None:
    single = {staging_dir("ingest", [r], "b1") for r in REFS}
    pairs = {staging_dir("backfill", list(p), "b1") for p in itertools.permutations(REFS, 2)}
    assert len(single) == len(REFS) and len(pairs) == len(REFS) * (len(REFS) - 1)
    assert all(d.parent.parent.parent == staging_root() for d in single | pairs)


def test_plain_names_keep_readable_folders() -> None:
    target, source = ObjectRef(database="analytics", name="t"), ObjectRef(database="analytics", name="src")
    assert staging_dir("backfill", [target, source], "b1").relative_to(staging_root()).parts == (
        "backfill",
        "analytics.t+analytics.src",
        "b1",
    )
