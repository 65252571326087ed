"""SQL that reads how the server is doing: load and part limits, mutations, MVs, replication; merging a partition.

Pure text, with the tables to look at bound as ``{dbs:Array(String)}`` and ``{names:Array(String)}`` (pairs are
matched in Python: the filter may return a few rows of other pairs). Every statement reads ``system.*`` tables only,
is one round trip, and runs on a server as on the embedded engine (where ``system.replicas`` and
``system.replication_queue`` exist and are empty); ``tests/unit/sql/golden/health`` holds them as rendered.
"""

from __future__ import annotations

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.parts_sql import part_counts_sql
from chmv_assets.sql.quoting import qualified, string_literal

#: The MergeTree limits an insert runs into, server defaults in system.merge_tree_settings.
PART_LIMITS = ("parts_to_delay_insert", "parts_to_throw_insert", "max_parts_in_total")
#: system.metrics of the merge and mutation pool: tasks running, pool size.
POOL_METRICS = ("BackgroundMergesAndMutationsPoolTask", "BackgroundMergesAndMutationsPoolSize")
#: ``query_id``s of chmv's heavy statements (:func:`chmv_assets.engine.statements.statement_id`): inserts and merges.
CHMV_WRITES = "^chmv-(rebuild|ingest|optimize)-"


def _of(column: str = "table") -> str:
    """The filter on the bound tables, by their ``database`` and ``column``."""
    return "database IN {dbs:Array(String)} AND " + column + " IN {names:Array(String)}"


def bind(tables: list[ObjectRef]) -> dict[str, list[str]]:
    """The parameters of every statement here for ``tables``."""
    return {"dbs": sorted({t.database for t in tables}), "names": sorted({t.name for t in tables})}


def limits_sql(*, tables: bool = False) -> str:
    """The server's insert limits, read once per session: rows ``(database, name, text, value)``, the MergeTree
    defaults of :data:`PART_LIMITS` (system.merge_tree_settings), the session's ``max_partitions_per_insert_block``
    and ``background_pool_size`` (system.server_settings), each with an empty database; with ``tables``, each bound
    table's ``engine_full`` (:func:`table_settings_sql`) too, in the same statement."""
    names = ", ".join(string_literal(n) for n in PART_LIMITS)
    sql = (
        f"SELECT '' AS database, name, '' AS text, toFloat64OrZero(value) AS value FROM system.merge_tree_settings "
        f"WHERE name IN ({names})\n"
        "UNION ALL\nSELECT '', 'max_partitions_per_insert_block', '', toFloat64(getSetting('max_partitions_per_insert_block'))\n"
        "UNION ALL\nSELECT '', name, '', toFloat64OrZero(value) FROM system.server_settings WHERE name = 'background_pool_size'"
    )
    return sql + (f"\nUNION ALL\n{_table_rows()}" if tables else "")


def _table_rows() -> str:
    return f"SELECT database, name, engine_full, 0 FROM system.tables WHERE {_of('name')}"


def table_settings_sql() -> str:
    """Each table's ``engine_full`` (its own SETTINGS override the server's part limits): ``(database, name,
    engine_full)``."""
    return f"SELECT database, name, engine_full FROM system.tables WHERE {_of('name')}"


#: The partitions an insert writes (see :func:`load_sql`).
_WRITTEN = (
    "WHERE concat(database, '.', table) IN {whole:Array(String)} "
    "OR concat(database, '.', table, '/', partition_id) IN {keys:Array(String)} "
)


def load_sql(*, running: bool, partitions: bool = False) -> str:
    """What an insert waits for, in one statement: rows ``(kind, database, table, partition, value)``.

    ``parts``: each table's busiest partition and its active parts (with ``partitions``, among the partitions the
    insert writes: a table of ``{whole:Array(String)}`` (``db.table``) counts every partition, any other only those
    of ``{keys:Array(String)}`` (``db.table/partition_id``)); ``metric``: the merge pool's busy tasks and size
    (:data:`POOL_METRICS`); with ``running``, one ``running`` row: chmv's inserts and merges the server runs now (every
    host's, found by their ``query_id``; the embedded engine serves one process and drops ``query_id``s).
    """
    metrics = ", ".join(string_literal(m) for m in POOL_METRICS)
    branches = [
        "SELECT 'parts' AS kind, database, table, argMax(partition_id, c) AS partition, toFloat64(max(c)) AS value "
        f"FROM ({part_counts_sql()}) {_WRITTEN if partitions else ''}GROUP BY database, table",
        f"SELECT 'metric', '', metric, '', toFloat64(value) FROM system.metrics WHERE metric IN ({metrics})",
    ]
    if running:
        branches.append(
            "SELECT 'running', '', '', '', toFloat64(count()) FROM system.processes "
            f"WHERE match(query_id, {string_literal(CHMV_WRITES)}) "
            "AND (query_kind = 'Insert' OR startsWith(query_id, 'chmv-optimize-'))"
        )
    return "\nUNION ALL\n".join(branches)


