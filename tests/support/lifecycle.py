"""Helpers of the lifecycle tests: a private copy of the example DDL to edit, and a snapshot of the server."""

from __future__ import annotations

import shutil
from pathlib import Path

from support.paths import EXAMPLE_DDL


def copy_ddl(root: Path) -> Path:
    """A copy of ``examples/ddl`` under ``root``, to edit."""
    ddl = root / "ddl"
    shutil.copytree(EXAMPLE_DDL, ddl)
    return ddl


def edit(ddl: Path, file: str, old: str, new: str) -> None:
    """Replace ``old`` (which must occur exactly once) with ``new`` in ``ddl/file``."""
    path = ddl / file
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {file}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def snapshot(client) -> list[tuple]:
    """Every database, object (with its CREATE statement) and active row count: equal before and after = unchanged."""
    tables = client.query(
        "SELECT t.database, t.name, t.create_table_query, p.rows FROM system.tables AS t LEFT JOIN "
        "(SELECT database, table, sum(rows) AS rows FROM system.parts WHERE active GROUP BY database, table) AS p "
        "ON p.database = t.database AND p.table = t.name WHERE t.database NOT IN ('system', 'INFORMATION_SCHEMA', "
        "'information_schema') ORDER BY t.database, t.name"
    ).result_rows
    databases = client.query("SELECT name FROM system.databases ORDER BY name").result_rows
    return [*databases, *tables]


# The edits of the example DDL the lifecycle tests use, one per change kind.
ADD_COLUMN = (
    "40_all_events.sql",
    "CREATE TABLE IF NOT EXISTS analytics.audit_log (timestamp DateTime, payload String)",
    "CREATE TABLE IF NOT EXISTS analytics.audit_log (timestamp DateTime, payload String, "
    "source_ip String DEFAULT '' COMMENT 'who')",
)
CHANGED_FILTER = ("40_all_events.sql", "WHERE level = 'error';", "WHERE level IN ('error', 'warn');")
NEW_TTL = ("40_all_events.sql", "TTL timestamp + INTERVAL 10 YEAR", "TTL timestamp + INTERVAL 11 YEAR")
NEW_SORT_KEY = (
    "60_raw_events.sql",
    "ORDER BY (event_date, event_hour, event_type, user_id);",
    "ORDER BY (event_type, event_date, event_hour, user_id);",
)
TOP_OF_CHAIN_SELECT = ("60_raw_events.sql", "    count() AS count,\n", "    countIf(duration_ms > 100) AS count,\n")
SELECT_CHANGE = (
    "10_api_requests.sql",
    "sumState(toUInt64(1)) AS request_count",
    "sumState(toUInt64(status_code < 500)) AS request_count",
)

# Valid DDL (lineage passes) whose MV reads a column its source lacks: the preflight's case of issue 10.
SHOP = """\
CREATE DATABASE IF NOT EXISTS shop ENGINE = Atomic;
CREATE TABLE shop.orders (ts DateTime, amount UInt64) ENGINE = MergeTree ORDER BY ts;
CREATE TABLE shop.daily (day Date, total UInt64) ENGINE = SummingMergeTree ORDER BY day;
CREATE TABLE shop.by_customer (customer UInt64, total UInt64) ENGINE = SummingMergeTree ORDER BY customer;
-- Revenue per customer: reads a column orders does not have.
CREATE MATERIALIZED VIEW shop.by_customer_mv TO shop.by_customer AS
SELECT customer_id AS customer, sum(amount) AS total FROM shop.orders GROUP BY customer;
"""


# -- exactness: a target against its MVs' own SELECT over every source row -------------------------------------


def expected_relation(loaded, target) -> str:
    """What ``target`` must hold: the UNION ALL of its MVs' own SELECTs over every row of their sources, a chained
    trigger replaced by what that upstream target must hold (spliced in through the model's spans)."""
    from chmv_assets.sql.rebuild_sql import select_with_source

    project = loaded.project
    selects = []
    for view in project.views_into(target):
        select = view.select_sql
        if view.trigger is not None and view.trigger in set(project.targets):
            select = select_with_source(view, view.trigger, f"({expected_relation(loaded, view.trigger)})")
        selects.append(f"SELECT * FROM ({select})")
    return " UNION ALL ".join(selects)


def _finalized(loaded, target, relation: str) -> str:
    """The target's rows made comparable: pass-through rows as they are; aggregated rows merged per sorting key."""
    from chmv_assets.sql.quoting import quote

    project = loaded.project
    table = project.table(target)
    views = project.views_into(target)
    columns = [c for c in table.columns if any(v.output(c.name) for v in views)]
    if not any(v.group_by or v.aggregates for v in views):
        return f"SELECT {', '.join(quote(c.name) for c in columns)} FROM ({relation})"
    keys = [c for c in columns if c.name in table.order_by_columns]
    measures = []
    for c in columns:
        state = c.data_type.aggregate
        if c in keys:
            continue
        if state is not None and state.function in ("sum", "count", "uniq"):
            measures.append(f"{state.function}Merge({quote(c.name)})")
        elif state is None and c.data_type.is_numeric:
            measures.append(f"sum({quote(c.name)})")
    key_list = ", ".join(quote(c.name) for c in keys)
    return f"SELECT {key_list}, {', '.join(measures)} FROM ({relation}) GROUP BY {key_list}"


