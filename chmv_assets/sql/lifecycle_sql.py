"""The statements of a new version's life beside the live target (``chmv apply``), each with the object's cluster.

A new version ``_chmv_next_<t>`` and the copies ``_chmv_next_<mv>`` of the MVs feeding it are built from the repo
statements (``ON CLUSTER`` kept, the table under a Keeper path of its own: the lifecycle planner); what follows is
rendered here so that ``chmv apply`` and the golden tests of ``tests/unit/sql/golden/`` read the same text. Every
statement carries the ``ON CLUSTER`` of the repo object it stands for (:mod:`chmv_assets.sql.cluster`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.sql.cluster import (
    cluster_of,
    drop_table_sql,
    drop_view_sql,
    exchange_sql,
    modify_query_sql,
    rename_sql,
)


def discard_beside_sql(
    project: Project, target: ObjectRef, beside: ObjectRef, views: Sequence[tuple[ObjectRef, ObjectRef]]
) -> list[str]:
    """Drop a (half-built) new version: the MV copies feeding it first, then the table.

    Args:
        project: The parsed DDL.
        target: The live target.
        beside: Its new version.
        views: ``(mv, copy)`` pairs: the MVs writing the target and their copies writing ``beside``.
    """
    statements = [drop_view_sql(copy, cluster_of(project, view)) for view, copy in views]
    return [*statements, drop_table_sql(beside, cluster_of(project, target))]


def cut_over_sql(
    project: Project,
    target: ObjectRef,
    beside: ObjectRef,
    views: Sequence[tuple[ObjectRef, ObjectRef]],
    live_views: Collection[ObjectRef],
) -> list[str]:
    """The cut-over, in order: ``EXCHANGE TABLES target AND beside``, then per MV its new SELECT (``MODIFY QUERY``,
    or its CREATE when it does not exist) and its copy dropped.

    On a cluster every host swaps its own tables when its DDL queue reaches the statement: not one atomic moment
    across hosts (docs/cluster.md).

    Args:
        live_views: The MVs that exist on the server (the others are created from the repo statement).
    """
    statements = [exchange_sql(target, beside, cluster_of(project, target))]
    for view_ref, copy in views:
        view = project.views[view_ref]
        if view_ref in live_views:
            statements.append(modify_query_sql(view_ref, view.select_sql, view.on_cluster))
        else:
            statements.append(view.statement)
        statements.append(drop_view_sql(copy, view.on_cluster))
    return statements


def finish_swap_sql(
    project: Project,
    target: ObjectRef,
    copies: Sequence[tuple[ObjectRef, ObjectRef]],
    live_views: Collection[ObjectRef],
) -> list[str]:
    """A cut-over killed after its ``EXCHANGE``: each live MV on its new SELECT, each copy dropped.

    Args:
        copies: ``(mv, copy)`` pairs of the MVs writing ``target``.
        live_views: The MVs that exist on the server.
    """
    statements = []
    for view_ref, copy in copies:
        view = project.views[view_ref]
        if view_ref in live_views and view.target is not None:
            statements.append(modify_query_sql(view_ref, view.select_sql, view.on_cluster))
        statements.append(drop_view_sql(copy, view.on_cluster))
    return statements


def keep_old_sql(project: Project, target: ObjectRef, beside: ObjectRef, old: ObjectRef) -> str:
    """``RENAME TABLE beside TO old``: the replaced version kept aside (under its own Keeper path, unchanged)."""
    return rename_sql(beside, old, cluster_of(project, target))
