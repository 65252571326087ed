"""The one reader of system.parts on the embedded engine: parts and partitions of given tables in one query each, their
time as wall seconds (DateTime and Date keys, none), an MV without TO through its inner table, dictionaries, the parts
written since a watch."""

from __future__ import annotations

from datetime import UTC, datetime

import clickhouse_connect
import pytest

from chmv_assets.ddl.loader import load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine import parts

DDL = """
CREATE DATABASE p ENGINE = Atomic;
CREATE TABLE p.by_month (ts DateTime, v UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE p.by_day (day Date, v UInt64) ENGINE = MergeTree PARTITION BY day ORDER BY day;
CREATE TABLE p.flat (k UInt64) ENGINE = MergeTree ORDER BY k;
CREATE TABLE p.empty (k UInt64) ENGINE = MergeTree ORDER BY k;
CREATE TABLE p.dim (k UInt64, name String) ENGINE = MergeTree ORDER BY k;
CREATE DICTIONARY p.names (k UInt64, name String) PRIMARY KEY k SOURCE(CLICKHOUSE(DB 'p' TABLE 'dim'))
LAYOUT(FLAT()) LIFETIME(60);
CREATE MATERIALIZED VIEW p.no_to ENGINE = MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY ts AS
SELECT ts, v FROM p.by_month;
"""
MONTH, DAY, FLAT, EMPTY = (ObjectRef(database="p", name=n) for n in ("by_month", "by_day", "flat", "empty"))
NO_TO, NAMES, MISSING = (ObjectRef(database="p", name=n) for n in ("no_to", "names", "missing"))


def _ts(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


class Counting:
    """The client, counting the queries run through it."""

    def __init__(self, client):
        self.client, self.queries = client, 0

    def query(self, *args, **kwargs):
        self.queries += 1
        return self.client.query(*args, **kwargs)


@pytest.fixture
def engine(tmp_path):
    (tmp_path / "ddl").mkdir()
    (tmp_path / "ddl" / "p.sql").write_text(DDL)
    loaded = load(tmp_path / "ddl")
    client = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path / 'chdb'}")
    for statement in DDL.split(";"):
        if statement.strip():
            client.command(statement)
    client.command(
        "INSERT INTO p.by_month VALUES ('2026-08-03 10:00:00', 1), ('2026-08-05 11:30:00', 2), ('2026-09-01 00:00:00', 3)"
    )
    client.command("INSERT INTO p.by_month VALUES ('2026-08-20 08:00:00', 4)")
    client.command("INSERT INTO p.by_day VALUES ('2026-08-03', 1), ('2026-08-04', 2)")
    client.command("INSERT INTO p.flat VALUES (1), (2), (3)")
    client.command("INSERT INTO p.dim VALUES (1, 'one'), (2, 'two')")
    client.command("SYSTEM RELOAD DICTIONARY p.names")
    yield loaded, client
    client.close()


def test_every_part_with_its_blocks_and_wall_time_in_one_query(engine) -> None:
    loaded, client = engine
    counting = Counting(client)
    found = parts.read_parts(counting, [MONTH, DAY, FLAT, EMPTY, MISSING])
    assert counting.queries == 1
    assert set(found) == {MONTH, DAY, FLAT, EMPTY, MISSING} and found[EMPTY] == found[MISSING] == []
    august = sorted((p for p in found[MONTH] if p.partition_id == "202608"), key=lambda p: p.max_block)
    assert [(p.rows, p.span, p.value) for p in august] == [
        (2, (_ts("2026-08-03 10:00:00"), _ts("2026-08-05 11:30:00")), "202608"),
        (1, (_ts("2026-08-20 08:00:00"), _ts("2026-08-20 08:00:00")), "202608"),
    ]
    assert august[0].max_block < august[1].min_block and not august[0].mutated
    days = sorted(found[DAY], key=lambda p: p.partition_id)
    assert [(p.value, p.span) for p in days] == [  # a Date: its first second to its last
        ("2026-08-03", (_ts("2026-08-03 00:00:00"), _ts("2026-08-03 23:59:59"))),
        ("2026-08-04", (_ts("2026-08-04 00:00:00"), _ts("2026-08-04 23:59:59"))),
    ]
    assert [(p.partition_id, p.span, p.value) for p in found[FLAT]] == [("all", None, "tuple()")]
    client.command("ALTER TABLE p.by_month UPDATE v = v + 1 WHERE v = 1 SETTINGS mutations_sync = 1")
    mutated = [p for p in parts.read_parts(client, [MONTH])[MONTH] if p.partition_id == "202608"]
    assert mutated and all(p.mutated for p in mutated)


