"""Shadow tables: one per (target, partition), distinct for targets whose names sanitize alike."""

from __future__ import annotations

import itertools

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.rebuild_sql import shadow_ref

NAMES = [
    "a-b",
    "a_b",
    "a b",
    "a.b",
    'it\'s "q"',
    "événements",
    "_v_nements",
    ".inner_id.5f3a-11",
    "inner_id_5f3a_11",
    "x_2026",
    "x",
]
PARTITIONS = [None, "2026-09-01", "2026-09-01-13:00", "2026-10-01"]


def test_plain_names_keep_their_shadow() -> None:
    shadow = shadow_ref(ObjectRef(database="shop", name="sales_daily"), "2026-04-01")
    assert shadow == ObjectRef(database="shop", name="_chmv_shadow_sales_daily_20260401")
    assert shadow_ref(ObjectRef(database="shop", name="t"), None).name == "_chmv_shadow_t_all"


def test_shadows_are_distinct_and_stable() -> None:
    pairs = list(itertools.product(NAMES, PARTITIONS))
    shadows = {shadow_ref(ObjectRef(database="d", name=n), p) for n, p in pairs}
    assert len(shadows) == len(pairs)
    assert shadow_ref(ObjectRef(database="d", name="a-b"), "2026-09-01") == shadow_ref(
        ObjectRef(database="d", name="a-b"), "2026-09-01"
    )
    for shadow in shadows:
        assert shadow.database == "d" and all(c == "_" or (c.isascii() and c.isalnum()) for c in shadow.name)
