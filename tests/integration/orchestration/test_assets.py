"""A target op's run through Dagster (``materialize``) on the real embedded engine: the rebuild and its checks on one
client, the gate taken once, the run's partitions checked in one batch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from dagster import AssetKey, DagsterInstance, materialize

from asset_checks.names import DRIFT, PARITY
from chmv_assets.engine.health import parity
from chmv_assets.engine.ingest import cutoff
from chmv_assets.orchestration.assets import build_chmv_assets
from resources.clickhouse import ClickHouseResource

from support.engines import make_engine

pytestmark = pytest.mark.worker_seconds(20)

HOURLY = AssetKey(["analytics", "hourly_endpoint_stats"])
OPENED: list[str] = []


class CountingResource(ClickHouseResource):
    """The resource, counting the clients it opens."""

    @contextmanager
    def get_client(self, **kwargs) -> Iterator:
        OPENED.append(self.dsn or "")
        with super().get_client(**kwargs) as client:
            yield client


def test_a_range_run_opens_the_engine_once_and_checks_its_partitions_in_one_batch(tmp_path, example, monkeypatch):
    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    counting = CountingResource(dsn=engine.dsn)
    gates, batches = [], []
    one_gate, batch = cutoff._one_gate, parity.partitions_parity_sql
    monkeypatch.setattr(cutoff, "_one_gate", lambda *a, **k: (gates.append(a[0]), one_gate(*a, **k))[1])
    monkeypatch.setattr(parity, "partitions_parity_sql", lambda *a, **k: (batches.append(a[2]), batch(*a, **k))[1])
    asset = next(a for a in build_chmv_assets(example) if hasattr(a, "keys") and HOURLY in a.keys)
    OPENED.clear()
    result = materialize(
        [asset],
        selection=[HOURLY],
        tags={"dagster/asset_partition_range_start": "2026-08-03", "dagster/asset_partition_range_end": "2026-08-05"},
        instance=DagsterInstance.ephemeral(),
        resources={"clickhouse": counting},
    )
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert sorted((c.partition, c.passed) for c in checks if c.check_name == PARITY) == [
        (day, True) for day in ("2026-08-03", "2026-08-04", "2026-08-05")
    ]
    assert [c.passed for c in checks if c.check_name == DRIFT] == [True]
    assert len(OPENED) == 1, OPENED  # the rebuild, its verification and the drift check: one client
    assert [g.fqn for g in gates] == ["analytics.api_requests"]
    assert [[w.key for w in ws] for ws in batches] == [["2026-08-03", "2026-08-04", "2026-08-05"]]
