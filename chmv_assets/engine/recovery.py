"""Auto-recovery: the tiered protocol of seed 000, with attempts, cooldown and a retry limit.

Tier 1 (the cheapest fix, done by the sensor itself): an MV that is detached is re-attached, one that
is missing is recreated from the repo DDL, one whose SELECT changed gets ``MODIFY QUERY`` back to the
repo SELECT. Tier 2: the affected partitions are rebuilt through the normal materialization (a run
request per partition). The attempt ledger lives in the sensor cursor, so every decision is visible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import MaterializedView, ObjectRef, Project
from chmv_assets.engine.drift import drift_report
from chmv_assets.sql.cluster import attach_view_sql, drop_view_sql, modify_query_sql


@dataclass(frozen=True)
class Decision:
    """What the recovery sensor does about one failing partition.

    Attributes:
        key: ``db.table|partition`` (empty partition: the whole table).
        action: ``rebuild`` (request a run), ``cooldown`` (wait), ``exhausted`` (limit reached now: alert),
            ``gave_up`` (limit reached earlier: nothing).
        attempt: The attempt number a rebuild would be.
        reason: ``parity_failed`` or ``stale``.
    """

    key: str
    action: str
    attempt: int
    reason: str


def entry_key(target: ObjectRef, partition: str | None) -> str:
    return f"{target.fqn}|{partition or ''}"


def split_key(key: str) -> tuple[ObjectRef, str | None]:
    fqn, _, partition = key.partition("|")
    database, _, name = fqn.partition(".")
    return ObjectRef(database=database, name=name), partition or None


def plan(ledger: dict[str, dict], failing: dict[str, str], resolved: set[str], now: float, *,
         max_attempts: int, cooldown_seconds: float) -> list[Decision]:  # fmt: skip
    """Update ``ledger`` (in place) with this tick's failures and passes, and decide per failing partition.

    Args:
        ledger: ``key → {attempts, last, reason, exhausted}`` from the cursor.
        failing: Partitions seen failing this tick, with the reason.
        resolved: Partitions seen passing this tick (their entries are dropped).
        now: Epoch seconds.
        max_attempts: Rebuilds per partition before giving up.
        cooldown_seconds: Least time between two rebuilds of one partition.
    """
    for key in resolved:
        if key not in failing:
            ledger.pop(key, None)
    for key, reason in failing.items():
        ledger.setdefault(key, {"attempts": 0, "last": 0.0, "reason": reason, "exhausted": False})["reason"] = reason
    decisions = []
    for key, entry in sorted(ledger.items()):
        attempts = int(entry["attempts"])
        if entry.get("exhausted"):
            decisions.append(Decision(key, "gave_up", attempts, entry["reason"]))
        elif attempts >= max_attempts:
            entry["exhausted"] = True
            decisions.append(Decision(key, "exhausted", attempts, entry["reason"]))
        elif attempts and now - float(entry["last"]) < cooldown_seconds:
            decisions.append(Decision(key, "cooldown", attempts + 1, entry["reason"]))
        else:
            entry["attempts"] = attempts + 1
            entry["last"] = now
            decisions.append(Decision(key, "rebuild", attempts + 1, entry["reason"]))
    return decisions


@dataclass(frozen=True)
class Repair:
    """The outcome of tier 1 for one target."""

    actions: tuple[str, ...]
    blockers: tuple[str, ...]


def tier1_repair(client: Client, project: Project, target: ObjectRef, log: Callable[[str], None] | None = None) -> Repair:
    """Fix the MVs writing ``target`` in place: re-attach, recreate from the DDL, or MODIFY QUERY.

    Returns:
        The statements' descriptions, and what cannot be fixed here (a missing target or source table).
    """
    say = log or (lambda _m: None)
    items = drift_report(client, project, [target])[target]
    views = {v.ref.fqn: v for v in project.views_into(target)}
    detached = set()
    if any(i.kind == "missing_object" and i.object in views for i in items):
        detached = {
            f"{d}.{n}"
            for d, n in client.query(
                "SELECT database, table FROM system.detached_tables WHERE database IN {dbs:Array(String)}",
                parameters={"dbs": sorted({v.ref.database for v in views.values()})},
            ).result_rows
        }
    actions: list[str] = []
    blockers: list[str] = []
    for item in items:
        view = views.get(item.object)
        if view is None:
            if item.kind == "missing_object":
                blockers.append(f"{item.object} does not exist on the server: deploy it with `chmv apply`")
            continue
        repair = repair_statements(view, item.kind, detached=item.object in detached)
        if repair is None:
            continue
        statements, action = repair
        for sql in statements:
            client.command(sql)
        actions.append(action)
    for action in actions:
        say(action)
    return Repair(tuple(actions), tuple(blockers))


def repair_statements(view: MaterializedView, kind: str, *, detached: bool = False) -> tuple[list[str], str] | None:
    """The tier-1 fix of one drift item of an MV, and what it does; None when tier 1 has none.

    Each statement carries the MV's ``ON CLUSTER`` (the drift was read on one host; ``ATTACH … IF NOT EXISTS`` and
    the repo's ``CREATE … IF NOT EXISTS`` leave the hosts where the MV is fine alone).

    Args:
        view: The MV, from the DDL directory.
        kind: The drift item's kind (``missing_object``, ``select_changed``, ``target_changed``).
        detached: The MV is in ``system.detached_tables`` (re-attached rather than created).
    """
    if kind == "missing_object" and detached:
        return [attach_view_sql(view.ref, view.on_cluster)], f"re-attached detached MV {view.ref.fqn}"
    if kind == "missing_object":
        return [view.statement], f"recreated missing MV {view.ref.fqn} from {view.location}"
    if kind == "select_changed" and view.target is not None and not view.refreshable:
        return ([modify_query_sql(view.ref, view.select_sql, view.on_cluster)],
                f"MODIFY QUERY on {view.ref.fqn}: restored the SELECT of {view.location}")  # fmt: skip
    if kind in ("select_changed", "target_changed"):
        return ([drop_view_sql(view.ref, view.on_cluster), view.statement],
                f"recreated {view.ref.fqn} from {view.location} ({kind})")  # fmt: skip
    return None
