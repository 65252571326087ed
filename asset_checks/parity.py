"""Row-count parity per partition, MV-aware: the target partition vs the MVs' own SELECT over the same window.

What is compared depends on the target's engine, derived from the parsed model:

- MergeTree (pass-through, routing, plain aggregates): rows.
- SummingMergeTree: the sums of the summed columns, and the number of distinct keys.
- AggregatingMergeTree: ``fMerge`` of the additive ``AggregateFunction(f, …)`` columns (sum, count), and
  the number of distinct keys.
- ReplacingMergeTree / Collapsing: rows of the target read ``FINAL`` vs distinct keys of the recompute.

A trigger source that deduplicates itself (ReplacingMergeTree) is read ``FINAL`` for the recompute,
so duplicates the MV counted twice show up as an overcount. Both sides read only the partition: the
target through its PARTITION BY, the source through backfill_sql's pruning range.
"""

import re
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    MetadataValue,
    PreviewWarning,
    multi_asset_check,
)

from asset_checks._common import (
    PARITY,
    SELF_DEDUP_ENGINES,
    existing_objects,
    involved_objects,
    missing_message,
)
from chmv_assets.alerts import Alert, sink_for
from chmv_assets.assets import CLICKHOUSE_POOL
from chmv_assets.backfill_sql import PartitionWindow, partition_expression, view_select, window_for_key
from chmv_assets.errors import ChmvError
from chmv_assets.loader import LoadedProject
from chmv_assets.models import ObjectRef, Table, qualified, quote
from chmv_assets.partitions import partition_scheme
from chmv_assets.rebuild import live_table
from chmv_assets.translator import ChmvTranslator
from resources.clickhouse import ClickHouseResource

_AGG_FUNCTION = re.compile(r"^\s*(Simple)?AggregateFunction\(\s*(\w+)\s*[,()]")
_NUMERIC = re.compile(r"^(Nullable\()?(U?Int\d+|Float\d+|Decimal)")
_IDENT = re.compile(r"`([^`]+)`|\b([A-Za-z_]\w*)\b")
#: Aggregate functions whose -Merge over a whole partition equals the -Merge of the recompute exactly.
ADDITIVE = {"sum", "count", "sumWithOverflow", "sumKahan"}


@dataclass(frozen=True)
class Measure:
    """One figure compared between the target and the recompute."""

    name: str
    expected: float
    actual: float

    @property
    def delta(self) -> float:
        return self.actual - self.expected


@dataclass(frozen=True)
class ParityResult:
    """The parity of one target partition.

    Attributes:
        target: ``db.table``.
        partition: The partition key, None for the whole table.
        measures: Figures compared; the first is the headline (expected/actual/delta metadata).
        tolerance: Allowed relative difference.
        in_grace: The partition is the newest one and still inside the processing-latency grace.
        missing: Objects that do not exist on the server (the check fails with that message).
        error: A query error (an MV whose SELECT throws on the source rows, say).
        sql: The query that was run.
    """

    target: str
    partition: str | None
    measures: tuple[Measure, ...] = ()
    tolerance: float = 0.0
    in_grace: bool = False
    missing: tuple[str, ...] = ()
    error: str | None = None
    sql: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def within_tolerance(self) -> bool:
        if self.missing or self.error:
            return False
        return all(abs(m.delta) <= self.tolerance * max(abs(m.expected), 1.0) for m in self.measures)

    @property
    def passed(self) -> bool:
        return self.within_tolerance or (self.in_grace and not self.missing and not self.error)

    @property
    def expected(self) -> float:
        return self.measures[0].expected if self.measures else 0.0

    @property
    def actual(self) -> float:
        return self.measures[0].actual if self.measures else 0.0

    @property
    def delta(self) -> float:
        return self.actual - self.expected

    def describe(self) -> str:
        where = f"{self.target} partition {self.partition}" if self.partition else self.target
        if self.missing:
            return f"{where}: {missing_message(ObjectRef(database=m.split('.')[0], name=m.split('.', 1)[1]) for m in self.missing)}"
        if self.error:
            return f"{where}: the parity query failed: {self.error}"
        figures = "; ".join(f"{m.name}: expected {m.expected:g}, actual {m.actual:g}" for m in self.measures)
        verdict = "ok" if self.within_tolerance else ("mismatch inside the grace period" if self.in_grace else "MISMATCH")
        return f"{where}: {verdict} ({figures})"


