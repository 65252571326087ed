"""Part-count growth: active parts per target against the server's own insert limits, and the merges behind them.

Thresholds are the ones the server applies: ``system.merge_tree_settings`` (``parts_to_delay_insert``,
``parts_to_throw_insert``, ``max_parts_in_total``) overridden by the live table's own SETTINGS (its ``engine_full``;
:func:`chmv_assets.engine.pacing.pressure.table_limits`), else the DDL's where the table does not exist. The check warns
when the busiest partition passes half the delay limit, when the part count climbed at every one of the last
evaluations (seed 001: a backlog that grows instead of plateauing) or when the merge pool is saturated (seed 000); it
fails near the throw limit. The history is the check's own previous evaluations, read from the Dagster instance.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef, Table
from chmv_assets.engine.health.verdicts import PartVerdict
from chmv_assets.engine.parts import read_partitions

SETTINGS = ("parts_to_delay_insert", "parts_to_throw_insert", "max_parts_in_total")
#: Consecutive rising evaluations (current included) that count as "climbing".
CLIMB_EVALUATIONS = 3
#: Share of parts_to_throw_insert (per partition) or max_parts_in_total (table) that fails the check.
ERROR_SHARE = 0.8
#: Share of parts_to_delay_insert in one partition that warns.
WARN_SHARE = 0.5


@dataclass(frozen=True)
class PartCount:
    """Active parts of one table: in total and in its busiest partition."""

    table: str
    total: int
    max_in_partition: int
    partition: str | None
    by_partition: tuple[tuple[str, int], ...] = ()


def server_thresholds(client: Client) -> dict[str, int]:
    """The server's MergeTree insert limits, read from system.merge_tree_settings."""
    rows = client.query(
        "SELECT name, value FROM system.merge_tree_settings WHERE name IN {names:Array(String)}",
        parameters={"names": list(SETTINGS)},
    ).result_rows
    return {name: int(value) for name, value in rows}


def table_thresholds(server: dict[str, int], table: Table | None) -> dict[str, int]:
    """The server limits with the table's own ``SETTINGS parts_to_… = N`` from the DDL applied."""
    out = dict(server)
    for name in SETTINGS:
        value = table.setting(name) if table is not None else None
        if value is not None and value.isdigit():
            out[name] = int(value)
    return out


def part_counts(client: Client, tables: Iterable[ObjectRef]) -> dict[ObjectRef, PartCount]:
    """Active parts per table and in its busiest partition, for all tables in one query
    (:func:`chmv_assets.engine.parts.read_partitions`)."""
    tables = list(tables)
    if not tables:
        return {}
    out = {}
    for table, partitions in read_partitions(client, tables).items():
        per = tuple(sorted((p.partition_id, p.parts) for p in partitions))
        busiest = max(per, key=lambda item: item[1], default=(None, 0))
        out[table] = PartCount(table.fqn, sum(c for _, c in per), busiest[1], busiest[0], per)
    return out


def assess(count: PartCount, thresholds: dict[str, int], history: Sequence[int]) -> PartVerdict:
    """Judge a part count against the limits and the totals of previous evaluations (oldest first)."""
    delay = thresholds.get("parts_to_delay_insert", 0)
    throw = thresholds.get("parts_to_throw_insert", 0)
    total_limit = thresholds.get("max_parts_in_total", 0)
    if throw and count.max_in_partition >= ERROR_SHARE * throw:
        return PartVerdict(
            "error",
            f"partition {count.partition} has {count.max_in_partition} active parts, near "
            f"parts_to_throw_insert={throw}: inserts will fail with 'Too many parts'",
        )
    if total_limit and count.total >= ERROR_SHARE * total_limit:
        return PartVerdict("error", f"{count.total} active parts, near max_parts_in_total={total_limit}")
    if delay and count.max_in_partition >= WARN_SHARE * delay:
        return PartVerdict(
            "warning",
            f"partition {count.partition} has {count.max_in_partition} active parts "
            f"(parts_to_delay_insert={delay}): inserts will soon be delayed",
        )
    series = [*history[-(CLIMB_EVALUATIONS - 1) :], count.total]
    if len(series) >= CLIMB_EVALUATIONS and all(b > a for a, b in zip(series, series[1:], strict=False)):
        return PartVerdict(
            "warning",
            f"active parts climbed at each of the last {CLIMB_EVALUATIONS} evaluations "
            f"({' → '.join(map(str, series))}) instead of plateauing: merges fall behind "
            "the inserts (batch inserts, or fewer MVs on the source)",
        )
    return PartVerdict("ok", f"{count.total} active parts, at most {count.max_in_partition} in one partition")


def pool_verdict(busy: int, size: int) -> PartVerdict | None:
    """A warning when every task of the merge and mutation pool is busy (seed 000: merges then fall behind inserts)."""
    if size and busy >= size:
        return PartVerdict(
            "warning",
            f"the merge pool is saturated ({busy} of {size} merge/mutation tasks busy): parts merge slower than they "
            "arrive; chmv's inserts wait for it ([pacing]), and other writers' may not",
        )
    return None
