"""The end of a run: quiescence (writers stopped, faults healed, recovery's course for a bounded number of ticks),
then the properties checked on what chmv left (a), (b), (c), and (e) from the history and from the leases."""

from __future__ import annotations

import time
from typing import Any

from chmv_assets.certify import checker
from chmv_assets.certify.context import Run
from chmv_assets.certify.expected import SCRATCH_DB, build_expected, fingerprints, physical, verifiable
from chmv_assets.certify.faults import Fault
from chmv_assets.certify.history import first_line
from chmv_assets.certify.operations import sensors_round
from chmv_assets.certify.workload import WriterPool
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.quoting import qualified, quote

#: Every row written into chmv_meta.leases (claims, renewals, releases), kept with the time it landed: the leases
#: table itself keeps only the newest row of a generation once merged.
LEASE_LOG = ObjectRef(database=SCRATCH_DB, name="lease_log")
#: Slack of the comparison of two generations' intervals (the clock of one engine: milliseconds).
LEASE_SLACK_SECONDS = 0.05


def install_lease_log(client: Any) -> None:
    """``chmv_meta.leases`` (created as chmv creates it) copied row by row into :data:`LEASE_LOG` by an MV."""
    from chmv_assets.engine.rebuild.leases import _ensure_tables
    from chmv_assets.sql.meta import LEASES

    _ensure_tables(client)
    client.command(
        f"CREATE TABLE IF NOT EXISTS {qualified(LEASE_LOG)} (lease String, generation UInt64, run String, "
        "pid UInt32, expires_at DateTime64(3, 'UTC'), released UInt8, version UInt64, "
        "logged_at DateTime64(6, 'UTC')) ENGINE = MergeTree ORDER BY (lease, generation)"
    )
    mv = ObjectRef(database=SCRATCH_DB, name="lease_log_mv")
    client.command(
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {qualified(mv)} TO {qualified(LEASE_LOG)} AS SELECT lease, "
        "generation, run, pid, expires_at, released, version, now64(6) AS logged_at "
        f"FROM {qualified(LEASES)}"
    )


def lease_anomalies(client: Any) -> list[checker.Anomaly]:
    """(e) from the leases (:func:`lease_findings` over :data:`LEASE_LOG`)."""
    rows = client.query(
        f"SELECT lease, generation, run, released, version, toFloat64(logged_at) "
        f"FROM {qualified(LEASE_LOG)} ORDER BY lease, generation, logged_at"
    ).result_rows
    return lease_findings(rows)


def lease_findings(rows: list[tuple]) -> list[checker.Anomaly]:
    """(e) from the rows written into ``chmv_meta.leases`` ``(lease, generation, run, released, version, logged_at)``: a generation renewed or released by two runs (two holders at once), or a generation claimed before
    the previous one was released."""
    gens: dict[str, dict[int, dict[str, Any]]] = {}
    for lease, generation, run_token, released, version, logged in rows:
        g = gens.setdefault(lease, {}).setdefault(int(generation), {"claim": None, "holders": set(), "released": None})
        if int(version) == 0:  # a claim (renewals and releases carry their time as version)
            g["claim"] = float(logged) if g["claim"] is None else min(g["claim"], float(logged))
        else:
            g["holders"].add(run_token)
        if released:
            g["released"] = float(logged) if g["released"] is None else min(g["released"], float(logged))
    out: list[checker.Anomaly] = []
    for lease, by_gen in gens.items():
        where = lease.split(":", 1)[1] if ":" in lease else lease
        target, _, partition = where.rpartition(":")
        for generation, g in sorted(by_gen.items()):
            if len(g["holders"]) > 1:
                out.append(
                    checker.Anomaly(
                        "e",
                        target,
                        partition,
                        f"lease {lease} generation {generation} held by {len(g['holders'])} runs at once",
                        "two runs of one partition",
                    )
                )
            prev = by_gen.get(generation - 1)
            if prev is None or g["claim"] is None or prev["released"] is None:
                continue  # a generation never released ended at its expiry or its holder's death: not known here
            if g["claim"] < prev["released"] - LEASE_SLACK_SECONDS:
                out.append(
                    checker.Anomaly(
                        "e",
                        target,
                        partition,
                        f"lease {lease}: generation {generation} claimed {prev['released'] - g['claim']:.3f}s before "
                        f"generation {generation - 1} was released",
                        "two runs of one partition",
                    )
                )
    return out


