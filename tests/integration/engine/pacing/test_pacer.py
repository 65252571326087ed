"""Pacing on the embedded engine: a backfill under merge pressure waits and completes exactly, or gives up saying why;
"Too many parts" refusals are retried, other errors are not; big re-derivations are cut into inserts.

Merge pressure is made for real: ``SYSTEM STOP MERGES`` on a target whose SETTINGS lower its part limits, and small
inserts through its MV. The relief is an operator's: merges started again and the partition merged, from a client of
its own, at the first wait the run logs (never a sleep). The embedded engine forgets ``SYSTEM STOP MERGES`` when it is
closed, so each test holds one client for the pressure and the backfill (as ``chmv apply`` hands the executor one).
"""

from __future__ import annotations

import shutil
import threading
from datetime import datetime
from pathlib import Path

import clickhouse_connect
import pytest

from chmv_assets.ddl.config import PacingConfig
from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.pacing.pacer import Pacer, pacer_for
from chmv_assets.engine.rebuild.executor import execute, plan_for
from chmv_assets.engine_logs import engine_messages
from chmv_assets.errors import ServerBusy

from support.engines import HeldClient, make_engine
from support.spark import copy_engine, digest, recompute, ref

pytestmark = pytest.mark.worker_seconds(40)

ERRORS = ref("error_events")  # daily partitions (toYYYYMMDD), fed by errors_mv from all_events
DAYS = [datetime(2026, 8, d) for d in (2, 3, 4)]
PRESSED = "20260803"
#: Pacing that looks again quickly (the defaults pause 2 s, doubling to 30 s).
QUICK = {"backoff_base_seconds": 0.05, "backoff_max_seconds": 0.2, "max_wait_seconds": 60.0}


@pytest.fixture(scope="module")
def base(tmp_path_factory, example) -> Path:
    """A closed engine with the example and 20k demo rows; every test works on a copy."""
    path = tmp_path_factory.mktemp("pacing") / "chdb"
    make_engine(path, example, rows=20_000)
    return path


def _with_pacing(example: LoadedProject, **pacing) -> LoadedProject:
    config = example.config.model_copy(update={"pacing": PacingConfig(**{**QUICK, **pacing})})
    return LoadedProject(config=config, project=example.project)


def _backfill(client, loaded: LoadedProject, say) -> list:
    """What a backfill of 2026-08-02..04 of error_events runs: the planner, then the executor, on ``client``; its
    log messages to ``say``."""
    plan = plan_for(HeldClient(client), loaded, ERRORS, _windows())
    with engine_messages(say):
        return execute(plan, loaded, client=client)


def _press(client) -> None:
    """Merges stopped on error_events, its limits lowered, and six parts in partition 2026-08-03."""
    client.command(
        "ALTER TABLE analytics.error_events MODIFY SETTING parts_to_delay_insert = 4, parts_to_throw_insert = 8"
    )
    client.command("SYSTEM STOP MERGES analytics.error_events")
    for n in range(6):  # one block each: one part each in the target's partition
        client.command(
            f"INSERT INTO analytics.all_events SELECT toDateTime('2026-08-03 10:00:00') + number + {n * 100}, "
            "'click', 'error', 0, 'pressure' FROM numbers(3)",
            settings={"async_insert": 0},
        )
    assert _parts(client) >= 6


def _parts(client) -> int:
    return int(
        client.command(
            "SELECT count() FROM system.parts WHERE active AND database = 'analytics' AND table = 'error_events' "
            f"AND partition_id = '{PRESSED}'"
        )
    )


def _windows():
    return [window_at(day, Grain.DAY) for day in DAYS]


def test_a_backfill_under_merge_pressure_waits_then_completes_exactly(tmp_path: Path, base: Path, example) -> None:
    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _with_pacing(example)
    log: list[str] = []
    relieved: list[int] = []

    def say(line: str) -> None:
        log.append(line)
        if ": waiting " in line and not relieved:  # the operator starts merges again at the first wait
            operator = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path / 'chdb'}")
            operator.command("SYSTEM START MERGES analytics.error_events")
            operator.command(f"OPTIMIZE TABLE analytics.error_events PARTITION ID '{PRESSED}' FINAL")
            relieved.append(_parts(operator))

    with engine.get_client() as client:
        _press(client)
        pressed = _parts(client)  # six inserts, and the part the demo rows made
        results = _backfill(client, loaded, say)
        where = "toDate(timestamp) BETWEEN '2026-08-02' AND '2026-08-04'"
        assert digest(client, loaded, ERRORS, where) == recompute(client, loaded, ERRORS, where)
        assert client.command("SELECT count() FROM analytics.error_events WHERE payload = 'pressure'") == 18
    assert relieved == [1] and [r.partition for r in results] == ["2026-08-02", "2026-08-03", "2026-08-04"]
    waits = [line for line in log if ": waiting " in line]
    assert len(waits) == 1, "\n".join(log)
    # 2026-08-02 is not held by the pressed partition (it writes none of it): its neighbour waits
    assert waits[0].startswith("analytics.error_events 2026-08-03: fill: waiting ")
    assert f"partition {PRESSED} of analytics.error_events holds {pressed} active parts (chmv waits from 4" in waits[0]
    assert "parts_to_delay_insert=4" in waits[0] and "parts_to_throw_insert=8" in waits[0]
    assert any("the server has room again; going on after waiting" in line for line in log)


