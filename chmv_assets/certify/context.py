"""The state of one certify run, shared by its operations, faults and checks: the scratch twin, its engine, the
history, the writers, what the faults put aside (graveyards, foreign writers' selects) and Dagster's objects."""

from __future__ import annotations

import random
import threading
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chmv_assets.certify.expected import SCRATCH_DB, Extra, ordered_targets
from chmv_assets.certify.history import History
from chmv_assets.certify.scratch import scratch_ddl
from chmv_assets.certify.workload import DIRECT, SourceSpec, TimeSlot, WriterPool, source_specs, time_slots
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.quoting import quote

#: A child process chmv runs to kill it (a rebuild, an apply) is given this long before it is recorded uncertain and
#: left behind.
KILL_TIMEOUT_SECONDS = 30


class Run:
    """One run's state (see :func:`chmv_assets.certify.runner.certify`).

    Attributes:
        loaded: The project as deployed now (a derived second DDL version replaces it once applied).
        resource: chmv's ClickHouse resource on the scratch engine (its time limits apply to every call).
        history: Every operation, in start order.
        graves: Source → the table holding the rows a delete fault removed from it.
        extras: Rows writers outside the DDL put into targets (their selects).
        deadline: When the run's workload must stop starting operations (monotonic).
    """

    def __init__(self, ddl_dir: Path, seconds: float, seed: int, faults: tuple[str, ...], root: Path):
        from chmv_assets.ddl.loader import load
        from resources.clickhouse import ClickHouseResource, for_project

        self.seed, self.faults, self.seconds, self.root = seed, faults, seconds, root
        self.rng = random.Random(seed)
        self.history = History()
        self.notes: list[str] = []
        self.found: list[Any] = []  # anomalies found by an operation itself (checker.Anomaly)
        self.ddl = scratch_ddl(ddl_dir, root / "ddl", dst="dst" in faults)
        self.loaded = load(self.ddl, twin=True)
        self.path = root / "chdb"
        # every statement of chmv's own paths ends within 20 s (the data of a run is small); the engine's lock is
        # waited for longer: a killed rebuild's child holds it until it dies
        base = ClickHouseResource(dsn=f"chdb://{self.path}", lock_timeout_seconds=60, statement_timeout_seconds=20)
        self.resource = for_project(base, self.loaded.config.default_database)
        self.specs: list[SourceSpec] = source_specs(self.loaded)
        self.now = datetime.now(UTC)
        self.slots: dict[str, TimeSlot] = time_slots(self.loaded, self.now, dst="dst" in faults)
        self.graves: dict[ObjectRef, ObjectRef] = {}
        self.extras: list[Extra] = []
        self.buffers: dict[ObjectRef, ObjectRef] = {}
        self.foreign: dict[ObjectRef, tuple[SourceSpec, ObjectRef]] = {}  # target → (spec, foreign table)
        self.pool: WriterPool | None = None
        self.instance: Any = None
        self.cursors: dict[str, str | None] = {}
        self.stopped_merges: list[ObjectRef] = []
        self.targets: list[ObjectRef] = ordered_targets(self.loaded)
        self.partitions = 0
        self.deadline = float("inf")
        #: Property (d)'s checks around each rebuild operation (probes.Exactness), when on.
        self.before_rebuild: Any = None
        self.after_rebuild: Any = None
        self._defs: Any = None
        self._assets: Any = None
        self._held: Any = None
        self._quiet: list[Callable[[], AbstractContextManager]] = []
        self._quiet_lock = threading.Lock()

    # -- the engine ---------------------------------------------------------------------------------------------

    def hold(self) -> None:
        """Keep one client open: the embedded engine stays up between uses (reopening it costs ~0.5 s)."""
        if self._held is None:
            self._held = self.resource.get_client()
            self._held.__enter__()

    def release(self) -> None:
        """Close the held client (the engine closes when no client is open)."""
        if self._held is not None:
            self._held.__exit__(None, None, None)
            self._held = None

    def add_quiet(self, pause: Callable[[], AbstractContextManager]) -> None:
        """Register what :meth:`quiet` pauses besides the writers (the reader of property (f)): a context manager
        factory."""
        self._quiet.append(pause)

    @contextmanager
    def quiet(self):
        """Every writer and reader of the run paused between two of its statements (their clients closed)."""
        with ExitStack() as stack:
            stack.enter_context(self.pool.paused() if self.pool is not None else nullcontext())
            for pause in self._quiet:
                stack.enter_context(pause())
            yield

    # -- set-up -------------------------------------------------------------------------------------------------

    def deploy(self) -> None:
        """The twin deployed with chmv's own deploy path, and certify's scratch database."""
        from chmv_assets.engine.lifecycle.deploy import apply

        with self.history.op("deploy", "chmv", [t.fqn for t in self.targets]), self.resource.get_client() as client:
            apply(client, self.loaded.project)
            client.command(f"CREATE DATABASE IF NOT EXISTS {quote(SCRATCH_DB)}")

    def seed_rows(self, pool: WriterPool) -> None:
        """The rows every source holds before the writers start: closed history, the last hour, the DST hours."""
        for spec in self.specs:
            pool.insert("seed", spec, self.slots["closed"], 2000, DIRECT)
            pool.insert("seed", spec, self.slots["now"], 300, DIRECT)
            for name in ("frozen", "dst_fall", "dst_spring"):
                if name in self.slots:
                    pool.insert("seed", spec, self.slots[name], 600, DIRECT)

    # -- Dagster ------------------------------------------------------------------------------------------------

    def defs(self) -> Any:
        """chmv's Definitions of the project as deployed now."""
        if self._defs is None:
            from chmv_assets.orchestration.definitions import build_definitions
            from chmv_assets.orchestration.translator import ChmvTranslator

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._defs = build_definitions(self.loaded, clickhouse=self.resource, translator=ChmvTranslator())
        return self._defs

    def assets(self) -> Any:
        """chmv's target assets of the project as deployed now."""
        if self._assets is None:
            from chmv_assets.orchestration.assets import build_chmv_assets
            from chmv_assets.orchestration.translator import ChmvTranslator

            self._assets = build_chmv_assets(self.loaded, ChmvTranslator())
        return self._assets

    def warm(self) -> None:
        """Build Dagster's assets and definitions (~3 s of imports and set-up), done in a thread while the engine
        deploys and the seed rows go in; not the instance (its SQLite storage belongs to the thread creating it)."""
        self.assets()
        self.defs().get_repository_def()

    def redeployed(self, loaded: Any) -> None:
        """The project is now ``loaded`` (an applied second DDL version): Dagster's objects are built again."""
        self.loaded = loaded
        self._defs = self._assets = None

    def dagster_instance(self) -> Any:
        if self.instance is None:
            from dagster import DagsterInstance

            self.instance = DagsterInstance.ephemeral()
        return self.instance

    def partitions_def(self, target: ObjectRef) -> Any:
        from chmv_assets.orchestration.translator import ChmvTranslator

        return ChmvTranslator().get_partitions_def(self.loaded, target)

    def partition_key(self, target: ObjectRef, slot: TimeSlot) -> tuple[str | None, bool]:
        """A Dagster partition key of ``target`` holding an instant of ``slot`` (None: unpartitioned); False when the
        target's partitions cannot be chosen this way (a key part)."""
        from dagster import TimeWindowPartitionsDefinition

        pdef = self.partitions_def(target)
        if pdef is None:
            return None, True
        if not isinstance(pdef, TimeWindowPartitionsDefinition):
            return None, False
        ts = slot.start + self.rng.randrange(slot.span)
        if ts < pdef.start.timestamp():
            return None, False  # before the first partition (a DST hour before partition_start)
        try:
            return pdef.get_partition_key_for_timestamp(ts), True
        except Exception:  # noqa: BLE001 - before the first partition
            return None, False

    # -- the graph ----------------------------------------------------------------------------------------------

    def downstream(self, source: ObjectRef) -> list[ObjectRef]:
        """The targets ``source``'s rows reach, down every chain."""
        project = self.loaded.project
        out: list[ObjectRef] = []
        todo = [source]
        while todo:
            ref = todo.pop()
            for view in project.views_from(ref):
                if view.writes_to not in out:
                    out.append(view.writes_to)
                    todo.append(view.writes_to)
        return out

    def upstream(self, target: ObjectRef) -> list[str]:
        """The tables whose rows reach ``target``, up every chain."""
        project = self.loaded.project
        out: list[str] = []
        todo = [target]
        while todo:
            ref = todo.pop()
            for view in project.views_into(ref):
                for src in view.source_refs:
                    if src.fqn not in out:
                        out.append(src.fqn)
                        todo.append(src)
        return out
