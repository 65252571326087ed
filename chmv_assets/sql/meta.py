"""chmv's own metadata tables on the server (watermarks; later the apply journal and recovery state)."""

from __future__ import annotations

from chmv_assets.ddl.models import ObjectRef

#: chmv's own metadata database (watermarks, recovery state).
META_DATABASE = "chmv_meta"
WATERMARKS = ObjectRef(database=META_DATABASE, name="watermarks")

META_DDL = (
    "CREATE DATABASE IF NOT EXISTS chmv_meta ENGINE = Atomic",
    """CREATE TABLE IF NOT EXISTS chmv_meta.watermarks
(
    source_id String,
    target_table String,
    last_processed_ts DateTime64(3, 'UTC'),
    batch_id String,
    status LowCardinality(String),
    rows UInt64 DEFAULT 0,
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6),
    version UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (source_id, target_table)""",
)
