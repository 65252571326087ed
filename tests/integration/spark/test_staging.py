"""Staging keeps every value exact on its way from the landing zone through Spark into ClickHouse, and each partition
reads the staged rows of its own window (by instant: across a DST change too)."""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.staging_area import file_relation
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.loads.load import ingest
from chmv_assets.engine.rebuild.executor import rebuild_partitions
from resources.clickhouse import ClickHouseResource
from spark.staging import SparkStager, stage

from support.ddl import load_ddl, ref
from support.dst import HOURLY_DAILY

HUGE = [0, 1, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]


def test_uint64_keys_beyond_the_signed_range_survive_dedup_and_file_read(spark, tmp_path: Path, example):
    """Spark stages UInt64 columns as longs with the same bits; ClickHouse must read the original values back."""
    source = example.project.table(ObjectRef(database="analytics", name="raw_events"))
    times = [datetime(2026, 8, 1, 0, i) for i in range(len(HUGE))]
    rows = pa.table(
        {
            "timestamp": pa.array(times * 2, pa.timestamp("s")),
            "user_id": pa.array(HUGE * 2, pa.uint64()),
            "event_type": ["click"] * (2 * len(HUGE)),
            "duration_ms": pa.array(list(range(2 * len(HUGE))), pa.uint32()),
        }
    )
    landing = tmp_path / "landing.parquet"
    pq.write_table(rows, landing)
    out = tmp_path / "staged"
    columns = [c.name for c in source.columns]
    stage(spark, [str(landing)], columns, "timestamp", ["timestamp", "user_id", "event_type"], out)

    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    relation = file_relation(str(out / "*.parquet"), source, columns)
    with engine.get_client() as client:
        staged = client.query(f"SELECT user_id FROM {relation} ORDER BY user_id").result_rows
    assert [r[0] for r in staged] == HUGE  # each key once (deduplicated), every bit intact


DST_TOML = """default_database = "dst"
partition_start = "2026-10-01"
timezone = "{zone}"

[writers]
default = "chmv"

[ingestion]
landing_dir = "landing"
late_tolerance_minutes = 0

[ingestion.time_columns]
"dst.events" = "ts"
"""
#: A row a minute by instant (UTC, as the landing zone holds event times): New York's fall-back night 00:00 EDT to
#: 03:00 EST (both 01:00 hours), and its evening 21:00-23:00 EST, which falls on the next UTC day.
DST_ROWS = ((datetime(2026, 11, 1, 4), 240), (datetime(2026, 11, 2, 2), 120))
HOURS_BY_INSTANT = "SELECT toUnixTimestamp(toStartOfHour({c})) AS h, sum({r}), sum(n) FROM {t} GROUP BY h ORDER BY h"


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_spark_stages_each_window_by_its_instants_across_dst(spark, tmp_path: Path, zone: str) -> None:
    """Spark stages the landing rows in one folder per UTC window of the target's grain; each partition reads the
    folders its window meets. In New York the two 01:00 hours of a fall-back night are two hourly partitions, each
    rebuilt from its own hour of rows, and a day (25 hours) reads the two UTC days it spans.

    Before, a window read the folder of its wall-clock start (``2026110101``, which Spark never writes: its folders
    are UTC hours) and staged the rows of its wall-clock span read as UTC: New York's partitions were rebuilt empty."""
    loaded = load_ddl(tmp_path / "ddl", HOURLY_DAILY, toml=DST_TOML.format(zone=zone))
    landing = tmp_path / "ddl" / "landing" / "dst.events"
    for first, minutes in DST_ROWS:  # one file per arrival hour, as a lake holds them
        times = [first + timedelta(minutes=m) for m in range(minutes)]
        for hour in sorted({t.replace(minute=0) for t in times}):
            rows = [t for t in times if t.replace(minute=0) == hour]
            folder = landing / f"date={hour:%Y-%m-%d}"
            folder.mkdir(parents=True, exist_ok=True)
            table = pa.table(
                {"ts": pa.array(rows, pa.timestamp("s")), "n": pa.array([1 + t.minute % 7 for t in rows], pa.uint32())}
            )
            pq.write_table(table, folder / f"hour={hour:%H}.parquet")
    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}", settings={"session_timezone": zone})
    with engine.get_client() as client:
        apply(client, loaded.project)
    ingest(SparkStager(spark), engine, loaded, ref("dst.events"))  # the source and the watermark (the live MVs too)
    hourly, daily = ref("dst.hourly"), ref("dst.daily")
    with engine.get_client() as client:
        source_hours = client.query(HOURS_BY_INSTANT.format(c="ts", r="1", t="dst.events")).result_rows
        client.command("TRUNCATE TABLE dst.hourly")
        client.command("TRUNCATE TABLE dst.daily")
    assert sum(r[1] for r in source_hours) == 360
    # the days of the rows' instants in the zone (the engine's toDate of a bare DateTime is not trusted to follow
    # session_timezone once another session ran in the process: an embedded-engine quirk)
    days_of: dict = {}
    for first, minutes in DST_ROWS:
        for m in range(minutes):
            utc = first + timedelta(minutes=m)
            day = utc.replace(tzinfo=UTC).astimezone(ZoneInfo(zone)).date()
            days_of.setdefault(day, [0, 0])
            days_of[day][0] += 1
            days_of[day][1] += 1 + utc.minute % 7  # n as the landing files hold it
    source_days = [(d, rows, n) for d, (rows, n) in sorted(days_of.items())]
    since, until = datetime(2026, 11, 1), datetime(2026, 11, 2, 10)  # wall clocks of the zone: every row's window
    hours, days = loaded.partitioning(hourly).windows(since, until), loaded.partitioning(daily).windows(since, until)
    _plan, by_hour = rebuild_partitions(engine, loaded, hourly, hours, engine="spark", stager=SparkStager(spark))
    _plan, by_day = rebuild_partitions(engine, loaded, daily, days, engine="spark", stager=SparkStager(spark))
    assert {r.engine for r in by_hour + by_day} == {"spark"}
    with engine.get_client() as client:
        assert client.query(HOURS_BY_INSTANT.format(c="minute", r="rows", t="dst.hourly")).result_rows == source_hours
        assert (
            client.query("SELECT day, sum(rows), sum(n) FROM dst.daily GROUP BY day ORDER BY day").result_rows
            == source_days
        )
    staged = {r.partition: r.rows_staged for r in by_hour if r.rows_staged}
    if zone == "America/New_York":  # each 01:00 hour staged and rebuilt from its own 60 rows
        assert staged["2026-11-01-01:00"] == staged["2026-11-01-01:00-0500"] == 60
