"""Schemas as teams run them (tests/fixtures/schemas, written for chmv's tests): each loads with the right lineage,
deploys on the embedded engine as its local twin (every stand-in named), plans "no changes" right after, runs its
pipelines through the stand-ins, and loads as a code location with one asset per target."""

from __future__ import annotations

import contextlib
import io
from datetime import datetime

import pytest

from chmv_assets.cli import main
from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.parsing.statements import parse_statement
from chmv_assets.ddl.twin import local_twin
from chmv_assets.engine.lifecycle.planner import plan_lifecycle
from chmv_assets.engine.lifecycle.preflight import preflight
from chmv_assets.errors import PreflightError
from chmv_assets.orchestration.definitions import build_definitions
from resources.clickhouse import ClickHouseResource

from support.paths import SCHEMAS

pytestmark = pytest.mark.worker_seconds(25)
#: Per fixture, each MV: (its trigger, every source, its target, the SQL functions it calls).
LINEAGE = {
    "clustered": {
        "metrics.samples_route_mv": ("metrics.samples_in", ["metrics.samples_in"], "metrics.samples_local", []),
        "metrics.minute_mv": ("metrics.samples_in", ["metrics.samples_in"], "metrics.minute_local", []),
        "metrics.errors_daily_mv": ("metrics.samples_in", ["metrics.samples_in"], "metrics.errors_daily_local", []),
    },
    "kafka_chain": {
        "shop.order_events_consumer": ("shop.order_events_queue", ["shop.order_events_queue"], "shop.order_events", []),
        "shop.order_events_dead_letters_mv": (
            "shop.order_events_queue",
            ["shop.order_events_queue"],
            "shop.order_events_dead_letters",
            [],
        ),
        "shop.revenue_daily_mv": ("shop.order_events", ["shop.order_events"], "shop.revenue_daily", []),
        "shop.revenue_monthly_mv": ("shop.revenue_daily", ["shop.revenue_daily"], "shop.revenue_monthly", []),
        "shop.invoices_mv": ("shop.invoice_files", ["shop.invoice_files"], "shop.invoices", []),
    },
    "functions_views": {
        "web.section_hits_mv": (
            "web.page_views",
            ["web.page_views", "web.live_sections"],
            "web.section_hits",
            ["is_bot", "path_section"],
        ),
        "web.referrers_daily_mv": (
            "web.page_views",
            ["web.page_views", "web.cleared_countries"],
            "web.referrers_daily",
            [],
        ),
    },
    "aliases_lambdas": {
        "tracking.tag_sets_daily_mv": ("tracking.events", ["tracking.events"], "tracking.tag_sets_daily", []),
        "tracking.checkout_steps_mv": ("tracking.events", ["tracking.events"], "tracking.checkout_steps", []),
    },
    "partition_shapes": {  # its partitions: tests/scenarios/test_partition_shapes.py
        f"fleet.{name}_mv": ("fleet.readings", ["fleet.readings"], f"fleet.{name}", [])
        for name in (
            "weekly_load",
            "quarterly_devices",
            "yearly_tenants",
            "daily_devices",
            "shift_load",
            "temperatures",
            "regional_days",
            "tenant_totals",
            "device_buckets",
            "device_latest",
        )
    }
    | {"fleet.regional_years_mv": ("fleet.regional_days", ["fleet.regional_days"], "fleet.regional_years", [])},
    "any_mv": {
        "feed.events_consumer": ("feed.events_queue", ["feed.events_queue"], "feed.events", []),
        "feed.first_seen_mv": ("feed.events", ["feed.events", "feed.first_seen"], "feed.first_seen", []),
        "feed.user_days_mv": ("feed.events", ["feed.events", "feed.returning_daily"], "feed.user_days", []),
        "feed.returning_daily_mv": ("feed.user_days", ["feed.user_days"], "feed.returning_daily", []),
        "feed.heartbeat_mv": (None, [], "feed.heartbeats", []),
        "feed.catalog_sizes_mv": ("system.tables", ["system.tables"], "feed.catalog_sizes", []),
    },
}
#: Per fixture, lines ``chmv apply`` prints about its stand-ins.
STAND_INS = {
    "clustered": [
        "  ON CLUSTER ops dropped from 12 statements",
        "metrics.samples: Distributed(ops, metrics, samples_local, cityHash64(host)) → Buffer over metrics.samples_local",
        "metrics_dist.hosts: ReplicatedReplacingMergeTree → ReplacingMergeTree",
        "metrics.samples_local: TTL toDateTime(ts) + INTERVAL 7 DAY TO VOLUME 'cold' → dropped",
    ],
    "kafka_chain": [
        "shop.order_events_queue: Kafka → Null table with its columns and the engine's virtual columns (insert into it",
        "shop.invoice_files: S3Queue → Null table",
        "shop.fx_rates_remote: MySQL → empty MergeTree of the same columns",
        "shop.fx_rates: SOURCE(MYSQL(…)) → SOURCE(NULL())",
    ],
    "functions_views": [],
    "aliases_lambdas": [],
    "partition_shapes": [],
    "any_mv": [
        "feed.events_queue: Kafka → Null table with its columns and the engine's virtual columns",
        "feed.user_days: server_version 24.8 → SETTINGS allow_dimensions_outside_sorting_key = 1 (ClickHouse before "
        "26.9 accepts columns outside the sorting key)",
    ],
}


