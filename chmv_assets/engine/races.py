"""Writes that race a rebuild, seen in the sources' parts: a row written meanwhile is never lost silently.

A rebuild reads a partition's source rows into a shadow and swaps the shadow in with ``REPLACE PARTITION``. What the
live MVs wrote into that partition in between is replaced: a row inserted into the source after the read began and
before the swap would lose its MV output. chmv's own writers cannot insert then (they hold the source's gate);
writers chmv does not control can. So every read is watched:

1. before the read, the newest block number of every active part of each trigger, per ClickHouse partition
   (:func:`watch`); inserts already running into the trigger are waited for (:func:`wait_for_inserts`): a block they
   wrote before the read may not have reached the MVs yet, and its MV output would land after the swap, twice;
2. after the read and again after the swap, the parts with a newer block (an insert, an attached partition: merges
   and mutations keep their blocks' numbers) are counted within each window's source range (:func:`raced_windows`,
   reading only those parts). Rows found before the swap: the partition is not swapped and is read again; found
   after it: a row's MV output may have gone with the old partition, so it is read and swapped again.

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
    """An insert the server was running into a watched source (from ``system.processes``)."""

    query_id: str
    elapsed: float
    query: str

    def describe(self) -> str:
        return f"query {self.query_id} ({self.elapsed:.0f}s): {' '.join(self.query.split())[:120]}"


def running_inserts(client: Client, names: Iterable[str]) -> list[RunningInsert]:
    """Inserts running now whose text names one of ``names`` (a source or a table whose MVs write it) as a whole
    word, chmv's own shadow fills and metadata writes excepted. Matching the text may find too many (a string that
    spells a name): that only makes a rebuild wait for an insert it did not need to."""
    patterns = sorted({f"(?i)(^|[^A-Za-z0-9_]){re.escape(name)}([^A-Za-z0-9_]|$)" for name in names})
    if not patterns:
        return []
    rows = client.query(
        "SELECT query_id, elapsed, query FROM system.processes WHERE query_kind = 'Insert' "
        "AND multiMatchAny(query, {patterns:Array(String)}) "
        "AND NOT multiSearchAny(query, ['_chmv_shadow_', 'chmv_meta.', '_chmv_preflight_'])",
        parameters={"patterns": patterns},
    ).result_rows
    return [RunningInsert(str(q), float(e), str(text)) for q, e, text in rows]


def wait_for_inserts(client: Client, names: Iterable[str], timeout: float) -> list[RunningInsert]:
    """Wait up to ``timeout`` seconds for the inserts running now into ``names`` to finish (not for later ones).

    Returns:
        The ones still running at the timeout (empty: every block they wrote has reached the MVs).
    """
    running = running_inserts(client, names)
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
