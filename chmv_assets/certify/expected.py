"""What every target must hold, and order-independent fingerprints of its partitions.

"Expected" is each MV's verbatim SELECT run into a scratch table ``CREATE TABLE … AS target``, in topological order:
a chain's next level reads the previous level's *expected* table (spliced in place of its trigger, as chmv splices a
window), a root source is read together with its graveyard (the rows certify deleted from it: a target keeps what its
source no longer holds), and the selects of writers outside the DDL (a foreign MV, a one-off INSERT) are added to
the targets they write.

A fingerprint is per ClickHouse partition (``_partition_id``): ``count()``, ``sum(cityHash64(<columns>))`` of the
non-float columns and the sum of each float column (compared within 1e-9, relative). Rows are compared in a form
merges and insert blocks do not change: aggregate states finalized (``-Merge`` per sorting key) where the MVs
aggregate or the engine merges rows (Summing, Aggregating), collapsing engines read ``FINAL``, plain rows as they are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.ddl.types import parse_type
from chmv_assets.sql.quoting import qualified, quote, string_literal
from chmv_assets.sql.rebuild_sql import select_with_source, source_relation

EXPECTED_DB = "_certify_expected"
SCRATCH_DB = "_certify"

Fingerprint = tuple[int, int, tuple[float, ...]]


@dataclass(frozen=True)
class Extra:
    """Rows a writer outside the DDL put into a target: ``select`` (already reading its own table)."""

    target: ObjectRef
    select: str


def physical(client, ref: ObjectRef) -> ObjectRef:
    """The table holding ``ref``'s rows: itself, or an MV's inner table."""
    rows = client.query(
        "SELECT engine, target_database, target_table FROM system.tables WHERE database = {d:String} AND name = {n:String}",
        parameters={"d": ref.database, "n": ref.name},
    ).result_rows
    if rows and rows[0][0] == "MaterializedView" and rows[0][2]:
        return ObjectRef(database=rows[0][1] or ref.database, name=rows[0][2])
    return ref


def ordered_targets(loaded: LoadedProject) -> list[ObjectRef]:
    """Targets in topological order (a chain's upper level first)."""
    project = loaded.project
    targets = list(project.targets)
    order: list[ObjectRef] = []
    entered: set[ObjectRef] = set()  # a target is entered once: an MV reading its own target (a feedback read) or
    # a table downstream of it must not take the walk round that loop

    def visit(t: ObjectRef) -> None:
        if t in entered:
            return
        entered.add(t)
        for view in project.views_into(t):
            for src in view.source_refs:
                if src in project.views_into(src) or src in set(targets):
                    visit(src)
        order.append(t)

    for t in targets:
        visit(t)
    return order


def verifiable(loaded: LoadedProject, target: ObjectRef) -> bool:
    """A target whose rows can be recomputed from tables: not one fed only by a stream table or a ``Null`` table
    (neither keeps a row), nor one an MV writes while reading it back, or a table downstream of it (a feedback read,
    the dedup pattern ``WHERE id NOT IN (SELECT id FROM target)``: each insert's output depends on what the target
    held then, which no SELECT over the sources recomputes)."""
    project = loaded.project
    views = project.views_into(target)
    feedback = {mv for _, mv in loaded.graph.feedback}
    if any(v.ref.fqn in feedback for v in views):
        return False

    def keeps_no_row(ref: ObjectRef | None) -> bool:
        table = project.tables.get(ref) if ref is not None else None
        engine = table.engine.name if table is not None and table.engine is not None else ""
        return ref is not None and (project.is_stream(ref) or engine == "Null")

    return bool(views) and not all(keeps_no_row(v.trigger) for v in views) and not any(v.refreshable for v in views)


def build_expected(
    client,
    loaded: LoadedProject,
    graves: dict[ObjectRef, ObjectRef],
    extras: list[Extra],
) -> dict[ObjectRef, ObjectRef]:
    """Fill one scratch table per target with what it must hold; returns target → that table (the live table itself
    for a target that is not verifiable, so the levels below read what it holds)."""
    client.command(f"CREATE DATABASE IF NOT EXISTS {quote(EXPECTED_DB)}")
    expected: dict[ObjectRef, ObjectRef] = {}
    for target in ordered_targets(loaded):
        if not verifiable(loaded, target):
            expected[target] = physical(client, target)
            continue
        expected[target] = expected_table(client, loaded, target, expected, graves, extras)
    return expected


def expected_table(
    client,
    loaded: LoadedProject,
    target: ObjectRef,
    levels: dict[ObjectRef, ObjectRef],
    graves: dict[ObjectRef, ObjectRef],
    extras: list[Extra],
    *,
    suffix: str = "",
) -> ObjectRef:
    """Fill a scratch table with what ``target`` must hold: its MVs' verbatim SELECTs over their triggers, a trigger
    found in ``levels`` read from the table named there (a chain's expected level; absent: the live table), a root
    source read with its graveyard, plus the selects of writers outside the DDL."""
    project = loaded.project
    live = physical(client, target)
    table = ObjectRef(database=EXPECTED_DB, name=f"{target.database}__{target.name}{suffix}")
    client.command(f"CREATE DATABASE IF NOT EXISTS {quote(EXPECTED_DB)}")
    client.command(f"DROP TABLE IF EXISTS {qualified(table)} SYNC")
    client.command(f"CREATE TABLE {qualified(table)} AS {qualified(live)}")
    names = [r[0] for r in client.query(f"DESCRIBE TABLE {qualified(live)}").result_rows]
    selects = []
    for view in project.views_into(target):
        select = view.select_sql
        trigger = view.trigger
        if trigger is not None and trigger in levels:
            select = select_with_source(view, trigger, f"(SELECT * FROM {qualified(levels[trigger])})")
        elif trigger is not None and trigger in graves:
            here = source_relation(project, trigger)[1:-1]
            there = source_relation(project, trigger, relation=None)[1:-1].replace(
                qualified(trigger), qualified(graves[trigger]), 1
            )
            select = select_with_source(view, trigger, f"({here} UNION ALL {there})")
        selects.append(select)
    selects += [e.select for e in extras if e.target == target]
    for select in selects:
        outputs = [r[0] for r in client.query(f"DESCRIBE TABLE ({select})").result_rows]
        columns = ", ".join(quote(n) for n in outputs if n in names)
        client.command(
            f"INSERT INTO {qualified(table)} ({columns}) SELECT {columns} FROM ({select})",
            settings={"max_partitions_per_insert_block": 0, "async_insert": 0},
        )
    return table


_AGGREGATING = ("SummingMergeTree", "AggregatingMergeTree")
_COLLAPSING = ("ReplacingMergeTree", "CollapsingMergeTree", "VersionedCollapsingMergeTree", "CoalescingMergeTree")


def _merge_call(type_sql: str, column: str) -> str:
    """``quantileMerge(0.99)(col)`` for an ``AggregateFunction(quantile(0.99), UInt32)`` column."""
    inner = type_sql[type_sql.index("(") + 1 : type_sql.rindex(")")]
    depth, end = 0, len(inner)
    for i, ch in enumerate(inner):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            end = i
            break
    function = inner[:end].strip()
    if re.match(r"^\d+$", function):  # AggregateFunction(version, f, …)
        return _merge_call("AggregateFunction(" + inner[end + 1 :], column)
    name, paren, params = function.partition("(")
    return f"{name}Merge{paren}{params}({column})" if paren else f"{name}Merge({column})"


def comparable_sql(
    loaded: LoadedProject, target: ObjectRef, relation: ObjectRef, partitions: Sequence[str] | None = None
) -> str:
    """``relation``'s rows (the live table or its expected one) in the form merges and insert blocks do not change,
    with ``_p`` the partition id (only the ids ``partitions`` when given)."""
    where = ""
    if partitions is not None:
        where = (
            " WHERE _partition_id IN (" + ", ".join(string_literal(p) for p in partitions) + ")"
            if partitions
            else " WHERE 0"
        )
    project = loaded.project
    table = project.table(target)
    views = project.views_into(target)
    assert table is not None
    family = table.engine.family if table.engine is not None else "MergeTree"
    columns = [c for c in table.columns if c.default_kind not in ("ALIAS", "EPHEMERAL")]
    aggregated = family in _AGGREGATING or any(v.group_by or v.aggregates for v in views)
    if aggregated:
        # the sorting key, and the columns of PARTITION BY (constant in a partition; an engine never sums them)
        partition_sql = table.partition_by.sql if table.partition_by is not None else ""
        keys = [
            c
            for c in columns
            if c.name in table.order_by_columns or re.search(rf"(?<![\w`]){re.escape(c.name)}(?![\w`])", partition_sql)
        ]
        measures = []
        for c in columns:
            if c in keys:
                continue
            t = parse_type(c.type)
            name = quote(c.name)
            if t.aggregate is not None and not t.aggregate.simple:
                measures.append(f"{_merge_call(c.type, name)} AS {name}")
            elif t.aggregate is not None:
                measures.append(f"{t.aggregate.function}({name}) AS {name}")
            elif t.is_numeric:
                measures.append(f"sum({name}) AS {name}")
            else:
                measures.append(f"arraySort(groupUniqArray({name})) AS {name}")
        key_list = ", ".join(["_partition_id AS _p", *(quote(c.name) for c in keys)])
        group = ", ".join(["_p", *(quote(c.name) for c in keys)])
        return f"SELECT {', '.join([key_list, *measures])} FROM {qualified(relation)}{where} GROUP BY {group}"
    final = " FINAL" if family in _COLLAPSING else ""
    values = []
    for c in columns:
        t = parse_type(c.type)
        name = quote(c.name)
        values.append(f"finalizeAggregation({name}) AS {name}" if t.aggregate and not t.aggregate.simple else name)
    return f"SELECT _partition_id AS _p, {', '.join(values)} FROM {qualified(relation)}{final}{where}"


def fingerprint_sql(client, comparable: str) -> str:
    types = client.query(f"DESCRIBE TABLE ({comparable})").result_rows
    floats = [quote(n) for n, t, *_ in types if n != "_p" and "Float" in t]
    others = [quote(n) for n, t, *_ in types if n != "_p" and "Float" not in t]
    hashed = f"sum(cityHash64({', '.join(others)}))" if others else "toUInt64(0)"
    sums = "".join(f", sum(toFloat64({f}))" for f in floats)
    return f"SELECT _p, count(), {hashed}{sums} FROM ({comparable}) GROUP BY _p"


def fingerprints(
    client, loaded: LoadedProject, target: ObjectRef, relation: ObjectRef, partitions: Sequence[str] | None = None
) -> dict[str, Fingerprint]:
    """Per partition id of ``relation`` (read as ``target``'s rows): ``(rows, hash, float sums)``; only the partition
    ids ``partitions`` when given."""
    sql = fingerprint_sql(client, comparable_sql(loaded, target, relation, partitions))
    rows = client.query(sql, settings={"max_threads": 2}).result_rows
    return {str(r[0]): (int(r[1]), int(r[2]), tuple(float(x) for x in r[3:])) for r in rows}


def same(a: Fingerprint | None, b: Fingerprint | None) -> bool:
    """Two fingerprints of the same rows (float sums within 1e-9 relative; none = no rows)."""
    a = a or (0, 0, ())
    b = b or (0, 0, ())
    if a[0] != b[0] or (a[0] and a[1] != b[1]):
        return False
    if a[0] == 0:
        return True
    return all(abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y)) for x, y in zip(a[2], b[2], strict=False))


def pending_mutations(client: Any, table: ObjectRef) -> int:
    """How many mutations of ``table`` are not done (a delete's, while merges are stopped: its rows are still in the
    source, and already in its graveyard)."""
    return int(
        client.command(
            "SELECT count() FROM system.mutations WHERE NOT is_done AND database = {d:String} AND table = {t:String}",
            parameters={"d": table.database, "t": table.name},
        )
    )
