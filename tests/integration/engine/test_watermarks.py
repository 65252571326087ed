"""Ingestion watermarks in chmv_meta.ingestion_watermarks: versions, intent vs commit, never backwards; the source gate."""

from __future__ import annotations

import os
import threading
from datetime import datetime

import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.ingest.cutoff import current_watermark, cutoff_of, gate_holder, source_gate
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.watermarks import begin_load, commit_load, read_watermark, write_watermark
from chmv_assets.engine_logs import engine_messages
from chmv_assets.errors import EngineBusyError
from resources.clickhouse import ClickHouseResource

SRC = ObjectRef(database="analytics", name="api_requests")
X = ObjectRef(database="landing", name="x")
S = ObjectRef(database="s", name="t")


@pytest.fixture
def engine(tmp_path, example):
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with resource.get_client() as client:
        apply(client, example.project)
    return resource


def test_watermark_is_absent_then_read_back_exactly(engine):
    with engine.get_client() as client:
        assert read_watermark(client, X) is None
        mark = write_watermark(
            client,
            X,
            last_processed_ts=datetime(2026, 8, 1, 12, 30, 5, 250000),
            batch_id="b1",
            status="committed",
            rows=42,
        )
        back = read_watermark(client, X)
    assert back == mark
    assert back.last_processed_ts == datetime(2026, 8, 1, 12, 30, 5, 250000)


def test_intent_does_not_move_the_watermark_and_commit_never_goes_back(engine):
    with engine.get_client() as client:
        first = commit_load(client, S, "b1", newest=datetime(2026, 8, 2), rows=10, previous=None)
        intent = begin_load(client, S, "b2", first)
        seen = read_watermark(client, S)
        assert seen.interrupted and seen.last_processed_ts == datetime(2026, 8, 2) and seen.batch_id == "b2"
        older = commit_load(client, S, "b2", newest=datetime(2026, 8, 1), rows=0, previous=intent)
        assert older.last_processed_ts == datetime(2026, 8, 2)
        final = read_watermark(client, S)
        # Every record is kept until merges collapse them; the highest version wins regardless.
        client.command("OPTIMIZE TABLE chmv_meta.ingestion_watermarks FINAL")
        assert read_watermark(client, S) == final
    assert final.status == "committed" and not final.interrupted and final.version > intent.version > first.version


def test_values_are_bound_not_spliced(engine):
    nasty = "x'); DROP TABLE chmv_meta.ingestion_watermarks; --"
    source = ObjectRef(database=nasty, name=nasty)
    with engine.get_client() as client:
        write_watermark(client, source, last_processed_ts=None, batch_id=nasty, status="committed")
        mark = read_watermark(client, source)
        assert mark.batch_id == nasty and mark.last_processed_ts is None and mark.source == source
        assert int(client.command("SELECT count() FROM chmv_meta.ingestion_watermarks")) == 1


def test_first_watermark_starts_where_the_source_is(engine):
    with engine.get_client() as client:
        assert current_watermark(client, SRC, "timestamp") is None  # empty source, nothing to establish
        client.command("INSERT INTO analytics.api_requests VALUES ('2026-08-03 10:00:00', '/a', 1, 5, 200)")
        mark = current_watermark(client, SRC, "timestamp")
    assert mark.last_processed_ts == datetime(2026, 8, 3, 10) and mark.batch_id == "initial"
    assert cutoff_of(mark, 15) == datetime(2026, 8, 3, 9, 45)


def test_gate_excludes_other_threads_and_is_reentrant(engine):
    """While one thread holds the gate (twice: re-entrant), another cannot take it; after the release it can."""
    outcomes: list[str] = []

    def other(timeout: float) -> None:
        try:
            with source_gate([SRC], timeout=timeout):
                outcomes.append("entered")
        except EngineBusyError:
            outcomes.append("refused")

    def in_thread(timeout: float) -> None:
        thread = threading.Thread(target=other, args=(timeout,))
        thread.start()
        thread.join(30)

    with source_gate([SRC]), source_gate([SRC]):  # re-entrant in the holding thread
        in_thread(0.05)
    in_thread(5.0)
    assert outcomes == ["refused", "entered"]


def test_gate_times_out_with_a_clear_error_naming_its_holder(engine):
    """Issue 25, class 7: one that waits for a gate, or gives up, is told who holds it (process, thread, what it does),
    not "another ingestion or backfill"; a re-entrant hold released inside does not erase the note."""
    entered = threading.Event()
    release = threading.Event()
    doing = "chmv rebuild: rebuild of analytics.x 2026-08-03 (run r1): reading the sources and swapping"

    def holder() -> None:
        with source_gate([SRC], holder=doing):
            with source_gate([SRC], holder="inner"):
                pass
            entered.set()
            release.wait(5)

    thread = threading.Thread(target=holder, name="the-holder")
    thread.start()
    entered.wait(5)
    log: list[str] = []
    try:
        with (
            engine_messages(log.append),
            pytest.raises(EngineBusyError, match=r"write gate of analytics.api_requests .* stayed held") as raised,
            source_gate([SRC], timeout=0.2),
        ):
            pass
    finally:
        release.set()
        thread.join(5)
    held_by = f"pid {os.getpid()}, thread the-holder: {doing}, for "
    assert held_by in str(raised.value) and "another ingestion or backfill" not in str(raised.value)
    assert [line for line in log if line.startswith("waiting for the write gate of analytics.api_requests")]
    assert held_by in log[0]
    assert "did not say who it is" in gate_holder(SRC)  # released, and its note with it
    with source_gate([SRC], timeout=0):
        assert gate_holder(SRC).startswith(f"pid {os.getpid()}, thread MainThread: a chmv writer")
