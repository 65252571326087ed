"""The chmv_apply job's repair runs: the part of the plan for their objects, never a drop of an MV that owns its rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.lifecycle.apply import LifecycleError
from chmv_assets.engine.lifecycle.plan import Action, Change, LifecyclePlan
from chmv_assets.orchestration.jobs import refuse_inner_table_drops, scoped, without

DDL = """
CREATE TABLE app.src (ts DateTime, n UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE app.daily (day Date, n UInt64) ENGINE = SummingMergeTree ORDER BY day;
CREATE MATERIALIZED VIEW app.daily_mv TO app.daily AS SELECT toDate(ts) AS day, sum(n) AS n FROM app.src GROUP BY day;
CREATE MATERIALIZED VIEW app.inner_mv ENGINE = MergeTree ORDER BY ts AS SELECT ts, n FROM app.src;
"""


def _ref(name: str) -> ObjectRef:
    return ObjectRef(database="app", name=name)


@pytest.fixture
def loaded(tmp_path: Path):
    (tmp_path / "app.sql").write_text(DDL)
    return load(tmp_path)


def test_a_repair_never_drops_an_mv_that_owns_its_rows(loaded) -> None:
    recreate = Change(Action.RECREATE_VIEW, _ref("inner_mv"), "view", 1)
    with pytest.raises(LifecycleError, match=r"would drop app\.inner_mv \(recreate_view\), an MV without TO"):
        refuse_inner_table_drops(LifecyclePlan("ddl", (recreate,)), loaded)
    drop = Change(Action.DROP, _ref("inner_mv"), "view", 1)
    with pytest.raises(LifecycleError):
        refuse_inner_table_drops(LifecyclePlan("ddl", (drop,)), loaded)
    # an MV with TO may be recreated: its rows live in its target
    refuse_inner_table_drops(LifecyclePlan("ddl", (Change(Action.RECREATE_VIEW, _ref("daily_mv"), "view", 1),)), loaded)


def test_a_repair_applies_the_changes_of_its_objects_only(loaded) -> None:
    create = Change(Action.CREATE, _ref("daily_mv"), "view", 1)
    alter = Change(Action.ALTER, _ref("src"), "table", 0)
    plan = LifecyclePlan("ddl", (alter, create))
    assert scoped(plan, []) == plan  # no objects: the whole plan, as chmv apply
    assert scoped(plan, [_ref("daily_mv")]).changes == (create,)
    assert without(plan, {_ref("daily_mv")}).changes == (alter,)  # an MV re-attached is not created again
