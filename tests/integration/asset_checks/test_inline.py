"""Blocking checks live on the target ops: each selected check is evaluated exactly once, right after its asset.

The chain ``chain.src -> t1 -> t2`` puts t1 (its trigger has a landing zone: Spark-capable) and t2 (reads
t1: ClickHouse only) in two ops. Before, the parity checks sat in one multi-check op that Dagster split
in two subsets for such a chain; which subset evaluated which check depended on each process's hash
seed, so a multi-process run could evaluate t2's check twice and t1's not at all.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from dagster import (
    AssetCheckKey,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    build_reconstructable_job,
    execute_job,
    materialize,
)

from asset_checks.names import DRIFT, HEALTH, LINT, PARITY, PARTS
from chmv_assets.ddl.loader import load
from chmv_assets.orchestration.assets import build_chmv_assets, target_groups
from chmv_assets.orchestration.translator import ChmvTranslator

from support.chain_split import KEYS
from support.engines import make_engine
from support.paths import TESTS

pytestmark = pytest.mark.worker_seconds(30)

CHAIN_DDL = """
CREATE DATABASE IF NOT EXISTS chain ENGINE = Atomic;
CREATE TABLE chain.src (ts DateTime, k UInt32, v UInt32) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY (k, ts);
CREATE TABLE chain.t1 (day Date, k UInt32, n UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMMDD(day) ORDER BY (k, day);
CREATE MATERIALIZED VIEW chain.t1_mv TO chain.t1 AS SELECT toDate(ts) AS day, k, count() AS n FROM chain.src GROUP BY day, k;
CREATE TABLE chain.t2 (day Date, n UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMMDD(day) ORDER BY day;
CREATE MATERIALIZED VIEW chain.t2_mv TO chain.t2 AS SELECT day, sum(n) AS n FROM chain.t1 GROUP BY day;
"""
CHAIN_TOML = """
default_database = "chain"
partition_start = "2026-08-01"
[ingestion]
landing_dir = "landing"
[ingestion.time_columns]
"chain.src" = "ts"
"""
DAYS = ["2026-08-01", "2026-08-02", "2026-08-03"]


@pytest.fixture
def chain(tmp_path: Path):
    ddl = tmp_path / "ddl"
    (ddl / "landing").mkdir(parents=True)
    (ddl / "chain.sql").write_text(CHAIN_DDL)
    (ddl / "chmv.toml").write_text(CHAIN_TOML)
    loaded = load(ddl)
    engine = make_engine(tmp_path / "chdb", loaded)
    with engine.get_client() as client:
        client.command(
            "INSERT INTO chain.src SELECT toDateTime('2026-08-01 00:00:00') + number * 97, number % 7, 1 "
            "FROM numbers(3000)"
        )
    return ddl, loaded, engine


def test_the_chain_targets_sit_in_two_ops_without_a_cycle(chain) -> None:
    _ddl, loaded, _engine = chain
    groups = target_groups(loaded, ChmvTranslator())
    by_target = {ref.name: (spark, i) for i, (spark, refs) in enumerate(groups) for ref in refs}
    assert by_target["t1"][0] and not by_target["t2"][0]
    assert by_target["t1"][1] != by_target["t2"][1]


@pytest.mark.slow
def test_a_range_run_evaluates_each_check_once_in_a_multi_process_run(chain, tmp_path: Path, monkeypatch) -> None:
    ddl, _loaded, engine = chain
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # each step process hashes with its own seed
    (tmp_path / "dagster_home").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "dagster_home"))
    job = build_reconstructable_job(
        "support.chain_split",
        "chain_split_job",
        reconstructable_args=(str(ddl), engine.resolved_dsn),
        reconstructor_working_directory=str(TESTS),
    )
    tags = {"dagster/asset_partition_range_start": DAYS[0], "dagster/asset_partition_range_end": DAYS[-1]}
    with execute_job(job, instance=instance, tags=tags, raise_on_error=False) as result:
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        run_id = result.run_id
        steps = {e.step_key for e in result.all_events if e.step_key}
    # two target ops, the op of the part-count and health checks, the lint op; no op split in subsets (``…_2``)
    assert steps == {"rebuild_daily_targets", "rebuild_daily_targets_spark", "chmv_server_checks", "chmv_lint_checks"}

    evaluations = [
        e.dagster_event.event_specific_data
        for e in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    ]
    counted = Counter((e.asset_key, e.check_name, e.partition) for e in evaluations)
    expected = {(key, PARITY, day) for key in KEYS for day in DAYS}
    expected |= {(key, name, None) for key in KEYS for name in (DRIFT, PARTS, HEALTH, LINT)}
    assert set(counted) == expected and set(counted.values()) == {1}, counted
    assert all(e.passed for e in evaluations if e.check_name in (PARITY, DRIFT))

    # each blocking check right after its own asset: t1's parity and drift before t2 is materialized
    order = []
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is not None and event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            order.append((event.asset_key, None))
        elif event is not None and event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            order.append((event.event_specific_data.asset_key, event.event_specific_data.check_name))
    t1_checks = [i for i, (key, name) in enumerate(order) if key == KEYS[0] and name in (PARITY, DRIFT)]
    t1_materialized = [i for i, (key, name) in enumerate(order) if key == KEYS[0] and name is None]
    t2_materialized = [i for i, (key, name) in enumerate(order) if key == KEYS[1] and name is None]
    assert max(t1_materialized) < min(t1_checks) and max(t1_checks) < min(t2_materialized), order

    # the asset-check execution index agrees: one finished record per (check, partition), none left planned
    for key in KEYS:
        records = instance.event_log_storage.get_asset_check_execution_history(AssetCheckKey(key, PARITY), limit=50)
        mine = [r for r in records if r.run_id == run_id]
        assert sorted(r.partition for r in mine) == DAYS
        assert {r.status.value for r in mine} == {"SUCCEEDED"}


def test_a_failed_blocking_check_stops_the_downstream_target_of_the_same_op(tmp_path: Path) -> None:
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "chain.sql").write_text(CHAIN_DDL)
    (ddl / "chmv.toml").write_text('default_database = "chain"\npartition_start = "2026-08-01"\n')  # no landing zone
    loaded = load(ddl)
    (group,) = {i for i, (_spark, refs) in enumerate(target_groups(loaded, ChmvTranslator())) for r in refs}  # one op
    engine = make_engine(tmp_path / "chdb", loaded)
    with engine.get_client() as client:
        client.command(
            "INSERT INTO chain.src SELECT toDateTime('2026-08-01 00:00:00') + number * 97, number % 7, 1 "
            "FROM numbers(3000)"
        )
        client.command("ALTER TABLE chain.t1 ADD COLUMN extra UInt8 DEFAULT 0")  # drift: a column the DDL lacks
    result = materialize(
        build_chmv_assets(loaded),
        selection=AssetSelection.assets(*KEYS),
        partition_key=DAYS[0],
        resources={"clickhouse": engine},
        raise_on_error=False,
    )
    assert not result.success
    assert [m.asset_key for m in result.get_asset_materialization_events()] == [KEYS[0]]  # t2 was not rebuilt
    verdicts = {(e.asset_key, e.check_name): e.passed for e in result.get_asset_check_evaluations()}
    assert verdicts == {(KEYS[0], PARITY): True, (KEYS[0], DRIFT): False}
    failure = next(e for e in result.all_events if e.is_step_failure).event_specific_data.error.to_string()
    assert "chain.t2: not rebuilt, its upstream chain.t1 failed in this run" in failure


@pytest.mark.parametrize("shape", ["time", "time_and_key"])
def test_a_run_without_a_partition_checks_the_newest_one(shape: str) -> None:
    """A check run that names no partition (the checks alone) checks the newest partition, a key part's values read
    from the instance (the previous call passed the instance to a method that takes none: a TypeError)."""
    from dagster import (
        DailyPartitionsDefinition,
        DynamicPartitionsDefinition,
        MultiPartitionsDefinition,
        build_asset_context,
    )

    from asset_checks.inline import check_partition_keys

    days = DailyPartitionsDefinition(start_date="2026-01-01", end_date="2026-01-05")
    partitions_def = days
    instance = DagsterInstance.ephemeral()
    if shape == "time_and_key":
        partitions_def = MultiPartitionsDefinition({"day": days, "key": DynamicPartitionsDefinition(name="k")})
        instance.add_dynamic_partitions("k", ["eu", "us"])
    expected = "2026-01-04" if shape == "time" else "2026-01-04|us"
    assert check_partition_keys(build_asset_context(instance=instance), partitions_def) == [expected]
    assert check_partition_keys(build_asset_context(instance=instance), None) == [None]
