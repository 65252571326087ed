"""What counts as a write racing a read: new blocks (an insert, an attached partition), within a window's range;
not a merge, a mutation or a lightweight delete (they keep their blocks' numbers)."""

from __future__ import annotations

import threading
import time

import clickhouse_connect
import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine import races

S = ObjectRef(database="r", name="s")
JANUARY, FEBRUARY = "ts >= '2026-01-01' AND ts < '2026-02-01'", "ts >= '2026-02-01' AND ts < '2026-03-01'"


@pytest.fixture
def client(tmp_path):
    client = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path / 'chdb'}")
    client.command("CREATE DATABASE r ENGINE = Atomic")
    client.command("CREATE TABLE r.s (ts DateTime, v UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts")
    client.command("INSERT INTO r.s SELECT toDateTime('2026-01-01 00:00:00') + number * 60, number FROM numbers(80000)")
    client.command("INSERT INTO r.s SELECT toDateTime('2026-01-02 00:00:00'), 1")
    yield client
    client.close()


def test_an_insert_races_the_windows_its_rows_fall_in(client):
    seen = races.watch(client, [S])
    assert races.raced_windows(client, seen, {S: [JANUARY, FEBRUARY, None]}) == []
    client.command("INSERT INTO r.s VALUES ('2026-02-03 00:00:00', 1)")
    assert races.raced_windows(client, seen, {S: [JANUARY, FEBRUARY, None]}) == [1, 2]
    client.command("INSERT INTO r.s VALUES ('2026-07-03 00:00:00', 1)")  # a partition new since the watch
    assert races.raced_windows(client, races.watch(client, [S]), {S: [None]}) == []
    assert [p.split("_")[0] for p in races.new_parts(client, seen)[S]] == ["202602", "202607"]


def test_merges_mutations_and_deletes_race_nothing_an_attached_partition_does(client):
    seen = races.watch(client, [S])
    client.command("OPTIMIZE TABLE r.s FINAL")
    client.command("ALTER TABLE r.s UPDATE v = v + 1 WHERE v < 10 SETTINGS mutations_sync = 1")
    client.command("DELETE FROM r.s WHERE v = 5")
    assert races.new_parts(client, seen) == {}
    client.command("CREATE TABLE r.copy AS r.s")
    client.command("INSERT INTO r.copy VALUES ('2026-01-09 00:00:00', 1)")
    client.command("ALTER TABLE r.s REPLACE PARTITION 202601 FROM r.copy")  # a rebuild of an upstream table
    assert races.raced_windows(client, seen, {S: [JANUARY, FEBRUARY]}) == [0]


OTHER = ObjectRef(database="r", name="other")


def test_inserts_running_into_a_source_are_waited_for_and_others_not(client, tmp_path):
    """Only an INSERT whose target (parsed from the statement) is the source is its writer: a SELECT reading it, or an
    insert into another table whose text names it, is not waited for (main took any query mentioning the name)."""
    client.command("CREATE TABLE r.other (ts DateTime, v UInt64) ENGINE = MergeTree ORDER BY ts")
    slow = "sleepEachRow(0.1) FROM numbers(6) SETTINGS max_block_size = 1"
    statements = {
        "read": "SELECT count() FROM (SELECT ts FROM r.s LIMIT 6) WHERE sleepEachRow(0.1) = 0 "
        "SETTINGS max_block_size = 1",
        "other": f"INSERT INTO r.other SELECT now(), {slow} -- copied from r.s",
        "source": f"INSERT INTO `r`.`s` SELECT now(), {slow}",
    }
    errors: list[BaseException] = []

    def run(sql: str) -> None:
        try:
            other = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path / 'chdb'}")
            other.query(sql) if sql.startswith("SELECT") else other.command(sql)
        except BaseException as error:  # noqa: BLE001 - surfaced below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(sql,)) for sql in statements.values()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    sleeping = (
        "SELECT count() FROM system.processes WHERE query_id != queryID() AND position(query, 'sleepEachRow') > 0"
    )
    while int(client.command(sleeping)) < 3:
        assert time.monotonic() < deadline and not errors, errors or "the three queries never ran together"
        time.sleep(0.01)
    (running,) = races.running_inserts(client, [S])
    assert running.query.startswith("INSERT INTO `r`.`s`")
    assert [r.query for r in races.running_inserts(client, [OTHER])] == [statements["other"]]
    assert [r.query_id for r in races.wait_for_inserts(client, [S], timeout=0.05)] == [running.query_id]  # still on
    assert races.wait_for_inserts(client, [S], timeout=30) == []
    for thread in threads:
        thread.join()
    assert not errors, errors


@pytest.mark.parametrize(
    ("query", "target"),
    [
        ("INSERT INTO r.s VALUES", S),
        ("  /* app */ insert into TABLE `r`.`s` (ts) FORMAT Values", S),
        ('-- load\nINSERT INTO "r"."s" SELECT 1', S),
        ("INSERT INTO s SELECT * FROM r.other", S),
        ("INSERT INTO r.other SELECT * FROM r.s", OTHER),
        ("INSERT INTO `r`.`we``ird` VALUES", ObjectRef(database="r", name="we`ird")),
        ("INSERT INTO FUNCTION remote('h', r.s) VALUES", None),
        ("SELECT * FROM r.s", None),
    ],
    ids=[
        "qualified",
        "comment-keyword-backticks",
        "double-quotes",
        "current-database",
        "other-table",
        "escaped",
        "function",
        "select",
    ],
)
def test_an_inserts_target_is_parsed_from_the_statement(query, target):
    assert races.insert_target(query, "r") == target
