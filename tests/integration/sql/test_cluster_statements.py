"""What chdb (one embedded server, no cluster, no Keeper) can verify of the SQL chmv generates for a cluster.

chdb runs neither ``ON CLUSTER`` ("Requested cluster 'main' not found") nor ``Replicated*`` engines (no ``{shard}``
macro, no Keeper). What it does check, on ClickHouse 26.9's own parser and engine:

- every statement of the golden files (``tests/unit/sql/golden/cluster``) parses: the ``ON CLUSTER`` placements of
  CREATE, DROP, ALTER, MODIFY QUERY, EXCHANGE, RENAME and ATTACH, the engine clauses of shadows and new versions;
- ``chmv plan`` of the cluster fixture on an empty server, and its preflight (every table and MV checked on this
  server as plain local objects: ``ON CLUSTER`` dropped, ``Replicated*`` as its plain family);
- the rebuild statements of the fixture's targets that need no Keeper run on plain stand-ins of those targets: the
  shadow of a target without a written Keeper path (its plain family with the repo's keys and TTL) is accepted by
  ``REPLACE PARTITION``, and an unpartitioned replicated target's ``REPLACE PARTITION tuple()`` / ``DROP PARTITION
  tuple()`` swap its whole table.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from chmv_assets.ddl.partitioning import partition_scheme, window_at
from chmv_assets.engine.clock import session_zone
from chmv_assets.engine.drift import format_queries
from chmv_assets.engine.lifecycle.plan import Action
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.lifecycle.preflight import preflight
from chmv_assets.engine.rebuild.planner import plan_from_source
from chmv_assets.sql.quoting import qualified
from chmv_assets.sql.rebuild_sql import (
    create_shadow_sql,
    drop_shadow_sql,
    insert_sql,
    local_copy_sql,
    partition_expression,
    shadow_ref,
    swap_sql,
    view_select,
)
from chmv_assets.sql.rewrite import local_table_sql, renamed_statement
from resources.clickhouse import ClickHouseResource

from support.cluster import golden_statements, load_cluster
from support.ddl import ref

ORDERS = [
    (datetime(2026, 7, 31, 23), 1, 5),
    (datetime(2026, 8, 1, 8), 1, 10),
    (datetime(2026, 8, 2, 9), 2, 20),
    (datetime(2026, 8, 31, 23), 1, 30),
    (datetime(2026, 9, 1, 0), 2, 40),
]


def test_every_golden_statement_parses_on_the_server(tmp_path):
    statements = golden_statements()
    assert len(statements) > 60
    with ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}").get_client() as client:
        formatted = format_queries(client, [sql for _, sql in statements], single_line=True)
    refused = [f"{name}: {sql[:120]}" for (name, sql), out in zip(statements, formatted, strict=True) if out is None]
    assert not refused, "\n".join(refused)
    on_cluster = [out for out in formatted if out and " ON CLUSTER main" in out]
    assert len(on_cluster) > 30  # the server read the clause where chmv put it (37 since repairs only re-attach)


def test_the_cluster_fixture_plans_and_passes_the_preflight_as_local_objects(tmp_path):
    loaded = load_cluster()
    with ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}").get_client() as client:
        plan = plan_lifecycle(client, loaded)
        report = preflight(client, loaded, plan)
        left = client.query("SELECT name FROM system.databases WHERE name LIKE '\\_chmv%'").result_rows
    assert {c.action for c in plan.changes} == {Action.CREATE_DATABASE, Action.CREATE}
    assert all(" ON CLUSTER main" in sql for sql in plan.statements())  # created on the cluster, verbatim
    project = loaded.project
    assert set(report.checked) == {r.fqn for r in (*project.tables, *project.views)}
    assert not left


@pytest.fixture
def standin(tmp_path):
    """The cluster fixture on one server: ``ON CLUSTER`` dropped, each ``Replicated*`` table as its plain family."""
    loaded = load_cluster()
    project = loaded.project
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with resource.get_client() as client:
        client.command("CREATE DATABASE shop")
        for table in project.tables.values():
            client.command(local_table_sql(table, table.ref))
        for view in project.views.values():
            client.command(renamed_statement(view, {}, local=True))
        client.insert("shop.orders", [list(row) for row in ORDERS], column_names=["ts", "customer", "amount"])
    return loaded, resource


def finalized_daily(client, relation: str) -> list[tuple]:
    return client.query(
        f"SELECT day, customer, countMerge(orders), sumMerge(revenue) FROM {relation} "
        "GROUP BY day, customer ORDER BY day, customer"
    ).result_rows


def test_the_plain_family_shadow_of_a_target_without_keeper_path_swaps_in(standin):
    """customer_daily (``ReplicatedAggregatingMergeTree`` without arguments): the shadow chmv creates for it is its
    plain family with the repo's PARTITION BY, ORDER BY and TTL; REPLACE PARTITION takes it."""
    loaded, resource = standin
    project = loaded.project
    target = ref("shop.customer_daily")
    table, view = project.table(target), project.views[ref("shop.customer_daily_mv")]
    scheme = partition_scheme(table, (view,))
    august = window_at(datetime(2026, 8, 1), "month")
    shadow = shadow_ref(target, august.key)
    with resource.get_client() as client:
        client.command(f"TRUNCATE TABLE {qualified(target)}")  # what a rebuild must restore
        create = create_shadow_sql(shadow, target, table)
        assert "ENGINE = AggregatingMergeTree() PARTITION BY" in create
        for sql in (
            drop_shadow_sql(shadow),
            create,
            insert_sql(shadow, view, view_select(view, project, table, scheme, august, zone=session_zone(client))),
            swap_sql(
                target, shadow, f"tuple({partition_expression(table, scheme, august, zone=session_zone(client))})"
            ),
            drop_shadow_sql(shadow),
        ):
            client.command(sql)
        rebuilt = finalized_daily(client, qualified(target))
        expected = finalized_daily(client, f"({view.select_sql}) WHERE toYYYYMM(day) = 202608")
    assert (
        rebuilt
        == expected
        == [
            (datetime(2026, 8, 1).date(), 1, 1, 10),
            (datetime(2026, 8, 2).date(), 2, 1, 20),
            (datetime(2026, 8, 31).date(), 1, 1, 30),
        ]
    )


