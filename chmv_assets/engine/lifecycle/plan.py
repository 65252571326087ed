"""The lifecycle plan: what ``chmv plan`` prints and ``chmv apply`` runs, as frozen printable data.

:mod:`chmv_assets.engine.lifecycle.planner` diffs the DDL directory against the live server and returns a
:class:`LifecyclePlan`: one :class:`Change` per object, ordered by topological layer (seed 003), each with
the SQL it runs on the live server and, for every target whose rows change, the partitions re-derived from
history (:class:`Rederive`, the rebuild planner's per-partition plan with a row estimate from ``system.parts``).

Actions, cheapest first:

- ``create_database`` / ``create``: the object is missing; its statement runs verbatim.
- ``alter``: in place, one ``ALTER TABLE``: ADD COLUMN, a MODIFY COLUMN that keeps every value, defaults,
  codecs and comments, MODIFY TTL, MODIFY SETTING, MODIFY COMMENT.
- ``modify_query``: an MV's SELECT changed and its target keeps its structure: ``ALTER TABLE mv MODIFY QUERY``
  (under the trigger's write gate), then the target's history is re-derived with the new SELECT.
- ``recreate_view``: an MV's TO target changed (or a refreshable MV's SELECT): dropped and created again
  under the write gate, never ``CREATE OR REPLACE`` (which loses the inserts that arrive meanwhile).
- ``new_version``: a change ClickHouse cannot make in place (ORDER BY, PARTITION BY, PRIMARY KEY, engine, a
  type change that does not keep every value): a new version of the target is built beside the old one,
  fed by its own copy of each MV, filled per partition from history, checked, and swapped in with
  ``EXCHANGE TABLES``.
- ``rederive``: the target's rows derive from a target that changed (a chain): its partitions are re-derived.
- ``drop``: an object or column that is not in the DDL any more; only with ``--allow-drop``.
- ``manual``: what chmv will not do (a source table's structure: its history cannot be re-derived).
- ``refused``: an MV of a trigger loop (it would fire on what it writes): never created nor changed; unlike a blocked
  change it holds nothing else back, ``chmv apply`` makes the rest of the plan.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.rebuild.planner import RebuildPlan

#: ``chmv plan`` exit codes, for pipelines to branch on.
EXIT_NO_CHANGES = 0
EXIT_ERROR = 1
EXIT_INVALID = 2
EXIT_CHANGES = 3

#: Prefix of every object chmv builds beside the live ones (new versions, old versions, shadows, scratch).
CHMV_PREFIX = "_chmv_"
#: The layer of access control (users, roles, grants…): after every object it may name.
ACCESS_LAYER = 1_000_000


class Action(StrEnum):
    """What a change does; see the module docstring."""

    CREATE_DATABASE = "create_database"
    CREATE = "create"
    ALTER = "alter"
    MODIFY_QUERY = "modify_query"
    RECREATE_VIEW = "recreate_view"
    NEW_VERSION = "new_version"
    REDERIVE = "rederive"
    DROP = "drop"
    MANUAL = "manual"
    REFUSED = "refused"

    @property
    def symbol(self) -> str:
        return {
            "create_database": "+",
            "create": "+",
            "alter": "~",
            "modify_query": "~",
            "recreate_view": "~",
            "new_version": "±",
            "rederive": "↻",
            "drop": "-",
            "manual": "!",
            "refused": "✗",
        }[self.value]


@dataclass(frozen=True)
class PartitionEstimate:
    """One partition of a re-derivation: the rebuild planner's engine and about how many source rows it reads."""

    partition: str | None
    engine: str
    rows: int | None
    reason: str


