"""Writes that race a rebuild, seen in the sources' parts: a row written meanwhile is never lost silently.

A rebuild reads a partition's source rows into a shadow and swaps the shadow in with ``REPLACE PARTITION``. What the
live MVs wrote into that partition in between is replaced: a row inserted into the source after the read began and
before the swap would lose its MV output. chmv's own writers cannot insert then (they hold the source's gate);
writers chmv does not control can. So every read is watched:

1. before the read, the newest block number of every active part of each trigger, per ClickHouse partition
   (:func:`watch`); what is on its way is flushed before and after it (:func:`flush_pending`: Buffers, asynchronous
   inserts, whose flushes show in no process list) and inserts already running into the trigger are waited for
   (:func:`wait_for_inserts`, by the target parsed from each ``INSERT``): a block they wrote before the read may not
   have reached the MVs yet, and its MV output would land after the swap, twice;
2. after the read and again after the swap, the parts with a newer block (an insert, an attached partition: merges
   and mutations keep their blocks' numbers) are counted within each window's source range (:func:`raced_windows`,
   reading only those parts). Rows found before the swap: the partition is not swapped and is read again; found
   after it: a row's MV output may have gone with the old partition, so it is read and swapped again. The target's
   own parts in the swapped partitions are checked too (:func:`after_swap`, :func:`landed`): an MV output landing
   there after the swap is a block the shadow already holds, read and swapped again as well.

A block's MV output is written after the block itself (ClickHouse pushes each block to the table, then to its
views), which is what makes the two checks complete. Verified on the embedded engine with writer threads
(tests/integration/engine/test_writers.py); on a server the same statements run (system.parts, system.processes).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.parts import newer_parts, read_partitions
from chmv_assets.engine.server_errors import no_async_insert_queue
from chmv_assets.sql.quoting import qualified


@dataclass(frozen=True)
class Watch:
    """The trigger sources as a read found them: per source and ClickHouse partition, the newest block number.

    Attributes:
        blocks: ``{source: {partition_id: newest block number of an active part}}``.
    """

    blocks: Mapping[ObjectRef, Mapping[str, int]]


def watch(client: Client, sources: Iterable[ObjectRef]) -> Watch:
    """The newest block number per partition of every active part of ``sources`` (one query on ``system.parts``,
    :func:`chmv_assets.engine.parts.read_partitions`)."""
    refs = sorted(set(sources), key=lambda r: r.fqn)
    found = read_partitions(client, refs)
    return Watch({ref: {p.partition_id: p.max_block for p in found.get(ref, [])} for ref in refs})


def new_parts(client: Client, since: Watch) -> dict[ObjectRef, list[str]]:
    """Per source, the active parts holding a block newer than ``since`` saw (a new partition's parts included)."""
    return newer_parts(client, since.blocks)


def raced_windows(client: Client, since: Watch, ranges: Mapping[ObjectRef, Sequence[str | None]]) -> list[int]:
    """Indices of the windows that received source rows since ``since``: rows of the new parts within each window's
    source range (``ranges[source][i]``, a predicate on the source's own columns; None: any row).

    One query on ``system.parts``, and one per source with new parts that reads those parts only.
    """
    parts = new_parts(client, since)
    count = max((len(v) for v in ranges.values()), default=0)
    hit: set[int] = set()
    for source, names in parts.items():
        predicates = ranges.get(source)
        if predicates is None:
            continue
        columns = ", ".join(f"countIf({p})" if p else "count()" for p in predicates)
        counts = client.query(
            f"SELECT {columns} FROM {qualified(source)} WHERE _part IN {{parts:Array(String)}}",
            parameters={"parts": names},
        ).result_rows[0]
        hit |= {i for i, n in enumerate(counts) if n}
    return sorted(i for i in hit if i < count)


@dataclass(frozen=True)
class RunningInsert:
    """An insert the server was running into a watched table (from ``system.processes``)."""

    query_id: str
    elapsed: float
    query: str

    def describe(self) -> str:
        return f"query {self.query_id} ({self.elapsed:.0f}s): {' '.join(self.query.split())[:120]}"


#: An identifier as ClickHouse writes one: bare, or quoted with backticks or double quotes (doubled or
#: backslash-escaped quotes inside).
_IDENTIFIER = r"(?:`(?:[^`\\]|\\.|``)*`|\"(?:[^\"\\]|\\.|\"\")*\"|[A-Za-z_][A-Za-z0-9_$]*)"
_INSERT_INTO = re.compile(
    rf"^INSERT\s+INTO\s+(?:TABLE\s+)?(?P<first>{_IDENTIFIER})(?:\s*\.\s*(?P<second>{_IDENTIFIER}))?", re.IGNORECASE
)
_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)