def chmv(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> dict[str, tuple[ClickHouseResource, str]]:
    """Every fixture applied (``chmv apply``) on an embedded engine of its own, with what apply printed."""
    found = {}
    for name in LINEAGE:
        dsn = f"chdb://{tmp_path_factory.mktemp(name) / 'chdb'}"
        code, out = chmv("apply", "--ddl-dir", str(SCHEMAS / name), "--dsn", dsn)
        assert code == 0, out
        found[name] = (ClickHouseResource(dsn=dsn), out)
    return found


@pytest.mark.parametrize("name", list(LINEAGE))
def test_lineage(name):
    project = load(SCHEMAS / name).project
    views = {
        v.ref.fqn: (
            v.trigger.fqn if v.trigger else None,
            [r.fqn for r in v.source_refs],
            v.writes_to.fqn,
            sorted(v.functions),
        )
        for v in project.views.values()
    }
    for view, (trigger, sources, target, functions) in LINEAGE[name].items():
        assert views[view][:3] == (trigger, sources, target), view
        assert set(functions) <= set(views[view][3])
    assert set(views) == set(LINEAGE[name])


@pytest.mark.parametrize("name", list(LINEAGE))
def test_deployed_as_its_twin_and_then_no_changes(name, deployed):
    resource, out = deployed[name]
    for line in STAND_INS[name]:
        assert line in out, out
    assert (STAND_INS[name] != []) == ("local twin: the embedded engine runs" in out)
    if name == "functions_views":  # what the preflight cannot check before the first apply, it says
        assert "web.live_sections: not checked, it uses what does not exist yet (web.team_channels)" in out
        assert "web.section_hits_mv: not checked, it uses what does not exist yet (function is_bot" in out
    code, plan = chmv("plan", "--ddl-dir", str(SCHEMAS / name), "--dsn", resource.resolved_dsn)
    assert code == 0 and "no changes: the server matches the DDL directory" in plan, plan


@pytest.mark.parametrize("name", list(LINEAGE))
def test_loads_as_a_code_location_with_one_asset_per_target(name, deployed):
    resource, _ = deployed[name]
    loaded = load(SCHEMAS / name)
    repo = build_definitions(loaded, clickhouse=resource).get_repository_def()
    graph = repo.asset_graph
    materializable = {"/".join(k.path) for k in graph.get_all_asset_keys() if graph.get(k).is_materializable}
    assert materializable == {t.fqn.replace(".", "/") for t in loaded.project.targets}


def rows(client, sql: str) -> list[tuple]:
    return client.query(sql).result_rows


def test_a_clustered_schema_runs_on_one_host(deployed):
    resource, _ = deployed["clustered"]
    with resource.get_client() as client:
        # recent samples: older ones would fall to the raw table's 30-day TTL
        client.command(
            "INSERT INTO metrics.samples_in (host, service, metric, ts, value) VALUES "
            "('h1', 'api', 'latency', toStartOfMinute(now()), 10), ('h2', 'api', 'latency', toStartOfMinute(now()), 30), "
            "('h1', 'api', 'http_errors', now(), 2)"
        )
        assert rows(client, "SELECT count() FROM metrics.samples_local") == [(3,)]
        assert rows(
            client,
            "SELECT countMerge(samples), sumMerge(total), max(peak) FROM metrics.minute WHERE metric = 'latency'",
        ) == [(2, 40.0, 30.0)]
        assert rows(client, "SELECT service, sum(errors) FROM metrics.errors_all GROUP BY service") == [("api", 1)]
        # writes through the Distributed table's stand-in land in the local table
        client.command(
            "INSERT INTO metrics.samples (host, service, metric, ts, value) VALUES ('h3', 'web', 'latency', now(), 5)"
        )
        assert rows(client, "SELECT count() FROM metrics.samples_local") == [(4,)]
        assert rows(client, "SELECT count() FROM metrics.samples WHERE host = 'h3'") == [(1,)]


def test_a_kafka_fed_chain_runs_from_its_stand_in(deployed):
    resource, _ = deployed["kafka_chain"]
    with resource.get_client() as client:
        client.command(
            "INSERT INTO shop.order_events_queue (order_id, customer_id, status, amount_cents, currency, occurred_at, "
            "_partition, _offset) SETTINGS insert_allow_materialized_columns = 1 "
            "VALUES (1, 7, 'paid', 1250, 'EUR', '2026-06-02 09:00:00', 0, 41), "
            "(2, 8, 'paid', 800, 'USD', '2026-06-02 10:00:00', 1, 42), (3, 7, 'created', 99, 'EUR', '2026-06-03 10:00:00', 0, 43)"
        )
        client.command(
            "INSERT INTO shop.order_events_queue (_raw_message, _error, _offset) "
            "SETTINGS insert_allow_materialized_columns = 1 VALUES ('{oops', 'bad json', 44)"
        )
        assert rows(
            client, "SELECT order_id, kafka_partition, kafka_offset FROM shop.order_events ORDER BY order_id"
        ) == [(1, 0, 41), (2, 1, 42), (3, 0, 43)]
        assert rows(client, "SELECT kafka_offset, raw, error FROM shop.order_events_dead_letters") == [
            (44, "{oops", "bad json")
        ]
        # the remote dictionary's stand-in is empty: dictGetOrDefault falls back to its default
        assert rows(client, "SELECT day, uniqMerge(orders), sum(revenue_eur) FROM shop.revenue_daily GROUP BY day") == [
            (datetime(2026, 6, 2).date(), 2, 20.5)
        ]
        assert rows(client, "SELECT uniqMerge(orders) FROM shop.revenue_monthly") == [(2,)]
        client.command(
            "INSERT INTO shop.invoice_files (invoice_id, order_id, issued_at, _file) "
            "SETTINGS insert_allow_materialized_columns = 1 VALUES ('inv-1', 1, '2026-06-02 12:00:00', 'a.jsonl')"
        )
        assert rows(client, "SELECT invoice_id, source_file FROM shop.invoices") == [("inv-1", "a.jsonl")]
        assert rows(client, "SELECT count() FROM shop.order_events_queue") == [(0,)]  # nothing is kept in a stand-in


def test_functions_and_plain_views_feed_an_mv(deployed):
    resource, _ = deployed["functions_views"]
    with resource.get_client() as client:
        client.command(
            "INSERT INTO web.sections VALUES ('docs', 'devrel', '2026-01-01'), ('beta', 'labs', '2099-01-01')"
        )
        client.command(
            "INSERT INTO web.page_views (ts, session_id, path, referrer, user_agent, country) VALUES "
            "('2026-06-01 10:00:00', generateUUIDv4(), '/Docs/Intro/?utm=x', 'https://news.example/a', 'Mozilla', 'DE'), "
            "('2026-06-01 11:00:00', generateUUIDv4(), '/docs/api', '', 'GoogleBot/2.1', 'FR'), "
            "('2026-06-01 12:00:00', generateUUIDv4(), '/beta/new', '', 'Mozilla', 'DE')"
        )
        assert rows(
            client, "SELECT section, owner, sum(hits), sum(humans) FROM web.section_hits GROUP BY section, owner"
        ) == [("docs", "devrel", 2, 1)]
        assert rows(client, "SELECT referrer_host, sum(visits) FROM web.referrers_daily GROUP BY referrer_host") == [
            ("news.example", 1)
        ]


def test_a_target_whose_mv_calls_sql_functions_is_rebuilt(deployed):
    """The server stores an MV's SELECT with its SQL functions expanded: the rebuild planner compares the DDL's SELECT
    as the server would store it, as ``chmv plan`` does (else every rebuild of such a target was refused as "apply
    pending" while ``chmv plan`` said "no changes"). Runs after the test that gives the target its rows."""
    from chmv_assets.engine.drift import pending_refusals

    resource, _ = deployed["functions_views"]
    project = load(SCHEMAS / "functions_views").project
    target = ObjectRef(database="web", name="section_hits")
    with resource.get_client() as client:
        assert pending_refusals(client, project, target) == ()
        before = rows(client, "SELECT section, owner, sum(hits), sum(humans) FROM web.section_hits GROUP BY ALL")
    code, out = chmv(
        "rebuild", "--ddl-dir", str(SCHEMAS / "functions_views"), "--dsn", resource.resolved_dsn,
        "--target", target.fqn, "--partition", "2026-06-01",
    )  # fmt: skip
    assert code == 0, out
    with resource.get_client() as client:
        assert (
            rows(client, "SELECT section, owner, sum(hits), sum(humans) FROM web.section_hits GROUP BY ALL") == before
        )


def test_a_new_select_of_an_mv_calling_sql_functions_is_applied_once(tmp_path):
    """The server stores an expanded SQL function's body parenthesized after ``MODIFY QUERY`` (bare after ``CREATE``):
    after the apply of a changed SELECT of ``web.section_hits_mv``, ``chmv plan`` says no changes (it planned the
    same MODIFY QUERY again and again, and rebuilds were refused as "apply pending")."""
    import shutil

    ddl = tmp_path / "ddl"
    shutil.copytree(SCHEMAS / "functions_views", ddl)
    dsn = f"chdb://{tmp_path / 'chdb'}"
    assert chmv("apply", "--ddl-dir", str(ddl), "--dsn", dsn)[0] == 0
    sql = (ddl / "10_web.sql").read_text()
    join = "INNER JOIN web.live_sections AS s ON s.section = path_section(v.path)\n"
    assert join in sql
    (ddl / "10_web.sql").write_text(sql.replace(join, join + "WHERE 1 = 1\n"))
    code, out = chmv("apply", "--ddl-dir", str(ddl), "--dsn", dsn)
    assert code == 0 and "1 changes made" in out, out
    code, out = chmv("plan", "--ddl-dir", str(ddl), "--dsn", dsn)
    assert code == 0 and "no changes" in out, out


def test_aliases_inside_arguments_and_lambdas_run_as_written(deployed):
    resource, _ = deployed["aliases_lambdas"]
    with resource.get_client() as client:
        client.command(
            "INSERT INTO tracking.events (ts, user_id, event, tags, props, amounts) VALUES "
            "('2026-06-01 10:00:00', 1, 'view', ['b', 'a'], map(), [150, 20]), "
            "('2026-06-01 11:00:00', 2, 'view', ['a', 'b', 'a'], map(), [300]), "
            "('2026-06-01 12:00:00', 3, 'checkout', ['x'], map('step', 'pay'), [10, -1, 5])"
        )
        assert rows(
            client,
            "SELECT event, tag_count, sum(events), sum(big_amounts), uniqMerge(users) "
            "FROM tracking.tag_sets_daily GROUP BY event, tag_count ORDER BY event",
        ) == [("checkout", 1, 1, 0, 1), ("view", 2, 2, 2, 2)]
        assert rows(client, "SELECT count() FROM tracking.checkout_steps") == [(0,)]  # a negative amount: filtered
        assert rows(client, "SELECT uniqExact(tag_set) FROM tracking.events WHERE event = 'view'") == [(1,)]


def test_load_demo_deploys_any_schema(tmp_path):
    code, out = chmv("load-demo", "--ddl-dir", str(SCHEMAS / "kafka_chain"), "--dsn", f"chdb://{tmp_path / 'chdb'}")
    assert code == 0, out
    assert "local twin: the embedded engine runs" in out and "generated rows exist for examples/ddl only" in out


def test_the_preflight_on_a_server_copies_a_stream_table_as_a_null_table(tmp_path):
    """The DDL as written (no twin): the preflight's scratch copy of the Kafka and S3Queue sources must be stand-ins
    (a copy would be one more consumer of the group on a server, and creating a Kafka table bricks chdb: the preflight
    refuses to create one, so a regression fails here before the engine sees it)."""
    loaded = load(SCHEMAS / "kafka_chain")
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with resource.get_client() as client:
        plan = plan_lifecycle(client, loaded)
        report = preflight(client, loaded, plan)
    assert {"shop.order_events_queue", "shop.invoice_files", "shop.order_events_consumer"} <= set(report.checked)


def test_any_mv_runs_as_its_server_would(deployed):
    """SHOW CREATE's clauses, a dedup MV reading its own target, a feedback read of a downstream table, a Kafka
    consumer's SELECT * (the stand-in's virtual columns are not part of *), a Merge table's view, an AggregatingMergeTree
    of a 24.8 server: all deployed on the embedded engine (the deploy test above), and running."""
    resource, out = deployed["any_mv"]
    assert "preflight: the server accepted" in out, out
    loaded = load(SCHEMAS / "any_mv")
    assert loaded.graph.feedback == {
        ("feed.first_seen", "feed.first_seen_mv"),
        ("feed.returning_daily", "feed.user_days_mv"),
    }
    with resource.get_client() as client:
        client.command(
            "INSERT INTO feed.events_queue (id, user_id, ts, _topic, _offset) SETTINGS insert_allow_materialized_columns "
            "= 1 VALUES (1, 7, '2026-06-02 09:00:00', 'events', 1), (2, 8, '2026-06-02 10:00:00', 'events', 2)"
        )
        client.command("INSERT INTO feed.events_queue (id, user_id, ts) VALUES (3, 7, '2026-06-03 09:00:00')")
        assert rows(client, "SELECT id, user_id FROM feed.events ORDER BY id") == [(1, 7), (2, 8), (3, 7)]
        assert rows(client, "SELECT user_id, ts FROM feed.first_seen FINAL ORDER BY user_id") == [
            (7, datetime(2026, 6, 2, 9)),
            (8, datetime(2026, 6, 2, 10)),
        ]
        assert rows(client, "SELECT count() FROM feed.returning_daily") == [(3,)]
        assert rows(client, "SELECT countMerge(events) FROM feed.user_days") == [(3,)]
        assert rows(client, "SELECT count() FROM feed.all_events") == [(3,)]  # the Merge table reads feed.events


def test_a_target_its_own_mv_reads_back_is_neither_rebuilt_nor_checked_through_it(deployed):
    """``feed.first_seen``'s MV keeps a user's first event only (``NOT IN (SELECT … FROM feed.first_seen)``): its
    SELECT run now over the source yields nothing the target holds, so a rebuild through it would empty the target
    (the shrink guard stopped the unpartitioned one by chance) and parity failed every materialization. The rebuild is
    refused naming the read (force overrides it), parity is not verifiable, and a new SELECT keeps its history.
    Runs after the test that gives the target its rows."""
    from chmv_assets.engine.health.parity import parity_for_partitions
    from chmv_assets.engine.rebuild.executor import plan_for
    from chmv_assets.engine.rebuild.planner import Engine

    resource, _ = deployed["any_mv"]
    loaded = load(SCHEMAS / "any_mv")
    first_seen = ObjectRef(database="feed", name="first_seen")
    plan = plan_for(resource, loaded, first_seen, [None])
    assert [s.engine for s in plan.steps] == [Engine.REFUSED]
    assert "feed.first_seen_mv reads feed.first_seen, which its own output feeds" in plan.refusal()
    forced = plan_for(resource, loaded, first_seen, [None], force=True)
    assert not forced.refused and any("forced past a feedback read" in n for n in forced.notes)
    with resource.get_client() as client:
        (result,) = parity_for_partitions(client, loaded, first_seen, [None])
        assert result.passed and result.unverifiable and "feedback read" in result.unverifiable
        held = rows(client, "SELECT count() FROM feed.first_seen FINAL")
    code, out = chmv("rebuild", "--ddl-dir", str(SCHEMAS / "any_mv"), "--dsn", resource.resolved_dsn,
                     "--target", first_seen.fqn)  # fmt: skip
    assert code != 0 and "which its own output feeds" in out, out
    with resource.get_client() as client:
        assert rows(client, "SELECT count() FROM feed.first_seen FINAL") == held == [(2,)]


def test_an_append_refreshable_targets_parity_is_not_verifiable(deployed):
    """``feed.heartbeat_mv`` refreshes with APPEND: its target keeps every refresh's ``now()``; its SELECT now never
    recomputes that, so parity says so instead of failing every materialization (a blocking check)."""
    from chmv_assets.engine.health.parity import parity_for_partitions

    resource, _ = deployed["any_mv"]
    loaded = load(SCHEMAS / "any_mv")
    assert [v.ref.fqn for v in loaded.project.views.values() if v.appends] == [
        "feed.heartbeat_mv",
        "feed.catalog_sizes_mv",
    ]
    with resource.get_client() as client:
        (result,) = parity_for_partitions(client, loaded, ObjectRef(database="feed", name="heartbeats"), [None])
    assert result.passed and "feed.heartbeat_mv refreshes with APPEND" in (result.unverifiable or ""), result


def test_a_new_select_of_a_dedup_mv_keeps_its_targets_history(deployed, tmp_path):
    """``chmv plan`` of a changed SELECT of ``feed.first_seen_mv``: the new SELECT goes live, the history is kept as
    it is (re-deriving it through the SELECT would empty it), and the plan says why."""
    import shutil

    from chmv_assets.engine.lifecycle.plan import Action

    resource, _ = deployed["any_mv"]
    ddl = tmp_path / "any_mv"
    shutil.copytree(SCHEMAS / "any_mv", ddl)
    sql = (ddl / "feed.sql").read_text()
    changed = "WHERE user_id NOT IN (SELECT user_id FROM feed.first_seen) AND user_id > 0"
    (ddl / "feed.sql").write_text(sql.replace("WHERE user_id NOT IN (SELECT user_id FROM feed.first_seen)", changed))
    with resource.get_client() as client:
        plan = plan_lifecycle(client, load(ddl))
    (change,) = [c for c in plan.changes if c.name == "feed.first_seen_mv"]
    assert [c.name for c in plan.changes if c.rederive is not None] == [], plan.describe()
    assert change.action == Action.MODIFY_QUERY and not change.blocked
    assert any(
        r.startswith("its history is kept as it is: feed.first_seen_mv reads feed.first_seen") for r in change.reasons
    )


def test_the_preflight_quotes_the_servers_own_fix(tmp_path):
    """Without server_version (the twin of a 26.9 server), the AggregatingMergeTree with a column outside its sorting
    key is refused with the server's message, its own advice and what to set in chmv.toml; as written on a server,
    with the server's advice only (its version decides). The Merge table is checked in the scratch database (its
    database argument mapped there), and a server of another version than chmv.toml's is named."""
    as_written = load(SCHEMAS / "any_mv")
    twin = LoadedProject(config=as_written.config, project=local_twin(as_written.project))
    resource = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    hints = []
    with resource.get_client() as client:
        for loaded in (twin, as_written):
            with pytest.raises(PreflightError) as info:
                preflight(client, loaded, plan_lifecycle(client, loaded))
            (problem,) = info.value.problems
            assert problem.message.startswith("feed.user_days: the server refused it: Column(s) city of the Aggreg")
            assert (problem.file, problem.line) == (str(SCHEMAS / "any_mv" / "feed.sql"), 53)
            hints.append(problem.hint)
        fixed = LoadedProject(config=as_written.config, project=_without_user_days(as_written.project))
        report = preflight(client, fixed, plan_lifecycle(client, fixed))
    advice = (
        "the server says: Add them to the sorting key (ORDER BY), or set 'allow_dimensions_outside_sorting_key = 1' "
    )
    assert hints[0].startswith(advice) and hints[1].startswith(advice)
    assert 'set server_version (its version, e.g. "24.8") in chmv.toml' in hints[0]
    assert "server_version" not in hints[1]
    assert "feed.all_events" in report.checked
    assert 'chmv.toml: server_version = "24.8", but this server runs 26.9' in report.describe()


def _without_user_days(project):
    """The project without feed.user_days and the MVs around it (what 26.9 refuses as written)."""
    views = {r: v for r, v in project.views.items() if r.name not in ("user_days_mv", "returning_daily_mv")}
    tables = {r: t for r, t in project.tables.items() if r.name not in ("user_days", "returning_daily")}
    return project.model_copy(update={"views": views, "tables": tables})


def test_clickhouses_parser_is_asked_while_this_process_holds_the_embedded_engine(deployed):
    resource, _ = deployed["aliases_lambdas"]
    with resource.get_client() as client:
        view = parse_statement(
            "CREATE MATERIALIZED VIEW d.mv TO d.t AS SELECT cityHash64(arraySort(tags) AS s) AS h, length(s) AS n "
            "FROM d.src",
            default_database="d",
        )
        assert view.trigger == ObjectRef(database="d", name="src")
        assert rows(client, "SELECT 1") == [(1,)]
