"""Helpers of the Spark tests: a landing zone that fills up over time, engine copies, target-vs-recompute digests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from chmv_assets import demo_data
from chmv_assets.ddl.loader import LoadedProject
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.sql.quoting import qualified, quote
from resources.clickhouse import ClickHouseResource

SOURCES = {"analytics.api_requests": 20_000, "analytics.all_events": 10_000, "analytics.raw_webhooks": 8_000}
DAYS = 3
#: JVM flags of the tests' Spark drivers and executors: the client JIT only and a single-threaded GC. The tests'
#: JVMs live for seconds on a few thousand rows, where C2 compiles and parallel GC threads only compete for the
#: 2 cores (measured: a fresh driver's start and first ingest cost 35-42 CPU-seconds, 17-19 s with these).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUICK_JVM_CONF = {"spark.driver.extraJavaOptions": QUICK_JVM, "spark.executor.extraJavaOptions": QUICK_JVM}


def ref(name: str, database: str = "analytics") -> ObjectRef:
    return ObjectRef(database=database, name=name)


def with_landing(example: LoadedProject, root: Path, tolerance: int = 60) -> LoadedProject:
    """The example project with a landing zone at ``root`` and a tolerance above the data's 40-minute lateness."""
    ingestion = example.config.ingestion.model_copy(
        update={"landing_dir": str(root), "late_tolerance_minutes": tolerance}
    )
    return LoadedProject(config=example.config.model_copy(update={"ingestion": ingestion}), project=example.project)


def write_lake(root: Path, sources: dict[str, int] = SOURCES, seed: int = 7) -> dict:
    """All files a lake will eventually hold (demo data: 1% duplicates, 2% late by up to 40 minutes)."""
    tables = {s: demo_data.generate(s, n, days=DAYS, seed=seed) for s, n in sources.items()}
    demo_data.write_landing_zone(root, tables, seed=seed)
    return tables


def deliver(lake: Path, landing: Path, *, until: str | None = None, only: str | None = None) -> int:
    """Copy the lake's files that arrived before ``until`` (``YYYY-MM-DD/hour=HH``) into the landing zone."""
    copied = 0
    for path in sorted(lake.rglob("*.parquet")):
        rel = path.relative_to(lake)
        source, day, hour = rel.parts[0], rel.parts[1].removeprefix("date="), rel.parts[2].removesuffix(".parquet")
        if only and source != only:
            continue
        if until is not None and f"{day}/{hour}" >= until:
            continue
        dest = landing / rel
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            copied += 1
    return copied


def copy_engine(source: Path, dest: Path) -> ClickHouseResource:
    """A ClickHouseResource on a private copy of the closed embedded engine at ``source`` (parts, watermarks).

    Copying the few MB of an ingested engine takes milliseconds where re-ingesting through Spark takes seconds,
    so a module ingests once and every test that changes data gets its own copy. chdb links ``metadata/`` and
    ``data/`` into ``store/`` with relative links, copied as links; an absolute one would make the copy share
    ``source``'s data, so it stops the test instead.
    """
    shutil.copytree(source, dest, symlinks=True)
    for folder, dirs, files in os.walk(dest):
        for link in (Path(folder) / name for name in dirs + files):
            assert not (link.is_symlink() and os.path.isabs(os.readlink(link))), f"{link} links outside the copy"
    return ClickHouseResource(dsn=f"chdb://{dest}")


def digest(
    client, loaded: LoadedProject, table: ObjectRef, where: str | None = None, read: ObjectRef | None = None
) -> list[tuple]:
    """The table's content as readers see it: FINAL for collapsing engines, aggregate states finalized.

    Args:
        read: Read this table (a scratch copy) with ``table``'s definition.
    """
    t = loaded.project.table(table)
    assert t is not None and t.engine is not None
    cols = [
        f"finalizeAggregation({quote(c.name)})" if (c.type or "").startswith("AggregateFunction") else quote(c.name)
        for c in t.columns
    ]
    condition = f" WHERE {where}" if where else ""
    source = qualified(read or table)
    if t.engine.family in ("AggregatingMergeTree", "SummingMergeTree", "ReplacingMergeTree"):
        sql = f"SELECT {', '.join(cols)} FROM {source} FINAL{condition} ORDER BY ALL"
    else:
        sql = f"SELECT {', '.join(cols)}, count() FROM {source}{condition} GROUP BY ALL ORDER BY ALL"
    return [tuple(r) for r in client.query(sql).result_rows]


def recompute(client, loaded: LoadedProject, target: ObjectRef, where: str | None = None) -> list[tuple]:
    """The target as a recompute from ALL source rows would be: every MV's own SELECT into a scratch copy."""
    scratch = ObjectRef(database=target.database, name=f"_expect_{target.name}")
    client.command(f"DROP TABLE IF EXISTS {qualified(scratch)} SYNC")
    client.command(f"CREATE TABLE {qualified(scratch)} AS {qualified(target)}")
    try:
        for view in loaded.project.views_into(target):
            cols = ", ".join(quote(c.name) for c in view.output_columns)
            client.command(
                f"INSERT INTO {qualified(scratch)} ({cols}) SELECT {cols} FROM ({view.select_sql})",
                settings={"max_partitions_per_insert_block": 0},
            )
        return digest(client, loaded, target, where, read=scratch)
    finally:
        client.command(f"DROP TABLE IF EXISTS {qualified(scratch)} SYNC")


def distinct_landing_rows(tables: dict, source: str) -> int:
    """Rows of a generated source after dropping its exact duplicates (the dedup keys identify a row)."""
    return tables[source].group_by(tables[source].column_names).aggregate([]).num_rows


def backfill(spark, clickhouse, loaded: LoadedProject, target: ObjectRef, windows, *, engine: str = "auto") -> list:
    """Plan and run a rebuild with Spark as the stager (what a target asset's run does); the step results."""
    from chmv_assets.engine.rebuild.executor import rebuild_partitions
    from spark.staging import SparkStager

    _plan, results = rebuild_partitions(clickhouse, loaded, target, windows, engine=engine, stager=SparkStager(spark))
    return results
