"""SQL that rebuilds a target partition from the MV's own SELECT.

Nothing here re-implements an MV's transform: the verbatim SELECT is executed with its trigger table
swapped for a window of that table (or for staged rows), and its output filtered to one partition.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from chmv_assets.ddl.grains import Grain
from chmv_assets.ddl.models import Column, MaterializedView, ObjectRef, Project, Table, splice
from chmv_assets.ddl.names import safe_name
from chmv_assets.ddl.partitioning import PartitionScheme, PartitionWindow, window_instant
from chmv_assets.ddl.types import parse_type
from chmv_assets.sql.cluster import drop_table_sql, plain_engine, shadow_engine, storage_clauses
from chmv_assets.sql.quoting import interval, qualified, quote, string_literal
from chmv_assets.sql.time_sql import UTC_INSTANT, column_zone, time_sql

#: The most characters of a partition key a shadow's name carries as they are (a time key has 12 at most).
MAX_KEY_DIGITS = 32


def select_with_source(view: MaterializedView, source: ObjectRef, replacement: str) -> str:
    """Return the MV's ``select_sql`` reading ``replacement`` wherever it reads ``source``.

    ``replacement`` is a parenthesized subquery or a table function; an alias named like the
    source table is added where the original had none, so qualified column references still
    resolve. This is how chmv runs the MV's own SELECT over a partition window, a Parquet
    staging folder, or rows after a cutoff, without re-implementing the transform.

    Only the positions where the insert block stands are replaced (the left-most FROM and UNION
    branch heads): the other side of a self-join or a subquery on the same table keeps reading
    the whole table, as the live MV does.
    """
    edits: list[tuple[int, int, str]] = []
    for use in view.sources:
        if use.ref != source:
            continue
        block = use.block or (True,) * len(use.spans)
        for span, aliased, is_block in zip(use.spans, use.has_alias, block, strict=True):
            if not is_block:
                continue
            text = replacement if aliased else f"{replacement} AS {quote(source.name)}"
            edits.append((span.start, span.end, text))
    return splice(view.select_sql, edits)


def partition_expression(target: Table, scheme: PartitionScheme, window: PartitionWindow, *, zone: str) -> str:
    """The target's PARTITION BY evaluated on the partition: its time part on the window start
    (``toYYYYMM(CAST('2026-09-01' AS Date))``), its key part replaced by the partition's values
    (``(toYYYYMM(CAST('2026-09-01' AS Date)), 'eu')``; a value is a string literal, which the server converts to the
    element's type). ``zone``: the session's time zone (:func:`chmv_assets.engine.clock.session_zone`), the zone of the
    window's wall clock where the partition column declares none. Its form is the shape's
    (:meth:`chmv_assets.ddl.shapes.PartitionShape.sql_expression`)."""
    return scheme.shape.sql_expression(_PartitionSql(target, scheme, window, zone))


def partition_tuple(target: Table, scheme: PartitionScheme, window: PartitionWindow | None, *, zone: str) -> str:
    """The partition a swap replaces or drops: ``tuple(<the PARTITION BY's value on the partition>)`` — one value per
    element (``tuple(toYYYYMM(CAST('2026-09-01' AS Date)), 'eu')``), ``tuple()`` for an unpartitioned target or the
    whole table."""
    if window is None or target.partition_by is None:
        return "tuple()"
    return scheme.shape.sql_tuple(_PartitionSql(target, scheme, window, zone))


def partition_filter(target: Table, scheme: PartitionScheme, window: PartitionWindow, *, zone: str) -> str:
    """The predicate on the target's columns (or an MV's output) that holds for the rows of the partition exactly:
    ``(<PARTITION BY>) = (<its value>)``; element by element where there is a key part
    (``(toYYYYMM(day)) = (toYYYYMM(…)) AND (region) = ('eu')``)."""
    return scheme.shape.sql_filter(_PartitionSql(target, scheme, window, zone))


class _PartitionSql:
    """The SQL values of one partition of ``target`` that a shape writes its predicate with
    (:class:`chmv_assets.ddl.shapes.PartitionSql`)."""

    def __init__(self, target: Table, scheme: PartitionScheme, window: PartitionWindow, zone: str):
        assert target.partition_by is not None
        self.target, self.scheme, self.window, self.zone = target, scheme, window, zone
        self.whole = target.partition_by.sql

    def substituted(self) -> str:
        assert self.target.partition_by is not None and self.scheme.column is not None
        value = _time_value(self.target, self.scheme, self.window, self.zone)
        return self.target.partition_by.substitute({self.scheme.column: value})

    def spliced(self) -> str:
        return splice(self.whole, _partition_edits(self.target, self.scheme, self.window, self.zone))

    def texts(self) -> list[str]:
        return _element_texts(self.target)

    def values(self) -> list[str]:
        return _element_values(self.target, self.scheme, self.window, self.zone)


def _time_value(target: Table, scheme: PartitionScheme, window: PartitionWindow, zone: str) -> str:
    """The window's start as a value of the time column's type: for a ``DateTime``, the instant of the column's zone
    (:func:`chmv_assets.ddl.partitioning.window_instant`: the second of a repeated hour stays the second); for a
    ``Date``, its wall-clock day."""
    assert scheme.column is not None and window.start is not None
    column = target.column(scheme.column)
    type_sql = column.type if column else "DateTime"
    if parse_type(type_sql or "DateTime").is_date:
        return time_sql(window.start.replace(tzinfo=None), type_sql, zone)
    return time_sql(window_instant(window.start, column_zone(type_sql, zone)), type_sql, zone)


def _element_texts(target: Table) -> list[str]:
    assert target.partition_by is not None
    return [target.partition_by.sql[e.span.start : e.span.end] for e in target.partition_elements]


def _element_values(target: Table, scheme: PartitionScheme, window: PartitionWindow, zone: str) -> list[str]:
    """Each PARTITION BY element's value on the partition, in written order."""
    assert target.partition_by is not None
    sql, edits = target.partition_by.sql, _partition_edits(target, scheme, window, zone)
    values = []
    for element in target.partition_elements:
        first, last = element.span.start, element.span.end
        inside = [(start - first, end - first, text) for start, end, text in edits if first <= start and end <= last]
        values.append(splice(sql[first:last], inside))
    return values


def _partition_edits(
    target: Table, scheme: PartitionScheme, window: PartitionWindow, zone: str
) -> list[tuple[int, int, str]]:
    """What replaces what in the PARTITION BY's text: each key element by its value, the time column inside the time
    element by the window's start."""
    assert target.partition_by is not None
    elements = target.partition_elements
    edits = [
        (elements[index].span.start, elements[index].span.end, string_literal(value))
        for index, value in zip(scheme.key_elements, window.values, strict=True)
    ]
    if scheme.grain is not None and window.start is not None:
        inside = elements[scheme.time_element].span
        literal = f"({_time_value(target, scheme, window, zone)})"
        edits += [
            (span.start, span.end, literal)
            for name, spans in target.partition_by.column_spans
            if name == scheme.column
            for span in spans
            if inside.start <= span.start and span.end <= inside.end
        ]
    return edits


def _source_range(
    view: MaterializedView, project: Project, scheme: PartitionScheme, window: PartitionWindow, zone: str
) -> tuple[Column, str, str] | None:
    """``(trigger column, lower bound, upper bound)`` of :func:`source_range_predicate`, as SQL values.

    The window is the wall clock of the zone its partitions are computed in (:func:`window_zone`); its bounds are
    written as those instants, whatever zone the trigger column declares.
    """
    found = range_column(view, project, scheme)
    if found is None or window.start is None or window.end is None:
        return None
    col, grain = found
    wall = window_zone(project.table(view.writes_to), scheme, col, zone)
    upper = time_sql(window_instant(window.end, wall), col.type, zone)
    if grain:
        upper = f"{upper} + {interval(grain)}"
    return col, time_sql(window_instant(window.start, wall), col.type, zone), upper


def range_column(
    view: MaterializedView, project: Project, scheme: PartitionScheme
) -> tuple[Column, Grain | None] | None:
    """The trigger column a window's pruning range is on and the grain the MV truncates it to: where the MV computes the
    partition column as a bare trigger column or a monotone truncation of one; None otherwise."""
    if scheme.column is None or view.trigger is None:
        return None
    out = view.output(scheme.column)
    if out is None or out.truncation is None:
        return None
    source_column, grain = out.truncation
    source = project.table(view.trigger)
    col = source.column(source_column) if source else None
    return (col, grain) if col is not None else None


def window_zone(target: Table | None, scheme: PartitionScheme, trigger_column: Column | None, zone: str) -> str:
    """The zone whose wall clock a window of ``target`` is: where its partition column is a ``DateTime``, that
    column's zone; where it is a ``Date``, the zone the MV computed the date in (the trigger column's); the session's
    (``zone``) where neither declares one."""
    column = target.column(scheme.column) if target is not None and scheme.column else None
    if column is not None and parse_type(column.type).is_datetime:
        return column_zone(column.type, zone)
    return column_zone(trigger_column.type, zone) if trigger_column is not None else zone


@dataclass(frozen=True)
class TriggerRange:
    """The trigger rows of one MV that a read of a window covers (:func:`trigger_range`): a time range on one trigger
    column and the key values the MV passes on, as SQL on the trigger's own columns. The planner derives it once per
    partition and MV; the fills read it from the plan (:func:`range_select`'s ``ranges``).

    Attributes:
        column: The trigger column of the time range (None: no time range derivable).
        lower, upper: Its bounds, as SQL values (``column >= lower AND column < upper``).
        keys: ``column = value`` of each key element the MV passes on from one trigger column.
    """

    column: str | None = None
    lower: str | None = None
    upper: str | None = None
    keys: tuple[str, ...] = ()

    @property
    def time(self) -> str | None:
        """The time range alone (a span of windows is read whatever their key values)."""
        if self.column is None:
            return None
        return f"{quote(self.column)} >= {self.lower} AND {quote(self.column)} < {self.upper}"

    @property
    def predicate(self) -> str | None:
        """The pruning predicate of the read: the time range and the key values; None when nothing is derivable."""
        return " AND ".join([t for t in (self.time,) if t] + list(self.keys)) or None


def trigger_range(
    view: MaterializedView, project: Project, scheme: PartitionScheme, window: PartitionWindow, *, zone: str
) -> TriggerRange:
    """The trigger rows of ``view`` that map into the partition ``window``, for pruning (:func:`source_range_predicate`).

    The time part: derivable when the MV computes the partition column as a bare trigger column or a monotone
    truncation of one (``toStartOfHour(ts)``): then ``f(ts) in [start, end)`` implies ``ts in [start, end + grain)``.
    The key part: each key element that is a target column the MV passes on from one trigger column unchanged
    (``region``) is that column's value (``region = 'eu'``).
    """
    keys = tuple(key_predicates(view, project, scheme, window))
    bounds = _source_range(view, project, scheme, window, zone)
    if bounds is None:
        return TriggerRange(keys=keys)
    col, lower, upper = bounds
    return TriggerRange(col.name, lower, upper, keys)


def span_range(ranges: Sequence[TriggerRange], windows: Sequence[PartitionWindow]) -> TriggerRange:
    """The time range over a span of windows (``ranges[i]`` is ``windows[i]``'s): from the lower bound of the earliest
    window to the upper bound of the latest one, whatever their key values; no range where one lacks it."""
    if not ranges or any(r.column is None or r.column != ranges[0].column for r in ranges):
        return TriggerRange()
    first = min(range(len(windows)), key=lambda i: windows[i].start)  # type: ignore[arg-type,return-value]
    last = max(range(len(windows)), key=lambda i: windows[i].end)  # type: ignore[arg-type,return-value]
    return TriggerRange(ranges[0].column, ranges[first].lower, ranges[last].upper)


def source_range_predicate(
    view: MaterializedView, project: Project, scheme: PartitionScheme, window: PartitionWindow, *, zone: str
) -> str | None:
    """A predicate on the trigger's own columns that holds for every row mapping into the partition, for pruning:
    :attr:`TriggerRange.predicate` of :func:`trigger_range`. The exact filter is applied on the output as well; None
    when nothing is derivable."""
    return trigger_range(view, project, scheme, window, zone=zone).predicate


def key_predicates(
    view: MaterializedView, project: Project, scheme: PartitionScheme, window: PartitionWindow
) -> list[str]:
    """``trigger column = value`` for each key element of the partition the MV passes on from one trigger column."""
    target = project.table(view.writes_to)
    if view.trigger is None or target is None or not window.values:
        return []
    out = []
    for index, value in zip(scheme.key_elements, window.values, strict=True):
        call = target.partition_elements[index].call
        column = view.output(call.column) if call is not None and call.function is None else None
        if column is None or column.truncation is None or column.truncation[1] is not None:
            continue
        if column.source_columns != ((view.trigger.fqn, column.truncation[0]),):
            continue
        out.append(f"{quote(column.truncation[0])} = {string_literal(value)}")
    return out


def span_holds_all_sql(
    view: MaterializedView,
    project: Project,
    scheme: PartitionScheme,
    span: PartitionWindow,
    *,
    zone: str,
    bounds: TriggerRange | None = None,
) -> str | None:
    """``SELECT <every row of the trigger is inside the pruning range of span>`` (1 or 0), where part metadata answers
    it: the MV's partition column truncates a trigger column that the trigger's PARTITION BY reads (the server keeps
    that column's min and max per part). None otherwise, or when the read of ``span`` is not pruned anyway.

    A read of a span that holds every row of its trigger needs no pruning predicate (the server would evaluate it on
    every row read; ~5 % of the CPU of a daily aggregate's rebuild).

    Args:
        bounds: The span's time range as the plan has it (:func:`span_range`); default: derived from ``span``.
    """
    if bounds is None:
        derived = _source_range(view, project, scheme, span, zone)
        bounds = TriggerRange(derived[0].name, derived[1], derived[2]) if derived is not None else TriggerRange()
    source = project.table(view.trigger) if view.trigger is not None else None
    if bounds.column is None or source is None or source.partition_call is None or view.trigger is None:
        return None
    if source.partition_call.column != bounds.column:
        return None
    name = quote(bounds.column)
    return (
        f"SELECT count() > 0 AND min({name}) >= {bounds.lower} AND max({name}) < {bounds.upper} "
        f"FROM {qualified(view.trigger)}"
    )


def source_relation(
    project: Project, source: ObjectRef, *, where: str | None = None, relation: str | None = None
) -> str:
    """A parenthesized subquery standing in for a source table inside the MV's SELECT.

    Args:
        source: The table the MV reads.
        where: A filter on the source's rows.
        relation: What to read instead of the table itself (``file('…', Parquet)``).
    """
    table = project.table(source)
    hidden = [c for c in table.columns if c.default_kind in ("MATERIALIZED", "ALIAS")] if table else []
    columns = ", ".join(["*", *(quote(c.name) for c in hidden)]) if relation is None else "*"
    sql = f"SELECT {columns} FROM {relation or qualified(source)}"
    return f"({sql} WHERE {where})" if where else f"({sql})"


def view_select(
    view: MaterializedView,
    project: Project,
    target: Table,
    scheme: PartitionScheme,
    window: PartitionWindow | None,
    *,
    zone: str,
    trigger_where: str | None = None,
    trigger_relation: str | None = None,
) -> str:
    """The MV's own SELECT over the trigger rows of a window, its output filtered to the window's partition: the
    :func:`range_select` of one window.

    Args:
        view: An MV writing into ``target``.
        window: The partition; None rebuilds the whole table.
        zone: The session's time zone (:func:`partition_expression`).
        trigger_where: An extra filter on trigger rows (a cutoff).
        trigger_relation: Read the trigger's rows from here instead (staged Parquet).
    """
    return range_select(
        view,
        project,
        target,
        scheme,
        [window],
        zone=zone,
        trigger_where=trigger_where,
        trigger_relation=trigger_relation,
    )


def span_of(windows: Sequence[PartitionWindow]) -> PartitionWindow:
    """One time window from the earliest start to the latest end of ``windows`` (keyed as the first)."""
    starts = [w.start for w in windows if w.start is not None]
    ends = [w.end for w in windows if w.end is not None]
    return PartitionWindow(key=windows[0].key, start=min(starts), end=max(ends))


def range_select(
    view: MaterializedView,
    project: Project,
    target: Table,
    scheme: PartitionScheme,
    windows: Sequence[PartitionWindow | None],
    *,
    zone: str,
    trigger_where: str | None = None,
    trigger_relation: str | None = None,
    only_windows: bool = True,
    prune: bool = True,
    ranges: Sequence[TriggerRange] | None = None,
    keep: Sequence[str] | None = None,
) -> str:
    """The MV's own SELECT over the trigger rows of ``windows`` in one read, its output kept to their partitions.

    One window is one partition's read: the trigger pruned to the rows mapping into it
    (:func:`source_range_predicate`: its time range and its key values), the output kept where the partition is
    its own (:func:`partition_filter`); None is the whole table, unfiltered. Several (time) windows are read once,
    each partition getting the same rows as alone: the trigger pruned to the span of the windows (the earliest
    start to the latest end, which covers every row mapping into any of them), the output kept where its partition
    is one of the windows' (``(PARTITION BY) = (…) OR …``).

    Args:
        zone: The session's time zone (:func:`partition_expression`).
        trigger_where: An extra filter on trigger rows (a cutoff).
        trigger_relation: Read the trigger's rows from here instead (staged Parquet).
        only_windows: Filter the output to the windows' partitions. Without the filter the output also holds the
            partitions the span's edges reach (a rebuild that swaps in only the windows' partitions drops them):
            the server pushes that filter below the MV's GROUP BY, onto every source row read (+30% CPU
            measured on a daily aggregate).
        prune: Read the trigger within the windows only; without, every row (for a span that holds them all, see
            :func:`span_holds_all_sql`; rows outside it land in partitions outside the windows).
        ranges: Per window, the trigger rows of ``view`` its read covers as the plan decided them
            (:func:`trigger_range`); default: derived here.
        keep: Per window, the filter of its partition's rows as the plan has it (:func:`partition_filter`); default:
            derived here.

    Raises:
        ValueError: No window, or several that are not time windows of a target partitioned by time.
    """
    several = len(windows) > 1
    timed = all(w is not None and w.timed for w in windows)
    if not windows or (several and (scheme.grain is None or target.partition_by is None or not timed)):
        raise ValueError("range_select needs time windows of a target partitioned by time")
    first = windows[0]
    partitioned = first is not None and scheme.partitioned
    filters = [trigger_where] if trigger_where else []
    if partitioned and prune:
        if ranges is None:
            ranges = [trigger_range(view, project, scheme, w, zone=zone) for w in windows]  # type: ignore[arg-type]
        pruning = span_range(ranges, windows).time if several else ranges[0].predicate  # type: ignore[arg-type]
        filters += [pruning] if pruning else []
    select = view.select_sql
    if view.trigger is not None and (filters or trigger_relation):
        where = " AND ".join(f"({f})" for f in filters) or None
        select = select_with_source(
            view, view.trigger, source_relation(project, view.trigger, where=where, relation=trigger_relation)
        )
    columns = ", ".join(quote(c.name) for c in view.output_columns)
    sql = f"SELECT {columns} FROM ({select})"
    if not (partitioned and only_windows and target.partition_by is not None):
        return sql
    if keep is None:
        keep = [partition_filter(target, scheme, w, zone=zone) for w in windows]  # type: ignore[arg-type]
    return f"{sql} WHERE " + (" OR ".join(_or_term(k, scheme) for k in keep) if several else keep[0])


def trigger_predicate(
    views: Sequence[MaterializedView],
    project: Project,
    scheme: PartitionScheme,
    window: PartitionWindow | None,
    *,
    zone: str,
) -> str | None:
    """The rows of one trigger that a read of ``window`` covers, on the trigger's own columns: the pruning range
    (:func:`source_range_predicate`) of the MVs reading it (``views``), OR-ed where they differ; None (every row) for
    the whole table or where one of them has no range."""
    if window is None or not scheme.partitioned:
        return None
    return covered_rows([trigger_range(v, project, scheme, window, zone=zone) for v in views])


def covered_rows(ranges: Sequence[TriggerRange]) -> str | None:
    """The rows of one trigger that a read covers, from the ranges of the MVs reading it (:func:`trigger_predicate`):
    their predicates OR-ed where they differ; None where one has none."""
    predicates = [r.predicate for r in ranges]
    if not predicates or any(p is None for p in predicates):
        return None
    distinct = list(dict.fromkeys(predicates))
    return distinct[0] if len(distinct) == 1 else " OR ".join(f"({p})" for p in distinct)


def _or_term(predicate: str, scheme: PartitionScheme) -> str:
    return f"({predicate})" if scheme.keyed else predicate


def insert_sql(shadow: ObjectRef, view: MaterializedView, select: str) -> str:
    """``INSERT INTO shadow (cols) SELECT …``: columns matched by name, as the MV itself writes them."""
    columns = ", ".join(quote(c.name) for c in view.output_columns)
    return f"INSERT INTO {qualified(shadow)} ({columns}) {select}"


def shadow_ref(target: ObjectRef, partition: str | None, run: str = "") -> ObjectRef:
    """The shadow of one run's rebuild of a (target, partition): ``_chmv_shadow_<table>_<partition>_r<run>``.

    Named for the run, so two runs never write into one shadow (both would swap its rows in); a killed run's
    leftover is found by :func:`shadows_pattern` and dropped by the next run of the table. Distinct targets of a
    database get distinct shadows (``a-b`` and ``a_b`` too: see :func:`~chmv_assets.ddl.names.safe_name`); the
    partition key's digits (``2026-09-01-13:00`` → ``202609011300``, ``all``, ``range``) and ``r<run>`` follow the last
    two ``_``, which neither contains.
    """
    name = f"{_shadow_prefix(target)}_{_partition_digits(partition)}" + (f"_r{run}" if run else "")
    return ObjectRef(database=target.database, name=name)


def shadows_pattern(target: ObjectRef) -> str:
    """A regular expression (RE2) matching the names of every shadow of ``target``, of any partition and run (and
    the run-less names of chmv before runs had shadows of their own), and of no other table's."""
    return f"^{re.escape(_shadow_prefix(target))}_[A-Za-z0-9]+(_r[0-9a-f]+)?$"


def run_of_shadow(name: str) -> str | None:
    """The run token in a shadow's name, None for a run-less name."""
    match = re.search(r"_r([0-9a-f]+)$", name)
    return match.group(1) if match else None


def _shadow_prefix(target: ObjectRef) -> str:
    return f"_chmv_shadow_{safe_name(target.name.lstrip('.'))}"


def _partition_digits(partition: str | None) -> str:
    """The key's ASCII letters and digits; a key of none or too many (a key value: ``東京``, a long tenant name) is cut
    and followed by a digest of the whole key, so a shadow's name stays short and never empty."""
    digits = "".join(c for c in partition or "all" if c.isascii() and c.isalnum())
    if digits and len(digits) <= MAX_KEY_DIGITS:
        return digits
    return digits[: MAX_KEY_DIGITS // 2] + hashlib.sha256((partition or "").encode()).hexdigest()[:8]


def create_shadow_sql(shadow: ObjectRef, live: ObjectRef, table: Table) -> str:
    """``CREATE TABLE shadow AS target`` on this server only, never ``ON CLUSTER``.

    The shadow is read by the partition swap, which runs on this server (``REPLACE PARTITION`` with ``ON CLUSTER``
    would run on an arbitrary replica of every shard, whose shadow would be empty; see :mod:`chmv_assets.sql.cluster`):
    a shadow on the other hosts would never be read, and an ``ON CLUSTER`` CREATE would wait on every host at each
    partition. On a ``Replicated*`` target the swap is replicated by the target itself (the other replicas fetch the
    new parts from this one).

    A ``Replicated*`` target's shadow gets an engine clause of its own (``AS`` alone would copy the live table's
    Keeper path and register the shadow as one more replica of the target): the same engine with a Keeper path of
    its own (:func:`~chmv_assets.sql.cluster.shadow_engine`), or the plain family when the target uses the server's
    default path (a ``Replicated*`` table without a written path can only be created ``ON CLUSTER``; a plain source
    is what ClickHouse's own ``REPLACE PARTITION`` tests replicate from, and the docs ask the same structure, keys
    and storage policy of both tables, not the same engine family). The keys, TTL and SETTINGS (the storage policy
    must be the target's) are the repo's clauses, verbatim.
    """
    engine = table.engine
    if engine is None or not engine.replicated:
        return f"CREATE TABLE {qualified(shadow)} AS {qualified(live)}"
    return _copy_with_engine(shadow, live, table, shadow_engine(table, shadow))


def local_copy_sql(copy: ObjectRef, live: ObjectRef, table: Table) -> str:
    """``CREATE TABLE copy AS live`` sharing nothing with it: a ``Replicated*`` table's copy gets the plain family
    (the engine's own parameters kept, no Keeper path), never ``ON CLUSTER`` (the preflight's scratch copies)."""
    engine = table.engine
    if engine is None or not engine.replicated:
        return f"CREATE TABLE {qualified(copy)} AS {qualified(live)}"
    return _copy_with_engine(copy, live, table, plain_engine(table))


def _copy_with_engine(copy: ObjectRef, live: ObjectRef, table: Table, engine_sql: str) -> str:
    """``CREATE TABLE copy AS live <engine> <the repo's keys, TTL and SETTINGS, verbatim>``."""
    return f"CREATE TABLE {qualified(copy)} AS {qualified(live)} " + " ".join([engine_sql, *storage_clauses(table)])


def drop_shadow_sql(shadow: ObjectRef) -> str:
    """``DROP TABLE IF EXISTS shadow SYNC``, on this server (where the shadow was created)."""
    return drop_table_sql(shadow)


def swap_sql(live: ObjectRef, shadow: ObjectRef, partition: str, *, empty: bool = False) -> str:
    """The statement that swaps a rebuilt shadow's partition in, on this server (never ``ON CLUSTER``: see
    :func:`create_shadow_sql`); :func:`swaps_sql` of one partition.

    Args:
        live: The table the rows go to.
        shadow: The rebuilt shadow.
        partition: The partition replaced (``tuple(toYYYYMM(…))``; ``tuple()``, the one partition of an
            unpartitioned target or an MV's inner table): the rebuild planner's step says which
            (:attr:`chmv_assets.engine.rebuild.planner.PartitionStep.partition`).
        empty: The shadow holds no rows: ``DROP PARTITION`` instead of replacing the partition (the server refuses
            to replace a partition from an empty one).
    """
    return swaps_sql(live, shadow, [(partition, empty)])


def swaps_sql(live: ObjectRef, shadow: ObjectRef, partitions: Sequence[tuple[str, bool]]) -> str:
    """One ``ALTER`` swapping several partitions of a rebuilt shadow in, in order (each atomically, as alone).

    One statement instead of one per partition (embedded engine, 60 daily partitions: ~100 ms instead of ~150 ms;
    each partition's swap still costs its own metadata commit). The server runs the commands of one ``ALTER`` one
    after the other, so a failure or a kill leaves the partitions before it swapped, as separate statements would.

    Args:
        live: The table the rows go to.
        shadow: The rebuilt shadow.
        partitions: ``(partition expression, empty)`` pairs: ``REPLACE PARTITION``, or ``DROP PARTITION`` where the
            shadow holds no rows of it (see :func:`swap_sql`).
    """
    assert partitions, "nothing to swap"
    commands = [
        f"DROP PARTITION {p}" if empty else f"REPLACE PARTITION {p} FROM {qualified(shadow)}" for p, empty in partitions
    ]
    return f"ALTER TABLE {qualified(live)} " + ", ".join(commands)


def staged_relation(
    source: ObjectRef, lake_relation: str, columns: Sequence[str], time_column: str, cutoff: datetime | None
) -> str:
    """``(landing rows <= cutoff UNION ALL source rows > cutoff)`` standing in for a trigger table.

    Args:
        source: The trigger table.
        lake_relation: ``file(…)`` over the staged Parquet (rows already bounded by the cutoff).
        columns: The staged columns, read from both sides.
        time_column: The source's event-time column.
        cutoff: The ingestion cutoff (an instant; naive: UTC); None: the lake alone.
    """
    cols = ", ".join(quote(c) for c in columns)
    lake = f"SELECT {cols} FROM {lake_relation}"
    if cutoff is None:
        return f"({lake})"
    cutoff_sql = time_sql(cutoff if cutoff.tzinfo else cutoff.replace(tzinfo=UTC), UTC_INSTANT)
    return f"({lake} UNION ALL SELECT {cols} FROM {qualified(source)} WHERE {quote(time_column)} > {cutoff_sql})"