def test_a_backfill_gives_up_past_its_limit_naming_the_cause_and_changes_nothing(
    tmp_path: Path, base: Path, example
) -> None:
    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _with_pacing(example, max_wait_seconds=0.5)
    log: list[str] = []
    with engine.get_client() as client:
        _press(client)
        pressed = _parts(client)
        before = digest(client, loaded, ERRORS)
        with pytest.raises(ServerBusy) as raised:
            _backfill(client, loaded, log.append)
        assert digest(client, loaded, ERRORS) == before  # nothing swapped
        shadows = client.command("SELECT count() FROM system.tables WHERE name LIKE '_chmv_shadow%'")
        assert int(shadows) == 0  # the shadow was dropped
    message = str(raised.value)
    assert message.startswith("analytics.error_events 2026-08-03: fill: gave up after waiting")
    assert f"partition {PRESSED} of analytics.error_events holds {pressed} active parts" in message
    assert "SYSTEM START MERGES" in message and "[pacing] max_wait_seconds=0.5" in message
    assert "Nothing of this insert was written" in message


def test_pacing_off_runs_at_once(tmp_path: Path, base: Path, example) -> None:
    """``[pacing] enabled = false``: the same backfill neither looks at the server nor waits."""
    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _with_pacing(example, enabled=False)
    log: list[str] = []
    with engine.get_client() as client:
        _press(client)
        _backfill(client, loaded, log.append)
        assert pacer_for(client).stats.looks == 0
    assert not [line for line in log if "waiting" in line]


def test_too_many_parts_is_retried_and_other_errors_are_not(tmp_path: Path) -> None:
    path = tmp_path / "chdb"
    client = clickhouse_connect.get_client(dsn=f"chdb://{path}")
    client.command("CREATE DATABASE d")
    client.command(
        "CREATE TABLE d.t (day Date, n UInt32) ENGINE = MergeTree PARTITION BY day ORDER BY n "
        "SETTINGS parts_to_delay_insert = 100, parts_to_throw_insert = 3"
    )
    client.command("SYSTEM STOP MERGES d.t")
    for n in range(3):
        client.command(f"INSERT INTO d.t VALUES ('2026-01-01', {n})", settings={"async_insert": 0})
    log: list[str] = []

    def say(line: str) -> None:
        log.append(line)
        if "refused" in line and len(log) == 1:
            operator = clickhouse_connect.get_client(dsn=f"chdb://{path}")
            operator.command("SYSTEM START MERGES d.t")
            operator.command("OPTIMIZE TABLE d.t FINAL")

    pacer = Pacer(client, PacingConfig(**QUICK))
    insert = "INSERT INTO d.t VALUES ('2026-01-01', 9)"
    with engine_messages(say):
        pacer.run("d.t: insert", lambda: client.command(insert, settings={"async_insert": 0}), watch=[])
    assert "the server refused it (TOO_MANY_PARTS: Code: 252." in log[0] and "trying again in" in log[0]
    assert pacer.stats.retries == 1
    assert client.command("SELECT count() FROM d.t") == 4
    with pytest.raises(Exception, match="UNKNOWN_TABLE"):  # not the server's load: raised at once
        pacer.run("d.nope: insert", lambda: client.command("INSERT INTO d.nope VALUES (1)"), watch=[])
    assert pacer.stats.retries == 1
    client.close()
    shutil.rmtree(path, ignore_errors=True)


def test_refusals_past_the_attempts_give_up_with_what_to_do(tmp_path: Path) -> None:
    client = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path / 'chdb'}")
    client.command("CREATE DATABASE d")
    client.command("CREATE TABLE d.t (n UInt32) ENGINE = MergeTree ORDER BY n SETTINGS parts_to_throw_insert = 1")
    client.command("INSERT INTO d.t VALUES (1)", settings={"async_insert": 0})
    pacer = pacer_for(client, PacingConfig(**{**QUICK, "retry_attempts": 3}))
    with pytest.raises(ServerBusy, match=r"refused it 3 times \(TOO_MANY_PARTS\); nothing of it was written"):
        pacer.run("d.t: insert", lambda: client.command("INSERT INTO d.t VALUES (2)", settings={"async_insert": 0}))
    assert pacer.stats.retries == 2 and client.command("SELECT count() FROM d.t") == 1
    client.close()


