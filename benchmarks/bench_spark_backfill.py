"""Spark backfill from the landing zone vs bare PySpark and vs ClickHouse reading the same Parquet; RSS; runs.

Run: ``.venv/bin/python benchmarks/bench_spark_backfill.py [--rows 10000000] [--no-multi]``. Figures are
printed as ratios against baselines measured in the same run (same process, same Spark session):

- bare PySpark: a plain job doing the same read, time filter, dedup and partitioned Parquet write as
  chmv's staging, run once to warm the fresh JVM up (not counted), then timed once before and once after
  chmv's run (the mean of the two);
  chmv's Spark staging and chmv's whole path (staging + the ClickHouse swaps) are printed against it
  (goal <= 1.2x: chmv adds little to what Spark itself costs here);
- ClickHouse reading the same landing files with ``file()`` through the same MV SELECT, with the same
  cleaning (``LIMIT 1 BY`` the dedup key).

Spark session start is printed separately, not counted. Phases run in child processes so each one's
peak RSS (``ru_maxrss``, plus the Spark driver JVM's VmHWM) is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
DAYS = 12
START = datetime(2026, 8, 1)
SOURCE = "analytics.api_requests"


def write_landing(root: Path, rows: int) -> None:
    """10M rows in the arrival-time layout, written by slicing sorted arrays (cheaper than demo_data's masks)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from chmv_assets import demo_data

    table = demo_data.generate(SOURCE, rows, days=DAYS, seed=11)
    rng = np.random.default_rng(11)
    times = table["timestamp"].to_numpy().astype("datetime64[s]")
    delay = np.where(rng.random(len(times)) < 0.02, rng.integers(60, 2400, len(times)), 0).astype("timedelta64[s]")
    hours = (times + delay).astype("datetime64[h]")
    order = np.argsort(hours, kind="stable")
    table, hours = table.take(pa.array(order)), hours[order]
    bounds = np.flatnonzero(np.diff(hours.astype(np.int64))) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(hours)], strict=True):
        moment = hours[lo].astype(datetime)
        folder = root / SOURCE / f"date={moment:%Y-%m-%d}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(lo, hi - lo), folder / f"hour={moment:%H}.parquet")