def test_every_partition_folded_by_the_server_with_dictionaries_and_inner_tables_in_one_query(engine) -> None:
    loaded, client = engine
    counting = Counting(client)
    tables = [MONTH, DAY, FLAT, NO_TO, MISSING]
    found = parts.read_partitions(
        counting, tables, inner_views=parts.views_without_to(loaded.project, tables), dictionaries=[NAMES]
    )
    assert counting.queries == 1
    assert parts.views_without_to(loaded.project, tables) == [NO_TO]
    month = {p.partition_id: p for p in found[MONTH]}
    august = month["202608"]
    assert (august.rows, august.parts, august.value) == (3, 2, "202608")
    assert august.span == (_ts("2026-08-03 10:00:00"), _ts("2026-08-20 08:00:00"))
    assert august.window() == (datetime(2026, 8, 3, 10), datetime(2026, 8, 20, 8, 0, 1))
    assert august.max_block > month["202609"].max_block and august.bytes > 0 and august.newest_write > 0
    assert sorted(p.partition_id for p in found[NO_TO]) == ["20260803", "20260805", "20260820", "20260901"]
    assert [(p.rows, p.parts) for p in found[NAMES]] == [(2, 0)]  # a dictionary: its loaded elements
    assert found[MISSING] == [] and found[FLAT][0].window() is None


def test_an_empty_part_carries_no_time(engine) -> None:
    _loaded, client = engine  # a mutation deleting every row of a part leaves it active and empty, its time the epoch
    client.command("ALTER TABLE p.by_month DELETE WHERE v IN (1, 2) SETTINGS mutations_sync = 1")
    held = parts.read_parts(client, [MONTH])[MONTH]
    assert [(p.rows, p.span) for p in held if p.partition_id == "202608" and not p.rows] == [(0, None)]
    august = next(p for p in parts.read_partitions(client, [MONTH])[MONTH] if p.partition_id == "202608")
    assert (august.rows, august.parts) == (1, 2)
    assert august.span == (_ts("2026-08-20 08:00:00"), _ts("2026-08-20 08:00:00"))  # the part holding rows


def test_every_table_of_whole_databases(engine) -> None:
    _loaded, client = engine
    found = parts.read_partitions(client, databases=["p", "nowhere"])
    assert {MONTH, DAY, FLAT} <= set(found) and EMPTY not in found  # tables holding parts
    assert parts.read_partitions(client, databases=[]) == {}


def test_the_parts_written_since_a_watch(engine) -> None:
    _loaded, client = engine
    watched = {t: {p.partition_id: p.max_block for p in ps} for t, ps in parts.read_partitions(client, [MONTH]).items()}
    assert parts.newer_parts(client, watched) == {}
    client.command("OPTIMIZE TABLE p.by_month FINAL")  # a merge keeps the blocks' numbers
    assert parts.newer_parts(client, watched) == {}
    client.command("INSERT INTO p.by_month VALUES ('2026-08-09 00:00:00', 6), ('2026-11-01 00:00:00', 7)")
    client.command("INSERT INTO p.by_day VALUES ('2026-08-09', 6)")  # not watched: not listed
    found = parts.newer_parts(client, watched)
    assert sorted(name.split("_")[0] for name in found[MONTH]) == ["202608", "202611"] and set(found) == {MONTH}
