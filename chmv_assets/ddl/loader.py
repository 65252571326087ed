"""Load a DDL directory once: configuration, parsed project and lineage graph together.

Parsing is deterministic in the DDL files, the options and the parser's own code, so the parsed model
is kept in a cache under the state directory, keyed by a digest of all three: every process of
``dagster dev`` (code server, each run) and every CLI call after the first unpickles the model
instead of parsing again (~8x faster at 1,000 MVs, benchmarks/bench_definitions.py). A missing,
unreadable or foreign cache file is simply parsed again; writes are atomic (temp file + rename).
"""

from __future__ import annotations

import gc
import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from chmv_assets import settings
from chmv_assets.ddl.config import CONFIG_FILE, ChmvConfig, load_config
from chmv_assets.ddl.lineage import LineageGraph
from chmv_assets.ddl.models import ObjectRef, Project
from chmv_assets.ddl.parsing.project import load_project
from chmv_assets.ddl.partitioning import TargetPartitioning, target_partitioning
from chmv_assets.ddl.server_grammar import grammar_version
from chmv_assets.ddl.twin import local_twin
from chmv_assets.ddl.writers import SourceWriters, source_writers, undefined_writer_names
from chmv_assets.errors import DDLError, DDLProblem

T = TypeVar("T")
_CODE = Path(__file__).resolve().parent