def measures_for(table: Table) -> list[tuple[str, str, str]]:
    """``(name, expression on the target, expression on the recompute)`` for the target's engine."""
    family = table.engine.family if table.engine is not None else "MergeTree"
    keys = table.order_by or "tuple()"
    key_names = {a or b for a, b in _IDENT.findall(keys)}
    if family in SELF_DEDUP_ENGINES:
        return [("rows (FINAL)", "count()", f"uniqExact({keys})")]
    if family == "AggregatingMergeTree":
        out = []
        for column in table.columns:
            match = _AGG_FUNCTION.match(column.type)
            if match and match.group(2) in ADDITIVE:
                expr = f"{match.group(2)}Merge({quote(column.name)})" if not match.group(1) else f"sum({quote(column.name)})"
                out.append((expr.replace("`", ""), expr, expr))
        return [*out, ("distinct keys", f"uniqExact({keys})", f"uniqExact({keys})")]
    if family == "SummingMergeTree":
        explicit = {a or b for arg in (table.engine.arguments if table.engine else ()) for a, b in _IDENT.findall(arg)}
        out = []
        for column in table.columns:
            if column.name in key_names or not _NUMERIC.match(column.type):
                continue
            if explicit and column.name not in explicit:
                continue
            expr = f"sum({quote(column.name)})"
            out.append((f"sum({column.name})", expr, expr))
        return [*out, ("distinct keys", f"uniqExact({keys})", f"uniqExact({keys})")]
    return [("rows", "count()", "count()")]


def parity_sql(loaded: LoadedProject, target: ObjectRef, window: PartitionWindow | None,
               live: ObjectRef | None = None) -> str:  # fmt: skip
    """One query returning two rows, ``('actual', m0, m1, …)`` and ``('expected', m0, m1, …)``."""
    project = loaded.project
    table = project.table(target)
    if table is None:
        raise ChmvError(f"{target.fqn} is not defined in the DDL directory")
    views = project.views_into(target)
    scheme = partition_scheme(table, views)
    if scheme.grain is None:
        window = None
    measures = measures_for(table)
    target_where = ""
    if window is not None and table.partition_by is not None:
        target_where = f" WHERE ({table.partition_by.sql}) = ({partition_expression(table, scheme, window)})"
    final = " FINAL" if table.engine is not None and table.engine.family in SELF_DEDUP_ENGINES else ""
    actual_cols = ", ".join(f"toFloat64({a}) AS m{i}" for i, (_, a, _e) in enumerate(measures))
    expected_cols = ", ".join(f"toFloat64({e}) AS m{i}" for i, (_, _a, e) in enumerate(measures))
    recomputes = []
    for view in views:
        relation = None
        source = project.table(view.trigger) if view.trigger else None
        if source is not None and source.engine is not None and source.engine.family in SELF_DEDUP_ENGINES:
            relation = f"{qualified(view.trigger)} FINAL"
        recomputes.append(view_select(view, project, table, scheme, window, trigger_relation=relation))
    union = " UNION ALL ".join(f"({sql})" for sql in recomputes)
    return (f"SELECT 'actual' AS side, {actual_cols} FROM {qualified(live or target)}{final}{target_where} "
            f"UNION ALL SELECT 'expected' AS side, {expected_cols} FROM ({union})")  # fmt: skip


def parity_for_partition(client: Client, loaded: LoadedProject, target_ref: ObjectRef,
                         window: PartitionWindow | None, *, now: datetime | None = None) -> ParityResult:  # fmt: skip
    """Compare one target partition with what its MVs' own SELECT yields over the same source window.

    Args:
        client: An open client.
        loaded: The parsed project.
        target_ref: The MV target.
        window: The partition (None: the whole table).
        now: The current time (naive UTC) for the grace period; default: the clock.

    Returns:
        The figures; a missing object or a failing query is reported in the result, never raised.
    """
    config = loaded.config.parity
    partition = window.key if window else None
    missing = set(involved_objects(loaded, target_ref)) - existing_objects(client, involved_objects(loaded, target_ref))
    missing -= set(loaded.project.dictionaries)  # dictionaries are checked by drift, parity does not read them
    if missing:
        return ParityResult(target_ref.fqn, partition, tolerance=config.tolerance,
                            missing=tuple(sorted(m.fqn for m in missing)))  # fmt: skip
    now = now or datetime.now(UTC).replace(tzinfo=None)
    in_grace = window is not None and window.end > now - timedelta(minutes=config.grace_minutes)
    table = loaded.project.table(target_ref)
    assert table is not None
    sql = ""
    try:
        live = live_table(client, loaded.project, target_ref)
        sql = parity_sql(loaded, target_ref, window, live)
        rows = {row[0]: row[1:] for row in client.query(sql).result_rows}
    except (ClickHouseError, ChmvError) as err:  # a failing recompute is a parity failure with its reason
        message = str(err).strip().splitlines()[0][:500] if str(err).strip() else type(err).__name__
        return ParityResult(target_ref.fqn, partition, tolerance=config.tolerance, error=message, sql=sql)
    names = [name for name, _a, _e in measures_for(table)]
    actual = rows.get("actual") or (0.0,) * len(names)
    expected = rows.get("expected") or (0.0,) * len(names)
    measures = tuple(Measure(n, float(e or 0), float(a or 0)) for n, e, a in zip(names, expected, actual, strict=True))
    return ParityResult(target_ref.fqn, partition, measures, config.tolerance, in_grace, sql=sql)


