"""Rebuilds stay exact while writers chmv does not control insert: threads with clients of their own (what every
application, Kafka engine or other host is to a server), no gate, no lease.

Each test gets a copy of one engine holding three closed months and the open one; every verdict is an independent
recompute over the source.
"""

from __future__ import annotations

import logging
import shutil
import threading
from datetime import datetime
from pathlib import Path

import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import floor_to_grain, window_at
from chmv_assets.engine.lifecycle.apply import apply_plan
from chmv_assets.engine.lifecycle.deploy import apply
from chmv_assets.engine.lifecycle.plan import Action
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.lifecycle.preflight import preflight
from chmv_assets.engine.rebuild import deferrals, leases
from chmv_assets.engine.rebuild.executor import rebuild_partitions
from chmv_assets.engine.rebuild.planner import Engine
from chmv_assets.errors import LeaseHeld, RacedWrites, RebuildDeferred
from resources.clickhouse import ClickHouseResource

from support.spark import copy_engine
from support.writers import (
    BY_KEY,
    RECOMPUTE,
    AtStatements,
    DuringFill,
    Racer,
    ThreadWriter,
    load_rows,
    month_matches,
    write_project,
)

pytestmark = [pytest.mark.slow, pytest.mark.worker_seconds(60)]

DAILY, BY_KEY_MV, BY_MONTH = (ObjectRef(database="w", name=n) for n in ("daily", "by_key", "by_month"))
JAN, FEB, MAR = (window_at(datetime(2026, m, 1), "month") for m in (1, 2, 3))
LATE_INTO_JANUARY = (
    "INSERT INTO w.events SELECT toDateTime('2026-01-15 12:00:00') + number, number % 200, 1000007 FROM numbers(10)"
)
STREAM_INTO_NOW = "INSERT INTO w.events SELECT now() - number, number % 200, 1 FROM numbers(5)"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The closed engine every test copies: the schema applied, three closed months and some of the open one."""
    root = tmp_path_factory.mktemp("writers")
    loaded = load(write_project(root))
    resource = ClickHouseResource(dsn=f"chdb://{root / 'chdb'}")
    with resource.get_client() as client:
        apply(client, loaded.project)
        load_rows(client)
    return root


@pytest.fixture
def loaded(base):
    return load(base / "ddl")


@pytest.fixture
def engine(base, tmp_path) -> ClickHouseResource:
    return copy_engine(base / "chdb", tmp_path / "chdb")


def path_of(engine: ClickHouseResource) -> str:
    assert engine.embedded_path is not None
    return engine.embedded_path


def this_month():
    """The open month's window (the server's clock is this machine's)."""
    return window_at(floor_to_grain(datetime.utcnow(), "month"), "month")


def corrupt(client, month: int) -> None:
    """Double a month of the daily target (the live MV keeps writing it)."""
    client.command(f"INSERT INTO w.daily SELECT * FROM w.daily WHERE toYYYYMM(day) = {month}")


def test_a_row_written_during_the_read_is_not_lost(engine, loaded, caplog):
    """The row lands after the shadow's read began and before the swap: its MV output went into the live partition,
    which the swap replaces. The read is found raced and repeated; without that the row's output is lost (main lost
    30 rows so). The insert competes with the read for the two cores: where it ends after the swap the race did not
    happen, and the scenario is played again (at most three times, at least once it must happen)."""
    raced = 0
    for round_ in range(3):
        caplog.clear()
        with engine.get_client() as client:
            corrupt(client, 202601)
        with DuringFill(path_of(engine), LATE_INTO_JANUARY) as writer, caplog.at_level(logging.INFO, "chmv_assets"):
            plan, results = rebuild_partitions(engine, loaded, DAILY, [JAN])
        messages = caplog.messages
        assert writer.inserted_during_fill, "the late row must land while the read runs (else this proves nothing)"
        with engine.get_client() as client:
            assert int(client.command("SELECT count() FROM w.events WHERE v = 1000007")) == 10 * (round_ + 1)
            assert month_matches(client, "daily", 202601)
        if writer.fill_outlived_insert:
            assert results[0].attempts >= 2, messages
            assert any("writes raced the read of 2026-01-01" in m for m in messages)
            raced += 1
            break
    assert raced, "in three rounds the insert never committed while the read ran"


