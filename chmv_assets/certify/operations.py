"""chmv's own operations in a certify run, each recorded in the history with what it said: Dagster
materializations of partitions and ranges (in-process, as the UI's Materialize), the parity sweep and recovery
sensors' ticks with the runs they request, ``chmv apply`` of a second DDL version certify derives itself (a
semantically equivalent, textually different MV SELECT), and the maintenance sensor and job."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from chmv_assets.certify.context import KILL_TIMEOUT_SECONDS, Run
from chmv_assets.certify.history import FAILED, OK, UNCERTAIN, Op, first_line
from chmv_assets.ddl.models import ObjectRef

#: Most Dagster partitions a range run covers: a range is one operation, bounded like the others.
RANGE_PARTITIONS = 3
#: Where the ``kill`` fault stops a ``chmv apply``: in its re-derivation of the target's history (issue 25, class 8).
APPLY_KILL_POINT = "lifecycle:partition"


def materialize(
    run: Run,
    target: ObjectRef,
    key: str | None,
    *,
    tags: dict | None = None,
    actor: str = "chmv",
    dst: bool = False,
    whole: bool = False,
) -> Op:
    """A run of ``target``'s asset (one partition, a range through tags, or the whole table) in-process, as the UI's
    Materialize does; recorded ok / failed with what the run said, then checked by ``run.after_rebuild`` (every
    partition of the target with ``whole``: what a key's window is, is what a DST key puts to the test)."""
    from dagster import AssetSelection
    from dagster import materialize as dagster_materialize

    from chmv_assets.orchestration.translator import ChmvTranslator

    asset_key = ChmvTranslator().get_asset_key(target)
    keys = range_keys(run, target, tags) if tags and "dagster/asset_partition_range_start" in tags else [key]
    touched = f"{target.fqn}|{key}" if key else target.fqn
    if tags and "dagster/asset_partition_range_start" in tags:
        touched = (
            f"{target.fqn}|{tags['dagster/asset_partition_range_start']}..{tags['dagster/asset_partition_range_end']}"
        )
    if whole:
        keys = [None]
    before = run.before_rebuild(target, keys) if run.before_rebuild else None
    op = run.history.begin("materialize", actor, [touched], dst=dst)
    try:
        assets = [a for a in run.assets() if asset_key in getattr(a, "keys", ())]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = dagster_materialize(
                assets[:1],
                selection=AssetSelection.assets(asset_key),
                partition_key=key,
                resources={"clickhouse": run.resource},
                instance=run.dagster_instance(),
                tags=tags or {},
                raise_on_error=False,
            )
    except Exception as err:  # noqa: BLE001 - recorded
        run.history.end(op, FAILED, error=first_line(err))
    else:
        if result.success:
            run.history.end(op, OK)
        else:
            errors = [
                step_error(error)
                for e in result.all_events
                if e.is_step_failure and (error := getattr(e.event_specific_data, "error", None))
            ]
            run.history.end(op, FAILED, error="; ".join(errors)[:600] or "the run failed")
    if run.after_rebuild is not None:
        run.after_rebuild(op, target, keys, before)
    return op


def step_error(info: Any) -> str:
    """What a failed step said: the first line of the error chmv raised (Dagster wraps it in an
    ``Error occurred while executing op …`` whose cause it is), which (d) judges."""
    while getattr(info, "cause", None) is not None:
        info = info.cause
    lines = (info.message or "").strip().splitlines()
    return lines[0] if lines else "the step failed"


def range_keys(run: Run, target: ObjectRef, tags: dict) -> list[str | None]:
    """The partition keys of a range run's tags."""
    from dagster import PartitionKeyRange

    pdef = run.partitions_def(target)
    first, last = tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]
    try:
        return list(pdef.get_partition_keys_in_range(PartitionKeyRange(first, last)))
    except Exception:  # noqa: BLE001 - a key Dagster does not know: checked as the run reported it
        return [first, last]