@dataclass(frozen=True, eq=False)
class LoadedProject:
    """A parsed project with the configuration it was read with (hashed by identity, for memoizing)."""

    config: ChmvConfig
    project: Project
    _derived: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False)

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` once per load and ``key``: what later layers derive from the project (asset specs…).

        The values live as long as this object, so a process that loads again (a code-location reload)
        does not keep every project it ever loaded, as a module-level cache would.
        """
        try:
            return self._derived[key]
        except KeyError:
            value = self._derived[key] = compute()
            return value

    @cached_property
    def graph(self) -> LineageGraph:
        return LineageGraph(self.project)

    @cached_property
    def partitionings(self) -> Mapping[ObjectRef, TargetPartitioning]:
        """Every MV target's partitioning (:class:`~chmv_assets.ddl.partitioning.TargetPartitioning`), decided once
        per load from its PARTITION BY, in the partition calendar of chmv.toml (``timezone``, ``partition_start``);
        a translator's ``get_partitioning`` hook replaces some (:meth:`with_partitionings`)."""
        zone, start = self.config.timezone, self.config.partition_start
        return MappingProxyType({t: target_partitioning(self.project, t, zone, start) for t in self.project.targets})

    def partitioning(self, ref: ObjectRef) -> TargetPartitioning:
        """How ``ref`` is partitioned: the one object every reader of its partitions reads (the Dagster definition, op
        and job names, keys, windows, SQL predicates, catch-up and run ranges). A table that is not a target (a
        source) gets its own, derived once too; anything else is unpartitioned."""
        found = self.partitionings.get(ref)
        if found is not None:
            return found
        config = self.config
        return self.derived(
            ("chmv/partitioning", ref),
            lambda: target_partitioning(self.project, ref, config.timezone, config.partition_start),
        )

    def with_partitionings(self, partitionings: Mapping[ObjectRef, TargetPartitioning]) -> LoadedProject:
        """This project with ``partitionings`` in place of its targets' own (what a translator's hook decides), read
        by both Dagster and the engine; ``self`` when they change nothing."""
        if all(self.partitioning(ref) == p for ref, p in partitionings.items()):
            return self
        changed = LoadedProject(config=self.config, project=self.project)
        changed.__dict__["partitionings"] = MappingProxyType({**self.partitionings, **partitionings})
        if "graph" in self.__dict__:  # the lineage is the project's: shared
            changed.__dict__["graph"] = self.graph
        return changed

    @cached_property
    def time_columns(self) -> Mapping[ObjectRef, str]:
        """Sources with an event-time column (``[ingestion.time_columns]``) that the DDL defines, and that column.

        In configuration order; derived once per load (asset specs, op grouping and sensors ask per object).
        """
        project = self.project
        columns: dict[ObjectRef, str] = {}
        for fqn, column in self.config.ingestion.time_columns.items():
            database, _, name = fqn.partition(".")
            ref = ObjectRef(database=database, name=name)
            if project.table(ref) is not None:
                columns[ref] = column
        return MappingProxyType(columns)

    def writers(self, source: ObjectRef) -> SourceWriters:
        """Who writes ``source`` (:func:`chmv_assets.ddl.writers.source_writers`), derived once per load."""
        return self.derived(("writers", source), lambda: source_writers(self.project, self.config.writers, source))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects that stay alive.

    A load builds hundreds of thousands of objects (the models, then Dagster's definitions); collection
    passes while they pile up would traverse them again and again and find little to free (the parser
    unlinks its trees, so reference counting frees them). They are traversed once, after the load, by
    the normal thresholds.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load(ddl_dir: str | Path, *, twin: bool = False, **overrides: object) -> LoadedProject:
    """Read ``chmv.toml`` and every ``.sql`` file of ``ddl_dir`` (from the parse cache when unchanged).

    Args:
        twin: The local twin of the DDL (:func:`chmv_assets.ddl.twin.local_twin`): what the embedded engine runs.

    Raises:
        DDLError: With every problem of the configuration or the DDL.
    """
    config = load_config(ddl_dir, **overrides)
    key = _cache_key(config, twin)
    project = _read_cache(key) if key else None
    if project is None:
        with gc_paused():
            project = load_project(config.ddl_dir, default_database=config.default_database, external=config.external)
            if twin:
                project = local_twin(project, server_version=config.server_version)
            if key:
                _write_cache(key, project)
    _check_writers(config, project)
    return LoadedProject(config=config, project=project)


def _check_writers(config: ChmvConfig, project: Project) -> None:
    """Every table ``[writers]`` names is one the project defines (or declares external)."""
    undefined = undefined_writer_names(project, config.writers)
    if not undefined:
        return
    path = Path(config.ddl_dir) / CONFIG_FILE
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    problems = []
    for key, name in undefined:
        line = next((i for i, row in enumerate(text.splitlines(), 1) if f'"{name}"' in row or f"'{name}'" in row), 1)
        problems.append(
            DDLProblem(
                str(path),
                line,
                1,
                f"[writers] {key} names {name}, which the DDL directory does not define",
                "fix the name (db.table) or declare the table in external",
            )
        )
    raise DDLError(problems)


def require_views(loaded: LoadedProject) -> None:
    """Raise when the DDL directory defines no materialized view: chmv would build an empty code location.

    Raises:
        DDLError: Naming the directory, what it holds and what to do.
    """
    project = loaded.project
    if project.views:
        return
    if project.loops:  # every MV is in a trigger loop: that is what to fix
        raise DDLError(loop_problems(project), where="in the DDL directory; nothing to manage")
    ddl_dir = Path(loaded.config.ddl_dir)
    if ddl_dir.is_dir():
        files = sum(1 for p in ddl_dir.rglob("*.sql") if p.is_file())
        held = f"{files} .sql file{'s' if files != 1 else ''}, {len(project.tables)} table(s)"
    else:
        held = "the directory does not exist"
    problem = DDLProblem(
        str(ddl_dir),
        1,
        1,
        f"no materialized view found in {ddl_dir} ({held})",
        "point CHMV_DDL_DIR (or --ddl-dir, or the component's ddl_dir) at the directory of your "
        "CREATE MATERIALIZED VIEW statements",
    )
    raise DDLError([problem], where="in the DDL directory; nothing to manage")


def loop_problems(project: Project) -> list[DDLProblem]:
    """The trigger loops left out of the project, one problem each (:meth:`~chmv_assets.ddl.models.TriggerLoop.problem`)."""
    return [loop.problem() for loop in project.loops]


def loop_report(project: Project) -> str:
    """What to print about the trigger loops left out of a loaded project ("" without one): how many, each problem."""
    if not project.loops:
        return ""
    return str(DDLError(loop_problems(project), where="in the DDL directory; its MVs are left out, the rest is loaded"))


def _cache_key(config: ChmvConfig, twin: bool = False) -> str | None:
    """A digest of the DDL directory (its path, file names and bytes), the parse options and the ddl package's code."""
    if not settings.parse_cache():
        return None
    # The directory's own path too: the model records each statement's file (errors and metadata name it); and the
    # version of ClickHouse's parser, which reads what sqlglot cannot (chmv_assets.ddl.server_grammar).
    options = f"{sys.version_info[:2]}|{config.ddl_dir}|{config.default_database}|{sorted(config.external)}"
    options += f"|{grammar_version()}" + (f"|twin {config.server_version}" if twin else "")
    digest = hashlib.sha256(options.encode())
    for folder, pattern in ((_CODE, "*.py"), (Path(config.ddl_dir), "*.sql")):
        for path in sorted(folder.rglob(pattern)):
            if path.is_file():
                digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def _cache_path(key: str) -> Path:
    return settings.state_dir() / "cache" / f"ddl-{key}.pickle"


def _read_cache(key: str) -> Project | None:
    try:
        with gc_paused(), _cache_path(key).open("rb") as fh:
            project = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None
    return project if isinstance(project, Project) else None


def _write_cache(key: str, project: Project) -> None:
    path = _cache_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".ddl-", delete=False) as fh:
            pickle.dump(project, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(fh.name, path)
    except OSError:  # a read-only state directory: the next load parses again
        return


def twin_of(loaded: LoadedProject) -> LoadedProject:
    """The local twin of a loaded project (:func:`chmv_assets.ddl.twin.local_twin`), made once per load.

    ``load(…, twin=True)`` reads it from the parse cache; this is for a project loaded before the engine was known.
    """
    if loaded.project.twin:
        return loaded
    return loaded.derived(
        ("chmv/twin",),
        lambda: LoadedProject(
            config=loaded.config, project=local_twin(loaded.project, server_version=loaded.config.server_version)
        ),
    )
