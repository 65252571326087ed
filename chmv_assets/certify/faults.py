"""The faults a certify run can inject, each on or off, drawn by the seed or named on the command line.

Each fault is a small class: :meth:`Fault.setup` before the writers start, :meth:`Fault.act` when the seed's order
draws it (weight :attr:`Fault.weight`), :meth:`Fault.heal` at quiescence (before the checks). What a fault does is
recorded in the history; rows it removes from a source go to the source's graveyard first (writers paused), so the
expected rows keep them.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import Any, ClassVar

from chmv_assets import settings
from chmv_assets.certify.context import KILL_TIMEOUT_SECONDS, Run
from chmv_assets.certify.expected import SCRATCH_DB, Extra, pending_mutations, verifiable
from chmv_assets.certify.history import OK, UNCERTAIN, first_line
from chmv_assets.certify.workload import DIRECT, FOREIGN, TimeSlot
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.errors import CertifyUsageError
from chmv_assets.sql.quoting import qualified, quote
from chmv_assets.sql.rewrite import renamed_select
from chmv_assets.sql.time_sql import time_sql

#: name → what it does (docs/certify.md has the long form).
FAULTS = {
    "kill": "kill -9 of a `chmv rebuild` (a child process) at a named point: shadow created, mid-fill, filled not "
    "swapped, swapped not recorded",
    "slow_pipeline": "inserts whose MV output lands late: async inserts not waited for, a Buffer table in front of a "
    "source",
    "retention": "retention drops of source partitions (ALTER TABLE … DROP PARTITION)",
    "partial_delete": "partial deletes on sources (DELETE FROM … WHERE, half the rows or one hour of every day)",
    "foreign": "a writer outside the DDL: an MV of another team and a one-off INSERT into a managed target",
    "merge_pressure": "SYSTEM STOP MERGES on targets and sources for a while, a low parts_to_throw_insert",
    "dst": "process and session in America/New_York, rows in the 01:00 hours of 2026-11-01 and around 2026-03-08 "
    "02:00 (chmv.toml timezone set to it)",
    "hung_connection": "a client whose calls stop answering past their time limit during a rebuild",
    "steady_writer": "a writer chmv does not control inserting into a closed partition's window every 20-50 ms for the "
    "whole of a rebuild of it",
}

#: The kill points (chmv_assets.engine.rebuild.steps, $CHMV_CRASH_AT).
KILL_POINTS = ("rebuild:shadow_created", "rebuild:mid_fill", "rebuild:filled", "rebuild:swapped")
#: How long a hung connection's call blocks before it fails.
HANG_SECONDS = 2.0


def choose_faults(spec: str | None, seed: int) -> tuple[str, ...]:
    """The faults of a run: ``all``, ``none``, a comma list of names, or (None) each drawn by the seed.

    Raises:
        CertifyUsageError: An unknown fault name (the message lists them).
    """
    if spec is None:
        rng = random.Random(f"{seed}:faults")
        return tuple(f for f in FAULTS if rng.random() < 0.5)
    spec = spec.strip()
    if spec == "all":
        return tuple(FAULTS)
    if spec in ("none", ""):
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise CertifyUsageError(
            f"--faults: unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}, all, none"
        )
    return names


class Fault:
    """One fault: set up before the writers, acted when drawn, healed at quiescence."""

    name: ClassVar[str] = ""
    #: How often the run's order draws :meth:`act` against chmv's operations (0: never drawn).
    weight: ClassVar[int] = 1

    def setup(self, run: Run, client: Any) -> None:
        """Before the writers start (``client`` open on the scratch engine)."""

    def act(self, run: Run) -> None:
        """Once, when the run's order draws it."""

    def heal(self, run: Run, client: Any) -> None:
        """At quiescence, writers stopped, before the checks."""


#: Seconds between two flushes of the slow pipeline's Buffers by its flusher thread (drawn in this range).
FLUSH_EVERY = (0.05, 0.3)