@dataclass(frozen=True)
class Rederive:
    """The re-derivation of one target's history, partition by partition (docs/rebuilds.md, "Rebuild plans").

    Attributes:
        target: The target whose rows are re-derived.
        plan: The rebuild planner's plan; its ``live`` is the table written (the new version, for a new version).
        partitions: Per partition, the engine and the estimated rows read.
        kept: Partitions of the target that the sources cannot re-derive (older than the source's oldest
            row, no landing zone), with their rows, as notes.
        lost_rows: Rows of the target a new version would not have (the ``kept`` partitions of a swap).
    """

    target: ObjectRef
    plan: RebuildPlan
    partitions: tuple[PartitionEstimate, ...]
    kept: tuple[str, ...] = ()
    lost_rows: int = 0

    @property
    def rows(self) -> int:
        return sum(p.rows or 0 for p in self.partitions)

    def summary(self) -> str:
        """``31 partitions (2026-08-01 … 2026-08-31): clickhouse 31, ~120,000 rows``."""
        if not self.partitions:
            return "nothing to re-derive: the sources hold no rows"
        engines: dict[str, int] = {}
        for p in self.partitions:
            engines[p.engine] = engines.get(p.engine, 0) + 1
        keys = [p.partition for p in self.partitions if p.partition]
        span = f" ({keys[0]} … {keys[-1]})" if len(keys) > 1 else f" ({keys[0]})" if keys else " (whole table)"
        count = len(self.partitions)
        by_engine = ", ".join(f"{e} {n}" for e, n in engines.items())
        return f"{count} partition{'s' if count != 1 else ''}{span}: {by_engine}, ~{self.rows:,} rows"

    def to_dict(self) -> dict:
        return {
            "target": self.target.fqn,
            "writes": self.plan.live.fqn,
            "rows": self.rows,
            "partitions": [
                {"partition": p.partition, "engine": p.engine, "rows": p.rows, "reason": p.reason}
                for p in self.partitions
            ],
            "kept": list(self.kept),
            "lost_rows": self.lost_rows,
        }


@dataclass(frozen=True)
class Change:
    """One object's change.

    Attributes:
        action: What is done.
        ref: The object changed (for a new version or a re-derivation: the target table).
        kind: ``database``, ``table``, ``view`` or ``dictionary``.
        layer: Its topological layer: MV hops from the raw sources (sources 0, their targets 1, a target
            reading those 2, …); an MV is in the layer of the table it writes; databases -1.
        reasons: What differs, one line each.
        statements: SQL run on the live server, in order, verbatim from the DDL where the DDL has it.
        location: ``file:line`` of the repo definition.
        rederive: The history re-derived because of this change.
        views: For a new version: ``(mv, beside mv)`` pairs, the MVs feeding the new version.
        next_ref: For a new version: the table built beside the target, swapped in with EXCHANGE TABLES.
        blocked: Why chmv will not do this change (needs ``--allow-drop``, a manual migration; for ``refused``: the
            trigger loop); None if it will.
        diff: A unified diff of a changed SELECT (live → repo).
        clauses: For ``alter`` and a column ``drop``: the ALTER clauses (the preflight runs them on a copy).
        unfinished: The change finishes what an earlier apply started and did not finish (its journal, see
            :mod:`chmv_assets.engine.lifecycle.journal`): ``rederive`` holds the partitions still to re-derive.
    """

    action: Action
    ref: ObjectRef
    kind: str
    layer: int
    reasons: tuple[str, ...] = ()
    statements: tuple[str, ...] = ()
    location: str | None = None
    rederive: Rederive | None = None
    views: tuple[tuple[ObjectRef, ObjectRef], ...] = ()
    next_ref: ObjectRef | None = None
    blocked: str | None = None
    diff: str = ""
    clauses: tuple[str, ...] = ()
    unfinished: bool = False

    def headline(self) -> str:
        what = {
            Action.CREATE_DATABASE: "create database",
            Action.CREATE: f"create {self.kind}",
            Action.ALTER: "alter in place",
            Action.MODIFY_QUERY: "MODIFY QUERY",
            Action.RECREATE_VIEW: "recreate the view (under the write gate)",
            Action.NEW_VERSION: f"new version built beside as {self.next_ref}, swapped in with EXCHANGE TABLES",
            Action.REDERIVE: "finish the re-derivation an earlier apply left unfinished"
            if self.unfinished
            else "re-derive (an upstream target changed)",
            Action.DROP: f"drop {self.kind}",
            Action.MANUAL: "needs a manual migration",
            Action.REFUSED: f"refused, the rest is applied ({self.kind} of a trigger loop)",
        }[self.action]
        return f"{self.action.symbol} {self.name}: {what}"

    @property
    def name(self) -> str:
        """How the plan names the object: ``db.t``, a database's name, a function's or a grant's (no database)."""
        if self.kind == "database":
            return self.ref.database
        return self.ref.fqn if self.ref.database else self.ref.name

    def to_dict(self) -> dict:
        return {
            "action": str(self.action),
            "object": self.name,
            "kind": self.kind,
            "layer": self.layer,
            "reasons": list(self.reasons),
            "statements": list(self.statements),
            "location": self.location,
            "next_version": self.next_ref.fqn if self.next_ref else None,
            "views": [{"view": v.fqn, "beside": b.fqn} for v, b in self.views],
            "rederive": self.rederive.to_dict() if self.rederive else None,
            "blocked": self.blocked,
            "unfinished": self.unfinished,
        }


