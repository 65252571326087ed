"""Statements on live objects of a cluster deployment: where ``ON CLUSTER`` goes, and whose Keeper path a table gets.

Rules (ClickHouse's documentation and sources, checked by the golden tests of ``tests/unit/sql/golden/``):

- ``CREATE``, ``DROP``, ``RENAME`` (``EXCHANGE``) and ``ATTACH`` run on one server and are not replicated, even for
  ``Replicated*`` tables ("Data Replication": a replicated table may even have different names on different
  replicas). So every such statement chmv sends for an object whose repo DDL says ``ON CLUSTER c`` carries
  ``ON CLUSTER c``, as do the schema ALTERs (``ADD COLUMN``, ``MODIFY TTL``…) and an MV's ``MODIFY QUERY``.
  For a ``Replicated*`` table, ClickHouse runs such an ALTER on one replica per shard and Keeper carries it to the
  others (``DDLWorker::taskShouldBeExecutedOnLeader``); an MV is local to each host, so every host runs it.
- The partition swap of a rebuild (``REPLACE PARTITION … FROM shadow``, ``DROP PARTITION``) is the exception: it
  runs **without** ``ON CLUSTER``, on the server whose shadow holds the rebuilt rows. With ``ON CLUSTER`` it would
  run on an arbitrary replica of every shard: where that replica's shadow is empty (another shard, or a replica
  that has not fetched the shadow's parts yet) it would replace the partition with nothing. On a ``Replicated*``
  target the swap is itself replicated: the other replicas of the shard fetch the new parts from this one.
- A table built beside a ``Replicated*`` one gets a Keeper path of its own (a path shared with the live table
  would make it another replica of the live table): see :func:`shadow_engine` and :func:`version_keeper_path`.
  With no engine arguments the server's ``default_replica_path`` (``/clickhouse/tables/{uuid}/{shard}``) already
  differs per table (``{uuid}`` is the new table's own), so no path is written; the engine's own parameters
  (``ver`` of ``ReplicatedReplacingMergeTree(path, replica, ver)``) keep their positions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project, Table
from chmv_assets.sql.quoting import qualified, quote, string_literal

#: The suffix of the Keeper path of a new version: ``…/t`` → ``…/t__chmv_v2`` → ``…/t__chmv_v3``.
_VERSION = re.compile(r"__chmv_v(\d+)$")


def on_cluster(cluster: str | None) -> str:
    """`` ON CLUSTER `c` `` for a cluster name (macros such as ``{cluster}`` are expanded by the server), or ``""``."""
    return f" ON CLUSTER {quote(cluster)}" if cluster else ""


def drop_table_sql(ref: ObjectRef, cluster: str | None = None) -> str:
    """``DROP TABLE IF EXISTS t [ON CLUSTER c] SYNC`` (``SYNC``: a ``Replicated*`` table's Keeper path is freed)."""
    return f"DROP TABLE IF EXISTS {qualified(ref)}{on_cluster(cluster)} SYNC"


def drop_view_sql(ref: ObjectRef, cluster: str | None = None) -> str:
    """``DROP VIEW IF EXISTS mv [ON CLUSTER c] SYNC``."""
    return f"DROP VIEW IF EXISTS {qualified(ref)}{on_cluster(cluster)} SYNC"


def exchange_sql(left: ObjectRef, right: ObjectRef, cluster: str | None = None) -> str:
    """``EXCHANGE TABLES a AND b [ON CLUSTER c]``: on a cluster, every host swaps its own two tables."""
    return f"EXCHANGE TABLES {qualified(left)} AND {qualified(right)}{on_cluster(cluster)}"


def rename_sql(old: ObjectRef, new: ObjectRef, cluster: str | None = None) -> str:
    """``RENAME TABLE a TO b [ON CLUSTER c]``."""
    return f"RENAME TABLE {qualified(old)} TO {qualified(new)}{on_cluster(cluster)}"


def alter_table_sql(ref: ObjectRef, clauses: str | Sequence[str], cluster: str | None = None) -> str:
    """``ALTER TABLE t [ON CLUSTER c] <clauses>`` for schema changes (not for partition swaps: see the module)."""
    text = clauses if isinstance(clauses, str) else ", ".join(clauses)
    return f"ALTER TABLE {qualified(ref)}{on_cluster(cluster)} {text}"


def modify_query_sql(ref: ObjectRef, select_sql: str, cluster: str | None = None) -> str:
    """``ALTER TABLE mv [ON CLUSTER c] MODIFY QUERY <select>`` (the repo SELECT, verbatim)."""
    return alter_table_sql(ref, f"MODIFY QUERY {select_sql}", cluster)


def attach_view_sql(ref: ObjectRef, cluster: str | None = None) -> str:
    """``ATTACH TABLE mv``; on a cluster ``ATTACH TABLE IF NOT EXISTS mv ON CLUSTER c``, so the hosts where the MV is
    attached (the detach was seen on one host) do not fail the query."""
    if cluster:
        return f"ATTACH TABLE IF NOT EXISTS {qualified(ref)}{on_cluster(cluster)}"
    return f"ATTACH TABLE {qualified(ref)}"


def cluster_of(project: Project, ref: ObjectRef) -> str | None:
    """The ``ON CLUSTER`` of ``ref``'s repo statement (a table, an MV or an MV's inner table), None if it has none."""
    view = project.views.get(ref)
    if view is not None:
        return view.on_cluster
    table = project.table(ref)
    return table.on_cluster if table is not None else None


def deployment_cluster(project: Project) -> str | None:
    """The cluster the DDL directory deploys to: the first ``ON CLUSTER`` of its tables and MVs (None: one server).

    chmv's own objects (``chmv_meta``) follow it. A directory that names several clusters gets the first one.
    """
    objects: list[Table | MaterializedView] = [*project.tables.values(), *project.views.values()]
    for obj in objects:
        if obj.on_cluster:
            return obj.on_cluster
    return None


def replicated_deployment(project: Project) -> bool:
    """Some table of the DDL directory has a ``Replicated*`` engine."""
    return any(t.engine is not None and t.engine.replicated for t in project.tables.values())


def next_version_path(live_path: str) -> str:
    """The Keeper path of the next version of a table whose path is ``live_path``.

    ``'/clickhouse/tables/{shard}/db/t'`` → ``…/t__chmv_v2``; ``…/t__chmv_v2`` → ``…/t__chmv_v3``. Derived from
    the **live** table's path, not the repo's: after a swap the live table is the former new version, whose path
    the next new version must not reuse. ``{shard}`` and other macros stay as written.
    """
    match = _VERSION.search(live_path)
    if match is None:
        return f"{live_path}__chmv_v2"
    return f"{live_path[: match.start()]}__chmv_v{int(match.group(1)) + 1}"


def version_keeper_path(repo: Table, live: Table | None) -> str | None:
    """The Keeper path to write into a new version of ``repo`` (built beside ``live``), or None to keep the repo's.

    None when the repo writes no path (the server's default path, with the new table's own ``{uuid}``) or a path
    with ``{uuid}`` (the same). Otherwise the live table's path with the next ``__chmv_v<N>`` suffix (the repo's
    when the live one is unknown or has no written path).
    """
    engine = repo.engine
    if engine is None or not engine.replicated or engine.keeper_path is None or "{uuid}" in engine.keeper_path:
        return None
    live_engine = live.engine if live is not None else None
    base = live_engine.keeper_path if live_engine is not None and live_engine.keeper_path else engine.keeper_path
    return next_version_path(base)


def local_keeper_path(table: Table) -> bool:
    """``table``'s engine has a Keeper path one server can create a replica under alone (no ``{uuid}``).

    The server refuses ``{uuid}`` and empty ``Replicated*`` arguments outside ``ON CLUSTER`` queries ("Macro 'uuid'
    and empty arguments of ReplicatedMergeTree are supported only for ON CLUSTER queries with Atomic database
    engine": ClickHouse's ``test_replicated_without_arguments``).
    """
    engine = table.engine
    return engine is not None and engine.keeper_path is not None and "{uuid}" not in engine.keeper_path


def shadow_engine(table: Table, shadow: ObjectRef) -> str:
    """The ``ENGINE = …`` of a shadow of the ``Replicated*`` table ``table``, created on one server.

    With a Keeper path the server can expand alone, the same engine with a path of its own
    (``<path>__chmv_shadow_<target>_<partition>_r<run>``: one per run, so a leftover shadow of a killed run on another
    replica is never joined), the replica name as written, the engine's own parameters
    after them); else (no arguments, or ``{uuid}``) the plain family with the engine's own parameters: a
    ``Replicated*`` table without a written path can only be created ``ON CLUSTER``.
    """
    engine = table.engine
    assert engine is not None and engine.replicated
    if local_keeper_path(table):
        assert engine.keeper_path is not None and engine.replica_name is not None
        path = f"{engine.keeper_path}__{shadow.name.lstrip('_')}"
        args = [string_literal(path), string_literal(engine.replica_name), *engine.family_arguments]
        return f"ENGINE = {engine.name}({', '.join(args)})"
    return plain_engine(table)


def plain_engine(table: Table) -> str:
    """``ENGINE = <family>(<the engine's own parameters>)``: ``table``'s engine without replication."""
    engine = table.engine
    assert engine is not None
    return f"ENGINE = {engine.family}({', '.join(engine.family_arguments)})"


def storage_clauses(table: Table) -> list[str]:
    """The repo's PARTITION BY, ORDER BY, PRIMARY KEY, TTL and SETTINGS of ``table``, verbatim, in that order."""
    pairs = (
        ("PARTITION BY", table.partition_by.sql if table.partition_by else None),
        ("ORDER BY", table.order_by),
        ("PRIMARY KEY", table.primary_key),
        ("TTL", table.ttl),
        ("SETTINGS", table.settings),
    )
    return [f"{keyword} {text}" for keyword, text in pairs if text]
