"""Spark ingestion: late and duplicate rows, replayed batches, bad files; real Spark and the embedded engine."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.loads.load import ingest
from chmv_assets.engine.watermarks import read_watermark
from chmv_assets.errors import LandingZoneError
from resources.clickhouse import ClickHouseResource
from spark.staging import SparkStager

from support.spark import deliver, digest, recompute, ref, with_landing, write_lake

pytestmark = pytest.mark.worker_seconds(40)

API = ref("api_requests")
KEYS = "timestamp, endpoint, user_id"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    return root, write_lake(root, {"analytics.api_requests": 20_000})


@pytest.fixture
def setup(tmp_path, example, lake):
    landing = tmp_path / "landing"
    landing.mkdir()
    loaded = with_landing(example, landing)
    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    return loaded, engine, landing


def test_ingestion_loads_late_rows_once_and_drops_duplicates(spark, setup, lake):
    loaded, engine, landing = setup
    lake_root, tables = lake
    generated = tables["analytics.api_requests"]
    distinct = generated.group_by(generated.column_names).aggregate([]).num_rows
    assert distinct < generated.num_rows  # the data does hold duplicates

    deliver(lake_root, landing, until="2026-08-02/hour=12")
    first = ingest(SparkStager(spark), engine, loaded, API)
    deliver(lake_root, landing)
    second = ingest(SparkStager(spark), engine, loaded, API)

    # The second batch re-read the tolerance window below the first watermark, and late rows came in.
    assert second.lower_bound == first.watermark_after - timedelta(minutes=60)
    assert second.rows_inserted > 0 and second.rows_staged > second.rows_inserted  # the overlap was not re-inserted
    with engine.get_client() as client:
        count, keys = client.query(f"SELECT count(), uniqExact({KEYS}) FROM analytics.api_requests").result_rows[0]
        late = int(
            client.command(
                "SELECT count() FROM analytics.api_requests WHERE timestamp <= {w:DateTime}",
                parameters={"w": first.watermark_after},
            )
        )
        mark = read_watermark(client, API)
        target = digest(client, loaded, ref("hourly_endpoint_stats"))
        expected = recompute(client, loaded, ref("hourly_endpoint_stats"))
    assert count == keys == distinct  # nothing lost, nothing twice
    assert late > first.rows_inserted  # rows older than the first watermark arrived with the second batch
    assert mark.last_processed_ts == second.watermark_after and mark.status == "committed"
    assert target == expected  # the live MV fired exactly once per row


def test_replayed_batch_inserts_nothing(spark, setup, lake):
    loaded, engine, landing = setup
    deliver(lake[0], landing)
    first = ingest(SparkStager(spark), engine, loaded, API)
    with engine.get_client() as client:
        before = digest(client, loaded, ref("hourly_endpoint_stats"))
    again = ingest(SparkStager(spark), engine, loaded, API)
    with engine.get_client() as client:
        after = digest(client, loaded, ref("hourly_endpoint_stats"))
        count = int(client.command("SELECT count() FROM analytics.api_requests"))
    assert again.rows_staged > 0 and again.rows_inserted == 0
    assert again.watermark_after == first.watermark_after
    assert count == first.rows_inserted and after == before


@pytest.mark.parametrize("damage", ["corrupt", "wrong_schema"])
def test_bad_file_fails_the_load_naming_it_and_changes_nothing(spark, setup, lake, damage):
    loaded, engine, landing = setup
    deliver(lake[0], landing, until="2026-08-02/hour=00")
    good = ingest(SparkStager(spark), engine, loaded, API)
    deliver(lake[0], landing)
    bad = sorted((landing / "analytics.api_requests" / "date=2026-08-03").glob("*.parquet"))[3]
    if damage == "corrupt":
        bad.write_bytes(bad.read_bytes()[:200] + b"garbage" * 50)
        message = rf"{bad}: not a readable Parquet file"
    else:
        table = (
            pq.read_table(bad)
            .drop_columns(["user_id"])
            .append_column("user", pa.array(["x"] * pq.read_metadata(bad).num_rows))
        )
        pq.write_table(table, bad)
        message = rf"{bad}: column 'user_id' \(UInt64\) of analytics.api_requests is missing"
    with pytest.raises(LandingZoneError, match=message):
        ingest(SparkStager(spark), engine, loaded, API)
    with engine.get_client() as client:
        mark = read_watermark(client, API)
        count = int(client.command("SELECT count() FROM analytics.api_requests"))
        shadows = int(client.command("SELECT count() FROM system.tables WHERE name LIKE '\\_chmv\\_shadow%'"))
    assert mark.last_processed_ts == good.watermark_after and mark.status == "committed"
    assert count == good.rows_inserted and shadows == 0


def test_corrupt_data_pages_are_reported_by_spark_with_the_file(spark, setup, lake):
    loaded, engine, landing = setup
    deliver(lake[0], landing, until="2026-08-01/hour=06")
    path = sorted((landing / "analytics.api_requests" / "date=2026-08-01").glob("*.parquet"))[2]
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    for i in range(4, len(data) - footer):  # keep magic and footer: only the data pages are garbage
        data[i] = 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(LandingZoneError, match=rf"{path.name}.*Spark could not read it"):
        ingest(SparkStager(spark), engine, loaded, API)
    with engine.get_client() as client:
        assert int(client.command("SELECT count() FROM analytics.api_requests")) == 0
        assert read_watermark(client, API) is None
