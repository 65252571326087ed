"""The rebuild engines: each fills partitions from the place the planner says their rows come from
(:mod:`chmv_assets.engine.rebuild.rows`; the planner's ``READS``), behind one protocol
(:class:`~chmv_assets.engine.rebuild.engines.base.RebuildEngine`) the executor runs.

Adding an engine is one module here (``prepare`` what its partitions read; ``Fill.run`` reads and swaps them under the
run's hold), its name in :class:`~chmv_assets.engine.rebuild.planner.Engine` with the place it reads
(``READS``), and its line in :data:`ENGINES`.
"""

from __future__ import annotations

from chmv_assets.engine.rebuild.engines import file, spark, table
from chmv_assets.engine.rebuild.engines.base import EngineRun, Fill, RebuildEngine, Stager, StepResult
from chmv_assets.engine.rebuild.planner import Engine

#: The implementation of each engine a plan names, in the order a run fills them (the source table's partitions
#: first: a lake's are staged meanwhile by no one, and swapped after).
ENGINES: dict[Engine, RebuildEngine] = {
    Engine.CLICKHOUSE: table.ENGINE,
    Engine.REFRESH: table.ENGINE,
    Engine.SPARK: spark.ENGINE,
    Engine.FILE: file.ENGINE,
}

__all__ = ["ENGINES", "EngineRun", "Fill", "RebuildEngine", "Stager", "StepResult"]