def assert_exact(client, loaded, target) -> int:
    """Assert ``target`` equals its MVs' own SELECT over all source rows (rows as a multiset, or merged per key).

    Returns:
        The number of (finalized) rows compared.
    """
    from chmv_assets.sql.quoting import qualified

    actual = _finalized(loaded, target, f"SELECT * FROM {qualified(target)}")
    expected = _finalized(loaded, target, expected_relation(loaded, target))
    digest = "SELECT count(), sum(cityHash64(*)) FROM ({})"
    ((a_rows, a_hash),) = client.query(digest.format(actual)).result_rows
    ((e_rows, e_hash),) = client.query(digest.format(expected)).result_rows
    assert (a_rows, a_hash) == (e_rows, e_hash), (
        f"{target.fqn}: {a_rows} rows (hash {a_hash}) but its SELECT over all source rows gives {e_rows} "
        f"(hash {e_hash})"
    )
    return a_rows


# -- a small deployed example and a writer inserting into its sources throughout an apply ---------------------

#: Days of demo data in :func:`small_engine` (the writer adds rows up to two days past them: new partitions).
DAYS = 12


def small_engine(path: Path, loaded, rows: int = 6_000):
    """A ClickHouseResource on a fresh embedded engine with the example DDL and ``rows`` demo rows over :data:`DAYS`
    days (few partitions: a lifecycle test re-derives every one of them, twice checked)."""
    from chmv_assets import demo_data
    from chmv_assets.engine.lifecycle.deploy import apply
    from resources.clickhouse import ClickHouseResource

    resource = ClickHouseResource(dsn=f"chdb://{path}")
    with resource.get_client() as client:
        apply(client, loaded.project)
        demo_data.load_into_clickhouse(client, demo_data.generate_all(rows, days=DAYS))
    return resource


WRITES = {
    "all_events": "INSERT INTO analytics.all_events SELECT toDateTime('2026-08-01 00:00:00') + rand() % (14 * 86400), "
    "['metric', 'click', 'audit'][rand() % 3 + 1], ['error', 'warn', 'info'][rand(1) % 3 + 1], "
    "rand(2) % 2, concat('w', toString(number)) FROM numbers(40)",
    "raw_events": "INSERT INTO analytics.raw_events SELECT toDateTime('2026-08-01 00:00:00') + rand() % (14 * 86400), "
    "rand(1) % 50, ['click', 'view', 'buy'][rand(2) % 3 + 1], rand(3) % 500 FROM numbers(40)",
    "api_requests": "INSERT INTO analytics.api_requests SELECT toDateTime('2026-08-01 00:00:00') + rand() % (14 * 86400), "
    "['/a', '/b', '/c'][rand(1) % 3 + 1], rand(2) % 100, rand(3) % 2000, [200, 404, 503][rand(4) % 3 + 1] "
    "FROM numbers(40)",
}


class Writer:
    """A thread inserting batches into one source through chmv's resource, each under the source's write gate,
    from start to stop: rows at any time of the existing history, so they land in partitions being rebuilt.

    ``pause`` (the apply's hook, called where it holds no gate) waits until the writer has inserted another
    batch: every step of the apply is interleaved with inserts, without sleeping to win a race.
    """

    def __init__(self, resource, source: str, interval: float = 0.2):
        import threading

        from chmv_assets.ddl.models import ObjectRef

        self.resource = resource
        self.source = ObjectRef(database="analytics", name=source)
        self.sql = WRITES[source]
        self.batches = 0
        self.paused_at: list[str] = []
        self.error: BaseException | None = None
        self.interval = interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"writer-{source}", daemon=True)

    def _run(self) -> None:
        from chmv_assets.engine.ingest.cutoff import source_gate

        try:
            while not self._stop.is_set():
                with source_gate([self.source]), self.resource.get_client() as client:
                    client.command(self.sql)
                with self._cond:
                    self.batches += 1
                    self._cond.notify_all()
                # Paced, not racing: the next batch comes when the apply passes a point (pause) or after a while.
                self._wake.wait(self.interval)
                self._wake.clear()
        except BaseException as err:  # noqa: BLE001 - surfaced by stop()
            self.error = err
            with self._cond:
                self._cond.notify_all()

    def pause(self, point: str) -> None:
        with self._cond:
            target = self.batches + 1
            self._wake.set()
            self._cond.wait_for(lambda: self.batches >= target or self.error is not None, timeout=120)
        self.paused_at.append(point)

    def __enter__(self) -> Writer:
        self._thread.start()
        self.pause("start")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=120)
        if self.error is not None:
            raise self.error