def test_a_rederivation_of_many_partitions_is_cut_into_inserts_and_stays_exact(
    tmp_path: Path, base: Path, example
) -> None:
    """The one read of ``chmv apply``'s batches (a ``one_read`` plan) under ``max_partitions_per_insert = 4``: 30 daily
    partitions are read by 8 inserts of their own partitions each, and equal the recompute."""
    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _with_pacing(example, max_partitions_per_insert=4)
    windows = [window_at(datetime(2026, 8, d), Grain.DAY) for d in range(1, 31)]
    plan = plan_for(engine, loaded, ERRORS, windows, one_read=True)
    log: list[str] = []
    with engine.get_client() as client, engine_messages(log.append):
        results = execute(plan, loaded, client=client)
        assert len(results) == 30
        assert any("(8 inserts of at most 4 partitions)" in line for line in log)
        where = "toDate(timestamp) BETWEEN '2026-08-01' AND '2026-08-30'"
        assert digest(client, loaded, ERRORS, where) == recompute(client, loaded, ERRORS, where)


def test_a_rebuild_waiting_for_merges_does_not_hold_the_write_gate(tmp_path: Path, base: Path, example) -> None:
    """Issue 25, class 7: pacing looks at the partitions an insert writes: with 2026-08-03 pressed (merges stopped,
    over its limit), the rebuild of 2026-08-02 does not wait (it used to, here past a 0.3 s limit). And a rebuild of
    2026-08-03, which waits for merges, waits without its source's write gate, so chmv's ingestion into the source
    goes on meanwhile (it used to wait up to max_wait_seconds, then fail blaming "another ingestion or backfill"); then
    the rebuild reads and swaps under the gate and the partition is exact. Deterministic: the ingestion takes the gate
    while the rebuild is inside its first wait (held there by its log sink until the ingestion is done)."""
    from chmv_assets.engine.ingest.cutoff import source_gate
    from chmv_assets.engine.rebuild.executor import rebuild_partitions

    engine = copy_engine(base, tmp_path / "chdb")
    loaded = _with_pacing(example)
    waiting, relieve = threading.Event(), threading.Event()
    outcome: dict = {}

    def say(line: str) -> None:
        if ": waiting " in line and "for the server" in line:
            waiting.set()
            relieve.wait(60)  # the rebuild stays in its wait until the ingestion below is done

    with engine.get_client() as client:
        _press(client)
        pressed = _parts(client)
        quick = _with_pacing(example, max_wait_seconds=0.3)
        neighbour = execute(plan_for(HeldClient(client), quick, ERRORS, _windows()[:1]), quick, client=client)
        assert [r.partition for r in neighbour] == ["2026-08-02"] and pacer_for(client).stats.waited_for == []

        def rebuild() -> None:
            try:
                with engine_messages(say, this_thread_only=True):
                    outcome["results"] = rebuild_partitions(
                        HeldClient(client), loaded, ERRORS, [window_at(DAYS[1], Grain.DAY)]
                    )[1]
            except BaseException as error:  # noqa: BLE001 - asserted below
                outcome["error"] = error
                waiting.set()

        thread = threading.Thread(target=rebuild, name="rebuild")
        thread.start()
        try:
            assert waiting.wait(60) and "error" not in outcome, outcome
            with source_gate([ref("all_events")], timeout=0):  # free: chmv's ingestion proceeds at once
                ingestion = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path / 'chdb'}")
                ingestion.command(
                    "INSERT INTO analytics.all_events SELECT toDateTime('2026-08-03 12:00:00') + number, 'click', "
                    "'error', 0, 'ingested' FROM numbers(5)",
                    settings={"async_insert": 0},
                )
            operator = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path / 'chdb'}")
            operator.command("SYSTEM START MERGES analytics.error_events")
            operator.command(f"OPTIMIZE TABLE analytics.error_events PARTITION ID '{PRESSED}' FINAL")
        finally:
            relieve.set()
            thread.join(120)
        assert "error" not in outcome, outcome
        assert [r.partition for r in outcome["results"]] == ["2026-08-03"]
        where = "toDate(timestamp) = '2026-08-03'"
        assert digest(client, loaded, ERRORS, where) == recompute(client, loaded, ERRORS, where)
        assert client.command("SELECT count() FROM analytics.error_events WHERE payload = 'ingested'") == 5
    waited_for = pacer_for(client).stats.waited_for
    assert waited_for and f"partition {PRESSED} of analytics.error_events holds {pressed} active parts" in waited_for[0]
