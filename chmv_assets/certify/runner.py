"""One certify run: a scratch twin, writers, chmv's own paths (Dagster materializations, the sweep and recovery
sensors, a killed `chmv rebuild`), faults, quiescence, then the checker (docs/certify.md)."""

from __future__ import annotations

import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from chmv_assets.certify import checker
from chmv_assets.certify.expected import (
    SCRATCH_DB,
    Extra,
    build_expected,
    fingerprints,
    ordered_targets,
    physical,
    verifiable,
)
from chmv_assets.certify.faults import KILL_POINTS, choose_faults
from chmv_assets.certify.history import FAILED, OK, UNCERTAIN, History, first_line
from chmv_assets.certify.workload import (
    ASYNC_NOWAIT,
    ASYNC_WAIT,
    BATCH,
    BUFFER,
    DIRECT,
    FOREIGN,
    SourceSpec,
    TimeSlot,
    WriterPool,
    source_specs,
    time_slots,
)
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.errors import ChmvError
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.rewrite import renamed_select

_LOG = logging.getLogger(__name__)
DST_ZONE = "America/New_York"


@dataclass
class CertifyResult:
    seed: int
    faults: tuple[str, ...]
    seconds: float
    history: History
    anomalies: list[checker.Anomaly]
    notes: list[str] = field(default_factory=list)
    ops: int = 0
    rows: int = 0
    targets: int = 0
    partitions: int = 0
    scratch: str = ""