def merges_sql() -> str:
    """Merges and mutations running per table: ``(database, table, merges, mutations)``."""
    return (
        "SELECT database, table, countIf(NOT is_mutation), countIf(is_mutation) FROM system.merges "
        f"WHERE {_of()} GROUP BY database, table"
    )


def mutations_sql() -> str:
    """Mutations not done yet, oldest first: ``(database, table, mutation_id, command, age_seconds, parts_to_do,
    is_killed, latest_fail_reason, latest_failed_part)``."""
    return (
        "SELECT database, table, mutation_id, command, toUInt64(greatest(0, dateDiff('second', create_time, now()))), "
        "parts_to_do, is_killed, latest_fail_reason, latest_failed_part "
        f"FROM system.mutations WHERE NOT is_done AND {_of()} ORDER BY create_time, mutation_id"
    )


def views_state_sql() -> str:
    """Which of the MVs are live or detached: ``(database, name, state)``, state ``live`` or ``detached``; an MV in
    neither is missing."""
    return (
        f"SELECT database, name, 'live' FROM system.tables WHERE {_of('name')}\n"
        f"UNION ALL\nSELECT database, table, 'detached' FROM system.detached_tables WHERE {_of()}"
    )


def readonly_sql() -> str:
    """Tables the server will not write: ``(database, table, why)``, a ``Replicated*`` replica in read-only mode
    (Keeper lost, metadata broken) or a table whose every disk is read-only."""
    return (
        "SELECT database, table, if(is_session_expired, 'replica read-only: its Keeper session expired', "
        "concat('replica read-only', if(zookeeper_exception != '', concat(': ', zookeeper_exception), ''))) "
        f"FROM system.replicas WHERE is_readonly AND {_of()}\n"
        "UNION ALL\n"
        "SELECT database, name, concat('every disk of storage policy ', storage_policy, ' is read-only') "
        f"FROM system.tables WHERE {_of('name')} AND storage_policy IN ("
        "SELECT policy_name FROM system.storage_policies WHERE arrayAll(d -> d IN "
        "(SELECT name FROM system.disks WHERE is_read_only), disks))"
    )


def replication_sql() -> str:
    """Per ``Replicated*`` table: ``(database, table, queue_size, inserts_in_queue, merges_in_queue,
    oldest_entry_seconds, absolute_delay, active_replicas, total_replicas, entries_failing, max_tries,
    last_exception)`` from ``system.replicas`` and ``system.replication_queue``."""
    return (
        "SELECT r.database, r.table, r.queue_size, r.inserts_in_queue, r.merges_in_queue, "
        "if(r.queue_size > 0, toUInt64(greatest(0, dateDiff('second', r.queue_oldest_time, now()))), 0), "
        "r.absolute_delay, r.active_replicas, r.total_replicas, ifNull(q.failing, 0), ifNull(q.tries, 0), "
        "if(ifNull(q.exception, '') != '', q.exception, r.last_queue_update_exception) "
        "FROM system.replicas AS r LEFT JOIN ("
        "SELECT database, table, countIf(last_exception != '') AS failing, max(num_tries) AS tries, "
        f"argMax(last_exception, num_tries) AS exception FROM system.replication_queue WHERE {_of()} "
        "GROUP BY database, table) AS q ON q.database = r.database AND q.table = r.table "
        "WHERE r.database IN {dbs:Array(String)} AND r.table IN {names:Array(String)} ORDER BY r.database, r.table"
    )


def optimize_sql(table: ObjectRef, partition_id: str) -> str:
    """``OPTIMIZE TABLE t PARTITION ID '…' FINAL`` on the server chmv talks to: a ``Replicated*`` table's merge is
    replicated by the table itself (like a rebuild's swap, never ``ON CLUSTER``)."""
    return f"OPTIMIZE TABLE {qualified(table)} PARTITION ID {string_literal(partition_id)} FINAL"