def _unquote(identifier: str) -> str:
    if identifier[:1] in '`"' and len(identifier) > 1:
        quote = identifier[0]
        body = identifier[1:-1]
        return re.sub(r"\\(.)", r"\1", body.replace(quote * 2, quote))
    return identifier


def insert_target(query: str, current_database: str) -> ObjectRef | None:
    """The table an ``INSERT`` statement writes (its database, else ``current_database``); None for anything else (a
    ``SELECT``, ``INSERT INTO FUNCTION …``)."""
    comments = _COMMENTS.match(query)  # matches every text: at least its empty start
    match = _INSERT_INTO.match(query[comments.end() if comments else 0 :])
    if match is None or (match["second"] is None and match["first"].upper() == "FUNCTION"):
        return None
    if match["second"] is None:
        return ObjectRef(database=current_database, name=_unquote(match["first"]))
    return ObjectRef(database=_unquote(match["first"]), name=_unquote(match["second"]))


def running_inserts(client: Client, tables: Iterable[ObjectRef]) -> list[RunningInsert]:
    """Inserts running now into one of ``tables`` (a source or a table whose MVs write it): ``INSERT`` queries whose
    target, parsed from the statement (:func:`insert_target`), is one of them. A ``SELECT`` that reads a source, or an
    insert into another table whose text names one, is not a writer of it."""
    wanted = set(tables)
    if not wanted:
        return []
    rows = client.query(
        "SELECT query_id, elapsed, query, current_database FROM system.processes WHERE query_kind = 'Insert' "
        "AND query_id != queryID()"
    ).result_rows
    return [
        RunningInsert(str(q), float(e), str(text))
        for q, e, text, database in rows
        if insert_target(str(text), str(database)) in wanted
    ]


def wait_for_inserts(client: Client, tables: Iterable[ObjectRef], timeout: float) -> list[RunningInsert]:
    """Wait up to ``timeout`` seconds for the inserts running now into ``tables`` to finish (not for later ones).

    Returns:
        The ones still running at the timeout (empty: every block they wrote has reached the MVs).
    """
    running = running_inserts(client, tables)
    deadline = time.monotonic() + timeout
    delay = 0.02
    while running:
        ids = [r.query_id for r in running]
        rows = client.query(
            "SELECT query_id FROM system.processes WHERE query_id IN {ids:Array(String)}", parameters={"ids": ids}
        ).result_rows
        still = {str(r[0]) for r in rows}
        running = [r for r in running if r.query_id in still]
        if not running or time.monotonic() >= deadline:
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    return running


_BUFFER_DESTINATION = re.compile(
    r"^Buffer\(\s*(?P<db>'(?:[^'\\]|\\.)*'|[A-Za-z_][A-Za-z0-9_]*)\s*,\s*(?P<table>'(?:[^'\\]|\\.)*'|[A-Za-z_][A-Za-z0-9_]*)"
)


def _literal(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1]) if text.startswith("'") else text


def buffers_into(client: Client, tables: Iterable[ObjectRef]) -> list[ObjectRef]:
    """The ``Buffer`` tables of the server whose destination is one of ``tables`` (from ``system.tables``: those the
    DDL does not name too)."""
    wanted = set(tables)
    found = []
    for database, name, engine_full in client.query(
        "SELECT database, name, engine_full FROM system.tables WHERE engine = 'Buffer'"
    ).result_rows:
        match = _BUFFER_DESTINATION.match(str(engine_full))
        if match is None:
            continue
        destination = ObjectRef(database=_literal(match["db"]) or str(database), name=_literal(match["table"]))
        if destination in wanted:
            found.append(ObjectRef(database=str(database), name=str(name)))
    return found


