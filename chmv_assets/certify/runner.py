"""One certify run: a scratch twin, writers, chmv's own operations and the faults in the seed's order until the
run's deadline, quiescence, then the checks (docs/certify.md). The pieces: the run's state (context.py), chmv's
operations (operations.py), the faults (faults.py), the checks during the run (probes.py: (d), (f)) and after it
(verify.py)."""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from chmv_assets.certify import checker, operations
from chmv_assets.certify.context import Run
from chmv_assets.certify.faults import choose_faults, faults_of
from chmv_assets.certify.history import History, first_line
from chmv_assets.certify.probes import Exactness, Reader
from chmv_assets.certify.scratch import DST_ZONE, scratch_ddl
from chmv_assets.certify.verify import check, install_lease_log, quiesce
from chmv_assets.certify.workload import ASYNC_NOWAIT, ASYNC_WAIT, BATCH, BUFFER, DIRECT, FOREIGN, Sequence, WriterPool
from chmv_assets.errors import CertifyUsageError

__all__ = ["DST_ZONE", "CertifyResult", "Run", "certify", "not_supported_server", "scratch_ddl"]

_LOG = logging.getLogger(__name__)

#: Shares of the run's seconds: the workload stops starting operations at the first, recovery's ticks at the second;
#: the checks take the rest.
WORKLOAD_SHARE, HEAL_SHARE = 0.55, 0.8
#: Seconds an operation may take at most with the scratch chmv.toml's waits (docs/certify.md, "Bounded time"): none
#: is started later than this before the workload's deadline, and one that took longer is noted.
OP_BOUND_SECONDS = 8.0


@dataclass
class CertifyResult:
    """What a run found, and its throughput."""

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
    checked_d: int = 0
    samples_f: int = 0


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

    Args:
        ddl_dir: The schema (a DDL directory with its chmv.toml).
        seconds: Wall time of the run from this call, checks included (start-up of the process aside).
        seed: Every choice of the run (the same seed replays the same order).
        faults: ``all``, ``none``, a comma list, or None (drawn by the seed).
        scratch: Where the scratch directory goes (default ``$CHMV_STATE_DIR``, else a temp dir).
        keep: Keep the scratch engine's data.

    Raises:
        DDLError: The DDL directory is invalid (nothing is run).
        CertifyUsageError: An unknown fault.
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
    previous = {k: os.environ.get(k) for k in (settings.STATE_DIR.name, "TZ")}
    os.environ[settings.STATE_DIR.name] = str(root / "state")
    if "dst" in chosen:
        os.environ["TZ"] = DST_ZONE
        time.tzset()
    try:
        run = Run(Path(ddl_dir).resolve(), seconds, seed, chosen, root)
        run.hold()
        if "dst" in chosen:
            _check_zone(run)
        try:
            result = drive(run, started)
        finally:
            run.release()
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


def _writers(run: Run, pool: WriterPool) -> None:
    """The writer threads: direct and batched, async (with the slow pipeline: not waited for, and through Buffers),
    and the foreign MVs' tables. None writes the frozen slot (property (f)'s partition)."""
    specs = list(run.specs)
    slow = "slow_pipeline" in run.faults
    closed_like = ["closed"] * 6 + ["now"] * 2 + [n for n in run.slots if n.startswith("dst")]

    def choose(modes: list[str]) -> Callable:
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


