"""Health of the tables behind each asset, as seeds 000, 003 and 004 ask it to be watched: a client in, plain results out.

Per target (its table, the MVs of the DDL directory that write it and the source tables they read that are no target),
in five statements for every target at once (``chmv_assets.sql.health_sql``). A source is checked through the targets
that read it: a source's finding is a finding of every target it feeds, and one check per target keeps the code
location fast to load (docs/pacing-and-health.md, "Sources through their targets").

- **mutations** (``system.mutations``): one that failed (``latest_fail_reason``: it will retry forever and hold the
  parts it needs) is an error, one not done after ``[health] mutation_stuck_minutes`` a warning;
- **MVs detached or missing** (``system.tables``, ``system.detached_tables``): an error; inserts into the source no
  longer reach the target. ``chmv_recovery`` restores them through a ``chmv_apply`` run (tier 2 of seed 000), then
  the partitions that lost rows are rebuilt once parity sees them;
- **read-only tables**: a ``Replicated*`` replica in read-only mode (``system.replicas.is_readonly``: Keeper lost,
  metadata broken) or a table whose every disk is read-only; an error (inserts into it fail);
- **replication** of ``Replicated*`` tables (``system.replicas``, ``system.replication_queue``): queue size and the age
  of its oldest entry, the replica's lag (``absolute_delay``), inactive replicas, entries failing. Server only: the
  embedded engine runs ``Replicated*`` tables as their local twin, without Keeper, and says so instead.

Part counts and merges near the limits are the ``chmv_part_count`` check's (:mod:`.part_counts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.config import HealthConfig
from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.engine.pacing.pressure import embedded
from chmv_assets.sql.health_sql import bind, mutations_sql, readonly_sql, replication_sql, views_state_sql

#: What the embedded engine says instead of replication figures.
EMBEDDED_REPLICATION = (
    "replication: not checked on the embedded engine (Replicated* tables run as their local twin, without Keeper); "
    "on a server system.replicas and system.replication_queue are read"
)


@dataclass(frozen=True)
class Subject:
    """What one target's health check looks at.

    Attributes:
        asset: The target the check belongs to.
        tables: Its table (the figures are this table's).
        views: The MVs of the DDL directory that write it.
        sources: The source tables its MVs read that are no target (a target has a check of its own): their
            findings are the check's too, their figures are not.
    """

    asset: ObjectRef
    tables: tuple[ObjectRef, ...]
    views: tuple[ObjectRef, ...] = ()
    sources: tuple[ObjectRef, ...] = ()

    @property
    def checked(self) -> tuple[ObjectRef, ...]:
        """Every object the check looks at: its tables, its MVs, its sources."""
        return (*self.tables, *self.views, *self.sources)


@dataclass(frozen=True)
class Finding:
    """One thing wrong, with what to do about it."""

    kind: str  # mutation_failed, mutation_stuck, view_detached, view_missing, read_only, replication_*
    severity: str  # warning | error
    subject: str  # db.table
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.message} (fix: {self.fix})"


@dataclass(frozen=True)
class Health:
    """The verdict of one asset: findings, the figures to plot, and what could not be checked here."""

    subject: Subject
    findings: tuple[Finding, ...] = ()
    figures: Mapping[str, float] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()

    @property
    def severity(self) -> str:
        """``error`` if any finding is, else ``warning`` if there is one, else ``ok``."""
        if any(f.severity == "error" for f in self.findings):
            return "error"
        return "warning" if self.findings else "ok"

    def signature(self) -> str:
        """What changes when the verdict does (the sensor evaluates the check again then)."""
        return self.severity + "|" + ",".join(sorted(f"{f.kind}:{f.subject}" for f in self.findings))

    def describe(self) -> str:
        if not self.findings:
            return "healthy: no failed or stuck mutation, every MV attached, writable" + (
                ", replication within limits" if "replication_queue" in self.figures else ""
            )
        return "; ".join(str(f) for f in self.findings)


def subjects(project: Project) -> dict[ObjectRef, Subject]:
    """Every target (its table, the MVs writing it and the source tables they read that are no target), by target."""
    targets = set(project.targets)
    found: dict[ObjectRef, Subject] = {}
    for target in project.targets:
        views = project.views_into(target)
        sources = dict.fromkeys(
            source
            for view in views
            for source in view.source_refs
            if source not in targets and (source in project.tables or source in project.external)
        )
        found[target] = Subject(target, (target,), tuple(v.ref for v in views), tuple(sources))
    return found


def assess(
    client: Client, project: Project, wanted: Iterable[Subject], rules: HealthConfig | None = None
) -> dict[ObjectRef, Health]:
    """The health of every subject of ``wanted``, in five statements (four on the embedded engine)."""
    rules = rules or HealthConfig()
    wanted = list(wanted)
    tables = sorted({t for s in wanted for t in (*s.tables, *s.sources)}, key=lambda r: r.fqn)
    views = sorted({v for s in wanted for v in s.views}, key=lambda r: r.fqn)
    if not wanted:
        return {}
    findings: dict[ObjectRef, list[Finding]] = {t: [] for t in [*tables, *views]}
    figures: dict[ObjectRef, dict[str, float]] = {t: {} for t in tables}
    _mutations(client, tables, rules, findings, figures)
    _views(client, project, views, findings)
    _read_only(client, tables, findings)
    replicated = not embedded(client)
    if replicated:
        _replication(client, tables, rules, findings, figures)
    result = {}
    for subject in wanted:
        found = [f for ref in subject.checked for f in findings.get(ref, [])]
        numbers: dict[str, float] = {}
        for table in subject.tables:
            for name, value in figures[table].items():
                numbers[name] = numbers.get(name, 0) + value
        numbers["views_detached"] = sum(f.kind == "view_detached" for f in found)
        numbers["views_missing"] = sum(f.kind == "view_missing" for f in found)
        numbers["read_only_tables"] = sum(f.kind == "read_only" for f in found)
        skipped = () if replicated else (EMBEDDED_REPLICATION,)
        result[subject.asset] = Health(subject, tuple(found), numbers, skipped)
    return result


def _mutations(client: Client, tables: list[ObjectRef], rules: HealthConfig, findings: dict, figures: dict) -> None:
    for table in tables:
        figures[table].update({"mutations_pending": 0, "mutations_failed": 0, "oldest_mutation_minutes": 0})
    if not tables:
        return
    rows = client.query(mutations_sql(), parameters=bind(tables)).result_rows
    for database, name, mutation_id, command, age, parts_to_do, killed, reason, part in rows:
        ref = ObjectRef(database=str(database), name=str(name))
        if ref not in figures or killed:
            continue
        numbers = figures[ref]
        minutes = int(age) / 60
        numbers["mutations_pending"] += 1
        numbers["oldest_mutation_minutes"] = max(numbers["oldest_mutation_minutes"], round(minutes, 1))
        what = f"mutation {mutation_id} `{_short(str(command))}`"
        kill = f"KILL MUTATION WHERE database = '{database}' AND table = '{name}' AND mutation_id = '{mutation_id}'"
        if reason:
            numbers["mutations_failed"] += 1
            findings[ref].append(
                Finding(
                    "mutation_failed",
                    "error",
                    ref.fqn,
                    f"{what} cannot finish: {_short(str(reason), 400)} (part {part}; {parts_to_do} part(s) to do, "
                    f"{minutes:.0f} min old); the server retries it forever and the parts it needs stay as they are",
                    f"fix what it trips on (its expressions, the data), then `{kill}` and run a corrected one",
                )
            )
        elif minutes >= rules.mutation_stuck_minutes:
            findings[ref].append(
                Finding(
                    "mutation_stuck",
                    "warning",
                    ref.fqn,
                    f"{what} is not done after {minutes:.0f} min ({parts_to_do} part(s) to do)",
                    "look at system.merges (a busy merge pool?) and system.mutations.parts_postpone_reasons; if it is not "
                    f"needed, `{kill}`",
                )
            )


def view_states(client: Client, views: Iterable[ObjectRef]) -> dict[ObjectRef, str]:
    """Per MV (or table), ``live``, ``detached`` or ``missing`` on the server (one statement)."""
    views = list(views)
    if not views:
        return {}
    state: dict[ObjectRef, str] = {}
    for database, name, where in client.query(views_state_sql(), parameters=bind(views)).result_rows:
        ref = ObjectRef(database=str(database), name=str(name))
        if state.get(ref) != "live":
            state[ref] = str(where)
    return {ref: state.get(ref, "missing") for ref in views}


def views_off(client: Client, project: Project) -> dict[ObjectRef, list[ObjectRef]]:
    """Per target, what of it is detached or missing on the server: the MVs of the DDL directory writing it, and the
    target table itself where the DDL defines it (a dropped TO table fails every insert into its MVs' sources)."""
    tables = [t for t in project.targets if t in project.tables and t not in project.views]
    states = view_states(client, [*project.views, *tables])
    found: dict[ObjectRef, list[ObjectRef]] = {}
    for ref, state in states.items():
        if state != "live":
            found.setdefault(project.views[ref].writes_to if ref in project.views else ref, []).append(ref)
    return found


def _views(client: Client, project: Project, views: list[ObjectRef], findings: dict) -> None:
    state = view_states(client, views)
    for ref in views:
        view = project.views.get(ref)
        feeds = (
            f"inserts into {view.trigger.fqn} no longer reach {view.writes_to.fqn}"
            if view and view.trigger
            else (f"{view.writes_to.fqn if view else ref.fqn} is no longer written")
        )
        if state.get(ref) == "detached":
            findings[ref].append(
                Finding(
                    "view_detached",
                    "error",
                    ref.fqn,
                    f"the MV is detached: {feeds}",
                    "chmv_recovery re-attaches it through a chmv_apply run (or run the chmv_apply job with objects = "
                    f'["{ref.fqn}"], or `chmv apply`); the partitions that missed rows meanwhile are rebuilt once parity '
                    "sees them",
                )
            )
        elif state.get(ref) == "missing":
            findings[ref].append(
                Finding(
                    "view_missing",
                    "error",
                    ref.fqn,
                    f"the MV does not exist on the server: {feeds}",
                    "chmv_recovery recreates it through a chmv_apply run, which re-derives the target's history (or run "
                    "`chmv apply`); if it was dropped on purpose, remove it from the DDL directory",
                )
            )


def _read_only(client: Client, tables: list[ObjectRef], findings: dict) -> None:
    if not tables:
        return
    for database, name, why in client.query(readonly_sql(), parameters=bind(tables)).result_rows:
        ref = ObjectRef(database=str(database), name=str(name))
        if ref not in findings:
            continue
        fix = (
            "restore the replica's Keeper connection (system.zookeeper_connection), then SYSTEM RESTART REPLICA "
            f"{ref.fqn}; chmv's inserts and the MVs writing it fail meanwhile"
            if "replica" in str(why)
            else "move the table to a writable storage policy; chmv's inserts and the MVs writing it fail meanwhile"
        )
        findings[ref].append(Finding("read_only", "error", ref.fqn, f"the table is read-only: {why}", fix))


def _replication(client: Client, tables: list[ObjectRef], rules: HealthConfig, findings: dict, figures: dict) -> None:
    if not tables:
        return
    for row in client.query(replication_sql(), parameters=bind(tables)).result_rows:
        database, name, queue, inserts, merges, oldest, delay, active, total, failing, tries, exception = row
        ref = ObjectRef(database=str(database), name=str(name))
        if ref not in figures:
            continue
        figures[ref].update(
            {
                "replication_queue": int(queue),
                "replication_oldest_seconds": int(oldest),
                "replica_delay_seconds": int(delay),
                "replicas_active": int(active),
                "replicas_total": int(total),
                "replication_entries_failing": int(failing),
            }
        )
        findings[ref] += replication_findings(
            ref,
            rules,
            int(queue),
            int(inserts),
            int(merges),
            int(oldest),
            int(delay),
            int(active),
            int(total),
            int(failing),
            int(tries),
            str(exception or ""),
        )


def replication_findings(
    ref: ObjectRef,
    rules: HealthConfig,
    queue: int,
    inserts: int,
    merges: int,
    oldest: int,
    delay: int,
    active: int,
    total: int,
    failing: int,
    tries: int,
    exception: str,
) -> list[Finding]:
    """The findings of one replica's figures (``system.replicas`` joined with ``system.replication_queue``)."""
    found: list[Finding] = []
    age_warn = rules.replication_age_minutes * 60
    if queue >= rules.replication_queue_warn or (queue and oldest >= age_warn):
        severe = queue >= rules.replication_queue_error or oldest >= 10 * age_warn
        found.append(
            Finding(
                "replication_queue",
                "error" if severe else "warning",
                ref.fqn,
                f"replication queue holds {queue} entries ({inserts} fetches, {merges} merges), the oldest {oldest // 60} "
                f"min old"
                + (f"; {failing} failing, tried up to {tries} times: {_short(exception, 300)}" if failing else ""),
                "look at system.replication_queue (postpone_reason, last_exception): a replica down, Keeper slow, disks "
                "full; chmv's rebuilds and inserts on this table wait meanwhile",
            )
        )
    if delay >= rules.replica_delay_warn_seconds:
        found.append(
            Finding(
                "replica_delay",
                "error" if delay >= rules.replica_delay_error_seconds else "warning",
                ref.fqn,
                f"this replica lags {delay} s behind (absolute_delay): reads here miss recent rows and parity may fail",
                "wait for it to catch up (system.replication_queue), or point chmv at a replica that is current",
            )
        )
    if total and active < total:
        found.append(
            Finding(
                "replicas_inactive",
                "warning",
                ref.fqn,
                f"{active} of {total} replicas are active",
                "bring the other replicas back (their Keeper sessions, their servers); until then inserts with "
                "insert_quorum may fail",
            )
        )
    return found


def _short(text: str, limit: int = 120) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