def test_writers_throughout_every_row_counted_once_and_the_open_month_deferred(engine, loaded):
    """Late rows into the closed months and a steady stream into the open one while the closed months are rebuilt,
    twice each, as the assets rebuild them: the closed months equal their recompute; the open month is deferred."""
    late = (
        "INSERT INTO w.events SELECT toDateTime('2026-01-01 00:00:00') + rand() % 7776000, rand(1) % 200, 3 "
        "FROM numbers(20)"
    )
    attempts = []
    with engine.get_client() as client:
        for month in (202601, 202602, 202603):
            corrupt(client, month)
    now = this_month()
    # A late row into every read while it runs (a read that races one is read again), late rows now and then, a
    # steady stream into the open month (never racing the closed months' reads). Four reads at most per partition: the
    # random late rows land in each month every 3 s, so four raced reads in a row stay unlikely (~1e-4).
    path = path_of(engine)
    with ThreadWriter(path, late, 3.0) as lates, ThreadWriter(path, STREAM_INTO_NOW, 0.005), Racer(path) as racer:
        for _ in range(2):
            for target in (DAILY, BY_MONTH):
                plan, results = rebuild_partitions(engine, loaded, target, [JAN, FEB, MAR])
                attempts += [r.attempts for r in results]
        with pytest.raises(RebuildDeferred, match=r"open until .* written by others"):
            rebuild_partitions(engine, loaded, DAILY, [now])
    assert lates.inserts >= 1 and racer.raced >= 6
    with engine.get_client() as client:
        for month in (202601, 202602, 202603):
            assert month_matches(client, "daily", month), month
            assert month_matches(client, "by_month", month), month
        pending = deferrals.pending(client)
    assert [(d.target, d.partition) for d in pending] == [(DAILY, now.key)]
    assert pending[0].closes_at == now.wall_end.replace(minute=15)  # the window's end + close_after_minutes (15)
    assert len(attempts) == 12
    print(f"reads per partition rebuild under writers: {attempts}")


def test_an_open_partition_is_rebuilt_only_when_forced_then_the_deferral_is_settled(engine, loaded):
    now = this_month()
    month = int(now.key[:4] + now.key[5:7])
    with engine.get_client() as client:
        corrupt(client, month)
        before = client.query("SELECT sum(n) FROM w.daily").result_rows
    with pytest.raises(RebuildDeferred, match="Nothing was rebuilt now"):
        rebuild_partitions(engine, loaded, DAILY, [now])
    with engine.get_client() as client:
        assert client.query("SELECT sum(n) FROM w.daily").result_rows == before  # nothing changed
        assert [d.partition for d in deferrals.pending(client)] == [now.key]
    plan, _ = rebuild_partitions(engine, loaded, DAILY, [now], force=True)
    assert plan.steps[0].engine == Engine.CLICKHOUSE and "open until" in plan.steps[0].reason
    with engine.get_client() as client:
        assert month_matches(client, "daily", month)
        assert deferrals.pending(client) == []


def test_a_whole_table_under_a_steady_stream_is_not_swapped_in_raced(engine, base):
    """An unpartitioned MV without TO never closes: each read is checked, and one that raced is not swapped (nor
    read forever); once the writer pauses it rebuilds exactly, and its source stays writable throughout."""
    loaded = load(base / "ddl", rebuild={"race_attempts": 2, "race_backoff_seconds": 0.0})
    with ThreadWriter(path_of(engine), STREAM_INTO_NOW, 0.0), pytest.raises(RacedWrites, match="through 2 attempts"):
        rebuild_partitions(engine, loaded, BY_KEY_MV, [None])
    rebuild_partitions(engine, loaded, BY_KEY_MV, [None])
    with engine.get_client() as client:
        client.command(STREAM_INTO_NOW)  # inserts still fire the MV: its inner table is the one it points at
        assert client.query(BY_KEY[0]).result_rows == client.query(BY_KEY[1]).result_rows
        assert deferrals.pending(client) == []  # a raced swap's record for recovery (if any) is settled


