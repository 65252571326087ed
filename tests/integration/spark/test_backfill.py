"""Partition backfills from the landing zone: equal to a recompute, siblings untouched, exact under ingestion."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.partitioning import PartitionWindow
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.loads.load import ingest
from chmv_assets.engine.rebuild.planner import observe, plan_rebuild
from chmv_assets.engine_logs import engine_messages
from resources.clickhouse import ClickHouseResource
from spark.staging import SparkStager

from support.spark import backfill, copy_engine, deliver, digest, recompute, ref, with_landing, write_lake

pytestmark = pytest.mark.worker_seconds(65)

DAY2 = PartitionWindow("2026-08-02", datetime(2026, 8, 2, tzinfo=UTC), datetime(2026, 8, 3, tzinfo=UTC))
DAY3 = PartitionWindow("2026-08-03", datetime(2026, 8, 3, tzinfo=UTC), datetime(2026, 8, 4, tzinfo=UTC))


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    write_lake(root)
    return root


@pytest.fixture(scope="module")
def ingested_all(spark, tmp_path_factory, example, lake) -> tuple[LoadedProject, Path]:
    """Every landing file ingested (the live MVs built the targets), once per module: the truth backfills must
    reproduce. Tests change data, so they work on copies (``loaded_all``); the landing zone is only read."""
    root = tmp_path_factory.mktemp("ingested_all")
    landing = root / "landing"
    loaded = with_landing(example, landing)
    engine = ClickHouseResource(dsn=f"chdb://{root / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    deliver(lake, landing)
    for source in ("api_requests", "all_events", "raw_webhooks"):
        ingest(SparkStager(spark), engine, loaded, ref(source))
    return loaded, root / "chdb"


@pytest.fixture
def loaded_all(ingested_all, tmp_path) -> tuple[LoadedProject, ClickHouseResource]:
    """A private copy of the ingested engine, for a test that truncates, deletes or inserts."""
    loaded, engine_dir = ingested_all
    return loaded, copy_engine(engine_dir, tmp_path / "chdb")


@pytest.mark.parametrize(
    ("target", "windows", "where"),
    [
        ("hourly_endpoint_stats", [DAY2], "toDate(hour) = '2026-08-02'"),  # AggregatingMergeTree
        ("entity_latest", [None], None),  # ReplacingMergeTree, unpartitioned
        ("error_events", [DAY2, DAY3], "toDate(timestamp) >= '2026-08-02'"),  # routing, a range in one run
    ],
    ids=["aggregating", "replacing", "routing"],
)
def test_backfill_from_landing_equals_recompute(spark, loaded_all, target, windows, where):
    loaded, engine = loaded_all
    t = ref(target)
    with engine.get_client() as client:
        expected = recompute(client, loaded, t, where)
        client.command(f"TRUNCATE TABLE analytics.{target}")  # lose the partition(s)
        assert digest(client, loaded, t, where) != expected
    results = backfill(spark, engine, loaded, t, windows, engine="spark")
    assert [r.engine for r in results] == ["spark"] * len(windows)
    assert all(r.rows_staged > 0 and r.rows_written > 0 for r in results)
    with engine.get_client() as client:
        assert digest(client, loaded, t, where) == expected
    # A re-run of a completed partition is a no-op in effect.
    backfill(spark, engine, loaded, t, windows, engine="spark")
    with engine.get_client() as client:
        assert digest(client, loaded, t, where) == expected


def test_backfill_leaves_source_and_sibling_mvs_untouched(spark, loaded_all):
    loaded, engine = loaded_all
    siblings = [ref("metric_events"), ref("audit_log")]
    parts_sql = (
        "SELECT table, name, rows FROM system.parts WHERE active AND database = 'analytics' "
        "AND table IN ('all_events', 'metric_events', 'audit_log') ORDER BY ALL"
    )
    with engine.get_client() as client:
        before = client.query(parts_sql).result_rows
        sibling_rows = [digest(client, loaded, s) for s in siblings]
    backfill(spark, engine, loaded, ref("error_events"), [DAY2], engine="spark")
    with engine.get_client() as client:
        assert client.query(parts_sql).result_rows == before  # not one part written or replaced
        assert [digest(client, loaded, s) for s in siblings] == sibling_rows


def test_auto_engine_uses_spark_only_where_the_source_lost_the_window(spark, loaded_all):
    loaded, engine = loaded_all
    t = ref("hourly_endpoint_stats")
    root = loaded.config.ingestion.landing_dir
    with engine.get_client() as client:
        expected = recompute(client, loaded, t, "toDate(hour) IN ('2026-08-02', '2026-08-03')")
        # Retention: the source no longer holds the first two days.
        client.command(
            "ALTER TABLE analytics.api_requests DELETE WHERE timestamp < '2026-08-03 00:00:00'",
            settings={"mutations_sync": 2},
        )
        observed = observe(client, loaded, t, root=Path(root), windows=[DAY2, DAY3])
        plan = plan_rebuild(loaded, t, [DAY2, DAY3], observed, root=Path(root))
        assert [(s.key, s.engine) for s in plan.steps] == [("2026-08-02", "spark"), ("2026-08-03", "clickhouse")]
        assert plan.steps[0].reason.startswith(
            "analytics.api_requests holds no rows of the window while the target partition holds"
        )
        assert "the landing zone holds it" in plan.steps[0].reason
        assert " rows from 2026-08-03 " in plan.steps[0].reason  # how far back the source holds data
    results = backfill(spark, engine, loaded, t, [DAY2, DAY3])
    assert [(r.partition, r.engine) for r in results] == [("2026-08-02", "spark"), ("2026-08-03", "clickhouse")]
    with engine.get_client() as client:
        assert digest(client, loaded, t, "toDate(hour) IN ('2026-08-02', '2026-08-03')") == expected


def test_backfill_while_ingestion_keeps_loading_the_same_partition_ends_exact(spark, tmp_path, example, lake):
    """A thread delivers and ingests day 3 hour by hour while the same partition is backfilled repeatedly."""
    landing = tmp_path / "landing"
    loaded = with_landing(example, landing)
    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    api = ref("api_requests")
    with engine.get_client() as client:
        apply(client, loaded.project)
    deliver(lake, landing, until="2026-08-03/hour=02", only="analytics.api_requests")
    ingest(SparkStager(spark), engine, loaded, api)
    stop = threading.Event()
    errors: list[BaseException] = []
    loads: list[int] = []

    def ingestion() -> None:
        try:
            for hour in range(3, 24, 2):
                deliver(lake, landing, until=f"2026-08-03/hour={hour:02d}", only="analytics.api_requests")
                loads.append(ingest(SparkStager(spark), engine, loaded, api).rows_inserted)
        except BaseException as err:  # surfaced in the main thread
            errors.append(err)
        finally:
            stop.set()

    thread = threading.Thread(target=ingestion)
    thread.start()
    backfills = []
    while not stop.is_set() or not backfills:
        backfills += backfill(spark, engine, loaded, ref("hourly_endpoint_stats"), [DAY3], engine="spark")
    thread.join()
    assert not errors, errors
    # The rest arrives after the last backfill and flows through the live MV only: no repair at the end.
    deliver(lake, landing, only="analytics.api_requests")
    ingest(SparkStager(spark), engine, loaded, api)
    assert sum(1 for n in loads if n > 0) >= 5 and len(backfills) >= 2
    assert len({r.cutoff for r in backfills}) >= 2  # the cutoff moved while the partition was rebuilt
    with engine.get_client() as client:
        where = "toDate(hour) = '2026-08-03'"
        assert digest(client, loaded, ref("hourly_endpoint_stats"), where) == recompute(
            client, loaded, ref("hourly_endpoint_stats"), where
        )
        count, keys = client.query(
            "SELECT count(), uniqExact(timestamp, endpoint, user_id) FROM analytics.api_requests"
        ).result_rows[0]
    assert count == keys


def test_a_writer_waits_for_the_swap_of_a_backfill(spark, loaded_all):
    """Deterministic half of the protocol: an insert into the source during the swap waits on the gate."""
    from chmv_assets.engine.ingest.cutoff import source_gate

    loaded, engine = loaded_all
    api, t = ref("api_requests"), ref("hourly_endpoint_stats")
    done = threading.Event()
    threads: list[threading.Thread] = []

    def writer() -> None:
        with source_gate([api]), engine.get_client() as client:
            client.command("INSERT INTO analytics.api_requests VALUES ('2026-08-02 10:30:00', '/late', 7, 9, 200)")
        done.set()

    def log(message: str) -> None:
        if "running the MV's own SELECT" in message and not threads:
            threads.append(threading.Thread(target=writer))
            threads[0].start()
            assert not done.wait(1.0), "the writer got into the source while the partition was being swapped"

    with engine_messages(log):  # the writer starts at the step's first message
        backfill(spark, engine, loaded, t, [DAY2], engine="spark")
    threads[0].join(10)
    assert done.is_set()
    with engine.get_client() as client:
        where = "toDate(hour) = '2026-08-02'"
        assert digest(client, loaded, t, where) == recompute(client, loaded, t, where)
        assert ("/late",) in client.query("SELECT DISTINCT endpoint FROM analytics.hourly_endpoint_stats").result_rows