def _toml(data: dict, prefix: str = "") -> str:
    """A minimal TOML writer for chmv.toml (scalars, lists, tables)."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines, tables = [], []
    for k, v in data.items():
        (tables if isinstance(v, dict) else lines).append((k, v))
    out = [f'"{k}" = {value(v)}' if "." in k else f"{k} = {value(v)}" for k, v in lines]
    for k, v in tables:
        name = f"{prefix}{k}" if "." not in k else f'{prefix}"{k}"'
        out.append(f"\n[{name}]")
        out.append(_toml(v, name + "."))
    return "\n".join(out)


def scratch_ddl(ddl_dir: Path, into: Path, *, dst: bool) -> Path:
    """A copy of the DDL directory whose chmv.toml shortens chmv's timers for a run of seconds (parity grace 0,
    recovery cooldown 0, short race pauses and lease waits), and sets the DST zone when that fault is on."""
    shutil.copytree(ddl_dir, into)
    path = into / "chmv.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data.pop("alert_webhook", None)
    data["recovery_cooldown_minutes"] = 0
    data["recovery_max_attempts"] = 5
    data.setdefault("parity", {})["grace_minutes"] = 0
    rebuild = data.setdefault("rebuild", {})
    rebuild.update({"race_backoff_seconds": 0.05, "lease_wait_seconds": 10, "insert_wait_seconds": 5})
    pacing = data.setdefault("pacing", {})
    pacing.update({"max_wait_seconds": 5.0, "pool_wait_seconds": 5.0})
    ingestion = data.get("ingestion", {})
    ingestion.pop("landing_dir", None)
    if dst:
        data["timezone"] = DST_ZONE
    path.write_text(_toml(data) + "\n", encoding="utf-8")
    return into


class Run:
    """The state of one run (see :func:`certify`)."""

    def __init__(self, ddl_dir: Path, seconds: float, seed: int, faults: tuple[str, ...], root: Path):
        from chmv_assets.ddl.loader import load
        from resources.clickhouse import ClickHouseResource, for_project

        self.seed, self.faults, self.seconds, self.root = seed, faults, seconds, root
        self.rng = random.Random(seed)
        self.history = History()
        self.notes: list[str] = []
        self.ddl = scratch_ddl(ddl_dir, root / "ddl", dst="dst" in faults)
        self.loaded = load(self.ddl, twin=True)
        self.path = root / "chdb"
        base = ClickHouseResource(dsn=f"chdb://{self.path}", lock_timeout_seconds=120, statement_timeout_seconds=120)
        self.resource = for_project(base, self.loaded.config.default_database)
        self.specs = source_specs(self.loaded)
        self.now = datetime.now(UTC)
        self.slots = time_slots(self.loaded, self.now, dst="dst" in faults)
        self.graves: dict[ObjectRef, ObjectRef] = {}
        self.extras: list[Extra] = []
        self.buffers: dict[ObjectRef, ObjectRef] = {}
        self.foreign: dict[ObjectRef, tuple[SourceSpec, ObjectRef]] = {}  # target → (spec, foreign table)
        self.pool: WriterPool | None = None
        self.instance = None
        self._defs = None
        self.stopped_merges: list[ObjectRef] = []
        self.targets = ordered_targets(self.loaded)
        self.partitions = 0

    def hold(self) -> None:
        """Keep one client open: the embedded engine stays up between uses (reopening it costs ~0.5 s)."""
        if getattr(self, "_held", None) is None:
            self._held = self.resource.get_client()
            self._held.__enter__()

    def release(self) -> None:
        if getattr(self, "_held", None) is not None:
            self._held.__exit__(None, None, None)
            self._held = None

    # -- set-up -------------------------------------------------------------------------------------------------

    def deploy(self) -> None:
        from chmv_assets.engine.lifecycle.deploy import apply

        with self.history.op("deploy", "chmv", [t.fqn for t in self.targets]), self.resource.get_client() as client:
            apply(client, self.loaded.project)
            client.command(f"CREATE DATABASE IF NOT EXISTS {quote(SCRATCH_DB)}")

    def seed_rows(self, pool: WriterPool) -> None:
        for spec in self.specs:
            pool.insert("seed", spec, self.slots["closed"], 2000, DIRECT)
            pool.insert("seed", spec, self.slots["now"], 300, DIRECT)
            for name in ("dst_fall", "dst_spring"):
                if name in self.slots:
                    pool.insert("seed", spec, self.slots[name], 600, DIRECT)

    def setup_faults(self) -> None:
        project = self.loaded.project
        with self.resource.get_client() as client:
            if "slow_pipeline" in self.faults:
                for spec in self.specs:
                    if not spec.checkable:
                        continue
                    buf = ObjectRef(database=SCRATCH_DB, name=f"buffer_{spec.ref.database}_{spec.ref.name}")
                    with self.history.op("buffer_created", "fault", [spec.ref.fqn]):
                        client.command(
                            f"CREATE TABLE {qualified(buf)} AS {qualified(spec.ref)} ENGINE = Buffer("
                            f"{quote(spec.ref.database)}, {quote(spec.ref.name)}, 1, 0.2, 1.5, 10, 100000, 1, 10000000)"
                        )
                    self.buffers[spec.ref] = buf
            if "foreign" in self.faults:
                by_ref = {s.ref: s for s in self.specs}
                for target in self.targets:
                    views = [v for v in project.views_into(target) if v.trigger in by_ref]
                    if not views or not verifiable(self.loaded, target):
                        continue
                    view = views[0]
                    spec = by_ref[view.trigger]  # type: ignore[index]
                    table = ObjectRef(database=SCRATCH_DB, name=f"foreign_{target.database}_{target.name}")
                    mv = ObjectRef(database=SCRATCH_DB, name=f"foreign_mv_{target.database}_{target.name}")
                    select = renamed_select(view, {spec.ref: table})
                    with self.history.op("foreign_mv", "fault", [target.fqn], mv=mv.fqn):
                        client.command(
                            f"CREATE TABLE {qualified(table)} AS {qualified(spec.ref)} ENGINE = MergeTree ORDER BY tuple()"
                        )
                        client.command(f"CREATE MATERIALIZED VIEW {qualified(mv)} TO {qualified(target)} AS {select}")
                    self.extras.append(Extra(target, select))
                    self.foreign[target] = (spec, table)
                    if len(self.foreign) >= 2:
                        break

    # -- chmv's paths through Dagster ---------------------------------------------------------------------------

    def defs(self):
        if self._defs is None:
            from chmv_assets.orchestration.definitions import build_definitions
            from chmv_assets.orchestration.translator import ChmvTranslator

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._defs = build_definitions(self.loaded, clickhouse=self.resource, translator=ChmvTranslator())
        return self._defs

    def assets(self):
        if getattr(self, "_assets", None) is None:
            from chmv_assets.orchestration.assets import build_chmv_assets
            from chmv_assets.orchestration.translator import ChmvTranslator

            self._assets = build_chmv_assets(self.loaded, ChmvTranslator())
        return self._assets

    def dagster_instance(self):
        if self.instance is None:
            from dagster import DagsterInstance

            self.instance = DagsterInstance.ephemeral()
        return self.instance

    def partition_key(self, target: ObjectRef, slot: TimeSlot) -> tuple[str | None, bool]:
        """A Dagster partition key of ``target`` holding an instant of ``slot`` (None: unpartitioned); False when the
        target's partitions cannot be chosen this way (a key part)."""
        from dagster import TimeWindowPartitionsDefinition

        from chmv_assets.orchestration.translator import ChmvTranslator

        pdef = ChmvTranslator().get_partitions_def(self.loaded, target)
        if pdef is None:
            return None, True
        if not isinstance(pdef, TimeWindowPartitionsDefinition):
            return None, False
        ts = slot.start + self.rng.randrange(slot.span)
        try:
            return pdef.get_partition_key_for_timestamp(ts), True
        except Exception:  # noqa: BLE001 - before the first partition
            return None, False

    def materialize(
        self,
        target: ObjectRef,
        key: str | None,
        *,
        tags: dict | None = None,
        actor: str = "chmv",
        kind: str = "materialize",
        dst: bool = False,
    ) -> str:
        """A run of ``target``'s asset (one partition, a range through tags, or the whole table) in-process, as the
        UI's Materialize does; recorded ok / failed with what the run said."""
        from dagster import AssetSelection, materialize

        from chmv_assets.orchestration.translator import ChmvTranslator

        asset_key = ChmvTranslator().get_asset_key(target)
        touched = f"{target.fqn}|{key}" if key else target.fqn
        if tags and "dagster/asset_partition_range_start" in tags:
            touched = f"{target.fqn}|{tags['dagster/asset_partition_range_start']}..{tags['dagster/asset_partition_range_end']}"
        op = self.history.begin(kind, actor, [touched], dst=dst)
        try:
            assets = [a for a in self.assets() if asset_key in getattr(a, "keys", ())]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = materialize(
                    assets[:1],
                    selection=AssetSelection.assets(asset_key),
                    partition_key=key,
                    resources={"clickhouse": self.resource},
                    instance=self.dagster_instance(),
                    tags=tags or {},
                    raise_on_error=False,
                )
        except Exception as err:  # noqa: BLE001 - recorded
            self.history.end(op, FAILED, error=first_line(err))
            return FAILED
        if result.success:
            self.history.end(op, OK)
            return OK
        errors = [
            e.event_specific_data.error.message.strip().splitlines()[0]
            for e in result.all_events
            if e.is_step_failure and e.event_specific_data and getattr(e.event_specific_data, "error", None)
        ]
        self.history.end(op, FAILED, error="; ".join(errors)[:600] or "the run failed")
        return FAILED

    def materialize_random(self) -> None:
        target = self.rng.choice(self.targets)
        slot = self.slots["closed"]
        if "dst" in self.faults and self.rng.random() < 0.4:
            slot = self.slots[self.rng.choice(["dst_fall", "dst_spring"])]
        key, ok = self.partition_key(target, slot)
        if not ok:
            return
        self.materialize(target, key, dst=slot.name.startswith("dst"))

    def materialize_range(self) -> None:
        from dagster import TimeWindowPartitionsDefinition

        from chmv_assets.orchestration.translator import ChmvTranslator

        target = self.rng.choice(self.targets)
        pdef = ChmvTranslator().get_partitions_def(self.loaded, target)
        if not isinstance(pdef, TimeWindowPartitionsDefinition):
            return
        slot = self.slots["closed"]
        first = pdef.get_partition_key_for_timestamp(slot.start + self.rng.randrange(slot.span // 2))
        last = pdef.get_partition_key_for_timestamp(slot.start + slot.span // 2 + self.rng.randrange(slot.span // 2))
        tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
        self.materialize(target, None, tags=tags, kind="materialize")

    def sensors_round(self, actor: str = "sensor") -> int:
        """One tick of the parity sweep and one of recovery, each followed by the runs it requested: what a user's
        deployment does every minute. Returns the number of runs requested."""
        from dagster import build_sensor_context

        defs = self.defs()
        repo = defs.get_repository_def()
        requested = 0
        for name in ("chmv_parity_sweep", "chmv_recovery"):
            op = self.history.begin("sensor_tick", actor, [name])
            try:
                sensor = repo.get_sensor_def(name)
                context = build_sensor_context(
                    instance=self.dagster_instance(),
                    cursor=self.cursors.get(name),
                    resources={"clickhouse": self.resource},
                    repository_def=repo,
                )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    data = sensor.evaluate_tick(context)
            except Exception as err:  # noqa: BLE001 - recorded
                self.history.end(op, FAILED, error=first_line(err))
                continue
            self.cursors[name] = data.cursor
            requests = list(data.run_requests or [])
            self.history.end(op, OK, requests=len(requests), skip=str(data.skip_message or "")[:200])
            requested += len(requests)
            for request in requests:
                self.execute_request(request, actor)
        return requested

    cursors: dict[str, str | None] = {}

    def execute_request(self, request, actor: str) -> None:
        from chmv_assets.orchestration.translator import ChmvTranslator

        tags = dict(request.tags)
        if request.asset_selection:
            (key,) = request.asset_selection[:1]
            target = next((t for t in self.targets if ChmvTranslator().get_asset_key(t) == key), None)
            if target is None:
                return
            self.materialize(target, request.partition_key, tags=tags, actor=actor, kind="materialize")
            return
        op = self.history.begin("run", actor, [request.job_name], tags=tags)
        try:
            job = self.defs().get_job_def(request.job_name)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = job.execute_in_process(
                    run_config=request.run_config, instance=self.dagster_instance(), tags=tags, raise_on_error=False
                )
            self.history.end(op, OK if result.success else FAILED)
        except Exception as err:  # noqa: BLE001 - recorded
            self.history.end(op, FAILED, error=first_line(err))

    # -- faults -------------------------------------------------------------------------------------------------

    def delete_rows(self, kind: str) -> None:
        """A partial delete (half the rows, or one hour of every day) or a retention drop of one source partition;
        the rows go to the source's graveyard first (writers paused), so expected keeps them."""
        candidates = [s for s in self.specs if s.checkable and self.loaded.project.table(s.ref).partition_by]
        if kind == "partial_delete":
            candidates = [s for s in self.specs if s.checkable]
        if not candidates:
            return
        spec = self.rng.choice(candidates)
        time_cols = [n for n, e in spec.columns if e.startswith("CAST(toDateTime(t)")]
        assert self.pool is not None
        with self.pool.paused(), self.resource.get_client() as client:
            grave = self.graves.get(spec.ref)
            if grave is None:
                grave = ObjectRef(database=SCRATCH_DB, name=f"grave_{spec.ref.database}_{spec.ref.name}")
                client.command(
                    f"CREATE TABLE {qualified(grave)} AS {qualified(spec.ref)} ENGINE = MergeTree ORDER BY tuple()"
                )
                self.graves[spec.ref] = grave
            if kind == "retention":
                parts = client.query(
                    "SELECT DISTINCT partition_id FROM system.parts WHERE active AND database = {d:String} "
                    "AND table = {t:String} ORDER BY partition_id",
                    parameters={"d": spec.ref.database, "t": spec.ref.name},
                ).result_rows
                if not parts:
                    return
                pid = parts[0][0]  # the oldest, as retention drops
                where = f"_partition_id = '{pid}'"
                statement = f"ALTER TABLE {qualified(spec.ref)} DROP PARTITION ID '{pid}'"
                op_kind = "drop_partition"
            else:
                if not time_cols:
                    return
                col = quote(time_cols[0])
                if self.rng.random() < 0.5:
                    where = f"cityHash64({col}) % 2 = 0 AND {col} < now() - INTERVAL 2 DAY"
                else:
                    hour = self.rng.randrange(24)
                    where = f"toHour({col}) = {hour} AND {col} < now() - INTERVAL 2 DAY"
                statement = f"DELETE FROM {qualified(spec.ref)} WHERE {where}"
                op_kind = "delete"
            touched = [spec.ref.fqn, *(t.fqn for t in self._downstream(spec.ref))]
            with self.history.op(op_kind, "fault", touched, where=where) as op:
                client.command(
                    f"INSERT INTO {qualified(grave)} SELECT * FROM {qualified(spec.ref)} WHERE {where}",
                    settings={"async_insert": 0, "max_partitions_per_insert_block": 0},
                )
                client.command(statement, settings={"mutations_sync": 2, "lightweight_deletes_sync": 2})
                op.detail["graveyard"] = grave.fqn

    def _downstream(self, source: ObjectRef) -> list[ObjectRef]:
        project = self.loaded.project
        out, todo = [], [source]
        while todo:
            ref = todo.pop()
            for view in project.views_from(ref):
                if view.writes_to not in out:
                    out.append(view.writes_to)
                    todo.append(view.writes_to)
        return out

    def foreign_insert(self) -> None:
        """A one-off INSERT INTO a managed target from outside the DDL (rows of a second foreign table)."""
        if not self.foreign:
            return
        target = self.rng.choice(sorted(self.foreign, key=lambda r: r.fqn))
        spec, table = self.foreign[target]
        view = next(v for v in self.loaded.project.views_into(target) if v.trigger == spec.ref)
        assert self.pool is not None
        once = ObjectRef(database=SCRATCH_DB, name=f"oneoff_{len(self.extras)}_{target.name}")
        with self.resource.get_client() as client:
            client.command(
                f"CREATE TABLE {qualified(once)} AS {qualified(spec.ref)} ENGINE = MergeTree ORDER BY tuple()"
            )
        self.pool.insert("foreign", spec, self.slots["closed"], 200, FOREIGN, via=once)
        select = renamed_select(view, {spec.ref: once})
        with self.history.op("foreign_insert", "fault", [target.fqn]), self.resource.get_client() as client:
            names = [r[0] for r in client.query(f"DESCRIBE TABLE {qualified(target)}").result_rows]
            outputs = [r[0] for r in client.query(f"DESCRIBE TABLE ({select})").result_rows]
            cols = ", ".join(quote(n) for n in outputs if n in names)
            client.command(
                f"INSERT INTO {qualified(target)} ({cols}) SELECT {cols} FROM ({select})", settings={"async_insert": 0}
            )
        self.extras.append(Extra(target, select))

    def merges(self, stop: bool) -> None:
        tables = list(self.targets[:2]) + [s.ref for s in self.specs[:1]]
        kind = "merges_" + ("stopped" if stop else "started")
        with self.history.op(kind, "fault", [t.fqn for t in tables]), self.resource.get_client() as client:
            for t in tables:
                if stop:
                    client.command(f"ALTER TABLE {qualified(t)} MODIFY SETTING parts_to_throw_insert = 400")
                client.command(f"SYSTEM {'STOP' if stop else 'START'} MERGES {qualified(t)}")
        self.stopped_merges = tables if stop else []

    def kill_rebuild(self) -> None:
        """``chmv rebuild`` of a closed partition in a child process killed at a named point (kill -9), the engine
        handed over to it (writers paused, every client closed)."""
        target = self.rng.choice(self.targets)
        key, ok = self.partition_key(target, self.slots["closed"])
        if not ok or key is None:
            return
        point = self.rng.choice(KILL_POINTS)
        assert self.pool is not None
        args = [
            sys.executable,
            "-m",
            "chmv_assets.cli",
            "rebuild",
            "--ddl-dir",
            str(self.ddl),
            "--dsn",
            f"chdb://{self.path}",
            "--target",
            target.fqn,
            "--partition",
            key,
        ]
        env = {**os.environ, "CHMV_CRASH_AT": point}
        with self.pool.paused(), self.sampler_paused():
            self.release()
            op = self.history.begin("rebuild_killed", "chmv", [f"{target.fqn}|{key}"], point=point)
            try:
                done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                self.history.end(op, UNCERTAIN, error="no end within 60 s")
                self.hold()
                return
            killed = done.returncode == -9
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] if done.returncode else []
            self.history.end(
                op,
                UNCERTAIN if killed else (OK if done.returncode == 0 else FAILED),
                returncode=done.returncode,
                said=" ".join(tail)[:300],
            )
            self.hold()

    def hung_rebuild(self) -> None:
        """A rebuild through a client factory whose calls stop answering after a few: the run must fail within its
        limit (recorded uncertain: whatever it did before is for the checker to judge)."""
        from chmv_assets.engine.rebuild.executor import execute, plan_for
        from chmv_assets.orchestration.partitions import window_for_key
        from chmv_assets.orchestration.translator import ChmvTranslator

        target = self.rng.choice(self.targets)
        key, ok = self.partition_key(target, self.slots["closed"])
        if not ok:
            return
        window = window_for_key(ChmvTranslator().get_partitions_def(self.loaded, target), key)
        factory = HangingFactory(self.resource, after=self.rng.randrange(3, 25), limit=2.0)
        op = self.history.begin(
            "rebuild_hung", "chmv", [f"{target.fqn}|{key}" if key else target.fqn], hang_after=factory.after
        )
        began = time.monotonic()
        try:
            plan = plan_for(factory, self.loaded, target, [window], engine="clickhouse")
            execute(plan, self.loaded, factory, owner="certify hung connection")
        except Exception as err:  # noqa: BLE001 - recorded
            took = time.monotonic() - began
            self.history.end(op, UNCERTAIN, error=first_line(err), seconds=round(took, 2), hung=factory.hung)
            if took > 60:
                self.notes.append(f"{op.id}: a hung connection held the run {took:.0f}s, past its 2 s limit")
            return
        self.history.end(op, OK, hung=factory.hung)

    # -- the reader of property (f) -----------------------------------------------------------------------------

    def sampler_paused(self):
        return self._sampler_pause.paused() if hasattr(self, "_sampler_pause") else _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class HangingFactory:
    """A client factory whose clients answer ``after`` calls, then hang: the next call blocks ``limit`` seconds and
    fails as a silent server's does (``OperationalError``), as do all after it."""

    def __init__(self, resource, after: int, limit: float):
        self.resource, self.after, self.limit = resource, after, limit
        self.calls = 0
        self.hung = False

    def get_client(self, **kwargs):
        from contextlib import contextmanager

        @contextmanager
        def opened():
            with self.resource.get_client(**kwargs) as client:
                yield _HangingClient(client, self)

        return opened()


class _HangingClient:
    def __init__(self, client, factory: HangingFactory):
        self._client, self._factory = client, factory

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if name not in ("command", "query", "insert", "query_arrow", "insert_arrow", "raw_query"):
            return attr

        def call(*args, **kwargs):
            from clickhouse_connect.driver.exceptions import OperationalError

            f = self._factory
            f.calls += 1
            if f.calls > f.after:
                f.hung = True
                time.sleep(f.limit)
                raise OperationalError(f"certify: the connection stopped answering (no answer in {f.limit}s)")
            return attr(*args, **kwargs)

        return call


def certify(
    ddl_dir: str | Path,
    *,
    seconds: float = 25.0,
    seed: int = 0,
    faults: str | None = None,
    scratch: str | Path | None = None,
    keep: bool = False,
) -> CertifyResult:
    """Run one certify history and check it (docs/certify.md).

    Raises:
        DDLError: The DDL directory is invalid (nothing is run).
        ChmvError: An unknown fault.
    """
    from chmv_assets import settings
    from chmv_assets.ddl.loader import load

    started = time.monotonic()
    chosen = choose_faults(faults, seed)
    load(ddl_dir, twin=True)  # invalid DDL stops here (exit 2), before anything is created
    base = Path(scratch) if scratch else (settings.state_dir() if settings.STATE_DIR.get() else None)
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="certify-", dir=base))
    previous = {k: os.environ.get(k) for k in ("CHMV_STATE_DIR", "TZ")}
    os.environ["CHMV_STATE_DIR"] = str(root / "state")
    if "dst" in chosen:
        os.environ["TZ"] = DST_ZONE
        time.tzset()
    try:
        run = Run(Path(ddl_dir).resolve(), seconds, seed, chosen, root)
        result = _drive(run, started)
        result.scratch = str(root)
        run.history.write(root / "history.jsonl")
        return result
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if "dst" in chosen:
            time.tzset()
        if not keep:
            shutil.rmtree(root / "chdb", ignore_errors=True)


