"""Health verdicts without an engine: replication figures as a server reports them, the quiet window's clock."""

from __future__ import annotations

from datetime import datetime

from chmv_assets.ddl.config import HealthConfig
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.maintenance import merging_targets, window_bounds
from chmv_assets.engine.health.server_health import Finding, Health, Subject, replication_findings, subjects

ORDERS = ObjectRef(database="shop", name="orders")
RULES = HealthConfig()  # queue warns at 100, fails at 1000; oldest entry 30 min / 300 min; lag 300 s / 3600 s


def _kinds(found: list[Finding]) -> list[tuple[str, str]]:
    return [(f.kind, f.severity) for f in found]


def test_a_replica_within_limits_is_healthy() -> None:
    assert replication_findings(ORDERS, RULES, 12, 10, 2, 40, 3, 2, 2, 0, 0, "") == []


def test_replication_queue_size_and_age_warn_then_fail() -> None:
    assert _kinds(replication_findings(ORDERS, RULES, 150, 140, 10, 60, 0, 2, 2, 0, 0, "")) == [
        ("replication_queue", "warning")
    ]
    assert _kinds(replication_findings(ORDERS, RULES, 5, 5, 0, 31 * 60, 0, 2, 2, 0, 0, "")) == [
        ("replication_queue", "warning")
    ]
    failing = replication_findings(ORDERS, RULES, 1200, 1200, 0, 60, 0, 2, 2, 3, 17, "Code: 234. No active replica")
    assert _kinds(failing) == [("replication_queue", "error")]
    assert "3 failing, tried up to 17 times: Code: 234. No active replica" in failing[0].message
    assert _kinds(replication_findings(ORDERS, RULES, 3, 3, 0, 301 * 60, 0, 2, 2, 0, 0, "")) == [
        ("replication_queue", "error")
    ]


def test_replica_lag_and_inactive_replicas() -> None:
    found = replication_findings(ORDERS, RULES, 0, 0, 0, 0, 400, 1, 3, 0, 0, "")
    assert _kinds(found) == [("replica_delay", "warning"), ("replicas_inactive", "warning")]
    assert found[0].message.startswith("this replica lags 400 s behind")
    assert found[1].message == "1 of 3 replicas are active"
    assert _kinds(replication_findings(ORDERS, RULES, 0, 0, 0, 0, 4000, 2, 2, 0, 0, "")) == [("replica_delay", "error")]


def test_verdict_severity_and_signature() -> None:
    subject = Subject(ORDERS, (ORDERS,))
    warn = Finding("mutation_stuck", "warning", "shop.orders", "m", "f")
    fail = Finding("view_detached", "error", "shop.orders_mv", "m", "f")
    assert Health(subject).severity == "ok" and Health(subject, (warn,)).severity == "warning"
    assert Health(subject, (warn, fail)).severity == "error"
    assert Health(subject, (fail, warn)).signature() == Health(subject, (warn, fail)).signature()
    assert Health(subject).describe().startswith("healthy")


def test_every_target_has_a_subject_with_the_sources_its_mvs_read(example) -> None:
    found = subjects(example.project)
    assert set(found) == set(example.project.targets) and len(found) == 10  # the 6 sources through their targets
    events_agg = found[ObjectRef(database="analytics", name="events_agg")]
    assert [v.fqn for v in events_agg.views] == ["analytics.mv_events_agg"]
    assert [s.fqn for s in events_agg.sources] == ["analytics.raw_events"]
    assert events_agg.checked == (events_agg.asset, *events_agg.views, *events_agg.sources)
    daily = found[ObjectRef(database="analytics", name="events_daily")]  # reads events_agg, a target: no source
    assert daily.sources == () and daily.tables == (daily.asset,)
    readers = sorted(
        t.name for t, s in found.items() if ObjectRef(database="analytics", name="all_events") in s.sources
    )
    assert readers == ["audit_log", "error_events", "metric_events"]


def test_the_quiet_window_on_the_server_clock() -> None:
    assert window_bounds("01:00-05:00", datetime(2026, 9, 1, 3, 30)) == (
        datetime(2026, 9, 1, 1),
        datetime(2026, 9, 1, 5),
    )
    assert window_bounds("01:00-05:00", datetime(2026, 9, 1, 5, 0)) is None
    wrap = "22:00-04:00"  # wraps midnight: started the day before when it is early
    assert window_bounds(wrap, datetime(2026, 9, 2, 2, 0)) == (datetime(2026, 9, 1, 22), datetime(2026, 9, 2, 4))
    assert window_bounds(wrap, datetime(2026, 9, 1, 23, 0)) == (datetime(2026, 9, 1, 22), datetime(2026, 9, 2, 4))
    assert window_bounds(wrap, datetime(2026, 9, 1, 12, 0)) is None
    assert window_bounds("00:00-24:00", datetime(2026, 9, 1, 12, 0)) == (datetime(2026, 9, 1), datetime(2026, 9, 2))


def test_maintenance_merges_collapsing_targets_only(example) -> None:
    assert sorted(t.name for t in merging_targets(example.project)) == [
        "counter_daily",
        "entity_latest",
        "events_daily",
        "events_weekly",
        "hourly_endpoint_stats",
    ]
