"""Shared fixtures: a real embedded ClickHouse (chdb) per test scope, the example project, its data.

The embedded engine allows one engine path per process at a time, and ClickHouseResource opens and
closes it per use, so fixtures hand out resources (DSNs), never open clients. Fixtures only: what tests import
(paths, helpers) is in ``tests/support/``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.engines import make_engine
from support.paths import EXAMPLE_DDL

# Spark workers must run the venv's python (pyarrow lives there) and bind to loopback only.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest modules first: ``make test``'s three workers take whole modules in collection order
    (``--dist loadfile --no-loadscope-reorder``), so a module marked ``worker_seconds(N)`` starts early instead of
    running alone at the end. Unmarked modules keep their order, after the marked ones."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    def cost(item: pytest.Item) -> float:
        marker = item.get_closest_marker("worker_seconds")
        return float(marker.args[0]) if marker is not None else 0.0

    by_module: dict[str, float] = {}
    for item in items:
        by_module[module(item)] = max(by_module.get(module(item), 0.0), cost(item))
    items.sort(key=lambda item: -by_module[module(item)])  # stable: the order within a module is kept


@pytest.fixture(scope="session", autouse=True)
def _isolated_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Never touch the demo's .chmv/: every test session gets its own state directory."""
    state = tmp_path_factory.mktemp("chmv_state")
    previous = os.environ.get("CHMV_STATE_DIR")
    os.environ["CHMV_STATE_DIR"] = str(state)
    yield state
    if previous is None:
        os.environ.pop("CHMV_STATE_DIR", None)
    else:
        os.environ["CHMV_STATE_DIR"] = previous


@pytest.fixture(scope="session")
def example():
    """The example project, parsed once."""
    from chmv_assets.ddl.loader import load

    return load(EXAMPLE_DDL)


@pytest.fixture(scope="session")
def loaded_engine(tmp_path_factory: pytest.TempPathFactory, example):
    """A shared engine with the example DDL and ~200k demo rows. Read-only: do not mutate it in tests."""
    return make_engine(tmp_path_factory.mktemp("engine") / "chdb", example, rows=200_000)


@pytest.fixture
def fresh_engine(tmp_path: Path, example):
    """A private engine with the example DDL and ~100k demo rows, for tests that change data."""
    return make_engine(tmp_path / "chdb", example, rows=100_000)


@pytest.fixture(scope="session")
def spark():
    """ONE local SparkSession for the whole test run (2 cores, few shuffle partitions, a quick-starting JVM);
    stopped at the end."""
    from spark.session import get_spark_session

    from support.spark import QUICK_JVM_CONF

    session = get_spark_session("local[2]", QUICK_JVM_CONF)
    yield session
    session.stop()