def _drive(run: Run, started: float) -> CertifyResult:

    run.cursors = {}
    run.hold()
    try:
        return _drive_held(run, started)
    finally:
        run.release()


def _drive_held(run: Run, started: float) -> CertifyResult:
    from chmv_assets.certify.workload import Sequence as Seq

    run.deploy()
    run.setup_faults()
    pool = WriterPool(run.resource, run.history, run.seed, Seq())
    run.pool = pool
    run.seed_rows(pool)
    specs = [s for s in run.specs]
    slow = "slow_pipeline" in run.faults
    closed_like = ["closed"] * 6 + ["now"] * 2 + [n for n in run.slots if n.startswith("dst")]

    def choose(modes):
        def pick(rng: random.Random):
            spec = rng.choice(specs)
            slot = run.slots[rng.choice(closed_like)]
            mode = rng.choice(modes)
            via = run.buffers.get(spec.ref) if mode == BUFFER else None
            if mode == BUFFER and via is None:
                mode = DIRECT
            rows = rng.choice([1, 5, 20, 100]) if mode != BATCH else rng.choice([500, 2000])
            return spec, slot, rows, mode, via

        return pick

    pool.start("writer-direct", choose([DIRECT, DIRECT, BATCH]))
    pool.start("writer-async", choose([ASYNC_WAIT] + ([ASYNC_NOWAIT, BUFFER] if slow else [])))
    if run.foreign:
        foreign = list(run.foreign.values())

        def pick_foreign(rng: random.Random):
            spec, table = rng.choice(foreign)
            return spec, run.slots["closed"], rng.choice([1, 10, 50]), FOREIGN, table

        pool.start("writer-foreign", pick_foreign)

    deadline = started + run.seconds * 0.5
    actions = [("materialize", 5), ("range", 1), ("sensors", 1)]
    for fault, weight in (
        ("partial_delete", 1),
        ("retention", 1),
        ("foreign", 1),
        ("kill", 1),
        ("hung_connection", 1),
        ("merge_pressure", 1),
    ):
        if fault in run.faults:
            actions.append((fault, weight))
    names = [a for a, _ in actions]
    weights = [w for _, w in actions]
    while time.monotonic() < deadline:
        action = run.rng.choices(names, weights)[0]
        try:
            if action == "materialize":
                run.materialize_random()
            elif action == "range":
                run.materialize_range()
            elif action == "sensors":
                run.sensors_round("sensor")
            elif action in ("partial_delete", "retention"):
                run.delete_rows(action)
            elif action == "foreign":
                run.foreign_insert()
            elif action == "kill":
                run.kill_rebuild()
            elif action == "hung_connection":
                run.hung_rebuild()
            elif action == "merge_pressure":
                run.merges(stop=not run.stopped_merges)
        except Exception as err:  # noqa: BLE001 - an action of certify itself failed: noted, the run goes on
            run.notes.append(f"{action}: {first_line(err)}")
    # quiescence: writers stopped, faults healed, then recovery runs its course for a bounded number of ticks
    pool.stop()
    with run.history.op("quiesce", "certify", [s.ref.fqn for s in run.specs]), run.resource.get_client() as client:
        for buf in run.buffers.values():
            client.command(f"DROP TABLE IF EXISTS {qualified(buf)} SYNC")  # flushes what it holds
        try:
            client.command("SYSTEM FLUSH ASYNC INSERT QUEUE")
        except Exception:  # noqa: BLE001 - the embedded engine has no queue to flush (its async inserts wait)
            pass
        for t in run.stopped_merges:
            client.command(f"SYSTEM START MERGES {qualified(t)}")
    rounds = 0
    heal_deadline = started + run.seconds * 0.75
    while rounds < 4 and time.monotonic() < heal_deadline:
        rounds += 1
        if run.sensors_round("recovery") == 0 and rounds > 1:
            break
    ops_count = len(run.history.ops)
    anomalies = check(run, pool)
    elapsed = time.monotonic() - started
    return CertifyResult(
        seed=run.seed,
        faults=run.faults,
        seconds=elapsed,
        history=run.history,
        anomalies=anomalies,
        notes=run.notes + [f"writer error: {e}" for e in pool.errors[:5]],
        ops=ops_count,
        rows=pool.rows_written,
        targets=len(run.targets),
        partitions=run.partitions,
    )