def parity_check_result(results: list[ParityResult], loaded: LoadedProject,
                        asset_key: AssetKey | None = None) -> AssetCheckResult:  # fmt: skip
    """Fold the partitions one evaluation covered into one check result (numbers as metadata)."""
    failed = [r for r in results if not r.passed]
    expected = sum(r.expected for r in results)
    actual = sum(r.actual for r in results)
    rows = "\n".join(f"| {r.partition or '(all)'} | {'ok' if r.passed else 'FAIL'} | "
                     + "; ".join(f"{m.name}: {m.expected:g} / {m.actual:g}" for m in r.measures)
                     + (f" {r.error or ''}{'missing: ' + ', '.join(r.missing) if r.missing else ''}") + " |"
                     for r in results)  # fmt: skip
    metadata = {
        "expected": expected,
        "actual": actual,
        "delta": actual - expected,
        "relative_delta": (actual - expected) / max(abs(expected), 1.0),
        "partitions_checked": len(results),
        "partitions_failed": len(failed),
        "chmv/partitions": MetadataValue.json({r.partition or "": r.passed for r in results}),
        "chmv/failed_partitions": MetadataValue.json([r.partition for r in failed]),
        "chmv/result": MetadataValue.md("| partition | verdict | expected / actual |\n|---|---|---|\n" + rows),
    }
    if results and results[-1].sql:
        metadata["chmv/sql"] = MetadataValue.md(f"```sql\n{results[-1].sql}\n```")
    description = "; ".join(r.describe() for r in (failed or results)[:5])
    if failed:
        sink = sink_for(loaded.config.alert_webhook)
        for r in failed:
            sink.send(Alert("check_failed", "error", r.target, r.describe(),
                            {"check": PARITY, "partition": r.partition, "expected": r.expected,
                             "actual": r.actual, "delta": r.delta, "missing": list(r.missing), "error": r.error}))  # fmt: skip
    return AssetCheckResult(passed=not failed, severity=AssetCheckSeverity.ERROR, metadata=metadata,
                            asset_key=asset_key, check_name=PARITY if asset_key is not None else None,
                            description=description[:2000])  # fmt: skip


def build_parity_checks(loaded: LoadedProject, translator: ChmvTranslator) -> list[AssetChecksDefinition]:
    """The parity check of every target, partitioned like its target (one evaluation per partition run).

    Targets sharing a partitions definition share one subsettable op, so a project with thousands of
    targets loads fast; each check is still its own check of its own asset.
    """
    groups: dict[object, list[ObjectRef]] = {}
    for ref in loaded.project.targets:
        groups.setdefault(translator.get_partitions_def(loaded, ref), []).append(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)  # partitioned asset checks are "preview" in Dagster 1.13
        return [_parity_checks(loaded, translator, refs, partitions_def, index)
                for index, (partitions_def, refs) in enumerate(groups.items())]  # fmt: skip


def _parity_checks(loaded: LoadedProject, translator: ChmvTranslator, refs: list[ObjectRef], partitions_def,
                   index: int) -> AssetChecksDefinition:  # fmt: skip
    by_key = {translator.get_asset_key(ref): ref for ref in refs}
    specs = [
        AssetCheckSpec(
            PARITY,
            asset=key,
            partitions_def=partitions_def,
            blocking=loaded.config.parity.blocking,
            description=f"{ref.fqn} holds what its MVs' own SELECT yields over the source rows of the same partition.",
        )
        for key, ref in by_key.items()
    ]

    @multi_asset_check(specs=specs, name=f"chmv_parity_{index}", can_subset=True, pool=CLICKHOUSE_POOL)
    def _parity(context: AssetCheckExecutionContext, clickhouse: ClickHouseResource):
        op = context.op_execution_context
        if partitions_def is None:
            keys: list[str | None] = [None]
        elif op.has_partition_key or op.has_partition_key_range:
            keys = list(op.partition_keys)
        else:
            keys = [partitions_def.get_last_partition_key()]
        windows = [window_for_key(partitions_def, k) for k in keys]
        selected = [key for key in by_key if AssetCheckKey(key, PARITY) in context.selected_asset_check_keys]
        with clickhouse.get_client() as client:
            for key in selected:
                results = [parity_for_partition(client, loaded, by_key[key], w) for w in windows]
                for r in results:
                    context.log.info(r.describe())
                yield parity_check_result(results, loaded, asset_key=key)

    return _parity
