"""SIGKILL during an ingestion load or a backfill, then a re-run: the targets end exactly as a recompute."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chmv_assets import settings
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.loads.load import ingest
from chmv_assets.engine.watermarks import read_watermark
from resources.clickhouse import ClickHouseResource
from spark.staging import SparkStager

from support.paths import EXAMPLE_DDL, ROOT, TESTS
from support.spark import (
    QUICK_JVM_CONF,
    backfill,
    copy_engine,
    deliver,
    digest,
    recompute,
    ref,
    with_landing,
    write_lake,
)

pytestmark = pytest.mark.worker_seconds(95)
CHILD = """
import sys
from datetime import UTC, datetime
sys.path.insert(0, {tests!r})
from support.spark import ref, with_landing
from pathlib import Path
from chmv_assets.ddl.partitioning import PartitionWindow
from chmv_assets.ddl.loader import load
from resources.clickhouse import ClickHouseResource
from spark.session import get_spark_session
mode, dsn, landing = sys.argv[1:4]
loaded = with_landing(load({ddl!r}), Path(landing))
engine = ClickHouseResource(dsn=dsn)
spark = get_spark_session("local[1]", {jvm!r})
if mode == "ingest":
    from chmv_assets.engine.loads.load import ingest
    from spark.staging import SparkStager
    ingest(SparkStager(spark), engine, loaded, ref("api_requests"))
else:
    from support.spark import backfill
    windows = [PartitionWindow(d, datetime.fromisoformat(d).replace(tzinfo=UTC), datetime.fromisoformat(e).replace(tzinfo=UTC))
               for d, e in (("2026-08-02", "2026-08-03"), ("2026-08-03", "2026-08-04"))]
    backfill(spark, engine, loaded, ref("hourly_endpoint_stats"), windows, engine="spark")
print("finished")
"""


@pytest.fixture(scope="module")
def half_ingested(spark, tmp_path_factory, example) -> tuple[LoadedProject, Path]:
    """api_requests ingested up to 2026-08-02 18:00 and the rest of the lake delivered, once per module: the
    state every kill starts from (each test works on a copy of the engine; the landing zone is only read)."""
    root = tmp_path_factory.mktemp("half_ingested")
    lake, landing = root / "lake", root / "landing"
    write_lake(lake, {"analytics.api_requests": 20_000})
    loaded = with_landing(example, landing)
    engine = ClickHouseResource(dsn=f"chdb://{root / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    deliver(lake, landing, until="2026-08-02/hour=18")
    ingest(SparkStager(spark), engine, loaded, ref("api_requests"))
    deliver(lake, landing)
    return loaded, root / "chdb"


def _child(mode: str, dsn: str, landing, point: str) -> subprocess.CompletedProcess:
    code = CHILD.format(tests=str(TESTS), ddl=str(EXAMPLE_DDL), jvm=QUICK_JVM_CONF)
    env = {**os.environ, settings.CRASH_AT.name: point}
    return subprocess.run(
        [sys.executable, "-c", code, mode, dsn, str(landing)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    ("mode", "point"),
    [("ingest", "ingest:staged"), ("ingest", "ingest:inserted"), ("backfill", "backfill:swapped")],
)
def test_sigkill_then_rerun_ends_exact(spark, tmp_path, half_ingested, mode, point):
    loaded, engine_dir = half_ingested
    landing = loaded.config.ingestion.landing_dir
    engine = copy_engine(engine_dir, tmp_path / "chdb")
    api, target = ref("api_requests"), ref("hourly_endpoint_stats")
    if mode == "backfill":
        ingest(SparkStager(spark), engine, loaded, api)
        with engine.get_client() as client:
            client.command("TRUNCATE TABLE analytics.hourly_endpoint_stats")

    killed = _child(mode, engine.resolved_dsn, landing, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert "finished" not in killed.stdout

    if mode == "ingest":
        again = ingest(SparkStager(spark), engine, loaded, api)
        if point == "ingest:inserted":
            assert again.repaired  # the interrupted load was detected and its partitions rebuilt
    else:
        from datetime import UTC, datetime

        from chmv_assets.ddl.partitioning import PartitionWindow

        windows = [
            PartitionWindow("2026-08-02", datetime(2026, 8, 2, tzinfo=UTC), datetime(2026, 8, 3, tzinfo=UTC)),
            PartitionWindow("2026-08-03", datetime(2026, 8, 3, tzinfo=UTC), datetime(2026, 8, 4, tzinfo=UTC)),
        ]
        backfill(spark, engine, loaded, target, windows, engine="spark")
    with engine.get_client() as client:
        count, keys = client.query(
            "SELECT count(), uniqExact(timestamp, endpoint, user_id) FROM analytics.api_requests"
        ).result_rows[0]
        mark = read_watermark(client, api)
        newest = client.query("SELECT max(timestamp) FROM analytics.api_requests").result_rows[0][0]
        shadows = int(client.command("SELECT count() FROM system.tables WHERE name LIKE '\\\\_chmv\\\\_shadow%'"))
        where = "toDate(hour) >= '2026-08-02'" if mode == "backfill" else None
        assert digest(client, loaded, target, where) == recompute(client, loaded, target, where)
    assert count == keys
    assert mark.status == "committed" and mark.last_processed_ts == newest
    assert shadows == 0