def check(run: Run, pool: WriterPool) -> list[checker.Anomaly]:
    """The properties after quiescence (docs/certify.md)."""
    anomalies: list[checker.Anomaly] = []
    loaded = run.loaded
    with run.resource.get_client() as client:
        expected = build_expected(client, loaded, run.graves, run.extras)
        partitions = 0
        for target in run.targets:
            if not verifiable(loaded, target):
                run.notes.append(f"{target.fqn}: not verified (fed by a stream table; its levels below read it)")
                continue
            live = physical(client, target)
            try:
                actual = fingerprints(client, loaded, target, live)
                want = fingerprints(client, loaded, target, expected[target])
            except Exception as err:  # noqa: BLE001 - a form certify cannot compare: said, never passed silently
                run.notes.append(f"{target.fqn}: NOT compared ({first_line(err)})")
                continue
            partitions += len(set(actual) | set(want))
            for pid, a, e in checker.compare_partitions(actual, want):
                why = checker.suspect(run.history, target.fqn, pid, a, e)
                prop = "c" if why.startswith("class 5/6") else "a"
                ops = [o.id for o in checker.op_chain(run.history, target.fqn, _upstream(run, target))]
                anomalies.append(checker.Anomaly(prop, target.fqn, pid, checker.describe_difference(a, e), why, ops))
        run.partitions = partitions
        for spec in run.specs:
            if not spec.checkable or spec.id_column is None:
                if spec.checkable:
                    run.notes.append(f"{spec.ref.fqn}: no id column; (b) not checked on it")
                continue
            col = quote(spec.id_column)
            rel = f"SELECT {col} AS id FROM {qualified(spec.ref)}"
            if spec.ref in run.graves:
                rel += f" UNION ALL SELECT {col} FROM {qualified(run.graves[spec.ref])}"
            rows = client.query(f"SELECT id, count() FROM ({rel}) GROUP BY id").result_rows
            counts = {}
            for ident, n in rows:
                try:
                    counts[int(str(ident).lstrip("r"))] = int(n)
                except ValueError:
                    continue
            inserts = [
                (op_id, r.first_seq, r.rows, next(o.status for o in run.history.ops if o.id == op_id))
                for op_id, r in pool.records.items()
                if r.source == spec.ref
            ]
            anomalies += checker.row_anomalies(counts, inserts, spec.ref.fqn)
    anomalies += checker.overlapping_commits(run.history)
    return anomalies


def _upstream(run: Run, target: ObjectRef) -> list[str]:
    project = run.loaded.project
    out, todo = [], [target]
    while todo:
        ref = todo.pop()
        for view in project.views_into(ref):
            for src in view.source_refs:
                if src.fqn not in out:
                    out.append(src.fqn)
                    todo.append(src)
    return out


def not_supported_server(dsn: str | None) -> None:
    """certify runs on a scratch embedded engine; a server DSN is refused (not supported yet).

    Raises:
        ChmvError: Naming the DSN and what to do.
    """
    if dsn and not dsn.startswith("chdb:"):
        raise ChmvError(
            "certify on a server is not supported yet: it runs on the schema's local twin in a scratch embedded "
            "engine (drop --dsn); a server run needs a scratch database you name, which certify does not take yet"
        )


_ = threading  # writers and the reader are threads (workload.py)