def quiesce(run: Run, pool: WriterPool, faults: list[Fault], heal_until: float) -> None:
    """Writers stopped, every fault healed, then recovery's ticks (each with the sweep) until nothing is requested,
    at most four rounds and not past ``heal_until``."""
    pool.stop()
    with run.history.op("quiesce", "certify", [s.ref.fqn for s in run.specs]), run.resource.get_client() as client:
        for fault in faults:
            fault.heal(run, client)
        await_mutations(run, client, until=heal_until)
    rounds = 0
    while rounds < 4 and time.monotonic() < heal_until:
        rounds += 1
        if sensors_round(run, "recovery", until=heal_until) == 0 and rounds > 1:
            break


#: Seconds between two looks at the mutations still running at quiescence.
MUTATION_POLL_SECONDS = 0.2


def await_mutations(run: Run, client: Any, *, until: float) -> None:
    """Wait until every mutation of the run's tables is done (not past ``until``): a delete fault's mutation cannot
    run while merges are stopped, so it may still be pending when they start again at quiescence, while its rows are
    already in the graveyard (counted twice until it runs). One still running at ``until`` is noted."""
    sql = (
        "SELECT database, table, mutation_id, latest_fail_reason FROM system.mutations WHERE NOT is_done "
        "AND database NOT IN ('system', {scratch:String})"
    )
    pending: list[tuple] = []
    while True:
        pending = client.query(sql, parameters={"scratch": SCRATCH_DB}).result_rows
        if not pending or time.monotonic() >= until:
            break
        time.sleep(MUTATION_POLL_SECONDS)
    for database, table, mutation, reason in pending:
        run.notes.append(
            f"{database}.{table}: mutation {mutation} not done at the checks"
            + (f" ({str(reason).splitlines()[0][:200]})" if reason else "")
            + ": its rows may be counted in the source and its graveyard"
        )


def check(run: Run, pool: WriterPool) -> list[checker.Anomaly]:
    """The properties after quiescence (docs/certify.md): (a)/(c) per target partition, (b) per source, (e)."""
    anomalies: list[checker.Anomaly] = []
    loaded = run.loaded
    with run.resource.get_client() as client:
        expected = build_expected(client, loaded, run.graves, run.extras)
        partitions = 0
        for target in run.targets:
            if not verifiable(loaded, target):
                run.notes.append(
                    f"{target.fqn}: not verified (fed by a stream or Null table only; its levels below read it)"
                )
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
                prop = "c" if why.startswith(("class 5/6", "class 5 ")) else "a"
                ops = [o.id for o in checker.op_chain(run.history, target.fqn, run.upstream(target))]
                anomalies.append(checker.Anomaly(prop, target.fqn, pid, checker.describe_difference(a, e), why, ops))
        run.partitions = partitions
        anomalies += row_checks(run, pool, client)
        anomalies += lease_anomalies(client)
    anomalies += checker.overlapping_commits(run.history)
    return anomalies


def row_checks(run: Run, pool: WriterPool, client: Any) -> list[checker.Anomaly]:
    """(b): every acknowledged row in its source (or graveyard) exactly once, an uncertain or failed one at most once."""
    out: list[checker.Anomaly] = []
    status = {o.id: o.status for o in run.history.ops}
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
            (op_id, r.first_seq, r.rows, str(status.get(op_id)))
            for op_id, r in pool.records.items()
            if r.source == spec.ref
        ]
        out += checker.row_anomalies(counts, inserts, spec.ref.fqn)
    return out
