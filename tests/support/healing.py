"""A silent gap planted in a running `dagster dev`, and the wait for chmv to find and repair it on its own.

Shared by tests/scenarios/test_self_healing.py (fast cadence) and
benchmarks/bench_self_healing.py (default settings, timed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.parity import parity_for_partition
from chmv_assets.orchestration.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

from support.ui import DagsterDev, wait_for

AGG = ObjectRef(database="analytics", name="events_agg")
DAILY = ObjectRef(database="analytics", name="events_daily")
WEEKLY = ObjectRef(database="analytics", name="events_weekly")
#: The chain's partitions the gap lands in, top to bottom.
GAP_PARTITIONS = {AGG: "2026-08-01", DAILY: "2026-08-12", WEEKLY: "2026-08-01"}
#: 300 rows of an old day inserted while the chain's first MV is detached: nothing in the chain sees them.
GAP_ROWS = (
    "INSERT INTO analytics.raw_events SELECT toDateTime('2026-08-12 10:00:00') + number * 60, "
    "7000 + number % 5, 'click', 10 FROM numbers(300)"
)

RUNS = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter) { ... on Runs { results { runId status startTime endTime tags { key value } } } }
}
"""


@dataclass
class Healing:
    """What the loop did about the gap, in seconds since it was planted."""

    planted_at: float
    detected: float | None = None  # a sweep run found the first target's partition failing
    repaired: dict[str, float] = field(default_factory=dict)  # target -> its successful recovery run ended
    exact: float | None = None  # every partition of the chain passes parity

    def describe(self) -> str:
        steps = ", ".join(f"{t} {s:.0f}s" for t, s in sorted(self.repaired.items(), key=lambda kv: kv[1]))
        return f"detected {self.detected or 0:.0f}s; repaired {steps}; exact {self.exact or 0:.0f}s"


#: The statements of the gap, run through chmv's resource in the zone of dagster dev's processes.
PLANT = f"""
from resources.clickhouse import ClickHouseResource
import sys
with ClickHouseResource(dsn=sys.argv[1]).get_client() as client:
    client.command("DETACH TABLE analytics.mv_events_agg")
    client.command({GAP_ROWS!r})
    client.command("ATTACH TABLE analytics.mv_events_agg")
"""
#: Whether every partition of the chain passes parity, computed in the zone of dagster dev's processes.
EXACT = """
import sys
from support.healing import chain_exact
from chmv_assets.ddl.loader import load
print(chain_exact(sys.argv[1], load(sys.argv[2])))
"""


def plant_gap(dev: DagsterDev) -> Healing:
    """Detach the chain's first MV, insert rows of an old day, attach it again (through chmv's resource)."""
    dev.run_python(PLANT.replace("sys.argv[1]", repr(dev.engine().resolved_dsn)))
    return Healing(planted_at=time.time())


def chain_exact(dsn: str, loaded: LoadedProject, translator: ChmvTranslator | None = None) -> bool:
    """Every partition of the chain the gap lands in passes parity (on the engine at ``dsn``)."""
    translator = translator or ChmvTranslator()
    with ClickHouseResource(dsn=dsn).get_client() as client:
        return all(
            parity_for_partition(client, loaded, target, loaded.partitioning(target).window_of(key)).passed
            for target, key in GAP_PARTITIONS.items()
        )


def _recovery_runs(dev: DagsterDev, target: ObjectRef) -> list[dict]:
    runs = dev.graphql(RUNS, {"filter": {"tags": [{"key": "chmv/target", "value": target.fqn}]}})["runsOrError"]
    return runs["results"]


def _chain_exact(dev: DagsterDev, loaded: LoadedProject, translator: ChmvTranslator) -> bool:
    code = EXACT.replace("sys.argv[1]", repr(dev.engine().resolved_dsn)).replace("sys.argv[2]", repr(str(dev.ddl_dir)))
    return dev.run_python(code).strip() == "True"


def wait_for_repair(
    dev: DagsterDev, loaded: LoadedProject, translator: ChmvTranslator, healing: Healing, deadline_seconds: float
) -> Healing:
    """Poll the instance (GraphQL) until every target of the chain had a successful recovery run after the
    gap, then check the chain's parity on the engine; fills ``healing`` with the times."""

    def progress() -> bool:
        for target in GAP_PARTITIONS:
            if target.fqn in healing.repaired:
                continue
            for run in _recovery_runs(dev, target):
                tags = {t["key"]: t["value"] for t in run["tags"]}
                if run["status"] == "SUCCESS" and (run["startTime"] or 0) > healing.planted_at:
                    if target == AGG and tags.get("chmv/reason") == "parity_failed" and healing.detected is None:
                        healing.detected = float(run["startTime"]) - healing.planted_at  # upper bound
                    healing.repaired[target.fqn] = float(run["endTime"]) - healing.planted_at
                    break
        return len(healing.repaired) == len(GAP_PARTITIONS)

    wait_for(progress, deadline_seconds, f"the chain repaired ({healing.repaired})", interval=3.0)
    wait_for(lambda: _chain_exact(dev, loaded, translator), 120, "every partition of the chain to pass parity")
    healing.exact = time.time() - healing.planted_at
    return healing
