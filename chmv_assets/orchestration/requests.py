"""The one request path of the sensors: what is already being rebuilt or applied, and the run requests of a repair.

``chmv_recovery`` is the only sensor that requests rebuilds: it turns parity failures, persistent staleness and
repaired upstream partitions into requests, deduplicated by (target, partition). Before it requests anything it
reads the runs in progress (:func:`in_flight`: one call to the instance per tick): a partition a queued or running
run materializes (a recovery run, a UI backfill, a run launched by hand) is not requested again, nor are the
partitions of a target while a ``chmv_apply`` run is queued or running. Run keys name the episode and the attempt
(:func:`rebuild_requests`), so a request is the same request on every tick until its attempt is spent; its
``chmv/verdict`` tag carries the engines the planner chose at the tick, which the run executes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    PartitionsDefinition,
    RunRequest,
    RunsFilter,
    TimeWindowPartitionsDefinition,
)

from asset_checks.definitions import PARITY, check_key
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.health.recovery import VERDICT_TAG, Decision, RebuildVerdict
from chmv_assets.orchestration.translator import ChmvTranslator

#: Statuses of a run that is still going to materialize what it selected.
PENDING_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
#: The job whose runs change the DDL (jobs.py).
APPLY_JOB = "chmv_apply"
#: Most runs in progress read per tick (a queue longer than this is a backlog the sensors must not add to).
MAX_RUNS_READ = 2000
WHOLE = "*"


@dataclass
class InFlight:
    """The runs in progress that touch chmv's targets.

    Attributes:
        partitions: Per target, the partition keys queued or running runs materialize (``"*"``: all of them,
            an unpartitioned target or a run without a partition).
        applying: Run ids of ``chmv_apply`` runs in progress, with the objects they repair (empty: all).
    """

    partitions: dict[ObjectRef, set[str]] = field(default_factory=dict)
    applying: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def covers(self, target: ObjectRef, partition: str | None) -> bool:
        keys = self.partitions.get(target, set())
        return WHOLE in keys or (partition or WHOLE) in keys

    def apply_running(self) -> bool:
        return bool(self.applying)


def in_flight(
    instance: DagsterInstance,
    loaded: LoadedProject,
    translator: ChmvTranslator,
    keys_to_targets: Mapping[AssetKey, ObjectRef],
) -> InFlight:
    """Read the instance's runs in progress once and say what they materialize or apply."""
    found = InFlight()
    for run in instance.get_runs(RunsFilter(statuses=PENDING_STATUSES), limit=MAX_RUNS_READ):
        if run.job_name == APPLY_JOB:
            found.applying[run.run_id] = tuple(t for t in run.tags.get("chmv/objects", "").split(",") if t)
            continue
        targets = [keys_to_targets[k] for k in run.asset_selection or () if k in keys_to_targets]
        for target in targets:
            keys = _run_partitions(run.tags, translator.get_partitions_def(loaded, target))
            found.partitions.setdefault(target, set()).update(keys)
    return found


def _run_partitions(tags: Mapping[str, str], partitions_def: PartitionsDefinition | None) -> set[str]:
    if partitions_def is None:
        return {WHOLE}
    if "dagster/partition" in tags:
        return {tags["dagster/partition"]}
    first, last = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    if first is None or last is None or not isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return {WHOLE}
    keys = partitions_def.get_partition_keys()
    try:
        return set(keys[keys.index(first) : keys.index(last) + 1])
    except ValueError:
        return {WHOLE}


@dataclass(frozen=True)
class Due:
    """A partition the recovery rebuilds at this tick."""

    decision: Decision
    partition: str | None
    verdict: RebuildVerdict
    episode: int

    @property
    def engines(self) -> str:
        return ", ".join(sorted(set(self.verdict.engine_of().values())))


def rebuild_requests(
    loaded: LoadedProject, translator: ChmvTranslator, job_name: str, target: ObjectRef, due: Sequence[Due]
) -> list[RunRequest]:
    """The runs that rebuild ``due`` partitions of one target: one run per range of consecutive time partitions (one
    per partition where they are named by key values).

    A range run plans and swaps every partition of it in one go (one read of the source per range, the targets'
    single-run backfill policy) and evaluates parity per partition, so each ledger entry gets its own verdict. The
    run key names the range, the episode (when its first partition started failing) and the attempts: the same
    request whatever the tick, never a second run of one attempt. The planner's verdicts of its partitions go with it
    (tag ``chmv/verdict``).
    """
    partitions_def = translator.get_partitions_def(loaded, target)
    # partitions named by key values: a run each
    timed = isinstance(partitions_def, TimeWindowPartitionsDefinition)
    order = {k: i for i, k in enumerate(partitions_def.get_partition_keys())} if timed and partitions_def else {}
    items = sorted(due, key=lambda d: order.get(d.partition or "", -1))
    ranges: list[list[Due]] = []
    for item in items:
        previous = ranges[-1][-1] if ranges else None
        consecutive = (
            previous is not None
            and item.partition is not None
            and previous.partition is not None
            and order.get(item.partition) == order.get(previous.partition, -2) + 1
            and item.decision.reason == previous.decision.reason
        )
        if consecutive:
            ranges[-1].append(item)
        else:
            ranges.append([item])
    requests = []
    for group in ranges:
        first, last = group[0], group[-1]
        tags = {
            "chmv/reason": first.decision.reason[:200],
            "chmv/attempt": str(max(d.decision.attempt for d in group)),
            "chmv/target": target.fqn,
            "chmv/engine": ", ".join(sorted({d.engines for d in group})),
            VERDICT_TAG: functools.reduce(RebuildVerdict.merged, (d.verdict for d in group)).to_tag(),
        }
        partition_key = first.partition
        if len(group) > 1:
            tags["dagster/asset_partition_range_start"] = first.partition or ""
            tags["dagster/asset_partition_range_end"] = last.partition or ""
            partition_key = None
        attempts = ".".join(f"{d.episode}-{d.decision.attempt}" for d in group)
        requests.append(
            RunRequest(
                run_key=f"chmv-rebuild:{target.fqn}|{first.partition or ''}..{last.partition or ''}:{attempts}",
                job_name=job_name,
                asset_selection=[translator.get_asset_key(target)],
                asset_check_keys=[check_key(translator, target, PARITY)],
                partition_key=partition_key,
                tags=tags,
            )
        )
    return requests


def apply_request(objects: Iterable[ObjectRef], reason: str, *, episode: int, attempt: int) -> RunRequest:
    """A run of the ``chmv_apply`` job for ``objects``: planned, preflighted and applied like ``chmv apply``."""
    names = sorted({o.fqn for o in objects})
    config = {"objects": names}
    return RunRequest(
        run_key=f"chmv-apply:{','.join(names)}:{episode}-{attempt}",
        job_name=APPLY_JOB,
        run_config={"ops": {"plan_ddl": {"config": config}, "apply_ddl": {"config": config}}},
        tags={
            "chmv/reason": reason[:200],
            "chmv/objects": ",".join(names)[:1000],
            "chmv/attempt": str(attempt),
        },
    )