@dataclass(frozen=True)
class LifecyclePlan:
    """Everything ``chmv apply`` would change, decided before anything runs.

    Attributes:
        ddl_dir: The DDL directory planned from.
        changes: In execution order: layer by layer (databases, then lineage layers), drops last.
        notes: What differs but is left alone (objects and columns not in the DDL without ``--allow-drop``,
            partitions the sources cannot re-derive).
        allow_drop: Drops were allowed when planning.
        findings: What chmv does not change but must be told: per managed target, the MVs on the server that the
            DDL does not define and that write into it (writers outside the DDL: rebuilds of the target are refused
            while they write there), each ``db.target: …``.
    """

    ddl_dir: str
    changes: tuple[Change, ...] = ()
    notes: tuple[str, ...] = field(default=())
    allow_drop: bool = False
    findings: tuple[str, ...] = ()

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    @property
    def exit_code(self) -> int:
        """:data:`EXIT_CHANGES` when changes are pending, else :data:`EXIT_NO_CHANGES`."""
        return EXIT_CHANGES if self.changes else EXIT_NO_CHANGES

    @property
    def blocked(self) -> tuple[Change, ...]:
        """The changes chmv will not make and that hold the whole apply back (a manual migration first…)."""
        return tuple(c for c in self.changes if c.blocked and c.action != Action.REFUSED)

    @property
    def refused(self) -> tuple[Change, ...]:
        """The changes chmv refuses alone (the MVs of a trigger loop): ``chmv apply`` makes every other change."""
        return tuple(c for c in self.changes if c.action == Action.REFUSED)

    def rederivations(self) -> Iterator[Rederive]:
        for change in self.changes:
            if change.rederive is not None:
                yield change.rederive

    def statements(self) -> Iterator[str]:
        for change in self.changes:
            yield from change.statements

    def touching(self, objects: Collection[ObjectRef]) -> LifecyclePlan:
        """The part of the plan that changes one of ``objects`` or re-derives it (what fixes their drift).

        A change is kept when its object is one of them (an MV's ``MODIFY QUERY``, a target's ALTER or new version,
        a source's ALTER), when it re-derives one of them or feeds a new version through one, or when it creates
        their database; the notes kept are those about one of them.
        """
        wanted = set(objects)
        databases = {r.database for r in wanted}

        def touches(change: Change) -> bool:
            if change.kind == "database":
                return change.ref.database in databases
            rederived = change.rederive is not None and change.rederive.target in wanted
            return change.ref in wanted or rederived or any(v in wanted for v, _ in change.views)

        notes = tuple(n for n in self.notes if any(n.startswith(f"{r.fqn}:") for r in wanted))
        findings = tuple(n for n in self.findings if any(n.startswith(f"{r.fqn}:") for r in wanted))
        changes = tuple(c for c in self.changes if touches(c))
        return LifecyclePlan(self.ddl_dir, changes, notes, self.allow_drop, findings)

    def summary(self) -> str:
        found = (
            f"; {len(self.findings)} finding{'s' if len(self.findings) != 1 else ''} (writers outside the DDL)"
            if self.findings
            else ""
        )
        if not self.changes:
            return (
                ("no changes to the DDL's objects" + found)
                if found
                else "no changes: the server matches the DDL directory"
            )
        counts: dict[str, int] = {}
        for change in self.changes:
            counts[str(change.action)] = counts.get(str(change.action), 0) + 1
        targets = list(self.rederivations())
        text = (
            f"{len(self.changes)} change{'s' if len(self.changes) != 1 else ''} ("
            + ", ".join(f"{n} {a}" for a, n in counts.items())
            + ")"
        )
        if targets:
            text += (
                f"; {len(targets)} target{'s' if len(targets) != 1 else ''} re-derived from history "
                f"(~{sum(r.rows for r in targets):,} rows)"
            )
        if self.blocked:
            text += f"; {len(self.blocked)} blocked"
        if self.refused:
            text += f"; {len(self.refused)} refused (a trigger loop; the rest is applied)"
        return text + found

    def describe(self, *, markdown: bool = False) -> str:
        """The plan as text (``chmv plan``) or markdown (the ``chmv_apply`` job's metadata)."""
        code = "`" if markdown else ""
        lines = [
            f"**chmv plan** of `{self.ddl_dir}`: {self.summary()}"
            if markdown
            else f"chmv plan of {self.ddl_dir}: {self.summary()}"
        ]
        layer = None
        for change in self.changes:
            heading = (
                "drops (downstream first)"
                if change.action == Action.DROP
                else "functions and named collections"
                if change.layer < -1
                else "databases"
                if change.layer < 0
                else "access control"
                if change.layer >= ACCESS_LAYER
                else f"layer {change.layer}"
            )
            if heading != layer:
                layer = heading
                lines += ["", f"### {heading}" if markdown else heading]
            where = f"  [{change.location}]" if change.location else ""
            lines.append(f"{'- ' if markdown else '  '}{change.headline()}{where}")
            pad = "    " if markdown else "      "
            lines += [f"{pad}{r}" for r in change.reasons]
            if change.blocked:
                lines.append(f"{pad}{'REFUSED' if change.action == Action.REFUSED else 'BLOCKED'}: {change.blocked}")
            for sql in change.statements:
                one = " ".join(sql.split())
                lines.append(f"{pad}{code}{one if len(one) <= 160 else one[:157] + '...'}{code}")
            if change.diff:
                lines += [f"{pad}{d}" for d in change.diff.splitlines()[2:]]
            if change.rederive is not None:
                r = change.rederive
                lines.append(f"{pad}re-derive {r.target.fqn} into {r.plan.live.fqn}: {r.summary()}")
                lines += [f"{pad}  {k}" for k in r.kept]
        if self.findings:
            lines += ["", "### findings" if markdown else "findings:"] + [f"  - {n}" for n in self.findings]
        if self.notes:
            lines += ["", "notes:"] + [f"  - {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()

    def to_dict(self) -> dict:
        """The JSON shape of ``chmv plan --format json``."""
        return {
            "ddl_dir": self.ddl_dir,
            "status": "changes" if self.changes else "no changes",
            "exit_code": self.exit_code,
            "summary": self.summary(),
            "changes": [c.to_dict() for c in self.changes],
            "notes": list(self.notes),
            "findings": list(self.findings),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