def materialize_random(run: Run) -> None:
    """One partition of a random target: a closed one, or with the DST fault one of the DST hours."""
    target = run.rng.choice(run.targets)
    slot = run.slots["closed"]
    if "dst" in run.faults and run.rng.random() < 0.4:
        slot = run.slots[run.rng.choice(["dst_fall", "dst_spring"])]
    key, ok = run.partition_key(target, slot)
    if ok:
        materialize(run, target, key, dst=slot.name.startswith("dst"))


def materialize_range(run: Run) -> None:
    """A range run (Dagster's range tags) of up to :data:`RANGE_PARTITIONS` closed partitions of a random target."""
    from dagster import TimeWindowPartitionsDefinition

    target = run.rng.choice(run.targets)
    pdef = run.partitions_def(target)
    if not isinstance(pdef, TimeWindowPartitionsDefinition):
        return
    slot = run.slots["closed"]
    first = pdef.get_partition_key_for_timestamp(slot.start + run.rng.randrange(slot.span))
    keys = pdef.get_partition_keys()
    at = keys.index(first) if first in keys else len(keys) - 1
    last = keys[min(at + run.rng.randrange(1, RANGE_PARTITIONS), len(keys) - 1)]
    tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
    materialize(run, target, None, tags=tags)


def sensors_round(run: Run, actor: str = "sensor", until: float | None = None) -> int:
    """One tick of the parity sweep and one of recovery, each followed by the runs it requested: what a deployment
    does every minute; none is started after ``until`` (monotonic; default: the run's deadline), and those left are
    noted. Returns the number of runs requested."""
    import time

    until = run.deadline if until is None else until
    requested = 0
    for name in ("chmv_parity_sweep", "chmv_recovery"):
        if time.monotonic() >= until:
            break
        requests = tick(run, name, actor)
        requested += len(requests)
        for n, request in enumerate(requests):
            if time.monotonic() >= until:
                run.notes.append(f"{name}: {len(requests) - n} requested run(s) not started (the run's time is up)")
                break
            execute_request(run, request, actor, sensor=name)
    return requested


