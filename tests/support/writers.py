"""Helpers of the writers tests: a small schema written by others, and threads that insert the way others do.

A writer chmv does not control is, on the embedded engine, a thread with a clickhouse-connect client of its own: it
holds no gate and no lease, exactly like an application inserting into a server. chdb lets every thread of the
process open the engine (one process per engine path), so the threads here write while chmv rebuilds.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import clickhouse_connect

DDL = """\
CREATE DATABASE IF NOT EXISTS w ENGINE = Atomic;
-- The events applications insert, closed months and the open one.
CREATE TABLE w.events (ts DateTime, k UInt32, v UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY (k, ts);
-- Per day and key: a TO target partitioned by month.
CREATE TABLE w.daily (day Date, k UInt32, n UInt64, s UInt64) ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(day) ORDER BY (day, k);
CREATE MATERIALIZED VIEW w.daily_mv TO w.daily AS
SELECT toDate(ts) AS day, k, count() AS n, sum(v) AS s FROM w.events GROUP BY day, k;
-- Per key, without TO and unpartitioned: its inner table is the only copy.
CREATE MATERIALIZED VIEW w.by_key ENGINE = SummingMergeTree ORDER BY k AS
SELECT k, count() AS n, sum(v) AS s FROM w.events GROUP BY k;
-- Per month and key, without TO and partitioned.
CREATE MATERIALIZED VIEW w.by_month ENGINE = SummingMergeTree PARTITION BY toYYYYMM(m) ORDER BY (m, k) AS
SELECT toStartOfMonth(ts) AS m, k, count() AS n FROM w.events GROUP BY m, k;
"""

TOML = """\
partition_start = "2026-01-01"
[rebuild]
race_backoff_seconds = 0.05
lease_wait_seconds = 60
"""

#: Rows of January (a read long enough for a writer to land inside it), of February and March, and of the open
#: month (stamped now).
JANUARY_ROWS = 3_000_000
CLOSED_ROWS = 1_000_000
OPEN_ROWS = 2_000

#: Independent recomputes over the source: (the target's finalized rows, the same from w.events), per month.
RECOMPUTE = {
    "daily": (
        "SELECT day, k, sum(n), sum(s) FROM w.daily WHERE toYYYYMM(day) = {m:UInt32} GROUP BY ALL ORDER BY ALL",
        "SELECT toDate(ts) AS d, k, count(), sum(v) FROM w.events WHERE toYYYYMM(ts) = {m:UInt32} "
        "GROUP BY ALL ORDER BY ALL",
    ),
    "by_month": (
        "SELECT m, k, sum(n) FROM w.by_month WHERE toYYYYMM(m) = {m:UInt32} GROUP BY ALL ORDER BY ALL",
        "SELECT toStartOfMonth(ts) AS mm, k, count() FROM w.events WHERE toYYYYMM(ts) = {m:UInt32} "
        "GROUP BY ALL ORDER BY ALL",
    ),
}
BY_KEY = (
    "SELECT k, sum(n), sum(s) FROM w.by_key GROUP BY k ORDER BY k",
    "SELECT k, count(), sum(v) FROM w.events GROUP BY k ORDER BY k",
)


def write_project(root: Path, toml: str = TOML) -> Path:
    """The writers schema as a DDL directory under ``root``."""
    ddl = root / "ddl"
    ddl.mkdir(parents=True, exist_ok=True)
    (ddl / "w.sql").write_text(DDL, encoding="utf-8")
    (ddl / "chmv.toml").write_text(toml, encoding="utf-8")
    return ddl


def load_rows(client) -> None:
    """The closed months (every key in every hour) and some rows of the open month."""
    for start, seconds, rows in (("2026-01-01", 2678400, JANUARY_ROWS), ("2026-02-01", 5097600, CLOSED_ROWS)):
        client.command(
            "INSERT INTO w.events SELECT toDateTime({start:String}) + intDiv(number * {s:UInt64}, {n:UInt64}), "
            "number % 200, number % 1000 FROM numbers({n:UInt64})",
            parameters={"start": f"{start} 00:00:00", "s": seconds, "n": rows},
        )
    client.command(
        "INSERT INTO w.events SELECT now() - number % 3600, number % 200, 1 FROM numbers({n:UInt64})",
        parameters={"n": OPEN_ROWS},
    )


def month_matches(client, target: str, month: int) -> bool:
    """The target's rows of ``month`` (YYYYMM) equal an independent recompute over the source."""
    finalized, recompute = RECOMPUTE[target]
    got = client.query(finalized, parameters={"m": month}).result_rows
    want = client.query(recompute, parameters={"m": month}).result_rows
    return got == want and bool(want)


class _Background:
    """A thread of a test's writer, started on entering and joined on leaving; what it raised is raised then.

    Subclasses set ``_thread`` (its target, ``_run``) in ``__init__`` after calling this one.
    """

    #: How long leaving waits for the thread.
    join_seconds = 60.0

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self.join_seconds)
        if self.error is not None:
            raise self.error


class ThreadWriter(_Background):
    """A thread inserting into ``w.events`` through its own client (no gate, no lease) until stopped.

    Args:
        path: The embedded engine's path.
        sql: The insert, run every ``interval`` seconds.
    """

    def __init__(self, path: str, sql: str, interval: float):
        super().__init__()
        self.path, self.sql, self.interval = path, sql, interval
        self.inserts = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="writer")

    def _run(self) -> None:
        try:
            client = clickhouse_connect.get_client(dsn=f"chdb://{self.path}")
            while not self._stop.is_set():
                client.command(self.sql, settings={"async_insert": 0})
                self.inserts += 1
                self._stop.wait(self.interval)
        except BaseException as err:  # noqa: BLE001 - surfaced on leaving
            self.error = err


