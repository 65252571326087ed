"""Statements chmv sends, made accountable: a deterministic ``query_id`` each, and a killed run's orphans settled.

A client killed mid-statement (a pod evicted, a run terminated) leaves its query running on a server: an ``INSERT``
goes on inserting, and a re-run that does not know it would insert the same rows again or drop a table under it.
Every statement chmv sends carries a ``query_id`` derived from what it does (``chmv-<operation>-<digest>``), so the
next run finds an orphan of the same step in ``system.processes`` and waits for it (an ingestion insert: its rows
must be counted before the re-run's anti-join) or kills it (a rebuild's shadow fill: the shadow is dropped).

The embedded engine dies with its client, so there is never an orphan there (and clickhouse-connect's chdb backend
drops ``query_id``): this is verified on paper (tests/unit/engine/test_statements.py), and runs as is on a server.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable

from clickhouse_connect.driver.client import Client

from chmv_assets.errors import ChmvError


def statement_id(operation: str, *parts: str) -> str:
    """``chmv-<operation>-<16 hex digits>``: the same for the same operation and parts, on every host and run."""
    digest = hashlib.sha1("\x1f".join((operation, *parts)).encode()).hexdigest()[:16]
    return f"chmv-{operation}-{digest}"


def chunk_id(query_id: str, number: int) -> str:
    """The ``query_id`` of chunk ``number`` (1, 2, …) of the statement ``query_id``: itself for the first chunk,
    ``<query_id>-<number>`` for the next ones (:func:`running` finds them all by the first one's id)."""
    return query_id if number <= 1 else f"{query_id}-{number}"


def running(client: Client, query_ids: Iterable[str]) -> list[tuple[str, float]]:
    """``(query_id, elapsed seconds)`` of those of ``query_ids`` the server is running, and of their parts
    (``<query_id>-<n>``: the later chunks of a paced insert, :func:`chunk_id`)."""
    ids = sorted(set(query_ids))
    if not ids:
        return []
    rows = client.query(
        "SELECT query_id, elapsed FROM system.processes WHERE query_id IN {ids:Array(String)} "
        "OR arrayExists(i -> startsWith(query_id, concat(i, '-')), {ids:Array(String)})",
        parameters={"ids": ids},
    ).result_rows
    return [(str(q), float(e)) for q, e in rows]


def wait_for_orphans(client: Client, query_ids: Iterable[str], timeout: float) -> list[str]:
    """Wait up to ``timeout`` seconds for the statements of ``query_ids`` still running to end; the ids waited for.

    Raises:
        ChmvError: One still runs at the timeout (the caller must not repeat its work meanwhile).
    """
    deadline = time.monotonic() + timeout
    waited: list[str] = []
    while found := running(client, query_ids):
        waited = sorted(set(waited) | {q for q, _ in found})
        if time.monotonic() >= deadline:
            listed = ", ".join(f"{q} ({e:.0f}s)" for q, e in found)
            raise ChmvError(
                f"a statement of an earlier, interrupted run is still running on the server: {listed}; "
                "it must finish before this run repeats its work (or KILL QUERY it)"
            )
        time.sleep(0.5)
    return waited


def kill_filling(client: Client, tables: Iterable[str]) -> None:
    """Kill the statements that name any of ``tables`` (a killed run's shadows, about to be dropped: a fill still
    running into one would hold the drop up, on a server)."""
    names = sorted(set(tables))
    if names:
        client.command(
            "KILL QUERY WHERE multiSearchAny(query, {names:Array(String)}) AND query_id != queryID() SYNC",
            parameters={"names": names},
        )
