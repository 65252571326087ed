"""Paced ingestion (real Spark, the embedded engine): a range run over many days of a new source is cut into inserts
and stays exact; with merges stopped and low limits on a target its MVs write, a load waits and completes exactly where
an unpaced one fails with "Too many parts", and gives up past its limit saying why, with a watermark that stays true.

The lake is raw_events over 150 days, one landing file per day; its rows feed the chain events_agg (monthly) →
events_daily → events_weekly. The embedded engine forgets ``SYSTEM STOP MERGES`` when it is closed, so a pressed test
holds one client for the pressure and the load.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import clickhouse_connect
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from chmv_assets import demo_data
from chmv_assets.ddl.config import PacingConfig
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.engine.loads.load import ingest
from chmv_assets.engine.pacing.pacer import pacer_for
from chmv_assets.engine.watermarks import read_watermark
from chmv_assets.engine_logs import engine_messages
from chmv_assets.errors import ServerBusy
from spark.staging import SparkStager

from support.engines import HeldClient, make_engine
from support.spark import copy_engine, digest, recompute, ref, with_landing

pytestmark = pytest.mark.worker_seconds(60)

SOURCE = ref("raw_events")
CHAIN = [ref("events_agg"), ref("events_daily"), ref("events_weekly")]
DAYS = 150
START = date(2026, 8, 1)
QUICK = {"backoff_base_seconds": 0.05, "backoff_max_seconds": 0.2, "max_wait_seconds": 60.0}


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> tuple[Path, int]:
    """150 days of raw_events, one landing file per day (arriving at its end); the distinct rows."""
    root = tmp_path_factory.mktemp("lake")
    rows = demo_data.generate("analytics.raw_events", 6_000, start=START, days=DAYS, seed=19)
    days = pa.compute.cast(rows["timestamp"], pa.date32()).to_pylist()
    for offset in range(DAYS):
        day = START + timedelta(days=offset)
        folder = root / "analytics.raw_events" / f"date={day:%Y-%m-%d}"
        folder.mkdir(parents=True)
        pq.write_table(rows.filter(pa.array([d == day for d in days])), folder / "hour=23.parquet")
    return root, rows.group_by(rows.column_names).aggregate([]).num_rows


@pytest.fixture(scope="module")
def base(tmp_path_factory, example) -> Path:
    path = tmp_path_factory.mktemp("engine") / "chdb"
    make_engine(path, example)
    return path


def _loaded(example: LoadedProject, root: Path, **pacing) -> LoadedProject:
    loaded = with_landing(example, root)
    config = loaded.config.model_copy(update={"pacing": PacingConfig(**{**QUICK, **pacing})})
    return LoadedProject(config=config, project=loaded.project)


def _range() -> set[str]:
    return {f"{START + timedelta(days=d):%Y-%m-%d}" for d in range(DAYS)}


def _assert_exact(client, loaded: LoadedProject, rows: int, where: str | None = None) -> None:
    """The source holds ``rows`` rows, each once; every target of the chain equals its recompute (``where``)."""
    keys = "uniqExact(timestamp, user_id, event_type)"
    count, distinct = client.query(f"SELECT count(), {keys} FROM analytics.raw_events").result_rows[0]
    assert count == distinct == rows  # nothing lost, nothing twice
    for target in CHAIN:
        assert digest(client, loaded, target, where) == recompute(client, loaded, target, where), target.fqn


def _press(client) -> None:
    """Merges stopped on events_agg, its limits lowered to 3 / 5, and five parts in its August partition: five rows
    of event type ``seed`` (the lake has none) written there by someone else, one part each."""
    client.command(
        "ALTER TABLE analytics.events_agg MODIFY SETTING parts_to_delay_insert = 3, parts_to_throw_insert = 5"
    )
    client.command("SYSTEM STOP MERGES analytics.events_agg")
    for n in range(5):
        client.command(
            f"INSERT INTO analytics.events_agg VALUES ('2026-08-0{n + 1}', '2026-08-0{n + 1} 00:00:00', 0, 'seed', 1, 1)",
            settings={"async_insert": 0},
        )


def _relieve(path: Path, log: list[str]):
    """The run log's sink; at each wait, an operator starts merges again and merges events_agg."""

    def say(line: str) -> None:
        log.append(line)
        if ": waiting " in line:
            operator = clickhouse_connect.get_client(dsn=f"chdb://{path}")
            operator.command("SYSTEM START MERGES analytics.events_agg")
            operator.command("OPTIMIZE TABLE analytics.events_agg FINAL")

    return say


def test_a_range_run_over_many_days_of_a_new_source_is_cut_into_inserts_and_exact(
    spark, tmp_path: Path, base: Path, example, lake
) -> None:
    root, distinct = lake
    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _loaded(example, root, max_partitions_per_insert=40)
    log: list[str] = []
    with engine_messages(log.append):
        result = ingest(SparkStager(spark), engine, loaded, SOURCE, days=_range())
    assert result.files == DAYS and result.rows_inserted == distinct
    assert "analytics.raw_events: 150 days of rows, in 4 inserts of at most 40" in log
    assert not [line for line in log if "waiting" in line or "refused" in line]  # an idle server: no wait
    with engine.get_client() as client:
        _assert_exact(client, loaded, distinct)
        assert read_watermark(client, SOURCE).status == "committed"
    again = ingest(SparkStager(spark), engine, loaded, SOURCE, days=_range())
    assert again.rows_inserted == 0  # a replay inserts nothing