class DuringFill(_Background):
    """A thread that waits until chmv's shadow fill is running (seen in ``system.processes``), then inserts ``sql``
    through its own client: a row committed after the rebuild's read began, and, where the fill outlives the insert
    (``fill_outlived_insert``), before its swap."""

    def __init__(self, path: str, sql: str, timeout: float = 60.0):
        super().__init__()
        self.path, self.sql, self.timeout = path, sql, timeout
        self.join_seconds = timeout + 5
        self.inserted_during_fill = False
        self.fill_outlived_insert = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="during-fill")

    def _run(self) -> None:
        try:
            client = clickhouse_connect.get_client(dsn=f"chdb://{self.path}")
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                filling = client.query(
                    "SELECT count() FROM system.processes WHERE query_kind = 'Insert' "
                    "AND position(query, 'INSERT INTO `w`.`_chmv_shadow_') = 1"
                ).result_rows[0][0]
                if filling:  # the read began before this insert: its row is not in it
                    client.command(self.sql, settings={"async_insert": 0})
                    self.inserted_during_fill = True
                    self.fill_outlived_insert = bool(
                        client.query(  # then the insert committed before the swap
                            "SELECT count() FROM system.processes WHERE position(query, 'INSERT INTO `w`.`_chmv_shadow_') = 1"
                        ).result_rows[0][0]
                    )
                    return
                time.sleep(0.002)
        except BaseException as err:  # noqa: BLE001 - surfaced on leaving
            self.error = err


class Racer(_Background):
    """A writer that races every read once: when a new shadow fill of ``w`` shows in ``system.processes`` it inserts
    a row at the start of the window that fill reads (its first ``toDateTime`` literal), through its own client.

    The same read repeated (same text) is left alone, so a rebuild that reads a raced partition again succeeds; one
    that does not detect the race loses the row's MV output.
    """

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self.raced = 0
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._run, daemon=True, name="racer")

    def _run(self) -> None:
        import re

        try:
            client = clickhouse_connect.get_client(dsn=f"chdb://{self.path}")
            while not self._stop.is_set():
                for (query,) in client.query(
                    "SELECT query FROM system.processes WHERE position(query, 'INSERT INTO `w`.`_chmv_shadow_') = 1"
                ).result_rows:
                    start = re.search(r"toDateTime\('([0-9-]+ [0-9:]+)'(?:, '[^']+')?\)", query)
                    if query in self._seen or start is None:
                        continue
                    self._seen.add(query)
                    client.command(
                        "INSERT INTO w.events SELECT toDateTime({t:String}) + 3600 + number, number, 2 FROM numbers(3)",
                        parameters={"t": start.group(1)},
                        settings={"async_insert": 0},
                    )
                    self.raced += 1
                time.sleep(0.002)
        except BaseException as err:  # noqa: BLE001 - surfaced on leaving
            self.error = err


class AtStatements:
    """A client factory (``get_client()``) over ``engine`` whose clients let a writer thread insert at chosen statements
    of chmv, and wait for it: a writer chmv does not control that lands exactly where a test needs it, never by a sleep.

    The writer is a thread with a clickhouse-connect client of its own (no gate, no lease); the statements run on the
    engine as they are. ``script`` maps ``(when, kind, n)`` to an insert: ``when`` is ``before`` or ``after`` the
    ``n``-th (1-based) statement of ``kind``, ``fill`` (an insert into a shadow) or ``swap`` (the ``REPLACE
    PARTITION``); each insert runs once (``done`` lists them).
    """

    KINDS = {
        "fill": lambda sql: sql.startswith("INSERT INTO `w`.`_chmv_shadow_"),
        "swap": lambda sql: sql.startswith("ALTER TABLE") and "REPLACE PARTITION" in sql,
    }

    def __init__(self, engine, script: dict[tuple[str, str, int], str]):
        self.engine, self.script = engine, dict(script)
        self.seen = {kind: 0 for kind in self.KINDS}
        self.done: list[tuple[str, str, int]] = []
        self._asks: queue.Queue = queue.Queue()
        self._answers: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._write, daemon=True, name="at-statements")

    def _write(self) -> None:
        client = clickhouse_connect.get_client(dsn=f"chdb://{self.engine.embedded_path}")
        while (sql := self._asks.get()) is not None:
            try:
                client.command(sql, settings={"async_insert": 0})
                self._answers.put(None)
            except BaseException as err:  # noqa: BLE001 - raised in the caller's thread
                self._answers.put(err)

    def _insert(self, when: str, kind: str) -> None:
        step = (when, kind, self.seen[kind])
        sql = self.script.pop(step, None)
        if sql is None:
            return
        self._asks.put(sql)
        error = self._answers.get(timeout=60)
        if error is not None:
            raise error
        self.done.append(step)

    def command(self, client, sql, *args, **kwargs):
        kinds = [k for k, matches in self.KINDS.items() if isinstance(sql, str) and matches(sql)]
        for kind in kinds:
            self.seen[kind] += 1
            self._insert("before", kind)
        result = client.command(sql, *args, **kwargs)
        for kind in kinds:
            self._insert("after", kind)
        return result

    @contextmanager
    def get_client(self, **kwargs) -> Iterator:
        with self.engine.get_client(**kwargs) as client:
            yield _Hooked(client, self)

    def __enter__(self) -> AtStatements:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._asks.put(None)
        self._thread.join(timeout=60)


class _Hooked:
    """A client whose ``command`` passes through :class:`AtStatements`; everything else is the client's."""

    def __init__(self, client, hooks: AtStatements):
        self._client, self._hooks = client, hooks

    def command(self, sql, *args, **kwargs):
        return self._hooks.command(self._client, sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)
