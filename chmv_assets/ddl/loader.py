"""Load a DDL directory once: configuration, parsed project and lineage graph together."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from chmv_assets.ddl.config import ChmvConfig, load_config
from chmv_assets.ddl.lineage import LineageGraph
from chmv_assets.ddl.models import Project
from chmv_assets.ddl.parser import load_project


@dataclass(frozen=True, eq=False)
class LoadedProject:
    """A parsed project with the configuration it was read with (hashed by identity, for memoizing)."""

    config: ChmvConfig
    project: Project

    @cached_property
    def graph(self) -> LineageGraph:
        return LineageGraph(self.project)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many short-lived objects.

    Parsing thousands of statements creates sqlglot trees (with parent pointers, so cycles) whose
    collection passes cost ~40% of the load time (benchmarks/bench_definitions.py); they are collected
    once, after the load, by the normal thresholds.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load(ddl_dir: str | Path, **overrides: object) -> LoadedProject:
    """Read ``chmv.toml`` and every ``.sql`` file of ``ddl_dir``.

    Raises:
        DDLError: With every problem of the configuration or the DDL.
    """
    config = load_config(ddl_dir, **overrides)
    with gc_paused():
        project = load_project(config.ddl_dir, default_database=config.default_database, external=config.external)
    return LoadedProject(config=config, project=project)