class SlowPipeline(Fault):
    """A Buffer table in front of every source (the async writer inserts through it and async inserts it does not
    wait for): acknowledgements that do not mean committed, MV output landing late. A flusher thread with a client of
    its own flushes the Buffers every 50-300 ms (``OPTIMIZE TABLE``, the flush a Buffer runs in the background: no
    ``INSERT`` in ``system.processes``) while chmv rebuilds: behind a slow MV (a schema's own, such as
    tests/fixtures/schemas/grid_hours' ``daily_alarms_mv``) a flushed block is committed to the source well before its
    MV output lands, and a rebuild that read it and swapped first holds the row twice (issue 25, class 3)."""

    name = "slow_pipeline"
    weight = 0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._pause = threading.Lock()
        self._thread: threading.Thread | None = None
        self.flushes = 0

    @contextmanager
    def paused(self):
        with self._pause:
            yield

    def _flush(self, run: Run) -> None:
        rng = random.Random(f"{run.seed}:flusher")
        bufs = sorted(run.buffers.values(), key=lambda r: r.fqn)
        while not self._stop.wait(rng.uniform(*FLUSH_EVERY)):
            with self._pause:
                if self._stop.is_set():
                    break
                try:
                    with run.resource.get_client() as client:
                        client.command(f"OPTIMIZE TABLE {qualified(rng.choice(bufs))}")
                    self.flushes += 1
                except Exception as err:  # noqa: BLE001 - a failed flush is no flush; the Buffer flushes itself
                    run.notes.append(f"slow_pipeline flusher: {first_line(err)}")

    def setup(self, run: Run, client: Any) -> None:
        for spec in run.specs:
            if not spec.checkable:
                continue
            buf = ObjectRef(database=SCRATCH_DB, name=f"buffer_{spec.ref.database}_{spec.ref.name}")
            with run.history.op("buffer_created", "fault", [spec.ref.fqn]):
                client.command(
                    f"CREATE TABLE {qualified(buf)} AS {qualified(spec.ref)} ENGINE = Buffer("
                    f"{quote(spec.ref.database)}, {quote(spec.ref.name)}, 1, 0.2, 1.5, 10, 100000, 1, 10000000)"
                )
            run.buffers[spec.ref] = buf
        if run.buffers:
            run.add_quiet(self.paused)
            self._thread = threading.Thread(target=self._flush, args=(run,), daemon=True, name="certify-flusher")
            self._thread.start()

    def heal(self, run: Run, client: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            run.notes.append(f"slow_pipeline: {self.flushes} Buffer flushes by the flusher thread")
        for buf in run.buffers.values():
            client.command(f"DROP TABLE IF EXISTS {qualified(buf)} SYNC")  # flushes what it holds
        try:
            client.command("SYSTEM FLUSH ASYNC INSERT QUEUE")
        except Exception:  # noqa: BLE001 - the embedded engine has no queue to flush (its async inserts wait)
            pass


class Foreign(Fault):
    """An MV not in the DDL writing into two managed targets (from a table of its own, fed by a writer), and, when
    drawn, a one-off ``INSERT INTO target``."""

    name = "foreign"

    def setup(self, run: Run, client: Any) -> None:
        project = run.loaded.project
        by_ref = {s.ref: s for s in run.specs}
        candidates = [
            t
            for t in run.targets
            if verifiable(run.loaded, t) and any(v.trigger in by_ref for v in project.views_into(t))
        ]
        # at most half of the targets (one at least, two at most): the others keep chmv's paths a foreign writer
        # blocks (a re-derivation by chmv apply) open to the run
        most = min(2, max(1, len(candidates) // 2))
        run.rng.shuffle(candidates)
        for target in candidates:
            views = [v for v in project.views_into(target) if v.trigger in by_ref]
            view = views[0]
            spec = by_ref[view.trigger]  # type: ignore[index]
            table = ObjectRef(database=SCRATCH_DB, name=f"foreign_{target.database}_{target.name}")
            mv = ObjectRef(database=SCRATCH_DB, name=f"foreign_mv_{target.database}_{target.name}")
            select = renamed_select(view, {spec.ref: table})
            with run.history.op("foreign_mv", "fault", [target.fqn], mv=mv.fqn):
                client.command(
                    f"CREATE TABLE {qualified(table)} AS {qualified(spec.ref)} ENGINE = MergeTree ORDER BY tuple()"
                )
                client.command(f"CREATE MATERIALIZED VIEW {qualified(mv)} TO {qualified(target)} AS {select}")
            run.extras.append(Extra(target, select))
            run.foreign[target] = (spec, table)
            if len(run.foreign) >= most:
                break

    def act(self, run: Run) -> None:
        """A one-off INSERT INTO a managed target from outside the DDL (rows of a second foreign table)."""
        if not run.foreign or run.pool is None:
            return
        target = run.rng.choice(sorted(run.foreign, key=lambda r: r.fqn))
        spec, _table = run.foreign[target]
        view = next((v for v in run.loaded.project.views_into(target) if v.trigger == spec.ref), None)
        if view is None:
            return
        once = ObjectRef(database=SCRATCH_DB, name=f"oneoff_{len(run.extras)}_{target.name}")
        with run.resource.get_client() as client:
            client.command(
                f"CREATE TABLE {qualified(once)} AS {qualified(spec.ref)} ENGINE = MergeTree ORDER BY tuple()"
            )
        run.pool.insert("foreign", spec, run.slots["closed"], 200, FOREIGN, via=once)
        select = renamed_select(view, {spec.ref: once})
        with run.history.op("foreign_insert", "fault", [target.fqn]), run.resource.get_client() as client:
            names = [r[0] for r in client.query(f"DESCRIBE TABLE {qualified(target)}").result_rows]
            outputs = [r[0] for r in client.query(f"DESCRIBE TABLE ({select})").result_rows]
            cols = ", ".join(quote(n) for n in outputs if n in names)
            client.command(
                f"INSERT INTO {qualified(target)} ({cols}) SELECT {cols} FROM ({select})", settings={"async_insert": 0}
            )
        run.extras.append(Extra(target, select))


class _Delete(Fault):
    """Rows removed from a source (into its graveyard first, writers paused)."""

    def _delete(self, run: Run, candidates: list, retention: bool) -> None:
        if not candidates:
            return
        spec = run.rng.choice(candidates)
        time_cols = [n for n, e in spec.columns if e.startswith("CAST(toDateTime(t)")]
        with run.quiet(), run.resource.get_client() as client:
            if pending_mutations(client, spec.ref):
                # the graveyard must hold exactly what the source lost: a copy taken while an earlier delete is still
                # pending (merges stopped) would hold its rows again
                run.notes.append(f"{self.name}: {spec.ref.fqn} has a mutation pending (merges stopped): not acted")
                return
            grave = run.graves.get(spec.ref)
            if grave is None:
                grave = ObjectRef(database=SCRATCH_DB, name=f"grave_{spec.ref.database}_{spec.ref.name}")
                client.command(
                    f"CREATE TABLE {qualified(grave)} AS {qualified(spec.ref)} ENGINE = MergeTree ORDER BY tuple()"
                )
                run.graves[spec.ref] = grave
            if retention:
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
                kind = "drop_partition"
            else:
                if not time_cols:
                    return
                col = quote(time_cols[0])
                if run.rng.random() < 0.5:
                    where = f"cityHash64({col}) % 2 = 0 AND {col} < now() - INTERVAL 2 DAY"
                else:
                    where = f"toHour({col}) = {run.rng.randrange(24)} AND {col} < now() - INTERVAL 2 DAY"
                statement = f"DELETE FROM {qualified(spec.ref)} WHERE {where}"
                kind = "delete"
            touched = [spec.ref.fqn, *(t.fqn for t in run.downstream(spec.ref))]
            with run.history.op(kind, "fault", touched, where=where) as op:
                client.command(
                    f"INSERT INTO {qualified(grave)} SELECT * FROM {qualified(spec.ref)} WHERE {where}",
                    settings={"async_insert": 0, "max_partitions_per_insert_block": 0},
                )
                # with merges stopped a mutation cannot run: it stays pending (quiescence awaits it) instead of
                # holding every writer paused until the statement's time limit
                wait = 0 if spec.ref in run.stopped_merges else 2
                client.command(statement, settings={"mutations_sync": wait, "lightweight_deletes_sync": wait})
                op.detail["graveyard"] = grave.fqn
                op.detail["pending"] = not wait


class PartialDelete(_Delete):
    """``DELETE FROM source WHERE`` half the rows, or one hour of every day, of closed days."""

    name = "partial_delete"

    def act(self, run: Run) -> None:
        self._delete(run, [s for s in run.specs if s.checkable], retention=False)


class Retention(_Delete):
    """``ALTER TABLE … DROP PARTITION`` of a source's oldest partition."""

    name = "retention"

    def act(self, run: Run) -> None:
        candidates = [s for s in run.specs if s.checkable and (t := run.loaded.project.table(s.ref)) and t.partition_by]
        self._delete(run, candidates, retention=True)


class MergePressure(Fault):
    """``SYSTEM STOP MERGES`` on two targets and a source with ``parts_to_throw_insert = 400``, toggled when drawn;
    merges started again at quiescence."""

    name = "merge_pressure"

    def act(self, run: Run) -> None:
        stop = not run.stopped_merges
        tables = list(run.targets[:2]) + [s.ref for s in run.specs[:1]]
        kind = "merges_" + ("stopped" if stop else "started")
        with run.history.op(kind, "fault", [t.fqn for t in tables]), run.resource.get_client() as client:
            for t in tables:
                if stop:
                    client.command(f"ALTER TABLE {qualified(t)} MODIFY SETTING parts_to_throw_insert = 400")
                client.command(f"SYSTEM {'STOP' if stop else 'START'} MERGES {qualified(t)}")
        run.stopped_merges = tables if stop else []

    def heal(self, run: Run, client: Any) -> None:
        for t in run.stopped_merges:
            client.command(f"SYSTEM START MERGES {qualified(t)}")
        run.stopped_merges = []


class Kill(Fault):
    """``chmv rebuild`` of a closed partition in a child process killed (SIGKILL, ``$CHMV_CRASH_AT``) at a named
    point, the engine handed over to it (writers and reader paused, every client closed)."""

    name = "kill"

    def act(self, run: Run) -> None:
        target = run.rng.choice(run.targets)
        key, ok = run.partition_key(target, run.slots["closed"])
        if not ok or key is None:
            return
        point = run.rng.choice(KILL_POINTS)
        args = [
            sys.executable,
            "-m",
            "chmv_assets.cli",
            "rebuild",
            "--ddl-dir",
            str(run.ddl),
            "--dsn",
            f"chdb://{run.path}",
            "--target",
            target.fqn,
            "--partition",
            key,
        ]
        env = {**os.environ, settings.CRASH_AT.name: point}
        with run.quiet():
            run.release()
            op = run.history.begin("rebuild_killed", "chmv", [f"{target.fqn}|{key}"], point=point)
            try:
                done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=KILL_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                run.history.end(op, UNCERTAIN, error=f"no end within {KILL_TIMEOUT_SECONDS} s (killed)")
                run.hold()
                return
            killed = done.returncode == -9
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] if done.returncode else []
            run.history.end(
                op,
                UNCERTAIN if killed else (OK if done.returncode == 0 else "failed"),
                returncode=done.returncode,
                said=" ".join(tail)[:300],
            )
            run.hold()


class HungConnection(Fault):
    """A rebuild through a client factory whose calls stop answering after a few: the run must fail within its limit
    (recorded uncertain: whatever it did before is for the checker to judge)."""

    name = "hung_connection"

    def act(self, run: Run) -> None:
        from chmv_assets.engine.rebuild.executor import execute, plan_for

        target = run.rng.choice(run.targets)
        key, ok = run.partition_key(target, run.slots["closed"])
        if not ok:
            return
        window = run.loaded.partitioning(target).window_of(key)
        factory = HangingFactory(run.resource, after=run.rng.randrange(3, 25), limit=HANG_SECONDS)
        op = run.history.begin(
            "rebuild_hung", "chmv", [f"{target.fqn}|{key}" if key else target.fqn], hang_after=factory.after
        )
        began = time.monotonic()
        try:
            plan = plan_for(factory, run.loaded, target, [window], engine="clickhouse")
            execute(plan, run.loaded, factory, owner="certify hung connection")
        except Exception as err:  # noqa: BLE001 - recorded
            took = time.monotonic() - began
            run.history.end(op, UNCERTAIN, error=first_line(err), seconds=round(took, 2), hung=factory.hung)
            if took > 30:
                run.notes.append(
                    f"{op.id}: a hung connection held the run {took:.0f}s, past its {HANG_SECONDS} s limit"
                )
            return
        run.history.end(op, OK, hung=factory.hung)


#: Instants (UTC) of 2026-11-01 in each of New York's two 01:00 hours, and of the hour after them.
REPEATED_HOUR = (
    int(datetime(2026, 11, 1, 5, 30, tzinfo=UTC).timestamp()),  # 01:30 EDT
    int(datetime(2026, 11, 1, 6, 30, tzinfo=UTC).timestamp()),  # 01:30 EST
    int(datetime(2026, 11, 1, 7, 30, tzinfo=UTC).timestamp()),  # 02:30 EST
)
#: The fall-back night in New York, [00:00 EDT, 03:00 EST): both 01:00 hours and the hours around them.
NIGHT = (
    int(datetime(2026, 11, 1, 4, 0, tzinfo=UTC).timestamp()),
    int(datetime(2026, 11, 1, 8, 0, tzinfo=UTC).timestamp()),
)


class Dst(Fault):
    """Process and session in America/New_York, ``timezone`` set to it, rows in the DST hours (set up by
    :func:`chmv_assets.certify.runner.certify` and the scratch DDL). When drawn: the target partitioned by the
    shortest period loses its partitions of the fall-back night (``DROP PARTITION``, as a lost disk or an operator's
    mistake would; writers paused), then one range run of the night's keys repairs them, checked by (d) over every
    partition of the target. An hourly target's range holds ``2026-11-01-01:00`` and ``2026-11-01-01:00-0500``: each
    01:00 hour must come back (issue 25, class 1: the first key was an empty window, the second read the first
    hour)."""

    name = "dst"

    def act(self, run: Run) -> None:
        from dagster import TimeWindowPartitionsDefinition

        from chmv_assets.certify.operations import materialize

        targets = [t for t in run.targets if verifiable(run.loaded, t) and _recomputable(run, t)]
        run.rng.shuffle(targets)
        for target in sorted(targets, key=lambda t: _window_seconds(run, t)):
            pdef = run.partitions_def(target)
            if not isinstance(pdef, TimeWindowPartitionsDefinition) or REPEATED_HOUR[0] < pdef.start.timestamp():
                continue
            try:
                first = pdef.get_partition_key_for_timestamp(NIGHT[0])
                last = pdef.get_partition_key_for_timestamp(NIGHT[1] - 1)
            except Exception:  # noqa: BLE001 - no key there
                continue
            self._drop_night(run, target)
            if first == last:
                materialize(run, target, first, dst=True, whole=True)
            else:
                tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
                materialize(run, target, None, tags=tags, dst=True, whole=True)
            return

    @staticmethod
    def _drop_night(run: Run, target: ObjectRef) -> None:
        """``DROP PARTITION`` of ``target``'s partitions holding the night (found by their parts' min/max time or
        date), writers paused."""
        day = time_sql(date(2026, 11, 1), "Date")
        with run.quiet(), run.resource.get_client() as client:
            pids = [
                r[0]
                for r in client.query(
                    "SELECT DISTINCT partition_id FROM system.parts WHERE active AND database = {d:String} "
                    "AND table = {t:String} AND ((toUnixTimestamp(max_time) > 0 AND toUnixTimestamp(max_time) >= "
                    "{s:UInt32} AND toUnixTimestamp(min_time) < {e:UInt32}) OR (toUnixTimestamp(max_time) = 0 AND "
                    f"min_date <= {day} AND max_date >= {day} AND toUnixTimestamp(max_date) > 0))",
                    parameters={
                        "d": target.database,
                        "t": target.name,
                        "s": NIGHT[0],
                        "e": NIGHT[1],
                    },
                ).result_rows
            ]
            if not pids:
                return
            with run.history.op("target_partitions_dropped", "fault", [target.fqn], partitions=pids):
                for pid in pids:
                    client.command(f"ALTER TABLE {qualified(target)} DROP PARTITION ID '{pid}'")


def _recomputable(run: Run, target: ObjectRef) -> bool:
    """Whether every row of ``target`` can be recomputed from what its sources hold now: none of its upstream
    tables lost rows to a delete fault (a graveyard), is a stream or a ``Null`` table (they keep no row), and no
    writer outside the DDL writes into it. The dst fault drops partitions of such a target only: dropping one whose
    rows only the target held destroys them (the fault's damage, not chmv's)."""
    upstream = set(run.upstream(target))
    by_fqn = {s.ref.fqn: s for s in run.specs}
    if any(ref.fqn in upstream for ref in run.graves):
        return False
    if any(fqn in by_fqn and not by_fqn[fqn].checkable for fqn in upstream):
        return False
    foreign = {t.fqn for t in run.foreign} | {e.target.fqn for e in run.extras}
    return not foreign & {target.fqn, *upstream}


def _window_seconds(run: Run, target: ObjectRef) -> float:
    """The length of ``target``'s partitions (the shortest first: an hourly target's keys are the DST hours')."""
    from dagster import TimeWindowPartitionsDefinition

    pdef = run.partitions_def(target)
    if not isinstance(pdef, TimeWindowPartitionsDefinition):
        return float("inf")
    try:
        window = pdef.time_window_for_partition_key(pdef.get_first_partition_key())
        return (window.end - window.start).total_seconds()
    except Exception:  # noqa: BLE001 - no partition yet
        return float("inf")


#: Seconds between two inserts of the steady writer (drawn in this range).
STEADY_EVERY = (0.02, 0.05)


class SteadyWriter(Fault):
    """A writer chmv does not control that keeps inserting into one closed partition's window, from a client of its
    own, every 20-50 ms for the whole of a rebuild of that partition, then stops (issue 25, class 2: every attempt
    races, an earlier one may swap and lose a row; (d) judges what the failure then says). Its rows go into the
    history like every writer's; it pauses with the others for (d)'s snapshots."""

    name = "steady_writer"
    weight = 4

    def __init__(self) -> None:
        self._pause = threading.Lock()
        self.rows = 0

    @contextmanager
    def paused(self):
        with self._pause:
            yield

    def setup(self, run: Run, client: Any) -> None:
        run.add_quiet(self.paused)

    def act(self, run: Run) -> None:
        from dagster import TimeWindowPartitionsDefinition

        from chmv_assets.certify.operations import materialize

        if run.pool is None:
            return
        closed = run.slots["closed"]
        candidates = []
        for target in run.targets:
            upstream = set(run.upstream(target))
            specs = [s for s in run.specs if s.ref.fqn in upstream and s.checkable and not s.gated]
            pdef = run.partitions_def(target)
            if specs and verifiable(run.loaded, target) and isinstance(pdef, TimeWindowPartitionsDefinition):
                candidates.append((target, specs, pdef))
        if not candidates:
            return
        target, specs, pdef = run.rng.choice(candidates)
        key, ok = run.partition_key(target, closed)
        if not ok or key is None:
            return
        window = pdef.time_window_for_partition_key(key)
        start, end = int(window.start.timestamp()), int(window.end.timestamp())
        start, end = max(start, closed.start), min(end, closed.start + closed.span)  # never the frozen slot's days
        if end - start < 60:
            return
        slot = TimeSlot("steady", start, end - start)
        stop = threading.Event()
        thread = threading.Thread(
            target=self._write, args=(run, specs, slot, stop), daemon=True, name="certify-steady-writer"
        )
        before = self.rows
        thread.start()
        try:
            op = materialize(run, target, key, actor="chmv")
        finally:
            stop.set()
            thread.join(timeout=30)
        op.detail["steady_rows"] = self.rows - before

    def _write(self, run: Run, specs: list, slot: TimeSlot, stop: threading.Event) -> None:
        assert run.pool is not None
        rng = random.Random(f"{run.seed}:steady:{slot.start}")
        while not stop.is_set():
            with self._pause:
                if stop.is_set():
                    break
                rows = rng.choice([1, 2, 5])
                try:
                    run.pool.insert("steady", rng.choice(specs), slot, rows, DIRECT)
                    self.rows += rows
                except Exception as err:  # noqa: BLE001 - recorded failed in the history; the writer goes on
                    run.pool.errors.append(first_line(err))
            stop.wait(rng.uniform(*STEADY_EVERY))


FAULT_CLASSES: dict[str, type[Fault]] = {
    cls.name: cls
    for cls in (Kill, SlowPipeline, Retention, PartialDelete, Foreign, MergePressure, Dst, HungConnection, SteadyWriter)
}


def faults_of(names: tuple[str, ...]) -> list[Fault]:
    """The fault objects of a run, in :data:`FAULTS` order."""
    return [FAULT_CLASSES[n]() for n in FAULTS if n in names]


class HangingFactory:
    """A client factory whose clients answer ``after`` calls, then hang: the next call blocks ``limit`` seconds and
    fails as a silent server's does (``OperationalError``), as do all after it."""

    def __init__(self, resource: Any, after: int, limit: float):
        self.resource, self.after, self.limit = resource, after, limit
        self.calls = 0
        self.hung = False

    def get_client(self, **kwargs: Any):
        @contextmanager
        def opened():
            with self.resource.get_client(**kwargs) as client:
                yield _HangingClient(client, self)

        return opened()


class _HangingClient:
    def __init__(self, client: Any, factory: HangingFactory):
        self._client, self._factory = client, factory

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in ("command", "query", "insert", "query_arrow", "insert_arrow", "raw_query"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            from clickhouse_connect.driver.exceptions import OperationalError

            f = self._factory
            f.calls += 1
            if f.calls > f.after:
                f.hung = True
                time.sleep(f.limit)
                raise OperationalError(f"certify: the connection stopped answering (no answer in {f.limit}s)")
            return attr(*args, **kwargs)

        return call