def test_an_unpartitioned_replicated_target_is_swapped_by_its_partition_not_exchanged(standin):
    """customer_totals: EXCHANGE is not replicated, so chmv replaces ``tuple()`` (and drops it for an empty shadow)."""
    loaded, resource = standin
    project = loaded.project
    target = ref("shop.customer_totals")
    table, view = project.table(target), project.views[ref("shop.customer_totals_mv")]
    shadow = shadow_ref(target, None)
    scheme = partition_scheme(table, (view,))
    with resource.get_client() as client:
        plan = plan_from_source(loaded, target, [None], target, zone=session_zone(client))
        partition = plan.steps[0].partition  # the planner's choice for this target
        replace = swap_sql(target, shadow, partition)
        assert replace.endswith("REPLACE PARTITION tuple() FROM `shop`.`_chmv_shadow_customer_totals_all`")
        client.command(f"TRUNCATE TABLE {qualified(target)}")
        for sql in (
            local_copy_sql(shadow, target, table),
            insert_sql(shadow, view, view_select(view, project, table, scheme, None, zone=session_zone(client))),
            replace,
            drop_shadow_sql(shadow),
        ):
            client.command(sql)
        rebuilt = client.query(
            f"SELECT customer, sum(revenue) FROM {qualified(target)} GROUP BY customer ORDER BY customer"
        ).result_rows
        client.command(local_copy_sql(shadow, target, table))
        client.command(swap_sql(target, shadow, partition, empty=True))
        emptied = client.command(f"SELECT count() FROM {qualified(target)}")
        client.command(drop_shadow_sql(shadow))
    assert rebuilt == [(1, 45), (2, 60)] and emptied == 0
