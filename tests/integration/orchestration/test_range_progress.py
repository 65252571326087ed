"""One run, many partitions, each reported: a range run of an hourly target through Dagster (``materialize``) on the
real embedded engine records each partition's materialization as it is swapped in, with the run's progress; a refused
partition (its swap would shrink it) ends the run failed with the partitions done materialized and the rest failed, and
a forced run of the same range rebuilds them all again; a deferred partition is observed as deferred, never materialized.

Hourly keys in New York cross the night its clocks go back (the two 01:00 hours are two keys), in Kolkata an offset of
5 h 30 (an hour of keys starts at :30 UTC)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    AssetPartitionStatus,
    DagsterEventType,
    DagsterInstance,
    PartitionKeyRange,
    materialize,
)

from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.orchestration.assets import build_chmv_assets
from resources.clickhouse import ClickHouseResource

from support.ddl import load_ddl

pytestmark = pytest.mark.worker_seconds(40)

DDL = """
CREATE DATABASE rp;
CREATE TABLE rp.events (ts DateTime, n UInt32) ENGINE = MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY ts;
CREATE TABLE rp.hourly (minute DateTime, rows UInt64, n UInt64)
    ENGINE = SummingMergeTree PARTITION BY toStartOfHour(minute) ORDER BY minute;
CREATE MATERIALIZED VIEW rp.hourly_mv TO rp.hourly AS
    SELECT toStartOfMinute(ts) AS minute, count() AS rows, sum(n) AS n FROM rp.events GROUP BY minute;
"""
HOURLY = AssetKey(["rp", "hourly"])
#: A row a minute for six hours from 2026-11-01 04:00 UTC: New York 00:00 EDT to 05:00 EST (both 01:00 hours).
NIGHT = ("2026-11-01 04:00:00", 360)
#: Per zone: the range of keys holding the night's rows, and the instant (UTC) of a minute inside its third hour.
RANGES = {
    "America/New_York": ("2026-11-01-00:00", "2026-11-01-04:00", "2026-11-01 06:20:00"),
    "Asia/Kolkata": ("2026-11-01-09:00", "2026-11-01-15:00", "2026-11-01 05:50:00"),
}


def project(root: Path, zone: str):
    toml = f'default_database = "rp"\npartition_start = "2026-10-01"\ntimezone = "{zone}"\n'
    return load_ddl(root / "ddl", DDL, toml=toml)


def deployed(root: Path, zone: str):
    """The project deployed on an embedded engine whose sessions run in ``zone``, the night's rows loaded."""
    loaded = project(root, zone)
    engine = ClickHouseResource(dsn=f"chdb://{root / 'chdb'}", settings={"session_timezone": zone})
    with engine.get_client() as client:
        apply(client, loaded.project)
        start, minutes = NIGHT
        client.command(
            f"INSERT INTO rp.events SELECT toDateTime('{start}', 'UTC') + number * 60, 1 FROM numbers({minutes})"
        )
    return loaded, engine


