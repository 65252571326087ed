"""The lifecycle plan as data: ordering in the text, JSON shape, exit codes, blocked changes, frozen objects."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

import pytest

from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.lifecycle.plan import (
    EXIT_CHANGES,
    EXIT_NO_CHANGES,
    Action,
    Change,
    LifecyclePlan,
    PartitionEstimate,
    Rederive,
)
from chmv_assets.engine.lifecycle.planner import next_version_ref, old_version_ref, root_sources
from chmv_assets.engine.rebuild.planner import plan_from_source

from support.ddl import ref

AGG = ref("analytics.events_agg")


def test_an_empty_plan_exits_0_and_says_no_changes() -> None:
    plan = LifecyclePlan("ddl", notes=("analytics.x: kept",))
    assert plan.exit_code == EXIT_NO_CHANGES == 0 and not plan.has_changes
    assert plan.describe().startswith("chmv plan of ddl: no changes: the server matches the DDL directory")
    assert json.loads(plan.to_json()) == {
        "ddl_dir": "ddl",
        "status": "no changes",
        "exit_code": 0,
        "summary": "no changes: the server matches the DDL directory",
        "changes": [],
        "notes": ["analytics.x: kept"],
        "findings": [],
    }


def test_a_plan_renders_layer_by_layer_with_its_re_derivations(example) -> None:
    windows = [window_at(datetime(2026, 8, 1), "month"), window_at(datetime(2026, 9, 1), "month")]
    rebuild = plan_from_source(example, AGG, windows, next_version_ref(AGG), zone="UTC")
    rederive = Rederive(
        AGG,
        rebuild,
        (
            PartitionEstimate("2026-08-01", "clickhouse", 1200, "from the source"),
            PartitionEstimate("2026-09-01", "clickhouse", 800, "from the source"),
        ),
    )
    new_version = Change(
        Action.NEW_VERSION,
        AGG,
        "table",
        1,
        reasons=("ORDER BY (a) → (b)",),
        statements=("CREATE TABLE …",),
        next_ref=next_version_ref(AGG),
        rederive=rederive,
    )
    drop = Change(Action.DROP, ref("analytics.stray"), "table", 0, statements=("DROP TABLE …",))
    database = Change(Action.CREATE_DATABASE, ref("shop."), "database", -1, statements=("CREATE DATABASE shop",))
    plan = LifecyclePlan("ddl", (database, new_version, drop), allow_drop=True)
    assert plan.exit_code == EXIT_CHANGES == 3
    text = plan.describe()
    assert text.index("databases") < text.index("layer 1") < text.index("drops (downstream first)")
    assert "+ shop: create database" in text
    assert "± analytics.events_agg: new version built beside as analytics._chmv_next_events_agg" in text
    assert (
        "re-derive analytics.events_agg into analytics._chmv_next_events_agg: 2 partitions "
        "(2026-08-01 … 2026-09-01): clickhouse 2, ~2,000 rows"
    ) in text
    assert plan.summary() == (
        "3 changes (1 create_database, 1 new_version, 1 drop); 1 target re-derived from history (~2,000 rows)"
    )
    data = plan.to_dict()["changes"][1]
    assert data["rederive"]["writes"] == "analytics._chmv_next_events_agg" and data["rederive"]["rows"] == 2000
    assert plan.describe(markdown=True).startswith("**chmv plan** of `ddl`")
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.changes[0].action = Action.DROP  # type: ignore[misc]


def test_blocked_changes_are_counted_and_said() -> None:
    blocked = Change(Action.MANUAL, ref("analytics.src"), "table", 0, blocked="migrate it by hand")
    plan = LifecyclePlan("ddl", (blocked,))
    assert plan.blocked == (blocked,) and plan.summary().endswith("; 1 blocked")
    assert "BLOCKED: migrate it by hand" in plan.describe()


def test_a_refused_change_holds_nothing_back_and_is_said() -> None:
    """An MV of a trigger loop: refused alone (not one of the changes that block the apply), printed as such."""
    refused = Change(Action.REFUSED, ref("d.x_to_y"), "view", 1, reasons=("missing",), blocked="cycle in the MV graph")
    create = Change(Action.CREATE, ref("d.ok"), "table", 0, statements=("CREATE TABLE d.ok …",))
    plan = LifecyclePlan("ddl", (create, refused))
    assert plan.blocked == () and plan.refused == (refused,) and plan.exit_code == EXIT_CHANGES
    assert plan.summary() == "2 changes (1 create, 1 refused); 1 refused (a trigger loop; the rest is applied)"
    text = plan.describe()
    assert "✗ d.x_to_y: refused, the rest is applied (view of a trigger loop)" in text
    assert "REFUSED: cycle in the MV graph" in text and "BLOCKED" not in text
    assert json.loads(plan.to_json())["changes"][1]["action"] == "refused"


def test_names_beside_a_target_and_the_sources_that_reach_it(example) -> None:
    assert (
        next_version_ref(ref("analytics.a-b")).name
        == next_version_ref(ref("analytics.a-b")).name
        != next_version_ref(ref("analytics.a_b")).name
    )
    assert old_version_ref(AGG) == ref("analytics._chmv_old_events_agg")
    assert root_sources(example, ref("analytics.events_weekly")) == {
        ref("analytics.raw_events"),
        ref("analytics.events_agg"),
        ref("analytics.events_daily"),
    }


def test_the_part_of_a_plan_touching_some_objects_is_what_fixes_their_drift(example) -> None:
    daily, weekly, mv = ref("analytics.events_daily"), ref("analytics.events_weekly"), ref("analytics.mv_events_daily")
    rebuild = plan_from_source(example, weekly, [window_at(datetime(2026, 8, 1), "month")], weekly, zone="UTC")
    changes = (
        Change(Action.CREATE_DATABASE, ref("analytics."), "database", -1, statements=("CREATE DATABASE analytics",)),
        Change(Action.CREATE_DATABASE, ref("shop."), "database", -1, statements=("CREATE DATABASE shop",)),
        Change(Action.MODIFY_QUERY, mv, "view", 2, statements=("ALTER TABLE mv MODIFY QUERY …",)),
        Change(Action.ALTER, ref("analytics.audit_log"), "table", 1, statements=("ALTER TABLE audit_log …",)),
        Change(Action.REDERIVE, weekly, "table", 3, rederive=Rederive(weekly, rebuild, ())),
        Change(
            Action.NEW_VERSION,
            AGG,
            "table",
            1,
            next_ref=next_version_ref(AGG),
            views=((ref("analytics.mv_events_agg"), next_version_ref(ref("analytics.mv_events_agg"))),),
        ),
    )
    plan = LifecyclePlan(
        "ddl", changes, notes=(f"{daily.fqn}: column x is not in the DDL; kept", "analytics.other: kept")
    )
    part = plan.touching([daily, mv, ref("analytics.events_agg_source")])
    assert [c.ref for c in part.changes] == [ref("analytics."), mv]
    assert part.notes == (f"{daily.fqn}: column x is not in the DDL; kept",) and part.ddl_dir == "ddl"
    assert [c.ref for c in plan.touching([weekly]).changes] == [ref("analytics."), weekly]  # its re-derivation
    assert [c.ref for c in plan.touching([ref("analytics.mv_events_agg")]).changes][-1] == AGG  # fed through it
    assert plan.touching([ref("nowhere.x")]).changes == ()


def test_the_deploy_order_makes_what_an_object_names_first(tmp_path) -> None:
    """``chmv load-demo``'s deploy: a ``Dictionary(d)`` table after its dictionary; MVs downstream first, but one
    reading another MV's inner table after it."""
    from chmv_assets.engine.lifecycle.deploy import deployment_steps

    from support.ddl import load_ddl

    loaded = load_ddl(
        tmp_path,
        """
        CREATE TABLE o.codes (code String, name String) ENGINE = MergeTree ORDER BY code;
        CREATE DICTIONARY o.code_names (code String, name String) PRIMARY KEY code
            SOURCE(CLICKHOUSE(TABLE 'codes' DB 'o')) LIFETIME(0) LAYOUT(COMPLEX_KEY_HASHED());
        CREATE TABLE o.code_table (code String, name String) ENGINE = Dictionary(o.code_names);
        CREATE TABLE o.src (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE MATERIALIZED VIEW o.first ENGINE = MergeTree ORDER BY x AS SELECT x FROM o.src;
        CREATE MATERIALIZED VIEW o.second ENGINE = MergeTree ORDER BY x AS SELECT x FROM o.first;
        CREATE TABLE o.out (x UInt64) ENGINE = MergeTree ORDER BY x;
        CREATE MATERIALIZED VIEW o.third TO o.out AS SELECT x FROM o.second;
        """,
    )
    names = [step.name for step in deployment_steps(loaded.project)]
    assert names.index("o.code_names") < names.index("o.code_table")
    assert names.index("o.first") < names.index("o.second") < names.index("o.third")