def tick(run: Run, name: str, actor: str) -> list[Any]:
    """One evaluation of chmv's sensor ``name`` (recorded), its cursor kept between ticks; the runs it requests."""
    from dagster import build_sensor_context

    repo = run.defs().get_repository_def()
    op = run.history.begin("sensor_tick", actor, [name])
    try:
        sensor = repo.get_sensor_def(name)
        context = build_sensor_context(
            instance=run.dagster_instance(),
            cursor=run.cursors.get(name),
            resources={"clickhouse": run.resource},
            repository_def=repo,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = sensor.evaluate_tick(context)
    except Exception as err:  # noqa: BLE001 - recorded
        run.history.end(op, FAILED, error=first_line(err))
        return []
    run.cursors[name] = data.cursor
    requests = list(data.run_requests or [])
    run.history.end(op, OK, requests=len(requests), skip=str(data.skip_message or "")[:200])
    return requests


def execute_request(run: Run, request: Any, actor: str, *, sensor: str) -> None:
    """A run a sensor requested: a target's partition through :func:`materialize`, else the sensor's job (its
    request names none: the sensor's own) in-process."""
    from chmv_assets.orchestration.translator import ChmvTranslator

    tags = dict(request.tags)
    if request.asset_selection:
        key = request.asset_selection[0]
        target = next((t for t in run.targets if ChmvTranslator().get_asset_key(t) == key), None)
        if target is not None:
            materialize(run, target, request.partition_key, tags=tags, actor=actor)
        return
    repo = run.defs().get_repository_def()
    job_name = request.job_name or repo.get_sensor_def(sensor).job_name
    op = run.history.begin("run", actor, [job_name], tags=tags)
    try:
        job = repo.get_job(job_name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = job.execute_in_process(
                run_config=request.run_config, instance=run.dagster_instance(), tags=tags, raise_on_error=False
            )
        if result.success:
            run.history.end(op, OK)
        else:
            run.history.end(op, FAILED, error=_step_error(result))
    except Exception as err:  # noqa: BLE001 - recorded
        run.history.end(op, FAILED, error=first_line(err))


def _step_error(result: Any) -> str:
    """The first failed step's error of an in-process run, as chmv raised it."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            error = event.step_failure_data.error
            while error.cause is not None:
                error = error.cause
            return f"{error.cls_name}: {error.message.strip().splitlines()[0][:400]}"
    return "the run failed"


def maintain(run: Run) -> None:
    """The maintenance sensor's tick (the scratch chmv.toml opens its window all day) and a ``chmv_maintain`` run:
    merges of the closed partitions of collapsing targets, which must leave every partition as it was."""
    requests = tick(run, "chmv_maintenance", "maintenance")
    for request in requests or [None]:
        if request is None:  # nothing to merge yet: the job runs anyway, as one started by hand
            from dagster import RunRequest

            request = RunRequest(job_name="chmv_maintain")
        execute_request(run, request, "maintenance", sensor="chmv_maintenance")


# -- chmv apply of a derived second DDL version ------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z_]+")
_CLAUSES = ("GROUP", "HAVING", "ORDER", "LIMIT", "SETTINGS", "WINDOW", "QUALIFY", "FORMAT")


def _top_level_words(sql: str) -> list[tuple[str, int]]:
    """The words of ``sql`` outside parentheses, strings, quoted names and comments, with their offsets."""
    words, depth, i = [], 0, 0
    while i < len(sql):
        ch = sql[i]
        if ch in "'`\"":
            j = i + 1
            while j < len(sql) and sql[j] != ch:
                j += 2 if sql[j] == "\\" else 1
            i = j + 1
            continue
        if sql.startswith("--", i):
            i = sql.find("\n", i) if "\n" in sql[i:] else len(sql)
            continue
        if sql.startswith("/*", i):
            i = sql.find("*/", i) + 2 if "*/" in sql[i:] else len(sql)
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and (ch.isalpha() or ch == "_") and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            m = _WORD.match(sql, i)
            assert m is not None
            words.append((m.group(0).upper(), i))
            i = m.end()
            continue
        i += 1
    return words


def derived_select(select: str) -> str | None:
    """The same SELECT with an always-true conjunct: ``WHERE (<cond>) AND 1 = 1``, or ``WHERE 1 = 1`` after its FROM
    clause; None for a SELECT this cannot rewrite safely (a UNION, no FROM, a trailing clause it does not know)."""
    words = _top_level_words(select)
    names = [w for w, _ in words]
    if "UNION" in names or "FROM" not in names or names.count("SELECT") != 1 or "WITH" in names[:1]:
        return None
    body = select.rstrip().rstrip(";").rstrip()
    after_where = [(w, at) for w, at in words if w in _CLAUSES and at < len(body)]
    if "WHERE" in names:
        at = next(a for w, a in words if w == "WHERE")
        end = min([a for w, a in after_where if a > at] or [len(body)])
        cond = body[at + len("WHERE") : end].strip()
        return f"{body[:at]}WHERE ({cond}) AND 1 = 1{' ' + body[end:] if end < len(body) else ''}"
    start = next(a for w, a in words if w == "FROM")
    end = min([a for w, a in after_where if a > start] or [len(body)])
    return f"{body[:end].rstrip()} WHERE 1 = 1{' ' + body[end:] if end < len(body) else ''}"


def derive_version(run: Run, into: Path) -> tuple[Path, ObjectRef] | None:
    """A second version of the scratch DDL in ``into``: one MV's SELECT rewritten by :func:`derived_select` (same
    rows, another text: ``chmv plan`` sees a changed SELECT and re-derives its target's history). Returns the
    directory and the MV; None when no MV's SELECT can be rewritten."""
    from chmv_assets.certify.expected import verifiable

    project = run.loaded.project
    views = sorted(project.views.values(), key=lambda v: v.ref.fqn)
    run.rng.shuffle(views)
    # an MV whose re-derivation no writer outside the DDL reaches first: chmv plan refuses the others (rightly), and
    # the apply's re-derivation would go unexercised
    foreign = {t.fqn for t in run.foreign}
    views.sort(key=lambda v: bool(foreign & {v.writes_to.fqn, *(t.fqn for t in run.downstream(v.writes_to))}))
    files = sorted(run.ddl.glob("*.sql"))
    for view in views:
        if view.refreshable or not verifiable(run.loaded, view.writes_to):
            continue
        new = derived_select(view.select_sql)
        if new is None:
            continue
        for path in files:
            text = path.read_text(encoding="utf-8")
            if text.count(view.select_sql) == 1:
                shutil.rmtree(into, ignore_errors=True)
                shutil.copytree(run.ddl, into)
                (into / path.name).write_text(text.replace(view.select_sql, new), encoding="utf-8")
                return into, view.ref
    return None


def apply_changed_select(run: Run) -> None:
    """``chmv apply`` (plan, preflight, apply, as the CLI calls them) of a derived second DDL version, mid-run: the MV
    gets the new SELECT and its target's history is re-derived through it. From then on the run's project (and
    expected rows) is the new version."""
    from chmv_assets.ddl.loader import load
    from chmv_assets.engine.lifecycle.apply import apply_plan
    from chmv_assets.engine.lifecycle.plan import Action
    from chmv_assets.engine.lifecycle.planner import plan_lifecycle
    from chmv_assets.engine.lifecycle.preflight import preflight

    derived = derive_version(run, run.root / "ddl_v2")
    if derived is None:
        run.notes.append("apply: no MV SELECT certify can rewrite; chmv apply not exercised")
        return
    ddl, view = derived
    loaded = load(ddl, twin=True)
    target = loaded.project.views[view].writes_to
    if "kill" in run.faults:
        interrupted_apply(run, loaded, target, view)
    op = run.history.begin("apply", "chmv", [target.fqn, view.fqn], ddl=str(ddl))
    try:
        with run.resource.get_client() as client:
            plan = plan_lifecycle(client, loaded, allow_drop=False, root=None)
            preflight(client, loaded, plan)
        op.detail["plan"] = [f"{c.action.value} {c.name}" for c in plan.changes][:10]
        wanted = (Action.MODIFY_QUERY, Action.RECREATE_VIEW, Action.REDERIVE)  # REDERIVE: an interrupted apply's
        if not plan.changes and run.history.ops and _applied_before(run):
            # the interrupted apply was not stopped (its re-derivation had no partition to stop at): it applied
            # the derived version whole, which is live now
            run.history.end(op, OK, said="the derived version was live already (applied by the apply before)")
            run.redeployed(loaded)
            run.ddl = ddl
            return
        if not any(c.action in wanted for c in plan.changes):
            run.history.end(op, FAILED, error="chmv plan saw no changed SELECT in the derived version")
            run.notes.append(f"{op.id}: chmv plan did not see the derived SELECT of {view.fqn} as a change")
            return
        report = apply_plan(run.resource, loaded, plan, root=None)
        op.detail["said"] = report.describe()[:300]
    except Exception as err:  # noqa: BLE001 - recorded; the live SELECT may be the new one either way
        run.history.end(op, FAILED, error=first_line(err))
        if _unchanged(run):
            run.notes.append(f"{op.id}: refused with the server as the first version has it; that version stays")
            return
        _converged(run, loaded, op, ok=False)
    else:
        run.history.end(op, OK)
        _converged(run, loaded, op, ok=True)
    run.redeployed(loaded)  # the new SELECT is what the DDL says now (an interrupted apply is judged against it)
    run.ddl = ddl


def _converged(run: Run, loaded: Any, op: Op, *, ok: bool) -> None:
    """After an apply that reported success, ``chmv plan`` of the same DDL must say no changes: a change it plans
    again is one the apply did not make (or made in a form chmv then reads as another: every rebuild of the target is
    then refused as "apply pending"). After one that failed past its cut-in (a re-derivation left pending), the plan
    must not plan the new SELECT again: the server runs it."""
    from chmv_assets.certify import checker
    from chmv_assets.engine.lifecycle.plan import Action
    from chmv_assets.engine.lifecycle.planner import plan_lifecycle

    with run.resource.get_client() as client:
        plan = plan_lifecycle(client, loaded, allow_drop=False, root=None)
    changes = list(plan.changes)
    if not ok:
        cut_in = any(c.unfinished for c in changes)
        changes = [c for c in changes if cut_in and c.action in (Action.MODIFY_QUERY, Action.RECREATE_VIEW)]
    for change in changes:
        run.found.append(
            checker.Anomaly(
                "d",
                change.name,
                "(all)",
                f"after {op.id} (chmv apply) {'reported success' if ok else 'failed past its cut-in'}, chmv plan "
                f"still plans {change.action.value} "
                f"{change.name}: {'; '.join(change.reasons)[:200]}",
                "an apply that does not converge",
                [op.id],
            )
        )


def _applied_before(run: Run) -> bool:
    """Whether the run's interrupted apply ended on its own (exit 0: it applied the derived version)."""
    killed = [o for o in run.history.ops if o.kind == "apply_killed"]
    return bool(killed) and killed[-1].status == OK


def _unchanged(run: Run) -> bool:
    """Whether the server is still as the run's deployed version defines it (``chmv plan`` of it: no change): a
    refused apply that changed nothing leaves that version live, and the run goes on with it."""
    from chmv_assets.engine.lifecycle.planner import plan_lifecycle

    try:
        with run.resource.get_client() as client:
            return not plan_lifecycle(client, run.loaded, allow_drop=False, root=None).changes
    except Exception as err:  # noqa: BLE001 - not known: the new version is assumed live (judged against it)
        run.notes.append(f"chmv plan of the first version after a failed apply: {first_line(err)}")
        return False


def interrupted_apply(run: Run, loaded: Any, target: ObjectRef, view: ObjectRef) -> None:
    """``chmv apply`` of the derived version in a child process killed (SIGKILL, ``$CHMV_CRASH_AT``) during its
    re-derivation of ``target``'s history, the engine handed over to it as the ``kill`` fault does; then ``chmv
    plan``: the interrupted change must still be pending (an anomaly when it says "no changes": class 8). The run's
    own apply comes next and must finish it."""
    from chmv_assets import settings
    from chmv_assets.certify import checker
    from chmv_assets.engine.lifecycle.planner import plan_lifecycle

    args = [sys.executable, "-m", "chmv_assets.cli", "apply", "--ddl-dir", str(loaded.config.ddl_dir)]
    args += ["--dsn", f"chdb://{run.path}"]
    env = {**os.environ, settings.CRASH_AT.name: APPLY_KILL_POINT}
    with run.quiet():
        run.release()
        op = run.history.begin("apply_killed", "chmv", [target.fqn, view.fqn], point=APPLY_KILL_POINT)
        try:
            done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=KILL_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            run.history.end(op, UNCERTAIN, error=f"no end within {KILL_TIMEOUT_SECONDS} s (killed)")
            return
        finally:
            run.hold()
    killed = done.returncode == -9
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] if done.returncode else []
    status = UNCERTAIN if killed else (OK if done.returncode == 0 else FAILED)
    run.history.end(op, status, returncode=done.returncode, said=" ".join(tail)[:300])
    if not killed:
        run.notes.append(f"{op.id}: chmv apply was not stopped at {APPLY_KILL_POINT} (exit {done.returncode})")
        return
    with run.resource.get_client() as client:
        plan = plan_lifecycle(client, loaded, allow_drop=False, root=None)
    if not plan.changes:
        run.found.append(
            checker.Anomaly(
                "d",
                target.fqn,
                "(all)",
                f"after {op.id} (chmv apply of a changed SELECT of {view.fqn}, killed at {APPLY_KILL_POINT}), "
                "chmv plan says no changes",
                "class 8: an interrupted apply hidden by chmv plan",
                [op.id],
            )
        )
