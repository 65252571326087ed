"""The target assets under writers chmv does not control: a backfill of closed months while threads insert, an open
month deferred with the reason, MVs without TO that keep their source writable."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from dagster import AssetKey, AssetSelection, DagsterEventType, DagsterInstance, materialize

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.partitioning import floor_to_grain
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.rebuild import deferrals
from chmv_assets.orchestration.assets import build_chmv_assets
from resources.clickhouse import ClickHouseResource

from support.spark import copy_engine
from support.writers import BY_KEY, Racer, ThreadWriter, load_rows, month_matches, write_project

pytestmark = [pytest.mark.slow, pytest.mark.worker_seconds(40)]
LATE = (
    "INSERT INTO w.events SELECT toDateTime('2026-01-01 00:00:00') + rand() % 7776000, rand(1) % 200, 3 "
    "FROM numbers(20)"
)
STREAM = "INSERT INTO w.events SELECT now() - number, number % 200, 1 FROM numbers(5)"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("writers_assets")
    loaded = load(write_project(root))
    with ClickHouseResource(dsn=f"chdb://{root / 'chdb'}").get_client() as client:
        apply(client, loaded.project)
        load_rows(client)
    return root, loaded


@pytest.fixture
def engine(base, tmp_path):
    return copy_engine(base[0] / "chdb", tmp_path / "chdb")


def assets_of(loaded) -> dict:
    return {k: a for a in build_chmv_assets(loaded) if hasattr(a, "op") for k in a.keys}


def test_a_backfill_of_closed_months_under_writers_is_exact(base, engine):
    _, loaded = base
    daily = AssetKey(["w", "daily"])
    asset = assets_of(loaded)[daily]
    with engine.get_client() as client:
        client.command("INSERT INTO w.daily SELECT * FROM w.daily WHERE toYYYYMM(day) IN (202601, 202602)")
    path = engine.embedded_path
    with ThreadWriter(path, LATE, 3.0), ThreadWriter(path, STREAM, 0.005), Racer(path) as racer:
        # The target's blocking checks run in the same run, while the writers write (parity compares again what a
        # write raced instead of failing it).
        result = materialize(
            [asset],
            selection=AssetSelection.assets(daily),
            resources={"clickhouse": engine},
            tags={
                "dagster/asset_partition_range_start": "2026-01-01",
                "dagster/asset_partition_range_end": "2026-03-01",
            },
        )
    assert result.success and racer.raced >= 1
    materializations = result.asset_materializations_for_node(asset.node_def.name)
    assert [m.partition for m in materializations] == ["2026-01-01", "2026-02-01", "2026-03-01"]
    assert {m.metadata["chmv/partitions"].value for m in materializations} == {3}  # the run's, on each partition's
    assert {m.metadata["chmv/deferred"].value for m in materializations} == {"none"}
    assert max(m.metadata["chmv/attempts"].value for m in materializations) >= 2  # a read was raced, and read again
    with engine.get_client() as client:
        for month in (202601, 202602, 202603):
            assert month_matches(client, "daily", month)


def test_the_open_month_fails_its_run_saying_when_it_will_be_rebuilt(base, engine):
    _, loaded = base
    daily = AssetKey(["w", "daily"])
    asset = assets_of(loaded)[daily]
    month = f"{floor_to_grain(datetime.utcnow(), 'month'):%Y-%m-%d}"
    result = materialize(
        [asset], selection=[daily], partition_key=month, resources={"clickhouse": engine}, raise_on_error=False
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    message = failure.step_failure_data.error.cause.message
    assert f"1 partition deferred until it closes\n- {month}: open until" in message
    assert "written by others" in message and "recovery requests each partition once it closes" in message
    with engine.get_client() as client:
        assert [(d.target.fqn, d.partition) for d in deferrals.pending(client)] == [("w.daily", month)]


def test_a_range_run_whose_last_partition_is_deferred_does_not_record_it_as_materialized(base, engine):
    """A single-run backfill of the last closed month and the open one (written by others): the closed month is
    rebuilt and materialized, the open one deferred; main recorded both as materialized (the op's one output covers
    the run's range)."""
    _, loaded = base
    daily = AssetKey(["w", "daily"])
    asset = assets_of(loaded)[daily]
    now = floor_to_grain(datetime.utcnow(), "month")
    last = floor_to_grain(now - timedelta(days=1), "month")
    closed, open_ = f"{last:%Y-%m-%d}", f"{now:%Y-%m-%d}"
    with engine.get_client() as client:  # rows of the closed month, doubled in the target
        client.command(
            "INSERT INTO w.events SELECT toDateTime({t:String}) + number * 3600, number % 7, 1 FROM numbers(48)",
            parameters={"t": f"{last:%Y-%m-%d} 00:00:00"},
        )
        client.command(
            "INSERT INTO w.daily SELECT * FROM w.daily WHERE toStartOfMonth(day) = {m:Date}", parameters={"m": closed}
        )
    instance = DagsterInstance.ephemeral()
    result = materialize(
        [asset],
        selection=AssetSelection.assets(daily),
        resources={"clickhouse": engine},
        instance=instance,
        tags={"dagster/asset_partition_range_start": closed, "dagster/asset_partition_range_end": open_},
    )
    assert result.success
    assert instance.get_materialized_partitions(daily) == {closed}
    materializations = result.asset_materializations_for_node(asset.node_def.name)
    assert [m.partition for m in materializations] == [closed]
    assert f"- {open_}: open until" in materializations[0].metadata["chmv/deferred"].value
    observed = [  # the open month, observed as deferred
        e.asset_observation_data.asset_observation
        for e in result.all_events
        if e.event_type == DagsterEventType.ASSET_OBSERVATION
    ]
    assert [o.partition for o in observed] == [open_]
    assert "open until" in observed[0].metadata["chmv/deferred"].value
    with engine.get_client() as client:
        assert month_matches(client, "daily", int(f"{last:%Y%m}"))
        assert [(d.target.fqn, d.partition) for d in deferrals.pending(client)] == [("w.daily", open_)]


def test_mvs_without_to_materialize_and_their_source_stays_writable(base, engine):
    _, loaded = base
    assets = assets_of(loaded)
    by_key, by_month = AssetKey(["w", "by_key"]), AssetKey(["w", "by_month"])
    assert materialize([assets[by_key]], selection=[by_key], resources={"clickhouse": engine}).success
    assert materialize(
        [assets[by_month]], selection=[by_month], partition_key="2026-02-01", resources={"clickhouse": engine}
    ).success
    with engine.get_client() as client:
        client.command(STREAM)  # main: "Target table … .inner_id.<uuid> … doesn't exist"
        assert client.query(BY_KEY[0]).result_rows == client.query(BY_KEY[1]).result_rows
        assert month_matches(client, "by_month", 202602)