def _setup(work: Path):
    from chmv_assets.ddl.loader import LoadedProject, load
    from chmv_assets.engine.lifecycle.deploy import apply
    from resources.clickhouse import ClickHouseResource

    example = load(ROOT / "examples" / "ddl")
    ingestion = example.config.ingestion.model_copy(update={"landing_dir": str(work / "landing")})
    loaded = LoadedProject(config=example.config.model_copy(update={"ingestion": ingestion}), project=example.project)
    engine = ClickHouseResource(dsn=f"chdb://{work / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    return loaded, engine


def _windows(first: int, count: int):
    from chmv_assets.ddl.partitioning import PartitionWindow

    return [
        PartitionWindow(
            f"{START + timedelta(days=i):%Y-%m-%d}", START + timedelta(days=i), START + timedelta(days=i + 1)
        )
        for i in range(first, first + count)
    ]


def bare_pyspark(spark, files: list[str], columns: list[str], keys: list[str], out: Path) -> float:
    """The same read, time filter, dedup and partitioned Parquet write as chmv's staging, as a plain job."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    ts = F.col("timestamp")
    df = spark.read.parquet(*files).select(*columns)
    df = df.filter(
        (ts >= F.lit(f"{START:%Y-%m-%d %H:%M:%S}").cast("timestamp"))
        & (ts < F.lit(f"{START + timedelta(days=DAYS):%Y-%m-%d %H:%M:%S}").cast("timestamp"))
    )
    df = df.dropDuplicates(keys)
    df.withColumn("_p", F.date_format(F.date_trunc("day", ts), "yyyyMMddHH")).write.mode("overwrite").option(
        "compression", "lz4_raw"
    ).partitionBy("_p").parquet(str(out))
    return time.monotonic() - started


def phase_single(work: Path) -> dict:
    """One run, one Spark session: all 12 partitions; bare PySpark around it; then ClickHouse on the same Parquet."""
    from chmv_assets.ddl.models import ObjectRef
    from chmv_assets.engine.catalog import live_table
    from chmv_assets.engine.clock import session_zone
    from chmv_assets.engine.ingest import landing
    from chmv_assets.engine.ingest.staging_area import file_relation
    from chmv_assets.engine.rebuild.executor import rebuild_partitions
    from chmv_assets.engine.rebuild.planner import plan_from_source
    from chmv_assets.engine.rebuild.steps import run_step
    from chmv_assets.sql.quoting import quote
    from spark.session import get_spark_session
    from spark.staging import SparkStager

    loaded, engine = _setup(work)
    source = loaded.project.table(ObjectRef(database="analytics", name="api_requests"))
    target = ObjectRef(database="analytics", name="hourly_endpoint_stats")
    started = time.monotonic()
    spark = get_spark_session("local[2]")
    session_seconds = time.monotonic() - started
    columns = [c.name for c in source.columns]
    key_names = landing.dedup_keys(loaded, source.ref, columns)
    files = [f.path for f in landing.list_files(work / "landing", source.ref)]
    bare_pyspark(spark, files, columns, key_names, work / "warm_up")  # JIT warm-up of the fresh JVM, not counted
    bare = [bare_pyspark(spark, files, columns, key_names, work / "bare_1")]
    staging_seconds = 0.0
    stager = SparkStager(spark)

    def timed_stager(*args, **kwargs):
        nonlocal staging_seconds
        began = time.monotonic()
        stager(*args, **kwargs)
        staging_seconds += time.monotonic() - began

    started = time.monotonic()
    _plan, results = rebuild_partitions(engine, loaded, target, _windows(0, DAYS), engine="spark", stager=timed_stager)
    spark_seconds = time.monotonic() - started
    bare.append(bare_pyspark(spark, files, columns, key_names, work / "bare_2"))
    rss_spark = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = results[0].rows_read
    jvm_mb = _jvm_peak_mb()
    landing_root = work / "landing" / SOURCE
    keys = ", ".join(quote(k) for k in key_names)
    started = time.monotonic()
    with engine.get_client() as client:
        live = live_table(client, loaded.project, target)
        for window in _windows(0, DAYS):
            days = ",".join(f"date={window.start + timedelta(days=d):%Y-%m-%d}" for d in (0, 1))
            # The same cleaning as the Spark side: one row per dedup key.
            rel = (
                f"(SELECT * FROM {file_relation(str(landing_root) + '/{' + days + '}/*.parquet', source, columns)} "
                f"LIMIT 1 BY {keys})"
            )
            plan = plan_from_source(loaded, target, [window], live, zone=session_zone(client))
            run_step(client, loaded.project, plan, plan.steps[0], trigger_relation=lambda ref, r=rel: r)
    ch_seconds = time.monotonic() - started
    spark.stop()
    return {
        "rows": rows,
        "spark_seconds": spark_seconds,
        "session_seconds": session_seconds,
        "staging_seconds": staging_seconds,
        "bare_seconds": sum(bare) / len(bare),
        "bare_runs": bare,
        "clickhouse_seconds": ch_seconds,
        "rss_mb": rss_spark,
        "jvm_mb": jvm_mb,
        "written": sum(r.rows_written for r in results),
    }


def _jvm_peak_mb() -> float:
    """Peak RSS (VmHWM) of the Spark driver JVM, the child process py4j started (0 if not found)."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                is_java = b"java" in f.read()
            if parent == os.getpid() and is_java:
                with open(f"/proc/{pid}/status") as f:
                    return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM"))
        except (OSError, ValueError, IndexError, StopIteration):
            continue
    return 0.0


def phase_one_partition(work: Path, index: int) -> dict:
    """What one run of a multi-run backfill does: start Spark, backfill one partition, stop."""
    from chmv_assets.ddl.models import ObjectRef
    from chmv_assets.engine.rebuild.executor import rebuild_partitions
    from spark.session import get_spark_session
    from spark.staging import SparkStager

    started = time.monotonic()
    loaded, engine = _setup(work)
    spark = get_spark_session("local[2]")
    rebuild_partitions(
        engine,
        loaded,
        ObjectRef(database="analytics", name="hourly_endpoint_stats"),
        _windows(index, 1),
        engine="spark",
        stager=SparkStager(spark),
    )
    spark.stop()
    return {"seconds": time.monotonic() - started}


def _child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"phase {args} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--phase")
    parser.add_argument("--work")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--no-multi", action="store_true", help="skip the 12 one-partition runs (quick iteration)")
    args = parser.parse_args()
    if args.phase == "single":
        print(json.dumps(phase_single(Path(args.work))))
        return
    if args.phase == "one":
        print(json.dumps(phase_one_partition(Path(args.work), args.index)))
        return
    with tempfile.TemporaryDirectory(prefix="chmv_bench_spark_") as tmp:
        work = Path(tmp)
        os.environ["CHMV_STATE_DIR"] = str(work / "state")
        started = time.monotonic()
        write_landing(work / "landing", args.rows)
        print(f"landing zone: {args.rows:,} rows over {DAYS} days in {time.monotonic() - started:.1f}s")
        single = _child("--phase", "single", "--work", str(work))
        rows = single["rows"]
        print(
            f"spark backfill, {DAYS} partitions in one run: {single['spark_seconds']:.1f}s "
            f"({rows / single['spark_seconds'] / 1e6:.2f}M landing rows/s; session start {single['session_seconds']:.1f}s)"
        )
        bare = single["bare_seconds"]
        print(
            f"bare PySpark job, same read + filter + dedup + partitioned Parquet write: {bare:.1f}s "
            f"(runs: {', '.join(f'{s:.1f}s' for s in single['bare_runs'])})"
        )
        print(
            f"chmv's Spark staging / bare PySpark: {single['staging_seconds'] / bare:.2f}; "
            f"chmv's whole Spark path (staging + {DAYS} ClickHouse swaps) / bare PySpark: "
            f"{single['spark_seconds'] / bare:.2f} (goal <= 1.2)"
        )
        print(
            f"clickhouse file() through the same MV SELECT: {single['clickhouse_seconds']:.1f}s "
            f"({rows / single['clickhouse_seconds'] / 1e6:.2f}M rows/s)"
        )
        print(
            f"throughput ratio spark / clickhouse-file(): {single['clickhouse_seconds'] / single['spark_seconds']:.2f} (goal >= 0.5)"
        )
        print(
            f"peak RSS of the driver process during the {rows / 1e6:.0f}M-row backfill: {single['rss_mb']:.0f} MB (goal < 2048 MB); "
            f"Spark driver JVM: {single['jvm_mb']:.0f} MB"
        )
        if args.no_multi:
            return
        multi = [_child("--phase", "one", "--work", str(work), "--index", str(i))["seconds"] for i in range(DAYS)]
        single_total = single["spark_seconds"] + single["session_seconds"]
        print(
            f"single-run backfill of {DAYS} partitions: {single_total:.1f}s; multi-run ({DAYS} runs): {sum(multi):.1f}s; "
            f"multi/single = {sum(multi) / single_total:.2f} -> BackfillPolicy.single_run()"
        )


if __name__ == "__main__":
    main()
