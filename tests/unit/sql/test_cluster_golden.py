"""Golden SQL of a cluster deployment: every statement chmv generates for ON CLUSTER / Replicated* objects.

No cluster runs here: the plans are made from a snapshot of what one replica shows (``golden/cluster/live.sql``)
with the planner ``chmv plan`` runs, the rebuild, cut-over and repair statements with the functions chmv apply, the
rebuilds and the recovery sensor run, and everything is compared with ``golden/cluster/*.sql``
(``CHMV_UPDATE_GOLDEN=1`` rewrites them). Besides the golden text, each test asserts the rules themselves
(``chmv_assets.sql.cluster``), so a golden file rewritten without reading cannot hide a broken rule.
``tests/integration/sql/test_cluster_statements.py`` has chdb's parser accept every golden statement.
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine.lifecycle.plan import Action
from chmv_assets.engine.lifecycle.planner import next_version_ref, old_version_ref, plan_from_state
from chmv_assets.engine.rebuild.planner import Swap, plan_from_source
from chmv_assets.sql.cluster import attach_view_sql, next_version_path, version_keeper_path
from chmv_assets.sql.lifecycle_sql import cut_over_sql, discard_beside_sql, finish_swap_sql, keep_old_sql
from chmv_assets.sql.meta import meta_ddl_for, meta_placement, migration_sql
from chmv_assets.sql.rebuild_sql import (
    drop_shadow_sql,
    insert_sql,
    swap_sql,
    view_select,
)

from support.cluster import (
    LIVE_SQL,
    assert_golden,
    copy_cluster_ddl,
    live_state,
    load_cluster,
    render_plan,
    section,
)
from support.ddl import ref
from support.lifecycle import edit

#: ``ON CLUSTER main`` as written in the DDL (verbatim statements) or as chmv renders it (quoted).
ON_MAIN = re.compile(r"ON CLUSTER `?main`?")
AUGUST = window_at(datetime(2026, 8, 1), "month")
LIVE_PATHS = (
    "'/clickhouse/tables/{shard}/shop/latest_order'",
    "'/clickhouse/tables/{shard}/shop/customer_totals'",
    "'/clickhouse/tables/{shard}/shop/orders'",
)


def rebuild_statements(loaded, target, window, *, live=None, empty: bool = False) -> list[str]:
    """The statements :func:`chmv_assets.engine.rebuild.steps.run_step` sends for one step, in its order."""
    project = loaded.project
    plan = plan_from_source(loaded, target, [window], live or target, run="5eed", zone="UTC")
    (step,) = plan.steps
    table = project.table(target)
    statements = [drop_shadow_sql(step.shadow), step.create_shadow]
    for view in project.views_into(target):
        statements.append(
            insert_sql(step.shadow, view, view_select(view, project, table, plan.scheme, window, zone="UTC"))
        )
    statements += [swap_sql(plan.live, step.shadow, step.partition, empty=empty), drop_shadow_sql(step.shadow)]
    return statements


def plan_with(tmp_path, *edits, live_sql=None, allow_drop=False):
    """The plan of the fixture with ``edits`` applied, against the snapshot of one replica."""
    ddl = copy_cluster_ddl(tmp_path)
    for old, new in edits:
        edit(ddl, "shop.sql", old, new)
    loaded = load_cluster(ddl)
    return loaded, plan_from_state(live_state(loaded, live_sql), loaded, allow_drop=allow_drop)


def test_the_deployed_fixture_plans_nothing():
    """The server's default Keeper path where the repo writes none is not a difference (nor is ON CLUSTER, which
    the server does not keep)."""
    loaded = load_cluster()
    plan = plan_from_state(live_state(loaded), loaded)
    assert plan.changes == () and plan.notes == (), render_plan(plan)


def test_rebuild_of_a_partition_keeps_the_swap_on_this_server_and_gives_shadows_their_own_keeper_path():
    loaded = load_cluster()
    text = ""
    cases = [
        ("shop.latest_order", AUGUST, {}),
        ("shop.latest_order", AUGUST, {"empty": True}),
        ("shop.customer_daily", AUGUST, {}),
        ("shop.customer_totals", None, {}),
        ("shop.customer_totals", None, {"empty": True}),
        ("shop.latest_order", AUGUST, {"live": next_version_ref(ref("shop.latest_order"))}),
    ]
    for target, window, options in cases:
        statements = rebuild_statements(loaded, ref(target), window, **options)
        where = f"into {options['live'].fqn}" if "live" in options else ""
        title = f"rebuild {target} {window.key if window else '(whole table)'} {where}"
        text += section(f"{title.strip()}{', the shadow empty' if options.get('empty') else ''}", statements) + "\n"
        assert not any("ON CLUSTER" in s for s in statements), "a rebuild runs on one server"
        assert not any(path in s for s in statements for path in LIVE_PATHS), "a shadow under the target's path"
    assert_golden("rebuild.sql", text)
    latest = rebuild_statements(loaded, ref("shop.latest_order"), AUGUST)
    assert (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/shop/latest_order__chmv_shadow_latest_order_20260801_r5eed', "
        "'{replica}', ts)" in latest[1]
    )
    daily = rebuild_statements(loaded, ref("shop.customer_daily"), AUGUST)
    assert "ENGINE = AggregatingMergeTree() PARTITION BY toYYYYMM(day) ORDER BY (customer, day) TTL" in daily[1]
    totals = rebuild_statements(loaded, ref("shop.customer_totals"), None)
    assert (
        totals[-2]
        == "ALTER TABLE `shop`.`customer_totals` REPLACE PARTITION tuple() FROM `shop`.`_chmv_shadow_customer_totals_all_r5eed`"
    )
    assert (
        plan_from_source(loaded, ref("shop.customer_totals"), [None], ref("shop.customer_totals"), zone="UTC")
        .steps[0]
        .swap
        == Swap.REPLACE_PARTITION
    )


SELECT_CHANGE = (
    "SELECT customer, ts, amount\nFROM shop.orders;",
    "SELECT customer, ts, amount\nFROM shop.orders\nWHERE amount > 0;",
)
NEW_COLUMN = (
    "    amount UInt64\n)\nENGINE = ReplicatedReplacingMergeTree",
    "    amount UInt64,\n    channel LowCardinality(String) DEFAULT 'web'\n)\nENGINE = ReplicatedReplacingMergeTree",
)
TTL_CHANGE = ("TTL day + INTERVAL 5 YEAR", "TTL day + INTERVAL 6 YEAR")
NEW_SORT_KEYS = (
    ("ORDER BY (customer, day)", "ORDER BY (day, customer)"),
    ("PARTITION BY toYYYYMM(ts)\nORDER BY customer;", "PARTITION BY toYYYYMM(ts)\nORDER BY (customer, ts);"),
)


@pytest.mark.parametrize(
    ("name", "edits", "action"),
    [
        ("plan_select_change.sql", [SELECT_CHANGE], Action.MODIFY_QUERY),
        ("plan_new_column.sql", [NEW_COLUMN], Action.ALTER),
        ("plan_ttl_change.sql", [TTL_CHANGE], Action.ALTER),
    ],
    ids=["select-change-modify-query", "new-column-alter", "ttl-change-alter"],
)
def test_in_place_changes_run_on_the_whole_cluster(tmp_path, name, edits, action):
    _, plan = plan_with(tmp_path, *edits)
    assert [c.action for c in plan.changes] == [action]
    assert all(ON_MAIN.search(sql) for sql in plan.statements())
    assert_golden(name, render_plan(plan))


def test_new_versions_are_built_on_the_cluster_under_keeper_paths_of_their_own(tmp_path):
    loaded, plan = plan_with(tmp_path, *NEW_SORT_KEYS)
    assert [(c.action, c.ref.fqn) for c in plan.changes] == [
        (Action.NEW_VERSION, "shop.customer_daily"),
        (Action.NEW_VERSION, "shop.latest_order"),
    ]
    project = loaded.project
    text = render_plan(plan)
    old_stamp = "20260901120000"
    for change in plan.changes:
        target, beside = change.ref, change.next_ref
        old = ref(f"{target.database}.{old_version_ref(target).name}_{old_stamp}")
        live_views = {v for v, _ in change.views}
        text += "\n" + section(
            f"cut-over of {target.fqn}", cut_over_sql(project, target, beside, change.views, live_views)
        )
        text += section(
            f"cut-over of {target.fqn}, its MV missing on this server (created from the DDL)",
            cut_over_sql(project, target, beside, change.views, set()),
        )
        text += section(
            f"the replaced version of {target.fqn} kept aside", [keep_old_sql(project, target, beside, old)]
        )
        text += section(
            f"a half-built version of {target.fqn} discarded (a killed apply)",
            discard_beside_sql(project, target, beside, change.views),
        )
        text += section(
            f"a cut-over of {target.fqn} killed after its EXCHANGE, finished",
            finish_swap_sql(project, target, change.views, live_views),
        )
        generated = [
            *change.statements,
            *cut_over_sql(project, target, beside, change.views, live_views),
            keep_old_sql(project, target, beside, old),
            *discard_beside_sql(project, target, beside, change.views),
        ]
        assert all(ON_MAIN.search(sql) for sql in generated)
        assert not any(path in sql for sql in change.statements for path in LIVE_PATHS)
    assert_golden("plan_new_sort_key.sql", text)
    daily, latest = plan.changes
    assert "ENGINE = ReplicatedAggregatingMergeTree\n" in daily.statements[0], "no arguments: the server's default path"
    assert (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/shop/latest_order__chmv_v2', '{replica}', ts)"
        in latest.statements[0]
    )


def test_the_next_version_path_derives_from_the_live_one():
    """After a swap the live table is the former new version: the next one must not reuse its path."""
    assert next_version_path("/clickhouse/tables/{shard}/shop/t") == "/clickhouse/tables/{shard}/shop/t__chmv_v2"
    assert (
        next_version_path("/clickhouse/tables/{shard}/shop/t__chmv_v2") == "/clickhouse/tables/{shard}/shop/t__chmv_v3"
    )
    assert next_version_path("/p/t__chmv_v9") == "/p/t__chmv_v10"
    loaded = load_cluster()
    repo = loaded.project.tables[ref("shop.latest_order")]
    live = live_state(loaded).live[ref("shop.latest_order")]
    swapped = parse_statement(
        live.create_query.replace("latest_order'", "latest_order__chmv_v2'"), default_database="shop"
    )
    assert version_keeper_path(repo, swapped) == "/clickhouse/tables/{shard}/shop/latest_order__chmv_v3"
    assert version_keeper_path(loaded.project.tables[ref("shop.customer_daily")], None) is None  # the server's default


def test_a_second_new_version_after_a_swap_takes_the_next_path(tmp_path):
    swapped = live_sql_with(
        "'/clickhouse/tables/{shard}/shop/latest_order'", "'/clickhouse/tables/{shard}/shop/latest_order__chmv_v2'"
    )
    _, plan = plan_with(tmp_path, NEW_SORT_KEYS[1], live_sql=swapped)
    (change,) = plan.changes
    assert "'/clickhouse/tables/{shard}/shop/latest_order__chmv_v3'" in change.statements[0]


def live_sql_with(old: str, new: str) -> str:
    """``live.sql`` with ``old`` (which occurs once) replaced: another state of the replica."""
    text = LIVE_SQL.read_text(encoding="utf-8")
    assert text.count(old) == 1
    return text.replace(old, new)


def test_drops_of_an_old_version_and_a_column_run_on_the_cluster(tmp_path):
    old = "_chmv_old_latest_order_20260901120000"
    live = live_sql_with(
        "amount UInt64) ENGINE = ReplicatedReplacingMergeTree",
        "amount UInt64, note String) ENGINE = ReplicatedReplacingMergeTree",
    )
    live += (
        f"CREATE TABLE shop.{old} (customer UInt64, ts DateTime, amount UInt64) ENGINE = "
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/shop/latest_order', '{replica}', ts) "
        "PARTITION BY toYYYYMM(ts) ORDER BY customer;\n"
    )
    _, kept = plan_with(tmp_path / "kept", live_sql=live)
    assert kept.changes == () and len(kept.notes) == 2
    _, plan = plan_with(tmp_path / "dropped", live_sql=live, allow_drop=True)
    assert [(c.action, c.kind) for c in plan.changes] == [(Action.DROP, "column"), (Action.DROP, "table")]
    assert all(ON_MAIN.search(sql) for sql in plan.statements())
    assert_golden("plan_drops.sql", render_plan(plan))


def test_the_reattach_of_a_repair_carries_the_mvs_cluster():
    """The chmv_apply job's repair runs re-attach a detached MV on every host (the detach was seen on one)."""
    project = load_cluster().project
    text = ""
    for view in project.views.values():
        statement = attach_view_sql(view.ref, view.on_cluster)
        assert ON_MAIN.search(statement)
        text += section(f"re-attach the detached MV {view.ref.fqn}", [statement])
    assert_golden("recovery.sql", text)


def test_chmv_meta_is_created_on_the_cluster_and_replicated():
    project = load_cluster().project
    statements = list(meta_ddl_for(project))
    assert all(ON_MAIN.search(s) for s in statements)
    assert all(re.search(r"ENGINE = ReplicatedReplacingMergeTree\(version\)", s) for s in statements[1:])
    cluster, replicated = meta_placement(project)
    migration = list(migration_sql(cluster, replicated=replicated, renamed="watermarks_migrated_20260901000000"))
    assert ON_MAIN.search(migration[-1]) and not any(ON_MAIN.search(s) for s in migration[:-1])  # one copy, shared
    text = section("chmv_meta of a cluster deployment", statements)
    text += section("the legacy chmv_meta.watermarks copied into the typed tables, then renamed aside", migration)
    assert_golden("meta.sql", text)
