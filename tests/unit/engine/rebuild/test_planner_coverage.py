"""The planner decides each partition from coverage: source → clickhouse, lake → spark, neither → refused (or forced)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from chmv_assets.engine.rebuild.coverage import Stats
from chmv_assets.engine.rebuild.planner import Engine, Observations, Swap, plan_rebuild

from support.coverage import DAYS, HOURLY, LATEST, SRC, facts, project, whole, write_files

D = datetime
SEP1, SEP2, SEP3 = (w.start for w in DAYS)  # facts are keyed by the windows' starts; rows' times are wall clocks
HELD = {
    SEP1: Stats(40, D(2026, 9, 1), D(2026, 9, 1, 23)),
    SEP2: Stats(40, D(2026, 9, 2), D(2026, 9, 2, 23)),
    SEP3: Stats(40, D(2026, 9, 3), D(2026, 9, 3, 23)),
}
TARGET = {w.start: Stats(24, w.wall_start, w.wall_start) for w in DAYS}


def observed(f) -> Observations:
    return Observations(live=HOURLY, coverage=f, zone="UTC")


@pytest.fixture
def lake(tmp_path):
    """A landing zone whose d.src files arrived on 2026-09-01 and -02 (not -03)."""
    root = tmp_path / "landing"
    write_files(root, [D(2026, 8, 31, 23), D(2026, 9, 1, 0), D(2026, 9, 1, 13), D(2026, 9, 2, 5)])
    return project(tmp_path, landing=root), root


def steps(plan):
    return [(s.key, s.engine, bool(s.guard)) for s in plan.steps]


def test_the_source_holds_every_partition(tmp_path):
    plan = plan_rebuild(project(tmp_path), HOURLY, DAYS, observed(facts(whole(), HELD, TARGET)))
    assert steps(plan) == [(w.key, Engine.CLICKHOUSE, False) for w in DAYS]
    assert plan.steps[0].reason == "d.src holds 40 rows from 2026-09-01 00:00:00 to 2026-09-01 23:00:00 of the window"
    assert plan.coverage is not None and not plan.refused and not plan.force
    assert "**Coverage** (where the truth of each partition lives, at 2026-11-22 05:00:00)" in plan.describe()


def test_lost_partitions_come_from_the_lake_where_it_holds_them(lake):
    loaded, root = lake
    lost = facts(whole(SEP3), {SEP3: HELD[SEP3]}, TARGET)  # the source lost 09-01 and 09-02
    plan = plan_rebuild(loaded, HOURLY, DAYS, observed(lost), root=root)
    assert steps(plan) == [
        ("2026-09-01", Engine.SPARK, True),
        ("2026-09-02", Engine.SPARK, True),
        ("2026-09-03", Engine.CLICKHOUSE, False),
    ]
    assert plan.steps[0].reason.startswith("d.src holds no rows of the window while the target partition holds 24")
    assert "; the landing zone holds it: " in plan.steps[0].reason
    assert plan.steps[0].relations[0].kind == "lake_then_source" and plan.cutoff_rule


def test_neither_source_nor_lake_is_refused_with_what_to_do(tmp_path):
    lost = facts(whole(SEP3), {SEP3: HELD[SEP3]}, TARGET)
    plan = plan_rebuild(project(tmp_path), HOURLY, DAYS, observed(lost))
    assert steps(plan) == [
        ("2026-09-01", Engine.REFUSED, False),
        ("2026-09-02", Engine.REFUSED, False),
        ("2026-09-03", Engine.CLICKHOUSE, False),
    ]
    refused = plan.refused[0]
    assert (refused.swap, refused.shadow, refused.relations) == (Swap.NONE, None, ())
    reason = refused.reason
    assert reason.startswith(
        "neither the source table nor the landing zone holds it: d.src (it holds data from "
        "2026-09-03 00:00:00 on): source table: none: d.src holds no rows of the window"
    )
    assert "landing zone: unknown: no landing zone is configured." in reason
    assert (
        "The target partition holds 24 rows, which a rebuild from the source would lose. To proceed: deliver the "
        "source's files for [2026-09-01 00:00, 2026-09-02 00:00) to the landing zone (<landing_dir>/d.src;" in reason
    )
    assert (
        "; or leave the partition as it is (it may hold the only copy); or rebuild with force (run config force: "
        "true, chmv rebuild --force) to replace it with what is read from the source." in reason
    )
    message = plan.refusal()
    assert message.splitlines()[0] == "d.hourly: rebuild refused for 2 partitions; nothing was changed"
    assert message.splitlines()[1].startswith("- 2026-09-01: neither the source table")
    text = plan.describe()
    assert "| 2026-09-01 | refused | - | - | none | neither the source table" in text
    assert "**Refused**" in text and message in text


def test_a_lake_that_lacks_the_partition_does_not_save_it(lake):
    loaded, root = lake
    lost = facts(whole(D(2026, 9, 4)), {}, TARGET)
    plan = plan_rebuild(loaded, HOURLY, DAYS, observed(lost), root=root)
    assert [s.engine for s in plan.steps] == [Engine.SPARK, Engine.SPARK, Engine.REFUSED]
    assert "landing zone: none: no landing file of d.src arrived in [2026-09-03 00:00:00" in plan.steps[2].reason
    assert f"({root / 'd.src'};" in plan.steps[2].reason


def test_force_rebuilds_from_the_source_without_the_guard(tmp_path):
    lost = facts(whole(SEP3), {SEP3: HELD[SEP3]}, TARGET)
    plan = plan_rebuild(project(tmp_path), HOURLY, DAYS, observed(lost), force=True)
    assert steps(plan) == [(w.key, Engine.CLICKHOUSE, False) for w in DAYS] and plan.force
    assert plan.steps[0].reason.startswith("forced: d.src holds no rows of the window")
    assert "- force: refusals rebuild from the source table; a shrinking swap is not stopped" in plan.describe()


def test_an_empty_target_partition_has_nothing_to_lose(tmp_path):
    lost = facts(whole(D(2026, 9, 3)), {SEP3: HELD[SEP3]}, {**TARGET, SEP1: Stats()})
    plan = plan_rebuild(project(tmp_path), HOURLY, DAYS, observed(lost))
    assert steps(plan)[:2] == [("2026-09-01", Engine.CLICKHOUSE, True), ("2026-09-02", Engine.REFUSED, False)]
    assert plan.steps[0].reason.startswith("the target partition is empty, nothing to lose; d.src")


def test_unknown_coverage_rebuilds_from_the_source_behind_the_guard(tmp_path):
    plan = plan_rebuild(
        project(tmp_path),
        LATEST,
        [None],
        Observations(live=LATEST, coverage=facts(whole(), target={None: Stats(50)}), zone="UTC"),
    )
    (step,) = plan.steps
    assert (step.engine, step.swap) == (Engine.CLICKHOUSE, Swap.REPLACE_PARTITION)
    assert step.reason.startswith("coverage unknown: an unpartitioned target") and step.guard
    assert "- shrink guard: a partition whose source may not hold it entirely is not swapped" in plan.describe()


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        ("clickhouse", [Engine.REFUSED, Engine.REFUSED, Engine.CLICKHOUSE]),
        ("spark", [Engine.SPARK, Engine.SPARK, Engine.REFUSED]),
    ],
    ids=["clickhouse", "spark"],
)
def test_a_pinned_engine_is_refused_where_it_would_lose_rows(lake, engine, expected):
    loaded, root = lake
    lost = facts(whole(SEP3), {SEP3: HELD[SEP3]}, TARGET)
    plan = plan_rebuild(loaded, HOURLY, DAYS, observed(lost), engine=engine, root=root)
    assert [s.engine for s in plan.steps] == expected
    assert plan.refused[0].reason.startswith(f"engine={engine} asked for, but d.src")
    if engine == "spark":
        assert (
            "which a rebuild from the landing zone would lose. To proceed: rebuild with engine=auto or "
            "engine=clickhouse (the source table holds it)" in plan.refused[0].reason
        )


def test_without_coverage_the_planner_decides_as_before(tmp_path):
    """A repair's plan (Observations without coverage facts) is unchanged: no coverage, no refusal, no guard."""
    plan = plan_rebuild(project(tmp_path), HOURLY, DAYS, Observations(live=HOURLY, oldest=((SRC, SEP3),), zone="UTC"))
    assert plan.coverage is None and steps(plan) == [(w.key, Engine.CLICKHOUSE, False) for w in DAYS]