def run(loaded, engine, instance, first: str, last: str, **config):
    asset = next(a for a in build_chmv_assets(loaded) if getattr(a, "keys", None) and HOURLY in a.keys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = materialize(
            [asset],
            selection=[HOURLY],
            resources={"clickhouse": engine},
            instance=instance,
            tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
            run_config={"ops": {asset.node_def.name: {"config": config}}} if config else None,
            raise_on_error=False,
        )
    keys = asset.partitions_def.get_partition_keys_in_range(PartitionKeyRange(first, last))
    return result, asset, keys


def materialized(instance, run_id: str) -> list:
    """The run's materializations of the target, in the order they were recorded."""
    entries = instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    return [e.dagster_event.event_specific_data.materialization for e in entries]


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_a_range_run_records_each_partition_as_it_is_swapped_in_with_the_runs_progress(
    tmp_path: Path, zone: str
) -> None:
    loaded, engine = deployed(tmp_path, zone)
    with engine.get_client() as client:
        client.command("TRUNCATE TABLE rp.hourly")
    instance = DagsterInstance.ephemeral()
    first, last, _ = RANGES[zone]
    result, asset, keys = run(loaded, engine, instance, first, last)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    n = len(keys)
    assert n == (6 if zone == "America/New_York" else 7)
    if zone == "America/New_York":
        assert {"2026-11-01-01:00", "2026-11-01-01:00-0500"} <= set(keys)

    events = materialized(instance, result.run_id)
    assert [m.partition for m in events] == keys  # one each, in the plan's order: no second one from the op's output
    done = [m.metadata["chmv/partitions_done"].value for m in events]
    assert done == list(range(1, n + 1)) and {m.metadata["chmv/partitions"].value for m in events} == {n}
    assert [m.metadata["chmv/run_progress"].value.split(" partitions")[0] for m in events] == [
        f"{k}/{n}" for k in range(1, n + 1)
    ]
    elapsed = [m.metadata["chmv/elapsed_seconds"].value for m in events]
    assert elapsed == sorted(elapsed) and elapsed[0] > 0
    left = [m.metadata["chmv/estimated_seconds_left"].value for m in events]
    assert left[-1] == 0 and all(v > 0 for v in left[:-1])
    for m in events:  # the partition's own figures and plan lines
        assert m.metadata["chmv/method"].value == "replace" and m.metadata["chmv/engine_path"].value == "clickhouse"
        assert f"| {m.partition} | clickhouse |" in m.metadata["chmv/plan"].value
        assert m.metadata["chmv/progress"].value.count("| clickhouse |") == 1
    assert sum(m.metadata["chmv/rows_written"].value for m in events) == NIGHT[1]  # a target row per source minute
    assert instance.get_materialized_partitions(HOURLY) == set(keys)

    # recorded while the run goes: partition k's materialization before the log line of partition k + 1's swap
    logs = list(instance.all_logs(result.run_id))
    position = {}
    for i, entry in enumerate(logs):
        event = entry.dagster_event
        if event is not None and event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            position[("materialized", event.partition)] = i
        elif "swapped in; " in entry.user_message and " partitions, " in entry.user_message:
            k = int(entry.user_message.split("swapped in; ")[1].split("/")[0])
            position[("swapped", k)] = i
    for k, key in enumerate(keys[:-1], start=1):
        assert position[("swapped", k)] < position[("materialized", key)] < position[("swapped", k + 1)], position


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_a_refused_partition_fails_the_run_with_the_partitions_done_materialized(tmp_path: Path, zone: str) -> None:
    loaded, engine = deployed(tmp_path, zone)
    first, last, cut = RANGES[zone]
    with engine.get_client() as client:  # ten minutes of the third hour deleted from the source: its swap would shrink
        client.command(
            f"DELETE FROM rp.events WHERE ts >= toDateTime('{cut}', 'UTC') AND ts < toDateTime('{cut}', 'UTC') + 600"
        )
    instance = DagsterInstance.ephemeral()
    result, asset, keys = run(loaded, engine, instance, first, last)
    assert not result.success
    done, refused, rest = keys[:2], keys[2], keys[3:]
    assert [m.partition for m in materialized(instance, result.run_id)] == done
    failure = next(e for e in result.all_events if e.is_step_failure).event_specific_data.error.to_string()
    assert (
        f"rp.hourly partition {refused}: the rebuild would leave 50 rows where the live partition holds 60" in failure
    )
    assert f"Materialized by this run: 2 of {len(keys)} partitions ({', '.join(done)})" in failure
    assert f"Not materialized: {', '.join([refused, *rest])}." in failure
    status = instance.get_status_by_partition(HOURLY, keys, asset.partitions_def)
    assert status == {
        **dict.fromkeys(done, AssetPartitionStatus.MATERIALIZED),
        **dict.fromkeys([refused, *rest], AssetPartitionStatus.FAILED),
    }
    with engine.get_client() as client:  # the refused hour kept its rows
        assert client.command("SELECT sum(rows) FROM rp.hourly FINAL") == NIGHT[1]

    # the same range again, forced: every partition rebuilt (the two done ones again: a swap replaces them whole)
    again, _, _ = run(loaded, engine, instance, first, last, force=True)
    assert again.success, [e.message for e in again.all_events if e.is_failure]
    assert [m.partition for m in materialized(instance, again.run_id)] == keys
    status = instance.get_status_by_partition(HOURLY, keys, asset.partitions_def)
    assert set(status.values()) == {AssetPartitionStatus.MATERIALIZED}
    with engine.get_client() as client:  # forced: the deleted minutes left the target too
        assert client.command("SELECT sum(rows) FROM rp.hourly FINAL") == NIGHT[1] - 10


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_a_deferred_partition_is_observed_as_deferred_not_materialized(tmp_path: Path, zone: str) -> None:
    """The hour open now (written by others, closing 15 minutes after its end) is deferred: logged and observed as
    such; the closed hours of the range are materialized; the run succeeds and the open hour stays missing."""
    loaded, engine = deployed(tmp_path, zone)
    with engine.get_client() as client:
        client.command("INSERT INTO rp.events SELECT now() - number * 60, 1 FROM numbers(300)")
    instance = DagsterInstance.ephemeral()
    asset = next(a for a in build_chmv_assets(loaded) if getattr(a, "keys", None) and HOURLY in a.keys)
    recent = asset.partitions_def.get_partition_keys()[-5:]  # the last one holds now (the open hour)
    result, _, keys = run(loaded, engine, instance, recent[0], recent[-1])
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert keys == recent
    observed = [
        e.dagster_event.event_specific_data.asset_observation
        for e in instance.all_logs(result.run_id, of_type=DagsterEventType.ASSET_OBSERVATION)
    ]
    deferred = [o.partition for o in observed]
    assert keys[-1] in deferred and all("open until" in o.metadata["chmv/deferred"].value for o in observed)
    partitions = [m.partition for m in materialized(instance, result.run_id)]
    assert partitions == [k for k in keys if k not in deferred] and partitions  # the closed hours, each once
    assert instance.get_materialized_partitions(HOURLY) == set(partitions)
    status = instance.get_status_by_partition(HOURLY, keys, asset.partitions_def)
    assert all(status[k] is None for k in deferred)  # missing, not failed
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("deferred until" in m and "Not materialized by this run" in m for m in logs)
    assert all(o.metadata["chmv/closes_at"].value for o in observed)
