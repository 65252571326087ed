"""Every partition shape is a partition (tests/fixtures/schemas/partition_shapes, written for chmv's tests): weeks,
quarters, years, a day spelled ``toYYYYMMDD``, six-hour intervals, days of Unix time, a month and a region, a tenant
alone, a hash bucket and a week, a year and a region rolled up down a chain.

Each loads as a code location with one asset per target and the right Dagster partitions, rebuilds one partition
exactly after a planted gap (against a recompute written here, not the MV's SELECT), reports its live state per
partition (the key values added to Dagster's dynamic partitions), and is swept, parity-checked and recovered per
partition.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from dagster import (
    DagsterInstance,
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionsDefinition,
    RunRequest,
    TimeWindowPartitionsDefinition,
    WeeklyPartitionsDefinition,
    build_sensor_context,
)

from chmv_assets.cli import main
from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import decode_key, encode_key
from chmv_assets.engine.health.recovery import RepairKind
from chmv_assets.engine.health.sweep import SweepState, decide, read_parts, seen_partitions, tracked_tables
from chmv_assets.orchestration.definitions import build_definitions
from chmv_assets.orchestration.live_state import evaluate_live_state
from chmv_assets.orchestration.sensors import read_ledger
from chmv_assets.orchestration.sweep import SWEEP_JOB, SWEEP_SENSOR
from resources.clickhouse import ClickHouseResource

from support.checks import TRANSLATOR, execute
from support.paths import SCHEMAS
from support.spark import copy_engine, digest

pytestmark = pytest.mark.worker_seconds(45)

SHAPES = SCHEMAS / "partition_shapes"
#: A tenant whose name carries what a Dagster key cannot: the delimiters, a quote, a percent sign.
ODD_TENANT = "it's / 50%|x"
#: Readings every ~10 minutes from 15 September to 21 October 2025: across a quarter's end, weeks, months.
READINGS = (
    "INSERT INTO fleet.readings SELECT toDateTime('{start}') + number * 613 AS ts, "
    "concat('dev-', toString(number % 11)) AS device, ['eu', 'us', 'apac'][1 + intDiv(number, 2) % 3] AS region, "
    "['acme', 'globex', 'it''s / 50%|x'][1 + intDiv(number, 5) % 3] AS tenant, "
    "if(number % 3 = 0, 'temp', 'load') AS kind, (number % 89) / 4 AS value FROM numbers(986)"
)
WEEKS = ["2025-09-15", "2025-09-22", "2025-09-29", "2025-10-06", "2025-10-13"]


def chmv(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


def fleet(name: str) -> ObjectRef:
    return ObjectRef(database="fleet", name=name)


@pytest.fixture(scope="module")
def loaded() -> LoadedProject:
    return load(SHAPES)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The schema deployed with ``chmv apply`` and five weeks of readings inserted, a week per insert (the live MVs
    write every target); the engine closed, for copies."""
    path = tmp_path_factory.mktemp("shapes") / "chdb"
    code, out = chmv("apply", "--ddl-dir", str(SHAPES), "--dsn", f"chdb://{path}")
    assert code == 0, out
    with ClickHouseResource(dsn=f"chdb://{path}").get_client() as client:
        for week in WEEKS:
            client.command(READINGS.format(start=f"{week} 00:00:00"))
    return path


@pytest.fixture
def engine(built: Path, tmp_path: Path) -> ClickHouseResource:
    return copy_engine(built, tmp_path / "chdb")


def rows(client, sql: str) -> list[tuple]:
    return client.query(sql).result_rows


# --- the code location ----------------------------------------------------------------------------------------


