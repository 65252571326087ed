"""Server errors told by their code on the real engine: each named code provoked, the code and the server's own
name agreeing with :class:`Code`, and the two codes whose meaning only the message tells."""

from __future__ import annotations

import clickhouse_connect
import pytest

from chmv_assets.engine.server_errors import Code, is_code, named_code, no_async_insert_queue, server_code
from chmv_assets.engine.server_errors import too_many_partitions_per_insert as too_many_partitions

#: A statement the server refuses with each code; the codes left out cannot be provoked on one embedded engine
#: (DEADLOCK_AVOIDED: a lock held past lock_acquire_timeout; TOO_MANY_SIMULTANEOUS_QUERIES: concurrent sessions),
#: their text is read in tests/unit/engine/test_server_errors.py.
PROVOKED = {
    Code.THERE_IS_NO_COLUMN: "CREATE MATERIALIZED VIEW d.mv TO d.o AS SELECT ts, k, v AS extra FROM d.t",
    Code.NO_SUCH_COLUMN_IN_TABLE: "INSERT INTO d.t (nope) VALUES (1)",
    Code.BAD_ARGUMENTS: "SYSTEM FLUSH ASYNC INSERT QUEUE",
    Code.ILLEGAL_TYPE_OF_ARGUMENT: "SELECT toDate([1])",
    Code.UNKNOWN_FUNCTION: "SELECT unknownFunction(1)",
    Code.UNKNOWN_IDENTIFIER: "SELECT nope FROM d.t",
    Code.TYPE_MISMATCH: "SELECT CAST([1] AS Map(String, UInt8))",
    Code.UNKNOWN_TABLE: "SELECT * FROM d.nope",
    Code.SYNTAX_ERROR: "SELEC 1",
    Code.CANNOT_CONVERT_TYPE: "SELECT accurateCast(-1, 'UInt8')",
    Code.UNKNOWN_DATABASE: "SELECT * FROM nope.t",
    Code.TIMEOUT_EXCEEDED: "SELECT count() FROM numbers(100000000000) SETTINGS max_execution_time = 0.2",
    Code.TOO_MANY_PARTS: "INSERT INTO d.p VALUES (now(), 1)",
    Code.NO_COMMON_TYPE: "SELECT [1, 'a']",
    Code.ALTER_OF_COLUMN_IS_FORBIDDEN: "ALTER TABLE d.t MODIFY COLUMN ts String",
    Code.ABORTED: "OPTIMIZE TABLE d.p FINAL",  # its merges stopped (SYSTEM STOP MERGES): the server cancels them
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    client = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path_factory.mktemp('errors') / 'chdb'}")
    client.command("CREATE DATABASE d ENGINE = Atomic")
    client.command("CREATE TABLE d.t (ts DateTime, k UInt32, v UInt64, s String) ENGINE = MergeTree ORDER BY (ts, k)")
    client.command("INSERT INTO d.t VALUES ('2026-01-01 00:00:00', 1, 1, 'x')")
    client.command("CREATE TABLE d.o (ts DateTime, k UInt32) ENGINE = MergeTree ORDER BY ts")
    client.command(
        "CREATE TABLE d.p (ts DateTime, v UInt64) ENGINE = MergeTree ORDER BY ts "
        "SETTINGS parts_to_throw_insert = 1, parts_to_delay_insert = 1"
    )
    client.command("SYSTEM STOP MERGES d.p")
    client.command("INSERT INTO d.p VALUES (now(), 1)")
    yield client
    client.close()


def _refusal(client, sql: str, **settings) -> Exception:
    with pytest.raises(Exception) as caught:
        client.command(sql, settings=settings or None)
    return caught.value


def test_every_named_code_is_the_servers(client):
    """The numbers of :class:`Code` are the engine's own (``system.errors`` lists every code it has)."""
    rows = client.query(
        "SELECT name, code FROM system.errors WHERE name IN {names:Array(String)} LIMIT 1 BY name",
        parameters={"names": [c.name for c in Code]},
        settings={"system_events_show_zero_values": 1},
    ).result_rows
    assert dict(rows) == {c.name: c.value for c in Code}


@pytest.mark.parametrize("code", list(PROVOKED), ids=lambda c: c.name)
def test_a_refusal_is_told_by_its_code(client, code: Code):
    error = _refusal(client, PROVOKED[code])
    assert named_code(error) is code and server_code(error) == code.value
    assert error.name == code.name  # the server's own name, as clickhouse-connect carries it
    assert is_code(error, code) and not is_code(error, *(c for c in Code if c is not code))


def test_every_named_code_but_two_is_provoked():
    assert set(Code) - set(PROVOKED) == {Code.DEADLOCK_AVOIDED, Code.TOO_MANY_SIMULTANEOUS_QUERIES}


def test_too_many_partitions_in_one_block_is_not_too_many_parts(client):
    client.command(
        "CREATE TABLE IF NOT EXISTS d.daily (ts DateTime, v UInt64) ENGINE = MergeTree PARTITION BY toDate(ts) "
        "ORDER BY ts"
    )
    spanning = _refusal(
        client,
        "INSERT INTO d.daily SELECT toDateTime('2026-01-01') + number * 86400, 1 FROM numbers(5)",
        max_partitions_per_insert_block=2,
    )
    crowded = _refusal(client, PROVOKED[Code.TOO_MANY_PARTS])
    assert named_code(spanning) is named_code(crowded) is Code.TOO_MANY_PARTS
    assert too_many_partitions(spanning) and not too_many_partitions(crowded)


def test_the_embedded_engine_has_no_async_insert_queue(client):
    assert no_async_insert_queue(_refusal(client, "SYSTEM FLUSH ASYNC INSERT QUEUE d.t"))
    assert not no_async_insert_queue(_refusal(client, "SELECT toDate([1])"))
    other = _refusal(client, "SELECT toDateTime(1, 'Nowhere/Zone')")
    assert named_code(other) is Code.BAD_ARGUMENTS and not no_async_insert_queue(other)