def test_under_merge_pressure_an_unpaced_load_fails_and_a_paced_one_waits_and_completes_exactly(
    spark, tmp_path: Path, base: Path, example, lake
) -> None:
    root, distinct = lake
    unpaced = copy_engine(base, tmp_path / "unpaced")
    with unpaced.get_client() as client:
        _press(client)
        with pytest.raises(DatabaseError, match="TOO_MANY_PARTS"):
            ingest(SparkStager(spark), HeldClient(client), _loaded(example, root, enabled=False), SOURCE, days=_range())

    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _loaded(example, root, max_partitions_per_insert=30)
    log: list[str] = []
    with engine.get_client() as client, engine_messages(_relieve(tmp_path / "chdb", log)):
        _press(client)
        result = ingest(SparkStager(spark), HeldClient(client), loaded, SOURCE, days=_range())
        assert result.rows_inserted == distinct
        _assert_exact(client, loaded, distinct, where="event_type != 'seed'")
    waits = [line for line in log if ": waiting " in line]
    assert waits and waits[0].startswith("analytics.raw_events: insert 1/5 of the batch: waiting ")
    assert "partition 202608 of analytics.events_agg holds 5 active parts (chmv waits from 3" in waits[0]


def test_a_load_that_gives_up_keeps_what_it_inserted_and_the_next_load_takes_the_rest(
    spark, tmp_path: Path, base: Path, example, lake
) -> None:
    root, distinct = lake
    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _loaded(example, root, max_partitions_per_insert=10, max_wait_seconds=0.3)
    with engine.get_client() as client:
        client.command("ALTER TABLE analytics.events_agg MODIFY SETTING parts_to_delay_insert = 3")
        client.command("SYSTEM STOP MERGES analytics.events_agg")
        with pytest.raises(ServerBusy) as raised:  # each insert of ten days adds a part to August: the fourth waits
            ingest(SparkStager(spark), HeldClient(client), loaded, SOURCE, days=_range())
        mark = read_watermark(client, SOURCE)
        loaded_rows = int(client.command("SELECT count() FROM analytics.raw_events"))
    message = str(raised.value)
    assert "gave up after waiting" in message and "of analytics.events_agg holds 3 active parts" in message
    assert "this load inserted" in message and "the next load takes the rest" in message
    assert mark.status == "committed" and 0 < loaded_rows < distinct
    newest = mark.last_processed_ts
    assert newest is not None and f"every staged row up to {newest}" in message
    assert int(client_count(engine, f"timestamp > '{newest}'")) == 0 and newest.month == 8
    # the operator puts the limit back (and merges run again in a fresh session): the next load takes the rest
    with engine.get_client() as client:
        client.command("ALTER TABLE analytics.events_agg RESET SETTING parts_to_delay_insert")
    result = ingest(SparkStager(spark), engine, loaded, SOURCE, days=_range())
    assert result.rows_inserted == distinct - loaded_rows
    with engine.get_client() as client:
        _assert_exact(client, loaded, distinct)


def client_count(engine, where: str) -> int:
    with engine.get_client() as client:
        return int(client.command(f"SELECT count() FROM analytics.raw_events WHERE {where}"))


def test_a_load_is_not_held_by_a_partition_it_does_not_write(spark, tmp_path: Path, base: Path, example, lake) -> None:
    """Issue 25, class 7: pacing looks at the partitions the load's inserts write (from their event-time span). With
    December of events_agg over its limit and merges stopped, a load of August's days does not wait (it used to wait
    for December: here past a 0.3 s limit) and is exact."""
    root, _ = lake
    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _loaded(example, root, max_wait_seconds=0.3)
    august = {f"{START + timedelta(days=d):%Y-%m-%d}" for d in range(20)}
    with engine.get_client() as client:
        client.command(
            "ALTER TABLE analytics.events_agg MODIFY SETTING parts_to_delay_insert = 3, parts_to_throw_insert = 5"
        )
        client.command("SYSTEM STOP MERGES analytics.events_agg")
        for n in range(4):
            client.command(
                f"INSERT INTO analytics.events_agg VALUES ('2026-12-0{n + 1}', '2026-12-0{n + 1} 00:00:00', 0, 'seed', "
                "1, 1)",
                settings={"async_insert": 0},
            )
        result = ingest(SparkStager(spark), HeldClient(client), loaded, SOURCE, days=august)
        assert result.rows_inserted > 0
        assert pacer_for(client).stats.waited_for == []
        count = int(client.command("SELECT count() FROM analytics.raw_events"))
        assert count == result.rows_inserted
        _assert_exact(client, loaded, count, where="event_type != 'seed'")
