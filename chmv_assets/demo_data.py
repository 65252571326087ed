"""A deterministic data generator for the example project (seeded; same seed, same rows).

Rows come as Arrow tables per source table so the same data can be inserted into ClickHouse (firing
the live MVs) or written to a Parquet landing zone for the Spark ingestion. About 1% of rows are exact
duplicates (retried deliveries) and about 2% arrive late (their event time is up to 40 minutes before
the time they land).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from chmv_assets.engine.clock import server_zone

DEFAULT_START = date(2026, 8, 1)
DEFAULT_DAYS = 92
DEFAULT_SEED = 42
#: Share of the default ~1M rows each source gets.
SHARES = {
    "analytics.api_requests": 0.30,
    "analytics.raw_requests": 0.15,
    "analytics.raw_webhooks": 0.10,
    "analytics.all_events": 0.20,
    "analytics.counter": 0.10,
    "analytics.raw_events": 0.15,
}
#: Event-time column of each source (matches the example's chmv.toml).
TIME_COLUMNS = {
    "analytics.api_requests": "timestamp",
    "analytics.raw_requests": "timestamp",
    "analytics.raw_webhooks": "received_at",
    "analytics.all_events": "timestamp",
    "analytics.counter": "when",
    "analytics.raw_events": "timestamp",
}
ENDPOINTS = np.array(["/api/v1/users", "/api/v1/orders", "/api/v2/users", "/api/v2/search", "/health"])
EVENT_TYPES = np.array(["click", "view", "purchase", "metric", "login"])
LEVELS = np.array(["info", "info", "info", "warn", "error"])


def fits(project) -> bool:
    """The project has every source the generator writes (the example project's): another schema gets no demo rows."""
    return all(any(ref.fqn == fqn for ref in project.tables) for fqn in SHARES)


def _times(rng: np.random.Generator, n: int, start: date, days: int) -> np.ndarray:
    base = np.datetime64(datetime.combine(start, datetime.min.time()), "s")
    offsets = np.sort(rng.integers(0, days * 86400, size=n))
    return base + offsets.astype("timedelta64[s]")


def _api_requests(rng, n, start, days):
    return {
        "timestamp": _times(rng, n, start, days),
        "endpoint": ENDPOINTS[rng.integers(0, len(ENDPOINTS), n)],
        "user_id": rng.integers(1, 5000, n).astype(np.uint64),
        "response_time_ms": rng.gamma(2.0, 80.0, n).astype(np.uint32),
        "status_code": rng.choice(np.array([200, 200, 200, 201, 404, 500], dtype=np.uint16), n),
    }


def _raw_requests(rng, n, start, days):
    paths = np.array(["/api/v1/users/1", "/api/v2/orders/7", "/api/v3/search", "/static/app.js"])
    return {
        "timestamp": _times(rng, n, start, days),
        "request_id": np.char.add("req-", np.arange(n).astype(str)),
        "user_id": rng.integers(1, 5000, n).astype(np.uint64),
        "response_time_ms": rng.gamma(2.0, 150.0, n).astype(np.uint32),
        "status_code": rng.choice(np.array([200, 200, 302, 404, 503], dtype=np.uint16), n),
        "path": paths[rng.integers(0, len(paths), n)],
    }


def _raw_webhooks(rng, n, start, days):
    received = _times(rng, n, start, days)
    return {
        "received_at": received,
        "event_id": np.char.add("evt-", np.arange(n).astype(str)),
        "entity_id": rng.integers(1, 20000, n).astype(np.uint64),
        "payload": np.char.add("state-", rng.integers(0, 100, n).astype(str)),
        "updated_at": received - rng.integers(0, 600, n).astype("timedelta64[s]"),
    }


def _all_events(rng, n, start, days):
    kinds = EVENT_TYPES[rng.integers(0, len(EVENT_TYPES), n)]
    return {
        "timestamp": _times(rng, n, start, days),
        "event_type": kinds,
        "level": LEVELS[rng.integers(0, len(LEVELS), n)],
        "is_audit": (rng.random(n) < 0.1).astype(np.uint8),
        "payload": np.char.add("p", rng.integers(0, 10**6, n).astype(str)),
    }


def _counter(rng, n, start, days):
    device = rng.integers(1, 11, n).astype(np.uint32)
    return {
        "when": _times(rng, n, start, days),
        "device": device,
        "value": (device * 3 + rng.random(n) * 5.3).astype(np.float32),
    }


def _raw_events(rng, n, start, days):
    return {
        "timestamp": _times(rng, n, start, days),
        "user_id": rng.integers(1, 3000, n).astype(np.uint64),
        "event_type": EVENT_TYPES[rng.integers(0, len(EVENT_TYPES), n)],
        "duration_ms": rng.integers(1, 5000, n).astype(np.uint32),
    }


GENERATORS: dict[str, Callable] = {
    "analytics.api_requests": _api_requests,
    "analytics.raw_requests": _raw_requests,
    "analytics.raw_webhooks": _raw_webhooks,
    "analytics.all_events": _all_events,
    "analytics.counter": _counter,
    "analytics.raw_events": _raw_events,
}


def generate(
    source: str,
    rows: int,
    *,
    start: date = DEFAULT_START,
    days: int = DEFAULT_DAYS,
    seed: int = DEFAULT_SEED,
    duplicates: float = 0.01,
) -> pa.Table:
    """Rows of one source table, sorted by event time, with ``duplicates`` of them repeated exactly.

    Args:
        source: ``analytics.<table>`` of the example project.
        rows: Distinct rows to generate (duplicates come on top).
        start: First day of the data.
        days: Days of data.
        seed: Same seed, same rows.
        duplicates: Share of rows delivered twice.
    """
    rng = np.random.default_rng([seed, sorted(GENERATORS).index(source)])
    columns = GENERATORS[source](rng, rows, start, days)
    table = pa.table(columns)
    n_dup = int(rows * duplicates)
    if n_dup:
        idx = np.sort(rng.choice(rows, n_dup, replace=False))
        table = pa.concat_tables([table, table.take(pa.array(idx))])
        order = np.argsort(table[TIME_COLUMNS[source]].to_numpy(), kind="stable")
        table = table.take(pa.array(order))
    return table


def generate_all(total_rows: int = 1_000_000, **kwargs) -> dict[str, pa.Table]:
    """Every source of the example project, ``total_rows`` split by :data:`SHARES`."""
    return {source: generate(source, int(total_rows * share), **kwargs) for source, share in SHARES.items()}


def batches(table: pa.Table, rows: int) -> Iterator[pa.Table]:
    for offset in range(0, table.num_rows, rows):
        yield table.slice(offset, rows)


def load_into_clickhouse(client, tables: dict[str, pa.Table], *, batch_rows: int = 50_000) -> dict[str, int]:
    """Insert generated rows into the source tables in blocks, so the live MVs fire per block as in production.

    The generated times are wall-clock times: they are inserted as that wall clock in the server's zone (an Arrow
    timestamp without a zone would be read as UTC), so the demo holds the same rows whatever the server's zone.
    """
    counts = {}
    zone = str(server_zone(client))
    for source, table in tables.items():
        if zone not in ("UTC", "Etc/UTC"):
            table = _as_server_wall_clock(table, zone)
        database, _, name = source.partition(".")
        for batch in batches(table, batch_rows):
            client.insert_arrow(name, batch, database=database, settings={"max_partitions_per_insert_block": 0})
        counts[source] = table.num_rows
    return counts


def _as_server_wall_clock(table: pa.Table, zone: str) -> pa.Table:
    for index, column in enumerate(table.schema):
        if pa.types.is_timestamp(column.type) and column.type.tz is None:
            table = table.set_column(index, column.name, pc.assume_timezone(table.column(index), zone))
    return table


def write_landing_zone(
    root: str | Path, tables: dict[str, pa.Table], *, late_share: float = 0.02, seed: int = DEFAULT_SEED
) -> list[Path]:
    """Write rows as a lake would hold them: ``<root>/<source>/date=YYYY-MM-DD/hour=HH.parquet`` by arrival.

    About ``late_share`` of rows arrive up to 40 minutes after their event time, landing in a later file.
    """
    written = []
    rng = np.random.default_rng(seed)
    for source, table in tables.items():
        times = table[TIME_COLUMNS[source]].to_numpy().astype("datetime64[s]")
        delay = np.where(rng.random(len(times)) < late_share, rng.integers(60, 2400, len(times)), 0)
        arrival = times + delay.astype("timedelta64[s]")
        hours = arrival.astype("datetime64[h]")
        for hour in np.unique(hours):
            mask = hours == hour
            moment = hour.astype(datetime)
            folder = Path(root) / source / f"date={moment:%Y-%m-%d}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"hour={moment:%H}.parquet"
            pq.write_table(table.filter(pa.array(mask)), path)
            written.append(path)
    return written