def flush_pending(client: Client, tables: Iterable[ObjectRef]) -> list[str]:
    """Flush what the server holds on its way into ``tables``, waiting for flushes already under way (their MVs
    included): every ``Buffer`` whose destination is one of them (``OPTIMIZE TABLE`` of a Buffer flushes it, and
    waits for the flush a background thread is running: measured on the embedded engine) and the asynchronous insert
    queue of those tables (``SYSTEM FLUSH ASYNC INSERT QUEUE``; on a server only).

    Returns:
        What could not be flushed (a refusal, such as a missing grant), described: the rows it holds may be on their
        way to the MVs unseen, so a read then is not proven exact.
    """
    refs = sorted(set(tables), key=lambda r: r.fqn)
    failed: list[str] = []
    for buffer in buffers_into(client, refs):
        try:
            client.command(f"OPTIMIZE TABLE {qualified(buffer)}")
        except Exception as error:  # noqa: BLE001 - reported: the read is then not proven exact
            failed.append(f"Buffer {buffer.fqn} ({' '.join(str(error).split())[:160]})")
    if refs:  # the tables' queues; a server without the table list flushes its whole queue
        for sql in (
            "SYSTEM FLUSH ASYNC INSERT QUEUE " + ", ".join(qualified(r) for r in refs),
            "SYSTEM FLUSH ASYNC INSERT QUEUE",
        ):
            try:
                client.command(sql)
                break
            except Exception as error:  # noqa: BLE001 - the embedded engine has no queue; anything else is reported
                # the embedded engine's asynchronous inserts run in the foreground, in system.processes
                if no_async_insert_queue(error):
                    break
                last = error
        else:
            failed.append(f"the asynchronous insert queue ({' '.join(str(last).split())[:160]})")
    return failed


@dataclass(frozen=True)
class Swapped:
    """The live table's partitions a swap replaced, as they looked right after it: per partition id, the newest block
    of the parts the swap put in, or None where they were not only those (a write had landed already, or they had
    merged: it cannot be told which)."""

    table: ObjectRef
    newest: Mapping[str, int | None]


def _parts(client: Client, table: ObjectRef, partitions: Iterable[str]) -> list[tuple[str, int, int, int]]:
    """``(partition_id, rows, level, max_block_number)`` of the active parts of ``table`` in ``partitions``."""
    return [
        (str(p), int(r), int(lv), int(b))
        for p, r, lv, b in client.query(
            "SELECT partition_id, rows, level, max_block_number FROM system.parts WHERE active "
            "AND database = {db:String} AND table = {t:String} AND has({ids:Array(String)}, partition_id)",
            parameters={"db": table.database, "t": table.name, "ids": sorted(set(partitions))},
        ).result_rows
    ]


def shadow_parts(client: Client, shadow: ObjectRef, partitions: Iterable[str]) -> dict[str, list[tuple[int, int]]]:
    """Per partition id, ``(rows, level)`` of each part of the shadow about to be swapped in (a ``REPLACE PARTITION``
    copies each part, its rows and level, under a new block number)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for pid, rows, level, _ in _parts(client, shadow, partitions):
        out.setdefault(pid, []).append((rows, level))
    return out


def after_swap(client: Client, live: ObjectRef, swapped: Mapping[str, list[tuple[int, int]]]) -> Swapped:
    """The live partitions of ``swapped`` (:func:`shadow_parts`) right after the swap: where their parts are exactly
    the shadow's, the newest block among them; else None (something else is there already)."""
    found: dict[str, list[tuple[int, int, int]]] = {pid: [] for pid in swapped}
    for pid, rows, level, block in _parts(client, live, swapped):
        found[pid].append((rows, level, block))
    newest = {
        pid: max(b for _, _, b in parts) if sorted((r, lv) for r, lv, _ in parts) == sorted(swapped[pid]) else None
        for pid, parts in found.items()
        if swapped[pid]
    }
    return Swapped(live, newest)


def landed(client: Client, since: Swapped) -> list[str]:
    """The partitions of ``since`` where a write landed after the swap (a part with a newer block, or one found
    there right after it): an MV output on its way when the read began would count twice there."""
    unknown = {pid for pid, block in since.newest.items() if block is None}
    parts = _parts(client, since.table, [pid for pid in since.newest if pid not in unknown])
    newer = {pid for pid, _, _, block in parts if block > (since.newest[pid] or 0)}
    return sorted(unknown | newer)