def drive(run: Run, started: float) -> CertifyResult:
    """Set-up, the workload until the deadline, quiescence and the checks."""
    faults = faults_of(run.faults)
    warm = threading.Thread(target=run.warm, daemon=True, name="certify-warm")
    warm.start()
    run.deploy()
    with run.resource.get_client() as client:
        install_lease_log(client)
        for fault in faults:
            fault.setup(run, client)
    pool = WriterPool(run.resource, run.history, run.seed, Sequence())
    run.pool = pool
    run.seed_rows(pool)
    exactness = Exactness(run, every=1)
    exactness.install()
    reader = Reader(run)
    run.add_quiet(reader.paused)
    _writers(run, pool)
    warm.join()

    run.deadline = started + run.seconds * WORKLOAD_SHARE
    actions: list[tuple[str, int, Callable[[], object]]] = [
        ("materialize", 5, lambda: operations.materialize_random(run)),
        ("range", 1, lambda: operations.materialize_range(run)),
        ("sensors", 1, lambda: operations.sensors_round(run, "sensor")),
    ]
    actions += [(f.name, f.weight, partial(f.act, run)) for f in faults if f.weight]
    # every fault drawn acts once before the seed's order draws it again: on a busy machine a run of 60 s has time
    # for a handful of operations after the once-per-run ones, and a fault never acted proves nothing
    once: list[tuple[str, Callable[[], object]]] = [
        ("apply", lambda: operations.apply_changed_select(run)),
        *((f.name, lambda f=f: f.act(run)) for f in faults if f.weight),
        ("maintain", lambda: operations.maintain(run)),
        ("reader", reader.act),
    ]
    names = [a for a, _, _ in actions]
    weights = [w for _, w, _ in actions]
    todo = {a: f for a, _, f in actions}
    step = 0
    while time.monotonic() + (0 if step == 0 else 1.0) < run.deadline:
        step += 1
        # the once-per-run operations first (each while half an operation's bound is left), then the seed's order
        if once and time.monotonic() + OP_BOUND_SECONDS / 2 < run.deadline:
            action, call = once.pop(0)
        else:
            action = run.rng.choices(names, weights)[0]
            call = todo[action]
        began = time.monotonic()
        try:
            call()
        except Exception as err:  # noqa: BLE001 - an action of certify itself failed: noted, the run goes on
            run.notes.append(f"{action}: {first_line(err)}")
        took = time.monotonic() - began
        if took > OP_BOUND_SECONDS * 2:
            run.notes.append(f"{action} took {took:.1f}s, past its bound of {OP_BOUND_SECONDS * 2:.0f}s")
    for action, _ in once:
        run.notes.append(f"{action}: not reached before the workload's deadline")
    run.before_rebuild = run.after_rebuild = None
    quiesce(run, pool, faults, started + run.seconds * HEAL_SHARE)
    ops_count = len(run.history.ops)
    anomalies = exactness.anomalies + reader.anomalies + run.found + check(run, pool)
    return CertifyResult(
        seed=run.seed,
        faults=run.faults,
        seconds=time.monotonic() - started,
        history=run.history,
        anomalies=anomalies,
        notes=run.notes + [f"writer error: {e}" for e in pool.errors[:5]],
        ops=ops_count,
        rows=pool.rows_written,
        targets=len(run.targets),
        partitions=run.partitions,
        checked_d=exactness.checked,
        samples_f=reader.samples,
    )


def _check_zone(run: Run) -> None:
    """The dst fault needs the engine in New York: the embedded engine takes the process's time zone when the
    process first starts one and keeps it (measured on chdb 26.9), so in a process that started one before (a test
    worker, a notebook) the run is not in New York, and a run that started the process's first engine leaves it
    there for the process's later ones. Said in the run's notes; the CLI runs in a process of its own."""
    with run.resource.get_client() as client:
        zone = str(client.command("SELECT timezone()"))
    if zone != DST_ZONE:
        run.notes.append(
            f"the dst fault's runs are not in {DST_ZONE}: the embedded engine runs in the time zone {zone}, fixed by "
            "an engine this process started earlier (run chmv certify in a process of its own)"
        )


def not_supported_server(dsn: str | None) -> None:
    """certify runs on a scratch embedded engine; a server DSN is refused (not supported yet).

    Raises:
        CertifyUsageError: Naming the DSN and what to do.
    """
    if dsn and not dsn.startswith("chdb:"):
        raise CertifyUsageError(
            "certify on a server is not supported yet: it runs on the schema's local twin in a scratch embedded "
            "engine (drop --dsn); a server run needs a scratch database you name, which certify does not take yet"
        )
