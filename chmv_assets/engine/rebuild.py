"""Rebuild a target partition atomically: shadow table, the MVs' own SELECTs, partition swap."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef, Project, Table
from chmv_assets.ddl.partitioning import PartitionScheme, PartitionWindow, partition_scheme
from chmv_assets.engine.catalog import live_table
from chmv_assets.errors import ChmvError
from chmv_assets.sql.quoting import qualified
from chmv_assets.sql.rebuild_sql import create_shadow_sql, insert_sql, partition_expression, shadow_ref, view_select

#: Settings for inserts into a shadow table: one rebuild may write many partitions of an unpartitioned asset.
SHADOW_INSERT_SETTINGS = {"max_partitions_per_insert_block": 0, "insert_deduplicate": 0}


@dataclass
class RebuildResult:
    """What one rebuild did, for materialization metadata."""

    target: str
    partition: str | None
    method: str
    rows_written: int
    seconds: float
    statements: list[str] = field(default_factory=list)


def rebuild(
    client: Client,
    project: Project,
    target: ObjectRef,
    window: PartitionWindow | None,
    *,
    trigger_where: Callable[[ObjectRef], str | None] | None = None,
    trigger_relation: Callable[[ObjectRef], str | None] | None = None,
    log: Callable[[str], None] | None = None,
) -> RebuildResult:
    """Rebuild one partition of ``target`` (or all of it) from the MVs that write it, then swap it in.

    Every MV writing into the target (a fan-in has several) runs its own SELECT over the trigger rows
    of the window into one shadow table with the target's structure; the shadow then replaces the
    target partition in one ``ALTER TABLE … REPLACE PARTITION`` (``EXCHANGE TABLES`` for an
    unpartitioned target). Readers see the old partition or the new one, never a mix. Refreshable
    MVs are refreshed by the server instead.

    Args:
        client: An open client.
        project: The parsed DDL.
        target: The target asset's table (or inner-table MV).
        window: The partition to rebuild; None for the whole table.
        trigger_where: Per trigger table, an extra filter on its rows (the backfill cutoff).
        trigger_relation: Per trigger table, a relation to read instead (staged Parquet).
        log: Progress sink.
    """
    say = log or (lambda _msg: None)
    started = time.monotonic()
    views = project.views_into(target)
    if not views:
        raise ChmvError(f"{target.fqn} is not written by any materialized view in the DDL directory")
    if any(v.refreshable for v in views):
        statements = []
        for view in views:
            for sql in (f"SYSTEM REFRESH VIEW {qualified(view.ref)}", f"SYSTEM WAIT VIEW {qualified(view.ref)}"):
                client.command(sql)
                statements.append(sql)
        rows = int(client.command(f"SELECT count() FROM {qualified(target)}"))
        return RebuildResult(target.fqn, None, "refresh", rows, time.monotonic() - started, statements)

    table = project.table(target)
    if table is None:
        raise ChmvError(f"{target.fqn} is not defined in the DDL directory")
    scheme = partition_scheme(table, views)
    if window is not None and scheme.grain is None:
        window = None
    live = live_table(client, project, target)
    shadow = shadow_ref(live, window.key if window else None)
    statements: list[str] = []

    def run(sql: str, settings: dict | None = None) -> None:
        statements.append(sql)
        client.command(sql, settings=settings)

    run(f"DROP TABLE IF EXISTS {qualified(shadow)} SYNC")
    try:
        run(create_shadow_sql(shadow, live, table))
        for view in views:
            select = view_select(
                view, project, table, scheme, window,
                trigger_where=trigger_where(view.trigger) if trigger_where and view.trigger else None,
                trigger_relation=trigger_relation(view.trigger) if trigger_relation and view.trigger else None,
            )  # fmt: skip
            say(f"{view.ref.fqn}: running the MV's own SELECT into {shadow.fqn}")
            run(insert_sql(shadow, view, select), SHADOW_INSERT_SETTINGS)
        rows = int(client.command(f"SELECT count() FROM {qualified(shadow)}"))
        method = _swap(run, live, shadow, table, scheme, window, rows)
        say(f"{target.fqn} {window.key if window else '(whole table)'}: {method}, {rows} rows")
    finally:
        run(f"DROP TABLE IF EXISTS {qualified(shadow)} SYNC")
    return RebuildResult(target.fqn, window.key if window else None, method, rows, time.monotonic() - started,
                         statements)  # fmt: skip


def _swap(run, live: ObjectRef, shadow: ObjectRef, table: Table, scheme: PartitionScheme,
          window: PartitionWindow | None, rows: int) -> str:  # fmt: skip
    if window is None:
        run(f"EXCHANGE TABLES {qualified(live)} AND {qualified(shadow)}")
        return "exchange"
    partition = f"tuple({partition_expression(table, scheme, window)})"
    if rows == 0:
        run(f"ALTER TABLE {qualified(live)} DROP PARTITION {partition}")
        return "drop"
    run(f"ALTER TABLE {qualified(live)} REPLACE PARTITION {partition} FROM {qualified(shadow)}")
    return "replace"
