"""Helpers of the check and sensor tests: run checks, tick sensors, execute the runs they request (real Dagster)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from dagster import (
    AssetCheckKey,
    AssetSelection,
    DagsterInstance,
    Definitions,
    RunRequest,
    build_sensor_context,
    define_asset_job,
    materialize,
)

from asset_checks.definitions import PARITY, build_asset_checks
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.orchestration.assets import build_chmv_assets
from chmv_assets.orchestration.definitions import build_definitions
from chmv_assets.orchestration.translator import ChmvTranslator

TRANSLATOR = ChmvTranslator()


def ref(name: str) -> ObjectRef:
    return ObjectRef(database="analytics", name=name)


def run_checks(
    loaded: LoadedProject,
    resource,
    keys: list[AssetCheckKey],
    instance: DagsterInstance,
    tags: dict[str, str] | None = None,
):
    """Execute asset checks alone (no materialization), as the UI's "execute checks" does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        defs = Definitions.merge(
            build_definitions(loaded, clickhouse=resource, translator=TRANSLATOR),
            Definitions(jobs=[define_asset_job("run_checks", selection=AssetSelection.checks(*keys))]),
        )
        job = defs.resolve_job_def("run_checks")
    return job.execute_in_process(instance=instance, raise_on_error=False, tags=tags or {})


def run_parity(loaded: LoadedProject, resource, target: ObjectRef, instance: DagsterInstance, first: str, last: str):
    """The parity check of ``target`` over the partition range ``[first, last]`` in one run."""
    key = AssetCheckKey(TRANSLATOR.get_asset_key(target), PARITY)
    tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
    if first == last:
        tags = {"dagster/partition": first}
    return run_checks(loaded, resource, [key], instance, tags)


def tick(loaded: LoadedProject, sensor_name: str, resource, instance: DagsterInstance, cursor: str | None):
    """One tick of a sensor of the code location; returns SensorExecutionData (run_requests, skip_message, cursor)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        defs = build_definitions(loaded, clickhouse=resource, translator=TRANSLATOR)
        repository = defs.get_repository_def()
        sensor_def = repository.get_sensor_def(sensor_name)
        context = build_sensor_context(
            instance=instance, cursor=cursor, resources={"clickhouse": resource}, repository_def=repository
        )
        return sensor_def.evaluate_tick(context)


def execute(loaded: LoadedProject, resource, instance: DagsterInstance, request: RunRequest):
    """Execute a run request of the recovery sensor: the target's asset (and its parity check), or a ``chmv_apply``
    run with its run config."""
    if request.job_name == "chmv_apply":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            job = build_definitions(loaded, clickhouse=resource, translator=TRANSLATOR).get_job_def("chmv_apply")
            tags = dict(request.tags)
            return job.execute_in_process(
                run_config=request.run_config, instance=instance, tags=tags, raise_on_error=False
            )
    (key,) = request.asset_selection
    assets = [a for a in build_chmv_assets(loaded, TRANSLATOR) if getattr(a, "keys", None) and key in a.keys]
    checks = [c for c in build_asset_checks(loaded, TRANSLATOR) if AssetCheckKey(key, PARITY) in c.check_keys]
    selection = AssetSelection.assets(key)
    if request.asset_check_keys:
        selection = selection | AssetSelection.checks(*request.asset_check_keys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return materialize(
            [*assets, *checks],
            selection=selection,
            partition_key=request.partition_key,
            resources={"clickhouse": resource},
            instance=instance,
            tags=dict(request.tags),
            raise_on_error=False,
        )


def requested(request: RunRequest) -> str:
    """The partition of a run request, or ``first..last`` for a range run."""
    if request.partition_key:
        return request.partition_key
    tags = request.tags
    return f"{tags['dagster/asset_partition_range_start']}..{tags['dagster/asset_partition_range_end']}"


def evaluations(result, name: str | None = None) -> list:
    return [e for e in result.get_asset_check_evaluations() if name is None or e.check_name == name]


@contextmanager
def engine_held_by_another_process(resource) -> Iterator[subprocess.Popen]:
    """Another OS process holds the embedded engine's lock (as a run would) until the block ends."""
    lock = os.path.realpath(resource.embedded_path) + ".lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,sys,time; f=open(sys.argv[1],'a'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(30)",
            lock,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait()