def test_a_swap_a_write_raced_is_reported_as_damage_even_when_a_later_read_is_not_swapped(engine, base):
    """Attempt 1 swaps and then sees a row written between its race check and its swap (that row's MV output went
    with the old partition); attempt 2 sees a row before its swap and swaps nothing. Main said "the live partition is
    as it was" (the damage flag was overwritten by the last attempt) while the target missed a row: now the error
    names the partition as damaged, recovery has it to rebuild, and the next rebuild makes it exact."""
    loaded = load(base / "ddl", rebuild={"race_attempts": 2, "race_backoff_seconds": 0.0})
    lost = "INSERT INTO w.events SELECT toDateTime('2026-02-10 12:00:00'), 7, 4242"
    late = "INSERT INTO w.events SELECT toDateTime('2026-02-11 12:00:00'), 8, 4343"
    script = {("before", "swap", 1): lost, ("after", "fill", 2): late}
    with AtStatements(engine, script) as hooks, pytest.raises(RacedWrites) as raised:
        rebuild_partitions(hooks, loaded, DAILY, [FEB])
    assert hooks.done == [("before", "swap", 1), ("after", "fill", 2)]
    message = str(raised.value)
    assert "as it was" not in message
    assert "may have lost rows in 2026-02-01" in message and "Recorded for recovery" in message, message
    assert raised.value.damaged == ("2026-02-01",)
    with engine.get_client() as client:  # the message is the truth: the target misses the first row's output
        rows = "SELECT sum(n) FROM w.daily WHERE toYYYYMM(day) = 202602"
        source = "SELECT count() FROM w.events WHERE toYYYYMM(ts) = 202602"
        assert int(client.command(rows)) == int(client.command(source)) - 1
        assert [(d.target, d.partition) for d in deferrals.pending(client)] == [(DAILY, FEB.key)]
    rebuild_partitions(engine, loaded, DAILY, [FEB])  # what recovery requests
    with engine.get_client() as client:
        assert month_matches(client, "daily", 202602)
        assert deferrals.pending(client) == []


def test_a_refusal_after_a_raced_swap_still_names_the_damage(engine, base):
    """Attempt 1 swaps and then sees a row written between its race check and its swap (damage); before attempt 2 a
    writer outside the DDL puts a row in the target, so attempt 2's swap is refused (foreign rows). The refusal said
    "the live partition is unchanged" and nothing of the damage: now it names the partition an earlier attempt left
    damaged, and recovery has it to rebuild."""
    from chmv_assets.errors import ForeignRowsRefused

    loaded = load(base / "ddl", rebuild={"race_attempts": 2, "race_backoff_seconds": 0.0})
    lost = "INSERT INTO w.events SELECT toDateTime('2026-02-10 12:00:00'), 7, 4242"
    foreign = "INSERT INTO w.daily SELECT toDate('2026-02-20'), 999, 1, 1"
    script = {("before", "swap", 1): lost, ("after", "swap", 1): foreign}
    with AtStatements(engine, script) as hooks, pytest.raises(ForeignRowsRefused) as raised:
        rebuild_partitions(hooks, loaded, DAILY, [FEB])
    assert hooks.done == [("before", "swap", 1), ("after", "swap", 1)]
    message = str(raised.value)
    assert "partition 2026-02-01: the live partition holds 1 row" in message, message
    assert "Earlier in this run, a read of 2026-02-01 was swapped in while writes raced it" in message, message
    assert "the live partition is unchanged" not in message
    assert "Recorded for recovery" in message and raised.value.damaged == ("2026-02-01",)
    with engine.get_client() as client:
        assert [(d.target, d.partition) for d in deferrals.pending(client)] == [(DAILY, FEB.key)]


def test_two_runs_of_one_partition_count_its_rows_once(engine, loaded, caplog):
    """Two runs start together (two hosts, say): the lease on the server serializes them, each reads into a shadow
    of its own; the partition holds its rows once (main: 3,640,576 rows where 2,592,000 belong)."""
    with engine.get_client() as client:
        corrupt(client, 202602)
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait()
            rebuild_partitions(engine, loaded, DAILY, [FEB], owner=f"run {i}")
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    with caplog.at_level(logging.INFO, "chmv_assets"):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    # on one host the second run waits for the write gate, which a run holds from its plan to its last swap (on two
    # hosts, for the lease: test_a_held_partition_stops_a_run_naming_the_holder)
    assert any(m.startswith("waiting for the write gate of w.events") for m in caplog.messages)
    with engine.get_client() as client:
        assert month_matches(client, "daily", 202602)
        assert int(client.command("SELECT count() FROM system.tables WHERE name LIKE '\\\\_chmv\\\\_shadow%'")) == 0


