"""The same ingestion and backfill code on a local standalone Spark cluster (master + one worker on 127.0.0.1)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

from chmv_assets.engine.lifecycle.deploy import apply
from resources.clickhouse import ClickHouseResource

from support.paths import EXAMPLE_DDL, ROOT, TESTS
from support.spark import QUICK_JVM, QUICK_JVM_CONF, deliver, digest, recompute, ref, with_landing, write_lake

pytestmark = pytest.mark.worker_seconds(60)
SPARK_HOME = Path(pyspark.__file__).parent
CHILD = """
import sys
from datetime import UTC, datetime
from pathlib import Path
sys.path.insert(0, {tests!r})
from support.spark import ref, with_landing
from chmv_assets.ddl.partitioning import PartitionWindow
from chmv_assets.ddl.loader import load
from resources.clickhouse import ClickHouseResource
from support.spark import backfill
from chmv_assets.engine.loads.load import ingest
from spark.staging import SparkStager
from spark.session import get_spark_session
master, dsn, landing = sys.argv[1:4]
loaded = with_landing(load({ddl!r}), Path(landing))
engine = ClickHouseResource(dsn=dsn)
spark = get_spark_session(master, {{"spark.executor.memory": "512m", "spark.cores.max": "1", **{jvm!r}}})
assert spark.sparkContext.master == master
print("ingested", ingest(SparkStager(spark), engine, loaded, ref("api_requests")).rows_inserted)
window = PartitionWindow("2026-08-02", datetime(2026, 8, 2, tzinfo=UTC), datetime(2026, 8, 3, tzinfo=UTC))
print("backfilled", backfill(spark, engine, loaded, ref("hourly_endpoint_stats"), [window], engine="spark")[0].rows_written)
spark.stop()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class(*args: str, log: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
    }
    return subprocess.Popen(
        [str(SPARK_HOME / "bin" / "spark-class"), *args],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait_for(path: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.3)
    raise AssertionError(f"{text!r} not in {path}:\n{path.read_text(errors='replace')[-3000:]}")


@pytest.mark.slow
def test_ingest_and_backfill_on_a_standalone_cluster(tmp_path, example):
    lake, landing = tmp_path / "lake", tmp_path / "landing"
    write_lake(lake, {"analytics.api_requests": 10_000})
    deliver(lake, landing)
    loaded = with_landing(example, landing)
    engine = ClickHouseResource(dsn=f"chdb://{tmp_path / 'chdb'}")
    with engine.get_client() as client:
        apply(client, loaded.project)
    port = _free_port()
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    master = _spark_class(
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        str(_free_port()),
        log=master_log,
    )
    worker = None
    try:
        _wait_for(master_log, "I have been elected leader")
        url = f"spark://127.0.0.1:{port}"
        worker = _spark_class(
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--host",
            "127.0.0.1",
            "--cores",
            "1",
            "--memory",
            "1g",
            "--webui-port",
            str(_free_port()),
            log=worker_log,
        )
        _wait_for(worker_log, "Successfully registered with master")
        code = CHILD.format(tests=str(TESTS), ddl=str(EXAMPLE_DDL), jvm=QUICK_JVM_CONF)
        child = subprocess.run(
            [sys.executable, "-c", code, url, engine.resolved_dsn, str(landing)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert child.returncode == 0, child.stderr[-3000:]
        assert "ingested 10000" in child.stdout and "backfilled" in child.stdout
        assert "app-" in master_log.read_text(errors="replace") or "Registering app" in master_log.read_text()
    finally:
        for proc in (worker, master):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
    with engine.get_client() as client:
        assert digest(client, loaded, ref("hourly_endpoint_stats")) == recompute(
            client, loaded, ref("hourly_endpoint_stats")
        )