def test_one_asset_per_target_with_the_partitions_of_its_shape(loaded: LoadedProject, built: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        defs = build_definitions(loaded, clickhouse=ClickHouseResource(dsn=f"chdb://{built}"))
        graph = defs.get_repository_def().asset_graph
    materializable = {"/".join(k.path) for k in graph.get_all_asset_keys() if graph.get(k).is_materializable}
    assert materializable == {t.fqn.replace(".", "/") for t in loaded.project.targets}

    def partitions(name: str):
        return graph.get(TRANSLATOR.get_asset_key(fleet(name))).partitions_def

    def windows(partitions_def) -> tuple[str, str, str]:
        assert isinstance(partitions_def, TimeWindowPartitionsDefinition)
        return partitions_def.cron_schedule, partitions_def.fmt, partitions_def.get_first_partition_key()

    # weeks from Monday: the first holds partition_start (2025-01-01, a Wednesday)
    assert partitions("weekly_load") == WeeklyPartitionsDefinition("2024-12-30", day_offset=1, end_offset=1)
    assert windows(partitions("weekly_load")) == ("0 0 * * 1", "%Y-%m-%d", "2024-12-30")
    assert windows(partitions("quarterly_devices")) == ("0 0 1 */3 *", "%Y-%m-%d", "2025-01-01")
    assert windows(partitions("yearly_tenants")) == ("0 0 1 1 *", "%Y-%m-%d", "2025-01-01")
    days = DailyPartitionsDefinition("2025-01-01", end_offset=1)  # Dagster's own: equal to chmv's of its cron
    assert partitions("daily_devices") == days  # toYYYYMMDD(day)
    assert partitions("temperatures") == days  # intDiv(toUnixTimestamp(ts), 86400)
    assert windows(partitions("shift_load")) == ("0 */6 * * *", "%Y-%m-%d-%H:%M", "2025-01-01-00:00")
    regional = partitions("regional_days")
    assert isinstance(regional, MultiPartitionsDefinition)
    dimensions = {d.name: d.partitions_def for d in regional.partitions_defs}
    assert dimensions["date"] == MonthlyPartitionsDefinition("2025-01-01", end_offset=1)
    assert dimensions["key"] == DynamicPartitionsDefinition(name="chmv:fleet.regional_days")
    buckets = {d.name: d.partitions_def for d in partitions("device_buckets").partitions_defs}
    assert buckets["date"] == WeeklyPartitionsDefinition("2024-12-30", day_offset=1, end_offset=1)
    assert partitions("tenant_totals") == DynamicPartitionsDefinition(name="chmv:fleet.tenant_totals")
    assert partitions("regional_years") == DynamicPartitionsDefinition(name="chmv:fleet.regional_years")
    assert partitions("device_latest") is None  # no PARTITION BY: unpartitioned, as its DDL says


# --- a planted gap, rebuilt exactly -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gap:
    """A partition of one shape, the gap planted in it, and its rows as the test reads them and computes them."""

    table: str
    key: str
    plant: str  # the statement that makes the gap, written here
    where: str  # the partition's rows in the target
    actual: str  # what the test reads of them (grouped, finalized)
    expected: str  # the same, computed here from the readings (not with the MV's SELECT)
    dagster: bool = False  # rebuilt through Dagster (else through ``chmv rebuild``)


GAPS = {
    "week": Gap(
        "weekly_load",
        "2025-09-29",
        "DELETE FROM fleet.weekly_load WHERE week = '2025-09-29' AND region = 'eu'",
        "week = '2025-09-29'",
        "SELECT region, sum(samples), round(sum(total), 4) FROM fleet.weekly_load WHERE {where} GROUP BY region "
        "ORDER BY region",
        "SELECT region, count(), round(sum(value), 4) FROM fleet.readings WHERE kind = 'load' "
        "AND ts >= '2025-09-29' AND ts < '2025-10-06' GROUP BY region ORDER BY region",
    ),
    "quarter": Gap(
        "quarterly_devices",
        "2025-07-01",
        "ALTER TABLE fleet.quarterly_devices DROP PARTITION '2025-07-01'",
        "quarter = '2025-07-01'",
        "SELECT device, countMerge(samples), max(peak) FROM fleet.quarterly_devices WHERE {where} GROUP BY device "
        "ORDER BY device",
        "SELECT device, count(), max(value) FROM fleet.readings WHERE ts < '2025-10-01' GROUP BY device "
        "ORDER BY device",
    ),
    "year": Gap(
        "yearly_tenants",
        "2025-01-01",
        "DELETE FROM fleet.yearly_tenants WHERE tenant = 'acme'",
        "year = '2025-01-01'",
        "SELECT tenant, sum(samples) FROM fleet.yearly_tenants WHERE {where} GROUP BY tenant ORDER BY tenant",
        "SELECT tenant, count() FROM fleet.readings GROUP BY tenant ORDER BY tenant",
    ),
    "toYYYYMMDD": Gap(
        "daily_devices",
        "2025-10-01",
        "ALTER TABLE fleet.daily_devices DROP PARTITION 20251001",
        "day = '2025-10-01'",
        "SELECT device, sum(samples) FROM fleet.daily_devices WHERE {where} GROUP BY device ORDER BY device",
        "SELECT device, count() FROM fleet.readings WHERE ts >= '2025-10-01' AND ts < '2025-10-02' "
        "GROUP BY device ORDER BY device",
    ),
    "six-hour interval": Gap(
        "shift_load",
        "2025-09-30-18:00",
        "ALTER TABLE fleet.shift_load DROP PARTITION '2025-09-30 18:00:00'",
        "slot >= '2025-09-30 18:00:00' AND slot < '2025-10-01 00:00:00'",
        "SELECT region, sum(samples), round(sum(total), 4) FROM fleet.shift_load WHERE {where} GROUP BY region "
        "ORDER BY region",
        "SELECT region, count(), round(sum(value), 4) FROM fleet.readings WHERE kind = 'load' "
        "AND ts >= '2025-09-30 18:00:00' AND ts < '2025-10-01 00:00:00' GROUP BY region ORDER BY region",
        dagster=True,
    ),
    "intDiv of a timestamp": Gap(
        "temperatures",
        "2025-10-01",
        "ALTER TABLE fleet.temperatures DROP PARTITION 20362",  # 2025-10-01 is day 20362 of Unix time
        "ts >= '2025-10-01' AND ts < '2025-10-02'",
        "SELECT device, count(), round(sum(value), 4) FROM fleet.temperatures WHERE {where} GROUP BY device "
        "ORDER BY device",
        "SELECT device, count(), round(sum(value), 4) FROM fleet.readings WHERE kind = 'temp' "
        "AND ts >= '2025-10-01' AND ts < '2025-10-02' GROUP BY device ORDER BY device",
    ),
    "month × region": Gap(
        "regional_days",
        "2025-09-01|eu",
        "ALTER TABLE fleet.regional_days DROP PARTITION (202509, 'eu')",
        "region = 'eu' AND day < '2025-10-01'",
        "SELECT day, sum(samples), round(sum(total), 4) FROM fleet.regional_days WHERE {where} GROUP BY day "
        "ORDER BY day",
        "SELECT toDate(ts) AS day, count(), round(sum(value), 4) FROM fleet.readings WHERE region = 'eu' "
        "AND ts < '2025-10-01' GROUP BY day ORDER BY day",
        dagster=True,
    ),
    "tenant alone": Gap(
        "tenant_totals",
        encode_key([ODD_TENANT]),
        "DELETE FROM fleet.tenant_totals WHERE tenant = 'it\\'s / 50%|x' AND kind = 'load'",
        "tenant = 'it\\'s / 50%|x'",
        "SELECT kind, sum(samples), round(sum(total), 4) FROM fleet.tenant_totals WHERE {where} GROUP BY kind "
        "ORDER BY kind",
        "SELECT kind, count(), round(sum(value), 4) FROM fleet.readings WHERE tenant = 'it\\'s / 50%|x' "
        "GROUP BY kind ORDER BY kind",
        dagster=True,
    ),
    "bucket × week": Gap(
        "device_buckets",
        "2025-09-29|{bucket}",
        "ALTER TABLE fleet.device_buckets DROP PARTITION ({bucket}, '2025-09-29')",
        "bucket = {bucket} AND week = '2025-09-29'",
        "SELECT device, sum(samples) FROM fleet.device_buckets WHERE {where} GROUP BY device ORDER BY device",
        "SELECT device, count() FROM fleet.readings WHERE cityHash64(device) % 4 = {bucket} "
        "AND ts >= '2025-09-29' AND ts < '2025-10-06' GROUP BY device ORDER BY device",
    ),
    "year and region, down a chain": Gap(
        "regional_years",
        "2025/us",
        "ALTER TABLE fleet.regional_years DROP PARTITION (2025, 'us')",
        "region = 'us'",
        "SELECT year, sum(samples) FROM fleet.regional_years WHERE {where} GROUP BY year",
        "SELECT 2025, count() FROM fleet.readings WHERE region = 'us'",
        dagster=True,
    ),
}


@pytest.fixture(scope="module")
def gapped(built: Path, tmp_path_factory) -> ClickHouseResource:
    """One copy for the gap tests: each plants its gap in a target of its own."""
    return copy_engine(built, tmp_path_factory.mktemp("gapped") / "chdb")


@pytest.mark.parametrize("shape", list(GAPS))
def test_each_shape_rebuilds_one_partition_exactly_after_a_planted_gap(
    loaded: LoadedProject, gapped: ClickHouseResource, shape: str
) -> None:
    instance = DagsterInstance.ephemeral()
    with gapped.get_client() as client:
        report = evaluate_live_state(client, loaded, TRANSLATOR, None, instance)
        for request in report.partition_requests():  # the key values the server holds, as the sensor adds them
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        bucket = rows(client, "SELECT min(bucket) FROM fleet.device_buckets WHERE week = '2025-09-29'")[0][0]
        gap = replace(
            GAPS[shape],
            **{
                f: getattr(GAPS[shape], f).replace("{bucket}", str(bucket))
                for f in ("key", "plant", "where", "expected")
            },
        )
        actual = gap.actual.format(where=gap.where)
        truth = rows(client, gap.expected)
        assert truth and rows(client, actual) == truth  # the live MVs wrote it right
        others = digest(client, loaded, fleet(gap.table), f"NOT ({gap.where})")  # what the rebuild must leave alone
        client.command(gap.plant)
        assert rows(client, actual) != truth

    if not gap.dagster:
        code, out = chmv(
            "rebuild",
            "--ddl-dir",
            str(SHAPES),
            "--dsn",
            gapped.resolved_dsn,
            "--target",
            f"fleet.{gap.table}",
            "--partition",
            gap.key,
        )
        assert code == 0, out
        assert f"rebuild: fleet.{gap.table} {gap.key}: clickhouse, replace" in out, out
    else:  # through Dagster: the partition of its partitions definition, its parity checked in the same run
        request = RunRequest(asset_selection=[TRANSLATOR.get_asset_key(fleet(gap.table))], partition_key=gap.key)
        result = execute(loaded, gapped, instance, request)
        assert result.success
        (parity,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "chmv_parity"]
        assert parity.passed and parity.partition == gap.key

    with gapped.get_client() as client:
        assert rows(client, actual) == truth
        assert digest(client, loaded, fleet(gap.table), f"NOT ({gap.where})") == others


# --- live state, sweep, parity and recovery per partition ---------------------------------------------------------


def test_live_state_reports_each_partition_and_the_key_values_the_server_holds(
    loaded: LoadedProject, built: Path
) -> None:
    with ClickHouseResource(dsn=f"chdb://{built}").get_client() as client:
        report = evaluate_live_state(client, loaded, TRANSLATOR, None)
    assert report.outside == 0
    by_asset: dict[str, set[str | None]] = {}
    for event in report.events:
        by_asset.setdefault(event.asset_key.to_user_string(), set()).add(event.partition)
    assert by_asset["fleet/weekly_load"] == set(WEEKS)
    assert by_asset["fleet/quarterly_devices"] == {"2025-07-01", "2025-10-01"}
    assert by_asset["fleet/yearly_tenants"] == {"2025-01-01"}
    assert len(by_asset["fleet/daily_devices"]) == len(by_asset["fleet/temperatures"]) == 35
    assert "2025-09-30-18:00" in by_asset["fleet/shift_load"] and len(by_asset["fleet/shift_load"]) == 35 * 4
    assert by_asset["fleet/regional_days"] == {
        f"{m}|{r}" for m in ("2025-09-01", "2025-10-01") for r in ("apac", "eu", "us")
    }
    assert {decode_key(k) for k in by_asset["fleet/tenant_totals"]} == {("acme",), ("globex",), (ODD_TENANT,)}
    assert by_asset["fleet/regional_years"] == {"2025/apac", "2025/eu", "2025/us"}
    assert by_asset["fleet/device_latest"] == {None}
    requests = {r.partitions_def_name: set(r.partition_keys) for r in report.partition_requests()}
    assert requests["chmv:fleet.regional_days"] == {"apac", "eu", "us"}
    assert requests["chmv:fleet.tenant_totals"] == {"acme", "globex", encode_key([ODD_TENANT])}
    assert requests["chmv:fleet.regional_years"] == {"2025/apac", "2025/eu", "2025/us"}
    assert len(requests["chmv:fleet.device_buckets"]) >= 2


def tick(loaded: LoadedProject, sensor_name: str, resource, instance: DagsterInstance, cursor: str | None):
    """One tick of a sensor as the daemon runs it: with the instance's ref, through which Dagster reads the dynamic
    partitions of the run requests it resolves."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        repository = build_definitions(loaded, clickhouse=resource, translator=TRANSLATOR).get_repository_def()
        context = build_sensor_context(
            instance=instance,
            instance_ref=instance.get_ref(),
            cursor=cursor,
            resources={"clickhouse": resource},
            repository_def=repository,
        )
        return repository.get_sensor_def(sensor_name).evaluate_tick(context)


def _swept(loaded: LoadedProject, engine: ClickHouseResource) -> str:
    """The sweep sensor's cursor after a complete sweep of what the engine holds now."""
    with engine.get_client() as client:
        parts = read_parts(client, loaded, tracked_tables(loaded, loaded.project.targets))
    state = SweepState({ref.fqn: seen_partitions(found) for ref, found in parts.items()})
    return json.dumps({"state": state.dumps(), "inflight": {}})


def test_dropped_partitions_are_swept_failed_and_recovered_one_by_one(
    engine: ClickHouseResource, tmp_path: Path
) -> None:
    """A week of one hash bucket and a tenant dropped from their targets: the sweep marks exactly those partitions,
    their parity fails per partition, recovery rebuilds each through a run of its own, and they pass again. (No grace
    period: a partition without a time window is otherwise checked once its writes paused for it.)"""
    loaded = load(SHAPES, parity={"grace_minutes": 0})
    instance = DagsterInstance.local_temp(str(tmp_path))
    with engine.get_client() as client:
        for request in evaluate_live_state(client, loaded, TRANSLATOR, None, instance).partition_requests():
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        bucket = rows(client, "SELECT min(bucket) FROM fleet.device_buckets")[0][0]
    cursor = _swept(loaded, engine)
    with engine.get_client() as client:
        client.command(f"ALTER TABLE fleet.device_buckets DROP PARTITION ({bucket}, '2025-09-29')")
        client.command("ALTER TABLE fleet.tenant_totals DROP PARTITION 'globex'")

    found = tick(loaded, SWEEP_SENSOR, engine, instance, cursor)
    (request,) = found.run_requests
    week = f"2025-09-29|{bucket}"
    assert request.run_config["ops"]["chmv_parity_sweep_op"]["config"]["partitions"] == {
        "fleet.device_buckets": [week],
        "fleet.tenant_totals": ["globex"],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = build_definitions(loaded, clickhouse=engine, translator=TRANSLATOR).resolve_job_def(SWEEP_JOB)
    tags = {**request.tags, "dagster/run_key": request.run_key}
    run = job.execute_in_process(run_config=request.run_config, instance=instance, tags=tags)
    verdicts = {(e.asset_key.to_user_string(), e.partition): e.passed for e in run.get_asset_check_evaluations()}
    assert verdicts == {("fleet/device_buckets", week): False, ("fleet/tenant_totals", "globex"): False}

    data = tick(loaded, "chmv_recovery", engine, instance, None)
    requested = {(r.tags["chmv/target"], r.partition_key): r for r in data.run_requests}
    assert set(requested) == {("fleet.device_buckets", week), ("fleet.tenant_totals", "globex")}
    assert {r.job_name for r in requested.values()} == {
        "chmv_rebuild_week__fleet__device_buckets",
        "chmv_rebuild_key__fleet__tenant_totals",
    }
    for request in requested.values():
        assert request.tags["chmv/reason"] == "parity_failed" and request.tags["chmv/engine"] == "clickhouse"
        result = execute(loaded, engine, instance, request)
        assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    with engine.get_client() as client:
        assert rows(client, f"SELECT sum(samples) FROM fleet.device_buckets WHERE bucket = {bucket}") == rows(
            client, f"SELECT count() FROM fleet.readings WHERE cityHash64(device) % 4 = {bucket}"
        )
        assert rows(client, "SELECT sum(samples) FROM fleet.tenant_totals WHERE tenant = 'globex'") == rows(
            client, "SELECT count() FROM fleet.readings WHERE tenant = 'globex'"
        )
    again = tick(loaded, "chmv_recovery", engine, instance, data.cursor)
    assert not again.run_requests and read_ledger(again.cursor).of(RepairKind.REBUILD) == {}


def test_a_late_reading_marks_the_windows_it_maps_into_for_every_key_value(
    loaded: LoadedProject, engine: ClickHouseResource
) -> None:
    """A row of 30 September 18:10 arrives late: each target's partition of that time is marked, every key value the
    target holds for a time × key target (the row's key is not read from the source), every partition of a key alone;
    the chain's target below marks every key (its source's partitions changed)."""
    with engine.get_client() as client:
        state = SweepState.loads(json.loads(_swept(loaded, engine))["state"])
        client.command("INSERT INTO fleet.readings VALUES ('2025-09-30 18:10:00', 'dev-1', 'eu', 'acme', 'load', 1.5)")
        decision = decide(client, loaded, list(loaded.project.targets), state, now=0.0, max_partitions=0, max_rows=0)
        buckets = [str(b) for (b,) in rows(client, "SELECT DISTINCT bucket FROM fleet.device_buckets ORDER BY 1")]
    marked = {fqn.removeprefix("fleet."): sorted(keys) for fqn, keys in decision.state.pending.items()}
    assert marked == {
        "weekly_load": ["2025-09-29"],
        "quarterly_devices": ["2025-07-01"],
        "yearly_tenants": ["2025-01-01"],
        "daily_devices": ["2025-09-30"],
        "shift_load": ["2025-09-30-18:00"],
        "temperatures": ["2025-09-30"],  # its MV keeps temperatures only: the sweep marks what its source's rows reach
        "regional_days": ["2025-09-01|apac", "2025-09-01|eu", "2025-09-01|us"],
        "tenant_totals": sorted(["acme", "globex", encode_key([ODD_TENANT])]),
        "device_buckets": [f"2025-09-29|{b}" for b in buckets],
        "regional_years": ["2025/apac", "2025/eu", "2025/us"],
        "device_latest": [""],
    }