def test_a_held_partition_stops_a_run_naming_the_holder(engine, base):
    loaded = load(base / "ddl", rebuild={"lease_wait_seconds": 0.2})
    lease = leases.rebuild_lease("w.daily", "2026-03-01")
    other = leases.Holder("dagster run 4d2f", "0badf00d", host="pod-7", pid=31)
    with engine.get_client() as client:
        before = client.query("SELECT sum(n) FROM w.daily").result_rows
    with leases.holding(engine, [lease], other, ttl=60, wait=0):
        with pytest.raises(
            LeaseHeld,
            match=r"w\.daily:2026-03-01 is being rebuilt by dagster run 4d2f \(run 0badf00d, "
            r"host pod-7, pid 31\)",
        ):
            rebuild_partitions(engine, loaded, DAILY, [MAR])
        with engine.get_client() as client:
            assert client.query("SELECT sum(n) FROM w.daily").result_rows == before  # nothing changed
    rebuild_partitions(engine, loaded, DAILY, [MAR])  # released: free again


def test_a_lease_of_a_process_gone_from_this_host_is_taken_over_at_once(engine, base):
    loaded = load(base / "ddl", rebuild={"lease_wait_seconds": 0.0})
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    gone = leases.Holder("chmv rebuild", "deadbeef", pid=2**22 + 17)  # no such process here (pid_max is 2**22)
    with engine.get_client() as client:
        leases.acquire(client, [leases.rebuild_lease("w.daily", "2026-01-01")], gone, ttl=600, wait=0)
    plan, results = rebuild_partitions(engine, loaded, DAILY, [JAN])
    assert results[0].method == "replace"


def test_a_killed_runs_shadows_are_dropped_and_a_live_runs_kept(engine, loaded):
    live = leases.Holder("dagster run 77", "0a0a0a0a", host="pod-2", pid=9)
    with engine.get_client() as client:
        for name in (
            "_chmv_shadow_daily_20260101_rdeadbeef",
            "_chmv_shadow_daily_range_r0a0a0a0a",
            "_chmv_shadow_daily_20260201",
        ):
            client.command(f"CREATE TABLE w.`{name}` AS w.daily")
        client.command("CREATE TABLE w.`_chmv_shadow_daily_x_20260101_rdeadbeef` AS w.daily")  # another table's
    with leases.holding(engine, [leases.rebuild_lease("w.daily", "2026-02-01")], live, ttl=600, wait=0):
        rebuild_partitions(engine, loaded, DAILY, [JAN])
    with engine.get_client() as client:
        names = {r[0] for r in client.query("SELECT name FROM system.tables WHERE database = 'w'").result_rows}
    assert "_chmv_shadow_daily_range_r0a0a0a0a" in names  # its run holds a lease
    assert "_chmv_shadow_daily_x_20260101_rdeadbeef" in names  # not a shadow of w.daily
    assert not {"_chmv_shadow_daily_20260101_rdeadbeef", "_chmv_shadow_daily_20260201"} & names


@pytest.mark.parametrize("target", [BY_KEY_MV, BY_MONTH], ids=["unpartitioned", "partitioned"])
def test_an_mv_without_to_rebuilt_whole_keeps_its_source_writable(engine, loaded, target):
    """Main exchanged the inner table and dropped the old one, which the MV points at by UUID: every insert into the
    source then failed. Now each partition is replaced (tuple() for an unpartitioned one)."""
    with engine.get_client() as client:
        client.command("INSERT INTO w.events SELECT toDateTime('2026-02-10 00:00:00'), 5, 5")  # before: fine
        inner = client.query("SELECT name FROM system.tables WHERE database = 'w' AND name LIKE '.inner%'").result_rows
    plan, results = rebuild_partitions(engine, loaded, target, [None], force=True)
    assert all("EXCHANGE" not in s for r in results for s in r.statements)
    with engine.get_client() as client:
        client.command("INSERT INTO w.events SELECT toDateTime('2026-02-10 00:00:00'), 5, 5")  # still fires the MVs
        assert (
            client.query("SELECT name FROM system.tables WHERE database = 'w' AND name LIKE '.inner%'").result_rows
            == inner
        )
        if target == BY_KEY_MV:
            assert client.query(BY_KEY[0]).result_rows == client.query(BY_KEY[1]).result_rows
        else:
            for month in (202601, 202602, 202603):
                assert month_matches(client, "by_month", month)


