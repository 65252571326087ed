"""The one rebuild path (``run_rebuild``) on the real embedded engine: one run opens the engine once, takes the write
gate once, reads pending drift once and probes coverage once, and verifies what it rebuilt in one batch.

Measured before, with the rebuild and the Dagster op's parity check as main sequenced them: one partition opened the
engine 5 times (plan, lease, read and swap, lease release, check), took the gate twice, probed coverage and read pending
drift twice each; three partitions probed coverage and read drift 4 times each and recomputed parity 3 times.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.partitioning import window_at
from chmv_assets.engine import drift
from chmv_assets.engine.health import parity
from chmv_assets.engine.health.parity import verify_rebuilt
from chmv_assets.engine.ingest import cutoff
from chmv_assets.engine.rebuild import coverage, planner
from chmv_assets.engine.rebuild.executor import run_rebuild

from support.engines import make_engine

pytestmark = pytest.mark.worker_seconds(20)

HOURLY = ObjectRef(database="analytics", name="hourly_endpoint_stats")
DAYS = [window_at(datetime(2026, 8, d), "day") for d in (3, 4, 5)]


class Counting:
    """A client factory over the engine that counts the clients it opens."""

    def __init__(self, engine):
        self.engine, self.openings = engine, 0

    @contextmanager
    def get_client(self, **kwargs) -> Iterator:
        self.openings += 1
        with self.engine.get_client(**kwargs) as client:
            yield client


@pytest.fixture
def calls(monkeypatch) -> Counter:
    """How often a run takes a write gate (per source), probes coverage, reads pending drift and recomputes parity."""
    seen: Counter = Counter()

    def counted(name, module, attribute):
        original = getattr(module, attribute)

        def call(*args, **kwargs):
            seen[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, attribute, call)

    counted("gate", cutoff, "_one_gate")
    counted("probe", planner, "probe")
    counted("probe", coverage, "probe")
    counted("drift", drift, "apply_pending")
    counted("drift", parity, "apply_pending")
    counted("batch recompute", parity, "partitions_parity_sql")
    counted("one recompute", parity, "parity_sql")
    return seen


def _verify(loaded):
    return lambda client, plan, results: verify_rebuilt(client, loaded, plan, results)


@pytest.mark.parametrize("days", [1, 3], ids=["one partition", "a range"])
def test_a_run_opens_the_engine_once_and_takes_the_gate_once(tmp_path, example, calls, days):
    engine = make_engine(tmp_path / "chdb", example, rows=20_000)
    with engine.get_client() as client:
        client.command("ALTER TABLE analytics.hourly_endpoint_stats DROP PARTITION tuple(toDate('2026-08-04'))")
    counting = Counting(engine)
    run = run_rebuild(counting, example, HOURLY, DAYS[:days], verify=_verify(example))
    assert [r.partition for r in run.results] == [w.key for w in DAYS[:days]]
    assert run.verified is not None and [v.partition for v in run.verified] == [w.key for w in DAYS[:days]]
    assert all(v.passed and v.truth == "source" and v.expected > 0 for v in run.verified), run.verified
    assert counting.openings == 1
    assert calls["gate"] == 1  # the trigger's (api_requests), from the plan to the last swap
    assert calls["probe"] == 1 and calls["drift"] == 1  # observed once, carried in the plan
    # the partitions' parity in one batch: one recompute of the range (one partition: its own)
    assert (calls["batch recompute"], calls["one recompute"]) == ((1, 0) if days > 1 else (0, 1))


def test_a_dry_run_plans_on_one_client_and_changes_nothing(tmp_path, example, calls):
    from chmv_assets.engine.rebuild.executor import plan_for

    engine = make_engine(tmp_path / "chdb", example, rows=5_000)
    counting = Counting(engine)
    plan = plan_for(counting, example, HOURLY, DAYS)
    assert [s.engine for s in plan.steps] == [planner.Engine.CLICKHOUSE] * 3
    assert (counting.openings, calls["gate"], calls["probe"], calls["drift"]) == (1, 1, 1, 1)