def test_a_delete_recorded_after_a_window_starts_guards_it_without_moving_or_refusing_it(lake):
    """Issue 25 (6): rows deleted inside every day leave the counts whole; a DELETE the server lists, created after a
    window's start, guards its rebuild from the source (not the lake, not refused); an older one guards nothing."""
    loaded, root = lake
    deleted = replace(facts(whole(), HELD, TARGET), deletes=((SRC, "x", 2, D(2026, 9, 2, 12)), (SRC, "p", 0, None)))
    plan = plan_rebuild(loaded, HOURLY, DAYS, observed(deleted), root=root)
    assert steps(plan) == [(w.key, Engine.CLICKHOUSE, True) for w in DAYS]  # 09-03 too: within a zone's offset
    assert plan.steps[0].guard == (
        "d.src lists 2 DELETE mutation(s), the newest created 2026-09-02 12:00:00: they may have removed rows of the "
        "window"
    )
    assert "; d.src lists 2 DELETE mutation(s)" in plan.coverage.describe()
    older = replace(deleted, deletes=((SRC, "x", 1, D(2026, 8, 30)), (SRC, "p", 3, D(2026, 9, 3, 6))))
    plan = plan_rebuild(loaded, HOURLY, DAYS, observed(older), root=root)
    assert steps(plan) == [(w.key, Engine.CLICKHOUSE, True) for w in DAYS]  # the patch parts are recent
    assert plan.steps[0].guard.startswith("d.src holds 3 patch part(s) (lightweight deletes or updates)")
    old = replace(deleted, deletes=((SRC, "x", 1, D(2026, 8, 30)),))
    assert steps(plan_rebuild(loaded, HOURLY, DAYS, observed(old), root=root)) == [
        (w.key, Engine.CLICKHOUSE, False) for w in DAYS
    ]
    forced = plan_rebuild(loaded, HOURLY, DAYS, observed(deleted), root=root, force=True)
    assert not any(s.guard for s in forced.steps)
