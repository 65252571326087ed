"""Dagster's freshness of the targets, derived from chmv's staleness SLA (ChmvTranslator.get_freshness_policy).

The Definitions carry a time-window policy on every MV target (the SLA; a refreshable MV's period on top) and none on
sources. Dagster evaluates it in its freshness daemon only; its iteration runs here in this process, against the
Definitions loaded as a code location and the instance's event log: a target whose last recorded write (what the
``chmv_live_state`` sensor records as a materialization) is older than the window reads FAIL, a recent one PASS, one
never written UNKNOWN.
"""

from __future__ import annotations

import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from dagster import AssetKey, AssetMaterialization, DagsterEvent, DagsterEventType, FreshnessPolicy
from dagster._core.definitions.freshness import FreshnessState
from dagster._core.events import StepMaterializationData
from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID
from dagster._core.instance_for_test import instance_for_test
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import InProcessTestWorkspaceLoadTarget, create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._daemon.freshness import FreshnessDaemon

from chmv_assets.orchestration.definitions import build_definitions
from resources.clickhouse import ClickHouseResource

from support.ddl import load_ddl

pytestmark = pytest.mark.worker_seconds(15)

SLA_MINUTES = 7
DDL = """
CREATE DATABASE d ENGINE = Atomic;
CREATE TABLE d.events (ts DateTime, k String) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY ts;
CREATE TABLE d.daily (day Date, k String, n UInt64) ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (k, day);
CREATE MATERIALIZED VIEW d.daily_mv TO d.daily AS SELECT toDate(ts) AS day, k, count() AS n FROM d.events GROUP BY day, k;
CREATE TABLE d.errors (ts DateTime, k String) ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY ts;
CREATE MATERIALIZED VIEW d.errors_mv TO d.errors AS SELECT ts, k FROM d.events WHERE k = 'error';
CREATE TABLE d.snapshot (k String, n UInt64) ENGINE = MergeTree ORDER BY k;
CREATE MATERIALIZED VIEW d.snapshot_mv REFRESH EVERY 1 HOUR TO d.snapshot AS SELECT k, count() AS n FROM d.events GROUP BY k;
"""
DAILY, ERRORS, SNAPSHOT, EVENTS = (AssetKey(["d", n]) for n in ("daily", "errors", "snapshot", "events"))


@pytest.fixture(scope="module")
def location(tmp_path_factory) -> Path:
    """A code location file defining ``defs`` for the project (chmv.toml: ``sla_minutes = 7``)."""
    root = tmp_path_factory.mktemp("freshness")
    load_ddl(root / "ddl", DDL, toml=f'default_database = "d"\nsla_minutes = {SLA_MINUTES}')
    path = root / "location.py"
    path.write_text(
        textwrap.dedent(f"""
            from chmv_assets.ddl.loader import load
            from chmv_assets.orchestration.definitions import build_definitions
            from resources.clickhouse import ClickHouseResource

            defs = build_definitions(load({str(root / "ddl")!r}), clickhouse=ClickHouseResource(dsn="chdb://{root}/chdb"))
        """),
        encoding="utf-8",
    )
    return path


def test_every_target_carries_the_sla_as_its_freshness_window_and_no_source_does(tmp_path):
    loaded = load_ddl(tmp_path / "ddl", DDL, toml=f'default_database = "d"\nsla_minutes = {SLA_MINUTES}')
    defs = build_definitions(loaded, clickhouse=ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}"))
    nodes = {node.key: node for node in defs.resolve_asset_graph().asset_nodes}
    sla = timedelta(minutes=SLA_MINUTES)
    assert nodes[DAILY].freshness_policy == FreshnessPolicy.time_window(fail_window=sla)
    assert nodes[ERRORS].freshness_policy == FreshnessPolicy.time_window(fail_window=sla)
    # a refreshable MV writes once per refresh: its period on top of the SLA
    assert nodes[SNAPSHOT].freshness_policy == FreshnessPolicy.time_window(fail_window=sla + timedelta(hours=1))
    assert nodes[EVENTS].freshness_policy is None


def _written(instance, key: AssetKey, seconds_ago: float) -> None:
    """A write of ``key`` recorded ``seconds_ago``, as the live-state sensor records one (a runless materialization)."""
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
        event_specific_data=StepMaterializationData(AssetMaterialization(key)),
        job_name=RUNLESS_JOB_NAME,
    )
    instance.report_dagster_event(event, RUNLESS_RUN_ID, timestamp=time.time() - seconds_ago)


def test_dagsters_freshness_daemon_fails_a_target_written_longer_ago_than_the_sla(location):
    window = SLA_MINUTES * 60
    target = InProcessTestWorkspaceLoadTarget(
        InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file=str(location), attribute="defs"))
    )
    with instance_for_test() as instance:
        _written(instance, DAILY, seconds_ago=window + 60)  # its MV stopped writing it 8 minutes ago
        _written(instance, ERRORS, seconds_ago=window - 60)  # written 6 minutes ago: within the window
        _written(instance, SNAPSHOT, seconds_ago=window + 60)  # a refreshable MV's: within its hour
        with create_test_daemon_workspace_context(target, instance) as workspace:
            list(FreshnessDaemon().run_iteration(workspace))
        states = {
            key: record.freshness_state
            for key, record in instance.get_freshness_state_records([DAILY, ERRORS, SNAPSHOT, EVENTS]).items()
        }
    assert states[DAILY] == FreshnessState.FAIL
    assert states[ERRORS] == FreshnessState.PASS
    assert states[SNAPSHOT] == FreshnessState.PASS
    assert states[EVENTS] == FreshnessState.NOT_APPLICABLE  # a source: no policy