def test_an_apply_re_derives_closed_months_exactly_under_writers_and_defers_the_open_one(engine, base, tmp_path):
    """``chmv apply`` of a changed SELECT while threads insert late rows and a stream: each closed month ends equal
    to the new SELECT over every source row; the open month is deferred (recovery re-derives it once it closes)."""
    ddl = tmp_path / "ddl"
    shutil.copytree(base / "ddl", ddl)
    sql = (ddl / "w.sql").read_text()
    (ddl / "w.sql").write_text(
        sql.replace(
            "count() AS n, sum(v) AS s FROM w.events GROUP BY day, k",
            "count() AS n, sum(v) * 2 AS s FROM w.events GROUP BY day, k",
        )
    )
    loaded = load(ddl)
    with engine.get_client() as client:
        plan = plan_lifecycle(client, loaded)
        preflight(client, loaded, plan)
    assert [c.action for c in plan.changes] == [Action.MODIFY_QUERY]
    late = (
        "INSERT INTO w.events SELECT toDateTime('2026-01-01 00:00:00') + rand() % 7776000, rand(1) % 200, 3 "
        "FROM numbers(20)"
    )
    path = path_of(engine)
    with ThreadWriter(path, late, 3.0) as lates, ThreadWriter(path, STREAM_INTO_NOW, 0.005), Racer(path) as racer:
        report = apply_plan(engine, loaded, plan, batch_seconds=0.0)  # one partition per hold: writes land between
    assert lates.inserts >= 1 and racer.raced >= 2 and report.partitions["w.daily"] >= 4
    now = this_month()
    new_select = (
        "SELECT toDate(ts) AS d, k, count(), sum(v) * 2 FROM w.events WHERE toYYYYMM(ts) = {m:UInt32} "
        "GROUP BY ALL ORDER BY ALL"
    )
    with engine.get_client() as client:
        for month in (202601, 202602, 202603):
            got = client.query(RECOMPUTE["daily"][0], parameters={"m": month}).result_rows
            assert got == client.query(new_select, parameters={"m": month}).result_rows, month
        assert [(d.target, d.partition) for d in deferrals.pending(client)] == [(DAILY, now.key)]
        assert not plan_lifecycle(client, loaded).has_changes


def test_a_new_version_under_writers_is_exact_or_stops_with_the_old_version_live(engine, base, tmp_path):
    """A sort key change builds a new version beside the target: each of its reads is race-checked (late rows into
    every read), its open month too (a version not yet live cannot wait for it to close), and rows that reach it
    between the exchange and its MVs' new SELECT are re-derived. Closed and open months end exact."""
    ddl = tmp_path / "ddl"
    shutil.copytree(base / "ddl", ddl)
    sql = (ddl / "w.sql").read_text()
    (ddl / "w.sql").write_text(
        sql.replace("PARTITION BY toYYYYMM(day) ORDER BY (day, k);", "PARTITION BY toYYYYMM(day) ORDER BY (k, day);")
    )
    loaded = load(ddl)
    with engine.get_client() as client:
        plan = plan_lifecycle(client, loaded)
        preflight(client, loaded, plan)
    assert [c.action for c in plan.changes] == [Action.NEW_VERSION]
    late = (
        "INSERT INTO w.events SELECT toDateTime('2026-01-01 00:00:00') + rand() % 7776000, rand(1) % 200, 3 "
        "FROM numbers(20)"
    )
    now_rows = "INSERT INTO w.events SELECT now() - number, number % 200, 1 FROM numbers(5)"
    path = path_of(engine)
    with ThreadWriter(path, late, 3.0), ThreadWriter(path, now_rows, 0.5), Racer(path) as racer:
        # unverified (parity=False), as this test always ran it: the new version's open month, written into by the
        # stream during the apply, mismatches inside its grace period and the verification would stop the apply
        apply_plan(engine, loaded, plan, parity=False, batch_seconds=0.0)
    assert racer.raced >= 2
    now = this_month()
    with engine.get_client() as client:
        for month in (202601, 202602, 202603, int(now.key[:4] + now.key[5:7])):
            assert month_matches(client, "daily", month), month
        assert "ORDER BY (k, day)" in client.command(
            "SELECT create_table_query FROM system.tables WHERE database = 'w' AND name = 'daily'"
        )
        assert not plan_lifecycle(client, loaded).has_changes
