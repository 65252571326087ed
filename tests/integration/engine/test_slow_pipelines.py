"""A source block committed before a rebuild's read whose MV output lands after the swap is not counted twice.

ClickHouse commits a block to the source before its MVs write their output. Where that output is slow and the insert
shows in no process list (a Buffer table flushed in the background, an asynchronous insert on a server), a rebuild
that read the block and swapped before the output landed held the row twice (issue 25, class 3). Here the live MV
sleeps per row (a JOIN building its right side per block, a loaded server) while chmv's fill of the same SELECT does
not (its fills are the only inserts with ``max_partitions_per_insert_block = 0``), and a writer thread with a client
of its own flushes a Buffer in front of the source (the very flush a Buffer runs in the background).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

import clickhouse_connect
import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.rebuild.executor import rebuild_partitions
from chmv_assets.errors import RacedWrites
from resources.clickhouse import ClickHouseResource

pytestmark = [pytest.mark.slow, pytest.mark.worker_seconds(20)]

#: Seconds the live MV sleeps per row (chmv's fills do not).
LIVE_DELAY = 0.8

DDL = f"""\
CREATE DATABASE IF NOT EXISTS q ENGINE = Atomic;
CREATE TABLE q.events (ts DateTime, k UInt32) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY (k, ts);
CREATE TABLE q.daily (day Date, k UInt32, n UInt64) ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(day) ORDER BY (day, k);
CREATE MATERIALIZED VIEW q.daily_mv TO q.daily AS
SELECT toDate(ts) AS day, k, count() AS n FROM q.events
WHERE sleepEachRow(if(getSetting('max_partitions_per_insert_block') = 0, 0, {LIVE_DELAY})) = 0 GROUP BY day, k;
"""
TOML = """\
partition_start = "2026-01-01"
[rebuild]
race_backoff_seconds = 0.05
"""
#: A Buffer in front of the source that chmv's DDL does not know of (flushed only when asked, here).
BUFFER = (
    "CREATE TABLE q.events_buffer AS q.events "
    "ENGINE = Buffer(q, events, 1, 3600, 3600, 1000000, 1000000, 1000000000, 1000000000)"
)
DAILY = ObjectRef(database="q", name="daily")
JAN = window_at(datetime(2026, 1, 1), "month")
JANUARY = (
    "SELECT day, k, sum(n) FROM q.daily WHERE toYYYYMM(day) = 202601 GROUP BY ALL ORDER BY ALL",
    "SELECT toDate(ts) AS d, k, count() FROM q.events WHERE toYYYYMM(ts) = 202601 GROUP BY ALL ORDER BY ALL",
)
ROUNDS = 5


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slow_pipelines")
    (root / "ddl").mkdir()
    (root / "ddl" / "q.sql").write_text(DDL, encoding="utf-8")
    (root / "ddl" / "chmv.toml").write_text(TOML, encoding="utf-8")
    return root


@pytest.fixture
def engine(base, tmp_path) -> ClickHouseResource:
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with resource.get_client() as client:
        apply(client, load(base / "ddl").project)
        client.command(BUFFER)
        client.command(  # January, fast: an INSERT … SELECT with the fills' setting skips the live MV's sleep
            "INSERT INTO q.events SELECT toDateTime('2026-01-01 00:00:00') + number * 997, number % 20 "
            "FROM numbers(2000) SETTINGS max_partitions_per_insert_block = 0"
        )
    return resource


class BufferFlusher:
    """Per round, a writer chmv does not control: a row of January into the Buffer, then the Buffer's flush (its block
    committed to the source at once, its MV output ``LIVE_DELAY`` later), through a client of its own."""

    def __init__(self, path: str):
        self.client = clickhouse_connect.get_client(dsn=f"chdb://{path}")
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, round_: int) -> None:
        def run() -> None:
            try:
                self.client.command(
                    "INSERT INTO q.events_buffer VALUES ({t:DateTime}, 7)",
                    parameters={"t": datetime(2026, 1, 20, 12, 0, round_)},
                    settings={"async_insert": 0},
                )
                self.client.command("OPTIMIZE TABLE q.events_buffer")
            except BaseException as err:  # noqa: BLE001 - surfaced by join()
                self.error = err

        self.thread = threading.Thread(target=run, daemon=True, name="buffer-flusher")
        self.thread.start()

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(timeout=30)
        if self.error is not None:
            raise self.error


def test_a_block_whose_mv_output_lands_after_the_swap_is_not_counted_twice(engine, base):
    """Each round a Buffer flush commits a row of January to the source and the rebuild starts while its MV output is
    still on its way: every round ends exact (January equals the MV's SELECT over the source) or stops naming the
    partition; never a clean swap with the row twice."""
    loaded = load(base / "ddl")
    assert engine.embedded_path is not None
    flusher = BufferFlusher(engine.embedded_path)
    doubled, clean, refused = [], 0, 0
    with engine.get_client() as client:
        for round_ in range(ROUNDS):
            before = int(client.command("SELECT count() FROM q.events"))
            flusher.start(round_)
            deadline = time.monotonic() + 10
            while int(client.command("SELECT count() FROM q.events")) == before:  # the flush committed the block
                assert time.monotonic() < deadline, "the Buffer never flushed"
                time.sleep(0.002)
            try:
                rebuild_partitions(engine, loaded, DAILY, [JAN])
                clean += 1
                swapped_clean = True
            except RacedWrites as error:
                assert "2026-01-01" in str(error)
                refused += 1
                swapped_clean = False
            flusher.join()
            got, want = (client.query(sql).result_rows for sql in JANUARY)
            extra = sum(g[2] for g in got) - sum(w[2] for w in want)
            if swapped_clean and got != want:
                doubled.append(extra)
    print(f"{ROUNDS} rounds: {clean} clean, {refused} refused, doubled rows in clean swaps: {doubled}")
    assert doubled == [], f"{len(doubled)} of {ROUNDS} clean swaps held rows twice: {doubled}"
    assert clean >= 1
