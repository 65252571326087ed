"""Golden SQL of the health checks and of pacing: every statement that reads how the server is doing.

No server with Keeper or replicas runs here: the replication check (``system.replicas`` joined with
``system.replication_queue``) and the read-only check of ``Replicated*`` tables are proven by their text, rendered for
the clustered fixture's replicated tables (the DDL as written, not its local twin) and compared with
``golden/health/*.sql`` (``CHMV_UPDATE_GOLDEN=1`` rewrites them); their verdicts from a server's figures are
``tests/unit/engine/health/test_server_health.py``'s, and ``tests/integration/engine/health/test_server_health.py`` has the embedded engine run
every statement of these files (its system tables are the server's, empty of replicas).
"""

from __future__ import annotations

from chmv_assets.sql.health_sql import replication_sql

from support.health import assert_golden, replicated, statements


def test_replication_is_read_from_system_replicas_and_its_queue() -> None:
    _project, tables = replicated()
    assert [t.fqn for t in tables] == [
        "metrics.errors_daily_local",
        "metrics.minute_local",
        "metrics.samples_local",
        "metrics_dist.hosts",
    ]
    sql = replication_sql()
    assert "FROM system.replicas AS r LEFT JOIN" in sql and "FROM system.replication_queue" in sql
    for column in (
        "queue_size",
        "queue_oldest_time",
        "absolute_delay",
        "active_replicas",
        "total_replicas",
        "last_exception",
        "num_tries",
    ):
        assert column in sql
    assert_golden("replication.sql", statements()["replication.sql"])


def test_every_health_statement_matches_its_golden_file() -> None:
    for name, text in statements().items():
        assert_golden(name, text)
    assert "WHERE is_readonly AND" in statements()["read_only.sql"]
    assert "FROM system.detached_tables" in statements()["views.sql"]
    assert (
        "OPTIMIZE TABLE `metrics`.`errors_daily_local` PARTITION ID '202608' FINAL" in statements()["maintenance.sql"]
    )
    assert "ON CLUSTER" not in "".join(statements().values())  # this server only: a replicated merge replicates itself
