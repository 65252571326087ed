"""The ``file`` engine (the landing zone read by ClickHouse's own ``file()``, no Spark) on the real embedded engine: a
month the source lost is rebuilt from the lake as it was, and verified against the same read."""

from __future__ import annotations

import pytest

from chmv_assets import demo_data
from chmv_assets.engine.health.parity import verify_rebuilt
from chmv_assets.engine.rebuild.executor import run_rebuild
from chmv_assets.engine.rebuild.planner import Engine

from support.engines import make_engine
from support.retention import AUGUST, EVENTS_AGG, RETENTION
from support.spark import with_landing

pytestmark = pytest.mark.worker_seconds(15)

AUG = (
    "SELECT event_type, sum(count), sum(sum_duration_ms) FROM analytics.events_agg WHERE toYYYYMM(event_date) = 202608 "
    "GROUP BY event_type ORDER BY event_type"
)


def test_a_month_the_source_lost_is_rebuilt_from_the_lake_without_spark(tmp_path, example):
    root = tmp_path / "landing"
    loaded = with_landing(example, root)
    source = "analytics.raw_events"
    demo_data.write_landing_zone(root, {source: demo_data.generate(source, 20_000, days=40, seed=5)}, seed=5)
    engine = make_engine(tmp_path / "chdb", loaded)
    with engine.get_client() as client:
        demo_data.load_into_clickhouse(
            client, {source: demo_data.generate(source, 20_000, days=40, seed=5, duplicates=0.0)}
        )
        before = client.query(AUG).result_rows
        client.command(RETENTION["drop_partition"])
        client.command(
            "ALTER TABLE analytics.events_agg DELETE WHERE event_date = '2026-08-05'", settings={"mutations_sync": 2}
        )
    run = run_rebuild(
        engine, loaded, EVENTS_AGG, [AUGUST], engine="file", verify=lambda c, p, r: verify_rebuilt(c, loaded, p, r)
    )
    assert [s.engine for s in run.plan.steps] == [Engine.FILE]
    assert [v.truth for v in run.verified] == ["landing zone"] and all(v.passed for v in run.verified), run.verified
    with engine.get_client() as client:
        assert client.query(AUG).result_rows == before and before
