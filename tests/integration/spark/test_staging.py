"""Staging keeps every value exact on its way from the landing zone through Spark into ClickHouse."""

from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.staging_area import file_relation
from resources.clickhouse import ClickHouseResource
from spark.staging import stage

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
