"""The rebuild planner is pure given Observations: engines, relations, shadows, swaps, gates, chains, errors."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import PartitionScheme, partition_scheme, window_at
from chmv_assets.engine.rebuild.coverage import Facts, Stats
from chmv_assets.engine.rebuild.planner import (
    Engine,
    Observations,
    PartitionStep,
    RaceRules,
    RebuildPlan,
    Swap,
    TriggerRelation,
    downstream_targets,
    plan_from_source,
    plan_rebuild,
    staged_per_window,
    windows_covering,
)
from chmv_assets.errors import ChmvError
from chmv_assets.sql.rebuild_sql import shadow_ref, source_range_predicate

from support.ddl import load_ddl, ref
from support.spark import with_landing

D = datetime
STATS, REQUESTS = ref("analytics.hourly_endpoint_stats"), ref("analytics.api_requests")
DAYS = [window_at(D(2026, 9, 1), "day"), window_at(D(2026, 9, 2), "day"), window_at(D(2026, 9, 3), "day")]


def write_landing(root: Path, source: str, arrivals: list[datetime]) -> None:
    """One small Parquet file per arrival hour: ``<root>/<db.table>/date=YYYY-MM-DD/hour=HH.parquet``."""
    for hour in arrivals:
        folder = root / source / f"date={hour:%Y-%m-%d}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"timestamp": [hour]}), folder / f"hour={hour:%H}.parquet")


@pytest.fixture
def lake(tmp_path, example) -> tuple[LoadedProject, Path]:
    """The example project with a landing zone holding api_requests files that arrived on 2026-09-01 and -02."""
    root = tmp_path / "landing"
    write_landing(root, "analytics.api_requests", [D(2026, 9, 1, 0), D(2026, 9, 1, 13), D(2026, 9, 2, 5)])
    return with_landing(example, root), root


def observed(live: ObjectRef = STATS, oldest: datetime | None = None, source: ObjectRef = REQUESTS) -> Observations:
    return Observations(live=live, oldest=((source, oldest),), zone="UTC")


def test_clickhouse_engine_reads_each_window_of_the_source(example):
    plan = plan_rebuild(
        example, STATS, DAYS[:2], Observations(live=STATS, zone="UTC"), engine="clickhouse", run="0a1b2c3d"
    )
    view = example.project.views_into(STATS)[0]
    scheme = example.partitioning(STATS)
    assert scheme.scheme == PartitionScheme(grain="day", column="hour")
    assert plan == RebuildPlan(
        target=STATS,
        live=STATS,
        scheme=scheme,
        steps=tuple(
            PartitionStep(
                w,
                Engine.CLICKHOUSE,
                Swap.REPLACE_PARTITION,
                shadow_ref(STATS, w.key, "0a1b2c3d"),
                (
                    TriggerRelation(
                        REQUESTS, "source_window", source_range_predicate(view, example.project, scheme, w, zone="UTC")
                    ),
                ),
                "engine=clickhouse asked for",
            )
            for w in DAYS[:2]
        ),
        gates=(REQUESTS,),
        downstream=(),
        landing_root=None,
        cutoff_rule="",
        writers=(example.writers(REQUESTS),),
        run="0a1b2c3d",
        zone="UTC",
    )
    assert plan.steps[0].shadow.name == "_chmv_shadow_hourly_endpoint_stats_20260901_r0a1b2c3d"
    assert plan.steps[0].relations[0].predicate == (
        "`timestamp` >= toDateTime('2026-09-01 00:00:00', 'UTC') AND `timestamp` < toDateTime('2026-09-02 00:00:00', 'UTC') "
        "+ INTERVAL 1 HOUR"
    )


def test_auto_without_landing_zone_is_clickhouse(example):
    plan = plan_rebuild(example, STATS, DAYS, Observations(live=STATS, zone="UTC"), engine="auto", root=None)
    assert [(s.engine, s.reason, s.guard) for s in plan.steps] == [
        (
            Engine.CLICKHOUSE,
            "coverage unknown: analytics.api_requests was not observed; landing zone: no landing zone for its triggers",
            None,
        )
    ] * 3
    assert plan.cutoff_rule == ""


@pytest.mark.parametrize(
    ("oldest", "expected"),
    [
        (D(2026, 8, 1), [Engine.CLICKHOUSE, Engine.CLICKHOUSE, Engine.CLICKHOUSE]),
        (D(2026, 9, 1, 0, 0), [Engine.CLICKHOUSE, Engine.CLICKHOUSE, Engine.CLICKHOUSE]),
        (D(2026, 9, 1, 10, 30), [Engine.SPARK, Engine.CLICKHOUSE, Engine.CLICKHOUSE]),
        (D(2026, 9, 3, 2), [Engine.SPARK, Engine.SPARK, Engine.CLICKHOUSE]),
        (None, [Engine.SPARK, Engine.SPARK, Engine.SPARK]),
    ],
    ids=[
        "source-holds-everything",
        "source-starts-at-the-first-window",
        "source-starts-inside-the-first-window",
        "source-starts-after-two-windows-lake-has-them",
        "empty-source",
    ],
)
def test_auto_picks_spark_where_the_source_no_longer_holds_the_window(lake, oldest, expected):
    loaded, root = lake
    plan = plan_rebuild(loaded, STATS, DAYS, observed(oldest=oldest), engine="auto", root=root)
    assert [s.engine for s in plan.steps] == expected
    assert plan.landing_root == root


def test_engines_decided_before_are_pinned_not_chosen_again(lake):
    """A recovery run's plan takes the engines the sensor's planner chose (its verdict) per partition; a partition
    the verdict does not name is chosen as usual."""
    loaded, root = lake
    decided = {DAYS[0].key: "clickhouse", DAYS[1].key: "spark"}  # auto would choose spark, spark, clickhouse
    plan = plan_rebuild(loaded, STATS, DAYS, observed(oldest=D(2026, 9, 3, 2)), root=root, engines=decided)
    assert [s.engine for s in plan.steps] == [Engine.CLICKHOUSE, Engine.SPARK, Engine.CLICKHOUSE]
    assert [s.reason.startswith("decided by the recovery sensor") for s in plan.steps] == [True, True, False]


def test_auto_stays_on_clickhouse_when_the_lake_has_nothing_earlier(lake):
    """The source starts inside 2026-09-03 but the lake has no file that arrived between the window and then."""
    loaded, root = lake
    plan = plan_rebuild(loaded, STATS, DAYS, observed(oldest=D(2026, 9, 3, 4)), engine="auto", root=root)
    assert [s.engine for s in plan.steps] == [Engine.SPARK, Engine.SPARK, Engine.CLICKHOUSE]
    assert plan.steps[2].reason == (
        "analytics.api_requests holds rows from 2026-09-03 04:00:00; the landing zone has none earlier"
    )
    assert plan.steps[0].reason == (
        "analytics.api_requests holds rows from 2026-09-03 04:00:00 only; the landing zone has earlier ones; "
        f"the landing zone holds it: analytics.api_requests is loaded from the landing zone ({root / REQUESTS.fqn})"
    )
    assert plan.coverage is None and not any(s.guard for s in plan.steps)  # estimated: nothing at stake is known


def test_spark_steps_read_lake_then_source_staged_per_window(lake):
    loaded, root = lake
    plan = plan_rebuild(loaded, STATS, DAYS, observed(), engine="spark", root=root)
    assert [(s.engine, s.swap, s.reason) for s in plan.steps] == [
        (Engine.SPARK, Swap.REPLACE_PARTITION, "engine=spark asked for")
    ] * 3
    view, scheme = loaded.project.views_into(STATS)[0], plan.scheme
    assert [s.relations for s in plan.steps] == [
        (
            TriggerRelation(
                REQUESTS,
                "lake_then_source",
                source_range_predicate(view, loaded.project, scheme, w, zone="UTC"),  # the rows its read covers
                staged_per_window=True,
            ),
        )
        for w in DAYS
    ]
    assert plan.steps_by(Engine.SPARK) == plan.steps and plan.steps_by(Engine.CLICKHOUSE) == ()
    assert plan.cutoff_rule == (
        "per trigger, its ingestion watermark - 60 min, read under its gate when the Spark steps start"
    )
    assert plan.gates == (REQUESTS,)


def test_spark_without_landing_zone_is_a_clear_error(example, tmp_path):
    with pytest.raises(
        ChmvError,
        match=r"analytics\.hourly_endpoint_stats: the spark engine needs a landing zone "
        r"and \[ingestion\.time_columns\] for analytics\.api_requests; .*"
        r"engine=clickhouse",
    ):
        plan_rebuild(example, STATS, DAYS, Observations(live=STATS, zone="UTC"), engine="spark", root=None)


def test_spark_for_a_chain_target_whose_trigger_the_lake_does_not_cover(lake):
    loaded, root = lake
    daily = ref("analytics.events_daily")
    with pytest.raises(
        ChmvError, match=r"analytics\.events_daily: the spark engine needs .* for analytics\.events_agg"
    ):
        plan_rebuild(loaded, daily, DAYS, Observations(live=daily, zone="UTC"), engine="spark", root=root)


def test_unpartitioned_target_is_one_partition_swap_of_the_whole_table(example):
    target, source = ref("analytics.entity_latest"), ref("analytics.raw_webhooks")
    plan = plan_rebuild(example, target, DAYS, Observations(live=target, zone="UTC"), engine="clickhouse", run="feed")
    assert plan.scheme.scheme == PartitionScheme(grain=None)
    assert plan.steps == (
        PartitionStep(
            None,
            Engine.CLICKHOUSE,
            Swap.REPLACE_PARTITION,
            shadow_ref(target, None, "feed"),
            (TriggerRelation(source, "source"),),
            "engine=clickhouse asked for",
        ),
    )
    assert plan.steps[0].key is None


def test_unpartitioned_target_from_the_lake_when_its_source_is_empty(example, tmp_path):
    root = tmp_path / "landing"
    write_landing(root, "analytics.raw_webhooks", [D(2026, 9, 1, 3)])
    target, source = ref("analytics.entity_latest"), ref("analytics.raw_webhooks")
    plan = plan_rebuild(with_landing(example, root), target, [None], observed(target, None, source), root=root)
    assert [(s.window, s.engine, s.swap) for s in plan.steps] == [(None, Engine.SPARK, Swap.REPLACE_PARTITION)]
    assert plan.steps[0].relations == (TriggerRelation(source, "lake_then_source", staged_per_window=False),)


def test_shadows_are_named_after_the_physical_table(example):
    inner = ObjectRef(database="analytics", name=".inner_id.0a1b")
    plan = plan_rebuild(example, STATS, DAYS, Observations(live=inner, zone="UTC"), engine="clickhouse")
    assert plan.live == inner and plan.target == STATS
    assert [s.shadow for s in plan.steps] == [shadow_ref(inner, w.key, plan.run) for w in DAYS]
    assert len({s.shadow for s in plan.steps}) == 3


def test_each_run_names_its_own_shadows(example):
    """Two runs of one partition never write into one shadow (both would swap its rows in: the partition doubled)."""
    first, second = (
        plan_rebuild(example, STATS, DAYS[:1], Observations(live=STATS, zone="UTC"), engine="clickhouse")
        for _ in range(2)
    )
    assert first.run != second.run and first.steps[0].shadow != second.steps[0].shadow


REFRESHABLE = """
CREATE TABLE d.src (ts DateTime, k String) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE d.counts (day Date, k String, c UInt64) ENGINE = MergeTree PARTITION BY day ORDER BY k;
CREATE MATERIALIZED VIEW d.counts_mv REFRESH EVERY 1 HOUR TO d.counts AS
SELECT toDate(ts) AS day, k, count() AS c FROM d.src GROUP BY day, k;
"""


def test_refreshable_view_is_one_refresh_step(tmp_path):
    loaded = load_ddl(tmp_path, REFRESHABLE, toml='default_database = "d"')
    target = ref("d.counts")
    plan = plan_rebuild(loaded, target, DAYS, Observations(live=target, zone="UTC"), engine="clickhouse")
    assert plan.steps == (
        PartitionStep(None, Engine.REFRESH, Swap.REFRESH, None, (), "refreshable MV: the server recomputes it"),
    )
    assert plan.gates == ()
    assert plan.scheme.scheme == PartitionScheme(grain="day", column="day")


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("analytics.raw_events", ("analytics.events_agg", "analytics.events_daily", "analytics.events_weekly")),
        ("analytics.events_agg", ("analytics.events_daily", "analytics.events_weekly")),
        ("analytics.events_daily", ("analytics.events_weekly",)),
        ("analytics.events_weekly", ()),
        ("analytics.error_events", ()),
    ],
    ids=["source-of-the-chain", "first-hop", "second-hop", "end-of-chain", "not-a-chain"],
)
def test_downstream_targets(example, target, expected):
    assert tuple(r.fqn for r in downstream_targets(example, ref(target))) == expected


def test_a_chain_target_plan_names_its_downstream(example):
    target = ref("analytics.events_agg")
    months = [window_at(D(2026, 9, 1), "month")]
    plan = plan_rebuild(example, target, months, Observations(live=target, zone="UTC"), engine="clickhouse")
    assert plan.downstream == (ref("analytics.events_daily"), ref("analytics.events_weekly"))
    assert plan.gates == (ref("analytics.raw_events"),)


def with_time_column(loaded: LoadedProject, fqn: str, column: str) -> LoadedProject:
    ingestion = loaded.config.ingestion
    columns = {**ingestion.time_columns, fqn: column}
    ingestion = ingestion.model_copy(update={"time_columns": columns})
    return LoadedProject(config=loaded.config.model_copy(update={"ingestion": ingestion}), project=loaded.project)


@pytest.mark.parametrize(
    ("target", "source", "grain", "expected"),
    [
        ("analytics.hourly_endpoint_stats", "analytics.api_requests", "day", True),
        ("analytics.requests_enriched", "analytics.raw_requests", "month", True),
        ("analytics.counter_daily", "analytics.counter", "month", True),
        ("analytics.events_agg", "analytics.raw_events", "month", True),
        ("analytics.events_weekly", "analytics.events_daily", "month", False),
    ],
    ids=[
        "hour-truncation-into-days",
        "bare-column",
        "day-truncation-into-months",
        "toDate-into-months",
        "week-truncation-spans-partitions",
    ],
)
def test_staged_per_window(example, target, source, grain, expected):
    loaded = with_time_column(example, "analytics.events_daily", "event_date")
    windows = [window_at(D(2026, 9, 1), grain)]
    assert staged_per_window(loaded, ref(target), ref(source), windows) is expected


def test_staged_per_window_not_when_the_partition_column_is_another_time_column(example):
    loaded = with_time_column(example, "analytics.api_requests", "status_code")
    assert staged_per_window(loaded, STATS, REQUESTS, DAYS) is False


def test_staged_per_window_not_for_a_whole_table(example):
    assert staged_per_window(example, STATS, REQUESTS, [None]) is False
    assert staged_per_window(example, STATS, REQUESTS, []) is False
    assert staged_per_window(example, ref("analytics.entity_latest"), ref("analytics.raw_webhooks"), DAYS) is False


def test_describe_lists_every_partition_engine_and_shadow(lake):
    loaded, root = lake
    plan = plan_rebuild(loaded, STATS, DAYS, observed(oldest=D(2026, 9, 2, 12)), engine="auto", root=root)
    text = plan.describe()
    assert str(plan) == text
    assert text.startswith(
        "**Rebuild plan of `analytics.hourly_endpoint_stats`** (physical table `analytics.hourly_endpoint_stats`)"
    )
    assert "- partitioning: day on `hour`" in text
    assert "- gates held: `analytics.api_requests`" in text
    assert "- cutoff: per trigger, its ingestion watermark - 60 min" in text
    rows = [line for line in text.splitlines() if line.startswith("| 2026-")]
    assert len(rows) == 3
    for row, step, engine in zip(rows, plan.steps, ["spark", "spark", "clickhouse"], strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:2] == [step.key, engine]
        assert cells[3:5] == [f"`{step.shadow.fqn}`", "replace_partition"]
        assert cells[5] == step.reason
    assert "landing rows <= cutoff (staged by Spark, per partition)" in rows[0]
    assert "analytics.api_requests WHERE `timestamp` >= toDateTime('2026-09-03 00:00:00', 'UTC')" in rows[2]


def test_describe_of_an_unpartitioned_plan(example):
    target = ref("analytics.entity_latest")
    plan = plan_rebuild(example, target, [None], Observations(live=target, zone="UTC"), engine="clickhouse")
    text = plan.describe()
    assert "- partitioning: unpartitioned" in text
    assert "downstream" not in text and "cutoff" not in text
    shadow = plan.steps[0].shadow.fqn
    assert text.splitlines()[-1] == (
        f"| (all) | clickhouse | analytics.raw_webhooks (whole table) | `{shadow}` | "
        "replace_partition | engine=clickhouse asked for |"
    )


def test_describe_names_the_downstream_targets(example):
    target = ref("analytics.events_daily")
    text = str(plan_rebuild(example, target, DAYS[:1], Observations(live=target, zone="UTC"), engine="clickhouse"))
    assert "- downstream targets reading it: `analytics.events_weekly`" in text


def test_plans_are_frozen_hashable_and_equal_when_decided_alike(lake):
    loaded, root = lake
    first = plan_rebuild(loaded, STATS, DAYS, observed(oldest=D(2026, 9, 2)), engine="auto", root=root, run="1")
    again = plan_rebuild(loaded, STATS, DAYS, observed(oldest=D(2026, 9, 2)), engine="auto", root=root, run="1")
    assert first == again and hash(first) == hash(again)
    assert len({first, again, first.steps[0], first.steps[0].relations[0]}) == 3
    for obj, attribute in [
        (first, "steps"),
        (first.steps[0], "engine"),
        (first.steps[0].relations[0], "kind"),
        (Observations(live=STATS, zone="UTC"), "live"),
    ]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, attribute, None)
    assert "PartitionStep(window=PartitionWindow(key='2026-09-01'" in repr(first.steps[0])


def test_plan_from_source_is_all_clickhouse(example):
    plan = plan_from_source(example, STATS, DAYS, STATS, zone="UTC")
    asked = plan_rebuild(example, STATS, DAYS, Observations(live=STATS, zone="UTC"), engine="clickhouse", run=plan.run)
    assert plan.steps == tuple(dataclasses.replace(s, reason="from the source table") for s in asked.steps)
    assert [s.engine for s in plan.steps] == [Engine.CLICKHOUSE] * 3


def test_a_table_no_view_writes_is_an_error(example):
    with pytest.raises(ChmvError, match=r"analytics\.api_requests is not written by any materialized view"):
        plan_rebuild(example, REQUESTS, DAYS, Observations(live=REQUESTS, zone="UTC"), engine="clickhouse")


@pytest.mark.parametrize(
    ("target", "since", "until", "expected"),
    [
        ("analytics.events_daily", D(2026, 9, 1, 10), D(2026, 9, 2, 3), ["2026-09-01", "2026-09-02"]),
        ("analytics.events_agg", D(2026, 9, 30, 23), D(2026, 10, 1, 1), ["2026-09-01", "2026-10-01"]),
        ("analytics.events_daily", D(2026, 7, 1), D(2026, 8, 1, 5), ["2026-08-01"]),
        ("analytics.entity_latest", D(2026, 9, 1), D(2026, 9, 2), [None]),
    ],
    ids=["days", "months", "not-before-partition-start", "unpartitioned"],
)
def test_windows_covering(example, target, since, until, expected):
    windows = windows_covering(example, ref(target), since, until)
    assert [w.key if w else None for w in windows] == expected


def test_scheme_in_the_plan_is_the_targets(example):
    target = ref("analytics.counter_daily")
    plan = plan_rebuild(
        example, target, [window_at(D(2026, 9, 1), "month")], Observations(live=target, zone="UTC"), engine="clickhouse"
    )
    assert plan.scheme is example.partitioning(target)  # the loaded project's one object
    assert plan.scheme.scheme == partition_scheme(example.project.table(target), example.project.views_into(target))


def test_each_step_carries_its_swap_partition_rows_and_shadow_statement(example):
    """What the executor runs is read from the plan: the partition its swap replaces, the predicate of its rows, the
    statement creating its shadow; the race rules of ``[rebuild]``; all printed."""
    plan = plan_rebuild(
        example, STATS, DAYS[:1], Observations(live=STATS, zone="UTC"), engine="clickhouse", run="0a1b2c3d"
    )
    (step,) = plan.steps
    assert step.partition == "tuple(toDate((toDateTime('2026-09-01 00:00:00', 'UTC'))))"
    assert step.partition_filter == "(toDate(hour)) = (toDate((toDateTime('2026-09-01 00:00:00', 'UTC'))))"
    assert step.create_shadow == (
        "CREATE TABLE `analytics`.`_chmv_shadow_hourly_endpoint_stats_20260901_r0a1b2c3d` "
        "AS `analytics`.`hourly_endpoint_stats`"
    )
    assert plan.races == RaceRules(4, 1.0, 60.0, example.config.pacing)
    text = plan.describe()
    assert f"- shadow: `` {step.create_shadow} ``" in text
    assert "- races: a read that writes raced is read again (not swapped, or swapped and read again): up to 4 " in text


BY_TENANT = """
CREATE TABLE d.src (ts DateTime, tenant String) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE d.by_tenant (tenant String, n UInt64) ENGINE = SummingMergeTree PARTITION BY tenant ORDER BY tenant;
CREATE MATERIALIZED VIEW d.by_tenant_mv TO d.by_tenant AS SELECT tenant, count() AS n FROM d.src GROUP BY tenant;
"""


def test_a_whole_partitioned_table_swaps_each_partition_and_an_unpartitioned_one_tuple(example, tmp_path):
    by_tenant = ref("d.by_tenant")
    loaded = load_ddl(tmp_path, BY_TENANT, toml='default_database = "d"')
    (step,) = plan_rebuild(
        loaded, by_tenant, [None], Observations(live=by_tenant, zone="UTC"), engine="clickhouse"
    ).steps
    assert (step.swap, step.partition, step.partition_filter) == (Swap.REPLACE_EACH_PARTITION, None, None)
    one_read = plan_rebuild(
        loaded, by_tenant, [None], Observations(live=by_tenant, zone="UTC"), one_read=True, run="ab"
    )
    assert one_read.steps[0].shadow == shadow_ref(by_tenant, None, "ab")  # a whole table is read alone
    latest = ref("analytics.entity_latest")
    (step,) = plan_rebuild(example, latest, [None], Observations(live=latest, zone="UTC"), engine="clickhouse").steps
    assert (step.swap, step.partition, step.partition_filter) == (Swap.REPLACE_PARTITION, "tuple()", None)


def test_a_forced_plan_guards_nothing_even_where_the_target_partition_is_empty(tmp_path):
    """The source lost the window and the target partition is empty: rebuilt from the source behind the shrink
    guard, unless forced (the planner's guard is final: the executor reads it as it is)."""
    hourly, first = ref("d.hourly"), window_at(D(2026, 9, 1), "day")
    loaded = load_ddl(tmp_path, HOURLY_DDL, toml='default_database = "d"')
    lost = Facts(
        now=D(2026, 11, 22),
        tables=((ref("d.src"), Stats(10, D(2026, 9, 3), D(2026, 9, 3, 5))),),
        target_windows=((first.start, Stats()),),
        mapped=(ref("d.src"),),
    )
    observed = Observations(live=hourly, coverage=lost, zone="UTC")
    (step,) = plan_rebuild(loaded, hourly, [first], observed).steps
    assert step.engine == Engine.CLICKHOUSE and step.reason.startswith("the target partition is empty") and step.guard
    (forced,) = plan_rebuild(loaded, hourly, [first], observed, force=True).steps
    assert forced.engine == Engine.CLICKHOUSE and forced.guard is None


HOURLY_DDL = """
CREATE TABLE d.src (ts DateTime, k String) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY (k, ts);
CREATE TABLE d.hourly (hour DateTime, k String, c UInt64) ENGINE = SummingMergeTree
PARTITION BY toDate(hour) ORDER BY (k, hour);
CREATE MATERIALIZED VIEW d.hourly_mv TO d.hourly AS
SELECT toStartOfHour(ts) AS hour, k, count() AS c FROM d.src GROUP BY hour, k;
"""


def test_one_read_plans_share_a_shadow_and_say_so(example):
    """``chmv apply``'s plans read the partitions of time windows together: the steps share the run's ``range``
    shadow (the executor reads the steps sharing a shadow at once); other plans give each partition its own."""
    shared = plan_rebuild(
        example, STATS, DAYS, Observations(live=STATS, zone="UTC"), engine="clickhouse", one_read=True, run="ab"
    )
    assert {s.shadow for s in shared.steps} == {shadow_ref(STATS, "range", "ab")}
    assert "- one read: the partitions sharing a shadow are read together" in shared.describe()
    alone = plan_rebuild(example, STATS, DAYS, Observations(live=STATS, zone="UTC"), engine="clickhouse", run="ab")
    assert [s.shadow for s in alone.steps] == [shadow_ref(STATS, w.key, "ab") for w in DAYS]
    assert "- one read" not in alone.describe()
