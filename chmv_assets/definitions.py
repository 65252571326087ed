"""The chmv code location: ``dagster dev`` (workspace.yaml) and Dagster+ (dagster_cloud.yaml) load ``defs`` from here.

The DDL directory comes from ``$CHMV_DDL_DIR`` (default: ``./ddl``, or the example project in a checkout of chmv:
:func:`chmv_assets.settings.ddl_dir`); nothing here opens ClickHouse, so loading the code location never contends
for the embedded engine. A ``dg`` project uses the component instead (``chmv_assets.component``).
"""

from __future__ import annotations

from chmv_assets import settings
from chmv_assets.ddl.loader import load
from chmv_assets.orchestration.definitions import build_definitions, default_clickhouse, resolved

_clickhouse = default_clickhouse()
# On the embedded engine, the local twin of the DDL (from the parse cache): what `chmv apply` deploys there.
defs = resolved(build_definitions(load(settings.ddl_dir(), twin=_clickhouse.is_embedded), clickhouse=_clickhouse))
